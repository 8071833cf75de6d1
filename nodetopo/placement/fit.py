"""Topology fit: can a node place a pod's GPUs, which GPUs would it use, and how good is that placement.

Pure functions over ``NodeShape`` (the part of a NodeTopology's status that placement depends on),
the set of GPUs still free on the node, and a ``PodRequest``.

Which GPUs are free on a node: when the node's agent asks its kubelet (the PodResources API) the
NodeTopology says which pod holds each GPU (``status.gpus[].heldBy``, ``status.allocation.state``
Known), and those GPUs are taken for as long as their pod is bound (``free_with_holders``). The
agent publishes a new pod's GPUs a few seconds after the kubelet hands them out, so a pod bound
but not yet listed is placed by the model below among the remaining GPUs. Where the allocation is
not known (no agent access to the kubelet, an older agent) the extender *models* the whole
allocation (``free_after``): the pods bound to the node are placed, in the order they were created,
with the same choice this module makes for a new pod (``place``), and what remains is the node's
free set. A topology-aware device plugin (the NVIDIA plugin's ``GetPreferredAllocation``, which
follows the same "tightest island first" idea) makes the model close to reality; when it is not,
the capacity check still holds and only the island estimate is off.

Choosing GPUs for a request of ``k``:

1. candidates are the node's whole GPUs (not MIG-enabled) that are free; with ``rdma`` only GPUs with
   a usable RDMA NIC (not DOWN; its link layer may be unknown); with ``max-nic-distance`` only GPUs
   whose best (RDMA) NIC class is that close or closer. A NIC counts for a GPU only over a healthy
   path (``status.health``: none behind a degraded edge), and for the node only when some GPU
   reaches it so (a rail whose port is degraded is no usable RDMA NIC, nor its link layer);
2. candidates are grouped by NVLink island (``gpus-in-one-island``, for k > 1) and by NUMA node
   (``numa-aligned``); only groups with at least k candidates qualify;
3. inside a group GPUs are taken from the islands with the fewest free GPUs first, then the best NIC
   class, then the lowest index; the group whose pick has the least *waste* wins (waste = free GPUs
   left behind in the islands the pick cuts into), then the fewest islands touched, then the best
   NIC class.

Score (0-10, ``MAX_SCORE``, what the scheduler multiplies by the extender's weight and by 10):
``fit`` 0-5 = round(5 × (1 − waste / free GPUs)): a 2-GPU pod that takes a whole free 2-GPU island
scores 5 there and 1 on a node where it would cut into a free 8-GPU island; ``nic`` 0-3 = PIX 3,
PXB 2, PHB 1, NODE/SYS/no NIC 0, for the worst class among the chosen GPUs (to an RDMA NIC when the
pod requires RDMA or prefers a link layer); ``link`` 0-2 = 2 when every chosen GPU's nearest RDMA
NICs include the preferred link layer (or no preference was given), 1 when the node has such a NIC
anywhere, else 0.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
from collections import OrderedDict, defaultdict
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from nodetopo.model import LinkClass
from nodetopo.placement.request import PodRequest
from nodetopo.resource.health import unreachable_nics
from nodetopo.resource.published import Published
from nodetopo.resource.reader import read_status

MAX_SCORE = 10
REASON_PREFIX = "nodetopo: "
_NIC_POINTS = {LinkClass.PIX: 3, LinkClass.PXB: 2, LinkClass.PHB: 1}


@dataclasses.dataclass(frozen=True, slots=True)
class GpuSlot:
    """One GPU as placement sees it."""

    index: int
    island: int | None
    numa: int | None
    nic: LinkClass | None  #: best PCIe class to any NIC
    rdma_nic: LinkClass | None  #: best PCIe class to a usable RDMA NIC
    rdma_layers: tuple[str, ...]  #: link layers of the usable RDMA NICs at ``rdma_nic``
    whole: bool  #: not MIG-enabled: can be handed out as a whole ``nvidia.com/gpu``


@dataclasses.dataclass(frozen=True, slots=True)
class NodeShape:
    """What placement needs from one NodeTopology. Equal for identical machines (no names, no UUIDs).

    ``invalid`` is set (and ``gpus`` empty) when the NodeTopology could not be used at all: over the
    schema's bounds (an object written before the CRD had them, or by a broken agent) or malformed.
    Placement treats such a node like one without a NodeTopology (constrained pods are refused, with
    the reason; others pass unscored).
    """

    gpus: tuple[GpuSlot, ...]
    rdma_layers: tuple[str, ...]  #: link layers of the node's usable RDMA NICs (sorted, unique)
    ready: bool = True
    #: usable RDMA NICs (not DOWN), whatever their link layer: one whose link layer or state is
    #: unknown (``topo -m`` names NICs, not layers) is usable. None: as many as ``rdma_layers``
    rdma_nics: int | None = None
    invalid: str = ""
    by_index: Mapping[int, GpuSlot] = dataclasses.field(init=False, compare=False, repr=False)
    whole_gpus: frozenset[int] = dataclasses.field(init=False, compare=False, repr=False)
    _hash: int = dataclasses.field(init=False, compare=False, repr=False)

    @property
    def has_rdma(self) -> bool:
        return bool(self.rdma_nics if self.rdma_nics is not None else self.rdma_layers)

    def __post_init__(self) -> None:
        # Derived once: placement looks GPUs up by index for every candidate, and the caches hash
        # shapes on every lookup (a tuple does not cache its hash).
        object.__setattr__(self, "by_index", {g.index: g for g in self.gpus})
        object.__setattr__(self, "whole_gpus", frozenset(g.index for g in self.gpus if g.whole))
        object.__setattr__(
            self, "_hash", hash((self.gpus, self.rdma_layers, self.ready, self.rdma_nics, self.invalid))
        )

    def __hash__(self) -> int:
        return self._hash


@dataclasses.dataclass(frozen=True, slots=True)
class Verdict:
    """The answer for one (node, pod): fits or why not, and the score when it fits."""

    fits: bool
    reason: str = ""
    unresolvable: bool = False  #: the node could not take the pod even with all its GPUs free
    score: int = 0
    gpus: tuple[int, ...] = ()


#: What placement reads of a NodeTopology (``nodetopo.resource.reader`` sections).
SECTIONS = frozenset({"gpus", "nics", "conditions", "allocation"})


def node_shape(status: Any) -> NodeShape:
    """The ``NodeShape`` of a NodeTopology ``status``; tolerant of missing fields (older agents).

    The cost is linear in the object and bounded: a status over the schema's bounds (``MAX_GPUS``
    GPUs, ``MAX_NICS`` NICs, per GPU too) or of the wrong shape yields an ``invalid`` shape at once.
    """
    return shape_of(read_status(status, sections=SECTIONS))


def shape_of(read: Published) -> NodeShape:
    """The ``NodeShape`` of a read NodeTopology (``read_nodetopology(obj, sections=SECTIONS)``): an
    ``invalid`` one when the reader found it malformed (``nodetopo.resource.reader``'s rule) in what
    placement reads; an object without a status yet is a node with no GPU."""
    malformed = read.malformed
    if malformed is not None:
        return NodeShape(gpus=(), rdma_layers=(), ready=False, invalid=malformed.placement)
    status = read.facts
    # a NIC that no GPU reaches over a healthy path (its own port degraded) is not a usable one
    unreachable = unreachable_nics(status)
    usable_rdma: dict[str, str | None] = {
        n.name: n.link_layer
        for n in status.nics
        if n.rdma and (n.state or "").upper() != "DOWN" and n.name not in unreachable
    }
    slots: dict[int, GpuSlot] = {}
    for published in status.gpus:
        gpu = published.gpu
        nics = published.nics  # nearest first
        if published.degraded_nics:
            # a NIC whose path from this GPU crosses a degraded edge (status.health) is not one to count
            nics = tuple(pair for pair in nics if pair[0] not in published.degraded_nics)
        best_rdma: LinkClass | None = None
        layers: set[str] = set()
        for name, cls in nics:
            if name in usable_rdma:
                if best_rdma is None:
                    best_rdma = cls
                elif cls != best_rdma:
                    break
                layer = usable_rdma[name]
                if layer:
                    layers.add(str(layer))
        slots[gpu.index] = GpuSlot(
            index=gpu.index,
            island=gpu.island,
            numa=gpu.numa_node,
            nic=nics[0][1] if nics else gpu.nic_distance,
            rdma_nic=best_rdma,
            rdma_layers=tuple(sorted(layers)),
            whole=gpu.mig_enabled is not True,
        )
    ready = any(c.type == "Ready" and c.status == "True" for c in status.conditions)
    return NodeShape(
        gpus=tuple(slots[i] for i in sorted(slots)),
        rdma_layers=tuple(sorted({str(v) for v in usable_rdma.values() if v})),
        ready=ready or not status.conditions,
        rdma_nics=len(usable_rdma),
    )


def _gpus(n: int) -> str:
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def _distance(g: GpuSlot, request: PodRequest) -> LinkClass | None:
    return g.rdma_nic if request.rdma or request.link_layer else g.nic


def _island_free(shape: NodeShape, free: frozenset[int]) -> dict[int, int]:
    counts: dict[int, int] = defaultdict(int)
    for g in shape.gpus:
        if g.island is not None and g.whole and g.index in free:
            counts[g.island] += 1
    return counts


def place(shape: NodeShape, free: frozenset[int], request: PodRequest) -> tuple[int, ...] | str:
    """The GPUs this node would give ``request`` out of ``free``, or why it cannot (a reason text)."""
    k = request.gpus
    candidates = [g for g in shape.gpus if g.whole and g.index in free]
    if len(candidates) < k:
        mig = sum(1 for g in shape.gpus if not g.whole)
        note = f" ({mig} MIG-enabled GPUs are not handed out whole)" if mig else ""
        return f"{_gpus(len(candidates))} available (whole), pod needs {k}{note}"
    if request.rdma:
        if not shape.has_rdma:  # an unknown link layer is not a missing NIC
            return "no usable RDMA NIC on this node"
        candidates = [g for g in candidates if g.rdma_nic is not None]
    if request.max_nic_distance is not None:
        limit = request.max_nic_distance
        close = [g for g in candidates if (d := _distance(g, request)) is not None and d <= limit]
        if len(close) < k:
            classes = [d for g in candidates if (d := _distance(g, request)) is not None]
            kind = "an RDMA NIC" if request.rdma else "a NIC"
            best = f"best here: {min(classes).name}" if classes else "none on this node"
            return f"{_gpus(len(close))} with {kind} at {limit.name} or closer, pod needs {k} ({best})"
        candidates = close
    by_island = request.one_island and k > 1
    if by_island:
        candidates = [g for g in candidates if g.island is not None]
    if request.numa_aligned:
        candidates = [g for g in candidates if g.numa is not None]
    groups: dict[tuple[int | None, int | None], list[GpuSlot]] = defaultdict(list)
    for g in candidates:
        groups[(g.island if by_island else None, g.numa if request.numa_aligned else None)].append(g)
    feasible = [members for members in groups.values() if len(members) >= k]
    if not feasible:
        largest = max((len(m) for m in groups.values()), default=0)
        if by_island and not any(g.island is not None for g in shape.gpus):
            return f"no NVLink island on this node (no GPU has an NVLink peer), pod needs {k} in one island"
        if by_island and request.numa_aligned:
            what = "GPUs in one NVLink island and NUMA node"
        elif by_island:
            what = "GPUs in one NVLink island"
        else:
            what = "GPUs on one NUMA node"
        qualifier = " meeting the NIC/RDMA needs" if request.rdma or request.max_nic_distance else ""
        return f"at most {largest} {what}{qualifier}, pod needs {k}"
    island_free = _island_free(shape, free)
    best_pick: tuple[tuple[int, int, int, tuple[int, ...]], tuple[int, ...]] | None = None
    for members in feasible:
        ordered = sorted(
            members,
            key=lambda g: (
                island_free.get(g.island, 1) if g.island is not None else 1,
                g.island if g.island is not None else -1,
                _distance(g, request) or 9,
                g.index,
            ),
        )
        pick = tuple(sorted(g.index for g in ordered[:k]))
        cost = _cost(shape, island_free, pick, request)
        if best_pick is None or cost < best_pick[0]:
            best_pick = (cost, pick)
    assert best_pick is not None
    return best_pick[1]


def _cost(
    shape: NodeShape, island_free: Mapping[int, int], pick: Sequence[int], request: PodRequest
) -> tuple[int, int, int, tuple[int, ...]]:
    by_index = shape.by_index
    taken: dict[int, int] = defaultdict(int)
    for i in pick:
        island = by_index[i].island
        if island is not None:
            taken[island] += 1
    waste = sum(island_free[i] - n for i, n in taken.items())
    worst = max((_distance(by_index[i], request) or 9 for i in pick), default=9)
    return (waste, len(taken), int(worst), tuple(pick))


def score(shape: NodeShape, free: frozenset[int], pick: Sequence[int], request: PodRequest) -> int:
    """The 0-10 score of placing ``request`` on ``pick`` (see the module docstring)."""
    island_free = _island_free(shape, free)
    waste = _cost(shape, island_free, pick, request)[0]
    available = sum(1 for g in shape.gpus if g.whole and g.index in free)
    fit = round(5 * (1 - waste / max(1, available)))
    by_index = shape.by_index
    classes = [_distance(by_index[i], request) for i in pick]
    nic = min((_NIC_POINTS.get(c, 0) if c is not None else 0) for c in classes) if classes else 0
    layer = request.link_layer
    if layer is None or (pick and all(layer in by_index[i].rdma_layers for i in pick)):
        link = 2
    elif layer in shape.rdma_layers:
        link = 1
    else:
        link = 0
    return max(0, min(MAX_SCORE, fit + nic + link))


class FitCache:
    """The memo of ``evaluate`` and ``free_after``, one bucket per ``NodeShape``, bounded in bytes.

    Identical machines share a shape, so a cluster of a few hardware types costs a few evaluations
    per pod, not one per node. What the memo holds is bounded by an estimate of its bytes (the
    shape, each free set, each answer), not by a count of entries: a shape of 1,024 GPUs costs
    hundreds of times one of 8, and a node that publishes a new shape on every update (a broken or
    compromised agent) must not grow the extender. Past ``max_bytes`` the least recently used
    shapes' buckets go; ``forget`` drops a shape at once (the extender's cache calls it when no node
    has the shape any more). Lookups are lock-free dict reads; adding and evicting take a lock.
    """

    def __init__(self, max_bytes: int = 16 * 2**20) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._lock = threading.Lock()
        self._buckets: OrderedDict[NodeShape, _Bucket] = OrderedDict()

    def __len__(self) -> int:
        return len(self._buckets)

    def bucket(self, shape: NodeShape) -> _Bucket:
        found = self._buckets.get(shape)
        if found is not None:
            return found
        with self._lock:
            found = self._buckets.get(shape)
            if found is None:
                found = self._buckets[shape] = _Bucket(_shape_bytes(shape))
                self.bytes += found.bytes
            return found

    def add(self, shape: NodeShape, bucket: _Bucket, key: Hashable, value: Any, cost: int) -> None:
        with self._lock:
            if self._buckets.get(shape) is not bucket:  # forgotten or evicted meanwhile: keep nothing
                return
            if key not in bucket.entries:
                bucket.entries[key] = value
                bucket.bytes += cost
                self.bytes += cost
            self._buckets.move_to_end(shape)
            while self.bytes > self.max_bytes and self._buckets:
                _, evicted = self._buckets.popitem(last=False)
                self.bytes -= evicted.bytes

    def forget(self, shape: NodeShape) -> None:
        with self._lock:
            bucket = self._buckets.pop(shape, None)
            if bucket is not None:
                self.bytes -= bucket.bytes

    def clear(self) -> None:
        with self._lock:
            self._buckets.clear()
            self.bytes = 0


class _Bucket:
    """One shape's memo: (free, request) → ``Verdict`` and (bound, free) → free set."""

    __slots__ = ("bytes", "entries")

    def __init__(self, shape_bytes: int) -> None:
        self.entries: dict[Hashable, Any] = {}
        self.bytes = shape_bytes


