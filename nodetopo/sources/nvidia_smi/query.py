"""``nvidia-smi -q -x``: the driver version and the GPUs (UUID, model, PCI address, MIG mode, memory),
and each GPU's view of its PCIe link (``pci_gpu_link_info``, ``replay_counter``: link readings)."""

from __future__ import annotations

import dataclasses
import re
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable

from nodetopo import model
from nodetopo.errors import ParseError, excerpt
from nodetopo.sources.nvidia_smi._text import _ERROR_VALUES, NAME, _int, _normalise_errors

QUERY_XML_PATH = "nvidia-smi -q -x"

_MEMORY = re.compile(r"([0-9]{1,12}) (KiB|MiB|GiB)")
_MEMORY_UNITS = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


@dataclasses.dataclass(slots=True)
class _GpuFields:
    """The raw strings of the fields nodetopo reads from one GPU of ``-q`` (XML or text)."""

    where: int | None
    uuid: str | None = None
    model: str | None = None
    bus_id: str | None = None
    minor_number: str | None = None
    mig_current: str | None = None
    mig_pending: str | None = None
    memory_total: str | None = None
    numa_node: str | None = None


def _queried_gpu(
    fields: _GpuFields, driver: str | None, path: str, problems: list[str]
) -> model.QueriedGpu | None:
    """The GPU of one ``-q`` block, or None (and a problem) when it has no readable UUID."""

    def fail(detail: str) -> ParseError:
        return ParseError(NAME, path, detail, line=fields.where)

    def value(raw: str | None, what: str) -> str | None:
        if raw is None:
            return None
        raw = raw.strip()
        if raw in ("N/A", "", "None"):
            return None
        if _normalise_errors(raw) in _ERROR_VALUES:
            problems.append(f"GPU {fields.bus_id or fields.uuid or '?'}: {what} reads {raw}")
            return None
        return raw

    uuid = value(fields.uuid, "uuid")
    if uuid is None:
        problems.append(f"GPU {fields.bus_id or '?'} has no readable UUID: left out")
        return None
    bus_id = value(fields.bus_id, "PCI bus id")
    address = None
    if bus_id is not None:
        try:
            address = model.PciAddress.parse(bus_id)
        except ValueError:
            raise fail(f"{uuid}: PCI bus id {excerpt(bus_id)} is not a PCI address") from None
    minor = value(fields.minor_number, "minor number")
    memory = value(fields.memory_total, "FB memory total")
    numa = value(fields.numa_node, "NUMA node")
    memory_match = _MEMORY.fullmatch(memory) if memory is not None else None
    if memory is not None and memory_match is None:
        raise fail(f"{uuid}: FB memory total {excerpt(memory)} is not '<n> MiB'")
    for raw, what in ((minor, "minor number"), (numa, "NUMA node")):
        if raw is not None and _int(raw) is None:
            raise fail(f"{uuid}: {what} {excerpt(raw)} is not a number")
    return model.QueriedGpu(
        uuid=uuid,
        model=value(fields.model, "product name") or "",
        address=address,
        minor_number=_int(minor) if minor is not None else None,
        mig_current=_mig_mode(value(fields.mig_current, "MIG mode"), fail),
        mig_pending=_mig_mode(value(fields.mig_pending, "pending MIG mode"), fail),
        numa_node=_int(numa) if numa is not None else None,
        memory_bytes=int(memory_match[1]) * _MEMORY_UNITS[memory_match[2]] if memory_match else None,
        driver_version=driver,
    )


def _mig_mode(raw: str | None, fail: Callable[[str], ParseError]) -> bool | None:
    if raw is None:
        return None
    if raw in ("Enabled", "Disabled"):
        return raw == "Enabled"
    raise fail(f"MIG mode {excerpt(raw)} is not Enabled, Disabled or N/A")


def _find_below(parents: list[ElementTree.Element], tag: str) -> ElementTree.Element | None:
    """``gpu.find("<parent>/<tag>")`` given ``gpu.findall("<parent>")``: the first ``<tag>`` child of
    the first ``<parent>`` that has one. A plain tag is found by ElementTree's C code; a path goes
    through ``ElementPath`` in Python, which cost more than parsing the whole answer."""
    for parent in parents:
        found = parent.find(tag)
        if found is not None:
            return found
    return None


#: (reading attribute, tag) of ``<pcie_gen>`` and ``<link_widths>``
_LINK_TAGS = (
    ("max_gen", "max_link_gen"),
    ("current_gen", "current_link_gen"),
    ("device_max_gen", "max_device_link_gen"),
    ("host_max_gen", "max_host_link_gen"),
)
_WIDTH_TAGS = (("max_width", "max_link_width"), ("current_width", "current_link_width"))
_LINK_VALUE = re.compile(r"([0-9]{1,2})x?")
_REPLAYS = re.compile(r"[0-9]{1,20}")


