"""The typed facts nodetopo works with.

Everything here is a frozen value: sources produce them, the graph is built from them, and the
projections (NodeTopology body, labels, Ray labels, metrics) read them. No I/O, no third-party
imports. Collections are tuples or frozensets, sorted by the producer, so that two discoveries of
the same machine compare equal and golden files are stable.

Two layers:

* *Per-source facts* (``NumaNode``, ``PciDevice``, ``RdmaDevice``, ``TopoMatrix``, ``NvmlGpu`` ...)
  say what one source observed, in that source's own terms.
* The *topology* (``Gpu``, ``Nic``, ``NvlinkIsland`` ..., gathered in ``Topology``) is what the
  derivations conclude once every source has been joined on the PCI address.
"""

from __future__ import annotations

import bisect
import dataclasses
import enum
import re
from collections.abc import Iterable, Iterator
from collections.abc import Set as AbstractSet
from typing import Any

# --------------------------------------------------------------------------------------------
# Small value types
# --------------------------------------------------------------------------------------------

_PCI_ADDRESS = re.compile(
    r"^(?:(?P<domain>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):"
    r"(?P<device>[0-9a-fA-F]{1,2})\.(?P<function>[0-7])$"
)


@dataclasses.dataclass(frozen=True, slots=True, order=True)
class PciAddress:
    """A PCI function address (domain, bus, device, function).

    ``str()`` gives the sysfs / Kubernetes DRA form ``0000:3b:00.0``. ``parse`` also accepts the
    8-digit domain nvidia-smi prints (``00000000:3B:00.0``) and a bare ``3b:00.0`` (domain 0).
    """

    domain: int
    bus: int
    device: int
    function: int

    @classmethod
    def parse(cls, text: str) -> PciAddress:
        match = _PCI_ADDRESS.match(text.strip())
        if match is None:
            raise ValueError(f"not a PCI address: {_quote(text)}")
        return cls(
            domain=int(match["domain"] or "0", 16),
            bus=int(match["bus"], 16),
            device=int(match["device"], 16),
            function=int(match["function"]),
        )

    def __str__(self) -> str:
        width = 4 if self.domain <= 0xFFFF else 8
        return f"{self.domain:0{width}x}:{self.bus:02x}:{self.device:02x}.{self.function}"


class LinkClass(enum.IntEnum):
    """How two PCI devices are connected, named exactly as ``nvidia-smi topo -m`` names it.

    Ordered from nearest to farthest, so ``min()`` picks the best path.
    """

    PIX = 1  #: at most a single PCIe bridge (same switch port / same switch)
    PXB = 2  #: several PCIe bridges, without crossing the host bridge
    PHB = 3  #: through a PCIe host bridge (same root complex)
    NODE = 4  #: across PCIe host bridges within one NUMA node
    SYS = 5  #: across the SMP interconnect between NUMA nodes (QPI/UPI/xGMI)


