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

One module per kind of fact (``values``, ``facts``, ``network``, ``allocation``, ``readings``,
``derived``, ``health``, ``cpulist``); every name is re-exported here, so ``from nodetopo.model
import X`` is the address. A module is imported when one of its names is first asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nodetopo.model.allocation import (
        ClaimDevice,
        DeviceAssignment,
        GpuAllocation,
        KubeletAllocation,
        ResourceCount,
        SliceDevice,
    )
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
        FabricInfo,
        Facts,
        IbstatCa,
        ListedGpu,
        MigDevice,
        NetDevice,
        NumaNode,
        NvlinkStatus,
        NvmlGpu,
        NvmlLink,
        NvmlSnapshot,
        PciDevice,
        QueriedGpu,
        RdmaDevice,
        RdmaPort,
        RemoteDeviceType,
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
        EdgeName,
        HealthReport,
        LinkState,
    )
    from nodetopo.model.network import FabricTier, NetworkObservation, SwitchPort
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
        PodRef,
        SourceStatus,
    )

#: submodule -> the names it defines that are re-exported here. A name is imported from its module
#: when first asked for (``from nodetopo.model import Gpu`` imports ``derived`` only): a command
#: pays for the records it uses (each frozen dataclass costs ~0.5 ms to create at import; the
#: per-source facts are 19 of them, which a reader of published objects never builds).
_EXPORTS: dict[str, tuple[str, ...]] = {
    "allocation": (
        "ClaimDevice",
        "DeviceAssignment",
        "GpuAllocation",
        "KubeletAllocation",
        "ResourceCount",
        "SliceDevice",
    ),
    "cpulist": (
        "MAX_CPU_ID",
        "MAX_NUMA_NODE_ID",
        "CpuSet",
        "format_cpulist",
        "parse_cpulist",
    ),
    "derived": (
        "MAX_LINKED_GPUS",
        "Gpu",
        "GpuLink",
        "GpuNicDistance",
        "NetworkPosition",
        "Nic",
        "NvlinkIsland",
        "PreferredGpuSets",
        "Topology",
    ),
    "facts": (
        "FabricInfo",
        "Facts",
        "IbstatCa",
        "ListedGpu",
        "MigDevice",
        "NetDevice",
        "NumaNode",
        "NvlinkStatus",
        "NvmlGpu",
        "NvmlLink",
        "NvmlSnapshot",
        "PciDevice",
        "QueriedGpu",
        "RdmaDevice",
        "RdmaPort",
        "RemoteDeviceType",
        "TopoGpu",
        "TopoLink",
        "TopoMatrix",
        "TopoNic",
    ),
    "health": (
        "NOT_JUDGED",
        "CounterBaseline",
        "CounterRate",
        "EdgeHealth",
        "EdgeKind",
        "EdgeName",
        "HealthReport",
        "LinkState",
    ),
    "network": (
        "FabricTier",
        "NetworkObservation",
        "SwitchPort",
    ),
    "readings": (
        "NO_READINGS",
        "GpuPcieReading",
        "HealthReadings",
        "NvlinkReading",
        "PcieLinkReading",
        "PortCounterReading",
    ),
    "values": (
        "NODE_LABELS_SOURCE",
        "Condition",
        "ConditionReason",
        "LinkClass",
        "PciAddress",
        "PodRef",
        "SourceStatus",
    ),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

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
    "EdgeName",
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

if not TYPE_CHECKING:  # mypy sees the imports above; a module __getattr__ would hide a typo from it

    def __getattr__(name: str) -> object:
        module = _MODULE_OF.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        # __import__, not importlib.import_module: the import shows in ``python -X importtime``
        value = getattr(__import__(f"{__name__}.{module}", fromlist=[name]), name)
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *__all__})
