"""NVML (``pynvml``) behind a narrow protocol, plus a recorded dump that replays through it.

This is the only module of nodetopo that imports ``pynvml`` (package ``nvidia-ml-py``), and only
lazily, inside ``PynvmlApi``: importing nodetopo never needs ``libnvidia-ml.so.1``.

Pieces
------
* ``NvmlApi`` (a ``Protocol``): the few NVML calls nodetopo needs, in nodetopo's own types.
  Every call either answers or raises ``NvmlCallError(call, code, text)``; ``code`` is NVML's
  constant name (``NVML_ERROR_NOT_SUPPORTED``), so a reader can tell "this GPU cannot say"
  (``error.not_supported``) from a real failure.
* ``PynvmlApi``: the live implementation (``nvmlInit``/``nvmlShutdown`` as a context manager).
* ``RecordedNvml``: replays a dump (format below) through the same protocol, recorded errors included.
* ``dump_nvml(api) -> dict``: records the protocol's answers (what ``nodetopo capture`` writes to
  ``nvml.json``); ``dump_nvml(RecordedNvml.from_dict(d)) == d`` for every dump it wrote.
* ``read_nvml(api) -> (NvmlSnapshot, conditions)`` (pure over the protocol) and ``collect(ctx)``.

Mapping of ``nvmlDeviceGetTopologyCommonAncestor`` onto nvidia-smi's classes
---------------------------------------------------------------------------
``INTERNAL`` -> PIX, ``SINGLE`` -> PIX, ``MULTIPLE`` -> PXB, ``HOSTBRIDGE`` -> PHB, ``NODE`` -> NODE,
``SYSTEM`` -> SYS. ``INTERNAL`` means both devices sit on one board (a dual-GPU card such as a K80,
whose GPUs share the board's own PCIe switch): the path crosses at most that one switch, which is
what PIX means, so it is the nearest class. (``NVML_TOPOLOGY_CPU`` is an old alias of ``NODE``.)

Dump format ``nodetopo-nvml-dump/v1``
------------------------------------
One JSON object. Keys are camelCase; lists are sorted as described; every object may carry an
``errors`` object mapping one of its own keys to the NVML error constant name the call raised
(``"NVML_ERROR_NOT_SUPPORTED"``, ``"NVML_ERROR_GPU_IS_LOST"``, ...); the key's value is then
``null``. A ``null`` value *without* an ``errors`` entry means "not asked" and replays as
``NVML_ERROR_NOT_SUPPORTED`` (hand-written dumps may omit the ``errors`` entry of a
not-supported call; ``dump_nvml`` always writes it, except for the "not asked" cases named below).
Unknown keys are ignored; a missing optional key reads as ``null``.

``` text
{
  "format":        "nodetopo-nvml-dump/v1",                  required, exactly this
  "driverVersion": "550.54.15" | null,                        nvmlSystemGetDriverVersion
  "nvmlVersion":   "12.550.54.15" | null,                     nvmlSystemGetNVMLVersion
  "errors":        {"driverVersion"|"nvmlVersion"|"deviceCount": "NVML_ERROR_..."},   optional
                   (an errors.deviceCount entry makes nvmlDeviceGetCount fail: devices must be [])
  "devices": [                                 one per NVML index, sorted, indices exactly 0..n-1
    {
      "index":       0,
      "uuid":        "GPU-8c4a...",                           nvmlDeviceGetUUID
      "name":        "NVIDIA H100 80GB HBM3",                 nvmlDeviceGetName
      "pciBusId":    "00000000:18:00.0",                      nvmlDeviceGetPciInfo().busId
                     (written in NVML's form: 8 hex digit domain, upper case; any form
                      PciAddress.parse accepts is read)
      "memoryTotal": 85520809984,                             nvmlDeviceGetMemoryInfo().total, bytes
      "cpuAffinity": "0-55,112-167",                          nvmlDeviceGetCpuAffinity, as a cpulist
      "numaNodeId":  null,                                    nvmlDeviceGetNumaNodeId (GPU memory's
                                                              own node on GH200/GB200; int)
      "migMode":     {"current": false, "pending": false},    nvmlDeviceGetMigMode
      "nvlinks": [                                            links 0, 1, ... in order (see below)
        {"link": 0, "active": true,                           nvmlDeviceGetNvLinkState
         "remotePciBusId": "00000000:05:00.0",                nvmlDeviceGetNvLinkRemotePciInfo
         "remoteType": "SWITCH"},                             nvmlDeviceGetNvLinkRemoteDeviceType:
                                                              GPU | SWITCH | IBMNPU | UNKNOWN
        {"link": 1, "active": false}                          inactive: remote keys not asked
      ],
      "fabric": {"clusterUuid": "9b2c7a4e-...", "cliqueId": 32766,       nvmlDeviceGetGpuFabricInfoV
                 "state": "COMPLETED", "health": "HEALTHY"} | null,
                 state: NOT_SUPPORTED | NOT_STARTED | IN_PROGRESS | COMPLETED;
                 health: HEALTHY | UNHEALTHY | LIMITED_CAPACITY | NOT_SUPPORTED | null (old drivers)
      "migDevices": [                                         asked only when migMode.current is
        {"uuid": "MIG-5c0e...", "gpuInstanceId": 1,           true, else null (not asked);
         "computeInstanceId": 0, "profile": "3g.40gb"}        sorted by (gpuInstanceId,
      ] | null,                                               computeInstanceId, uuid)
      "errors": {"numaNodeId": "NVML_ERROR_NOT_SUPPORTED"}    optional
    }
  ],
  "commonAncestor": [                                         every pair a < b, sorted by (a, b)
    {"a": 0, "b": 1, "level": "NVML_TOPOLOGY_SINGLE"}         INTERNAL | SINGLE | MULTIPLE |
  ],                                                          HOSTBRIDGE | NODE | SYSTEM
  "p2p": [                                                    every pair a < b, sorted by (a, b)
    {"a": 0, "b": 1, "read": "OK", "nvlink": "OK"}            nvmlDeviceGetP2PStatus with caps
  ]                                                           index READ / NVLINK: OK |
}                                                             CHIPSET_NOT_SUPPORTED |
                                                              GPU_NOT_SUPPORTED |
                                                              IOH_TOPOLOGY_NOT_SUPPORTED |
                                                              DISABLED_BY_REGKEY | NOT_SUPPORTED |
                                                              UNKNOWN
```

NVLinks: links are probed 0, 1, 2, ... until the state call fails with
``NVML_ERROR_INVALID_ARGUMENT`` (past the GPU's last link), ``NVML_ERROR_NOT_SUPPORTED`` or
``NVML_ERROR_FUNCTION_NOT_FOUND`` (no NVLink at all) or ``NVML_ERROR_GPU_IS_LOST``, or until
``MAX_NVLINKS`` (36) links. ``nvlinks`` lists the probed links in order; a link that is not
listed replays with the code in the device's ``errors.nvlinks`` entry when there is one (e.g.
``NVML_ERROR_NOT_SUPPORTED`` on a PCIe GPU without NVLink), else with
``NVML_ERROR_INVALID_ARGUMENT``: so an 18-link H100 lists links 0-17 and needs no entry, and a
GPU without NVLink has ``"nvlinks": []`` plus ``"errors": {"nvlinks": "NVML_ERROR_NOT_SUPPORTED"}``.
A link's own failed calls go in the link object's ``errors``
(``{"link": 3, "active": null, "errors": {"active": "NVML_ERROR_UNKNOWN"}}``).

Pairs: ``commonAncestor`` and ``p2p`` may hold ``errors`` too (``{"a": 0, "b": 1, "level": null,
"errors": {"level": "NVML_ERROR_UNKNOWN"}}``); a pair that is not listed replays as not supported.

Fabric: a probe that completed with a failing status (``state`` COMPLETED, ``status`` not
``NVML_SUCCESS``) is reported as an error of the call, with that status as its code.
MIG profile: the text after ``MIG `` in the MIG device's ``nvmlDeviceGetName`` (``3g.40gb``).
"""