class ConditionReason(enum.StrEnum):
    UNAVAILABLE = "Unavailable"  #: the tool, driver, file or device is not there
    PARSE_ERROR = "ParseError"  #: the source answered with something we could not read
    TIMEOUT = "Timeout"  #: the source did not answer in time
    INCONSISTENT = "Inconsistent"  #: two sources disagree about one fact
    DEGRADED = "Degraded"  #: the source answered, partly (e.g. ERR! cells, a missing GPU)
    STALE = "Stale"  #: facts kept from an earlier scan because this one failed
    #: an essential source (sysfs PCI or NUMA) observed nothing: the host root is wrong (not
    #: mounted, empty) or the bundle lacks it; nothing derived from it can be trusted
    MISSING = "Missing"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Condition:
    """Something a platform engineer should know about one source's observation."""

    source: str
    reason: ConditionReason
    message: str


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SourceStatus:
    """Whether one source ran, and how it went (``status.sources[]``)."""

    name: str
    ok: bool
    message: str = ""


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
# Per-source facts: the state of the links (edge health readings)
# --------------------------------------------------------------------------------------------
#
# Kept apart from the facts the topology is derived from (``Facts.health``): a link's negotiated
# speed and its error counters change from one scan to the next on a healthy node, and must not
# make an unchanged topology look changed. ``nodetopo.health`` judges them.


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PcieLinkReading:
    """One PCI function's link attributes in sysfs, and its AER totals (None: not there).

    Speeds are GT/s per lane as the kernel prints them (``16.0 GT/s PCIe`` -> 16.0); a function's
    ``max_*`` is its own capability (Link Capabilities), ``current_*`` the negotiated link. The AER
    totals are ``TOTAL_ERR_COR``/``TOTAL_ERR_NONFATAL``/``TOTAL_ERR_FATAL`` of ``aer_dev_*``.
    """

    address: PciAddress
    current_gts: float | None = None
    current_width: int | None = None
    max_gts: float | None = None
    max_width: int | None = None
    aer_correctable: int | None = None
    aer_nonfatal: int | None = None
    aer_fatal: int | None = None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class GpuPcieReading:
    """A GPU's own view of its PCIe link (NVML, or ``nvidia-smi -q -x``'s ``pci_gpu_link_info``).

    ``max_gen``: the highest generation the link can reach with this GPU and this system (NVML's
    ``MaxPcieLinkGeneration``, ``-q``'s ``Max``); ``device_max_gen`` the GPU's own; ``host_max_gen``
    the host side's (``-q`` only). ``replays``: the PCIe replay counter (since the driver loaded).
    """

    gpu: int | None  #: the NVML index; None from ``nvidia-smi -q`` (joined on ``uuid``/``address``)
    source: str  #: ``nvml`` | ``nvidia-smi``
    uuid: str | None = None
    address: PciAddress | None = None
    max_gen: int | None = None
    current_gen: int | None = None
    device_max_gen: int | None = None
    host_max_gen: int | None = None
    max_width: int | None = None
    current_width: int | None = None
    replays: int | None = None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class NvlinkReading:
    """One NVLink of one GPU: its state, speed and error counters (None: not read)."""

    gpu: int
    link: int
    source: str  #: ``nvml`` | ``nvidia-smi``
    active: bool | None = None
    speed_gbps: float | None = None  #: per direction, as ``nvidia-smi nvlink -s`` prints it
    replay: int | None = None
    recovery: int | None = None
    crc: int | None = None  #: CRC errors (NVML: flit + data)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PortCounterReading:
    """The error counters of one RDMA port (``ports/<n>/counters/*``) and its netdev's carrier changes."""

    nic: str
    port: int
    counters: tuple[tuple[str, int], ...] = ()  #: (counter, value) of the counters that were read
    netdev: str | None = None
    carrier_changes: int | None = None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class HealthReadings:
    """Every link-state reading of one scan (see above); empty parts were not read."""

    pcie: tuple[PcieLinkReading, ...] = ()
    gpu_pcie: tuple[GpuPcieReading, ...] = ()
    nvlinks: tuple[NvlinkReading, ...] = ()
    ports: tuple[PortCounterReading, ...] = ()

    def merge(self, other: HealthReadings) -> HealthReadings:
        if not (other.pcie or other.gpu_pcie or other.nvlinks or other.ports):
            return self
        if not (self.pcie or self.gpu_pcie or self.nvlinks or self.ports):
            return other
        return HealthReadings(
            pcie=self.pcie + other.pcie,
            gpu_pcie=self.gpu_pcie + other.gpu_pcie,
            nvlinks=self.nvlinks + other.nvlinks,
            ports=self.ports + other.ports,
        )


NO_READINGS = HealthReadings()