_ENTRY = 200  #: a dict slot, the key tuple and the answer record, beside the sets they hold


def _shape_bytes(shape: NodeShape) -> int:
    """An estimate of a shape's bytes: its slots (an object and a few fields each), its index dict."""
    return 600 + 200 * len(shape.gpus) + sys.getsizeof(shape.whole_gpus)


#: The one memo of this process (the extender's); ``forget``/``clear`` it, never replace it.
CACHE = FitCache()


def evaluate(shape: NodeShape, free: frozenset[int], request: PodRequest) -> Verdict:
    """Filter and score in one: does ``request`` fit ``shape`` given the ``free`` GPUs, and how well.

    Memoized per shape in ``CACHE`` (bounded in bytes).
    """
    bucket = CACHE.bucket(shape)
    key = ("verdict", free, request)
    verdict: Verdict | None = bucket.entries.get(key)
    if verdict is None:
        verdict = _evaluate(shape, free, request)
        CACHE.add(shape, bucket, key, verdict, _ENTRY + sys.getsizeof(free) + 8 * len(verdict.gpus))
    return verdict


def _evaluate(shape: NodeShape, free: frozenset[int], request: PodRequest) -> Verdict:
    if request.gpus <= 0:
        return Verdict(fits=True, score=0)
    if shape.invalid:  # like a node without a NodeTopology: only constrained pods are refused
        if not request.constrained:
            return Verdict(fits=True, score=0)
        return Verdict(fits=False, reason=REASON_PREFIX + shape.invalid, unresolvable=True)
    empty = place(shape, shape.whole_gpus, request)
    if isinstance(empty, str):
        return Verdict(fits=False, reason=REASON_PREFIX + empty, unresolvable=True)
    now = place(shape, free, request)
    if isinstance(now, str):
        used = len(shape.whole_gpus - free)
        return Verdict(fits=False, reason=f"{REASON_PREFIX}{now} ({_gpus(used)} in use by bound pods)")
    return Verdict(fits=True, score=score(shape, free, now, request), gpus=now)


