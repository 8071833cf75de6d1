"""Derivations: small pure functions over the graph that ``nodetopo.graph.build_graph`` returns.

Precedence when several sources know the same fact (see README "Sources and precedence"):

* GPU–GPU NVLink: NVML links > ``nvidia-smi topo -m`` ``NV#`` cells.
* GPU–NIC PCIe class: ``nvidia-smi topo -m`` (the driver's view) is published when present; the
  class computed from the sysfs PCIe tree is used otherwise. When both exist and disagree, an
  ``Inconsistent`` condition names every pair that differs.
* CPU affinity: NVML > ``topo -m`` CPU Affinity > sysfs ``local_cpulist`` of the GPU's function.
* NUMA affinity: ``topo -m`` NUMA Affinity > sysfs ``numa_node`` > the NUMA nodes whose CPUs
  intersect the CPU affinity.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Sequence

import networkx as nx

from nodetopo.graph import (
    GRAPH_SOURCE,
    GpuRecord,
    NicRecord,
    build_graph,
    gpu_id,
    nodes_of,
    nvlink_edges,
    pci_device_of,
)
from nodetopo.model import (
    Condition,
    ConditionReason,
    FabricInfo,
    Facts,
    Gpu,
    GpuNicDistance,
    LinkClass,
    MigDevice,
    Nic,
    NumaNode,
    NvlinkIsland,
    PciDevice,
    PreferredGpuSets,
    Topology,
)

#: The most NVLinks any single GPU has (H100/H200/B200: 18). A uniform complete NV mesh whose
#: per-GPU total (links per pair × peers) exceeds this cannot be direct wiring: it is an NVSwitch.
MAX_NVLINKS_PER_GPU = 18

#: Above this many candidate subsets, preferred sets are built hierarchically instead of by
#: exhaustive search (see ``preferred_gpu_sets``).
EXHAUSTIVE_LIMIT = 5000


# --------------------------------------------------------------------------------------------
# PCIe
# --------------------------------------------------------------------------------------------


def pci_numa_node(g: nx.Graph, device: PciDevice) -> int | None:
    """The NUMA node of a PCI function.

    sysfs ``numa_node`` when the kernel knows it; else the one NUMA node whose CPUs contain the
    function's ``local_cpulist``; else the node the other functions of the same root complex agree
    on; else, on a single-node machine, that node (what hwloc does too). None when unknowable.
    """
    if device.numa_node is not None:
        known: int = device.numa_node
        return known
    numa: list[NumaNode] = [g.nodes[n]["node"] for n in nodes_of(g, "numa")]
    if device.local_cpus:
        matching = [n.id for n in numa if n.cpus and device.local_cpus <= n.cpus]
        if len(matching) == 1:
            return matching[0]
    siblings = Counter(
        d.numa_node
        for _, data in g.nodes(data=True)
        if data["kind"] == "pci"
        and (d := data["device"]) is not None
        and d.root is not None
        and d.root == device.root
        and d.numa_node is not None
    )
    if len(siblings) == 1:
        agreed: int = next(iter(siblings))
        return agreed
    if len(numa) == 1:
        only: int = numa[0].id
        return only
    return None


def pcie_link_class(g: nx.Graph, a: PciDevice, b: PciDevice) -> LinkClass:
    """The nvidia-smi class of the path between two PCI functions, from the sysfs PCIe tree.

    * different (or unknown) root complexes: ``NODE`` when both are on the same NUMA node, else ``SYS``;
    * same root complex, no common bridge (they meet at the host bridge): ``PHB``;
    * below a common bridge: ``PIX`` when each is at most one bridge below the deepest common one
      (one switch: downstream port → upstream port → downstream port, or the two functions of one
      device), else ``PXB`` (several switches, still below the host bridge).
    """
    if a.root is None or b.root is None or a.root != b.root:
        na, nb = pci_numa_node(g, a), pci_numa_node(g, b)
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


def gpu_nic_affinity(g: nx.Graph) -> tuple[tuple[GpuNicDistance, ...], tuple[Condition, ...]]:
    """Every (GPU, NIC) PCIe class, from ``topo -m`` and/or the sysfs tree, cross-checked."""
    matrix = g.graph.get("topo_matrix")
    smi: dict[tuple[int, str], LinkClass] = {}
    if matrix is not None:
        nic_names = {t.index: t.name for t in matrix.nics}
        for (gpu, nic), cell in matrix.gpu_nic:
            if cell.pcie is not None and nic in nic_names:
                smi[(gpu, nic_names[nic])] = cell.pcie
    tree: dict[tuple[int, str], LinkClass] = {}
    nic_names_used = affinity_nics(g)
    for gpu_node in nodes_of(g, "gpu"):
        gpu_dev = pci_device_of(g, gpu_node)
        if gpu_dev is None:
            continue
        index = g.nodes[gpu_node]["record"].index
        for name in nic_names_used:
            nic_dev = pci_device_of(g, f"nic:{name}")
            if nic_dev is not None:
                tree[(index, name)] = pcie_link_class(g, gpu_dev, nic_dev)
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


def nearest_nics(distances: Iterable[GpuNicDistance], gpu: int) -> tuple[tuple[str, ...], LinkClass | None]:
    """The NICs at a GPU's best class (whatever that class is), and the class."""
    mine = [d for d in distances if d.gpu == gpu]
    if not mine:
        return (), None
    best = min(d.distance for d in mine)
    return tuple(sorted(d.nic for d in mine if d.distance == best)), best