from __future__ import annotations

import ctypes
import dataclasses
import enum
import functools
import json
import logging
import os
import re
import uuid as uuid_module
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any, Protocol, TypeVar, runtime_checkable

from nodetopo.errors import NodetopoError, ParseError
from nodetopo.model import (
    Condition,
    ConditionReason,
    FabricInfo,
    Facts,
    LinkClass,
    MigDevice,
    NvmlGpu,
    NvmlLink,
    NvmlSnapshot,
    PciAddress,
    RemoteDeviceType,
    SourceStatus,
    format_cpulist,
    parse_cpulist,
)
from nodetopo.sources.base import Context, SourceResult, condition, failed, guarded

log = logging.getLogger(__name__)

NAME = "nvml"
FORMAT = "nodetopo-nvml-dump/v1"

#: links probed per GPU at most (NVML_NVLINK_MAX_LINKS is 18 up to NVML 12, 36 in NVML 13)
MAX_NVLINKS = 36

NOT_SUPPORTED = "NVML_ERROR_NOT_SUPPORTED"
INVALID_ARGUMENT = "NVML_ERROR_INVALID_ARGUMENT"
FUNCTION_NOT_FOUND = "NVML_ERROR_FUNCTION_NOT_FOUND"
GPU_IS_LOST = "NVML_ERROR_GPU_IS_LOST"
NOT_FOUND = "NVML_ERROR_NOT_FOUND"

