"""RDMA devices (``class/infiniband``) and PCI network interfaces (``class/net``) from sysfs.

RDMA: for each ``class/infiniband/<dev>``: ``hca_type``, ``fw_ver``, ``board_id``, ``node_guid`` and
``ports/<n>/{state,phys_state,rate,link_layer,lid,gids/0}``; the ``device`` link gives the PCI
address, and the network interfaces under ``device/net/*`` are attached to the port they belong to
(``dev_port`` + 1, else ``dev_id`` + 1, else port 1 on a single-port device). A device without a
``device`` link (soft RoCE, a snapshot of ``class/infiniband`` alone) is still reported, without an
address. Values are normalised to what ``ibstat`` prints: state ``4: ACTIVE`` -> ``ACTIVE``,
phys_state ``5: LinkUp`` -> ``LinkUp``, rate ``400 Gb/sec (4X NDR)`` -> 400.0, GUIDs
``0002:c903:00f9:bfa0`` -> ``0x0002c90300f9bfa0``.

Net: each ``class/net/<if>`` whose ``device`` link resolves to a PCI function (directly, or through a
virtio device whose parent is the PCI function) gives a ``NetDevice`` with ``operstate``, ``speed``
(Mb/s; ``-1``, empty, or EINVAL from a link that is down -> None) and ``address`` (the MAC, or the
20-byte IPoIB hardware address). Interfaces without a ``device`` link (lo, veth, bridges, bonds) are
virtual and skipped, also when the capture left their ``devices/virtual`` target out.

A missing ``class/infiniband`` is a machine without an RDMA stack: no devices, no condition.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from nodetopo.errors import ParseError, excerpt
from nodetopo.host import HostRoot
from nodetopo.model import Condition, Facts, NetDevice, PciAddress, RdmaDevice, RdmaPort, SourceStatus
from nodetopo.sources import _sysfs
from nodetopo.sources.base import Context, SourceResult, guarded
from nodetopo.sources.commands import Command

log = logging.getLogger(__name__)

NAME = "sysfs.rdma"
#: reads sysfs only: runs nothing
COMMANDS: tuple[Command, ...] = ()

_T = TypeVar("_T")

INFINIBAND_DIR = "class/infiniband"
NET_DIR = "class/net"
#: files read in ``class/infiniband/<dev>`` (``capture`` copies exactly these)
DEVICE_ATTRIBUTES = ("hca_type", "fw_ver", "board_id", "node_guid")
#: files read in ``class/infiniband/<dev>/ports/<n>``
PORT_ATTRIBUTES = ("state", "phys_state", "rate", "link_layer", "lid", "gids/0")
#: files read in a network interface directory (``class/net/<if>``, ``<pci dev>/net/<if>``)
NET_ATTRIBUTES = ("operstate", "speed", "address", "dev_port", "dev_id")

_STATE = re.compile(r"^(?:(?P<number>\d+)\s*:\s*)?(?P<name>[A-Za-z][A-Za-z_ ]*)$")
_RATE = re.compile(r"^(?P<gbps>[0-9]{1,5}(?:\.[0-9]{1,3})?)\s*Gb/sec\b")
_LID = re.compile(r"(?:0[xX])?[0-9a-fA-F]{1,4}")
_SPEED = re.compile(r"-?[0-9]{1,10}")
_PORT_INDEX = re.compile(r"[0-9]{1,3}")
_PORT_INDEX_HEX = re.compile(r"(?:0[xX])?[0-9a-fA-F]{1,2}")
#: the fastest port rate accepted (Gb/s): XDR 4x is 800, so this leaves headroom
MAX_RATE_GBPS = 10_000
_GUID = re.compile(r"^[0-9a-fA-F]{4}(?::[0-9a-fA-F]{4}){3}$")
_GID = re.compile(r"^[0-9a-fA-F]{4}(?::[0-9a-fA-F]{4}){7}$")
_PCI_FUNCTION = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")


def _clean(text: str) -> str:
    return text.replace("\x00", "").strip()


def _value_or_none(text: str | None) -> str | None:
    """An attribute's text without whitespace and NULs; None when absent or empty."""
    return (_clean(text) or None) if text is not None else None


