"""PCI functions from sysfs: every ``bus/pci/devices/*`` entry as a ``PciDevice``.

Each entry is a relative symlink into the device tree, e.g.
``bus/pci/devices/0000:82:00.0 -> ../../../devices/pci0000:80/0000:80:02.2/0000:82:00.0``. The
resolved path gives the device's place in the PCIe tree:

* ``root``: the outermost ``pciDDDD:BB`` component (the root complex, the DRA ``pcieRoot``); 32-bit
  domains (``pci10000:00``, Intel VMD) are kept as written;
* ``upstream``: every PCI function directory between the root and the device, nearest the root first
  (root ports, switch ports, and under VMD the VMD endpoint itself).

An entry that is a plain directory rather than a link (trimmed captures such as hwloc's POWER9 test
tree) still yields a device, with ``root`` None and no upstream, and an ``Unavailable`` condition.

Attributes: ``class``, ``vendor``, ``device`` are expected; when one is missing, unreadable or not a
hex value the device is still reported (its address and place in the tree are facts) with 0 in
that field, as hwloc does, and a condition says so. ``subsystem_vendor``, ``subsystem_device``,
``numa_node`` (``-1`` means "no NUMA information" and becomes None), ``local_cpulist`` (falling back
to the ``local_cpus`` hex mask) and the ``driver`` link are optional: absent gives None silently,
unreadable or garbage gives None plus a condition. When ``local_cpulist`` and ``local_cpus`` both exist
and disagree (seen in a real capture), ``local_cpulist`` wins and an ``Inconsistent`` condition says so.

Every read reads every file above again. A device's parse is a pure function of what was read for
it (its host path, real directory, attribute texts, driver link, which required attributes are
absent) and of the read's CPU-set budget: a device whose inputs all equal those of the last read is
given back as parsed then (the same frozen value), with the budget spent as its parse would spend it.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from nodetopo.errors import ParseError, clip, excerpt
from nodetopo.host import HostRoot
from nodetopo.model import (
    MAX_CPU_ID,
    MAX_NUMA_NODE_ID,
    Condition,
    ConditionReason,
    Facts,
    PciAddress,
    PciDevice,
    SourceStatus,
    format_cpulist,
)
from nodetopo.sources import _sysfs, links
from nodetopo.sources.base import Context, SourceResult, failed, guarded
from nodetopo.sources.commands import Command
from nodetopo.sources.numa import parse_cpulist_text

log = logging.getLogger(__name__)

NAME = "sysfs.pci"
#: reads sysfs only: runs nothing
COMMANDS: tuple[Command, ...] = ()

_T = TypeVar("_T")

#: where the devices are listed, relative to ``<root>/sys``
DEVICES_DIR = "bus/pci/devices"
#: the attribute files read in each device directory (``capture`` copies exactly these)
ATTRIBUTES = (
    "class",
    "vendor",
    "device",
    "subsystem_vendor",
    "subsystem_device",
    "numa_node",
    "local_cpulist",
    "local_cpus",
)
#: ``missing`` of a device whose required attributes were all read
_NONE_MISSING = (False, False, False)
#: the links read in each device directory (copied as links)
LINKS = ("driver",)

_REQUIRED = {"class": 24, "vendor": 16, "device": 16}
_OPTIONAL_IDS = {"subsystem_vendor": 16, "subsystem_device": 16}

_HEX = re.compile(r"^(?:0[xX])?(?P<digits>[0-9a-fA-F]{1,8})$")
_INTEGER = re.compile(r"^-?[0-9]{1,5}$")
_MASK_WORD = re.compile(r"^[0-9a-fA-F]{1,8}$")
_ROOT_COMPONENT = re.compile(r"^pci[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}$")
_FUNCTION_COMPONENT = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")


def parse_hex_id(text: str, path: str, *, bits: int) -> int:
    """A hex register value as sysfs prints it (``0x15b3``, ``0x030200``), at most ``bits`` wide."""
    value_text = text.replace("\x00", "").strip()
    match = _HEX.match(value_text)
    if match is None:
        raise ParseError(NAME, path, f"expected a hex value like 0x15b3, got {excerpt(value_text)}")
    value = int(match["digits"], 16)
    if value >= 1 << bits:
        raise ParseError(NAME, path, f"expected at most {bits} bits, got {excerpt(value_text)}")
    return value


def parse_numa_node(text: str, path: str) -> int | None:
    """``numa_node``: the node id, or None for ``-1`` (the kernel's "no NUMA information")."""
    value_text = text.replace("\x00", "").strip()
    if not _INTEGER.match(value_text) or int(value_text) > MAX_NUMA_NODE_ID:
        raise ParseError(
            NAME, path, f"expected a NUMA node id (0-{MAX_NUMA_NODE_ID}) or -1, got {excerpt(value_text)}"
        )
    value = int(value_text)
    return value if value >= 0 else None


def parse_cpumask(text: str, path: str) -> frozenset[int]:
    """A kernel CPU mask (``local_cpus``): comma-separated 32-bit hex words, most significant first.

    ``0000,00000000,0000ffff`` is CPUs 0-15.
    """
    value_text = text.replace("\x00", "").strip()
    try:
        cpus = _mask_cpus(value_text)
    except ValueError as e:  # a CPU above MAX_CPU_ID
        raise ParseError(NAME, path, f"{e} in the mask {excerpt(value_text)}") from None
    if cpus is None:
        raise ParseError(NAME, path, f"expected a CPU mask like 00000000,0000ffff, got {excerpt(value_text)}")
    return cpus


@functools.lru_cache(maxsize=16)
def _mask_cpus(value_text: str) -> frozenset[int] | None:
    """The CPUs of a mask, None when it is not one. Cached: every function of a NUMA node has the
    same mask, and walking the bits of a 64-CPU mask cost more than reading the file."""
    words = value_text.split(",")
    if not value_text or not all(_MASK_WORD.match(word) for word in words):
        return None
    cpus: set[int] = set()
    for position, word in enumerate(reversed(words)):
        bits = int(word, 16)
        base = 32 * position
        if bits and base + bits.bit_length() - 1 > MAX_CPU_ID:
            raise ValueError(f"a CPU above {MAX_CPU_ID}")
        while bits:
            low = bits & -bits
            cpus.add(base + low.bit_length() - 1)
            bits ^= low
    return frozenset(cpus)


def parse_device_location(parts: Sequence[str]) -> tuple[str | None, tuple[PciAddress, ...]]:
    """The root complex and the upstream PCI functions of a resolved device path.

    ``parts`` are the path components of the device's real directory (below the host root), e.g.
    ``("sys", "devices", "pci0000:80", "0000:80:02.2", "0000:82:00.0")`` gives
    ``("pci0000:80", (0000:80:02.2,))``. Without a ``pciDDDD:BB`` component: ``(None, ())``.
    """
    for index, part in enumerate(parts):
        if _ROOT_COMPONENT.match(part):
            below = parts[index + 1 : -1]
            upstream = tuple(PciAddress.parse(p) for p in below if _FUNCTION_COMPONENT.match(p))
            return part, upstream
    return None, ()


def read_pci_devices(
    root: HostRoot, memo: _Memo | None = None, link_texts: links.PcieTexts | None = None
) -> tuple[tuple[PciDevice, ...], tuple[Condition, ...]]:
    """Every PCI function under ``root``, sorted by address, plus per-device problems as conditions.

    Returns no devices and one ``Unavailable`` condition when ``bus/pci/devices`` is absent.
    ``memo``: the devices of the last read through it, reused where everything read for them is
    equal (the source passes its context's; without one nothing is reused or kept). ``link_texts``:
    where the link attributes of the functions whose links may be judged are kept for ``sysfs.links``,
    read through the directory opened here (``links.PcieTexts``; the source passes its context's).
    """
    if memo is None:
        memo = _Memo()
    if link_texts is not None:
        link_texts.begin()
    base = root.sys(DEVICES_DIR)
    if not base.is_dir():
        return (), (_sysfs.unavailable(NAME, f"{root.relative(base)}: missing: no PCI bus in sysfs"),)
    devices: list[PciDevice] = []
    conditions: list[Condition] = []
    root_real = os.fspath(root.real_path)
    base_dir = os.fspath(base)
    host_base = root.relative(base_dir)
    cpu_sets = _sysfs.CpuSets(NAME)
    try:
        for name in _sysfs.list_directory(base, root=root):
            device = _read_device(
                root, root_real, base_dir, host_base, name, conditions, cpu_sets, memo, link_texts
            )
            if device is not None:
                devices.append(device)
    finally:
        memo.done()
    devices.sort(key=lambda d: d.address)
    return tuple(devices), tuple(conditions)


def _read_device(
    root: HostRoot,
    root_real: str,
    base_dir: str,
    host_base: str,
    name: str,
    conditions: list[Condition],
    cpu_sets: _sysfs.CpuSets,
    memo: _Memo,
    link_texts: links.PcieTexts | None = None,
) -> PciDevice | None:
    # Strings, not Path objects: pathlib costs more than the reads (10 attributes per function).
    entry_dir = f"{base_dir}/{name}"
    host_path = f"{host_base}/{name}"  # root.relative(entry_dir)
    try:
        address = _address(name)
    except ValueError:
        conditions.append(_sysfs.parse_error(NAME, f"{host_path}: expected a PCI address as the entry name"))
        return None
    # The kernel resolves a sysfs-style link in one open, and the descriptor serves the attribute
    # reads; anything else (an absolute link in a capture, re-rooted; a plain directory, a dangling
    # link, a loop) goes through resolve(), with its answer or error.
    opened = root.open_link_directory(entry_dir)
    if opened is not None:
        dir_fd: int | None
        dir_fd, real_dir = opened
    else:
        entry = Path(entry_dir)
        try:
            real_dir = os.fspath(root.resolve(entry))
        except FileNotFoundError:
            target = excerpt(os.readlink(entry)) if entry.is_symlink() else "?"
            conditions.append(
                _sysfs.unavailable(NAME, f"{host_path}: dangling symlink to {target}: left out")
            )
            return None
        except (ValueError, OSError, RuntimeError) as e:  # RuntimeError: a symlink loop (Python 3.11)
            conditions.append(
                _sysfs.unavailable(NAME, f"{host_path}: cannot resolve: {clip(str(e))}: left out")
            )
            return None
        if not os.path.isdir(real_dir):
            conditions.append(_sysfs.unavailable(NAME, f"{host_path}: not a device directory: left out"))
            return None
        dir_fd = _sysfs.open_checked_directory(root, real_dir)  # checked once, not per attribute

    try:
        # through the resolved directory: an absolute link in a capture is re-rooted, not followed
        # to this machine's own /sys; so are the driver link and whether a required attribute exists
        texts, unreadable = _sysfs.read_attributes_at(root, dir_fd, real_dir, ATTRIBUTES, shown_dir=entry_dir)
        # a required attribute that could not be read is "missing" only when there is no such entry
        if texts[0] is not None and texts[1] is not None and texts[2] is not None:
            missing: tuple[bool, ...] = _NONE_MISSING
        else:
            missing = tuple(
                text is None and not _exists(dir_fd, real_dir, attribute)
                for attribute, text in zip(ATTRIBUTES[:3], texts, strict=False)
            )
        driver = _driver(dir_fd, real_dir)
        if link_texts is not None and opened is not None and dir_fd is not None:
            # the directory sysfs.links would open again (resolved the same way: a sysfs-style link)
            link_texts.offer(root, address, dir_fd, real_dir, texts[0], texts[1])
    finally:
        if dir_fd is not None:
            os.close(dir_fd)
    problems = [_sysfs.unavailable(NAME, str(e)) for e in unreadable]

    # Everything the device is made of has been read: its parse is a pure function of it (and of the
    # CPU-set budget of this read, which CpuSets.replay accounts for), reused from the last read.
    key = (host_path, root_real, real_dir, driver, missing, *texts)
    size = len(host_path) + len(real_dir) + sum(len(t) for t in texts if t is not None)
    parsed = memo.last.get(key)
    if parsed is not None and parsed.replay(cpu_sets, texts[6], texts[7]):
        memo.keep(key, parsed, size)
    else:
        refused = cpu_sets.refused
        parsed = _parse_device(address, host_path, root_real, real_dir, driver, missing, texts, cpu_sets)
        # kept unless the budget refused a CPU set (the outcome then depends on more than the texts)
        if cpu_sets.refused == refused:
            memo.keep(key, parsed, size)
    conditions.extend(parsed.located)
    conditions.extend(problems)
    conditions.extend(parsed.conditions)
    return parsed.device


@dataclasses.dataclass(frozen=True, slots=True)
class _Parsed:
    """A device parsed from what was read for it, with the conditions of its values."""

    device: PciDevice
    located: tuple[Condition, ...]  #: about its place in the tree (before the read problems)
    conditions: tuple[Condition, ...]  #: about its values (after the read problems)
    cpulist: frozenset[int] | None  #: ``local_cpulist`` parsed (None: absent or a ParseError)
    cpumask: frozenset[int] | None  #: ``local_cpus`` parsed

    def replay(self, cpu_sets: _sysfs.CpuSets, cpulist_text: str | None, cpumask_text: str | None) -> bool:
        """Whether this parse holds in this read's CPU-set budget (spending it as the parse would)."""
        return (cpulist_text is None or cpu_sets.replay(parse_cpulist_text, cpulist_text, self.cpulist)) and (
            cpumask_text is None or cpu_sets.replay(parse_cpumask, cpumask_text, self.cpumask)
        )


#: a device whose attribute texts (and paths) are longer than this in all is parsed every read
_MEMO_TEXT_LIMIT = 8 * 1024
#: the most text kept from one read for all its devices (a machine of a thousand PCI functions
#: keeps ~200 KiB; a hostile tree of many long attributes is parsed every read past this)
_MEMO_TEXTS = 4 << 20


class _Memo:
    """The devices parsed in the last read (``last``) and in this one, by everything read for them,
    whatever the root (the key holds the paths). One per scan context (``Context.cache``).

    Only the last read's devices are kept: an unchanged machine finds each of its devices there, and
    what is held is one read's worth of small values, bounded in count and size.
    """

    def __init__(self) -> None:
        self.last: dict[tuple[object, ...], _Parsed] = {}
        self._now: dict[tuple[object, ...], _Parsed] = {}
        self._size = 0  #: the text held by ``_now``'s keys

    def keep(self, key: tuple[object, ...], parsed: _Parsed, size: int) -> None:
        """Keep ``parsed`` for the next read; ``size``: the length of the texts and paths of ``key``."""
        if size <= _MEMO_TEXT_LIMIT and self._size + size <= _MEMO_TEXTS:
            self._now[key] = parsed
            self._size += size

    def done(self) -> None:
        """End of a read: its devices become ``last``."""
        self.last, self._now, self._size = self._now, {}, 0


def _parse_device(
    address: PciAddress,
    host_path: str,
    root_real: str,
    real_dir: str,
    driver: str | None,
    missing: tuple[bool, ...],
    texts: list[str | None],
    cpu_sets: _sysfs.CpuSets,
) -> _Parsed:
    """The device from what was read for it: ``texts`` in ``ATTRIBUTES`` order, ``missing`` for the
    required ones (absent, not merely unreadable)."""
    located: list[Condition] = []
    conditions: list[Condition] = []
    # resolve() keeps real_dir inside the root: what follows the root are its components
    pcie_root, upstream = parse_device_location(real_dir[len(root_real) :].strip("/").split("/"))
    if pcie_root is None:
        located.append(
            _sysfs.unavailable(
                NAME, f"{host_path}: not a link into /sys/devices/pci*: PCIe root and bridges unknown"
            )
        )
    text = dict(zip(ATTRIBUTES, texts, strict=True))

    required: dict[str, int] = {}
    for (name, bits), absent in zip(_REQUIRED.items(), missing, strict=True):
        value = _optional(text[name], _hex_parser(bits), f"{host_path}/{name}", conditions)
        if absent:
            conditions.append(_sysfs.unavailable(NAME, f"{host_path}/{name}: missing: reported as 0"))
        required[name] = value if value is not None else 0

    optional: dict[str, int | None] = {}
    for name, bits in _OPTIONAL_IDS.items():
        optional[name] = _optional(text[name], _hex_parser(bits), f"{host_path}/{name}", conditions)
    numa_node = _optional(text["numa_node"], parse_numa_node, f"{host_path}/numa_node", conditions)
    cpulist = _optional(
        text["local_cpulist"], cpu_sets.parser(parse_cpulist_text), f"{host_path}/local_cpulist", conditions
    )
    cpumask = _optional(
        text["local_cpus"], cpu_sets.parser(parse_cpumask), f"{host_path}/local_cpus", conditions
    )
    local_cpus = cpulist
    if local_cpus is None:
        local_cpus = cpumask
    elif cpumask is not None and cpumask != local_cpus:
        conditions.append(
            Condition(
                source=NAME,
                reason=ConditionReason.INCONSISTENT,
                message=(
                    f"{host_path}: local_cpulist says {format_cpulist(local_cpus)} but local_cpus says "
                    f"{format_cpulist(cpumask)}: using local_cpulist (hwloc uses local_cpus)"
                ),
            )
        )

    device = PciDevice(
        address=address,
        vendor=required["vendor"],
        device=required["device"],
        class_code=required["class"],
        root=pcie_root,
        upstream=upstream,
        numa_node=numa_node,
        local_cpus=local_cpus,
        driver=driver,
        subsystem_vendor=optional["subsystem_vendor"],
        subsystem_device=optional["subsystem_device"],
    )
    return _Parsed(device, tuple(located), tuple(conditions), cpulist, cpumask)


@functools.lru_cache(maxsize=4096)
def _address(name: str) -> PciAddress:
    """``PciAddress.parse`` of an entry name (pure; the same names every read)."""
    return PciAddress.parse(name)


def _hex_parser(bits: int) -> Callable[[str, str], int]:
    def parse(text: str, path: str) -> int:
        return parse_hex_id(text, path, bits=bits)

    return parse


def _optional(
    text: str | None, parser: Callable[[str, str], _T], path: str, conditions: list[Condition]
) -> _T | None:
    """Parse an optional attribute: None when absent, None plus a condition when garbage."""
    if text is None:
        return None
    try:
        return parser(text, path)
    except ParseError as e:
        conditions.append(_sysfs.from_parse_error(e))
        return None


def _exists(dir_fd: int | None, real_dir: str, name: str) -> bool:
    """Whether the device directory (``dir_fd`` when open) has an entry ``name`` (``lexists``)."""
    try:
        if dir_fd is not None:
            os.lstat(name, dir_fd=dir_fd)
        else:
            os.lstat(f"{real_dir}/{name}")
    except OSError:
        return False
    return True


def _driver(dir_fd: int | None, real_dir: str) -> str | None:
    """The bound driver: the basename of the device directory's ``driver`` link (it may dangle in a
    capture)."""
    try:
        target = (
            os.readlink("driver", dir_fd=dir_fd) if dir_fd is not None else os.readlink(f"{real_dir}/driver")
        )
    except OSError:  # absent, or not a link
        return None
    return os.path.basename(target.rstrip("/")) or None


def _collect(root: HostRoot, memo: _Memo, link_texts: links.PcieTexts | None = None) -> Facts:
    devices, conditions = read_pci_devices(root, memo, link_texts)
    if not devices and conditions:
        facts = failed(NAME, conditions[0].reason, "; ".join(c.message for c in conditions[:3]))
        return Facts(sources=facts.sources, conditions=conditions)
    message = f"{len(devices)} PCI function(s)" + (f", {len(conditions)} problem(s)" if conditions else "")
    return Facts(
        pci_devices=devices,
        sources=(SourceStatus(name=NAME, ok=True, message=message),),
        conditions=conditions,
    )


def collect(ctx: Context) -> SourceResult:
    """The PCI source: ``read_pci_devices(ctx.root)`` behind the source boundary, reusing the
    devices of the context's last read where nothing read for them changed."""
    return guarded(NAME, lambda: _collect(ctx.root, ctx.cache.state(_Memo), links.pcie_texts(ctx)))
