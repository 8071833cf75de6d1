"""``PynvmlApi``: the ``NvmlApi`` protocol over the real NVML library through ``pynvml``.

The only module of nodetopo that imports ``pynvml`` (package ``nvidia-ml-py``), and only lazily,
inside ``PynvmlApi.open``: importing nodetopo never needs ``libnvidia-ml.so.1``.

Fabric: a probe that completed with a failing status (``state`` COMPLETED, ``status`` not
``NVML_SUCCESS``) is reported as an error of the call, with that status as its code.
MIG profile: the text after ``MIG `` in the MIG device's ``nvmlDeviceGetName`` (``3g.40gb``).
"""

from __future__ import annotations

import ctypes
import functools
import logging
import uuid as uuid_module
from collections.abc import Callable
from types import ModuleType, TracebackType
from typing import Any, TypeVar, cast

from nodetopo.model import FabricInfo, MigDevice, PciAddress, RemoteDeviceType
from nodetopo.sources.nvml.protocol import (
    ERROR_TEXT,
    INVALID_ARGUMENT,
    NAME,
    NOT_FOUND,
    PCIE_CALLS,
    MigMode,
    NvlinkCounter,
    NvmlCallError,
    P2pCapability,
    P2pStatus,
    PcieQuestion,
    TopologyLevel,
    cpus_of_bitmask,
    mig_profile_of_name,
    sorted_migs,
)

log = logging.getLogger(__name__)

_CPU_SET_WORDS = 64  #: 64-bit words asked of nvmlDeviceGetCpuAffinity: room for 4096 CPUs
_P2P_INDEX = {P2pCapability.READ: 0, P2pCapability.NVLINK: 2}  #: NVML_P2P_CAPS_INDEX_*
_P2P_STATUS = {
    0: P2pStatus.OK,
    1: P2pStatus.CHIPSET_NOT_SUPPORTED,
    2: P2pStatus.GPU_NOT_SUPPORTED,
    3: P2pStatus.IOH_TOPOLOGY_NOT_SUPPORTED,
    4: P2pStatus.DISABLED_BY_REGKEY,
    5: P2pStatus.NOT_SUPPORTED,
    6: P2pStatus.UNKNOWN,
}
_TOPOLOGY_LEVEL = {
    0: TopologyLevel.INTERNAL,
    10: TopologyLevel.SINGLE,
    20: TopologyLevel.MULTIPLE,
    30: TopologyLevel.HOSTBRIDGE,
    40: TopologyLevel.NODE,
    50: TopologyLevel.SYSTEM,
}
_REMOTE_TYPE = {0: RemoteDeviceType.GPU, 1: RemoteDeviceType.IBMNPU, 2: RemoteDeviceType.SWITCH}
_FABRIC_STATE = {0: "NOT_SUPPORTED", 1: "NOT_STARTED", 2: "IN_PROGRESS", 3: "COMPLETED"}
_FABRIC_HEALTH = {0: "NOT_SUPPORTED", 1: "HEALTHY", 2: "UNHEALTHY", 3: "LIMITED_CAPACITY"}
#: NVML_NVLINK_ERROR_DL_* of each counter
_NVLINK_COUNTERS = {
    NvlinkCounter.REPLAY: 0,
    NvlinkCounter.RECOVERY: 1,
    NvlinkCounter.CRC_FLIT: 2,
    NvlinkCounter.CRC_DATA: 3,
}
#: NVML_FI_DEV_NVLINK_GET_SPEED: a link's speed (MB/s), scoped by the link number
_FI_NVLINK_GET_SPEED = 164

T = TypeVar("T")