# --------------------------------------------------------------------------------------------
# Per-source facts: the node's place in the network (InfiniBand, LLDP, cloud metadata)
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SwitchPort:
    """What one port of this node's NIC is cabled to, as one fabric source saw it.

    ``switch_id`` is the switch's stable identity in the source's terms (an InfiniBand node GUID
    ``0x...``, an LLDP chassis id such as a MAC); ``switch_name`` its human name when it has one
    (``MF0;<name>:<model>`` hostname, LLDP system name), None for vendor-default descriptions.
    ``peer_is_switch`` is False when the neighbour is a host (a back-to-back cable, LLDP from a
    server), None when the source cannot tell; only switches become tiers.
    """

    nic: str  #: ``mlx5_0`` (InfiniBand) or the netdev (``ens108np0``) for LLDP
    port: int | None  #: the HCA port number (InfiniBand), None for a netdev
    source: str
    state: str | None = None  #: ACTIVE, DOWN ... as the host sees its own port
    switch_id: str | None = None
    switch_name: str | None = None
    switch_port: str | None = None  #: ``8`` (IB port number) or ``Ethernet184`` (LLDP port)
    peer_is_switch: bool | None = True
    uplinks: tuple[str, ...] = ()  #: ids of the switches one tier above this one, where seen


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class FabricTier:
    """One level of the network above the node: tier 0 is the leaf / ToR / local block.

    ``id`` is the group's stable identity (a switch GUID, a hash of a set of switches, a cloud
    block id); nodes with the same ``id`` at a tier are under the same switch (or switch group)
    there. ``name`` is for people; ``members`` lists the switch ids the group stands for.
    """

    level: int
    id: str
    name: str | None = None
    members: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class NetworkObservation:
    """What one fabric source says about the node's place: its NIC neighbours and its tiers."""

    source: str
    neighbours: tuple[SwitchPort, ...] = ()
    tiers: tuple[FabricTier, ...] = ()  #: nearest first; empty when the source cannot tell


# --------------------------------------------------------------------------------------------
# Which pod holds which device: the kubelet's PodResources API, and what it means for the GPUs
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True, order=True)
class PodRef:
    """One container of one pod: the holder of a device."""

    namespace: str
    name: str
    container: str


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class DeviceAssignment:
    """One device the kubelet handed to one container (``device_id`` as the device plugin named it)."""

    resource: str  #: ``nvidia.com/gpu``, ``nvidia.com/mig-1g.10gb``, ``rdma/hca`` ...
    device_id: str
    holder: PodRef


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ClaimDevice:
    """One device a DRA driver prepared for a container's ResourceClaim, as the kubelet lists it
    (``driver``/``pool``/``device``: the claim's allocation result, not a GPU UUID)."""

    driver: str  #: ``gpu.nvidia.com``, ``dra.net`` ...
    pool: str
    device: str  #: the device's name in the driver's ResourceSlice (``gpu-0``)
    claim: str  #: ``namespace/name`` of the ResourceClaim
    holder: PodRef


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SliceDevice:
    """One device of a ResourceSlice of this node, as far as tying it to a GPU needs: its name in
    the driver's pool and the attributes that identify the hardware (None when the slice lacks one)."""

    driver: str
    pool: str
    device: str  #: ``gpu-0``
    uuid: str | None = None  #: the ``uuid`` attribute (``GPU-…`` / ``MIG-…``)
    pci_bus_id: str | None = None  #: ``resource.kubernetes.io/pciBusID`` (``0000:3b:00.0``)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class KubeletAllocation:
    """What the kubelet's PodResources API answered: ``List`` (devices held by running containers:
    device-plugin ``assignments`` and DRA ``claim_devices``) and ``GetAllocatableResources`` (every
    device-plugin device it may hand out, per resource; None when the kubelet does not serve that call)."""

    assignments: tuple[DeviceAssignment, ...]
    allocatable: tuple[tuple[str, tuple[str, ...]], ...] | None = None  #: (resource, device ids), sorted
    claim_devices: tuple[ClaimDevice, ...] = ()
    #: this node's ResourceSlice devices (what ties ``claim_devices`` to GPUs); None: not read (no GPU
    #: claim device listed, or no API access); a str: why they could not be read
    slice_devices: tuple[SliceDevice, ...] | str | None = None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ResourceCount:
    name: str
    allocatable: int | None  #: None when the kubelet did not say
    allocated: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class GpuAllocation:
    """Which pod holds each GPU (and MIG device) of a node, or why that is not known.

    ``known`` False means *unknown*, never "nothing is held": consumers then fall back to their own
    estimate. When ``known``, a GPU absent from ``gpu_holders`` is free as far as the kubelet knows.
    """

    known: bool
    message: str = ""
    resources: tuple[ResourceCount, ...] = ()
    gpu_holders: tuple[tuple[int, tuple[PodRef, ...]], ...] = ()  #: (GPU index, holders), by index
    mig_holders: tuple[tuple[str, tuple[PodRef, ...]], ...] = ()  #: (MIG device UUID, holders)


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


