"""Cuts by flows: the smallest capacity that separates a set of terminals (a Steiner cut).

A ring over ranks T crosses every cut that has ranks on both sides at least once in each direction,
so its bus bandwidth is at most the smallest directed cut capacity between any two sides holding
ranks. With one terminal r fixed, every such cut separates r from some other terminal t, so the
smallest is ``min over t of min(maxflow(r -> t), maxflow(t -> r))``.

Terminals that the graph cannot tell apart give the same flow value with r fixed: one flow per class
is enough. The classes come from colour refinement (1-dimensional Weisfeiler-Leman) with r given a
colour of its own, over each vertex's role (``gpu``, ``nvswitch``, ``nic`` ...) and its incident
capacities; names never enter, so the 18 hosts of an NVL72 rack cost four flows, not 142.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Iterable, Sequence

import networkx as nx
from networkx.algorithms.flow import shortest_augmenting_path

#: capacities closer than this (GB/s) are one value: a cut is not "smaller" by rounding noise
EPSILON = 1e-6
REFINEMENT_ROUNDS = 4


@dataclasses.dataclass(frozen=True, slots=True)
class Cut:
    """A directed cut: ``value`` GB/s from ``side`` to the rest; ``edges`` are the arcs across it."""

    value: float
    side: frozenset[Hashable]
    edges: tuple[tuple[Hashable, Hashable], ...]
    source: Hashable
    sink: Hashable


def _cut_edges(g: nx.DiGraph, side: frozenset[Hashable]) -> tuple[tuple[Hashable, Hashable], ...]:
    return tuple(
        sorted(
            (
                (u, v)
                for u in side
                for v, d in g.succ[u].items()
                if v not in side and d.get("capacity", 0) > 0
            ),
            key=str,
        )
    )


def _core(g: nx.DiGraph, source: Hashable, sink: Hashable) -> tuple[nx.DiGraph, dict[Hashable, Hashable]]:
    """``g`` without its dead ends: vertices (other than source and sink) with one neighbour carry no
    flow between them, so they are peeled off, repeatedly. Returns the rest and, for each peeled vertex,
    the vertex it hangs from (a cut never separates them: the peeled vertex goes with its anchor)."""
    degree = {v: len(g.succ[v]) for v in g}
    keep = {source, sink}
    stack = [v for v, d in degree.items() if d <= 1 and v not in keep]
    anchor: dict[Hashable, Hashable] = {}
    while stack:
        v = stack.pop()
        if v in anchor:
            continue
        rest = [w for w in g.succ[v] if w not in anchor]
        anchor[v] = rest[0] if rest else v
        for w in rest:
            if w not in keep:
                degree[w] -= 1
                if degree[w] == 1:
                    stack.append(w)
    if not anchor:
        return g, anchor
    return g.subgraph([v for v in g if v not in anchor]), anchor


def min_cut(g: nx.DiGraph, source: Hashable, sink: Hashable) -> Cut:
    """The smallest cut from ``source`` to ``sink`` (max-flow min-cut). ``side`` holds every vertex of
    ``g`` on the source's side (dead ends with the vertex they hang from)."""
    core, anchor = _core(g, source, sink)
    value, (side, _) = nx.minimum_cut(
        core, source, sink, capacity="capacity", flow_func=shortest_augmenting_path
    )
    inside = set(side)
    for v in anchor:
        w = v
        while w in anchor and anchor[w] != w:
            w = anchor[w]
        if w in inside:
            inside.add(v)
    frozen = frozenset(inside)
    return Cut(float(value), frozen, _cut_edges(core, frozenset(side)), source, sink)


def colour_classes(
    g: nx.DiGraph, distinguished: Hashable, rounds: int = REFINEMENT_ROUNDS
) -> dict[Hashable, int]:
    """Colour refinement over ``role`` and capacities, with ``distinguished`` coloured apart."""
    palette: dict[object, int] = {}

    def index(key: object) -> int:
        return palette.setdefault(key, len(palette))

    colour = {v: index((g.nodes[v].get("role"), v == distinguished)) for v in g}
    for _ in range(rounds):
        nxt = {
            v: index(
                (
                    colour[v],
                    tuple(sorted((round(d["capacity"], 6), colour[w]) for w, d in g.succ[v].items())),
                    tuple(sorted((round(d["capacity"], 6), colour[u]) for u, d in g.pred[v].items())),
                )
            )
            for v in g
        }
        if len(set(nxt.values())) == len(set(colour.values())):
            colour = nxt
            break
        colour = nxt
    return colour


def steiner_min_cut(g: nx.DiGraph, terminals: Sequence[Hashable]) -> tuple[Cut, list[Cut]] | None:
    """The smallest directed cut with terminals on both sides, and every cut computed on the way
    (callers weigh them by how many terminals each side holds). None for fewer than two terminals."""
    if len(terminals) < 2:
        return None
    root = terminals[0]
    colours = colour_classes(g, root)
    representatives: dict[int, Hashable] = {}
    for t in terminals[1:]:
        representatives.setdefault(colours[t], t)
    cuts: list[Cut] = []
    for t in representatives.values():
        cuts.append(min_cut(g, root, t))
        cuts.append(min_cut(g, t, root))
    best = min(cuts, key=lambda c: (c.value, len(c.edges)))
    return best, cuts


def symmetric(g: nx.DiGraph, edges: Iterable[tuple[Hashable, Hashable, dict[str, object]]]) -> None:
    """Add each edge in both directions with the same attributes (links are full duplex)."""
    for a, b, attrs in edges:
        g.add_edge(a, b, **attrs)
        g.add_edge(b, a, **attrs)