#: NVML's own words (nvmlErrorString) for the codes we may replay without the library at hand
ERROR_TEXT: dict[str, str] = {
    "NVML_ERROR_UNINITIALIZED": "Uninitialized",
    INVALID_ARGUMENT: "Invalid Argument",
    NOT_SUPPORTED: "Not Supported",
    "NVML_ERROR_NO_PERMISSION": "Insufficient Permissions",
    "NVML_ERROR_ALREADY_INITIALIZED": "Already Initialized",
    NOT_FOUND: "Not Found",
    "NVML_ERROR_INSUFFICIENT_SIZE": "Insufficient Size",
    "NVML_ERROR_INSUFFICIENT_POWER": "Insufficient External Power",
    "NVML_ERROR_DRIVER_NOT_LOADED": "Driver Not Loaded",
    "NVML_ERROR_TIMEOUT": "Timeout",
    "NVML_ERROR_IRQ_ISSUE": "Interrupt Request Issue",
    "NVML_ERROR_LIBRARY_NOT_FOUND": "NVML Shared Library Not Found",
    FUNCTION_NOT_FOUND: "Function Not Found",
    "NVML_ERROR_CORRUPTED_INFOROM": "Corrupted infoROM",
    GPU_IS_LOST: "GPU is lost",
    "NVML_ERROR_RESET_REQUIRED": "GPU requires restart",
    "NVML_ERROR_OPERATING_SYSTEM": "The operating system has blocked the request.",
    "NVML_ERROR_LIB_RM_VERSION_MISMATCH": "RM has detected an NVML/RM version mismatch.",
    "NVML_ERROR_MEMORY": "Insufficient Memory",
    "NVML_ERROR_NO_DATA": "No data",
    "NVML_ERROR_ARGUMENT_VERSION_MISMATCH": "Argument version mismatch",
    "NVML_ERROR_GPU_NOT_FOUND": "GPU not found",
    "NVML_ERROR_UNKNOWN": "Unknown Error",
}

_ERROR_CODE = re.compile(r"^NVML_ERROR_[A-Z0-9_]+$")


class NvmlCallError(NodetopoError):
    """One NVML call failed. ``code`` is NVML's constant name, ``text`` NVML's own words.

    ``not_supported`` is true when the GPU or driver cannot answer this question at all
    (``NVML_ERROR_NOT_SUPPORTED``, or ``NVML_ERROR_FUNCTION_NOT_FOUND`` from a driver older than
    the call): that is an absent fact, not a failure.
    """

    def __init__(self, call: str, code: str, text: str | None = None) -> None:
        self.call = call
        self.code = code
        self.text = text if text is not None else ERROR_TEXT.get(code, code)
        super().__init__(str(self))

    def __str__(self) -> str:
        return f"{self.call}: {self.text} ({self.code})"

    def __reduce__(self) -> tuple[object, ...]:
        return (NvmlCallError, (self.call, self.code, self.text))

    @property
    def not_supported(self) -> bool:
        return self.code in (NOT_SUPPORTED, FUNCTION_NOT_FOUND)

    @property
    def gpu_lost(self) -> bool:
        return self.code == GPU_IS_LOST


class TopologyLevel(enum.StrEnum):
    """``nvmlGpuTopologyLevel_t``: the closest common ancestor of two devices."""

    INTERNAL = "NVML_TOPOLOGY_INTERNAL"
    SINGLE = "NVML_TOPOLOGY_SINGLE"
    MULTIPLE = "NVML_TOPOLOGY_MULTIPLE"
    HOSTBRIDGE = "NVML_TOPOLOGY_HOSTBRIDGE"
    NODE = "NVML_TOPOLOGY_NODE"
    SYSTEM = "NVML_TOPOLOGY_SYSTEM"


#: nvidia-smi's classes for NVML's levels; INTERNAL (one board, one on-board switch) is PIX
LINK_CLASS_OF_LEVEL: dict[TopologyLevel, LinkClass] = {
    TopologyLevel.INTERNAL: LinkClass.PIX,
    TopologyLevel.SINGLE: LinkClass.PIX,
    TopologyLevel.MULTIPLE: LinkClass.PXB,
    TopologyLevel.HOSTBRIDGE: LinkClass.PHB,
    TopologyLevel.NODE: LinkClass.NODE,
    TopologyLevel.SYSTEM: LinkClass.SYS,
}


class P2pCapability(enum.StrEnum):
    """The ``nvmlDeviceGetP2PStatus`` capability indices we ask about (values = dump keys)."""

    READ = "read"
    NVLINK = "nvlink"


class P2pStatus(enum.StrEnum):
    """``nvmlGpuP2PStatus_t`` without its ``NVML_P2P_STATUS_`` prefix."""

    OK = "OK"
    CHIPSET_NOT_SUPPORTED = "CHIPSET_NOT_SUPPORTED"
    GPU_NOT_SUPPORTED = "GPU_NOT_SUPPORTED"
    IOH_TOPOLOGY_NOT_SUPPORTED = "IOH_TOPOLOGY_NOT_SUPPORTED"
    DISABLED_BY_REGKEY = "DISABLED_BY_REGKEY"
    NOT_SUPPORTED = "NOT_SUPPORTED"
    UNKNOWN = "UNKNOWN"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class MigMode:
    """``nvmlDeviceGetMigMode``: whether MIG is on now, and after the next GPU reset."""

    current: bool
    pending: bool


# --------------------------------------------------------------------------------------------
# The protocol
# --------------------------------------------------------------------------------------------


