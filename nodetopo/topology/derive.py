"""Derivations: small pure functions over the graph that ``nodetopo.topology.graph.build_graph`` returns.

Precedence when several sources know the same fact (see docs/sources.md):

* GPU–GPU NVLink: NVML links > ``nvidia-smi topo -m`` ``NV#`` cells.
* GPU–NIC PCIe class: ``nvidia-smi topo -m`` (the driver's view) is published when present; the
  class computed from the sysfs PCIe tree is used otherwise. When both exist and disagree, an
  ``Inconsistent`` condition names every pair that differs.
* CPU affinity: NVML > ``topo -m`` CPU Affinity > sysfs ``local_cpulist`` of the GPU's function.
* NUMA affinity: ``topo -m`` NUMA Affinity > sysfs ``numa_node`` > the NUMA nodes whose CPUs
  intersect the CPU affinity.

Edge health (``derive_topology``'s ``degraded``, the edges ``nodetopo.health`` published degraded):
the facts follow what the links do, not what they should do.

* A GPU whose NVLinks or NVLink fabric are degraded leaves the NVLink graph: its island is published
  without it (smaller), and its pairs as what PCIe gives them; the rest keep their links.
* A GPU's NIC classes count only healthy paths: a path is degraded when it crosses a degraded edge
  (the NIC's port or PCIe link, the GPU's own PCIe link, a switch uplink between the two). Every
  class is still published (``GpuNicDistance.healthy`` False on such a path: it is where the NIC
  is), but ``nearest_nics`` and ``nic_distance`` are the best *healthy* ones (none: empty and None).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from nodetopo.model import (
    MAX_LINKED_GPUS,
    Condition,
    ConditionReason,
    EdgeHealth,
    EdgeKind,
    FabricInfo,
    Facts,
    Gpu,
    GpuNicDistance,
    LinkClass,
    MigDevice,
    Nic,
    NumaNode,
    PciAddress,
    PciDevice,
    Topology,
)
from nodetopo.topology.graph import (
    GRAPH_SOURCE,
    GpuRecord,
    NicRecord,
    build_graph,
    gpu_id,
    nodes_of,
    pci_device_of,
)
from nodetopo.topology.network import network_position
from nodetopo.topology.nvlink import gpu_links, gpu_nvlinks, nvlink_islands
from nodetopo.topology.preferred import preferred_gpu_sets

if TYPE_CHECKING:
    import networkx as nx

# --------------------------------------------------------------------------------------------
# PCIe
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class PcieIndex:
    """What the PCIe derivations look up again and again, computed once per graph."""

    numa: tuple[NumaNode, ...]
    #: the NUMA node the functions of each root complex agree on (roots that disagree are absent)
    root_numa: dict[str, int]
    #: gpu/nic/nvswitch graph node -> the PCI function it is
    device_of: dict[str, PciDevice]


def pcie_index(g: nx.Graph) -> PcieIndex:
    votes: dict[str, set[int]] = defaultdict(set)
    for _, data in g.nodes(data=True):
        device = data.get("device") if data["kind"] == "pci" else None
        if device is not None and device.root is not None and device.numa_node is not None:
            votes[device.root].add(device.numa_node)
    device_of: dict[str, PciDevice] = {}
    for node, data in g.nodes(data=True):
        if data["kind"] in ("gpu", "nic", "nvswitch"):
            device = pci_device_of(g, node)
            if device is not None:
                device_of[node] = device
    return PcieIndex(
        numa=tuple(g.nodes[n]["node"] for n in nodes_of(g, "numa")),
        root_numa={root: next(iter(ids)) for root, ids in votes.items() if len(ids) == 1},
        device_of=device_of,
    )


def pci_numa_node(index: PcieIndex, device: PciDevice) -> int | None:
    """The NUMA node of a PCI function.

    sysfs ``numa_node`` when the kernel knows it; else the one NUMA node whose CPUs contain the
    function's ``local_cpulist``; else the node the other functions of the same root complex agree
    on; else, on a single-node machine, that node (what hwloc does too). None when unknowable.
    """
    if device.numa_node is not None:
        known: int = device.numa_node
        return known
    if device.local_cpus:
        matching = [n.id for n in index.numa if n.cpus and device.local_cpus <= n.cpus]
        if len(matching) == 1:
            return matching[0]
    if device.root is not None and device.root in index.root_numa:
        return index.root_numa[device.root]
    if len(index.numa) == 1:
        only: int = index.numa[0].id
        return only
    return None


def pcie_link_class(index: PcieIndex, a: PciDevice, b: PciDevice) -> LinkClass:
    """The nvidia-smi class of the path between two PCI functions, from the sysfs PCIe tree.

    * different (or unknown) root complexes: ``NODE`` when both are on the same NUMA node, else ``SYS``;
    * same root complex, no common bridge (they meet at the host bridge): ``PHB``;
    * below a common bridge: ``PIX`` when each is at most one bridge below the deepest common one
      (one switch: downstream port → upstream port → downstream port, or the two functions of one
      device), else ``PXB`` (several switches, still below the host bridge).
    """
    if a.root is None or b.root is None or a.root != b.root:
        na, nb = pci_numa_node(index, a), pci_numa_node(index, b)
        return LinkClass.NODE if na is not None and na == nb else LinkClass.SYS
    common = 0
    for x, y in zip(a.upstream, b.upstream, strict=False):
        if x != y:
            break
        common += 1
    if common == 0:
        return LinkClass.PHB
    below_a, below_b = len(a.upstream) - common, len(b.upstream) - common
    return LinkClass.PIX if max(below_a, below_b) <= 1 else LinkClass.PXB


# --------------------------------------------------------------------------------------------
# GPUs and NICs
# --------------------------------------------------------------------------------------------


def _gpu_records(g: nx.Graph) -> list[GpuRecord]:
    return [g.nodes[n]["record"] for n in nodes_of(g, "gpu")]


def _nic_records(g: nx.Graph) -> list[NicRecord]:
    return [g.nodes[n]["record"] for n in nodes_of(g, "nic")]


def affinity_nics(g: nx.Graph) -> list[str]:
    """The NICs GPU affinity is computed over: the RDMA NICs (what GPUDirect RDMA and NCCL use, and
    what ``nvidia-smi topo -m`` lists); plain Ethernet NICs only on a node without any RDMA NIC."""
    nics = _nic_records(g)
    rdma = [n.name for n in nics if n.rdma]
    return rdma if rdma else [n.name for n in nics]


def gpu_nic_affinity(
    g: nx.Graph, index: PcieIndex
) -> tuple[tuple[GpuNicDistance, ...], tuple[Condition, ...]]:
    """Every (GPU, NIC) PCIe class, from ``topo -m`` and/or the sysfs tree, cross-checked."""
    matrix = g.graph.get("topo_matrix")
    smi: dict[tuple[int, str], LinkClass] = {}
    if matrix is not None:
        nic_names = {t.index: t.name for t in matrix.nics}
        for (gpu, nic), cell in matrix.gpu_nic:
            if cell.pcie is not None and nic in nic_names:
                smi[(gpu, nic_names[nic])] = cell.pcie
    tree: dict[tuple[int, str], LinkClass] = {}
    nic_devices = [
        (name, index.device_of[f"nic:{name}"])
        for name in affinity_nics(g)
        if f"nic:{name}" in index.device_of
    ]
    for gpu_node in nodes_of(g, "gpu"):
        gpu_dev = index.device_of.get(gpu_node)
        if gpu_dev is None:
            continue
        gpu_index = g.nodes[gpu_node]["record"].index
        for name, nic_dev in nic_devices:
            tree[(gpu_index, name)] = pcie_link_class(index, gpu_dev, nic_dev)
    conditions: list[Condition] = []
    disagreements = sorted(
        f"GPU{gpu}–{nic}: nvidia-smi {smi[(gpu, nic)].name}, sysfs {tree[(gpu, nic)].name}"
        for gpu, nic in smi.keys() & tree.keys()
        if smi[(gpu, nic)] != tree[(gpu, nic)]
    )
    if disagreements:
        shown = "; ".join(disagreements[:8])
        more = f" (and {len(disagreements) - 8} more)" if len(disagreements) > 8 else ""
        conditions.append(
            Condition(
                source=GRAPH_SOURCE,
                reason=ConditionReason.INCONSISTENT,
                message=f"GPU–NIC PCIe class differs between nvidia-smi and sysfs: {shown}{more}",
            )
        )
    merged = {**tree, **smi}
    distances = tuple(
        GpuNicDistance(gpu=gpu, nic=nic, distance=cls)
        for (gpu, nic), cls in sorted(merged.items(), key=lambda kv: (kv[0][0], kv[1], kv[0][1]))
    )
    return distances, tuple(conditions)


@dataclasses.dataclass(frozen=True, slots=True)
class Degraded:
    """What the derivations leave out of a degraded node: GPUs off the NVLink graph, NICs and PCIe
    links (by the address of the function below the link) not to count as healthy paths."""

    nvlink_gpus: frozenset[int] = frozenset()
    nics: frozenset[str] = frozenset()
    pcie: frozenset[PciAddress] = frozenset()

    @classmethod
    def of(cls, edges: Iterable[EdgeHealth]) -> Degraded:
        nvlink, nics, pcie = set(), set(), set()
        for e in edges:
            if e.kind in (EdgeKind.NVLINK, EdgeKind.FABRIC) and e.gpu is not None:
                nvlink.add(e.gpu)
            elif e.kind is EdgeKind.PORT and e.nic is not None:
                nics.add(e.nic)
            elif e.kind is EdgeKind.PCIE:
                if e.nic is not None:
                    nics.add(e.nic)
                if e.address is not None:
                    pcie.add(e.address)
        return cls(frozenset(nvlink), frozenset(nics), frozenset(pcie))

    def __bool__(self) -> bool:
        return bool(self.nvlink_gpus or self.nics or self.pcie)


NOTHING_DEGRADED = Degraded()


def _links_on_path(a: PciDevice, b: PciDevice) -> set[PciAddress]:
    """The PCIe links between two functions, each by the function below it: their own links and
    the switch upstream ports on each side below their common ancestor (a switch's downstream ports
    carry no link of their own: the link below one is the device's)."""
    common = 0
    if a.root is not None and a.root == b.root:
        for x, y in zip(a.upstream, b.upstream, strict=False):
            if x != y:
                break
            common += 1
    links = {a.address, b.address}
    for device in (a, b):
        for position in range(common, len(device.upstream)):
            if position % 2 == 1:  # root port at 0, then upstream port, downstream port, ...
                links.add(device.upstream[position])
    return links


def healthy_distances(
    distances: Sequence[GpuNicDistance],
    index: PcieIndex,
    gpu_device: dict[int, PciDevice],
    degraded: Degraded,
) -> tuple[GpuNicDistance, ...]:
    """``distances`` with ``healthy`` False on every path that crosses a degraded edge."""
    if not degraded.nics and not degraded.pcie:
        return tuple(distances)
    out = []
    for d in distances:
        bad = d.nic in degraded.nics
        if not bad and degraded.pcie:
            a, b = gpu_device.get(d.gpu), index.device_of.get(f"nic:{d.nic}")
            if a is not None and b is not None:
                bad = not degraded.pcie.isdisjoint(_links_on_path(a, b))
            elif a is not None:
                bad = a.address in degraded.pcie
        out.append(dataclasses.replace(d, healthy=False) if bad else d)
    return tuple(out)


def nearest_nics(
    distances: Iterable[GpuNicDistance],
) -> dict[int, tuple[tuple[str, ...], LinkClass]]:
    """For each GPU: the NICs at its best class (whatever that class is), and the class, over its
    healthy paths (a GPU whose every path is degraded has none)."""
    by_gpu: dict[int, list[GpuNicDistance]] = defaultdict(list)
    for d in distances:
        if d.healthy:
            by_gpu[d.gpu].append(d)
    result: dict[int, tuple[tuple[str, ...], LinkClass]] = {}
    for gpu, mine in by_gpu.items():
        best = min(d.distance for d in mine)
        result[gpu] = (tuple(sorted(d.nic for d in mine if d.distance == best)), best)
    return result


def gpu_gpu_classes(g: nx.Graph, index: PcieIndex, gpus: Sequence[int]) -> dict[tuple[int, int], LinkClass]:
    """The PCIe class between every two GPUs (a < b): NVML common ancestor > topo -m > sysfs tree."""
    classes: dict[tuple[int, int], LinkClass] = {}
    device = {i: index.device_of.get(gpu_id(i)) for i in gpus}
    for a, b in itertools.combinations(sorted(gpus), 2):
        da, db = device[a], device[b]
        if da is not None and db is not None:
            classes[(a, b)] = pcie_link_class(index, da, db)
    matrix = g.graph.get("topo_matrix")
    if matrix is not None:
        for (a, b), cell in matrix.gpu_gpu:
            if cell.pcie is not None:
                classes[(min(a, b), max(a, b))] = cell.pcie
    classes.update(g.graph.get("nvml_common_ancestor", {}))
    return classes


def numa_of_cpus(numa: Sequence[NumaNode], cpus: frozenset[int]) -> frozenset[int]:
    return frozenset(n.id for n in numa if n.cpus & cpus)


def gpu_numa_affinity(index: PcieIndex, record: GpuRecord) -> frozenset[int] | None:
    if record.numa_affinity is not None:
        return record.numa_affinity
    device = index.device_of.get(gpu_id(record.index))
    if device is not None:
        node = pci_numa_node(index, device)
        if node is not None:
            return frozenset({node})
    if record.cpu_affinity:
        found = numa_of_cpus(index.numa, record.cpu_affinity)
        if found:
            return found
    return None


# --------------------------------------------------------------------------------------------
# Everything
# --------------------------------------------------------------------------------------------


def derive_topology(facts: Facts, degraded: Sequence[EdgeHealth] = ()) -> Topology:
    """Build the graph from ``facts`` and derive the published topology; ``degraded``: the edges
    health published degraded (the module docstring says what they change)."""
    g, join_conditions = build_graph(facts)
    return topology_from_graph(g, facts, join_conditions, Degraded.of(degraded))


def _without_nvlinks(g: nx.Graph, gpus: Iterable[int]) -> None:
    """Take the NVLink edges of ``gpus`` out of the graph (their links are degraded)."""
    for i in gpus:
        node = gpu_id(i)
        if node in g:
            for other in [n for n in g.neighbors(node) if g.edges[node, n]["kind"] == "nvlink"]:
                g.remove_edge(node, other)


def topology_from_graph(
    g: nx.Graph,
    facts: Facts,
    join_conditions: Sequence[Condition] = (),
    degraded: Degraded = NOTHING_DEGRADED,
) -> Topology:
    conditions: list[Condition] = [*facts.conditions, *join_conditions]
    numa = tuple(g.nodes[n]["node"] for n in nodes_of(g, "numa"))
    if degraded.nvlink_gpus:
        _without_nvlinks(g, degraded.nvlink_gpus)
    islands = nvlink_islands(g)
    island_of = {i: island.id for island in islands for i in island.gpus}
    index = pcie_index(g)
    distances, affinity_conditions = gpu_nic_affinity(g, index)
    placed_nearest = nearest_nics(distances)
    if degraded:
        gpu_device = {
            int(node[4:]): device for node, device in index.device_of.items() if node.startswith("gpu:")
        }
        distances = healthy_distances(distances, index, gpu_device, degraded)
    nearest_by_gpu = nearest_nics(distances) if degraded else placed_nearest
    conditions += affinity_conditions

    gpus: list[Gpu] = []
    for record in _gpu_records(g):
        device = index.device_of.get(gpu_id(record.index))
        numa_affinity = gpu_numa_affinity(index, record)
        nearest, nearest_class = nearest_by_gpu.get(record.index, ((), None))
        gpus.append(
            Gpu(
                index=record.index,
                uuid=record.uuid,
                model=record.model,
                address=record.address,
                pcie_root=device.root if device is not None else None,
                numa_node=next(iter(numa_affinity)) if numa_affinity and len(numa_affinity) == 1 else None,
                numa_affinity=numa_affinity,
                gpu_numa_node=record.gpu_numa_node,
                cpu_affinity=record.cpu_affinity,
                island=island_of.get(record.index),
                nearest_nics=nearest,
                nic_distance=nearest_class,
                mig_enabled=record.mig_enabled,
                memory_bytes=record.memory_bytes,
            )
        )

    nics: list[Nic] = []
    for record_nic in _nic_records(g):
        device = index.device_of.get(f"nic:{record_nic.name}")
        nics.append(
            Nic(
                name=record_nic.name,
                netdev=record_nic.netdevs[0] if record_nic.netdevs else None,
                address=record_nic.address,
                pcie_root=device.root if device is not None else None,
                numa_node=pci_numa_node(index, device) if device is not None else None,
                link_layer=record_nic.link_layer,
                state=record_nic.state,
                rate_gbps=record_nic.rate_gbps,
                rdma=record_nic.rdma,
            )
        )

    migs = tuple(g.nodes[n]["mig"] for n in nodes_of(g, "mig"))
    migs = tuple(sorted(migs, key=_mig_sort_key))

    nvlink_counts = gpu_nvlinks(g)
    pcie_classes = gpu_gpu_classes(g, index, [gpu.index for gpu in gpus])
    preferred = preferred_gpu_sets(gpus, islands, nvlink_counts, pcie_classes) if gpus else ()
    indices = [gpu.index for gpu in gpus]
    links = gpu_links(indices, islands, nvlink_counts, pcie_classes) if len(gpus) <= MAX_LINKED_GPUS else None

    fabric = _node_fabric(_gpu_records(g))
    # the node's place in the network is where its GPUs' NICs are cabled, degraded ones included
    gpu_fabric = frozenset(n for names, _ in placed_nearest.values() for n in names)
    network, network_conditions = network_position(facts, nics, gpu_fabric)
    conditions += network_conditions
    pci_devices = tuple(
        data["device"] for _, data in sorted(g.nodes(data=True)) if data["kind"] == "pci" and data["device"]
    )
    return Topology(
        numa_nodes=numa,
        gpus=tuple(gpus),
        nics=tuple(nics),
        nvlink_islands=islands,
        mig_devices=migs,
        preferred_gpu_sets=preferred,
        gpu_nic_distances=distances,
        fabric=fabric,
        pci_devices=tuple(sorted(pci_devices, key=lambda d: d.address)),
        sources=facts.sources,
        conditions=tuple(conditions),
        network=network,
        gpu_links=links,
    )


def _mig_sort_key(m: MigDevice) -> tuple[int, int, int, str]:
    return (
        m.parent_index if m.parent_index is not None else 1_000_000,
        m.gpu_instance if m.gpu_instance is not None else 1_000_000,
        m.device_index if m.device_index is not None else 1_000_000,
        m.uuid,
    )


def _node_fabric(records: Sequence[GpuRecord]) -> FabricInfo | None:
    """The node's multi-node NVLink membership, when its GPUs report one (they all share it).

    A single-node HGX reports fabric state COMPLETED with an all-zero cluster UUID: that is no
    multi-node domain, and is ignored.
    """
    fabrics = {
        r.fabric
        for r in records
        if r.fabric is not None and r.fabric.cluster_uuid and r.fabric.cluster_uuid.strip("0-") != ""
    }
    if not fabrics:
        return None
    return sorted(fabrics, key=lambda f: (f.cluster_uuid, f.clique_id))[0]
