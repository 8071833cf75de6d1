"""Which pod holds which device: what the kubelet's PodResources API answered, and what it means
for the node's GPUs."""

from __future__ import annotations

import dataclasses

from nodetopo.model.values import PodRef


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