@runtime_checkable
class NvmlApi(Protocol):
    """The NVML calls nodetopo makes, in nodetopo's types. Each raises ``NvmlCallError``.

    Devices are named by their NVML index (0 .. ``device_count() - 1``).
    """

    def driver_version(self) -> str: ...

    def nvml_version(self) -> str: ...

    def device_count(self) -> int: ...

    def uuid(self, index: int) -> str: ...

    def name(self, index: int) -> str: ...

    def pci_bus_id(self, index: int) -> PciAddress: ...

    def memory_total(self, index: int) -> int: ...

    def cpu_affinity(self, index: int) -> frozenset[int]: ...

    def numa_node_id(self, index: int) -> int: ...

    def mig_mode(self, index: int) -> MigMode: ...

    def nvlink_active(self, index: int, link: int) -> bool: ...

    def nvlink_remote_pci_bus_id(self, index: int, link: int) -> PciAddress: ...

    def nvlink_remote_type(self, index: int, link: int) -> RemoteDeviceType: ...

    def fabric_info(self, index: int) -> FabricInfo: ...

    def mig_devices(self, index: int) -> tuple[MigDevice, ...]:
        """The MIG devices of a GPU: uuid, gpu_instance, compute_instance, profile (no parent)."""
        ...

    def common_ancestor(self, a: int, b: int) -> TopologyLevel: ...

    def p2p_status(self, a: int, b: int, capability: P2pCapability) -> P2pStatus: ...


def nvml_bus_id(address: PciAddress) -> str:
    """A PCI address as NVML writes it: ``00000000:18:00.0``."""
    return f"{address.domain:08X}:{address.bus:02X}:{address.device:02X}.{address.function}"


_MIG_PROFILE = re.compile(r"\bMIG\s+(\S+)")


def mig_profile_of_name(name: str) -> str | None:
    """``NVIDIA A100-SXM4-40GB MIG 3g.20gb`` -> ``3g.20gb`` (None when the name has no ``MIG``)."""
    match = _MIG_PROFILE.search(name)
    return match[1] if match else None


# --------------------------------------------------------------------------------------------
# The live implementation
# --------------------------------------------------------------------------------------------

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
        info, health = self._on_device(call, index, _query_fabric)
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
        return _sorted_migs(found)

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


def _query_fabric(pynvml: ModuleType, handle: object) -> tuple[Any, str | None]:
    """The newest fabric-info structure this driver and pynvml accept, and its health summary.

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
            return info, health
    info = pynvml.c_nvmlGpuFabricInfo_t()
    pynvml.nvmlDeviceGetGpuFabricInfo(handle, ctypes.byref(info))
    return info, None


def _parse_live_address(call: str, text: str) -> PciAddress:
    try:
        return PciAddress.parse(text)
    except ValueError:
        raise NvmlCallError(call, "NVML_ERROR_UNKNOWN", f"unreadable PCI bus id {text!r}") from None


def cpus_of_bitmask(words: list[int] | tuple[int, ...]) -> frozenset[int]:
    """NVML's CPU set (an array of 64-bit words, CPU ``64*i + j`` = bit ``j`` of word ``i``)."""
    return frozenset(
        word_index * 64 + bit for word_index, word in enumerate(words) for bit in range(64) if word >> bit & 1
    )


def _sorted_migs(migs: list[MigDevice] | tuple[MigDevice, ...]) -> tuple[MigDevice, ...]:
    return tuple(sorted(migs, key=lambda m: (m.gpu_instance or 0, m.compute_instance or 0, m.uuid)))


# --------------------------------------------------------------------------------------------
# Replaying a dump
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _RecordedLink:
    link: int
    active: bool | None
    remote_address: PciAddress | None
    remote_type: RemoteDeviceType | None
    errors: Mapping[str, str]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _RecordedDevice:
    index: int
    uuid: str | None
    name: str | None
    address: PciAddress | None
    memory_total: int | None
    cpu_affinity: frozenset[int] | None
    numa_node_id: int | None
    mig_mode: MigMode | None
    links: Mapping[int, _RecordedLink]
    fabric: FabricInfo | None
    mig_devices: tuple[MigDevice, ...] | None
    errors: Mapping[str, str]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _RecordedPair:
    level: TopologyLevel | None
    read: P2pStatus | None
    nvlink: P2pStatus | None
    errors: Mapping[str, str]


def _answer(call: str, key: str, value: T | None, errors: Mapping[str, str]) -> T:
    """A recorded answer: the recorded error, else the value, else "not asked" = not supported."""
    code = errors.get(key)
    if code is not None:
        raise NvmlCallError(call, code)
    if value is None:
        raise NvmlCallError(call, NOT_SUPPORTED)
    return value


class RecordedNvml:
    """``NvmlApi`` that answers from a ``nodetopo-nvml-dump/v1`` dump (see the module docstring)."""

    def __init__(
        self,
        *,
        driver_version: str | None,
        nvml_version: str | None,
        devices: tuple[_RecordedDevice, ...],
        pairs: Mapping[tuple[int, int], _RecordedPair],
        errors: Mapping[str, str],
    ) -> None:
        self._driver_version = driver_version
        self._nvml_version = nvml_version
        self._devices = devices
        self._pairs = pairs
        self._errors = errors

    @classmethod
    def from_json(cls, path: str | os.PathLike[str]) -> RecordedNvml:
        """Load ``nvml.json``; raises ``ParseError`` naming the file and the bad key."""
        where = str(path)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as e:
            raise ParseError(NAME, where, f"cannot read the NVML dump: {e.strerror or e}") from e
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ParseError(NAME, where, f"not JSON: {e.msg}", line=e.lineno) from e
        return cls.from_dict(data, path=where)

    @classmethod
    def from_dict(cls, data: object, *, path: str = "<nvml dump>") -> RecordedNvml:
        """Build from a parsed dump; raises ``ParseError`` (source ``nvml``) on a malformed one."""
        return _DumpReader(path).read(data)

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


