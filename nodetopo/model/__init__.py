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

One module per kind of fact (``values``, ``facts``, ``readings``, ``derived``, ``health``,
``cpulist``); every name is re-exported here, so ``from nodetopo.model import X`` is the address.
"""

from __future__ import annotations

from nodetopo.model.cpulist import MAX_CPU_ID, MAX_NUMA_NODE_ID, CpuSet, format_cpulist, parse_cpulist
from nodetopo.model.derived import (
    MAX_LINKED_GPUS,
    Gpu,
    GpuLink,
    GpuNicDistance,
    NetworkPosition,
    Nic,
    NvlinkIsland,
    PreferredGpuSets,
    Topology,
)
from nodetopo.model.facts import (
    ClaimDevice,
    DeviceAssignment,
    FabricInfo,
    FabricTier,
    Facts,
    GpuAllocation,
    IbstatCa,
    KubeletAllocation,
    ListedGpu,
    MigDevice,
    NetDevice,
    NetworkObservation,
    NumaNode,
    NvlinkStatus,
    NvmlGpu,
    NvmlLink,
    NvmlSnapshot,
    PciDevice,
    PodRef,
    QueriedGpu,
    RdmaDevice,
    RdmaPort,
    RemoteDeviceType,
    ResourceCount,
    SliceDevice,
    SwitchPort,
    TopoGpu,
    TopoLink,
    TopoMatrix,
    TopoNic,
)
from nodetopo.model.health import (
    NOT_JUDGED,
    CounterBaseline,
    CounterRate,
    EdgeHealth,
    EdgeKind,
    HealthReport,
    LinkState,
)
from nodetopo.model.readings import (
    NO_READINGS,
    GpuPcieReading,
    HealthReadings,
    NvlinkReading,
    PcieLinkReading,
    PortCounterReading,
)
from nodetopo.model.values import (
    NODE_LABELS_SOURCE,
    Condition,
    ConditionReason,
    LinkClass,
    PciAddress,
    SourceStatus,
)

__all__ = [
    "MAX_CPU_ID",
    "MAX_LINKED_GPUS",
    "MAX_NUMA_NODE_ID",
    "NODE_LABELS_SOURCE",
    "NOT_JUDGED",
    "NO_READINGS",
    "ClaimDevice",
    "Condition",
    "ConditionReason",
    "CounterBaseline",
    "CounterRate",
    "CpuSet",
    "DeviceAssignment",
    "EdgeHealth",
    "EdgeKind",
    "FabricInfo",
    "FabricTier",
    "Facts",
    "Gpu",
    "GpuAllocation",
    "GpuLink",
    "GpuNicDistance",
    "GpuPcieReading",
    "HealthReadings",
    "HealthReport",
    "IbstatCa",
    "KubeletAllocation",
    "LinkClass",
    "LinkState",
    "ListedGpu",
    "MigDevice",
    "NetDevice",
    "NetworkObservation",
    "NetworkPosition",
    "Nic",
    "NumaNode",
    "NvlinkIsland",
    "NvlinkReading",
    "NvlinkStatus",
    "NvmlGpu",
    "NvmlLink",
    "NvmlSnapshot",
    "PciAddress",
    "PciDevice",
    "PcieLinkReading",
    "PodRef",
    "PortCounterReading",
    "PreferredGpuSets",
    "QueriedGpu",
    "RdmaDevice",
    "RdmaPort",
    "RemoteDeviceType",
    "ResourceCount",
    "SliceDevice",
    "SourceStatus",
    "SwitchPort",
    "TopoGpu",
    "TopoLink",
    "TopoMatrix",
    "TopoNic",
    "Topology",
    "format_cpulist",
    "parse_cpulist",
]