def _text(value: object) -> str:
    """pynvml answers str or bytes depending on its version."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace").rstrip("\x00")
    return str(value)


class PynvmlApi:
    """``NvmlApi`` over the real NVML through ``pynvml``; live host only.

    Use as a context manager (``nvmlInit`` on enter, ``nvmlShutdown`` on exit), or call it
    directly: the first call initialises NVML. A failed initialisation raises ``NvmlCallError``
    with call ``nvmlInit`` and NVML's own words (library not found, driver not loaded,
    driver/library version mismatch, insufficient permissions).
    """

    def __init__(self) -> None:
        self._pynvml: ModuleType | None = None
        self._handles: dict[int, object] = {}
        self._codes: dict[int, str] = {}

    # -- lifecycle ------------------------------------------------------------------------------

    def open(self) -> None:
        if self._pynvml is not None:
            return
        try:
            import pynvml  # the only import of pynvml in nodetopo
        except ImportError as e:
            raise NvmlCallError(
                "import pynvml", "NVML_ERROR_LIBRARY_NOT_FOUND", f"nvidia-ml-py is not installed: {e}"
            ) from e
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as e:
            raise self._error(pynvml, "nvmlInit", e) from e
        self._pynvml = pynvml
        self._handles.clear()

    def close(self) -> None:
        pynvml, self._pynvml = self._pynvml, None
        self._handles.clear()
        if pynvml is None:
            return
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError as e:
            log.warning("nvmlShutdown failed: %s", e, extra={"source": NAME})

    def __enter__(self) -> PynvmlApi:
        self.open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # -- plumbing -------------------------------------------------------------------------------

    def _code_name(self, pynvml: ModuleType, value: int) -> str:
        if not self._codes:
            for attr in dir(pynvml):
                constant = getattr(pynvml, attr)
                if attr.startswith("NVML_ERROR_") and isinstance(constant, int):
                    self._codes.setdefault(constant, attr)
        return self._codes.get(value, f"NVML_ERROR_{value}")

    def _error(self, pynvml: ModuleType, call: str, error: Any) -> NvmlCallError:
        value = int(getattr(error, "value", -1))
        try:
            text = str(error)
        except Exception:  # noqa: BLE001 - str() may call into a library that is not there
            text = None
        return NvmlCallError(call, self._code_name(pynvml, value), text)

    def _call(self, call: str, fn: Callable[[ModuleType], T]) -> T:
        self.open()
        pynvml = self._pynvml
        assert pynvml is not None
        try:
            return fn(pynvml)
        except pynvml.NVMLError as e:
            raise self._error(pynvml, call, e) from e

    def _handle(self, index: int) -> object:
        handle = self._handles.get(index)
        if handle is None:
            handle = self._call("nvmlDeviceGetHandleByIndex", lambda n: n.nvmlDeviceGetHandleByIndex(index))
            self._handles[index] = handle
        return handle

    def _on_device(self, call: str, index: int, fn: Callable[[ModuleType, object], T]) -> T:
        handle = self._handle(index)
        return self._call(call, lambda n: fn(n, handle))

    # -- NvmlApi --------------------------------------------------------------------------------

    def driver_version(self) -> str:
        return self._call("nvmlSystemGetDriverVersion", lambda n: _text(n.nvmlSystemGetDriverVersion()))

    def nvml_version(self) -> str:
        return self._call("nvmlSystemGetNVMLVersion", lambda n: _text(n.nvmlSystemGetNVMLVersion()))

    def device_count(self) -> int:
        return self._call("nvmlDeviceGetCount", lambda n: int(n.nvmlDeviceGetCount()))

    def uuid(self, index: int) -> str:
        return self._on_device("nvmlDeviceGetUUID", index, lambda n, h: _text(n.nvmlDeviceGetUUID(h)))

    def name(self, index: int) -> str:
        return self._on_device("nvmlDeviceGetName", index, lambda n, h: _text(n.nvmlDeviceGetName(h)))

    def pci_bus_id(self, index: int) -> PciAddress:
        bus_id = self._on_device(
            "nvmlDeviceGetPciInfo", index, lambda n, h: _text(n.nvmlDeviceGetPciInfo(h).busId)
        )
        return _parse_live_address("nvmlDeviceGetPciInfo", bus_id)

    def memory_total(self, index: int) -> int:
        return self._on_device(
            "nvmlDeviceGetMemoryInfo", index, lambda n, h: int(n.nvmlDeviceGetMemoryInfo(h).total)
        )

    def cpu_affinity(self, index: int) -> frozenset[int]:
        words = self._on_device(
            "nvmlDeviceGetCpuAffinity",
            index,
            lambda n, h: [int(w) for w in n.nvmlDeviceGetCpuAffinity(h, _CPU_SET_WORDS)],
        )
        return cpus_of_bitmask(words)

    def numa_node_id(self, index: int) -> int:
        return self._on_device(
            "nvmlDeviceGetNumaNodeId", index, lambda n, h: int(n.nvmlDeviceGetNumaNodeId(h))
        )

    def mig_mode(self, index: int) -> MigMode:
        current, pending = self._on_device(
            "nvmlDeviceGetMigMode", index, lambda n, h: tuple(int(v) for v in n.nvmlDeviceGetMigMode(h))
        )
        return MigMode(current=current == 1, pending=pending == 1)

    def nvlink_active(self, index: int, link: int) -> bool:
        return self._on_device(
            "nvmlDeviceGetNvLinkState", index, lambda n, h: int(n.nvmlDeviceGetNvLinkState(h, link)) == 1
        )

    def nvlink_remote_pci_bus_id(self, index: int, link: int) -> PciAddress:
        call = "nvmlDeviceGetNvLinkRemotePciInfo"
        bus_id = self._on_device(
            call, index, lambda n, h: _text(n.nvmlDeviceGetNvLinkRemotePciInfo(h, link).busId)
        )
        return _parse_live_address(call, bus_id)

    def nvlink_remote_type(self, index: int, link: int) -> RemoteDeviceType:
        value = self._on_device(
            "nvmlDeviceGetNvLinkRemoteDeviceType",
            index,
            lambda n, h: int(n.nvmlDeviceGetNvLinkRemoteDeviceType(h, link)),
        )
        return _REMOTE_TYPE.get(value, RemoteDeviceType.UNKNOWN)

    def fabric_info(self, index: int) -> FabricInfo:
        call = "nvmlDeviceGetGpuFabricInfoV"
        info, health, mask = self._on_device(call, index, _query_fabric)
        state = _FABRIC_STATE.get(int(info.state), f"UNKNOWN_{int(info.state)}")
        status = int(info.status)
        if state == "COMPLETED" and status != 0:
            pynvml = self._pynvml
            assert pynvml is not None
            code = self._code_name(pynvml, status)
            raise NvmlCallError(call, code, f"fabric probe completed with {ERROR_TEXT.get(code, code)}")
        return FabricInfo(
            cluster_uuid=str(uuid_module.UUID(bytes=bytes(info.clusterUuid))),
            clique_id=int(info.cliqueId),
            state=state,
            health=health,
            health_mask=mask,
        )

    def pcie(self, index: int, question: PcieQuestion) -> int:
        call = PCIE_CALLS[question]
        return self._on_device(call, index, lambda n, h: int(_function(n, call)(h)))

    def nvlink_speed_mbps(self, index: int, link: int) -> int:
        call = "nvmlDeviceGetFieldValues"
        value = self._on_device(
            call, index, functools.partial(_field_value, field=_FI_NVLINK_GET_SPEED, scope=link)
        )
        status, answer = value
        if status != 0:
            pynvml = self._pynvml
            assert pynvml is not None
            raise NvmlCallError(call, self._code_name(pynvml, status))
        return answer

    def nvlink_error_counter(self, index: int, link: int, counter: NvlinkCounter) -> int:
        call = "nvmlDeviceGetNvLinkErrorCounter"
        return self._on_device(
            call, index, lambda n, h: int(_function(n, call)(h, link, _NVLINK_COUNTERS[counter]))
        )

    def mig_devices(self, index: int) -> tuple[MigDevice, ...]:
        parent = self._handle(index)
        count = self._call(
            "nvmlDeviceGetMaxMigDeviceCount", lambda n: int(n.nvmlDeviceGetMaxMigDeviceCount(parent))
        )
        found: list[MigDevice] = []
        for slot in range(count):
            try:
                mig = self._call(
                    "nvmlDeviceGetMigDeviceHandleByIndex",
                    functools.partial(_mig_handle, parent=parent, slot=slot),
                )
            except NvmlCallError as e:
                if e.code in (NOT_FOUND, INVALID_ARGUMENT):  # an empty slot
                    continue
                raise
            found.append(self._mig_device(mig))
        return sorted_migs(found)

    def _mig_device(self, mig: object) -> MigDevice:
        name = self._call("nvmlDeviceGetName", lambda n: _text(n.nvmlDeviceGetName(mig)))
        return MigDevice(
            uuid=self._call("nvmlDeviceGetUUID", lambda n: _text(n.nvmlDeviceGetUUID(mig))),
            gpu_instance=self._call(
                "nvmlDeviceGetGpuInstanceId", lambda n: int(n.nvmlDeviceGetGpuInstanceId(mig))
            ),
            compute_instance=self._call(
                "nvmlDeviceGetComputeInstanceId", lambda n: int(n.nvmlDeviceGetComputeInstanceId(mig))
            ),
            profile=mig_profile_of_name(name),
        )

    def common_ancestor(self, a: int, b: int) -> TopologyLevel:
        call = "nvmlDeviceGetTopologyCommonAncestor"
        first, second = self._handle(a), self._handle(b)
        value = self._call(call, lambda n: int(n.nvmlDeviceGetTopologyCommonAncestor(first, second)))
        level = _TOPOLOGY_LEVEL.get(value)
        if level is None:
            raise NvmlCallError(call, "NVML_ERROR_UNKNOWN", f"unknown topology level {value}")
        return level

    def p2p_status(self, a: int, b: int, capability: P2pCapability) -> P2pStatus:
        first, second = self._handle(a), self._handle(b)
        value = self._call(
            "nvmlDeviceGetP2PStatus",
            lambda n: int(n.nvmlDeviceGetP2PStatus(first, second, _P2P_INDEX[capability])),
        )
        return _P2P_STATUS.get(value, P2pStatus.UNKNOWN)


def _mig_handle(pynvml: ModuleType, *, parent: object, slot: int) -> object:
    return pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, slot)


def _function(pynvml: ModuleType, name: str) -> Callable[..., Any]:
    """``pynvml.<name>``; a pynvml without it raises as NVML does for a function its driver lacks."""
    found = getattr(pynvml, name, None)
    if found is None:
        raise NvmlCallError(name, "NVML_ERROR_FUNCTION_NOT_FOUND", f"{name} is not in this pynvml")
    return cast(Callable[..., Any], found)


def _field_value(pynvml: ModuleType, handle: object, *, field: int, scope: int) -> tuple[int, int]:
    """One ``nvmlDeviceGetFieldValues`` answer: (its NVML return code, its unsigned value)."""
    (value,) = _function(pynvml, "nvmlDeviceGetFieldValues")(handle, [(field, scope)])
    return int(value.nvmlReturn), int(value.value.uiVal)


def _query_fabric(pynvml: ModuleType, handle: object) -> tuple[Any, str | None, int | None]:
    """The newest fabric-info structure this driver and pynvml accept, its health summary and mask.

    v3 (health summary) and v2 go through ``nvmlDeviceGetGpuFabricInfoV``; drivers before it
    (R535) only have ``nvmlDeviceGetGpuFabricInfo`` and the unversioned structure.
    """
    retry = {
        getattr(pynvml, "NVML_ERROR_ARGUMENT_VERSION_MISMATCH", 25),
        getattr(pynvml, "NVML_ERROR_FUNCTION_NOT_FOUND", 13),
    }
    versioned = getattr(pynvml, "nvmlDeviceGetGpuFabricInfoV", None)
    if versioned is not None:
        for struct_name in ("c_nvmlGpuFabricInfo_v3_t", "c_nvmlGpuFabricInfo_v2_t"):
            struct = getattr(pynvml, struct_name, None)
            if struct is None:
                continue
            info = struct()
            try:
                versioned(handle, ctypes.byref(info))
            except pynvml.NVMLError as e:
                if int(getattr(e, "value", -1)) in retry:
                    continue
                raise
            summary = getattr(info, "healthSummary", None)
            health = _FABRIC_HEALTH.get(int(summary)) if summary is not None else None
            mask = getattr(info, "healthMask", None)
            return info, health, int(mask) if mask is not None else None
    info = pynvml.c_nvmlGpuFabricInfo_t()
    pynvml.nvmlDeviceGetGpuFabricInfo(handle, ctypes.byref(info))
    return info, None, None


def _parse_live_address(call: str, text: str) -> PciAddress:
    try:
        return PciAddress.parse(text)
    except ValueError:
        raise NvmlCallError(call, "NVML_ERROR_UNKNOWN", f"unreadable PCI bus id {text!r}") from None