class _DumpReader:
    """Validates a dump while turning it into recorded answers; every problem is a ParseError."""

    def __init__(self, path: str) -> None:
        self.path = path

    def fail(self, where: str, detail: str) -> ParseError:
        return ParseError(NAME, self.path, f"{where}: {detail}")

    def obj(self, value: object, where: str) -> dict[str, object]:
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise self.fail(where, f"expected a JSON object, found {type(value).__name__}")
        return value

    def array(self, value: object, where: str) -> list[object]:
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.fail(where, f"expected a JSON array, found {type(value).__name__}")
        return value

    def opt(self, data: dict[str, object], key: str, kind: type[T], where: str) -> T | None:
        value = data.get(key)
        if value is None:
            return None
        # bool is an int in Python; an int key must not accept true/false
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise self.fail(f"{where}.{key}", f"expected {kind.__name__}, found {value!r}")
        return value

    def need(self, data: dict[str, object], key: str, kind: type[T], where: str) -> T:
        value = self.opt(data, key, kind, where)
        if value is None:
            raise self.fail(f"{where}.{key}", "required")
        return value

    def errors(self, data: dict[str, object], where: str) -> dict[str, str]:
        raw = self.obj(data.get("errors") or {}, f"{where}.errors")
        for key, code in raw.items():
            if not isinstance(code, str) or not _ERROR_CODE.match(code):
                raise self.fail(f"{where}.errors.{key}", f"expected an NVML_ERROR_* name, found {code!r}")
        return {key: str(code) for key, code in raw.items()}

    def address(self, data: dict[str, object], key: str, where: str) -> PciAddress | None:
        text = self.opt(data, key, str, where)
        if text is None:
            return None
        try:
            return PciAddress.parse(text)
        except ValueError as e:
            raise self.fail(f"{where}.{key}", str(e)) from None

    def choice(self, data: dict[str, object], key: str, kind: type[E], where: str) -> E | None:
        text = self.opt(data, key, str, where)
        if text is None:
            return None
        try:
            return kind(text)
        except ValueError:
            allowed = " | ".join(member.value for member in kind)
            raise self.fail(f"{where}.{key}", f"expected {allowed}, found {text!r}") from None

    def read(self, data: object) -> RecordedNvml:
        top = self.obj(data, "dump")
        if top.get("format") != FORMAT:
            raise self.fail("format", f"expected {FORMAT!r}, found {top.get('format')!r}")
        devices = tuple(
            self.device(raw, f"devices[{i}]")
            for i, raw in enumerate(self.array(top.get("devices"), "devices"))
        )
        for position, device in enumerate(devices):
            if device.index != position:
                raise self.fail(f"devices[{position}].index", f"expected {position}, found {device.index}")
        errors = self.errors(top, "dump")
        if "deviceCount" in errors and devices:
            raise self.fail("errors.deviceCount", "a failed device count cannot list devices")
        pairs: dict[tuple[int, int], dict[str, object]] = {}
        for list_key, fields in (("commonAncestor", ("level",)), ("p2p", ("read", "nvlink"))):
            for i, raw in enumerate(self.array(top.get(list_key), list_key)):
                where = f"{list_key}[{i}]"
                entry = self.obj(raw, where)
                a, b = self.need(entry, "a", int, where), self.need(entry, "b", int, where)
                if not 0 <= a < b < len(devices):
                    raise self.fail(where, f"expected device indices a < b < {len(devices)}, found {a}, {b}")
                merged = pairs.setdefault((a, b), {"errors": {}})
                for key in fields:
                    if key in merged:
                        raise self.fail(where, f"pair ({a}, {b}) recorded twice")
                    merged[key] = entry.get(key)
                    errors_of_entry = self.errors(entry, where)
                    if key in errors_of_entry:
                        merged_errors = merged["errors"]
                        assert isinstance(merged_errors, dict)
                        merged_errors[key] = errors_of_entry[key]
                merged["where"] = where
        return RecordedNvml(
            driver_version=self.opt(top, "driverVersion", str, "dump"),
            nvml_version=self.opt(top, "nvmlVersion", str, "dump"),
            devices=devices,
            pairs={key: self.pair(raw) for key, raw in pairs.items()},
            errors=errors,
        )

    def pair(self, raw: dict[str, object]) -> _RecordedPair:
        where = str(raw.pop("where"))
        errors = raw.pop("errors")
        assert isinstance(errors, dict)
        return _RecordedPair(
            level=self.choice(raw, "level", TopologyLevel, where),
            read=self.choice(raw, "read", P2pStatus, where),
            nvlink=self.choice(raw, "nvlink", P2pStatus, where),
            errors=errors,
        )

    def device(self, raw: object, where: str) -> _RecordedDevice:
        data = self.obj(raw, where)
        cpus_text = self.opt(data, "cpuAffinity", str, where)
        try:
            cpus = parse_cpulist(cpus_text) if cpus_text is not None else None
        except ValueError as e:
            raise self.fail(f"{where}.cpuAffinity", str(e)) from None
        mig_mode_raw = data.get("migMode")
        mig_mode = None
        if mig_mode_raw is not None:
            mode = self.obj(mig_mode_raw, f"{where}.migMode")
            mig_mode = MigMode(
                current=self.need(mode, "current", bool, f"{where}.migMode"),
                pending=self.need(mode, "pending", bool, f"{where}.migMode"),
            )
        links: dict[int, _RecordedLink] = {}
        for i, link_raw in enumerate(self.array(data.get("nvlinks"), f"{where}.nvlinks")):
            link = self.link(link_raw, f"{where}.nvlinks[{i}]")
            if link.link in links:
                raise self.fail(f"{where}.nvlinks[{i}]", f"link {link.link} recorded twice")
            links[link.link] = link
        mig_devices = None
        if data.get("migDevices") is not None:
            mig_devices = _sorted_migs(
                [
                    self.mig(mig_raw, f"{where}.migDevices[{i}]")
                    for i, mig_raw in enumerate(self.array(data["migDevices"], f"{where}.migDevices"))
                ]
            )
        return _RecordedDevice(
            index=self.need(data, "index", int, where),
            uuid=self.opt(data, "uuid", str, where),
            name=self.opt(data, "name", str, where),
            address=self.address(data, "pciBusId", where),
            memory_total=self.opt(data, "memoryTotal", int, where),
            cpu_affinity=cpus,
            numa_node_id=self.opt(data, "numaNodeId", int, where),
            mig_mode=mig_mode,
            links=links,
            fabric=self.fabric(data.get("fabric"), f"{where}.fabric"),
            mig_devices=mig_devices,
            errors=self.errors(data, where),
        )

    def link(self, raw: object, where: str) -> _RecordedLink:
        data = self.obj(raw, where)
        return _RecordedLink(
            link=self.need(data, "link", int, where),
            active=self.opt(data, "active", bool, where),
            remote_address=self.address(data, "remotePciBusId", where),
            remote_type=self.choice(data, "remoteType", RemoteDeviceType, where),
            errors=self.errors(data, where),
        )

    def fabric(self, raw: object, where: str) -> FabricInfo | None:
        if raw is None:
            return None
        data = self.obj(raw, where)
        return FabricInfo(
            cluster_uuid=self.need(data, "clusterUuid", str, where),
            clique_id=self.need(data, "cliqueId", int, where),
            state=self.need(data, "state", str, where),
            health=self.opt(data, "health", str, where),
        )

    def mig(self, raw: object, where: str) -> MigDevice:
        data = self.obj(raw, where)
        return MigDevice(
            uuid=self.need(data, "uuid", str, where),
            gpu_instance=self.opt(data, "gpuInstanceId", int, where),
            compute_instance=self.opt(data, "computeInstanceId", int, where),
            profile=self.opt(data, "profile", str, where),
        )