def parse_port_state(text: str, path: str) -> str:
    """``4: ACTIVE`` -> ``ACTIVE`` (upper case, no numeric prefix; ``ACTIVE`` alone is accepted)."""
    match = _STATE.match(_clean(text))
    if match is None:
        raise ParseError(NAME, path, f"expected a port state like '4: ACTIVE', got {excerpt(_clean(text))}")
    return match["name"].strip().upper()


def parse_phys_state(text: str, path: str) -> str:
    """``5: LinkUp`` -> ``LinkUp`` (kept as the kernel spells it)."""
    match = _STATE.match(_clean(text))
    if match is None:
        raise ParseError(
            NAME, path, f"expected a physical state like '5: LinkUp', got {excerpt(_clean(text))}"
        )
    return match["name"].strip()


def parse_rate(text: str, path: str) -> float:
    """``400 Gb/sec (4X NDR)`` -> 400.0; ``2.5 Gb/sec (1X SDR)`` -> 2.5."""
    match = _RATE.match(_clean(text))
    if match is None or float(match["gbps"]) > MAX_RATE_GBPS:
        raise ParseError(
            NAME, path, f"expected a rate like '400 Gb/sec (4X NDR)', got {excerpt(_clean(text))}"
        )
    return float(match["gbps"])


def parse_lid(text: str, path: str) -> int:
    """``0x3a4`` -> 932 (LIDs are 16 bits)."""
    value = _clean(text)
    if _LID.fullmatch(value) is None:
        raise ParseError(NAME, path, f"expected a 16-bit hex LID like 0x3a4, got {excerpt(value)}")
    return int(value, 16)


def parse_guid(text: str, path: str) -> str:
    """``0002:c903:00f9:bfa0`` (sysfs) -> ``0x0002c90300f9bfa0`` (as ibstat prints it)."""
    value = _clean(text)
    if not _GUID.match(value):
        raise ParseError(NAME, path, f"expected a GUID like 0002:c903:00f9:bfa0, got {excerpt(value)}")
    return "0x" + value.replace(":", "").lower()


def parse_port_guid(text: str, path: str) -> str:
    """The port GUID: the low 64 bits of GID 0 (``fe80:0000:0000:0000:0002:c903:00f9:bfa1``)."""
    value = _clean(text)
    if not _GID.match(value):
        raise ParseError(NAME, path, f"expected a GID like fe80:0000:...:bfa1, got {excerpt(value)}")
    return "0x" + "".join(value.split(":")[4:]).lower()


def parse_speed(text: str, path: str) -> int | None:
    """``class/net/*/speed`` in Mb/s; ``-1``, empty or 4294967295 ("unknown") -> None."""
    value = _clean(text)
    if not value:
        return None
    if _SPEED.fullmatch(value) is None:
        raise ParseError(NAME, path, f"expected a speed in Mb/s like 100000, got {excerpt(value)}")
    speed = int(value)
    return speed if 0 <= speed < 0xFFFFFFFF else None


def parse_dev_port(text: str, path: str, *, hex_value: bool = False) -> int:
    """``dev_port`` (decimal) or ``dev_id`` (hex, ``hex_value``): the 0-based port index."""
    value = _clean(text)
    if (_PORT_INDEX_HEX if hex_value else _PORT_INDEX).fullmatch(value) is None:
        raise ParseError(NAME, path, f"expected a port index, got {excerpt(value)}")
    return int(value, 16 if hex_value else 10)


# --------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------


