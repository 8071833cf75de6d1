"""The expected band of a point-to-point copy between two GPUs of a node (nvbandwidth,
p2pBandwidthLatencyTest). Pure: no I/O."""

from __future__ import annotations

from collections.abc import Iterable

import networkx as nx

from nodetopo.expect import constants as c
from nodetopo.expect.cuts import digraph, links_of
from nodetopo.expect.flows import min_cut
from nodetopo.expect.links import (
    PLACEHOLDER,
    ExpectError,
    Link,
    LinkKind,
    ObservedLink,
    build_shape,
    node_view,
    numa_of,
    observed_for,
    vertex_name,
)
from nodetopo.expect.model import Algorithm, Bound, Placement, band_of

# --------------------------------------------------------------------------------------------
# Point-to-point copies (nvbandwidth, p2pBandwidthLatencyTest)
# --------------------------------------------------------------------------------------------


def expect_copy(
    placement: Placement, source: int | None, target: int | None, *, observed: Iterable[ObservedLink] = ()
) -> Bound:
    """The band of one copy between two GPUs of a node (``None`` for the host memory side): over their
    NVLink when they have one (the copy does not relay through other GPUs), else over PCIe."""
    notes: set[str] = set()
    view = node_view(placement.node, placement.topology, placement.gpus, placement.nics, notes)
    try:
        shape = build_shape(view, observed_for(tuple(observed), placement.node))
    except ExpectError as e:
        raise ExpectError(f"{placement.node}: {e}") from None
    held = {g.index for g in view.gpus}
    ends = [x for x in (source, target) if x is not None]
    missing = [x for x in ends if x not in held]
    if missing:
        raise ExpectError(f"{placement.node}: GPU {missing[0]} is not in the placement")
    if source is None and target is None:
        raise ExpectError("a copy needs at least one GPU")
    mine = {f"gpu:{PLACEHOLDER}:{x}" for x in ends}

    def usable(link: Link) -> bool:
        for v in (link.a, link.b):
            if v.startswith("gpu:") and v not in mine:
                return False
        return link.kind is not LinkKind.NIC and not link.a.startswith("nic:")

    links = [x for x in dict.fromkeys(shape.egress + shape.transport) if usable(x)]
    if source is not None and target is not None:
        nv = [x for x in links if x.kind in (LinkKind.NVLINK, LinkKind.NVSWITCH)]
        g = digraph(nv)
        a, b = f"gpu:{PLACEHOLDER}:{source}", f"gpu:{PLACEHOLDER}:{target}"
        if a in g and b in g and nx.has_path(g, a, b):
            eff = c.P2P_NVLINK
        else:
            g = digraph(x for x in links if x.kind not in (LinkKind.NVLINK, LinkKind.NVSWITCH))
            eff = c.P2P_PCIE
    else:
        gpu = source if source is not None else target
        assert gpu is not None
        g = digraph(x for x in links if x.kind not in (LinkKind.NVLINK, LinkKind.NVSWITCH))
        a = f"gpu:{PLACEHOLDER}:{gpu}"
        b = f"host:{PLACEHOLDER}:{numa_of(next(x for x in view.gpus if x.index == gpu))}"
        c2c = view.specs[gpu].c2c
        eff = c.P2P_NVLINK if c2c else c.P2P_PCIE
        if source is None:
            a, b = b, a
    if a not in g or b not in g or not nx.has_path(g, a, b):
        raise ExpectError(f"{placement.node}: no path between {vertex_name(a)} and {vertex_name(b)}")
    cut = min_cut(g, a, b)
    limiting = tuple(x.renamed(placement.node) for x in links_of(g, cut))
    return Bound(
        algorithm=Algorithm.RING,
        bound=cut.value,
        band=band_of(cut.value, eff),
        efficiency=eff,
        stage="point-to-point",
        cut=f"{vertex_name(a)} to {vertex_name(b)}".replace(PLACEHOLDER, placement.node),
        limiting=limiting,
    )
