"""Edge health: what ``nodetopo.health`` concluded about each link (published)."""

from __future__ import annotations

import dataclasses
import enum

from nodetopo.model.values import PciAddress

# --------------------------------------------------------------------------------------------
# Edge health: what ``nodetopo.health`` concluded about each link (published)
# --------------------------------------------------------------------------------------------


class EdgeKind(enum.StrEnum):
    PCIE = "pcie"  #: a PCI function's link to the port above it
    NVLINK = "nvlink"  #: a GPU's NVLinks (to its peers or its NVSwitches)
    PORT = "port"  #: an RDMA port (InfiniBand or RoCE) and its wire
    FABRIC = "fabric"  #: a GPU's multi-node NVLink fabric (GB200/GB300)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class LinkState:
    """An edge's state (observed) or what both ends support (capability); None: not said."""

    width: int | None = None  #: PCIe lanes
    gts: float | None = None  #: PCIe GT/s per lane
    links: int | None = None  #: active NVLinks
    rate_gbps: float | None = None  #: a port's rate
    state: str | None = None  #: a port's state, a fabric's health


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CounterRate:
    """How fast one error counter rose over the judged window, per hour."""

    counter: str
    per_hour: float


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class EdgeName:
    """Which edge: ``edge`` is ``<device>/<kind>`` (``GPU3/nvlink``, ``mlx5_2/port1``,
    ``0000:16:00.0/pcie``); ``gpu``/``nic``/``address`` name the device, ``peer`` the other end when
    known (``NVSwitch``, ``GPU1``, the port above). What a scan read of it (``EdgeReading``) and what
    is published of a degraded one (``EdgeHealth``) both start with these names."""

    edge: str
    kind: EdgeKind
    device: str
    gpu: int | None = None
    nic: str | None = None
    address: PciAddress | None = None
    port: int | None = None
    peer: str | None = None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class EdgeHealth(EdgeName):
    """One degraded edge: which (``EdgeName``), why, what it does against what it should, since
    when. ``reasons`` are the rules that fired (``nodetopo.health.rules``)."""

    reasons: tuple[str, ...] = ()
    message: str = ""
    observed: LinkState = LinkState()
    capability: LinkState = LinkState()
    since: str | None = None  #: RFC 3339, when it was first judged degraded (None: not known)
    rates: tuple[CounterRate, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CounterBaseline:
    """The error counters the last published status recorded, and when: a restarted agent judges
    rates against them. ``counters`` holds only non-zero values, by edge, both sorted."""

    at: str  #: RFC 3339
    #: a short hash of the ids of every edge read then: a counter it does not list was 0 for an
    #: edge set of that hash (for another set only the listed counters are known)
    edges: str = ""
    counters: tuple[tuple[str, tuple[tuple[str, int], ...]], ...] = ()
    #: the kernel's boot id when they were read (``/proc/sys/kernel/random/boot_id``; "" unknown):
    #: counters count since boot, so a baseline of another boot says nothing about this one's
    boot: str = ""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class HealthReport:
    """The judgement of every edge of a scan: how many were judged, which are degraded.

    ``judged`` False: no health judgement at all (an object written by an older agent, a view
    built without one): nothing is known to be degraded, and nothing to be healthy either.
    """

    judged: bool = False
    checked: int = 0  #: edges judged this scan
    degraded: tuple[EdgeHealth, ...] = ()
    baseline: CounterBaseline | None = None


NOT_JUDGED = HealthReport()
