"""The capacity graph of one node: every link the GPUs a workload holds can use, with its capacity.

A node's links depend only on its *shape* (the held GPUs' models, NUMA nodes and NVLink links, the
PCIe classes between them and to the used NICs, the NICs' rates and states, the observed links): the
1,024 nodes of a gang of one machine type share one shape, so the links are built once per shape
with a placeholder node name (``@``) and renamed only where a report names them.

Vertex ids: ``gpu:<node>:<i>``, ``nvswitch:<node>:<island>``, ``nvdomain:<cluster>.<clique>`` (a
multi-node NVLink domain, shared by its hosts), ``pcisw:<node>:<k>`` (a PCIe switch, found from the
PIX/PXB classes), ``host:<node>:<numa>`` (a NUMA node's root complex and memory), ``nic:<node>:<name>``,
``out:<node>`` (the NICs' wires).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping

import networkx as nx

from nodetopo.errors import NodetopoError
from nodetopo.expect import constants as c
from nodetopo.expect.hardware import UNKNOWN, GpuSpec, gpu_spec, nic_pcie_generation
from nodetopo.model import Gpu, LinkClass, Nic, Topology

PLACEHOLDER = "@"
_GDR_LEVEL = LinkClass[c.GDR_MAX_CLASS]
#: a same-socket NUMA hop, and the source's feed into GPUs, are not modelled as limiting
UNLIMITED = 1e6


class ExpectError(NodetopoError):
    """A placement the model cannot judge: a GPU that is not there, one rank, NIC rates unknown."""


class LinkKind(enum.StrEnum):
    NVLINK = "NVLink"  #: GPU to GPU, direct
    NVSWITCH = "NVSwitch"  #: GPU to its NVSwitch fabric (one host's, or a multi-node NVLink domain's)
    C2C = "NVLink-C2C"  #: GPU to its Grace CPU
    PCIE = "PCIe"  #: a device's own PCIe link
    PCIE_UPLINK = "PCIe switch uplink"
    SMP = "CPU interconnect"
    NIC = "NIC"  #: the NIC's wire
    FABRIC = "fabric uplink"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ObservedLink:
    """An observed state of one link: replaces its nominal capacity (the edge-health hook).

    ``device``: ``gpu:<index>`` or ``nic:<name>``; ``peer`` names the other GPU of a direct NVLink
    bundle. ``pcie_width`` × ``pcie_gts`` (the negotiated link: ``current_link_width`` and
    ``current_link_speed``) replace a device's PCIe link; ``nvlinks`` (active links) its NVLink
    count; ``rate_gbps`` and ``state`` a NIC's wire.
    """

    node: str
    device: str
    peer: str | None = None
    pcie_width: int | None = None
    pcie_gts: float | None = None
    nvlinks: int | None = None
    rate_gbps: float | None = None
    state: str | None = None
    source: str = "observed"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Link:
    """One capacity edge of the graph, as the model reports it."""

    kind: LinkKind
    a: str
    b: str
    node: str | None
    capacity: float  #: GB/s per direction
    nominal: float
    basis: str  #: ``18 × NVLink4 (25 GB/s)``, ``x8 at 16 GT/s (observed)`` ...
    observed: bool = False

    @property
    def label(self) -> str:
        ends = f"{vertex_name(self.a)} ↔ {vertex_name(self.b)}"
        return f"{ends}: {self.kind} {self.capacity:g} GB/s ({self.basis})"

    def renamed(self, node: str) -> Link:
        if self.node != PLACEHOLDER:
            return self
        return Link(
            kind=self.kind,
            a=_rename(self.a, node),
            b=_rename(self.b, node),
            node=node,
            capacity=self.capacity,
            nominal=self.nominal,
            basis=self.basis,
            observed=self.observed,
        )


def _rename(vertex: str, node: str) -> str:
    kind, _, rest = vertex.partition(":")
    if rest == PLACEHOLDER:
        return f"{kind}:{node}"
    if rest.startswith(PLACEHOLDER + ":"):
        return f"{kind}:{node}{rest[1:]}"
    return vertex


#: a vertex id's name for people, by its kind: from ``rest`` (after ``kind:``), or from its ``node`` and
#: ``local`` part (``kind:node:local``)
_VERTEX_NAMES = {
    "gpu": "{node}/GPU{local}",
    "nic": "{node}/{local}",
    "nvswitch": "{node}/NVSwitch",
    "nvdomain": "NVLink domain {rest}",
    "host": "{node}/NUMA{local}",
    "pcisw": "{node}/PCIe switch {local}",
    "out": "{rest}/network",
    "tier": "fabric tier {rest}",
}


def vertex_name(vertex: str) -> str:
    """A vertex id for people: ``gpu:n1:3`` -> ``n1/GPU3``."""
    kind, _, rest = vertex.partition(":")
    if kind == "unit":
        return vertex_name(rest) if ":" in rest else rest
    template = _VERTEX_NAMES.get(kind)
    if template is None:
        return vertex
    node, _, local = rest.rpartition(":")
    return template.format(node=node, local=local, rest=rest)


def gpu_vertex(node: str, index: int) -> str:
    return f"gpu:{node}:{index}"


# --------------------------------------------------------------------------------------------
# What a placement holds on one node
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(slots=True)
class NodeView:
    name: str
    topology: Topology
    gpus: tuple[Gpu, ...]
    specs: dict[int, GpuSpec]
    nics: tuple[Nic, ...]
    gdr_nics: frozenset[str]
    domain: str | None
    notes: set[str] = dataclasses.field(default_factory=set)  #: assumptions about this node alone


def domain_of(topology: Topology) -> str | None:
    """The node's multi-node NVLink domain (``<clusterUUID>.<cliqueID>``) when its fabric is up."""
    f = topology.fabric
    if f is None or f.state != "COMPLETED" or (f.health not in (None, "") and f.health.upper() != "HEALTHY"):
        return None
    return f"{f.cluster_uuid}.{f.clique_id}"