# --------------------------------------------------------------------------------------------
# Edge health: what ``nodetopo.health`` concluded about each link (published)
# --------------------------------------------------------------------------------------------


class EdgeKind(enum.StrEnum):
    PCIE = "pcie"  #: a PCI function's link to the port above it
    NVLINK = "nvlink"  #: a GPU's NVLinks (to its peers or its NVSwitches)
    PORT = "port"  #: an RDMA port (InfiniBand or RoCE) and its wire
    FABRIC = "fabric"  #: a GPU's multi-node NVLink fabric (GB200/GB300)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class LinkState:
    """An edge's state (observed) or what both ends support (capability); None: not said."""

    width: int | None = None  #: PCIe lanes
    gts: float | None = None  #: PCIe GT/s per lane
    links: int | None = None  #: active NVLinks
    rate_gbps: float | None = None  #: a port's rate
    state: str | None = None  #: a port's state, a fabric's health


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CounterRate:
    """How fast one error counter rose over the judged window, per hour."""

    counter: str
    per_hour: float


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class EdgeHealth:
    """One degraded edge: which, why, what it does against what it should, since when.

    ``edge`` is ``<device>/<kind>`` (``GPU3/nvlink``, ``mlx5_2/port1``, ``0000:16:00.0/pcie``);
    ``gpu``/``nic``/``address`` name the device, ``peer`` the other end when known (``NVSwitch``,
    ``GPU1``, the port above). ``reasons`` are the rules that fired (``nodetopo.health.rules``).
    """

    edge: str
    kind: EdgeKind
    device: str
    gpu: int | None = None
    nic: str | None = None
    address: PciAddress | None = None
    port: int | None = None
    peer: str | None = None
    reasons: tuple[str, ...] = ()
    message: str = ""
    observed: LinkState = LinkState()
    capability: LinkState = LinkState()
    since: str | None = None  #: RFC 3339, when it was first judged degraded (None: not known)
    rates: tuple[CounterRate, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CounterBaseline:
    """The error counters the last published status recorded, and when: a restarted agent judges
    rates against them. ``counters`` holds only non-zero values, by edge, both sorted."""

    at: str  #: RFC 3339
    #: a short hash of the ids of every edge read then: a counter it does not list was 0 for an
    #: edge set of that hash (for another set only the listed counters are known)
    edges: str = ""
    counters: tuple[tuple[str, tuple[tuple[str, int], ...]], ...] = ()


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class HealthReport:
    """The judgement of every edge of a scan: how many were judged, which are degraded.

    ``judged`` False: no health judgement at all (an object written by an older agent, a view
    built without one): nothing is known to be degraded, and nothing to be healthy either.
    """

    judged: bool = False
    checked: int = 0  #: edges judged this scan
    degraded: tuple[EdgeHealth, ...] = ()
    baseline: CounterBaseline | None = None


NOT_JUDGED = HealthReport()


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


# --------------------------------------------------------------------------------------------
# cpulist helpers (the kernel's "0-3,8-11" format); pure, used by parsers and projections
# --------------------------------------------------------------------------------------------


#: the largest CPU (and NUMA node) id a cpulist may name: Linux's NR_CPUS is at most 8192 (x86_64;
#: 4096 on arm64), so this leaves headroom while bounding what a hostile file can make us build
MAX_CPU_ID = 65535
#: the largest NUMA node id: Linux's MAX_NUMNODES is at most 1024 (NODES_SHIFT 10)
MAX_NUMA_NODE_ID = 1023

_CPULIST_ELEMENT = re.compile(r"([0-9]{1,6})(?:-([0-9]{1,6}))?")


def _quote(text: str, limit: int = 40) -> str:
    """A short quotation of untrusted text for a ValueError (``errors.excerpt`` for this layer)."""
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}… ({len(text)} chars)"


