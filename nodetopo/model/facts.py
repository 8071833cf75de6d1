"""Per-source facts: what one source (sysfs, nvidia-smi, NVML) observed, in that source's own terms,
and ``Facts``, their union for one round. The network's facts are in ``nodetopo.model.network``,
the kubelet's (who holds which device) in ``nodetopo.model.allocation``."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Set as AbstractSet

from nodetopo.model.network import NetworkObservation
from nodetopo.model.readings import NO_READINGS, HealthReadings
from nodetopo.model.values import Condition, LinkClass, PciAddress, SourceStatus

# --------------------------------------------------------------------------------------------
# Per-source facts: sysfs
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class NumaNode:
    """A NUMA node from ``devices/system/node/nodeN``.

    ``distances`` is the SLIT row as the kernel prints it, as (other node id, distance) pairs.
    """

    id: int
    cpus: AbstractSet[int]  #: a frozenset from sysfs; a ``CpuSet`` read from a published object
    memory_bytes: int | None = None
    distances: tuple[tuple[int, int], ...] = ()


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PciDevice:
    """One PCI function from ``bus/pci/devices``.

    ``upstream`` is the chain of bridges above the function, nearest the root complex first,
    resolved from the device's real sysfs path; ``root`` is the root complex directory name
    (``pci0000:3a``, the DRA ``pcieRoot`` attribute), None when the device's sysfs entry is not a
    link into ``devices/pci*`` (some trimmed captures) so that its place in the tree is unknown.
    """

    address: PciAddress
    vendor: int
    device: int
    class_code: int  #: the 24-bit class register, e.g. 0x030200 for a 3D controller
    root: str | None
    upstream: tuple[PciAddress, ...] = ()
    numa_node: int | None = None  #: None when sysfs says -1 or nothing
    local_cpus: frozenset[int] | None = None
    driver: str | None = None
    subsystem_vendor: int | None = None
    subsystem_device: int | None = None

    @property
    def is_bridge(self) -> bool:
        return self.class_code >> 8 == 0x0604

    @property
    def is_nvidia_gpu(self) -> bool:
        return self.vendor == 0x10DE and self.class_code >> 8 in (0x0300, 0x0302)

    @property
    def is_nvswitch(self) -> bool:
        return self.vendor == 0x10DE and self.class_code >> 8 == 0x0680

    @property
    def is_network(self) -> bool:
        return self.class_code >> 16 == 0x02


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RdmaPort:
    """One port of an RDMA device (``class/infiniband/<dev>/ports/<n>``, or ibstat)."""

    number: int
    state: str | None = None  #: ACTIVE, DOWN, INIT, ARMED ... (upper case, no numeric prefix)
    phys_state: str | None = None  #: LinkUp, Disabled, Polling ...
    rate_gbps: float | None = None
    link_layer: str | None = None  #: InfiniBand | Ethernet
    netdevs: tuple[str, ...] = ()
    lid: int | None = None
    port_guid: str | None = None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RdmaDevice:
    """An RDMA device (HCA or RoCE NIC) from ``class/infiniband``."""

    name: str
    address: PciAddress | None = None
    hca_type: str | None = None
    firmware: str | None = None
    board_id: str | None = None
    node_guid: str | None = None
    ports: tuple[RdmaPort, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class NetDevice:
    """A network interface from ``class/net`` that sits on a PCI function."""

    name: str
    address: PciAddress | None = None
    operstate: str | None = None
    speed_mbps: int | None = None
    mac: str | None = None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class IbstatCa:
    """One channel adapter as ``ibstat`` prints it."""

    name: str
    ca_type: str | None = None
    firmware: str | None = None
    hardware_version: str | None = None
    node_guid: str | None = None
    system_guid: str | None = None
    ports: tuple[RdmaPort, ...] = ()


# --------------------------------------------------------------------------------------------
# Per-source facts: nvidia-smi
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class TopoLink:
    """One cell of ``nvidia-smi topo -m``: an NVLink bundle (``nvlinks`` > 0) or a PCIe class."""

    pcie: LinkClass | None = None
    nvlinks: int = 0


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class TopoGpu:
    """A GPU row of ``nvidia-smi topo -m`` with its affinity columns (None where N/A or absent)."""

    index: int
    cpu_affinity: frozenset[int] | None = None
    numa_affinity: frozenset[int] | None = None
    gpu_numa_id: int | None = None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class TopoNic:
    """A NIC column of ``nvidia-smi topo -m``; ``name`` from the NIC Legend (or the header)."""

    index: int
    name: str


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class TopoMatrix:
    """The parsed ``nvidia-smi topo -m`` matrix.

    ``gpu_gpu`` and ``gpu_nic`` hold one entry per unordered GPU pair / (GPU, NIC) pair:
    ``((gpu_index, other_index), TopoLink)``, sorted.
    """

    gpus: tuple[TopoGpu, ...]
    nics: tuple[TopoNic, ...] = ()
    gpu_gpu: tuple[tuple[tuple[int, int], TopoLink], ...] = ()
    gpu_nic: tuple[tuple[tuple[int, int], TopoLink], ...] = ()
    nic_nic: tuple[tuple[tuple[int, int], TopoLink], ...] = ()


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class MigDevice:
    """A MIG instance and its parent GPU."""

    uuid: str
    parent_uuid: str | None = None
    parent_index: int | None = None
    profile: str | None = None  #: e.g. ``3g.40gb``
    gpu_instance: int | None = None
    compute_instance: int | None = None
    device_index: int | None = None  #: the ``Device N`` number under its parent in ``nvidia-smi -L``


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ListedGpu:
    """A GPU line of ``nvidia-smi -L`` with the MIG devices listed under it."""

    index: int
    model: str
    uuid: str
    migs: tuple[MigDevice, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class QueriedGpu:
    """A GPU from ``nvidia-smi -q -x``."""

    uuid: str
    model: str
    address: PciAddress | None = None
    minor_number: int | None = None
    mig_current: bool | None = None
    mig_pending: bool | None = None
    numa_node: int | None = None
    memory_bytes: int | None = None
    driver_version: str | None = None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class NvlinkStatus:
    """``nvidia-smi nvlink -s``: links of one GPU, (link number, GB/s or None when inactive)."""

    index: int
    uuid: str | None
    links: tuple[tuple[int, float | None], ...]


# --------------------------------------------------------------------------------------------
# Per-source facts: NVML
# --------------------------------------------------------------------------------------------


class RemoteDeviceType(enum.StrEnum):
    GPU = "GPU"
    SWITCH = "SWITCH"  #: an NVSwitch: the link goes into the switch fabric
    IBMNPU = "IBMNPU"  #: POWER8/9 CPU NVLink
    UNKNOWN = "UNKNOWN"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class NvmlLink:
    """One active NVLink of a GPU as NVML reports it."""

    link: int
    remote_address: PciAddress | None
    remote_type: RemoteDeviceType


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class FabricInfo:
    """Multi-node NVLink (GB200 NVL72 ...) membership from ``nvmlDeviceGetGpuFabricInfo``."""

    cluster_uuid: str
    clique_id: int
    state: str  #: NOT_SUPPORTED | NOT_STARTED | IN_PROGRESS | COMPLETED
    health: str | None = None
    #: ``healthMask`` of ``nvmlGpuFabricInfo_v2``+ (2-bit fields: degraded bandwidth, route recovery,
    #: route unhealthy, access timeout recovery ...); None when the driver does not report it
    health_mask: int | None = None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class NvmlGpu:
    """A GPU as NVML reports it."""

    index: int
    uuid: str
    model: str
    address: PciAddress
    memory_bytes: int | None = None
    cpu_affinity: frozenset[int] | None = None
    numa_node: int | None = None  #: nvmlDeviceGetNumaNodeId: the GPU memory's own node (Grace)
    mig_current: bool | None = None
    mig_pending: bool | None = None
    links: tuple[NvmlLink, ...] = ()
    fabric: FabricInfo | None = None
    migs: tuple[MigDevice, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class NvmlSnapshot:
    driver_version: str | None
    gpus: tuple[NvmlGpu, ...]
    #: ((index_a, index_b), LinkClass) from nvmlDeviceGetTopologyCommonAncestor, a < b
    common_ancestor: tuple[tuple[tuple[int, int], LinkClass], ...] = ()


# --------------------------------------------------------------------------------------------
# Everything the sources observed
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Facts:
    """The union of what every source observed this round, plus how each source fared."""

    numa_nodes: tuple[NumaNode, ...] = ()
    pci_devices: tuple[PciDevice, ...] = ()
    rdma_devices: tuple[RdmaDevice, ...] = ()
    net_devices: tuple[NetDevice, ...] = ()
    ibstat: tuple[IbstatCa, ...] = ()
    topo_matrix: TopoMatrix | None = None
    listed_gpus: tuple[ListedGpu, ...] = ()
    queried_gpus: tuple[QueriedGpu, ...] = ()
    nvlink_status: tuple[NvlinkStatus, ...] = ()
    nvml: NvmlSnapshot | None = None
    network: tuple[NetworkObservation, ...] = ()
    sources: tuple[SourceStatus, ...] = ()
    conditions: tuple[Condition, ...] = ()
    #: the links' states and counters (judged by ``nodetopo.health``, not part of the topology)
    health: HealthReadings = NO_READINGS

    def merge(self, other: Facts) -> Facts:
        """Combine two partial observations: tuples concatenate, singletons prefer ``other``."""
        return Facts(
            numa_nodes=self.numa_nodes + other.numa_nodes,
            pci_devices=self.pci_devices + other.pci_devices,
            rdma_devices=self.rdma_devices + other.rdma_devices,
            net_devices=self.net_devices + other.net_devices,
            ibstat=self.ibstat + other.ibstat,
            topo_matrix=other.topo_matrix or self.topo_matrix,
            listed_gpus=self.listed_gpus + other.listed_gpus,
            queried_gpus=self.queried_gpus + other.queried_gpus,
            nvlink_status=self.nvlink_status + other.nvlink_status,
            nvml=other.nvml or self.nvml,
            network=self.network + other.network,
            sources=self.sources + other.sources,
            conditions=self.conditions + other.conditions,
            health=self.health.merge(other.health),
        )