def node_view(
    node: str, topology: Topology, gpus: tuple[int, ...] | None, nics: tuple[str, ...] | None, notes: set[str]
) -> NodeView:
    by_index = {g.index: g for g in topology.gpus}
    indices = tuple(sorted(by_index)) if gpus is None else gpus
    missing = [i for i in indices if i not in by_index]
    if missing:
        raise ExpectError(f"{node}: no GPU {', '.join(map(str, missing))} in its NodeTopology")
    if len(set(indices)) != len(indices):
        raise ExpectError(f"{node}: a GPU is listed twice in {list(indices)}")
    held = tuple(by_index[i] for i in indices)
    if any(g.mig_enabled for g in held):
        raise ExpectError(
            f"{node}: MIG is enabled on a held GPU: NCCL does not run collectives across MIG devices"
        )
    specs: dict[int, GpuSpec] = {}
    own: set[str] = set()  #: what holds for this node (the caller names it)
    for g in held:
        spec = gpu_spec(g.model)
        if spec is None:
            own.add(
                f"GPU model {g.model or 'unknown'} is not in the model's table: PCIe Gen4 x16 and "
                f"{UNKNOWN.nvlink_gbs_per_link:g} GB/s per NVLink assumed"
            )
            spec = UNKNOWN
        specs[g.index] = spec
    rdma = {n.name: n for n in topology.nics if n.rdma}
    if nics is not None:
        unknown = [n for n in nics if n not in rdma]
        if unknown:
            raise ExpectError(f"{node}: no RDMA NIC {', '.join(unknown)} in its NodeTopology")
        names = nics
    else:
        names = tuple(sorted({n for g in held for n in g.nearest_nics if n in rdma}))
        if names:
            notes.add(
                "NICs: where a placement names none, the nearest RDMA NICs of its GPUs (what NCCL picks on a "
                "whole node; a pod gets only the RDMA devices allocated to it)"
            )
    held_set = {g.index for g in held}
    name_set = set(names)
    gdr: set[str] = set()
    for d in topology.gpu_nic_distances:
        if d.nic in name_set and d.gpu in held_set and (d.distance <= _GDR_LEVEL or specs[d.gpu].c2c):
            gdr.add(d.nic)
    return NodeView(
        node, topology, held, specs, tuple(rdma[n] for n in names), frozenset(gdr), domain_of(topology), own
    )