def _cpulist_ranges(text: str) -> list[tuple[int, int]]:
    """The (first, last) ranges a kernel cpulist names, in the order written (the grammar of
    ``parse_cpulist``; raises its ``ValueError``)."""
    text = text.replace("\x00", "").strip()
    if not text:
        return []
    ranges = []
    for part in text.split(","):
        match = _CPULIST_ELEMENT.fullmatch(part.strip())
        if match is None:
            raise ValueError(f"bad element {_quote(part.strip())} in cpulist {_quote(text)}")
        lo = int(match[1])
        hi = int(match[2]) if match[2] is not None else lo
        if hi < lo:
            raise ValueError(f"bad range {_quote(part.strip())} in cpulist {_quote(text)}")
        if hi > MAX_CPU_ID:
            raise ValueError(f"id {hi} above {MAX_CPU_ID} in cpulist {_quote(text)}")
        ranges.append((lo, hi))
    return ranges


def parse_cpulist(text: str) -> frozenset[int]:
    """Parse a kernel cpulist (``0-3,8-11``, ``0,5-11``, empty) into a set of ids.

    Tolerates surrounding whitespace and a trailing NUL byte (seen in real sysfs captures).
    Raises ``ValueError`` on anything else, including an id above ``MAX_CPU_ID`` (so a 13-byte
    ``0-4000000000`` costs nothing); parsers turn that into a ``ParseError``. A list read from a
    published object is a ``CpuSet`` instead (``CpuSet.parse``): its ranges, never expanded.
    """
    ids: set[int] = set()
    for lo, hi in _cpulist_ranges(text):
        if lo == hi:
            ids.add(lo)
        else:
            ids.update(range(lo, hi + 1))
    return frozenset(ids)