class _Reader:
    """Reads attributes under one root, turning problems into conditions.

    Paths are strings, not ``Path`` objects: building paths cost more than the reads. ``fd``
    arguments are ``directory()`` descriptors of the directory an attribute is in (None: the
    attribute is read by its path alone): the same answers and errors, fewer system calls.
    """

    def __init__(self, root: HostRoot) -> None:
        self.root = root
        self.conditions: list[Condition] = []

    def directory(self, path: str) -> int | None:
        """A descriptor of ``path`` (links followed), checked once to lie inside the root; None when
        it cannot be. The caller closes it."""
        return _sysfs.open_checked_directory(self.root, path)

    def text(
        self, directory: str, name: str, fd: int | None, *, no_value_is_absent: bool = False
    ) -> str | None:
        """The text of ``<directory>/<name>``, None (and a condition) when it cannot be read."""
        try:
            return _sysfs.read_attribute_at(self.root, fd, name, f"{directory}/{name}")
        except _sysfs.Unreadable as e:
            if not (no_value_is_absent and e.no_value):
                self.conditions.append(_sysfs.unavailable(NAME, str(e)))
            return None

    def value(
        self,
        directory: str,
        name: str,
        fd: int | None,
        parser: Callable[[str, str], _T],
        *,
        no_value_is_absent: bool = False,
    ) -> _T | None:
        text = self.text(directory, name, fd, no_value_is_absent=no_value_is_absent)
        if text is None:
            return None
        try:
            return parser(text, self.root.relative(f"{directory}/{name}"))
        except ParseError as e:
            self.conditions.append(_sysfs.from_parse_error(e))
            return None

    def pci_function_at(self, link: str) -> tuple[int | None, PciAddress | None]:
        """The PCI address a ``device`` link resolves to (virtio: its parent), None if not PCI, with a
        descriptor of the directory the link names when the kernel resolved it
        (``HostRoot.open_link_directory``: inside the root; the caller closes it)."""
        opened = self.root.open_link_directory(link)  # the kernel resolves a sysfs-style link
        if opened is not None:
            return opened[0], _address_of(opened[1])
        return None, self.resolved_pci_function(link)

    def resolved_pci_function(self, link: str) -> PciAddress | None:
        """``pci_function_at``'s address for a link the kernel did not open: through ``resolve``
        (an absolute link in a capture is re-rooted); None when there is no such link or it names no
        PCI function, with a condition when it dangles or cannot be resolved."""
        path = Path(link)
        if not path.is_symlink() and not path.exists():
            return None
        try:
            real = os.fspath(self.root.resolve(path))
        except FileNotFoundError:
            self.conditions.append(_sysfs.unavailable(NAME, f"{self.root.relative(link)}: dangling symlink"))
            return None
        except (ValueError, OSError, RuntimeError) as e:  # RuntimeError: a symlink loop (Python 3.11)
            self.conditions.append(_sysfs.unavailable(NAME, f"{self.root.relative(link)}: {e}"))
            return None
        return _address_of(real)


def _address_of(real: str) -> PciAddress | None:
    """The PCI function a resolved ``device`` link names: its last component, or the one before it
    (a virtio device's parent); None when neither is a PCI address."""
    for candidate in (os.path.basename(real), os.path.basename(os.path.dirname(real))):
        if _PCI_FUNCTION.match(candidate):
            return PciAddress.parse(candidate)
    return None


def _open_entry(reader: _Reader, entry: str) -> tuple[bool, int | None]:
    """Whether ``entry`` (a ``class/*`` entry) is a directory, with a checked descriptor of it.

    One open where it is a directory; otherwise the questions ``Path`` asks (a dangling link gives a
    condition). ``(False, None)``: leave the entry out."""
    try:
        fd = os.open(entry, _ENTRY_FLAGS)
    except OSError:
        path = Path(entry)
        if _sysfs.is_dangling(path):
            reader.conditions.append(
                _sysfs.unavailable(NAME, f"{reader.root.relative(entry)}: dangling symlink: left out")
            )
            return False, None
        if not path.is_dir():
            return False, None
        return True, reader.directory(entry)
    return True, _sysfs.checked_directory(reader.root, fd)


_ENTRY_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC


def read_rdma_devices(root: HostRoot) -> tuple[tuple[RdmaDevice, ...], tuple[Condition, ...]]:
    """Every ``class/infiniband`` device, sorted by name, plus per-file problems as conditions."""
    reader = _Reader(root)
    base = root.sys(INFINIBAND_DIR)
    base_dir = os.fspath(base)
    devices: list[RdmaDevice] = []
    for name in _sysfs.list_directory(base, root=root):
        entry = f"{base_dir}/{name}"
        is_directory, fd = _open_entry(reader, entry)
        if not is_directory:
            continue
        try:
            devices.append(_read_rdma_device(reader, name, entry, fd))
        finally:
            if fd is not None:
                os.close(fd)
    return tuple(devices), tuple(reader.conditions)


def _read_rdma_device(reader: _Reader, name: str, entry: str, fd: int | None) -> RdmaDevice:
    device_fd, address = reader.pci_function_at(f"{entry}/device")
    try:
        ports_dir = f"{entry}/ports"
        port_names, ports_fd = _list_child(reader, fd, "ports", ports_dir)
        try:
            port_numbers = [number for number, _ in _sysfs.numbered_names_of(port_names, "")]
            netdevs = _port_netdevs(reader, device_fd, f"{entry}/device/net", port_numbers) if address else {}
            ports = tuple(
                _read_port(
                    reader, ports_fd, f"{ports_dir}/{number}", number, tuple(sorted(netdevs.get(number, ())))
                )
                for number in port_numbers
            )
        finally:
            if ports_fd is not None:
                os.close(ports_fd)
    finally:
        if device_fd is not None:
            os.close(device_fd)
    return RdmaDevice(
        name=name,
        address=address,
        hca_type=_value_or_none(reader.text(entry, "hca_type", fd)),
        firmware=_value_or_none(reader.text(entry, "fw_ver", fd)),
        board_id=_value_or_none(reader.text(entry, "board_id", fd)),
        node_guid=reader.value(entry, "node_guid", fd, parse_guid),
        ports=ports,
    )


#: a subdirectory of a checked directory, listed (``O_NOFOLLOW``: never a link, so inside the root)
_CHILD_LIST_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _list_child(reader: _Reader, parent_fd: int | None, name: str, path: str) -> tuple[list[str], int | None]:
    """``_sysfs.list_directory(path)`` where ``path`` is ``<parent>/<name>``, with a descriptor of it
    for ``*at`` calls (the caller closes it; None: read by path).

    A plain directory (not a link) of a checked one lies inside the root as well, so it is opened
    and listed relative to ``parent_fd`` without asking ``/proc`` where it is; an absent one lists
    as empty (as its path would). Anything else (a link, not a directory, no descriptor) is listed
    by its path as before."""
    if parent_fd is not None:
        try:
            fd = os.open(name, _CHILD_LIST_FLAGS, dir_fd=parent_fd)
        except FileNotFoundError:
            return [], None
        except OSError:
            fd = -1
        if fd >= 0:
            try:
                return sorted(os.listdir(fd)), fd
            except OSError:
                os.close(fd)
                return [], None
    return _sysfs.list_directory(path, root=reader.root), None


def _child_directory(reader: _Reader, parent_fd: int | None, name: str, path: str) -> int | None:
    """``reader.directory(path)`` where ``path`` is ``<parent>/<name>``: relative to ``parent_fd``
    when it is a plain directory of it (inside the root, see ``_list_child``), else by its path."""
    if parent_fd is not None:
        try:
            return _sysfs.open_subdirectory(parent_fd, name)
        except OSError:
            pass
    return reader.directory(path)


def _read_port(
    reader: _Reader, ports_fd: int | None, directory: str, number: int, netdevs: tuple[str, ...]
) -> RdmaPort:
    fd = _child_directory(reader, ports_fd, str(number), directory)
    try:
        return RdmaPort(
            number=number,
            state=reader.value(directory, "state", fd, parse_port_state),
            phys_state=reader.value(directory, "phys_state", fd, parse_phys_state),
            rate_gbps=reader.value(directory, "rate", fd, parse_rate, no_value_is_absent=True),
            link_layer=_value_or_none(reader.text(directory, "link_layer", fd)),
            netdevs=netdevs,
            lid=reader.value(directory, "lid", fd, parse_lid),
            port_guid=reader.value(directory, "gids/0", fd, parse_port_guid, no_value_is_absent=True),
        )
    finally:
        if fd is not None:
            os.close(fd)