def numa_of(g: Gpu) -> int:
    if g.numa_node is not None:
        return g.numa_node
    if g.numa_affinity:
        return min(g.numa_affinity)
    return 0


def shape_key(view: NodeView, observed: tuple[ObservedLink, ...]) -> tuple[object, ...]:
    """Everything the node's links depend on, and nothing else (not its name, UUIDs or addresses)."""
    t = view.topology
    held = {g.index for g in view.gpus}
    names = {n.name for n in view.nics}
    return (
        tuple((g.index, g.model, numa_of(g)) for g in view.gpus),
        tuple(
            (i.id, tuple(x for x in i.gpus if x in held), i.links_per_pair, i.nvswitch, i.fully_connected)
            for i in t.nvlink_islands
            if not held.isdisjoint(i.gpus)
        ),
        None
        if t.gpu_links is None
        else tuple(
            (x.a, x.b, x.nvlinks, x.pcie.value if x.pcie is not None else 0)
            for x in t.gpu_links
            if x.a in held and x.b in held
        ),
        tuple((n.name, n.rate_gbps, n.state, n.link_layer, n.numa_node) for n in view.nics),
        # the classes as plain ints: an enum member's hash is a Python call, and the key is hashed per node
        tuple(
            (d.gpu, d.nic, d.distance.value) for d in t.gpu_nic_distances if d.gpu in held and d.nic in names
        ),
        tuple((n.id, n.distances) for n in t.numa_nodes),
        view.domain,
        observed,
    )


# --------------------------------------------------------------------------------------------
# The links of one shape
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(slots=True)
class Shape:
    """The links of one node shape, named with ``PLACEHOLDER`` for the node."""

    transport: list[Link]  #: what GPUs use to reach each other
    egress: list[Link]  #: what they use to reach the network
    gpus: tuple[str, ...]  #: the held GPUs' vertices
    nvlinked: bool  #: every held GPU reaches every other over NVLink
    gdr: bool  #: every used NIC is PIX/PXB (or C2C) to a held GPU
    has_nics: bool
    notes: set[str]
    unrated: tuple[str, ...] = ()  #: used NICs whose rate the NodeTopology does not give


def _pcie(width: int, gen: int) -> float:
    return width * c.PCIE_GBS_PER_LANE[gen]


def _pcie_link(o: ObservedLink | None, nominal_gen: int) -> tuple[float, float, str, bool]:
    nominal = _pcie(c.PCIE_NOMINAL_WIDTH, nominal_gen)
    if o is None or (o.pcie_width is None and o.pcie_gts is None):
        return nominal, nominal, f"x{c.PCIE_NOMINAL_WIDTH} Gen{nominal_gen}, nominal", False
    width = o.pcie_width if o.pcie_width is not None else c.PCIE_NOMINAL_WIDTH
    gen = nominal_gen
    if o.pcie_gts is not None:
        gts = o.pcie_gts
        gen = min(c.PCIE_GTS, key=lambda k: abs(c.PCIE_GTS[k] - gts))
    return _pcie(width, gen), nominal, f"x{width} at {c.PCIE_GTS[gen]:g} GT/s, {o.source}", True


