"""Topologies built from a machine's published facts (GPU model and count, NVLink links, NVSwitch or not,
NICs with their rate and the GPUs they are PIX to, NUMA split, NVLink domain, fabric tiers).

Each calibration point in ``tests/fixtures/perf/SOURCES.md`` names the facts its machine was published
with; this turns them into the ``Topology`` nodetopo would publish for it. Nothing here is measured.
"""

from __future__ import annotations

from collections.abc import Sequence

from nodetopo.model import (
    FabricInfo,
    FabricTier,
    Gpu,
    GpuLink,
    GpuNicDistance,
    LinkClass,
    NetworkPosition,
    Nic,
    NumaNode,
    NvlinkIsland,
    Topology,
)


def machine(
    model: str,
    gpus: int = 8,
    *,
    nvswitch: bool = True,
    links: int | None = 18,
    pairs: Sequence[tuple[int, int, int]] | None = None,
    nics: int = 0,
    rate: float | None = 400,
    link_layer: str = "InfiniBand",
    nic_class: LinkClass = LinkClass.PIX,
    gpus_per_nic: int = 1,
    numa: int = 2,
    pcie: dict[tuple[int, int], LinkClass] | None = None,
    clique: str | None = None,
    tiers: Sequence[str] = (),
    nic_numa: int | None = None,
) -> Topology:
    """A node: ``gpus`` GPUs of ``model``; ``links`` NVLinks per GPU into an NVSwitch (``nvswitch``) or,
    with ``pairs`` (a, b, links), direct bundles; ``nics`` RDMA NICs of ``rate`` Gb/s, NIC k at
    ``nic_class`` to GPUs k*gpus_per_nic .. and SYS to the rest; GPUs split evenly over ``numa`` nodes."""
    per_numa = max(1, gpus // numa)
    nic_names = [f"mlx5_{k}" for k in range(nics)]
    distances: list[GpuNicDistance] = []
    nearest: dict[int, list[str]] = {i: [] for i in range(gpus)}
    for k, name in enumerate(nic_names):
        local = {(k * gpus_per_nic + j) % gpus for j in range(gpus_per_nic)}
        for i in range(gpus):
            cls = nic_class if i in local else LinkClass.SYS
            distances.append(GpuNicDistance(gpu=i, nic=name, distance=cls))
    for i in range(gpus):
        best = min((d.distance for d in distances if d.gpu == i), default=None)
        nearest[i] = [d.nic for d in distances if d.gpu == i and d.distance == best]
    islands: list[NvlinkIsland] = []
    gpu_links: list[GpuLink] = []
    pcie = pcie or {}
    if nvswitch and links:
        islands.append(
            NvlinkIsland(
                id=0, gpus=tuple(range(gpus)), links_per_pair=links, fully_connected=True, nvswitch=True
            )
        )
    nv = {(min(a, b), max(a, b)): n for a, b, n in pairs or ()}
    for a in range(gpus):
        for b in range(a + 1, gpus):
            same = a // per_numa == b // per_numa
            cls = pcie.get((a, b), LinkClass.NODE if same else LinkClass.SYS)
            count = links if nvswitch and links else nv.get((a, b))
            gpu_links.append(GpuLink(a=a, b=b, nvlinks=count, pcie=cls))
    if nv and not nvswitch:
        members = sorted({x for p in nv for x in p})
        islands.append(
            NvlinkIsland(
                id=0,
                gpus=tuple(members),
                links_per_pair=min(nv.values()),
                fully_connected=len(nv) == len(members) * (len(members) - 1) // 2,
                nvswitch=False,
            )
        )
    gpu_objs = tuple(
        Gpu(
            index=i,
            uuid=f"GPU-{i:04d}",
            model=model,
            address=None,
            pcie_root=None,
            numa_node=min(i // per_numa, numa - 1),
            numa_affinity=frozenset({min(i // per_numa, numa - 1)}),
            gpu_numa_node=None,
            cpu_affinity=None,
            island=0 if islands and i in islands[0].gpus else None,
            nearest_nics=tuple(nearest[i]),
            nic_distance=min((d.distance for d in distances if d.gpu == i), default=None),
            mig_enabled=False,
        )
        for i in range(gpus)
    )
    nic_objs = tuple(
        Nic(
            name=name,
            netdev=None,
            address=None,
            pcie_root=None,
            numa_node=nic_numa if nic_numa is not None else min(k * gpus_per_nic // per_numa, numa - 1),
            link_layer=link_layer,
            state="ACTIVE",
            rate_gbps=rate,
            rdma=True,
        )
        for k, name in enumerate(nic_names)
    )
    numa_nodes = tuple(
        NumaNode(
            id=n,
            cpus=frozenset(range(n * 32, n * 32 + 32)),
            distances=tuple((m, 10 if m == n else 21) for m in range(numa)),
        )
        for n in range(numa)
    )
    fabric = None
    if clique is not None:
        cluster, _, cid = clique.rpartition(".")
        fabric = FabricInfo(cluster_uuid=cluster, clique_id=int(cid), state="COMPLETED", health="HEALTHY")
    network = NetworkPosition(
        tiers=tuple(FabricTier(level=k, id=t) for k, t in enumerate(tiers)),
        tier_source="fabric.ib" if tiers else None,
    )
    return Topology(
        numa_nodes=numa_nodes,
        gpus=gpu_objs,
        nics=nic_objs,
        nvlink_islands=tuple(islands),
        mig_devices=(),
        preferred_gpu_sets=(),
        gpu_nic_distances=tuple(distances),
        fabric=fabric,
        pci_devices=(),
        sources=(),
        conditions=(),
        network=network,
        gpu_links=tuple(gpu_links),
    )


def hgx(
    model: str,
    *,
    links: int = 18,
    nics: int = 8,
    rate: float = 400,
    link_layer: str = "InfiniBand",
    gpus_per_nic: int | None = None,
    nic_class: LinkClass = LinkClass.PIX,
    tiers: Sequence[str] = (),
) -> Topology:
    """An HGX/DGX board: 8 SXM GPUs on NVSwitch, the NICs PIX to the GPUs in turn (one per GPU with 8 NICs:
    the H100/H200/B200 layout; one per GPU pair with 4)."""
    per_nic = gpus_per_nic if gpus_per_nic is not None else max(1, 8 // max(nics, 1))
    return machine(
        model,
        8,
        links=links,
        nics=nics,
        rate=rate,
        link_layer=link_layer,
        gpus_per_nic=per_nic,
        nic_class=nic_class,
        tiers=tiers,
    )


def gb300_tray(
    clique: str | None, *, nics: int = 8, rate: float = 400, tiers: Sequence[str] = ()
) -> Topology:
    """A GB300 NVL72 compute tray (OCI BM.GPU.GB300.4): 4 GB300 on the rack's NVSwitch trays (18 NVLink5
    each), 2 Grace CPUs, 8 × 400 Gb/s RoCE NICs (two per GPU)."""
    return machine(
        "NVIDIA GB300",
        4,
        links=18,
        nics=nics,
        rate=rate,
        link_layer="Ethernet",
        gpus_per_nic=1,
        numa=2,
        clique=clique,
        tiers=tiers,
    )
