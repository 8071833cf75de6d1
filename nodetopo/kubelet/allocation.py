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
(``gpu.nvidia.com``'s ``gpu-0``), which only that driver's ResourceSlice ties to a GPU; that join is
not made here, so while the kubelet lists a device of a GPU DRA driver the holders are *unknown*
(never "free": the GPU is held, by a claim this reader cannot place).
"""

from __future__ import annotations

from collections import defaultdict

from nodetopo.model import GpuAllocation, KubeletAllocation, PodRef, ResourceCount, Topology

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
    claimed = [c for c in observed.claim_devices if c.driver in GPU_DRA_DRIVERS]
    if claimed:
        claims = sorted({c.claim for c in claimed})
        shown = ", ".join(claims[:_NAMED]) + (
            f" (+{len(claims) - _NAMED} more)" if len(claims) > _NAMED else ""
        )
        drivers = ", ".join(sorted({c.driver for c in claimed}))
        return unknown_allocation(
            f"the kubelet lists {len(claimed)} GPU device(s) of {drivers} allocated through ResourceClaims "
            f"({shown}); which GPUs they are is in the driver's ResourceSlice, which is not read"
        )
    by_uuid = {g.uuid: g.index for g in topology.gpus if g.uuid}
    by_index = {str(g.index): g.index for g in topology.gpus}
    migs = {m.uuid for m in topology.mig_devices}
    gpu_holders: dict[int, set[PodRef]] = defaultdict(set)
    mig_holders: dict[str, set[PodRef]] = defaultdict(set)
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
    resources = tuple(
        ResourceCount(
            name=name,
            allocatable=len(allocatable.get(name, ())) if allocatable is not None else None,
            allocated=len(allocated.get(name, ())),
        )
        for name in names
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
