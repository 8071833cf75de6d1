"""The three stages of the binding cut (see ``model``): inside each unit, each unit's egress, and the
fabric between units. Pure: max-flow over capacity graphs, no I/O."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

import networkx as nx

from nodetopo.expect.flows import Cut, colour_classes, min_cut, steiner_min_cut, symmetric
from nodetopo.expect.links import (
    PLACEHOLDER,
    UNLIMITED,
    Link,
    LinkKind,
    NodeView,
    Shape,
)

# --------------------------------------------------------------------------------------------
# Graphs and cuts
# --------------------------------------------------------------------------------------------


def digraph(links: Iterable[Link]) -> nx.DiGraph:
    g = nx.DiGraph()
    symmetric(g, ((link.a, link.b, {"capacity": link.capacity, "link": link}) for link in links))
    for v in g:
        g.nodes[v]["role"] = v.split(":", 1)[0]
    return g


def links_of(g: nx.DiGraph, cut: Cut) -> tuple[Link, ...]:
    seen: dict[int, Link] = {}
    for u, v in cut.edges:
        link = g.edges[u, v].get("link")
        if isinstance(link, Link):
            seen.setdefault(id(link), link)
    return tuple(sorted(seen.values(), key=lambda x: (x.capacity, x.a, x.b)))


def class_of(links: Sequence[Link]) -> str:
    """The link class of a cut: the kind carrying most of its capacity."""
    share: dict[str, float] = {}
    for link in links:
        if link.kind in (LinkKind.NVLINK, LinkKind.NVSWITCH):
            key = "NVLink"
        elif link.kind is LinkKind.NIC:
            key = "network"
        elif link.kind is LinkKind.SMP or link.a.startswith("host:") or link.b.startswith("host:"):
            key = "host memory"
        else:
            key = "PCIe"
        share[key] = share.get(key, 0.0) + link.capacity
    return max(share, key=lambda k: share[k]) if share else "NVLink"


@dataclasses.dataclass(slots=True)
class Inner:
    """The cuts between one unit's GPUs."""

    value: float
    limiting: tuple[Link, ...]
    klass: str
    cuts: list[tuple[float, int]]  #: (capacity, GPUs on the cut's side) of every cut computed
    nvls: tuple[float, tuple[Link, ...]] | None  #: the smallest GPU NVLink into the switch, if NVLS runs


def inner_cut(links: Sequence[Link], terminals: Sequence[str], nvls_ok: bool) -> Inner | None:
    g = digraph(links)
    for v in terminals:
        if v not in g:
            g.add_node(v, role="gpu")
    found = steiner_min_cut(g, terminals)
    if found is None:
        return None
    best, cuts = found
    term = set(terminals)
    limiting = links_of(g, best)
    nvls: tuple[float, tuple[Link, ...]] | None = None
    switches = {link.b for link in links if link.kind is LinkKind.NVSWITCH}
    if nvls_ok and len(switches) == 1:
        switch = next(iter(switches))
        colours = colour_classes(g, switch)
        for v in {colours[t]: t for t in reversed(terminals)}.values():  # one flow per class
            if not g.has_edge(v, switch):
                nvls = None
                break
            cut = min_cut(g, v, switch)
            if nvls is None or cut.value < nvls[0]:
                nvls = (cut.value, links_of(g, cut))
        if nvls is not None and nvls[0] <= 0:
            nvls = None
    return Inner(
        best.value, limiting, class_of(limiting), [(x.value, len(term & x.side)) for x in cuts], nvls
    )


def unit_egress(shape: Shape) -> tuple[float, tuple[Link, ...]]:
    """Max-flow from the held GPUs to the NICs' wires, and the links of its min cut."""
    out = f"out:{PLACEHOLDER}"
    if not shape.has_nics:
        return 0.0, ()
    g = digraph(shape.egress)
    src = f"src:{PLACEHOLDER}"
    for v in shape.gpus:
        g.add_edge(src, v, capacity=UNLIMITED)
    g.nodes[src]["role"] = "src"
    cut = min_cut(g, src, out)
    return cut.value, links_of(g, cut)


