"""The small values every other model module is made of: PCI addresses, link classes, conditions."""

from __future__ import annotations

import dataclasses
import enum
import re


def short_quote(text: str, limit: int = 40) -> str:
    """A short quotation of untrusted text for a ValueError (``errors.excerpt`` for this layer)."""
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}… ({len(text)} chars)"


# --------------------------------------------------------------------------------------------
# Small value types
# --------------------------------------------------------------------------------------------

_PCI_ADDRESS = re.compile(
    r"^(?:(?P<domain>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):"
    r"(?P<device>[0-9a-fA-F]{1,2})\.(?P<function>[0-7])$"
)


@dataclasses.dataclass(frozen=True, slots=True, order=True)
class PciAddress:
    """A PCI function address (domain, bus, device, function).

    ``str()`` gives the sysfs / Kubernetes DRA form ``0000:3b:00.0``. ``parse`` also accepts the
    8-digit domain nvidia-smi prints (``00000000:3B:00.0``) and a bare ``3b:00.0`` (domain 0).
    """

    domain: int
    bus: int
    device: int
    function: int

    @classmethod
    def parse(cls, text: str) -> PciAddress:
        match = _PCI_ADDRESS.match(text.strip())
        if match is None:
            raise ValueError(f"not a PCI address: {short_quote(text)}")
        return cls(
            domain=int(match["domain"] or "0", 16),
            bus=int(match["bus"], 16),
            device=int(match["device"], 16),
            function=int(match["function"]),
        )

    def __str__(self) -> str:
        width = 4 if self.domain <= 0xFFFF else 8
        return f"{self.domain:0{width}x}:{self.bus:02x}:{self.device:02x}.{self.function}"


class LinkClass(enum.IntEnum):
    """How two PCI devices are connected, named exactly as ``nvidia-smi topo -m`` names it.

    Ordered from nearest to farthest, so ``min()`` picks the best path.
    """

    PIX = 1  #: at most a single PCIe bridge (same switch port / same switch)
    PXB = 2  #: several PCIe bridges, without crossing the host bridge
    PHB = 3  #: through a PCIe host bridge (same root complex)
    NODE = 4  #: across PCIe host bridges within one NUMA node
    SYS = 5  #: across the SMP interconnect between NUMA nodes (QPI/UPI/xGMI)


class ConditionReason(enum.StrEnum):
    UNAVAILABLE = "Unavailable"  #: the tool, driver, file or device is not there
    PARSE_ERROR = "ParseError"  #: the source answered with something we could not read
    TIMEOUT = "Timeout"  #: the source did not answer in time
    INCONSISTENT = "Inconsistent"  #: two sources disagree about one fact
    DEGRADED = "Degraded"  #: the source answered, partly (e.g. ERR! cells, a missing GPU)
    STALE = "Stale"  #: facts kept from an earlier scan because this one failed
    #: an essential source (sysfs PCI or NUMA) observed nothing: the host root is wrong (not
    #: mounted, empty) or the bundle lacks it; nothing derived from it can be trusted
    MISSING = "Missing"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Condition:
    """Something a platform engineer should know about one source's observation."""

    source: str
    reason: ConditionReason
    message: str


#: the source name of what nodetopo read from other projects' labels on its own Node (GPU feature
#: discovery's): its conditions are said in Consistent, never in Ready
NODE_LABELS_SOURCE = "node-labels"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SourceStatus:
    """Whether one source ran, and how it went (``status.sources[]``)."""

    name: str
    ok: bool
    message: str = ""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True, order=True)
class PodRef:
    """One container of one pod: the holder of a device."""

    namespace: str
    name: str
    container: str
