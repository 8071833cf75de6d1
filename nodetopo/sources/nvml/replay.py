"""``RecordedNvml``: a recorded NVML dump (``nvml.json``) replayed through the ``NvmlApi`` protocol.

The dump format, and how a dump is validated per device and per field, are ``nvml.dumpfile``'s: a
``RecordedNvml`` answers each call as the dump recorded it (the error it recorded, else the value,
else "not asked", which replays as ``NVML_ERROR_NOT_SUPPORTED``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TypeVar

from nodetopo.host import HostRoot
from nodetopo.model import FabricInfo, MigDevice, PciAddress, RemoteDeviceType
from nodetopo.sources.nvml.dumpfile import (
    FORMAT,
    RecordedDump,
    _RecordedDevice,
    _RecordedLink,
    _RecordedPair,
    dump_from_dict,
    load_dump,
    read_dump,
)
from nodetopo.sources.nvml.protocol import (
    INVALID_ARGUMENT,
    NOT_SUPPORTED,
    PCIE_CALLS,
    MigMode,
    NvlinkCounter,
    NvmlCallError,
    P2pCapability,
    P2pStatus,
    PcieQuestion,
    TopologyLevel,
)

__all__ = ["FORMAT", "RecordedNvml"]

T = TypeVar("T")


def _answer(call: str, key: str, value: T | None, errors: Mapping[str, str]) -> T:
    """A recorded answer: the recorded error, else the value, else "not asked" = not supported."""
    code = errors.get(key)
    if code is not None:
        raise NvmlCallError(call, code)
    if value is None:
        raise NvmlCallError(call, NOT_SUPPORTED)
    return value


class RecordedNvml:
    """``NvmlApi`` that answers from a ``nodetopo-nvml-dump/v1`` dump (see ``nvml.dumpfile``)."""

    def __init__(self, dump: RecordedDump) -> None:
        self._driver_version = dump.driver_version
        self._nvml_version = dump.nvml_version
        self._devices = dump.devices
        self._pairs = dump.pairs
        self._errors = dump.errors
        #: where the dump came from, for messages
        self.path = dump.path
        #: what was left out of the dump, one ``<key path>: <why>`` each (``nvml.dumpfile``)
        self.problems = dump.problems

    @classmethod
    def from_json(cls, path: str | os.PathLike[str], *, root: HostRoot | None = None) -> RecordedNvml:
        """Load ``nvml.json`` (inside ``root`` when given: a bundle's own dump may not leave it).

        Raises ``ParseError`` naming the file when it is not a dump at all (``nvml.dumpfile``).
        """
        return cls.from_bytes(read_dump(path, root=root), where=str(path))

    @classmethod
    def from_bytes(cls, raw: bytes, *, where: str = "<nvml dump>") -> RecordedNvml:
        """A dump from the bytes of ``nvml.json`` (``where`` names it in messages).

        Raises ``ParseError`` when they are not a dump at all (``nvml.dumpfile``).
        """
        return cls(load_dump(raw, where=where))

    @classmethod
    def from_dict(cls, data: object, *, path: str = "<nvml dump>") -> RecordedNvml:
        """Build from a parsed dump; ``ParseError`` only when it is not a dump at all."""
        return cls(dump_from_dict(data, path=path))

    # -- NvmlApi --------------------------------------------------------------------------------

    def _device(self, call: str, index: int) -> _RecordedDevice:
        if 0 <= index < len(self._devices):
            return self._devices[index]
        raise NvmlCallError(call, INVALID_ARGUMENT, f"no device {index} in the dump")

    def _on_device(self, call: str, index: int, key: str, pick: Callable[[_RecordedDevice], T | None]) -> T:
        device = self._device(call, index)
        return _answer(call, key, pick(device), device.errors)

    def driver_version(self) -> str:
        return _answer("nvmlSystemGetDriverVersion", "driverVersion", self._driver_version, self._errors)

    def nvml_version(self) -> str:
        return _answer("nvmlSystemGetNVMLVersion", "nvmlVersion", self._nvml_version, self._errors)

    def device_count(self) -> int:
        code = self._errors.get("deviceCount")
        if code is not None:
            raise NvmlCallError("nvmlDeviceGetCount", code)
        return len(self._devices)

    def uuid(self, index: int) -> str:
        return self._on_device("nvmlDeviceGetUUID", index, "uuid", lambda d: d.uuid)

    def name(self, index: int) -> str:
        return self._on_device("nvmlDeviceGetName", index, "name", lambda d: d.name)

    def pci_bus_id(self, index: int) -> PciAddress:
        return self._on_device("nvmlDeviceGetPciInfo", index, "pciBusId", lambda d: d.address)

    def memory_total(self, index: int) -> int:
        return self._on_device("nvmlDeviceGetMemoryInfo", index, "memoryTotal", lambda d: d.memory_total)

    def cpu_affinity(self, index: int) -> frozenset[int]:
        return self._on_device("nvmlDeviceGetCpuAffinity", index, "cpuAffinity", lambda d: d.cpu_affinity)

    def numa_node_id(self, index: int) -> int:
        return self._on_device("nvmlDeviceGetNumaNodeId", index, "numaNodeId", lambda d: d.numa_node_id)

    def mig_mode(self, index: int) -> MigMode:
        return self._on_device("nvmlDeviceGetMigMode", index, "migMode", lambda d: d.mig_mode)

    def fabric_info(self, index: int) -> FabricInfo:
        return self._on_device("nvmlDeviceGetGpuFabricInfoV", index, "fabric", lambda d: d.fabric)

    def mig_devices(self, index: int) -> tuple[MigDevice, ...]:
        return self._on_device(
            "nvmlDeviceGetMigDeviceHandleByIndex", index, "migDevices", lambda d: d.mig_devices
        )

    def _link(self, call: str, index: int, link: int) -> _RecordedLink:
        device = self._device(call, index)
        recorded = device.links.get(link)
        if recorded is None:
            raise NvmlCallError(call, device.errors.get("nvlinks", INVALID_ARGUMENT))
        return recorded

    def nvlink_active(self, index: int, link: int) -> bool:
        call = "nvmlDeviceGetNvLinkState"
        recorded = self._link(call, index, link)
        return _answer(call, "active", recorded.active, recorded.errors)

    def nvlink_remote_pci_bus_id(self, index: int, link: int) -> PciAddress:
        call = "nvmlDeviceGetNvLinkRemotePciInfo"
        recorded = self._link(call, index, link)
        return _answer(call, "remotePciBusId", recorded.remote_address, recorded.errors)

    def nvlink_remote_type(self, index: int, link: int) -> RemoteDeviceType:
        call = "nvmlDeviceGetNvLinkRemoteDeviceType"
        recorded = self._link(call, index, link)
        return _answer(call, "remoteType", recorded.remote_type, recorded.errors)

    def pcie(self, index: int, question: PcieQuestion) -> int:
        call = PCIE_CALLS[question]
        device = self._device(call, index)
        return _answer(call, question.value, device.pcie.get(question.value), device.pcie_errors)

    def nvlink_speed_mbps(self, index: int, link: int) -> int:
        call = "nvmlDeviceGetFieldValues"
        recorded = self._link(call, index, link)
        return _answer(call, "speedMBps", recorded.speed_mbps, recorded.errors)

    def nvlink_error_counter(self, index: int, link: int, counter: NvlinkCounter) -> int:
        call = "nvmlDeviceGetNvLinkErrorCounter"
        recorded = self._link(call, index, link)
        return _answer(call, counter.value, recorded.counters.get(counter.value), recorded.counter_errors)

    def _pair(self, call: str, a: int, b: int) -> _RecordedPair:
        self._device(call, a)
        self._device(call, b)
        pair = self._pairs.get((min(a, b), max(a, b)))
        return pair if pair is not None else _RecordedPair(level=None, read=None, nvlink=None, errors={})

    def common_ancestor(self, a: int, b: int) -> TopologyLevel:
        call = "nvmlDeviceGetTopologyCommonAncestor"
        pair = self._pair(call, a, b)
        return _answer(call, "level", pair.level, pair.errors)

    def p2p_status(self, a: int, b: int, capability: P2pCapability) -> P2pStatus:
        call = "nvmlDeviceGetP2PStatus"
        pair = self._pair(call, a, b)
        value = pair.read if capability is P2pCapability.READ else pair.nvlink
        return _answer(call, capability.value, value, pair.errors)
