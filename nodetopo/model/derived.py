"""The derived topology: what the derivations conclude once every source has been joined."""

from __future__ import annotations

import dataclasses
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING

from nodetopo.model.health import NOT_JUDGED, HealthReport
from nodetopo.model.values import Condition, LinkClass, PciAddress, SourceStatus

if TYPE_CHECKING:  # annotations only: a reader of published objects builds none of the per-source facts
    from nodetopo.model.facts import FabricInfo, MigDevice, NumaNode, PciDevice
    from nodetopo.model.network import FabricTier, SwitchPort

# --------------------------------------------------------------------------------------------
# The derived topology (what leaves the core)
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Gpu:
    index: int
    uuid: str | None
    model: str | None
    address: PciAddress | None
    pcie_root: str | None
    numa_node: int | None  #: the NUMA node when the affinity is exactly one node
    numa_affinity: AbstractSet[int] | None  #: frozenset from a scan, ``CpuSet`` from a published object
    gpu_numa_node: int | None  #: the GPU memory's own NUMA node (GH200/GB200)
    cpu_affinity: AbstractSet[int] | None
    island: int | None
    nearest_nics: tuple[str, ...]
    nic_distance: LinkClass | None
    mig_enabled: bool | None
    memory_bytes: int | None = None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Nic:
    name: str
    netdev: str | None
    address: PciAddress | None
    pcie_root: str | None
    numa_node: int | None
    link_layer: str | None
    state: str | None
    rate_gbps: float | None
    rdma: bool


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class NvlinkIsland:
    id: int
    gpus: tuple[int, ...]  #: GPU indices, sorted; an island has at least two GPUs
    links_per_pair: int  #: the minimum NVLink count over connected pairs
    fully_connected: bool
    nvswitch: bool


#: GPU links are derived and published for nodes of at most this many GPUs (64 → 2,016 pairs); a
#: larger node has none (``Topology.gpu_links`` is None) and a matrix of it falls back to what the
#: islands and NUMA nodes imply. No single-OS machine has more than 16 GPUs.
MAX_LINKED_GPUS = 64


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class GpuLink:
    """How two GPUs ``a < b`` reach each other: the cell ``nvidia-smi topo -m`` prints for the pair.

    ``nvlinks``: the NVLinks joining them (inside an NVSwitch island without a direct link, the
    island's links per GPU, as ``topo -m`` shows); None when none. ``pcie``: the class of the PCIe
    path between them; None when no source places it.
    """

    a: int
    b: int
    nvlinks: int | None
    pcie: LinkClass | None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PreferredGpuSets:
    size: int
    sets: tuple[tuple[int, ...], ...]  #: best first


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class GpuNicDistance:
    gpu: int
    nic: str
    distance: LinkClass
    #: False when the path crosses a degraded edge (the NIC's, the GPU's own PCIe link, a switch
    #: uplink between them): the class is where the NIC is, not what the GPU can use
    healthy: bool = True


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class NetworkPosition:
    """The node's place in the network, joined over the fabric sources.

    ``neighbours``: per NIC port, the switch (and port) it is cabled to, from every source that saw
    it. ``tiers``: nearest first, from the one source that gave them (``tier_source``), by the
    documented precedence; empty when no source could tell.
    """

    neighbours: tuple[SwitchPort, ...] = ()
    tiers: tuple[FabricTier, ...] = ()
    tier_source: str | None = None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Topology:
    """The derived, joined view of a node. The only value that crosses into projections."""

    numa_nodes: tuple[NumaNode, ...]
    gpus: tuple[Gpu, ...]
    nics: tuple[Nic, ...]
    nvlink_islands: tuple[NvlinkIsland, ...]
    mig_devices: tuple[MigDevice, ...]
    preferred_gpu_sets: tuple[PreferredGpuSets, ...]
    gpu_nic_distances: tuple[GpuNicDistance, ...]
    fabric: FabricInfo | None
    pci_devices: tuple[PciDevice, ...]
    sources: tuple[SourceStatus, ...]
    conditions: tuple[Condition, ...]
    network: NetworkPosition = NetworkPosition()
    #: every GPU pair that has a matrix cell, sorted; None when not derived (over
    #: ``MAX_LINKED_GPUS`` GPUs) or not published (an object written by an older agent)
    gpu_links: tuple[GpuLink, ...] | None = None
    #: the links' health (``nodetopo.health``); the facts above already leave degraded edges out
    health: HealthReport = NOT_JUDGED