def _link_reading(
    pci: list[ElementTree.Element], address: model.PciAddress | None, uuid: str, problems: list[str]
) -> model.GpuPcieReading | None:
    """What ``<pci>`` says of the GPU's own PCIe link (generations, widths, the replay counter)."""
    info = _find_below(pci, "pci_gpu_link_info")
    values: dict[str, int | None] = {}

    def read(element: ElementTree.Element | None, attr: str, pattern: re.Pattern[str]) -> None:
        raw = (element.text or "").strip() if element is not None else ""
        if raw in ("", "N/A"):
            return
        match = pattern.fullmatch(raw)
        if match is None:
            problems.append(f"GPU {address or uuid}: {attr} reads {excerpt(raw)}")
            return
        values[attr] = int(match[1] if match.groups() else match[0])

    if info is not None:
        gen = info.find("pcie_gen")
        widths = info.find("link_widths")
        for attr, tag in _LINK_TAGS:
            read(gen.find(tag) if gen is not None else None, attr, _LINK_VALUE)
        for attr, tag in _WIDTH_TAGS:
            read(widths.find(tag) if widths is not None else None, attr, _LINK_VALUE)
    read(_find_below(pci, "replay_counter"), "replays", _REPLAYS)
    if not values:
        return None
    return model.GpuPcieReading(gpu=None, uuid=uuid, address=address, source=NAME, **values)


def _read_smi_query_xml(
    text: str, path: str
) -> tuple[tuple[str | None, tuple[model.QueriedGpu, ...], tuple[model.GpuPcieReading, ...]], list[str]]:
    try:
        root = ElementTree.fromstring(text)
    except ElementTree.ParseError as e:
        raise ParseError(NAME, path, f"not well-formed XML: {e}", line=e.position[0]) from None
    if root.tag != "nvidia_smi_log":
        raise ParseError(NAME, path, f"expected <nvidia_smi_log>, got <{root.tag}>")

    def text_of(element: ElementTree.Element | None) -> str | None:
        return None if element is None else (element.text or "").strip()

    driver = text_of(root.find("driver_version")) or None
    problems: list[str] = []
    gpus = []
    links: list[model.GpuPcieReading] = []
    for gpu in root.findall("gpu"):
        pci = gpu.findall("pci")
        mig_mode = gpu.findall("mig_mode")
        fields = _GpuFields(
            where=None,
            uuid=text_of(gpu.find("uuid")),
            model=text_of(gpu.find("product_name")),
            bus_id=text_of(_find_below(pci, "pci_bus_id")) or gpu.get("id"),
            minor_number=text_of(gpu.find("minor_number")),
            mig_current=text_of(_find_below(mig_mode, "current_mig")),
            mig_pending=text_of(_find_below(mig_mode, "pending_mig")),
            memory_total=text_of(_find_below(gpu.findall("fb_memory_usage"), "total")),
            numa_node=text_of(gpu.find("numa_node")) or text_of(_find_below(pci, "numa_node")),
        )
        queried = _queried_gpu(fields, driver, path, problems)
        if queried is not None:
            gpus.append(queried)
            link = _link_reading(pci, queried.address, queried.uuid, problems)
            if link is not None:
                links.append(link)
    return (driver, _sorted_queried(gpus, path), tuple(links)), problems


def _sorted_queried(gpus: list[model.QueriedGpu], path: str) -> tuple[model.QueriedGpu, ...]:
    uuids = [gpu.uuid for gpu in gpus]
    if len(set(uuids)) != len(uuids):
        raise ParseError(NAME, path, "two GPUs with the same UUID")
    # PCI bus order is nvidia-smi's default enumeration order; GPUs without an address go last.
    return tuple(
        sorted(gpus, key=lambda gpu: (gpu.address is None, gpu.address or model.PciAddress(0, 0, 0, 0)))
    )


def parse_smi_query_xml(
    text: str, path: str = QUERY_XML_PATH
) -> tuple[str | None, tuple[model.QueriedGpu, ...]]:
    """Parse ``nvidia-smi -q -x``: the driver version and the GPUs, in PCI bus order.

    ``numa_node`` is read from ``<numa_node>`` where a driver reports one (none of the captured drivers
    does; ``topo -m`` and sysfs are the NUMA sources).
    """
    driver, gpus, _ = _read_smi_query_xml(text, path)[0]
    return driver, gpus


def parse_smi_query_links(text: str, path: str = QUERY_XML_PATH) -> tuple[model.GpuPcieReading, ...]:
    """What ``nvidia-smi -q -x`` says of each GPU's PCIe link: ``max_link_gen`` (what this GPU and
    system can reach), ``current_link_gen`` (lower when idle), ``max_device_link_gen``,
    ``max_host_link_gen``, ``max_link_width``, ``current_link_width`` and ``replay_counter``."""
    return _read_smi_query_xml(text, path)[0][2]