def build_shape(view: NodeView, observed: Mapping[tuple[str, str | None], ObservedLink]) -> Shape:
    """The links of ``view``'s node (``observed``: by (device, peer) for this node)."""
    node = PLACEHOLDER
    t = view.topology
    held = {g.index: g for g in view.gpus}
    notes: set[str] = set()
    transport: list[Link] = []
    egress: list[Link] = []
    nv_pairs: list[tuple[str, str]] = []

    def add(link: Link, *, to_transport: bool) -> None:
        egress.append(link)
        if to_transport:
            transport.append(link)

    # --- NVLink: NVSwitch islands (or the multi-node NVLink domain), then direct bundles -----------
    switched: set[int] = set()
    for island in t.nvlink_islands:
        members = [i for i in island.gpus if i in held]
        if not members or not island.nvswitch:
            continue
        switch = f"nvdomain:{view.domain}" if view.domain else f"nvswitch:{node}:{island.id}"
        for i in members:
            spec = view.specs[i]
            rate = spec.nvlink_gbs_per_link or UNKNOWN.nvlink_gbs_per_link or 0.0
            o = observed.get((f"gpu:{i}", None))
            count = o.nvlinks if o is not None and o.nvlinks is not None else island.links_per_pair
            family = f"NVLink{spec.nvlink_generation}" if spec.nvlink_generation else "NVLink"
            seen = o is not None and o.nvlinks is not None
            basis = f"{count} × {family} at {rate:g} GB/s"
            if seen:
                assert o is not None
                basis += f", {o.source}: {count} of {island.links_per_pair} active"
            add(
                Link(
                    kind=LinkKind.NVSWITCH,
                    a=gpu_vertex(node, i),
                    b=switch,
                    node=node,
                    capacity=count * rate,
                    nominal=island.links_per_pair * rate,
                    basis=basis,
                    observed=seen,
                ),
                to_transport=True,
            )
            switched.add(i)
            nv_pairs.append((gpu_vertex(node, i), switch))
    if view.domain:
        for i in held:
            if i in switched:
                continue
            spec = view.specs[i]
            nominal_links = spec.links or 18
            rate = spec.nvlink_gbs_per_link or 0.0
            notes.add(
                f"GPU{i} is in NVLink domain {view.domain} but in no NVSwitch island: {nominal_links} links "
                "assumed"
            )
            o = observed.get((f"gpu:{i}", None))
            count = o.nvlinks if o is not None and o.nvlinks is not None else nominal_links
            add(
                Link(
                    kind=LinkKind.NVSWITCH,
                    a=gpu_vertex(node, i),
                    b=f"nvdomain:{view.domain}",
                    node=node,
                    capacity=count * rate,
                    nominal=nominal_links * rate,
                    basis=f"{count} × NVLink at {rate:g} GB/s (link count assumed)",
                    observed=o is not None and o.nvlinks is not None,
                ),
                to_transport=True,
            )
            switched.add(i)
            nv_pairs.append((gpu_vertex(node, i), f"nvdomain:{view.domain}"))
    pairs: list[tuple[int, int, int]] = []
    if t.gpu_links is not None:
        pairs = [
            (x.a, x.b, x.nvlinks)
            for x in t.gpu_links
            if x.nvlinks and x.a in held and x.b in held and not (x.a in switched and x.b in switched)
        ]
    else:
        for island in t.nvlink_islands:
            if island.nvswitch:
                continue
            members = sorted(i for i in island.gpus if i in held)
            if not island.fully_connected and len(members) > 2:
                notes.add(
                    f"island {island.id} is not fully connected and its GPU pairs are not published: every "
                    "pair "
                    f"assumed to have {island.links_per_pair} links"
                )
            pairs += [(a, b, island.links_per_pair) for k, a in enumerate(members) for b in members[k + 1 :]]
    for a, b, bundle in pairs:
        rate = min(view.specs[a].nvlink_gbs_per_link or 0.0, view.specs[b].nvlink_gbs_per_link or 0.0)
        rate = rate or (UNKNOWN.nvlink_gbs_per_link or 0.0)
        o = observed.get((f"gpu:{a}", f"gpu:{b}")) or observed.get((f"gpu:{b}", f"gpu:{a}"))
        seen = o is not None and o.nvlinks is not None
        count = o.nvlinks if o is not None and o.nvlinks is not None else bundle
        add(
            Link(
                kind=LinkKind.NVLINK,
                a=gpu_vertex(node, a),
                b=gpu_vertex(node, b),
                node=node,
                capacity=count * rate,
                nominal=bundle * rate,
                basis=f"{count} × NVLink at {rate:g} GB/s"
                + (f", {o.source}: {count} of {bundle} active" if o and seen else ""),
                observed=seen,
            ),
            to_transport=True,
        )
        nv_pairs.append((gpu_vertex(node, a), gpu_vertex(node, b)))
    components = nx.Graph()
    components.add_nodes_from(gpu_vertex(node, i) for i in held)
    components.add_edges_from(nv_pairs)
    nvlinked = (
        sum(1 for part in nx.connected_components(components) if any(v.startswith("gpu:") for v in part)) <= 1
    )
    # --- PCIe: switch groups from the PIX/PXB classes, host bridges, the CPU interconnect ----------
    p2p = LinkClass[c.P2P_MAX_CLASS]
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.get(x, x) != x:
            x = parent[x]
        return x

    def union(x: str, y: str) -> None:
        parent.setdefault(x, x)
        parent.setdefault(y, y)
        parent[find(x)] = find(y)

    pcie_gpus = {i for i in held if not view.specs[i].c2c and view.specs[i].p2p}
    if t.gpu_links is not None:
        for x in t.gpu_links:
            if x.a in pcie_gpus and x.b in pcie_gpus and x.pcie is not None and x.pcie <= p2p:
                union(f"g{x.a}", f"g{x.b}")
    nic_names = {n.name for n in view.nics}
    for dist in t.gpu_nic_distances:
        if (
            dist.gpu in held
            and not view.specs[dist.gpu].c2c
            and dist.nic in nic_names
            and dist.distance <= p2p
        ):
            union(f"g{dist.gpu}", f"n{dist.nic}")
    roots = sorted({find(member) for member in parent}, key=lambda r: (r[0] != "g", len(r), r))
    number = {root: k for k, root in enumerate(roots)}
    group_of = {member: f"pcisw:{node}:{number[find(member)]}" for member in parent}
    numa_used: set[int] = set()
    group_gens: dict[str, list[int]] = {}
    group_numa: dict[str, int] = {}
    for i, g in held.items():
        spec = view.specs[i]
        numa = numa_of(g)
        numa_used.add(numa)
        host = f"host:{node}:{numa}"
        if spec.c2c:
            add(
                Link(
                    kind=LinkKind.C2C,
                    a=gpu_vertex(node, i),
                    b=host,
                    node=node,
                    capacity=c.NVLINK_C2C_GBS,
                    nominal=c.NVLINK_C2C_GBS,
                    basis="NVLink-C2C to its Grace CPU",
                ),
                to_transport=not nvlinked,
            )
            continue
        cap, nominal, basis, seen = _pcie_link(observed.get((f"gpu:{i}", None)), spec.pcie_generation)
        group = group_of.get(f"g{i}")
        if group is not None:
            group_gens.setdefault(group, []).append(spec.pcie_generation)
            group_numa.setdefault(group, numa)
        add(
            Link(
                kind=LinkKind.PCIE,
                a=gpu_vertex(node, i),
                b=group or host,
                node=node,
                capacity=cap,
                nominal=nominal,
                basis=basis,
                observed=seen,
            ),
            to_transport=not nvlinked,
        )
    if not nvlinked and any(not view.specs[i].p2p for i in held):
        notes.add(
            "GeForce boards: PCIe peer-to-peer is off in their driver, so they exchange through host memory"
        )
    unrated: list[str] = []
    for n in view.nics:
        if n.rate_gbps is None:
            unrated.append(n.name)  # an unknown rate is not a zero rate: only a network stage refuses it
            continue
        numa = n.numa_node if n.numa_node is not None else (min(numa_used) if numa_used else 0)
        numa_used.add(numa)
        group = group_of.get(f"n{n.name}")
        nic_gen = nic_pcie_generation(n.rate_gbps)
        if group is not None:
            group_gens.setdefault(group, []).append(nic_gen)
            group_numa.setdefault(group, numa)
        o = observed.get((f"nic:{n.name}", None))
        cap, nominal, basis, seen = _pcie_link(o, nic_gen)
        egress.append(
            Link(
                kind=LinkKind.PCIE,
                a=f"nic:{node}:{n.name}",
                b=group or f"host:{node}:{numa}",
                node=node,
                capacity=cap,
                nominal=nominal,
                basis=basis + " (the slot its rate needs)" if not seen else basis,
                observed=seen,
            )
        )
        rate = o.rate_gbps if o is not None and o.rate_gbps is not None else n.rate_gbps
        state = (o.state if o is not None and o.state is not None else n.state) or ""
        down = bool(state) and state.upper() not in ("ACTIVE", "UP", "LINKUP")
        wire_basis = f"{rate:g} Gb/s {n.link_layer or 'network'}"
        if down:
            wire_basis += f", state {state}"
        if n.name not in view.gdr_nics:
            wire_basis += ", through host memory (no GPUDirect RDMA)"
        if o is not None and (o.rate_gbps is not None or o.state is not None):
            wire_basis += f", {o.source}"
        egress.append(
            Link(
                kind=LinkKind.NIC,
                a=f"nic:{node}:{n.name}",
                b=f"out:{node}",
                node=node,
                capacity=0.0 if down else rate / c.BITS_PER_BYTE,
                nominal=n.rate_gbps / c.BITS_PER_BYTE,
                basis=wire_basis,
                observed=o is not None and (o.rate_gbps is not None or o.state is not None),
            )
        )
    for group, gens in group_gens.items():
        uplink_gen = max(gens)
        cap = _pcie(c.PCIE_NOMINAL_WIDTH, uplink_gen)
        add(
            Link(
                kind=LinkKind.PCIE_UPLINK,
                a=group,
                b=f"host:{node}:{group_numa[group]}",
                node=node,
                capacity=cap,
                nominal=cap,
                basis=f"x16 Gen{uplink_gen} (assumed: the switch's uplink matches its devices)",
            ),
            to_transport=not nvlinked,
        )
    distances = {n.id: dict(n.distances) for n in t.numa_nodes}
    used = sorted(numa_used)
    for k, a in enumerate(used):
        for b in used[k + 1 :]:
            slit = distances.get(a, {}).get(b)
            if slit is not None and slit <= c.SAME_SOCKET_MAX_DISTANCE:
                cap, basis = UNLIMITED, f"same socket (SLIT {slit}): not limiting"
            else:
                cap, basis = c.SMP_GBS, f"{c.SMP_GBS:g} GB/s, assumed (the CPU is not published)"
            add(
                Link(
                    kind=LinkKind.SMP,
                    a=f"host:{node}:{a}",
                    b=f"host:{node}:{b}",
                    node=node,
                    capacity=cap,
                    nominal=cap,
                    basis=basis,
                ),
                to_transport=not nvlinked,
            )
    gdr = bool(view.nics) and all(n.name in view.gdr_nics for n in view.nics)
    return Shape(
        transport=transport,
        egress=egress,
        gpus=tuple(gpu_vertex(node, i) for i in held),
        nvlinked=nvlinked,
        gdr=gdr,
        has_nics=bool(view.nics),
        notes=notes,
        unrated=tuple(unrated),
    )


def observed_for(observed: Iterable[ObservedLink], node: str) -> dict[tuple[str, str | None], ObservedLink]:
    return {(o.device, o.peer): o for o in observed if o.node == node}
