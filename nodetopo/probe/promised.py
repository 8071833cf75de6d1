"""What the node promised the pod: the parts of its NodeTopology the probe compares with.

``parse_nodetopology`` projects them from ``nodetopo.resource.reader`` (the one reader of a published
object), with its rule: what the object says wrongly is left out or unknown, never guessed, and the
probe then skips what it cannot compare.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from typing import Any

from nodetopo.model import NOT_JUDGED, HealthReport, LinkClass, Topology
from nodetopo.resource.published import PublishedStatus
from nodetopo.resource.reader import read_nodetopology

#: What the probe reads of a NodeTopology (``nodetopo.resource.reader`` sections).
SECTIONS = frozenset({"gpus", "nics", "allocation", "affinity", "details", "network", "health"})


@dataclasses.dataclass(frozen=True, slots=True)
class PromisedGpu:
    index: int
    uuid: str | None
    island: int | None
    numa_node: int | None
    numa_cpus: AbstractSet[int] | None  #: the CPUs of the GPU's NUMA node (else its CPU affinity)
    nics: tuple[tuple[str, LinkClass], ...]  #: (NIC name, distance)
    #: (namespace, pod) of each holder, from ``heldBy``; None when the NodeTopology does not know
    held_by: tuple[tuple[str, str], ...] | None = None
    #: the NICs of ``nics`` whose path from this GPU crosses a degraded edge (``degradedNICs``)
    degraded_nics: frozenset[str] = frozenset()


@dataclasses.dataclass(frozen=True, slots=True)
class PromisedNic:
    name: str
    rdma: bool
    state: str | None
    link_layer: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class Promised:
    """The parts of a NodeTopology's ``status`` the probe compares with."""

    node: str
    gpus: tuple[PromisedGpu, ...]
    nics: tuple[PromisedNic, ...]
    islands: Mapping[int, int]  #: island id -> number of GPUs in it
    #: the node's agent asked its kubelet who holds each GPU (``status.allocation.state`` Known)
    allocation_known: bool = False
    allocation_why: str = ""  #: why not, when the NodeTopology says
    leaf: str | None = None  #: the node's tier-0 group (leaf switch, local block), when known
    #: ``status.health``: the edges the node's agent judged degraded (not judged: an older agent)
    health: HealthReport = NOT_JUDGED
    #: the object itself, for ``topology``
    body: Mapping[str, Any] | None = dataclasses.field(default=None, compare=False, repr=False)
    #: the object's status as read, for ``held_by``
    status: PublishedStatus | None = dataclasses.field(default=None, compare=False, repr=False)

    def held_by(self, namespace: str, name: str) -> tuple[PromisedGpu, ...] | None:
        """The GPUs the kubelet handed the pod ``namespace/name`` (None: who holds what is unknown),
        by the published object's own rule (``PublishedStatus.held_by``)."""
        if self.status is None:
            return None
        held = self.status.held_by(namespace, name)
        if held is None:
            return None
        indices = {g.gpu.index for g in held}
        return tuple(g for g in self.gpus if g.index in indices)

    def topology(self) -> tuple[Topology | None, str]:
        """The object as the bandwidth model reads it (``topology_from_nodetopology``), or None and
        what is wrong with it. Converted only when asked: only the collective smoke test needs it."""
        from nodetopo.resource.body import topology_from_nodetopology
        from nodetopo.resource.published import ResourceError

        if self.body is None:
            return None, "no object"
        try:
            return topology_from_nodetopology(self.body), ""
        except ResourceError as e:
            return None, str(e)

    def gpu(self, key: str) -> PromisedGpu | None:
        """The GPU named by a UUID or an index (as NVIDIA_VISIBLE_DEVICES names them)."""
        for g in self.gpus:
            if g.uuid is not None and g.uuid.lower() == key.lower():
                return g
        if key.isdigit():
            for g in self.gpus:
                if g.index == int(key):
                    return g
        return None


def parse_nodetopology(obj: Any) -> Promised:
    """``Promised`` from a NodeTopology object (a dict as the API serves it). Fields of the wrong
    type read as unknown; a non-object is a ``ValueError`` (``ResourceError``)."""
    read = read_nodetopology(obj, sections=SECTIONS)
    status = read.facts
    gpus = tuple(
        PromisedGpu(
            index=g.gpu.index,
            uuid=g.gpu.uuid,
            island=g.gpu.island,
            numa_node=g.gpu.numa_node,
            numa_cpus=g.gpu.numa_affinity or g.gpu.cpu_affinity,
            nics=g.nics,
            held_by=None if g.held_by is None else tuple((h.namespace, h.name) for h in g.held_by),
            degraded_nics=g.degraded_nics,
        )
        for g in status.gpus
    )
    islands: dict[int, int] = {}
    for g in gpus:
        if g.island is not None:
            islands[g.island] = islands.get(g.island, 0) + 1
    allocation = status.allocation
    return Promised(
        node=read.node or "",
        gpus=gpus,
        nics=tuple(
            PromisedNic(name=n.name, rdma=n.rdma, state=n.state, link_layer=n.link_layer) for n in status.nics
        ),
        islands=islands,
        allocation_known=allocation is not None and allocation.state == "Known",
        allocation_why=(allocation.message or "") if allocation is not None else "",
        leaf=next((tier.id for tier in status.network.tiers if tier.level == 0 and tier.id), None),
        health=status.health,
        body=obj,
        status=status,
    )