def _port_netdevs(
    reader: _Reader, device_fd: int | None, net_dir: str, port_numbers: list[int]
) -> dict[int, list[str]]:
    """Network interfaces of an RDMA device's PCI function, by the port number they sit on."""
    by_port: dict[int, list[str]] = {}
    names, net_fd = _list_child(reader, device_fd, "net", net_dir)
    try:
        for name in names:
            directory = f"{net_dir}/{name}"
            fd = _child_directory(reader, net_fd, name, directory)
            try:
                index = reader.value(directory, "dev_port", fd, parse_dev_port)
                if index is None:
                    index = reader.value(directory, "dev_id", fd, _parse_dev_id)
            finally:
                if fd is not None:
                    os.close(fd)
            if index is not None and index + 1 in port_numbers:
                port = index + 1
            elif len(port_numbers) == 1:
                port = port_numbers[0]
            else:
                reader.conditions.append(
                    _sysfs.unavailable(
                        NAME, f"{reader.root.relative(directory)}: which port it belongs to is unknown"
                    )
                )
                continue
            by_port.setdefault(port, []).append(name)
    finally:
        if net_fd is not None:
            os.close(net_fd)
    return by_port


def _parse_dev_id(text: str, path: str) -> int:
    return parse_dev_port(text, path, hex_value=True)


def read_net_devices(root: HostRoot) -> tuple[tuple[NetDevice, ...], tuple[Condition, ...]]:
    """Every ``class/net`` interface that sits on a PCI function, sorted by name."""
    reader = _Reader(root)
    base = root.sys(NET_DIR)
    if not base.is_dir():
        return (), (_sysfs.unavailable(NAME, f"{root.relative(base)}: missing: network interfaces unknown"),)
    base_dir = os.fspath(base)
    devices: list[NetDevice] = []
    for name in _sysfs.list_directory(base, root=root):
        entry = f"{base_dir}/{name}"
        link = f"{entry}/device"
        opened = root.open_link_directory(link)  # a PCI interface: the kernel resolves its link
        if opened is not None:
            os.close(opened[0])
            address = _address_of(opened[1])
        else:
            path = Path(entry)
            if _sysfs.is_dangling(path):
                if "/devices/virtual/" not in "/" + os.readlink(entry):
                    reader.conditions.append(
                        _sysfs.unavailable(NAME, f"{root.relative(entry)}: dangling symlink: left out")
                    )
                continue
            # no device link (virtual: lo, veth, bridges, bonds) is no address as well
            address = reader.resolved_pci_function(link)
        if address is None:
            continue
        fd = reader.directory(entry)
        try:
            devices.append(
                NetDevice(
                    name=name,
                    address=address,
                    operstate=_value_or_none(reader.text(entry, "operstate", fd)),
                    speed_mbps=reader.value(entry, "speed", fd, parse_speed, no_value_is_absent=True),
                    mac=_value_or_none(reader.text(entry, "address", fd)),
                )
            )
        finally:
            if fd is not None:
                os.close(fd)
    return tuple(devices), tuple(reader.conditions)


def _collect(root: HostRoot) -> Facts:
    rdma, rdma_conditions = read_rdma_devices(root)
    net, net_conditions = read_net_devices(root)
    conditions = rdma_conditions + net_conditions
    message = f"{len(rdma)} RDMA device(s), {len(net)} PCI network interface(s)"
    if not root.sys(INFINIBAND_DIR).is_dir():
        message += f" (no {root.relative(root.sys(INFINIBAND_DIR))})"
    if conditions:
        message += f", {len(conditions)} problem(s)"
    return Facts(
        rdma_devices=rdma,
        net_devices=net,
        sources=(SourceStatus(name=NAME, ok=True, message=message),),
        conditions=conditions,
    )


def collect(ctx: Context) -> SourceResult:
    """The RDMA/net source: ``read_rdma_devices`` and ``read_net_devices`` behind the boundary."""
    return guarded(NAME, lambda: _collect(ctx.root))
