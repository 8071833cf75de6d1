"""Which pod holds each GPU: the kubelet's device assignments joined to the node's GPUs.

``gpu_allocation`` is a pure function of the topology and what the kubelet's PodResources API
answered (``KubeletAllocation``), or of the reason it could not be asked, which yields an
allocation that is *unknown* (never "nothing is held").

Device ids are matched the way the NVIDIA device plugin names devices: a GPU's UUID
(``GPU-…``), a MIG device's UUID (``MIG-…``), a time-sliced or shared replica ``<uuid>::<n>``
(the replica suffix is dropped), or, with ``DEVICE_ID_STRATEGY=index``, the GPU's index (``3``) for
``nvidia.com/gpu``. A device id of an ``nvidia.com/`` resource that matches no GPU of the topology
is named in ``message``: the node's published GPUs and the kubelet's devices disagree.

GPUs handed out through DRA ResourceClaims are listed by the kubelet as a driver's device names
(``gpu.nvidia.com``'s ``gpu-0`` in a pool), which only that driver's ResourceSlice ties to a GPU:
``KubeletAllocation.slice_devices`` carries this node's slice devices, and each claim device is joined
to the slice device of the same (driver, pool, name), then to the GPU (or MIG device) whose UUID the
slice names, or else to the GPU at the slice's ``pciBusID``. While a GPU claim device cannot be tied
to a GPU of the topology (the slices were not read, or name no such device, or a GPU this node does
not have) the holders are *unknown* (never "free": the GPU is held, by a claim this reader cannot
place), and the message says why.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable

from nodetopo.model import (
    ClaimDevice,
    GpuAllocation,
    KubeletAllocation,
    PciAddress,
    PodRef,
    ResourceCount,
    SliceDevice,
    Topology,
)

#: the resource prefix of NVIDIA's device plugins (whole GPUs, MIG profiles, shared replicas)
NVIDIA_PREFIX = "nvidia.com/"
#: at most this many unmatched ids are named in the message
_NAMED = 5
#: DRA drivers whose devices are GPUs (NVIDIA's GPU DRA driver)
GPU_DRA_DRIVERS = frozenset({"gpu.nvidia.com"})


def device_key(device_id: str) -> str:
    """The id without a sharing replica suffix: ``GPU-abc::3`` → ``GPU-abc``."""
    return device_id.split("::", 1)[0]


def unknown_allocation(message: str) -> GpuAllocation:
    return GpuAllocation(known=False, message=message)


def allocation_of(topology: Topology, answer: KubeletAllocation | str) -> GpuAllocation:
    """The allocation for what the kubelet answered, or for why it could not be asked (a str)."""
    return unknown_allocation(answer) if isinstance(answer, str) else gpu_allocation(topology, answer)


def gpu_allocation(topology: Topology, observed: KubeletAllocation) -> GpuAllocation:
    """Per GPU and MIG device of ``topology``, the containers the kubelet handed it to."""
    by_uuid = {g.uuid: g.index for g in topology.gpus if g.uuid}
    by_index = {str(g.index): g.index for g in topology.gpus}
    migs = {m.uuid for m in topology.mig_devices}
    gpu_holders: dict[int, set[PodRef]] = defaultdict(set)
    mig_holders: dict[str, set[PodRef]] = defaultdict(set)
    claimed = [c for c in observed.claim_devices if c.driver in GPU_DRA_DRIVERS]
    claim_counts: list[ResourceCount] = []
    if claimed:
        joined = join_claim_devices(topology, claimed, observed.slice_devices)
        if isinstance(joined, str):
            return unknown_allocation(joined)
        for claim_device, held in joined:
            if isinstance(held, int):
                gpu_holders[held].add(claim_device.holder)
            else:
                mig_holders[held].add(claim_device.holder)
        slices = observed.slice_devices if isinstance(observed.slice_devices, tuple) else ()
        for driver in sorted({c.driver for c in claimed}):
            claim_counts.append(
                ResourceCount(
                    name=driver,
                    allocatable=sum(1 for d in slices if d.driver == driver),
                    allocated=len({(c.pool, c.device) for c in claimed if c.driver == driver}),
                )
            )
    allocated: dict[str, set[str]] = defaultdict(set)
    unmatched: dict[str, set[str]] = defaultdict(set)
    for a in observed.assignments:
        allocated[a.resource].add(a.device_id)
        key = device_key(a.device_id)
        if key in by_uuid:
            gpu_holders[by_uuid[key]].add(a.holder)
        elif key in migs:
            mig_holders[key].add(a.holder)
        elif a.resource == f"{NVIDIA_PREFIX}gpu" and key in by_index:
            gpu_holders[by_index[key]].add(a.holder)
        elif a.resource.startswith(NVIDIA_PREFIX):
            unmatched[a.resource].add(a.device_id)
    allocatable = dict(observed.allocatable) if observed.allocatable is not None else None
    if allocatable is not None:
        for resource, ids in allocatable.items():
            if resource.startswith(NVIDIA_PREFIX):
                for device_id in ids:
                    key = device_key(device_id)
                    known = key in by_uuid or key in migs
                    known = known or (resource == f"{NVIDIA_PREFIX}gpu" and key in by_index)
                    if not known:
                        unmatched[resource].add(device_id)
    names = sorted(set(allocated) | set(allocatable or ()))
    resources = tuple(claim_counts) + tuple(
        ResourceCount(
            name=name,
            allocatable=len(allocatable.get(name, ())) if allocatable is not None else None,
            allocated=len(allocated.get(name, ())),
        )
        for name in names
        if name not in {c.name for c in claim_counts}
    )
    message = ""
    if unmatched:
        parts = []
        for resource, missing in sorted(unmatched.items()):
            shown = ", ".join(sorted(missing)[:_NAMED])
            if len(missing) > _NAMED:
                shown += f" (+{len(missing) - _NAMED} more)"
            parts.append(f"{resource}: {shown}")
        message = "device ids the kubelet lists that match no GPU of this node: " + "; ".join(parts)
    return GpuAllocation(
        known=True,
        message=message,
        resources=resources,
        gpu_holders=tuple((i, tuple(sorted(h))) for i, h in sorted(gpu_holders.items())),
        mig_holders=tuple((u, tuple(sorted(h))) for u, h in sorted(mig_holders.items())),
    )


def _named(items: list[str]) -> str:
    shown = ", ".join(items[:_NAMED])
    return shown + (f" (+{len(items) - _NAMED} more)" if len(items) > _NAMED else "")


def join_claim_devices(
    topology: Topology,
    claimed: list[ClaimDevice],
    slices: tuple[SliceDevice, ...] | str | None,
) -> list[tuple[ClaimDevice, int | str]] | str:
    """Each GPU claim device with what it holds (a GPU index, or a MIG device UUID), joined through
    this node's ResourceSlice devices; or why they cannot all be tied to this topology's devices."""
    drivers = ", ".join(sorted({c.driver for c in claimed}))
    claims = _named(sorted({c.claim for c in claimed}))
    what = f"the kubelet lists {len(claimed)} GPU device(s) of {drivers} allocated through ResourceClaims"
    if slices is None:
        return f"{what} ({claims}); which GPUs they are is in the driver's ResourceSlice, which is not read"
    if isinstance(slices, str):
        return f"{what} ({claims}); this node's ResourceSlices cannot be read: {slices}"
    by_name = {(d.driver, d.pool, d.device): d for d in slices}
    by_uuid = {g.uuid: g.index for g in topology.gpus if g.uuid}
    by_address = {g.address: g.index for g in topology.gpus if g.address is not None}
    migs = {m.uuid for m in topology.mig_devices}
    joined: list[tuple[ClaimDevice, int | str]] = []
    missing: list[str] = []
    foreign: list[str] = []
    for c in claimed:
        name = f"{c.driver}/{c.pool}/{c.device}"
        found = by_name.get((c.driver, c.pool, c.device))
        if found is None:
            missing.append(name)
            continue
        address = _address(found.pci_bus_id) if found.uuid is None else None
        if found.uuid is not None and found.uuid in by_uuid:
            joined.append((c, by_uuid[found.uuid]))
        elif found.uuid is not None and found.uuid in migs:
            joined.append((c, found.uuid))
        elif address is not None and address in by_address:
            joined.append((c, by_address[address]))
        else:
            ids = ", ".join(x for x in (found.uuid, found.pci_bus_id) if x) or "no uuid or pciBusID"
            foreign.append(f"{name} ({ids})")
    parts = []
    if missing:
        parts.append(f"no ResourceSlice of this node lists {_named(sorted(set(missing)))}")
    if foreign:
        parts.append(f"slice devices that match no GPU of this node: {_named(sorted(set(foreign)))}")
    if parts:
        return f"{what} ({claims}); " + "; ".join(parts)
    return joined


def _address(text: str | None) -> PciAddress | None:
    if not text:
        return None
    try:
        return PciAddress.parse(text)
    except ValueError:
        return None


def with_slices(
    ask: Callable[[], KubeletAllocation | str],
    read_slices: Callable[[], tuple[SliceDevice, ...] | str] | None,
) -> KubeletAllocation | str:
    """The kubelet's answer; when it lists GPU devices of ResourceClaims, with this node's
    ResourceSlice devices (or why they could not be read) that tie them to GPUs. The slices are read
    only then: a node without claim-held GPUs never lists them."""
    answer = ask()
    if isinstance(answer, str) or not any(c.driver in GPU_DRA_DRIVERS for c in answer.claim_devices):
        return answer
    slices = read_slices() if read_slices is not None else None
    return dataclasses.replace(answer, slice_devices=slices)