E = TypeVar("E", bound=enum.Enum)


# --------------------------------------------------------------------------------------------
# Recording a dump
# --------------------------------------------------------------------------------------------

#: link-state codes that end the probe of a GPU's links (past its last link, none, or GPU gone)
_END_OF_LINKS = (INVALID_ARGUMENT, NOT_SUPPORTED, FUNCTION_NOT_FOUND, GPU_IS_LOST)


def _record(errors: dict[str, str], key: str, ask: Callable[[], T]) -> T | None:
    try:
        return ask()
    except NvmlCallError as e:
        errors[key] = e.code
        return None


def _jsonable(value: object) -> object:
    if isinstance(value, PciAddress):
        return nvml_bus_id(value)
    if isinstance(value, frozenset):
        return format_cpulist(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, MigMode):
        return {"current": value.current, "pending": value.pending}
    if isinstance(value, FabricInfo):
        return {
            "clusterUuid": value.cluster_uuid,
            "cliqueId": value.clique_id,
            "state": value.state,
            "health": value.health,
        }
    if isinstance(value, MigDevice):
        return {
            "uuid": value.uuid,
            "gpuInstanceId": value.gpu_instance,
            "computeInstanceId": value.compute_instance,
            "profile": value.profile,
        }
    if isinstance(value, tuple):
        return [_jsonable(item) for item in value]
    return value


def _with_errors(entry: dict[str, object], errors: dict[str, str]) -> dict[str, object]:
    if errors:
        entry["errors"] = dict(sorted(errors.items()))
    return entry


def dump_nvml(api: NvmlApi) -> dict[str, object]:
    """Record everything ``read_nvml`` may ask of ``api``, failures included (module docstring)."""
    errors: dict[str, str] = {}
    dump: dict[str, object] = {
        "format": FORMAT,
        "driverVersion": _record(errors, "driverVersion", api.driver_version),
        "nvmlVersion": _record(errors, "nvmlVersion", api.nvml_version),
    }
    count = _record(errors, "deviceCount", api.device_count) or 0
    dump["devices"] = [_dump_device(api, index) for index in range(count)]
    ancestors: list[dict[str, object]] = []
    p2p: list[dict[str, object]] = []
    for a in range(count):
        for b in range(a + 1, count):
            pair_errors: dict[str, str] = {}
            level = _record(pair_errors, "level", functools.partial(api.common_ancestor, a, b))
            ancestors.append(_with_errors({"a": a, "b": b, "level": _jsonable(level)}, pair_errors))
            p2p_errors: dict[str, str] = {}
            entry: dict[str, object] = {"a": a, "b": b}
            for capability in P2pCapability:
                status = _record(
                    p2p_errors,
                    capability.value,
                    functools.partial(api.p2p_status, a, b, capability),
                )
                entry[capability.value] = _jsonable(status)
            p2p.append(_with_errors(entry, p2p_errors))
    dump["commonAncestor"] = ancestors
    dump["p2p"] = p2p
    return _with_errors(dump, errors)