def _merged(ranges: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """Sorted, disjoint, non-adjacent ranges covering the same ids."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return tuple(out)


class CpuSet(AbstractSet[int]):
    """An immutable set of CPU (or NUMA node) ids kept as its ranges: ``0-65535`` is one pair.

    What the NodeTopology reader gives for a published CPU list: an object may say ``0-65535``
    for each of 1,024 GPUs, and a set of ids would make each of those 65,536 entries; this one
    costs the ranges written, which the CRD bounds by the list's length. It is a set: ``in``,
    ``len``, iteration, ``&``, ``|``, ``-``, ``<=`` and ``isdisjoint`` work with any set of ids (range
    arithmetic between two ``CpuSet``), and it equals and hashes like the frozenset of its ids.
    """

    __slots__ = ("_hashed", "_len", "_starts", "ranges")

    def __init__(self, ranges: Iterable[tuple[int, int]] = ()) -> None:
        self.ranges: tuple[tuple[int, int], ...] = _merged(ranges)
        self._starts = [lo for lo, _ in self.ranges]
        self._len = sum(hi - lo + 1 for lo, hi in self.ranges)
        self._hashed: int | None = None

    @classmethod
    def parse(cls, text: str) -> CpuSet:
        """A kernel cpulist as ranges (``parse_cpulist``'s grammar and errors)."""
        return cls(_cpulist_ranges(text))

    @classmethod
    def of(cls, ids: Iterable[int]) -> CpuSet:
        if isinstance(ids, CpuSet):
            return ids
        return cls((i, i) for i in ids)

    @classmethod
    def _from_iterable(cls, it: Iterable[Any]) -> CpuSet:  # type: ignore[override]
        return cls.of(it)  # the mixins' other operations (``^``) build a set of ids

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[int]:
        for lo, hi in self.ranges:
            yield from range(lo, hi + 1)

    def __contains__(self, value: object) -> bool:
        if not isinstance(value, int):
            return False
        i = bisect.bisect_right(self._starts, value) - 1
        return i >= 0 and value <= self.ranges[i][1]

    def __and__(self, other: AbstractSet[Any]) -> CpuSet:
        theirs = CpuSet.of(other).ranges
        out, i, j = [], 0, 0
        mine = self.ranges
        while i < len(mine) and j < len(theirs):
            lo, hi = max(mine[i][0], theirs[j][0]), min(mine[i][1], theirs[j][1])
            if lo <= hi:
                out.append((lo, hi))
            if mine[i][1] < theirs[j][1]:
                i += 1
            else:
                j += 1
        return CpuSet(out)

    __rand__ = __and__

    def __or__(self, other: AbstractSet[Any]) -> CpuSet:
        return CpuSet(self.ranges + CpuSet.of(other).ranges)

    __ror__ = __or__

    def union(self, *others: Iterable[int]) -> CpuSet:
        return CpuSet(self.ranges + tuple(r for o in others for r in CpuSet.of(o).ranges))

    def __sub__(self, other: AbstractSet[Any]) -> CpuSet:
        out = []
        theirs = CpuSet.of(other).ranges
        for lo, hi in self.ranges:
            for olo, ohi in theirs:
                if ohi < lo or olo > hi:
                    continue
                if olo > lo:
                    out.append((lo, olo - 1))
                lo = ohi + 1
                if lo > hi:
                    break
            if lo <= hi:
                out.append((lo, hi))
        return CpuSet(out)

    def __rsub__(self, other: AbstractSet[Any]) -> CpuSet:
        return CpuSet.of(other) - self

    def __le__(self, other: AbstractSet[Any]) -> bool:
        return len(self - other) == 0

    def __ge__(self, other: AbstractSet[Any]) -> bool:
        return len(CpuSet.of(other) - self) == 0

    def __lt__(self, other: AbstractSet[Any]) -> bool:
        return len(self) < len(other) and self <= other

    def __gt__(self, other: AbstractSet[Any]) -> bool:
        return len(self) > len(other) and self >= other

    def isdisjoint(self, other: Iterable[Any]) -> bool:
        return not (self & CpuSet.of(other))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, CpuSet):
            return self.ranges == other.ranges
        if isinstance(other, AbstractSet):
            return len(self) == len(other) and all(isinstance(i, int) for i in other) and self <= other
        return NotImplemented

    def __hash__(self) -> int:
        if self._hashed is None:
            self._hashed = AbstractSet._hash(self)  # the frozenset's hash: equal sets hash alike
        return self._hashed

    def __str__(self) -> str:
        return ",".join(f"{lo}" if lo == hi else f"{lo}-{hi}" for lo, hi in self.ranges)

    def __repr__(self) -> str:
        return f"CpuSet.parse({str(self)!r})"


def format_cpulist(ids: Iterable[int]) -> str:
    """The inverse of ``parse_cpulist``: ``{0,1,2,3,8}`` -> ``0-3,8``."""
    if isinstance(ids, CpuSet):
        return str(ids)
    ordered = sorted(set(ids))
    parts: list[str] = []
    start = prev = None
    for value in ordered:
        if start is None:
            start = prev = value
        elif prev is not None and value == prev + 1:
            prev = value
        else:
            parts.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = prev = value
    if start is not None:
        parts.append(f"{start}" if start == prev else f"{start}-{prev}")
    return ",".join(parts)