def free_after(
    shape: NodeShape, bound: tuple[PodRequest, ...], free: frozenset[int] | None = None
) -> frozenset[int]:
    """The GPUs left free once the pods ``bound`` to the node (oldest first) are placed among ``free``
    (default: all the node's whole GPUs). Memoized per shape in ``CACHE``."""
    free = shape.whole_gpus if free is None else free
    if not bound:
        return free
    bucket = CACHE.bucket(shape)
    key = ("free", bound, free)
    left: frozenset[int] | None = bucket.entries.get(key)
    if left is None:
        left = _free_after(shape, bound, free)
        cost = _ENTRY + sys.getsizeof(free) + sys.getsizeof(left) + 64 * len(bound)
        CACHE.add(shape, bucket, key, left, cost)
    return left


def _free_after(shape: NodeShape, bound: tuple[PodRequest, ...], free: frozenset[int]) -> frozenset[int]:
    for request in bound:
        if request.gpus <= 0 or not free:
            continue
        pick = place(shape, free, request)
        if isinstance(pick, str):  # bound some other way (or constraints changed): count it anyway
            pick = place(shape, free, PodRequest(gpus=min(request.gpus, len(free))))
        if isinstance(pick, str):
            continue
        free = free - frozenset(pick)
    return free


#: pod (``namespace/name``) → the GPU indices the kubelet handed it, from ``status.gpus[].heldBy``
Holders = Mapping[str, frozenset[int]]


