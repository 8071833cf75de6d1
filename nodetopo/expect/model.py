"""What a placement should deliver: the expected bus-bandwidth band of a collective over the GPUs a
workload holds, the link that limits it, and the assumptions behind it. Pure: no I/O.

Each node becomes a capacity graph (``links``: GB/s per direction on every NVLink, NVSwitch port,
NVLink-C2C, PCIe link, PCIe switch uplink, CPU interconnect and NIC). The binding cut of each
collective algorithm is a min cut found by max-flow, in three stages:

1. inside each *unit* (a host, or the hosts of one multi-node NVLink domain: a GB200/GB300 NVL72
   rack), over the links GPUs use to reach each other (NVLink where they are NVLink-connected, else
   PCIe peer-to-peer through a switch, else host memory): the Steiner min cut between its GPUs;
2. each unit's *egress*: max-flow from its GPUs to its NICs' wires (GPUDirect RDMA through a PCIe
   switch, or through host memory; NVLink to a GPU nearer the NIC, as NCCL's PXN does);
3. the *fabric*: the Steiner min cut between units over their egress and the fabric tiers.

Algorithms turn cuts into a bus-bandwidth bound: a ring sends each rank's share once across every
cut (busbw ≤ cut); a tree between two units sends the whole buffer once per direction (algbw ≤ cut,
so busbw ≤ 2(n-1)/n × cut), between more units twice, as a ring does; NVLS pushes each GPU's buffer
through the switch once (algbw ≤ the GPU's NVLink).
An efficiency band per algorithm and link class (``constants``) turns bounds into the band. NCCL
picks the algorithm, so without one named the band spans every algorithm NCCL might choose.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping, Sequence

from nodetopo.expect import constants as c
from nodetopo.expect.cuts import (
    Fabric,
    Inner,
    Unit,
    class_of,
    fabric_cut,
    inner_cut,
    unit_egress,
)
from nodetopo.expect.links import (
    UNLIMITED,
    ExpectError,
    Link,
    LinkKind,
    NodeView,
    ObservedLink,
    Shape,
    build_shape,
    node_view,
    observed_for,
    shape_key,
    vertex_name,
)
from nodetopo.model import Topology


class Algorithm(enum.StrEnum):
    RING = "Ring"
    TREE = "Tree"
    NVLS = "NVLS"
    NVLS_TREE = "NVLSTree"


#: collectives the model expects, and the algorithms NCCL may run each with
COLLECTIVE_ALGORITHMS: Mapping[str, tuple[Algorithm, ...]] = {
    "all_reduce": (Algorithm.RING, Algorithm.TREE, Algorithm.NVLS, Algorithm.NVLS_TREE),
    "all_gather": (Algorithm.RING,),
    "reduce_scatter": (Algorithm.RING,),
    "broadcast": (Algorithm.RING,),
    "reduce": (Algorithm.RING,),
    "sendrecv": (Algorithm.RING,),
    "alltoall": (Algorithm.RING,),
}


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Placement:
    """The GPUs (and NICs) a workload holds on one node."""

    node: str
    topology: Topology
    gpus: tuple[int, ...] | None = None  #: GPU indices; None: every GPU of the node
    nics: tuple[str, ...] | None = None  #: RDMA NICs; None: the nearest NICs of the held GPUs


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Band:
    low: float  #: GB/s busbw at large sizes
    high: float
    expected: float  #: the middle of the most likely algorithm's band

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Bound:
    """What one algorithm can reach: its structural bound, its band, and the cut that binds it."""

    algorithm: Algorithm
    bound: float  #: GB/s busbw at 100 % of the binding cut
    band: Band
    efficiency: c.Efficiency
    stage: str  #: ``intra-node``, ``NVLink domain``, ``network``, ``NVLink SHARP``
    cut: str  #: the binding cut, in words
    limiting: tuple[Link, ...]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Expectation:
    collective: str
    ranks: int
    nodes: tuple[str, ...]
    units: tuple[str, ...]  #: hosts, or NVLink domains spanning several of them
    domains: tuple[str, ...]  #: multi-node NVLink domains the placement's nodes are in
    fabric_span: str  #: ``one node``, ``one NVLink domain``, ``one leaf``, ``one tier-1 group``, ...
    band: Band
    algorithm: Algorithm  #: the algorithm of ``band.expected`` (the fastest NCCL could pick)
    limiting: tuple[Link, ...]
    limiting_class: str  #: ``NVLink``, ``NVLink SHARP``, ``PCIe``, ``host memory``, ``network``
    bounds: tuple[Bound, ...]
    assumptions: tuple[str, ...]
    observed: tuple[Link, ...] = ()  #: links whose capacity came from an observation

    def bound(self, algorithm: Algorithm) -> Bound | None:
        return next((b for b in self.bounds if b.algorithm is algorithm), None)


# --------------------------------------------------------------------------------------------
# Bands
# --------------------------------------------------------------------------------------------


def band_of(bound: float, eff: c.Efficiency) -> Band:
    return Band(low=bound * eff.low, high=bound * eff.high, expected=bound * eff.mid)


def _lesser(a: Band, b: Band) -> Band:
    """The band of min(x, y) for x in band a and y in band b."""
    return Band(low=min(a.low, b.low), high=min(a.high, b.high), expected=min(a.expected, b.expected))


def _ring_efficiency(klass: str, gdr: bool) -> c.Efficiency:
    if klass == "NVLink":
        return c.RING_NVLINK
    if klass == "network":
        return c.NET_GDR if gdr else c.NET_HOST
    if klass == "host memory":
        return c.PCIE_HOST
    return c.PCIE_P2P


def _nvls_efficiency(family: str) -> c.Efficiency:
    return c.NVLS_BLACKWELL if family == "Blackwell" else c.NVLS_HOPPER


def algorithms_for(collective: str, nccl_algo: str | None) -> tuple[Algorithm, ...] | None:
    """The algorithms an ``NCCL_ALGO`` value allows (``Ring``, ``NVLS,Tree``, ``^NVLS``); None: all."""
    if not nccl_algo:
        return None
    allowed = COLLECTIVE_ALGORITHMS.get(collective, (Algorithm.RING,))
    text = nccl_algo.strip()
    exclude = text.startswith("^")
    known = {a.value.lower(): a for a in Algorithm}
    named = {known[n.strip().lower()] for n in text.lstrip("^").split(",") if n.strip().lower() in known}
    picked = tuple(a for a in allowed if (a in named) != exclude)
    return picked or None


# --------------------------------------------------------------------------------------------
# The expectation
# --------------------------------------------------------------------------------------------


def expect(
    placements: Sequence[Placement],
    collective: str = "all_reduce",
    *,
    algorithms: Sequence[Algorithm] | None = None,
    observed: Iterable[ObservedLink] = (),
    oversubscription: float = 1.0,
) -> Expectation:
    """The band a collective over ``placements`` should reach at large sizes (see the module doc)."""
    if collective not in COLLECTIVE_ALGORITHMS:
        raise ExpectError(f"collective {collective!r}: the model expects {', '.join(COLLECTIVE_ALGORITHMS)}")
    if not placements:
        raise ExpectError("no placement: name at least one node and its GPUs")
    names = [p.node for p in placements]
    if len(set(names)) != len(names):
        raise ExpectError("a node is listed twice")
    if not oversubscription >= 1:
        raise ExpectError(f"oversubscription {oversubscription:g}: must be at least 1 (1 = non-blocking)")
    notes: set[str] = set()
    views = [node_view(p.node, p.topology, p.gpus, p.nics, notes) for p in placements]
    ranks = sum(len(v.gpus) for v in views)
    if ranks < 2:
        raise ExpectError(f"{ranks} rank: a collective needs at least two GPUs")
    observed = tuple(observed)
    by_node: dict[str, tuple[ObservedLink, ...]] = {}
    for o in observed:
        by_node.setdefault(o.node, ())
        by_node[o.node] += (o,)
    shapes: dict[tuple[object, ...], Shape] = {}
    shape_of: dict[str, Shape] = {}
    per_node: dict[str, list[str]] = {}  #: a node's assumption -> the nodes it holds for
    for v in views:
        mine = by_node.get(v.name, ())
        key = shape_key(v, tuple(sorted(mine, key=repr)))
        shape = shapes.get(key)
        if shape is None:
            try:
                shape = shapes[key] = build_shape(v, observed_for(mine, v.name))
            except ExpectError as e:
                raise ExpectError(f"{v.name}: {e}") from None
        shape_of[v.name] = shape
        for n in v.notes | shape.notes:
            per_node.setdefault(n, []).append(v.name)
    for n, where in per_node.items():
        notes.add(
            f"{where[0]}: {n}" if len(where) == 1 else f"{len(where)} nodes ({where[0]} … {where[-1]}): {n}"
        )
    units = _units(views, shape_of)
    multi = len(units) > 1
    inner_cache: dict[int, Inner | None] = {}
    egress_cache: dict[int, tuple[float, tuple[Link, ...]]] = {}
    for u in units:
        nvls_ok = all(s.nvls for h in u.hosts for s in h.specs.values())
        u.family = next(iter(u.hosts[0].specs.values())).family
        if len(u.hosts) == 1:
            shape = u.shapes[0]
            if id(shape) not in inner_cache:
                inner_cache[id(shape)] = inner_cut(shape.transport, shape.gpus, nvls_ok)
            u.inner = _renamed_inner(inner_cache[id(shape)], u.hosts[0].name)
        else:
            links = [
                link.renamed(h.name) for h, s in zip(u.hosts, u.shapes, strict=True) for link in s.transport
            ]
            terminals = [f"gpu:{h.name}:{g.index}" for h in u.hosts for g in h.gpus]
            u.inner = inner_cut(links, terminals, nvls_ok)
        if multi:
            for h, s in zip(u.hosts, u.shapes, strict=True):
                if s.unrated:
                    raise ExpectError(
                        f"{h.name}: NIC {s.unrated[0]} has no rate in its NodeTopology (rateGbps): its wire "
                        "cannot "
                        "be judged"
                    )
            best: tuple[float, tuple[Link, ...], bool, NodeView] | None = None
            for h, s in zip(u.hosts, u.shapes, strict=True):
                if id(s) not in egress_cache:
                    egress_cache[id(s)] = unit_egress(s)
                value, links_out = egress_cache[id(s)]
                if best is None or value > best[0]:
                    best = (value, links_out, s.gdr, h)
            assert best is not None
            u.egress, u.gdr = best[0], best[2]
            u.egress_cut = (best[1], best[3].name)
            if not any(s.has_nics for s in u.shapes):
                raise ExpectError(
                    f"{vertex_name(u.name)}: no RDMA NIC: NCCL would fall back to TCP sockets, which the "
                    "model does not cover"
                )
            if len(u.hosts) > 1:
                notes.add(
                    f"{vertex_name(u.name)}: traffic leaving the NVLink domain is modelled through one "
                    "host's NICs "
                    f"({u.egress:g} GB/s): NCCL treats the domain as one node and its inter-node channels "
                    "follow one "
                    "host's NIC count (calibrated: GB300 NVL72, 2 racks, 738 GB/s = 0.93 of 8 × 400 Gb/s in "
                    "a tree)"
                )
            tiers = max(u.hosts, key=lambda h: len(h.topology.network.tiers)).topology.network.tiers
            u.tiers = tuple(f"tier:{t.level}:{t.id}" for t in sorted(tiers, key=lambda t: t.level))
    fabric = fabric_cut(units, oversubscription) if multi else None
    if fabric is not None:
        span = fabric.span
    else:
        span = "one node" if len(views) == 1 else "one NVLink domain"
    bounds = _bounds(collective, units, fabric, ranks, algorithms, notes)
    top = max(bounds, key=lambda b: b.band.expected)
    band = Band(
        low=min(b.band.low for b in bounds), high=max(b.band.high for b in bounds), expected=top.band.expected
    )
    if not multi:  # which NICs a placement holds matters only between units
        notes = {n for n in notes if not n.startswith("NICs: ")}
    notes.update(_assumptions(collective, bounds, algorithms, multi, oversubscription, units, views))
    observed_links: dict[int, list[Link]] = {}
    for shape in shapes.values():
        observed_links[id(shape)] = [x for x in dict.fromkeys(shape.egress + shape.transport) if x.observed]
    seen_links = tuple(link.renamed(v.name) for v in views for link in observed_links[id(shape_of[v.name])])
    return Expectation(
        collective=collective,
        ranks=ranks,
        nodes=tuple(names),
        units=tuple(vertex_name(u.name) if u.name.startswith("nvdomain:") else u.name for u in units),
        domains=tuple(sorted({v.domain for v in views if v.domain})),
        fabric_span=span,
        band=band,
        algorithm=top.algorithm,
        limiting=top.limiting,
        limiting_class="NVLink SHARP" if top.stage == "NVLink SHARP" else class_of(top.limiting),
        bounds=tuple(bounds),
        assumptions=tuple(sorted(notes)),
        observed=seen_links,
    )


def _renamed_inner(inner: Inner | None, node: str) -> Inner | None:
    if inner is None:
        return None
    return dataclasses.replace(
        inner,
        limiting=tuple(x.renamed(node) for x in inner.limiting),
        nvls=(inner.nvls[0], tuple(x.renamed(node) for x in inner.nvls[1])) if inner.nvls else None,
    )


def _units(views: Sequence[NodeView], shape_of: Mapping[str, Shape]) -> list[Unit]:
    """Hosts, except the hosts of one multi-node NVLink domain, which form one unit."""
    by_domain: dict[str, list[NodeView]] = {}
    for v in views:
        if v.domain:
            by_domain.setdefault(v.domain, []).append(v)
    units: list[Unit] = []
    seen: set[str] = set()
    for v in views:
        if v.domain and len(by_domain[v.domain]) > 1:
            if v.domain not in seen:
                seen.add(v.domain)
                hosts = by_domain[v.domain]
                units.append(
                    Unit(
                        name=f"nvdomain:{v.domain}",
                        hosts=hosts,
                        shapes=[shape_of[h.name] for h in hosts],
                        ranks=sum(len(h.gpus) for h in hosts),
                    )
                )
        else:
            units.append(Unit(name=v.name, hosts=[v], shapes=[shape_of[v.name]], ranks=len(v.gpus)))
    return units


def _bounds(
    collective: str,
    units: Sequence[Unit],
    fabric: Fabric | None,
    ranks: int,
    algorithms: Sequence[Algorithm] | None,
    notes: set[str],
) -> list[Bound]:
    n = float(ranks)
    wanted = tuple(a for a in COLLECTIVE_ALGORITHMS[collective] if algorithms is None or a in algorithms)
    if not wanted:
        raise ExpectError(
            f"{collective}: none of the algorithms {', '.join(map(str, algorithms or ()))} runs it"
        )
    with_inner = [u for u in units if u.inner is not None]
    inner_unit = min(with_inner, key=lambda u: u.inner.value if u.inner else 0.0) if with_inner else None
    inner = inner_unit.inner if inner_unit else None
    # Ring: busbw ≤ every cut
    candidates: list[tuple[float, tuple[Link, ...], c.Efficiency, str, str]] = []
    if inner is not None:
        where = "the smallest cut between the GPUs" + (" of one unit" if fabric else "")
        candidates.append(
            (inner.value, inner.limiting, _ring_efficiency(inner.klass, True), inner.klass, where)
        )
    if fabric is not None:
        gdr = fabric.binding.gdr if fabric.binding else True
        where = "one unit's egress to the network" if fabric.binding else "a fabric uplink"
        candidates.append((fabric.value, fabric.limiting, _ring_efficiency("network", gdr), "network", where))
    if not candidates:
        raise ExpectError("no cut between the placement's GPUs")
    value, limiting, eff, klass, where = min(candidates, key=lambda x: x[0])
    if value <= 0:
        raise ExpectError(
            "a cut of the placement carries nothing (a NIC down, no link between GPUs): no band"
        )
    if collective == "alltoall":
        value, limiting, where = _alltoall(units, fabric, ranks, (value, limiting, where))
        eff = dataclasses.replace(
            eff,
            low=eff.low * c.ALLTOALL_WIDEN,
            calibrated=False,
            basis=eff.basis + "; all-to-all: widened, uncalibrated",
        )
        notes.add(
            "all-to-all: bound from the cuts the flow computation found, weighted by the ranks each side "
            "holds; "
            "no published all-to-all measurement calibrates it"
        )
    bounds: list[Bound] = []
    stage = "network" if klass == "network" else "intra-node"
    if Algorithm.RING in wanted:
        bounds.append(
            Bound(
                algorithm=Algorithm.RING,
                bound=value,
                band=band_of(value, eff),
                efficiency=eff,
                stage=stage,
                cut=where,
                limiting=limiting,
            )
        )
    if collective != "all_reduce":
        return _nonempty(bounds, collective, wanted)
    if fabric is not None:
        tree_eff = c.TREE_NET if (fabric.binding is None or fabric.binding.gdr) else c.NET_HOST
        # NCCL's double binary tree: between two units each sends and receives the buffer once per direction
        # (algbw ≤ egress); with more, an interior unit forwards its half to two children and its other half
        # as a leaf, twice the buffer, as much as a ring sends
        per_unit = 1.0 if len(units) == 2 else 2.0
        tree_value = 2 * (n - 1) / n * fabric.value / per_unit
        net_part = band_of(tree_value, tree_eff)
        if Algorithm.TREE in wanted:
            if inner is not None:
                chain_eff = _ring_efficiency(inner.klass, True)
                chain = band_of((n - 1) / n * inner.value, chain_eff)
            else:
                chain_eff, chain = tree_eff, Band(low=UNLIMITED, high=UNLIMITED, expected=UNLIMITED)
            net_binds = net_part.expected <= chain.expected
            bounds.append(
                Bound(
                    algorithm=Algorithm.TREE,
                    bound=min(tree_value, (n - 1) / n * inner.value if inner else UNLIMITED),
                    band=_lesser(net_part, chain),
                    efficiency=tree_eff if net_binds else chain_eff,
                    stage="network" if net_binds else "intra-node",
                    cut=(
                        "each of two units sends the buffer once: "
                        if per_unit == 1
                        else "an interior unit sends it twice: "
                    )
                    + ("its egress" if net_binds else "the chain through a unit's GPUs"),
                    limiting=fabric.limiting if net_binds or inner is None else inner.limiting,
                )
            )
        nvls_units = [u for u in units if u.inner is not None and u.inner.nvls is not None]
        if Algorithm.NVLS_TREE in wanted and nvls_units and len(nvls_units) == len(units):
            weakest = min(nvls_units, key=lambda u: u.inner.nvls[0] if u.inner and u.inner.nvls else 0.0)
            assert weakest.inner is not None and weakest.inner.nvls is not None
            nv_value, nv_links = weakest.inner.nvls
            nv_eff = _nvls_efficiency(weakest.family)
            nv_part = band_of(2 * (n - 1) / n * nv_value, nv_eff)
            nv_binds = nv_part.expected <= net_part.expected
            bounds.append(
                Bound(
                    algorithm=Algorithm.NVLS_TREE,
                    bound=min(2 * (n - 1) / n * nv_value, tree_value),
                    band=_lesser(nv_part, net_part),
                    efficiency=nv_eff if nv_binds else tree_eff,
                    stage="NVLink SHARP" if nv_binds else "network",
                    cut="NVLink SHARP inside each unit, a tree between units: "
                    + ("a GPU's NVLink into the switch" if nv_binds else "a unit's egress"),
                    limiting=nv_links if nv_binds else fabric.limiting,
                )
            )
    elif Algorithm.NVLS in wanted and inner is not None and inner.nvls is not None:
        nv_value, nv_links = inner.nvls
        nv_eff = _nvls_efficiency(units[0].family)
        bound = 2 * (n - 1) / n * nv_value
        bounds.append(
            Bound(
                algorithm=Algorithm.NVLS,
                bound=bound,
                band=band_of(bound, nv_eff),
                efficiency=nv_eff,
                stage="NVLink SHARP",
                cut="each GPU's buffer goes into the switch once and comes back reduced: its NVLink into the "
                "switch",
                limiting=nv_links,
            )
        )
    return _nonempty(bounds, collective, wanted)


def _nonempty(bounds: list[Bound], collective: str, wanted: Sequence[Algorithm]) -> list[Bound]:
    if not bounds:
        raise ExpectError(f"{collective}: none of {', '.join(map(str, wanted))} can run on this placement")
    return bounds


def _alltoall(
    units: Sequence[Unit],
    fabric: Fabric | None,
    ranks: int,
    ring: tuple[float, tuple[Link, ...], str],
) -> tuple[float, tuple[Link, ...], str]:
    """All-to-all sends 1/(n-1) of each rank's traffic to every other rank: a cut with k ranks on one
    side carries k(n-k)/(n-1) ranks' worth; the bound is capacity × (n-1)/(k(n-k)) at its smallest over
    the cuts the flows found."""
    n = ranks
    scored: list[tuple[float, tuple[Link, ...], str]] = []
    for u in units:
        if u.inner is not None:
            scored += [
                (v * (n - 1) / (k * (n - k)), u.inner.limiting, "a cut inside a unit")
                for v, k in u.inner.cuts
                if 0 < k < n
            ]
    if fabric is not None:
        scored += [
            (v * (n - 1) / (k * (n - k)), fabric.limiting, "a cut between units")
            for v, k in fabric.cuts
            if 0 < k < n
        ]
    return min(scored, key=lambda x: x[0]) if scored else ring


def _assumptions(
    collective: str,
    bounds: Sequence[Bound],
    algorithms: Sequence[Algorithm] | None,
    multi: bool,
    oversubscription: float,
    units: Sequence[Unit],
    views: Sequence[NodeView],
) -> set[str]:
    out = {
        "sizes: the band is for the bus bandwidth at the largest sizes of a sweep reaching at least 1 GiB",
        "software: the NCCL version, its tuning and any virtualisation are not known; a hypervisor that "
        "hides "
        "the PCIe topology, or an old NCCL, can fall below the band",
    }
    if algorithms is None and len(bounds) > 1:
        out.add(
            "algorithm: NCCL_ALGO not given: the band spans "
            + ", ".join(str(b.algorithm) for b in bounds)
            + " (NCCL picks); naming the algorithm narrows it"
        )
    if any(b.algorithm in (Algorithm.NVLS, Algorithm.NVLS_TREE) for b in bounds):
        out.add(
            "NVLS: needs NCCL 2.17 or later, the Fabric Manager (IMEX across hosts) and NCCL_NVLS_ENABLE not "
            "0"
        )
    if collective == "all_reduce" and multi:
        out.add("CollNet / SHARP in-network reduction is not modelled: with it a run may exceed the band")
    if collective in ("all_gather", "reduce_scatter"):
        out.add(
            f"{collective}: ring only; its NVLS and PAT variants are not modelled and may exceed the band"
        )
    if collective == "sendrecv":
        out.add(
            "sendrecv: each rank sends to the next; consecutive ranks assumed on one host, as mpirun places "
            "them"
        )
    if collective in ("broadcast", "reduce"):
        out.add(f"{collective}: a pipelined chain, bounded as a ring")
    if multi and oversubscription == 1:
        out.add(
            "fabric: non-blocking above each unit (its oversubscription is not published); give it to tighten"
        )
    if multi and any(not u.gdr for u in units):
        out.add(
            "GPUDirect RDMA only where a NIC is PIX/PXB to a held GPU (NCCL_NET_GDR_LEVEL's default); the "
            "others "
            "are fed through host memory"
        )
    if multi and any(s.c2c for v in views for s in v.specs.values()):
        out.add("Grace hosts: GPUDirect RDMA over NVLink-C2C assumed (NCCL_NET_GDR_C2C)")
    limiting = [link for b in bounds for link in b.limiting]
    if any(link.kind is LinkKind.SMP and link.capacity < UNLIMITED for link in limiting):
        out.add(f"CPU interconnect: {c.SMP_GBS:g} GB/s assumed (the CPU model is not in the NodeTopology)")
    if any(link.kind in (LinkKind.PCIE, LinkKind.PCIE_UPLINK) and not link.observed for link in limiting):
        out.add(
            "PCIe: x16 links at the generation of the GPU or NIC model assumed (link width and speed not "
            "observed)"
        )
    return out