def gpu_gpu_class(g: nx.Graph, a: int, b: int) -> LinkClass | None:
    """The PCIe class between two GPUs: NVML common ancestor > topo -m > sysfs tree."""
    key = (min(a, b), max(a, b))
    nvml: dict[tuple[int, int], LinkClass] = g.graph.get("nvml_common_ancestor", {})
    if key in nvml:
        return nvml[key]
    matrix = g.graph.get("topo_matrix")
    if matrix is not None:
        for pair, cell in matrix.gpu_gpu:
            if tuple(sorted(pair)) == key and cell.pcie is not None:
                pcie: LinkClass = cell.pcie
                return pcie
    da, db = pci_device_of(g, gpu_id(a)), pci_device_of(g, gpu_id(b))
    if da is not None and db is not None:
        return pcie_link_class(g, da, db)
    return None


def numa_of_cpus(numa: Sequence[NumaNode], cpus: frozenset[int]) -> frozenset[int]:
    return frozenset(n.id for n in numa if n.cpus & cpus)


def gpu_numa_affinity(g: nx.Graph, record: GpuRecord) -> frozenset[int] | None:
    if record.numa_affinity is not None:
        return record.numa_affinity
    device = pci_device_of(g, gpu_id(record.index))
    if device is not None:
        node = pci_numa_node(g, device)
        if node is not None:
            return frozenset({node})
    if record.cpu_affinity:
        numa = [g.nodes[n]["node"] for n in nodes_of(g, "numa")]
        found = numa_of_cpus(numa, record.cpu_affinity)
        if found:
            return found
    return None


# --------------------------------------------------------------------------------------------
# NVLink
# --------------------------------------------------------------------------------------------