def node_holders(status: Any) -> Holders | None:
    """Who holds which GPU, when the NodeTopology says it knows (``status.allocation.state`` Known);
    None when it does not say or does not know (then placement estimates, see ``free_after``).
    Bounded like ``node_shape``: a malformed or oversized allocation is treated as unknown."""
    return holders_of(read_status(status, sections=SECTIONS))


def holders_of(read: Published) -> Holders | None:
    """``node_holders`` of a read NodeTopology: None unless the allocation is Known and every GPU's
    holders were readable (a Known allocation lists every GPU's holders: a GPU without is unknown)."""
    status = read.facts
    if read.malformed is not None or status.allocation is None or status.allocation.state != "Known":
        return None
    held: dict[str, set[int]] = {}
    for gpu in status.gpus:
        if gpu.held_by is None:
            return None
        for holder in gpu.held_by:
            held.setdefault(f"{holder.namespace}/{holder.name}", set()).add(gpu.gpu.index)
    return {pod: frozenset(gpus) for pod, gpus in held.items()}


def free_with_holders(
    shape: NodeShape, held: Holders | None, bound: Sequence[tuple[str, PodRequest]]
) -> frozenset[int]:
    """The GPUs left free by the pods ``bound`` to the node ((``namespace/name``, request), oldest
    first). Where the kubelet's holders are known, a GPU held by a pod still bound to the node is
    taken (a GPU whose holder has finished or gone is free) and pods bound but not yet in the holders
    (the agent publishes a new pod's GPUs seconds after it starts) are placed by the model among the
    rest; where they are not (``held`` None), every bound pod is placed by the model (``free_after``)."""
    free = shape.whole_gpus
    unlisted: list[PodRequest] = []
    for pod, request in bound:
        gpus = held.get(pod) if held is not None else None
        if gpus is None:
            unlisted.append(request)
        else:
            free = free - gpus
    return free_after(shape, tuple(unlisted), free)