def _dump_device(api: NvmlApi, index: int) -> dict[str, object]:
    errors: dict[str, str] = {}
    device: dict[str, object] = {"index": index}
    for key, ask in (
        ("uuid", api.uuid),
        ("name", api.name),
        ("pciBusId", api.pci_bus_id),
        ("memoryTotal", api.memory_total),
        ("cpuAffinity", api.cpu_affinity),
        ("numaNodeId", api.numa_node_id),
        ("migMode", api.mig_mode),
    ):
        device[key] = _jsonable(_record(errors, key, functools.partial(ask, index)))
    links: list[dict[str, object]] = []
    for link in range(MAX_NVLINKS):
        link_errors: dict[str, str] = {}
        try:
            active = api.nvlink_active(index, link)
        except NvmlCallError as e:
            if e.code in _END_OF_LINKS:
                if e.code != INVALID_ARGUMENT:
                    errors["nvlinks"] = e.code
                break
            links.append({"link": link, "active": None, "errors": {"active": e.code}})
            continue
        entry: dict[str, object] = {"link": link, "active": active}
        if active:
            entry["remotePciBusId"] = _jsonable(
                _record(
                    link_errors,
                    "remotePciBusId",
                    functools.partial(api.nvlink_remote_pci_bus_id, index, link),
                )
            )
            entry["remoteType"] = _jsonable(
                _record(link_errors, "remoteType", functools.partial(api.nvlink_remote_type, index, link))
            )
        links.append(_with_errors(entry, link_errors))
    device["nvlinks"] = links
    device["fabric"] = _jsonable(_record(errors, "fabric", lambda: api.fabric_info(index)))
    mig_mode = device["migMode"]
    migs = None
    if isinstance(mig_mode, dict) and mig_mode.get("current"):
        migs = _jsonable(_record(errors, "migDevices", lambda: api.mig_devices(index)))
    device["migDevices"] = migs
    return _with_errors(device, errors)


# --------------------------------------------------------------------------------------------
# Reading: protocol -> NvmlSnapshot
# --------------------------------------------------------------------------------------------


class _DeviceScan:
    """Asks one GPU's questions; "not supported" is a silent None, other failures are noted.

    Once the GPU is lost (``NVML_ERROR_GPU_IS_LOST``) nothing more is asked of it.
    """

    def __init__(self, index: int) -> None:
        self.index = index
        self.failures: list[str] = []
        self.lost_at: NvmlCallError | None = None

    def ask(self, question: Callable[[], T], *, required: bool = False) -> T | None:
        if self.lost_at is not None:
            return None
        try:
            return question()
        except NvmlCallError as e:
            if e.gpu_lost:
                self.lost_at = e
            elif required or not e.not_supported:
                self.failures.append(str(e))
            return None


def _read_links(api: NvmlApi, scan: _DeviceScan) -> tuple[NvmlLink, ...]:
    links: list[NvmlLink] = []
    index = scan.index
    for link in range(MAX_NVLINKS):
        if scan.lost_at is not None:
            break
        try:
            active = api.nvlink_active(index, link)
        except NvmlCallError as e:
            if e.gpu_lost:
                scan.lost_at = e
                break
            if e.code in (INVALID_ARGUMENT, NOT_SUPPORTED, FUNCTION_NOT_FOUND):
                break
            scan.failures.append(f"{e} (link {link})")
            continue
        if not active:
            continue
        remote_type = scan.ask(functools.partial(api.nvlink_remote_type, index, link))
        links.append(
            NvmlLink(
                link=link,
                remote_address=scan.ask(functools.partial(api.nvlink_remote_pci_bus_id, index, link)),
                remote_type=remote_type if remote_type is not None else RemoteDeviceType.UNKNOWN,
            )
        )
    return tuple(links)