@dataclasses.dataclass(slots=True)
class Unit:
    name: str  #: the host, or ``nvdomain:<clique>``
    hosts: list[NodeView]
    shapes: list[Shape]
    ranks: int
    inner: Inner | None = None
    egress: float = 0.0
    #: the min cut of the best host's egress, and that host (renamed only when a report names it)
    egress_cut: tuple[tuple[Link, ...], str] = ((), "")
    gdr: bool = True
    family: str = ""
    tiers: tuple[str, ...] = ()


@dataclasses.dataclass(slots=True)
class Fabric:
    value: float
    limiting: tuple[Link, ...]
    binding: Unit | None
    cuts: list[tuple[float, int]]  #: (capacity, ranks on the cut's side)
    span: str


def fabric_cut(units: Sequence[Unit], oversubscription: float) -> Fabric:
    """The Steiner min cut between units over their egress and the fabric tiers.

    Units with the same tiers, egress and rank count are interchangeable, so each such group is one
    vertex carrying the members' summed egress. A cut that splits a group costs at least one member's
    egress more than keeping it whole on the side of its leaf, so the smallest cut is either one unit's
    egress alone or a cut that keeps every group whole: both are computed, on a graph of groups and tiers
    (32 leaf groups, not 1,024 nodes).
    """
    groups: dict[tuple[object, ...], list[Unit]] = {}
    for u in units:
        groups.setdefault((u.tiers, round(u.egress, 9), u.ranks), []).append(u)
    members = list(groups.values())
    vertex = {id(m[0]): f"group:{k}" for k, m in enumerate(members)}
    links: list[Link] = []
    below: dict[str, float] = {}
    up: dict[tuple[str, str], None] = {}
    for m in members:
        u = m[0]
        chain = (*u.tiers, "fabric:root")
        egress = u.egress * len(m)
        links.append(
            Link(
                kind=LinkKind.NIC,
                a=vertex[id(u)],
                b=chain[0],
                node=None,
                capacity=egress,
                nominal=egress,
                basis="egress",
            )
        )
        for k in range(len(chain) - 1):
            below[chain[k]] = below.get(chain[k], 0.0) + egress
            up[(chain[k], chain[k + 1])] = None
    basis = "non-blocking (assumed)" if oversubscription == 1 else f"{oversubscription:g}:1 oversubscribed"
    for a, b in up:
        cap = below[a] / oversubscription
        links.append(Link(kind=LinkKind.FABRIC, a=a, b=b, node=None, capacity=cap, nominal=cap, basis=basis))

    def egress_links(u: Unit) -> list[Link]:
        cut_links, host = u.egress_cut
        return [x.renamed(host) for x in cut_links]

    # one unit alone: its egress
    single = min(units, key=lambda u: u.egress)
    value, limiting = single.egress, egress_links(single)
    binding: Unit | None = single
    sides = [(u.egress, u.ranks) for u in (m[0] for m in members)]
    if len(members) > 1:
        g = digraph(links)
        found = steiner_min_cut(g, [vertex[id(m[0])] for m in members])
        assert found is not None
        best, cuts = found
        ranks = {vertex[id(m[0])]: m[0].ranks * len(m) for m in members}
        sides += [(x.value, sum(r for v, r in ranks.items() if v in x.side)) for x in cuts]
        if best.value < value - 1e-9:
            by_vertex = {vertex[id(m[0])]: m[0] for m in members}
            value, limiting = best.value, []
            found_binding: Unit | None = None
            for link in links_of(g, best):
                if link.kind is LinkKind.NIC:
                    found_binding = found_binding or by_vertex[link.a]
                    limiting += egress_links(by_vertex[link.a])
                else:
                    limiting.append(link)
            binding = found_binding
    return Fabric(value, tuple(dict.fromkeys(limiting)), binding, sides, span_of(units))


def span_of(units: Sequence[Unit]) -> str:
    chains = [u.tiers for u in units]
    if any(not ch for ch in chains):
        return "fabric tiers unknown"
    depth = min(len(ch) for ch in chains)
    for level in range(depth):
        if len({ch[level] for ch in chains}) == 1:
            return "one leaf" if level == 0 else f"one tier-{level} group"
    return f"beyond tier {depth - 1}"
