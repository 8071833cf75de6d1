"""The state of the links, from sysfs: PCIe link speed and width, AER totals, RDMA port error counters.

Read after the other sources, for the devices they found (``read_links(root, facts)``), because
which functions matter is a fact of the PCI tree:

* **PCIe**: every GPU, NIC and NVSwitch function and every bridge above it up to its root port:
  ``current_link_speed``, ``current_link_width``, ``max_link_speed``, ``max_link_width`` and, where
  the device reports AER, ``aer_dev_correctable``/``aer_dev_nonfatal``/``aer_dev_fatal`` (their
  ``TOTAL_ERR_*`` line). Speeds read as GT/s per lane (``16.0 GT/s PCIe`` -> 16.0; ``Unknown`` and
  an absent file are unknown); widths as lanes.
* **RDMA ports**: ``class/infiniband/<dev>/ports/<n>/counters/`` ``PORT_COUNTERS``, and
  ``carrier_changes`` of the port's network interface (``class/net/<if>/carrier_changes``). A
  counter that reads ``N/A (no PMA)`` (iWARP devices without a performance agent) is unknown.

The texts are parsed by ``sources.linktext``; a rescanning context keeps the files open between
scans (``sources.linkfiles``). Nothing here judges: the readings go to ``Facts.health`` and
``nodetopo.health`` judges them. An
absent attribute is unknown without a condition; an unreadable one is an ``Unavailable``
condition of this source, and text that is not what the kernel writes a ``ParseError`` condition
(nodetopo could not read it: the ``Ready`` condition says so); the topology facts are untouched
either way.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from nodetopo.errors import ParseError
from nodetopo.host import HostRoot
from nodetopo.model import (
    Condition,
    Facts,
    HealthReadings,
    PciAddress,
    PciDevice,
    PcieLinkReading,
    PortCounterReading,
    RdmaDevice,
    SourceStatus,
)
from nodetopo.sources import _sysfs
from nodetopo.sources.base import Context, SourceResult, guarded
from nodetopo.sources.commands import Command
from nodetopo.sources.linkfiles import LinkFiles, identity_at, identity_of
from nodetopo.sources.linktext import (
    NAME,
    parse_aer_total,
    parse_counter,
    parse_link_speed,
    parse_link_width,
)

#: reads sysfs only: runs nothing
COMMANDS: tuple[Command, ...] = ()

PCI_DEVICES_DIR = "bus/pci/devices"
INFINIBAND_DIR = "class/infiniband"
NET_DIR = "class/net"
#: a PCI function's link attributes (``capture`` copies them for every function)
LINK_ATTRIBUTES = ("current_link_speed", "current_link_width", "max_link_speed", "max_link_width")
#: its AER statistics, and the line of each that holds the total
AER_ATTRIBUTES = ("aer_dev_correctable", "aer_dev_nonfatal", "aer_dev_fatal")
AER_TOTALS = {
    "aer_dev_correctable": "TOTAL_ERR_COR",
    "aer_dev_nonfatal": "TOTAL_ERR_NONFATAL",
    "aer_dev_fatal": "TOTAL_ERR_FATAL",
}
PCI_ATTRIBUTES = LINK_ATTRIBUTES + AER_ATTRIBUTES
#: what a function's link can do: fixed while its directory is the same (read once by a rescanning
#: context, ``sources.linkfiles``)
STATIC_ATTRIBUTES = frozenset({"max_link_speed", "max_link_width"})
#: the error counters of an RDMA port (``ports/<n>/counters/<name>``)
PORT_COUNTERS = (
    "symbol_error",
    "link_error_recovery",
    "link_downed",
    "port_rcv_errors",
    "port_xmit_discards",
    "excessive_buffer_overrun_errors",
    "local_link_integrity_errors",
)
#: a network interface's attribute read with them
NET_COUNTERS = ("carrier_changes",)

_T = TypeVar("_T")

# --------------------------------------------------------------------------------------------
# Which PCI functions
# --------------------------------------------------------------------------------------------


def is_endpoint_of_interest(device: PciDevice) -> bool:
    """A GPU, an NVSwitch or a network function: the devices whose links are judged."""
    return device.is_nvidia_gpu or device.is_nvswitch or device.is_network


def link_functions(devices: Iterable[PciDevice]) -> tuple[PciAddress, ...]:
    """The functions whose link attributes are read: every endpoint of interest and every bridge on
    its way to the root port (the ports above a link are its other end), sorted."""
    wanted: set[PciAddress] = set()
    for device in devices:
        if is_endpoint_of_interest(device):
            wanted.add(device.address)
            wanted.update(device.upstream)
    return tuple(sorted(wanted))


# --------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------


class _Reader:
    """Reads attributes under one root; problems become conditions of this source."""

    def __init__(self, root: HostRoot) -> None:
        self.root = root
        self.conditions: list[Condition] = []

    def parsed(self, text: str | None, parser: Callable[[str, str], _T], path: str) -> _T | None:
        if text is None:
            return None
        try:
            return parser(text, self.root.relative(path))
        except ParseError as e:
            self.conditions.append(_sysfs.from_parse_error(e))
            return None

    def texts(
        self,
        directory: str,
        fd: int | None,
        names: Sequence[str],
        files: LinkFiles | None = None,
        static: frozenset[str] = frozenset(),
    ) -> list[str | None]:
        return self.kept(*read_texts(self.root, fd, directory, names, files, static))

    def kept(self, texts: list[str | None], problems: Sequence[_sysfs.Unreadable]) -> list[str | None]:
        """``texts``, with ``problems`` (their read's) kept as conditions."""
        for problem in problems:
            if not problem.no_value:  # EINVAL from a link that is down: no value now
                self.conditions.append(_sysfs.unavailable(NAME, str(problem)))
        return texts


def read_texts(
    root: HostRoot,
    fd: int | None,
    directory: str,
    names: Sequence[str],
    files: LinkFiles | None = None,
    static: frozenset[str] = frozenset(),
    identity: tuple[int, int, int] | None = None,
) -> tuple[list[str | None], list[_sysfs.Unreadable]]:
    """``_sysfs.read_attributes_at``; with ``files`` (a rescanning context's), through what it kept
    of ``directory`` when that is the same directory (``identity``: by default the descriptor's), and
    kept there after a read without a problem (``sources.linkfiles``)."""
    if files is None or fd is None:
        return _sysfs.read_attributes_at(root, fd, directory, names)
    if identity is None:
        identity = identity_of(fd)
    texts = files.read(directory, identity, names)
    if texts is not None:
        return texts, []
    texts, problems = _sysfs.read_attributes_at(root, fd, directory, names)
    if not problems:
        files.keep(directory, fd, identity, names, texts, static)
    return texts, problems


#: vendor and class codes (``class >> 8``) of the functions ``sysfs.pci`` reads the link attributes of
#: in its own pass: NVIDIA GPUs and NVSwitches, network functions, PCI bridges (the ports on the way)
_NVIDIA = 0x10DE
_NVIDIA_CLASSES = frozenset({0x0300, 0x0302, 0x0680})
_BRIDGE = 0x0604
_NETWORK = 0x02


class PcieTexts:
    """The link attribute texts ``sysfs.pci`` read this scan, by function, while it had each function's
    directory open: ``read_pcie_links`` takes them instead of opening the directory again. One per
    scan context (``Context.cache``); what the PCI source did not read (a function of another class, a
    directory it could not open as a link) this source reads itself.

    Filled by one PCI read (``begin``, then ``offer`` per function) and emptied by the next link read
    (``take``, then ``done``): texts are never kept from one scan to the next.
    """

    def __init__(self) -> None:
        self._texts: dict[PciAddress, tuple[list[str | None], list[_sysfs.Unreadable]]] = {}
        #: a rescanning context's kept link files (``pcie_texts``), else None
        self.files: LinkFiles | None = None

    def begin(self) -> None:
        self._texts = {}

    def offer(
        self,
        root: HostRoot,
        address: PciAddress,
        dir_fd: int,
        directory: str,
        class_text: str | None,
        vendor_text: str | None,
    ) -> None:
        """Read the link attributes of ``address`` through its open directory when its class is one
        whose links may be judged (an NVIDIA GPU or NVSwitch, a network function, a bridge)."""
        try:
            code = int((class_text or "").strip(), 16) >> 8
            vendor = int((vendor_text or "").strip(), 16)
        except ValueError:
            return  # garbage: the PCI source says so; this source reads the function itself if needed
        if not (code == _BRIDGE or code >> 8 == _NETWORK or (vendor == _NVIDIA and code in _NVIDIA_CLASSES)):
            return
        self._texts[address] = read_texts(
            root, dir_fd, directory, PCI_ATTRIBUTES, self.files, STATIC_ATTRIBUTES
        )

    def take(self, address: PciAddress) -> tuple[list[str | None], list[_sysfs.Unreadable]] | None:
        return self._texts.pop(address, None)

    def done(self) -> None:
        self._texts = {}


def pcie_texts(ctx: Context) -> PcieTexts:
    """The context's ``PcieTexts``, reading through the context's kept link files when it rescans."""
    texts = ctx.cache.state(PcieTexts)
    texts.files = link_files(ctx)
    return texts


def link_files(ctx: Context) -> LinkFiles | None:
    """The context's kept link files when it rescans (``Context.rescans``), else None."""
    return ctx.cache.state(LinkFiles) if ctx.rescans else None


def read_pcie_links(
    root: HostRoot,
    addresses: Iterable[PciAddress],
    memo: LinkMemo | None = None,
    read: PcieTexts | None = None,
    files: LinkFiles | None = None,
) -> tuple[tuple[PcieLinkReading, ...], tuple[Condition, ...]]:
    """The link attributes and AER totals of each of ``addresses`` (``bus/pci/devices/<address>``).

    A function without any of the attributes (a capture that left them out, a kernel before 4.19
    for AER) reads as unknown values, without a condition. Every attribute is read every time;
    ``memo``: the readings of the last read through it, given back for a function whose texts
    all equal what was read for it then (an unchanged node parses nothing; without one nothing is
    reused or kept). ``files``: a rescanning context's kept link files (``sources.linkfiles``).
    """
    if memo is None:
        memo = LinkMemo()
    reader = _Reader(root)
    base = os.fspath(root.sys(PCI_DEVICES_DIR))
    readings: list[PcieLinkReading] = []
    last, conditions = memo.last, reader.conditions
    try:
        for address, entry in memo.entries(base, addresses):
            early = read.take(address) if read is not None else None
            if early is not None:
                texts = reader.kept(*early)
            else:
                opened = root.open_link_directory(entry)
                fd: int | None = None
                if opened is not None:
                    fd, directory = opened
                else:
                    directory = entry
                    if not os.path.isdir(entry):
                        continue
                try:
                    texts = reader.texts(directory, fd, PCI_ATTRIBUTES, files, STATIC_ATTRIBUTES)
                finally:
                    if fd is not None:
                        os.close(fd)
            if texts.count(None) == len(texts):
                continue
            # the entry names the address (``entry`` is ``<base>/<address>``)
            key = (entry, *texts)
            parsed = last.get(key)
            if parsed is None:
                parsed = _parse_pcie(root, entry, address, texts)
            memo.keep(key, parsed, len(entry) + sum(map(len, filter(None, texts))))
            readings.append(parsed[0])
            if parsed[1]:
                conditions.extend(parsed[1])
    finally:
        memo.done()
        if read is not None:
            read.done()
    return tuple(readings), tuple(conditions)


def _parse_pcie(
    root: HostRoot, entry: str, address: PciAddress, texts: Sequence[str | None]
) -> tuple[PcieLinkReading, tuple[Condition, ...]]:
    """One function's reading from its attribute texts (``PCI_ATTRIBUTES`` order), with the
    conditions of text that does not parse: a pure function of its arguments."""
    reader = _Reader(root)
    path = f"{entry}/"
    speed, width, max_speed, max_width, cor, nonfatal, fatal = texts
    reading = PcieLinkReading(
        address=address,
        current_gts=reader.parsed(speed, parse_link_speed, path + "current_link_speed"),
        current_width=reader.parsed(width, parse_link_width, path + "current_link_width"),
        max_gts=reader.parsed(max_speed, parse_link_speed, path + "max_link_speed"),
        max_width=reader.parsed(max_width, parse_link_width, path + "max_link_width"),
        aer_correctable=reader.parsed(cor, _aer("aer_dev_correctable"), path + "aer_dev_correctable"),
        aer_nonfatal=reader.parsed(nonfatal, _aer("aer_dev_nonfatal"), path + "aer_dev_nonfatal"),
        aer_fatal=reader.parsed(fatal, _aer("aer_dev_fatal"), path + "aer_dev_fatal"),
    )
    return reading, tuple(reader.conditions)


#: a function whose attribute texts are longer than this in all is parsed every read (real ones:
#: ~600 bytes, most of it the three AER tables)
_MEMO_TEXT_LIMIT = 8 * 1024
#: the most text kept from one read for all its functions
_MEMO_TEXTS = 4 << 20


class LinkMemo:
    """The PCIe readings parsed in the last read (``last``) and in this one, by everything read for
    them (the function's path and its attribute texts). One per scan context (``Context.cache``).

    Only the last read's readings are kept: an unchanged node finds each of its functions there, and
    what is held is one read's worth of small values, bounded in size. A counter that rose is new
    text, parsed afresh.
    """

    def __init__(self) -> None:
        self.last: dict[tuple[object, ...], tuple[PcieLinkReading, tuple[Condition, ...]]] = {}
        self._now: dict[tuple[object, ...], tuple[PcieLinkReading, tuple[Condition, ...]]] = {}
        self._size = 0
        self._functions: tuple[tuple[PciDevice, ...], tuple[PciAddress, ...]] | None = None
        self._entries: tuple[tuple[PciAddress, ...], str, tuple[tuple[PciAddress, str], ...]] | None = None

    def entries(self, base: str, addresses: Iterable[PciAddress]) -> Sequence[tuple[PciAddress, str]]:
        """Each of ``addresses`` with its entry ``<base>/<address>``; given back for the very same
        ``addresses`` (``functions``'s answer) under the same ``base``."""
        last = self._entries
        if last is not None and last[0] is addresses and last[1] == base:
            return last[2]
        entries = tuple((address, f"{base}/{address}") for address in addresses)
        if isinstance(addresses, tuple):
            self._entries = (addresses, base, entries)
        return entries

    def functions(self, devices: tuple[PciDevice, ...]) -> tuple[PciAddress, ...]:
        """``link_functions(devices)``, given back for devices equal to the last read's."""
        last = self._functions
        if last is not None and last[0] == devices:
            return last[1]
        functions = link_functions(devices)
        self._functions = (devices, functions)
        return functions

    def keep(
        self, key: tuple[object, ...], parsed: tuple[PcieLinkReading, tuple[Condition, ...]], size: int = -1
    ) -> None:
        if size < 0:
            size = sum(len(part) for part in key if isinstance(part, str))
        if size <= _MEMO_TEXT_LIMIT and self._size + size <= _MEMO_TEXTS:
            self._now[key] = parsed
            self._size += size

    def done(self) -> None:
        """End of a read: its readings become ``last``."""
        self.last, self._now, self._size = self._now, {}, 0


def _aer(name: str) -> Callable[[str, str], int]:
    total = AER_TOTALS[name]

    def parse(text: str, path: str) -> int:
        return parse_aer_total(text, path, total)

    return parse


def read_port_counters(
    root: HostRoot,
    devices: Iterable[RdmaDevice],
    files: LinkFiles | None = None,
    memo: PortMemo | None = None,
) -> tuple[tuple[PortCounterReading, ...], tuple[Condition, ...]]:
    """The error counters of every port of ``devices`` and the carrier changes of its first netdev
    (``files``: a rescanning context's kept link files, ``sources.linkfiles``; ``memo``: the
    readings of the last read through it, given back for a port whose texts are all the same).
    """
    ports = memo if memo is not None else PortMemo()
    reader = _Reader(root)
    ib_base = os.fspath(root.sys(INFINIBAND_DIR))
    net_base = os.fspath(root.sys(NET_DIR))
    readings: list[PortCounterReading] = []
    for device in devices:
        for port in device.ports:
            directory = f"{ib_base}/{device.name}/ports/{port.number}/counters"
            texts = _kept_texts(files, directory, PORT_COUNTERS)
            if texts is None:
                fd = _sysfs.open_checked_directory(root, directory) if os.path.isdir(directory) else None
                try:
                    texts = reader.texts(directory, fd, PORT_COUNTERS, files) if fd is not None else []
                finally:
                    if fd is not None:
                        os.close(fd)
            netdev = port.netdevs[0] if port.netdevs else None
            net_dir = f"{net_base}/{netdev}" if netdev is not None else None
            carrier_text = None
            if net_dir is not None:
                (carrier_text,) = _kept_texts(files, net_dir, NET_COUNTERS) or _netdev_texts(
                    reader, net_dir, files
                )
            key = (directory, net_dir, carrier_text, *texts)
            parsed = ports.last.get(key)
            if parsed is None:
                parsed = _parse_port(
                    root, device.name, port.number, directory, netdev, net_dir, texts, carrier_text
                )
            ports.keep(
                key, parsed, len(directory) + sum(map(len, filter(None, (net_dir, carrier_text, *texts))))
            )
            if parsed[0] is not None:
                readings.append(parsed[0])
            reader.conditions.extend(parsed[1])
    ports.done()
    return tuple(readings), tuple(reader.conditions)


def _parse_port(
    root: HostRoot,
    nic: str,
    number: int,
    directory: str,
    netdev: str | None,
    net_dir: str | None,
    texts: Sequence[str | None],
    carrier_text: str | None,
) -> tuple[PortCounterReading | None, tuple[Condition, ...]]:
    """One port's reading from its counter texts (``PORT_COUNTERS`` order) and its netdev's carrier
    changes, with the conditions of text that does not parse (None: nothing read): pure."""
    reader = _Reader(root)
    counters = tuple(
        (name, value)
        for name, text in zip(PORT_COUNTERS, texts, strict=False)
        if (value := reader.parsed(text, parse_counter, f"{directory}/{name}")) is not None
    )
    carrier = reader.parsed(carrier_text, parse_counter, f"{net_dir}/carrier_changes")
    if not counters and carrier is None:
        return None, tuple(reader.conditions)
    reading = PortCounterReading(
        nic=nic, port=number, counters=counters, netdev=netdev, carrier_changes=carrier
    )
    return reading, tuple(reader.conditions)


class PortMemo:
    """The port readings parsed in the last read and in this one, by everything read for them (as
    ``LinkMemo`` for the PCIe readings). One per scan context (``Context.cache``)."""

    def __init__(self) -> None:
        self.last: dict[tuple[object, ...], tuple[PortCounterReading | None, tuple[Condition, ...]]] = {}
        self._now: dict[tuple[object, ...], tuple[PortCounterReading | None, tuple[Condition, ...]]] = {}
        self._size = 0

    def keep(
        self,
        key: tuple[object, ...],
        parsed: tuple[PortCounterReading | None, tuple[Condition, ...]],
        size: int,
    ) -> None:
        if size <= _MEMO_TEXT_LIMIT and self._size + size <= _MEMO_TEXTS:
            self._now[key] = parsed
            self._size += size

    def done(self) -> None:
        self.last, self._now, self._size = self._now, {}, 0


def _kept_texts(files: LinkFiles | None, directory: str, names: Sequence[str]) -> list[str | None] | None:
    """What ``files`` kept of ``directory`` (a path the kernel resolves), when it is the same one."""
    if files is None:
        return None
    return files.read(directory, identity_at(directory), names)


def _netdev_texts(reader: _Reader, net_dir: str, files: LinkFiles | None) -> list[str | None]:
    """``NET_COUNTERS`` of a network interface: confined reads by path (a link in a capture is
    re-rooted); through a checked descriptor, kept, when the context rescans and the kernel resolves
    the interface's link inside the root."""
    fd = _sysfs.open_checked_directory(root=reader.root, real_dir=net_dir) if files is not None else None
    if fd is None:
        return reader.texts(net_dir, None, NET_COUNTERS)
    try:
        return reader.texts(net_dir, fd, NET_COUNTERS, files)
    finally:
        os.close(fd)


def read_links(
    root: HostRoot,
    facts: Facts,
    memo: LinkMemo | None = None,
    read: PcieTexts | None = None,
    files: LinkFiles | None = None,
    port_memo: PortMemo | None = None,
) -> Facts:
    """The readings of every link of the devices in ``facts`` (``Facts.health``), with this source's
    status and conditions (``memo``, ``read``, ``files``: see ``read_pcie_links``; ``port_memo``:
    see ``read_port_counters``)."""
    functions = memo.functions(facts.pci_devices) if memo is not None else link_functions(facts.pci_devices)
    pcie, pcie_conditions = read_pcie_links(root, functions, memo, read, files)
    ports, port_conditions = read_port_counters(root, facts.rdma_devices, files, port_memo)
    if files is not None:
        files.sweep()
    conditions = pcie_conditions + port_conditions
    message = f"{len(pcie)} PCIe function(s), {len(ports)} RDMA port(s)"
    if conditions:
        message += f", {len(conditions)} problem(s)"
    return Facts(
        health=HealthReadings(pcie=pcie, ports=ports),
        sources=(SourceStatus(name=NAME, ok=True, message=message),),
        conditions=conditions,
    )


def collect(ctx: Context, facts: Facts) -> SourceResult:
    """``read_links`` under ``ctx.root`` behind the source boundary (a failure is this source's
    condition), reusing the readings of the context's last read where no text changed."""
    return guarded(
        NAME,
        lambda: read_links(
            ctx.root,
            facts,
            ctx.cache.state(LinkMemo),
            ctx.cache.state(PcieTexts),
            link_files(ctx),
            ctx.cache.state(PortMemo),
        ),
    )
