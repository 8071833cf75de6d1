"""The NVML protocol: the few NVML calls nodetopo makes, in nodetopo's own types, and their errors.

Every call either answers or raises ``NvmlCallError(call, code, text)``; ``code`` is NVML's constant
name (``NVML_ERROR_NOT_SUPPORTED``), so a reader can tell "this GPU cannot say"
(``error.not_supported``) from a real failure. Implemented by ``live.PynvmlApi`` (the library) and
``replay.RecordedNvml`` (a dump).

Mapping of ``nvmlDeviceGetTopologyCommonAncestor`` onto nvidia-smi's classes: ``INTERNAL`` -> PIX,
``SINGLE`` -> PIX, ``MULTIPLE`` -> PXB, ``HOSTBRIDGE`` -> PHB, ``NODE`` -> NODE, ``SYSTEM`` -> SYS.
``INTERNAL`` means both devices sit on one board (a dual-GPU card such as a K80, whose GPUs share the
board's own PCIe switch): the path crosses at most that one switch, which is what PIX means, so it
is the nearest class. (``NVML_TOPOLOGY_CPU`` is an old alias of ``NODE``.)
"""

from __future__ import annotations

import dataclasses
import enum
import re
from typing import Protocol, runtime_checkable

from nodetopo.errors import NodetopoError
from nodetopo.model import FabricInfo, LinkClass, MigDevice, PciAddress, RemoteDeviceType

NAME = "nvml"

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


#: GPUs read at most from one NVML (live or replayed): the largest single systems have 16 GPUs
#: (DGX-2, HGX-2) and an NVL72 tray 4; reading every pair of more than this is refused, not attempted
MAX_DEVICES = 256

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


class NvlinkCounter(enum.StrEnum):
    """The ``nvmlDeviceGetNvLinkErrorCounter`` counters nodetopo reads (values = dump keys)."""

    REPLAY = "replay"  #: NVML_NVLINK_ERROR_DL_REPLAY: data link retransmissions
    RECOVERY = "recovery"  #: NVML_NVLINK_ERROR_DL_RECOVERY: link recoveries (a retraining)
    CRC_FLIT = "crcFlit"  #: NVML_NVLINK_ERROR_DL_CRC_FLIT: flow-control CRC errors
    CRC_DATA = "crcData"  #: NVML_NVLINK_ERROR_DL_CRC_DATA: data CRC errors


class PcieQuestion(enum.StrEnum):
    """The questions nodetopo asks about a GPU's own PCIe link (values = dump keys)."""

    MAX_GEN = "maxGen"  #: nvmlDeviceGetMaxPcieLinkGeneration: what this GPU and system can reach
    DEVICE_MAX_GEN = "deviceMaxGen"  #: nvmlDeviceGetGpuMaxPcieLinkGeneration: the GPU's own maximum
    CURRENT_GEN = "currentGen"  #: nvmlDeviceGetCurrPcieLinkGeneration (lower when idle: normal)
    MAX_WIDTH = "maxWidth"  #: nvmlDeviceGetMaxPcieLinkWidth
    CURRENT_WIDTH = "currentWidth"  #: nvmlDeviceGetCurrPcieLinkWidth
    REPLAYS = "replays"  #: nvmlDeviceGetPcieReplayCounter


#: the NVML function answering each PCIe question (live calls it, a replay names it in its errors)
PCIE_CALLS: dict[PcieQuestion, str] = {
    PcieQuestion.MAX_GEN: "nvmlDeviceGetMaxPcieLinkGeneration",
    PcieQuestion.DEVICE_MAX_GEN: "nvmlDeviceGetGpuMaxPcieLinkGeneration",
    PcieQuestion.CURRENT_GEN: "nvmlDeviceGetCurrPcieLinkGeneration",
    PcieQuestion.MAX_WIDTH: "nvmlDeviceGetMaxPcieLinkWidth",
    PcieQuestion.CURRENT_WIDTH: "nvmlDeviceGetCurrPcieLinkWidth",
    PcieQuestion.REPLAYS: "nvmlDeviceGetPcieReplayCounter",
}


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

    def pcie(self, index: int, question: PcieQuestion) -> int:
        """One answer about the GPU's own PCIe link (``PcieQuestion``)."""
        ...

    def nvlink_speed_mbps(self, index: int, link: int) -> int:
        """The link's speed in MB/s per direction (``NVML_FI_DEV_NVLINK_GET_SPEED``)."""
        ...

    def nvlink_error_counter(self, index: int, link: int, counter: NvlinkCounter) -> int: ...

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


def cpus_of_bitmask(words: list[int] | tuple[int, ...]) -> frozenset[int]:
    """NVML's CPU set (an array of 64-bit words, CPU ``64*i + j`` = bit ``j`` of word ``i``)."""
    return frozenset(
        word_index * 64 + bit for word_index, word in enumerate(words) for bit in range(64) if word >> bit & 1
    )


def sorted_migs(migs: list[MigDevice] | tuple[MigDevice, ...]) -> tuple[MigDevice, ...]:
    return tuple(sorted(migs, key=lambda m: (m.gpu_instance or 0, m.compute_instance or 0, m.uuid)))
