"""What the probe's checks read: what the pod declared, what the container sees, and the thresholds."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from nodetopo.placement.request import PodRequest
from nodetopo.probe.collective import CollectiveRun


@dataclasses.dataclass(frozen=True, slots=True)
class Declared:
    """What the pod declared. ``request`` is None when the declaration could not be read (``error``)."""

    request: PodRequest | None
    annotated: bool  #: at least one ``nodetopo.io/`` annotation was present
    error: str | None = None
    #: GB/s of all-reduce bus bandwidth the pod needs (``nodetopo.io/min-busbw``), when it says
    min_busbw: float | None = None
    #: the ResourceClaims whose need is merged into ``request`` (``nodetopo.probe.claimed``)
    claims: tuple[str, ...] = ()
    #: why the pod's claims (or the pod, to find them) could not be read: what they need is unknown
    unread: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class IbPort:
    port: int
    state: str | None  #: ACTIVE, DOWN, INIT, ... (the word after ``N: `` in sysfs), None unreadable
    link_layer: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class IbDevice:
    name: str
    ports: tuple[IbPort, ...]
    uverbs: str | None  #: the /dev/infiniband/uverbsN of this device, when it is usable


@dataclasses.dataclass(frozen=True, slots=True)
class NvmlPair:
    a: str  #: GPU UUIDs
    b: str
    p2p_read: str | None  #: P2pStatus value, None when NVML could not say
    p2p_nvlink: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class NvmlView:
    """What NVML inside the container says: visible GPU UUIDs, inactive links, pair P2P status."""

    uuids: tuple[str, ...]
    inactive_links: Mapping[str, tuple[int, ...]]  #: uuid -> links probed and found down
    active_links: Mapping[str, int]
    pairs: tuple[NvmlPair, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Seen:
    """What the container sees. A field is None when it could not be read (``unread`` says why)."""

    gpu_ids: tuple[str, ...] | None  #: UUIDs or indices naming the container's GPUs
    gpu_ids_from: str  #: where gpu_ids came from (NVML, NVIDIA_VISIBLE_DEVICES, ...)
    dev_nvidia: tuple[int, ...] | None  #: N of each /dev/nvidiaN
    nvml: NvmlView | None
    infiniband: tuple[IbDevice, ...] | None
    shm_bytes: int | None
    hugepages_bytes: int | None
    cpus: frozenset[int] | None
    cpus_from: str
    mems: frozenset[int] | None
    unread: Mapping[str, str] = dataclasses.field(default_factory=dict)
    collective: CollectiveRun | None = None  #: what all_reduce_perf printed, when it ran and exited 0
    #: False when the collective does not apply: --collective-timeout 0, fewer than 2 GPUs, or no
    #: all_reduce_perf in the image
    collective_asked: bool = True


@dataclasses.dataclass(frozen=True, slots=True)
class Thresholds:
    min_shm_bytes: int = 256 * 2**20
    min_hugepages_bytes: int = 0
    require_p2p: bool = False
    gpus: int | None = None  #: the GPU count the pod requested (``--gpus``), when known
    #: GB/s busbw the workload needs (``--min-busbw``, over the pod's ``nodetopo.io/min-busbw``): below
    #: it, PlacedWrong
    min_busbw: float | None = None