def nvlink_islands(g: nx.Graph) -> tuple[NvlinkIsland, ...]:
    """Connected components of the NVLink subgraph (GPUs and NVSwitches), as islands of ≥ 2 GPUs.

    A component that goes through NVSwitch nodes (NVML reports SWITCH remote devices) is one fully
    connected island. From ``topo -m`` alone the switches are invisible; a complete component where
    every pair shows the same ``NV#`` is recognised as switched when that cannot be direct wiring
    (per-GPU total ``NV# × peers`` above ``MAX_NVLINKS_PER_GPU``, or above the GPU's active link
    count from ``nvlink -s``/NVML), or when sysfs shows NVSwitch functions. A uniform full mesh
    that fits in the GPU's links (4× A100 NV4, 4× GH200 NV6) is direct: fully connected, no switch.
    """
    sub = nx.Graph()
    for a, b, links in nvlink_edges(g):
        sub.add_edge(a, b, links=links)
    sysfs_switches = any(d.get("kind") == "nvswitch" and d.get("address") for _, d in g.nodes(data=True))
    islands: list[NvlinkIsland] = []
    components = []
    for component in nx.connected_components(sub):
        gpus = sorted(int(n.split(":")[1]) for n in component if n.startswith("gpu:"))
        if len(gpus) >= 2:
            components.append((gpus, component))
    for island_id, (gpus, component) in enumerate(sorted(components, key=lambda c: c[0])):
        switched = any(n.startswith("nvswitch:") for n in component)
        if switched:
            per_gpu = [
                sum(
                    sub.edges[gpu_id(i), s]["links"]
                    for s in sub.neighbors(gpu_id(i))
                    if s.startswith("nvswitch:")
                )
                for i in gpus
            ]
            islands.append(
                NvlinkIsland(
                    id=island_id,
                    gpus=tuple(gpus),
                    links_per_pair=min(per_gpu),
                    fully_connected=True,
                    nvswitch=True,
                )
            )
            continue
        pair_links = [
            sub.edges[gpu_id(a), gpu_id(b)]["links"]
            for a, b in itertools.combinations(gpus, 2)
            if sub.has_edge(gpu_id(a), gpu_id(b))
        ]
        complete = len(pair_links) == len(gpus) * (len(gpus) - 1) // 2
        uniform = complete and len(set(pair_links)) == 1
        nvswitch = False
        if uniform and len(gpus) > 2:
            per_pair = pair_links[0]
            total = per_pair * (len(gpus) - 1)
            known_totals = [
                t for i in gpus if (t := g.nodes[gpu_id(i)]["record"].total_nvlinks) is not None and t > 0
            ]
            if known_totals:
                nvswitch = total > max(known_totals)
            else:
                nvswitch = total > MAX_NVLINKS_PER_GPU or sysfs_switches
        islands.append(
            NvlinkIsland(
                id=island_id,
                gpus=tuple(gpus),
                links_per_pair=min(pair_links),
                fully_connected=complete,
                nvswitch=nvswitch,
            )
        )
    return tuple(islands)


# --------------------------------------------------------------------------------------------
# Preferred GPU sets
# --------------------------------------------------------------------------------------------


def preferred_gpu_sets(
    gpus: Sequence[Gpu],
    islands: Sequence[NvlinkIsland],
    nvlinks: dict[tuple[int, int], int],
    pcie: dict[tuple[int, int], LinkClass | None],
) -> tuple[PreferredGpuSets, ...]:
    """For each size k, a partition of the GPUs into k-sets, best first.

    Each set is scored (lower is better) by, in order:

    1. the number of NVLink islands it spans (a GPU outside every island counts as its own);
    2. whether every pair has a direct NVLink (or a switch), then the fewest links on a pair;
    3. the number of distinct nearest-NIC groups (GPUs whose nearest NICs are the same share a PCIe
       switch / NIC: GPUDirect RDMA traffic stays local);
    4. the number of NUMA nodes spanned;
    5. the worst PCIe class between two of its GPUs;
    6. the GPU indices (so the result is deterministic).

    The partition is built greedily: the best-scoring k-set of the GPUs not yet used, then the best
    of the rest, until fewer than k remain. Up to ``EXHAUSTIVE_LIMIT`` candidates per step the
    search is exhaustive; beyond that (very large nodes) candidates are consecutive runs of the GPUs
    ordered by (island, NUMA node, nearest NICs, index), which keeps it linear.
    """
    by_index = {gpu.index: gpu for gpu in gpus}
    island_of = {i: island.id for island in islands for i in island.gpus}
    switched = {island.id for island in islands if island.nvswitch}

    def pair_links(a: int, b: int) -> int:
        island = island_of.get(a)
        if island is not None and island == island_of.get(b) and island in switched:
            return nvlinks.get((min(a, b), max(a, b)), 0) or 1_000  # every pair goes through the switch
        return nvlinks.get((min(a, b), max(a, b)), 0)

    def score(members: tuple[int, ...]) -> tuple[object, ...]:
        spanned = {island_of.get(i, -1 - i) for i in members}
        links = [pair_links(a, b) for a, b in itertools.combinations(members, 2)]
        all_linked = 0 if all(links) else 1
        min_links = -min(links) if links else 0
        nic_groups = {by_index[i].nearest_nics for i in members if by_index[i].nearest_nics}
        numa = {n for i in members for n in (by_index[i].numa_affinity or {-1})}
        classes = [pcie.get((min(a, b), max(a, b))) for a, b in itertools.combinations(members, 2)]
        worst = max((c for c in classes if c is not None), default=LinkClass.PIX)
        return (len(spanned), all_linked, min_links, len(nic_groups), len(numa), int(worst), members)

    order = sorted(
        by_index,
        key=lambda i: (
            island_of.get(i, 1_000_000 + i),
            min(by_index[i].numa_affinity or {1_000_000}),
            by_index[i].nearest_nics,
            i,
        ),
    )
    result: list[PreferredGpuSets] = []
    for k in range(1, len(order) + 1):
        remaining = list(order)
        sets: list[tuple[int, ...]] = []
        while len(remaining) >= k:
            if _count_combinations(len(remaining), k) <= EXHAUSTIVE_LIMIT:
                candidates: Iterable[tuple[int, ...]] = (
                    tuple(sorted(c)) for c in itertools.combinations(remaining, k)
                )
            else:
                candidates = (tuple(sorted(remaining[s : s + k])) for s in range(0, len(remaining) - k + 1))
            best = min(candidates, key=score)
            sets.append(best)
            remaining = [i for i in remaining if i not in best]
        result.append(PreferredGpuSets(size=k, sets=tuple(sets)))
    return tuple(result)


