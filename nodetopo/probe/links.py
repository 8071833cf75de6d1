"""The probe's check of the links under the pod: does a GPU or a NIC it relies on sit on an edge the
node's agent published degraded (``status.health``)?

A degraded edge is a promise the node cannot keep, so the check fails ``ResourceNotReal`` naming the
edge and its reason as the ``Degraded`` condition says them. Which edges the pod relies on:

* every GPU's own PCIe link and NVLink fabric; its NVLinks when the pod has two GPUs or more (one GPU
  alone uses no NVLink);
* with ``max-nic-distance``: the NICs of each GPU at that class or closer, when none of them is
  reached over a healthy path (a GPU that keeps one healthy such NIC is served); with ``rdma`` alone:
  the GPU's RDMA NICs, when none of them is. The edge named is the NIC's own (its port, its PCIe
  link), else the GPU's own, else the degraded bridges between them.

A NodeTopology whose links were not judged (an older agent) says nothing degraded, and nothing
healthy: the check skips.
"""

from __future__ import annotations

from nodetopo.model import EdgeHealth, EdgeKind
from nodetopo.probe.inputs import Declared, Seen
from nodetopo.probe.outcome import Attribution, Check, failed, passed, skipped
from nodetopo.probe.promised import Promised, PromisedGpu
from nodetopo.resource.health import gpu_edges, nic_edges, path_edges, told

NAME = "link-health"


def check_link_health(declared: Declared, seen: Seen, promised: Promised | None) -> Check:
    if promised is None:
        return skipped(NAME, "no NodeTopology to compare with")
    report = promised.health
    if not report.judged:
        return skipped(NAME, f"NodeTopology/{promised.node} does not judge its links (an older agent)")
    if seen.gpu_ids is None:
        return skipped(NAME, seen.unread.get("gpus", "the container's GPUs could not be read"))
    found = [g for g in (promised.gpu(key) for key in seen.gpu_ids) if g is not None]
    if not found:
        return passed(NAME, "no GPU of the container is in the NodeTopology: no link under it")
    suspects: dict[str, EdgeHealth] = {}
    for g in found:
        for e in gpu_edges(report, g.index):
            if e.kind is not EdgeKind.NVLINK or len(found) > 1:
                suspects.setdefault(e.edge, e)
    relied: set[str] = set()
    for g in found:
        for nic in _lost_nics(declared, promised, g):
            relied.add(nic)
            edges = nic_edges(report, nic) or gpu_edges(report, g.index) or path_edges(report)
            for e in edges:
                suspects.setdefault(e.edge, e)
    gpus = ",".join(str(g.index) for g in sorted(found, key=lambda g: g.index))
    if suspects:
        nics = f" and NIC(s) {','.join(sorted(relied))}" if relied else ""
        return failed(
            NAME,
            f"GPU(s) {gpus}{nics} sit on degraded edge(s) of NodeTopology/{promised.node}: "
            + told(suspects.values()),
            Attribution.RESOURCE_NOT_REAL,
        )
    return passed(
        NAME,
        f"no degraded edge under GPU(s) {gpus} ({report.checked} edge(s) judged, "
        f"{len(report.degraded)} degraded on the node)",
    )


def _lost_nics(declared: Declared, promised: Promised, g: PromisedGpu) -> list[str]:
    """The NICs the pod relied on for GPU ``g`` and lost to a degraded edge: those it declared (by
    class, or RDMA), when every one of them is behind a degraded edge; none when one is healthy."""
    r = declared.request
    if r is None or not (r.rdma or r.max_nic_distance is not None) or not g.degraded_nics:
        return []
    rdma = {n.name for n in promised.nics if n.rdma}
    wanted = [
        name
        for name, cls in g.nics
        if (r.max_nic_distance is None or cls <= r.max_nic_distance) and (name in rdma or not r.rdma)
    ]
    if not wanted or any(name not in g.degraded_nics for name in wanted):
        return []
    return sorted(wanted)
