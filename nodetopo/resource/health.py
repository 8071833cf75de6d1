"""What a health report says about one device: the degraded edges a GPU or a NIC sits on, told in the
``Degraded`` condition's words, and the NICs no GPU reaches over a healthy path.

Over the model's ``HealthReport``, so a published object (``PublishedStatus.health``, from
``nodetopo.resource.reader``) and a node discovered here (``Topology.health``) are read alike. A
report that was not judged (an older agent) has no degraded edge: nothing is known to be degraded.
"""

from __future__ import annotations

from collections.abc import Iterable

from nodetopo.model import EdgeHealth, HealthReport
from nodetopo.resource.published import PublishedStatus


def gpu_edges(report: HealthReport, gpu: int) -> tuple[EdgeHealth, ...]:
    """The degraded edges of GPU ``gpu`` itself (its PCIe link, its NVLinks, its fabric)."""
    return tuple(e for e in report.degraded if e.gpu == gpu)


def nic_edges(report: HealthReport, nic: str) -> tuple[EdgeHealth, ...]:
    """The degraded edges of NIC ``nic`` itself (its ports, its PCIe link)."""
    return tuple(e for e in report.degraded if e.nic == nic)


def path_edges(report: HealthReport) -> tuple[EdgeHealth, ...]:
    """The degraded edges of no GPU and no NIC: a bridge's or an NVSwitch's link (between them)."""
    return tuple(e for e in report.degraded if e.gpu is None and e.nic is None)


def told(edges: Iterable[EdgeHealth]) -> str:
    """``GPU5/nvlink (NVLinkDown: 12 of 18 NVLinks active ...)``, ``; ``-joined: each edge as the
    ``Degraded`` condition says it."""
    return "; ".join(f"{e.edge} ({', '.join(e.reasons) or 'degraded'}: {e.message})" for e in edges)


def unreachable_nics(status: PublishedStatus) -> frozenset[str]:
    """The NICs whose path from every GPU of ``status`` crosses a degraded edge (``degradedNICs``):
    a NIC whose own port or link is degraded, or one behind a degraded bridge. No GPU: none."""
    if not status.gpus or not status.gpus[0].degraded_nics:  # a healthy node: one look
        return frozenset()
    return frozenset.intersection(*(g.degraded_nics for g in status.gpus))
