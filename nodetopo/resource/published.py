"""What a published NodeTopology says, typed: the records ``nodetopo.resource.reader`` returns.

``Published`` is one object (its name, its ``PublishedStatus``, the ``Problem`` list); the facts are
the model's own types where the schema and the model agree, ``Published*`` records for what only
the object says. The reader's rule (what is left out, what is unknown, what is malformed) is in
``nodetopo.resource.reader``.
"""

from __future__ import annotations

import dataclasses
import enum

from nodetopo import model

#: The sections of a status, in the order they are read (``gpuLinks`` and the rest as the schema
#: names them). ``allocation`` is ``status.allocation`` with every GPU's ``heldBy``. Three are parts
#: of others, read only when asked for, because parsing them is most of what a read costs and
#: placement needs none of them: ``addresses``, the GPUs' and NICs' ``pciBusID``; ``affinity``, the
#: GPUs' ``numaAffinity`` and ``cpuAffinity`` CPU lists; ``details``, what identifies and describes a
#: device beyond where it sits (a GPU's ``uuid``, ``model``, ``pcieRoot``, ``gpuNumaNode``,
#: ``memoryBytes``, ``nearestNICs``; a NIC's ``netdev``, ``pcieRoot``, ``numaNode``, ``rateGbps``).
#: Unread, they are None (``nearestNICs``: empty). Placement reads a GPU's index, island, NUMA node,
#: MIG mode, NIC classes and the NICs behind a degraded edge, a NIC's name, RDMA, state and link
#: layer, the Ready condition and the holders: the placement read of an object costs a third of the
#: whole one.
SECTIONS = (
    "gpus",
    "nics",
    "nvlinkIslands",
    "gpuLinks",
    "numaNodes",
    "migDevices",
    "preferredGPUSets",
    "fabric",
    "network",
    "sources",
    "conditions",
    "allocation",
    "summary",
    "health",
    "addresses",
    "affinity",
    "details",
)
ALL = frozenset(SECTIONS)


class ResourceError(ValueError):
    """A NodeTopology that cannot be read, or not as the reader's caller needs it."""


class Severity(enum.Enum):
    UNKNOWN = "unknown"  #: a value or an entry left out; the rest is what the object says
    MALFORMED = "malformed"  #: the shape is broken: placement does not trust the object
    BOUNDS = "bounds"  #: malformed: a list over its schema bound (not read)


@dataclasses.dataclass(frozen=True, slots=True)
class Problem:
    """What the reader could not take as the schema says: where (``section``, ``field``) and what."""

    section: str  #: one of ``SECTIONS``, or ``status`` for the status itself and its scalars
    field: str  #: ``status.gpus``, ...
    what: str
    severity: Severity = Severity.UNKNOWN

    def __str__(self) -> str:
        return f"{self.field}: {self.what}"

    @property
    def malformed(self) -> bool:
        return self.severity is not Severity.UNKNOWN

    @property
    def placement(self) -> str:
        """How placement says why it does not use the object."""
        if self.severity is Severity.BOUNDS:
            return f"NodeTopology over the schema's bounds ({self.what})"
        return f"malformed NodeTopology ({self.what})"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PublishedGpu:
    """One entry of ``status.gpus``: the GPU, its NICs by class, and who holds it."""

    gpu: model.Gpu
    #: (NIC name, class) for every NIC whose class the object says, nearest first (then by name)
    nics: tuple[tuple[str, model.LinkClass], ...] = ()
    #: the NICs of ``nics`` whose path from this GPU crosses a degraded edge (``degradedNICs``)
    degraded_nics: frozenset[str] = frozenset()
    #: ``heldBy``; None when not said (no allocation read, an agent that does not ask) or unreadable
    held_by: tuple[model.PodRef, ...] | None = None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PublishedCondition:
    type: str
    status: str | None = None  #: True | False | Unknown
    reason: str | None = None
    message: str | None = None
    last_transition_time: str | None = None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PublishedSummary:
    """What consumers read of ``status.summary`` (the rest is the facts themselves)."""

    gpu_count: int | None = None
    gpu_model: str | None = None
    islands: str | None = None  #: ``1x8``, ``4x2``, "" without NVLink
    worst_nic_distance: model.LinkClass | None = None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PublishedAllocation:
    state: str | None = None  #: Known | Unknown
    message: str | None = None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PublishedStatus:
    """The ``status`` of one NodeTopology, typed. A section not read (``sections``) is empty."""

    node_name: str | None = None
    agent_version: str | None = None
    content_hash: str | None = None
    summary: PublishedSummary | None = None
    gpus: tuple[PublishedGpu, ...] = ()
    nics: tuple[model.Nic, ...] = ()
    islands: tuple[model.NvlinkIsland, ...] = ()
    gpu_links: tuple[model.GpuLink, ...] | None = None  #: None: the object has no ``gpuLinks``
    numa_nodes: tuple[model.NumaNode, ...] = ()
    mig_devices: tuple[model.MigDevice, ...] = ()
    preferred_gpu_sets: tuple[model.PreferredGpuSets, ...] = ()
    fabric: model.FabricInfo | None = None
    network: model.NetworkPosition = dataclasses.field(default_factory=model.NetworkPosition)
    #: ``status.network.nvlinkDomain`` (id, healthy), as ``topology.network.nvlink_domain`` says it
    nvlink_domain: tuple[str | None, bool | None] | None = None
    sources: tuple[model.SourceStatus, ...] = ()
    conditions: tuple[PublishedCondition, ...] = ()
    allocation: PublishedAllocation | None = None
    #: ``status.health``: the edges judged and the degraded ones (not judged: an older agent)
    health: model.HealthReport = model.NOT_JUDGED

    def condition(self, kind: str) -> PublishedCondition | None:
        """The first condition of type ``kind`` (``Ready``, ``Consistent``, ...)."""
        return next((c for c in self.conditions if c.type == kind), None)

    @property
    def allocation_known(self) -> bool:
        """The node's agent asked its kubelet who holds each GPU (``allocation.state`` Known) and every
        GPU's ``heldBy`` was read."""
        return (
            self.allocation is not None
            and self.allocation.state == "Known"
            and all(g.held_by is not None for g in self.gpus)
        )

    def held_by(self, namespace: str, name: str) -> tuple[PublishedGpu, ...] | None:
        """The GPUs the kubelet handed the pod ``namespace/name`` (``heldBy``), in the object's order;
        None when who holds what is unknown (``allocation_known``). Empty: the pod holds none, or not yet."""
        if not self.allocation_known:
            return None
        return tuple(
            g for g in self.gpus if any((h.namespace, h.name) == (namespace, name) for h in g.held_by or ())
        )


#: what a consumer reads where an object has no status yet
NO_STATUS = PublishedStatus()


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Published:
    """One NodeTopology as read: its name, its status (None: not published yet) and the problems."""

    name: str | None  #: ``metadata.name``
    status: PublishedStatus | None
    problems: tuple[Problem, ...] = ()

    @property
    def node(self) -> str | None:
        """The node the object describes: ``status.nodeName``, else the object's name."""
        return (self.status.node_name if self.status is not None else None) or self.name

    @property
    def facts(self) -> PublishedStatus:
        """The status, or an empty one before the first publish."""
        return self.status if self.status is not None else NO_STATUS

    @property
    def malformed(self) -> Problem | None:
        """The first problem that makes the object untrustworthy for placement (None: none)."""
        return next((p for p in self.problems if p.malformed), None)