def _read_gpu(api: NvmlApi, index: int) -> tuple[NvmlGpu | None, Condition | None, bool]:
    """One GPU's facts (None when its identity cannot be read), a condition, and whether it was lost."""
    scan = _DeviceScan(index)
    uuid = scan.ask(lambda: api.uuid(index), required=True)
    model = scan.ask(lambda: api.name(index), required=True)
    address = scan.ask(lambda: api.pci_bus_id(index), required=True)
    memory = scan.ask(lambda: api.memory_total(index))
    cpus = scan.ask(lambda: api.cpu_affinity(index))
    numa = scan.ask(lambda: api.numa_node_id(index))
    mig_mode = scan.ask(lambda: api.mig_mode(index))
    links = _read_links(api, scan)
    fabric = scan.ask(lambda: api.fabric_info(index))
    if fabric is not None and fabric.state == "NOT_SUPPORTED":
        fabric = None
    migs: tuple[MigDevice, ...] = ()
    if mig_mode is not None and mig_mode.current:
        found = scan.ask(lambda: api.mig_devices(index)) or ()
        migs = tuple(dataclasses.replace(m, parent_uuid=uuid, parent_index=index) for m in found)

    gpu = None
    if uuid is not None and model is not None and address is not None:
        gpu = NvmlGpu(
            index=index,
            uuid=uuid,
            model=model,
            address=address,
            memory_bytes=memory,
            cpu_affinity=cpus,
            numa_node=numa,
            mig_current=mig_mode.current if mig_mode is not None else None,
            mig_pending=mig_mode.pending if mig_mode is not None else None,
            links=links,
            fabric=fabric,
            migs=_sorted_migs(migs),
        )
    lost = scan.lost_at is not None
    if not scan.failures and not lost:
        return gpu, None, False
    name = f"GPU {index}" + (f" ({address})" if address is not None else "")
    parts: list[str] = []
    if scan.lost_at is not None:
        parts.append(f"lost during the scan: {scan.lost_at}")
    parts.extend(scan.failures)
    if gpu is None:
        parts.append("left out: its UUID, name or PCI bus id could not be read")
    return gpu, condition(NAME, ConditionReason.DEGRADED, f"{name}: " + "; ".join(parts)), lost


def read_nvml(api: NvmlApi) -> tuple[NvmlSnapshot, tuple[Condition, ...]]:
    """What NVML says about the GPUs, plus Degraded conditions for the calls that failed.

    Raises ``NvmlCallError`` only when the device count itself cannot be read (NVML unusable).
    """
    conditions: list[Condition] = []
    try:
        driver: str | None = api.driver_version()
    except NvmlCallError as e:
        driver = None
        if not e.not_supported:
            conditions.append(condition(NAME, ConditionReason.DEGRADED, str(e)))
    count = api.device_count()
    gpus: list[NvmlGpu] = []
    usable: list[int] = []  #: GPUs still there to ask about pairs
    for index in range(count):
        gpu, problem, lost = _read_gpu(api, index)
        if gpu is not None:
            gpus.append(gpu)
            if not lost:
                usable.append(index)
        if problem is not None:
            conditions.append(problem)
    ancestors: list[tuple[tuple[int, int], LinkClass]] = []
    pair_failures: list[str] = []
    for i, a in enumerate(usable):
        for b in usable[i + 1 :]:
            try:
                level = api.common_ancestor(a, b)
            except NvmlCallError as e:
                if not e.not_supported:
                    pair_failures.append(f"GPUs {a},{b}: {e}")
                continue
            ancestors.append(((a, b), LINK_CLASS_OF_LEVEL[level]))
    if pair_failures:
        conditions.append(condition(NAME, ConditionReason.DEGRADED, "; ".join(pair_failures)))
    snapshot = NvmlSnapshot(driver_version=driver, gpus=tuple(gpus), common_ancestor=tuple(sorted(ancestors)))
    return snapshot, tuple(conditions)


# --------------------------------------------------------------------------------------------
# The source
# --------------------------------------------------------------------------------------------

NOT_THIS_SYSTEM = "NVML sees only the live host; no nvml.json in the bundle"


def _facts(api: NvmlApi) -> Facts:
    try:
        snapshot, conditions = read_nvml(api)
    except NvmlCallError as e:
        return failed(NAME, ConditionReason.UNAVAILABLE, str(e))
    for problem in conditions:
        log.warning("source %s: %s", NAME, problem.message, extra={"source": NAME})
    summary = f"{len(snapshot.gpus)} GPUs, driver {snapshot.driver_version or 'unknown'}"
    status = SourceStatus(
        name=NAME,
        ok=not conditions,
        message=summary if not conditions else f"Degraded: {summary}; {len(conditions)} problem(s)",
    )
    return Facts(nvml=snapshot, sources=(status,), conditions=conditions)


def _collect(ctx: Context) -> Facts:
    given = ctx.nvml
    if isinstance(given, str | os.PathLike):
        given = RecordedNvml.from_json(given)
    if given is not None:
        if not isinstance(given, NvmlApi):
            raise TypeError(f"Context.nvml must be an NvmlApi or a dump path, not {type(given).__name__}")
        return _facts(given)
    live = ctx.live_nvml if ctx.live_nvml is not None else ctx.root.is_this_system
    if not live:
        return failed(NAME, ConditionReason.UNAVAILABLE, NOT_THIS_SYSTEM)
    api = PynvmlApi()
    try:
        api.open()
    except NvmlCallError as e:
        return failed(NAME, ConditionReason.UNAVAILABLE, f"NVML cannot start: {e}")
    with api:
        return _facts(api)


def collect(ctx: Context) -> SourceResult:
    """NVML's view: ``ctx.nvml`` (an ``NvmlApi``, or the path of a dump) or the live host.

    Without ``ctx.nvml`` the live NVML is used only when ``ctx.root`` is this system; a bundle
    without ``nvml.json`` gives Unavailable. NVML that cannot start (no library, no driver,
    driver/library mismatch, no permission) gives Unavailable with NVML's own words; failed
    calls on some GPUs give Degraded, with the other GPUs kept.
    """
    return guarded(NAME, lambda: _collect(ctx))