def _count_combinations(n: int, k: int) -> int:
    from math import comb

    return comb(n, k)


# --------------------------------------------------------------------------------------------
# Everything
# --------------------------------------------------------------------------------------------


def derive_topology(facts: Facts) -> Topology:
    """Build the graph from ``facts`` and derive the published topology."""
    g, join_conditions = build_graph(facts)
    return topology_from_graph(g, facts, join_conditions)


def topology_from_graph(g: nx.Graph, facts: Facts, join_conditions: Sequence[Condition] = ()) -> Topology:
    conditions: list[Condition] = [*facts.conditions, *join_conditions]
    numa = tuple(g.nodes[n]["node"] for n in nodes_of(g, "numa"))
    islands = nvlink_islands(g)
    island_of = {i: island.id for island in islands for i in island.gpus}
    distances, affinity_conditions = gpu_nic_affinity(g)
    conditions += affinity_conditions

    gpus: list[Gpu] = []
    for record in _gpu_records(g):
        device = pci_device_of(g, gpu_id(record.index))
        numa_affinity = gpu_numa_affinity(g, record)
        nearest, nearest_class = nearest_nics(distances, record.index)
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
        device = pci_device_of(g, f"nic:{record_nic.name}")
        nics.append(
            Nic(
                name=record_nic.name,
                netdev=record_nic.netdevs[0] if record_nic.netdevs else None,
                address=record_nic.address,
                pcie_root=device.root if device is not None else None,
                numa_node=pci_numa_node(g, device) if device is not None else None,
                link_layer=record_nic.link_layer,
                state=record_nic.state,
                rate_gbps=record_nic.rate_gbps,
                rdma=record_nic.rdma,
            )
        )

    migs = tuple(g.nodes[n]["mig"] for n in nodes_of(g, "mig"))
    migs = tuple(sorted(migs, key=_mig_sort_key))

    nvlink_counts: dict[tuple[int, int], int] = {}
    for a, b, links in nvlink_edges(g):
        if a.startswith("gpu:") and b.startswith("gpu:"):
            ia, ib = int(a[4:]), int(b[4:])
            nvlink_counts[(min(ia, ib), max(ia, ib))] = links
    pcie_classes = {
        (a.index, b.index): gpu_gpu_class(g, a.index, b.index) for a, b in itertools.combinations(gpus, 2)
    }
    preferred = preferred_gpu_sets(gpus, islands, nvlink_counts, pcie_classes) if gpus else ()

    fabric = _node_fabric(_gpu_records(g))
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
