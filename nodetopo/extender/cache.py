"""The extender's view of the cluster: NodeTopology shapes by node and the GPU pods bound to each node.

``ClusterState`` is the thread-safe store the HTTP handlers read. Two reflectors
(``nodetopo.kube.reflector``: paged list, resourceVersion watch with bookmarks, relist that replaces
the kind's contents on 410 Gone) keep it current, one for NodeTopology objects, one for bound GPU
pods, over nodetopo's own transport. ``ClusterState.synced`` is true once both kinds have completed
their first list; until then the extender answers 503.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from nodetopo.kube.reflector import Handlers, Reflector, start_watching
from nodetopo.placement.fit import CACHE as FIT_CACHE
from nodetopo.placement.fit import SECTIONS as PLACEMENT
from nodetopo.placement.fit import (
    Holders,
    NodeShape,
    Verdict,
    evaluate,
    free_with_holders,
    holders_of,
    shape_of,
)
from nodetopo.placement.request import AnnotationError, PodRequest, parse_pod_request, pod_gpus
from nodetopo.resource.identity import GROUP, PLURAL, VERSION
from nodetopo.resource.reader import read_nodetopology

log = logging.getLogger(__name__)

NODETOPOLOGY_PATH = f"/apis/{GROUP}/{VERSION}/{PLURAL}"
PODS_PATH = "/api/v1/pods"
#: Pods that hold GPUs: bound to a node and not finished. A pod that finishes leaves the selection,
#: and the API server sends DELETED for it.
BOUND_PODS_SELECTOR = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"


@dataclasses.dataclass(frozen=True, slots=True)
class BoundPod:
    node: str
    order: tuple[str, str]  #: (creationTimestamp, namespace/name): the order the node model places pods
    request: PodRequest


class Allocation:
    """A node's shape and the GPUs its bound pods leave free. Interned by ``ClusterState``, hashed by
    identity: a request is evaluated once per distinct allocation, found with one lookup per node."""

    __slots__ = ("free", "shape")

    def __init__(self, shape: NodeShape, free: frozenset[int]) -> None:
        self.shape = shape
        self.free = free


class ClusterState:
    """NodeTopology shapes and GPU pods, updated by reflectors and read by the HTTP handlers."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._shapes: dict[str, NodeShape] = {}
        #: node → who holds its GPUs, where its NodeTopology knows (the kubelet's PodResources)
        self._holders: dict[str, Holders] = {}
        #: one instance per distinct shape, and how many nodes have it: a shape no node has is dropped,
        #: with its allocations and its memo in the fit's cache (a node changing its shape on every
        #: update must not grow the extender)
        self._interned: dict[NodeShape, NodeShape] = {}
        self._refs: dict[NodeShape, int] = {}
        self._pods: dict[str, BoundPod] = {}
        self._node_pods: dict[str, dict[str, BoundPod]] = {}
        #: node → its current allocation (shape + free GPUs); dropped whenever the node changes
        self._allocations: dict[str, Allocation] = {}
        #: interned allocations, per shape: identical machines in identical states share one object
        self._allocation_pool: dict[NodeShape, dict[frozenset[int], Allocation]] = {}
        self._versions: dict[str, int] = {}  #: bumped on every change to a node's shape or pods
        self._clock = 0
        self._base = 0  #: the version of nodes not changed since the last replace
        self.topologies_synced = threading.Event()
        self.pods_synced = threading.Event()

    # ---- readiness --------------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        return self.topologies_synced.is_set() and self.pods_synced.is_set()

    def not_synced_reason(self) -> str:
        missing = [
            what
            for what, event in (("NodeTopology", self.topologies_synced), ("Pod", self.pods_synced))
            if not event.is_set()
        ]
        return f"nodetopo extender: the {' and '.join(missing)} cache has not synced yet; retry"

    def counts(self) -> dict[str, int]:
        with self._lock:
            return {
                "nodeTopologies": len(self._shapes),
                "shapes": len(self._interned),
                "gpuPods": len(self._pods),
            }

    # ---- NodeTopology -----------------------------------------------------------------------

    def _touch(self, node: str) -> None:
        """The node's shape or pods changed: its cached free set is stale (call under the lock)."""
        self._clock += 1
        self._versions[node] = self._clock
        self._allocations.pop(node, None)

    def _hold(self, shape: NodeShape) -> NodeShape:
        """The interned instance of ``shape``, counted once more (call under the lock)."""
        held = self._interned.setdefault(shape, shape)
        self._refs[held] = self._refs.get(held, 0) + 1
        return held

    def _release(self, shape: NodeShape) -> None:
        """One node fewer has ``shape``; the last one drops it everywhere (call under the lock)."""
        left = self._refs.get(shape, 0) - 1
        if left > 0:
            self._refs[shape] = left
            return
        self._refs.pop(shape, None)
        self._interned.pop(shape, None)
        self._allocation_pool.pop(shape, None)
        FIT_CACHE.forget(shape)

    def upsert_topology(self, obj: Mapping[str, Any]) -> None:
        name, shape, holders = self.compact_topology(obj)  # the object's cost is paid here, outside the lock
        with self._lock:
            old = self._shapes.get(name)
            self._shapes[name] = self._hold(shape)
            if old is not None:
                self._release(old)
            if holders is None:
                self._holders.pop(name, None)
            else:
                self._holders[name] = holders
            self._touch(name)

    def delete_topology(self, obj: Mapping[str, Any]) -> None:
        name = str(obj["metadata"]["name"])
        with self._lock:
            old = self._shapes.pop(name, None)
            if old is not None:
                self._release(old)
            self._holders.pop(name, None)
            self._touch(name)

    @staticmethod
    def compact_topology(obj: Mapping[str, Any]) -> tuple[str, NodeShape, Holders | None]:
        """(name, shape, holders): all the extender keeps of a NodeTopology. ``holders`` is None
        unless the object says who holds each GPU (``status.allocation.state`` Known)."""
        read = read_nodetopology(obj, sections=PLACEMENT)
        shape = shape_of(read)
        holders = holders_of(read) if shape.gpus else None
        return str(obj["metadata"]["name"]), shape, holders

    def replace_topologies(
        self, items: Iterable[Mapping[str, Any] | tuple[str, NodeShape, Holders | None]]
    ) -> None:
        """Replace every NodeTopology (full objects, or ``compact_topology`` triples)."""
        triples = [item if isinstance(item, tuple) else self.compact_topology(item) for item in items]
        with self._lock:
            gone = set(self._interned)
            self._interned, self._refs = {}, {}
            self._shapes = {name: self._hold(shape) for name, shape, _ in triples}
            for shape in gone - set(self._interned):
                FIT_CACHE.forget(shape)
            self._holders = {name: holders for name, _, holders in triples if holders is not None}
            self._allocations.clear()
            self._allocation_pool.clear()
            self._versions.clear()
            self._clock += 1
            self._base = self._clock

    # ---- Pods -------------------------------------------------------------------------------

    @staticmethod
    def _bound_pod(obj: Mapping[str, Any]) -> BoundPod | None:
        spec = obj.get("spec") or {}
        node = spec.get("nodeName")
        phase = (obj.get("status") or {}).get("phase")
        if not node or phase in ("Succeeded", "Failed"):
            return None
        try:
            request = parse_pod_request(obj)
        except AnnotationError:
            try:
                request = PodRequest(gpus=pod_gpus(spec))
            except AnnotationError:
                return None
        if request.gpus <= 0:
            return None
        meta = obj.get("metadata") or {}
        order = (str(meta.get("creationTimestamp") or ""), f"{meta.get('namespace')}/{meta.get('name')}")
        return BoundPod(node=str(node), order=order, request=request)

    def _forget_pod(self, uid: str) -> None:
        old = self._pods.pop(uid, None)
        if old is not None:
            on_node = self._node_pods.get(old.node)
            if on_node is not None:
                on_node.pop(uid, None)
                if not on_node:
                    del self._node_pods[old.node]
            self._touch(old.node)

    def upsert_pod(self, obj: Mapping[str, Any]) -> None:
        uid = str(obj["metadata"]["uid"])
        bound = self._bound_pod(obj)
        with self._lock:
            if self._pods.get(uid) == bound:
                return
            self._forget_pod(uid)
            if bound is not None:
                self._pods[uid] = bound
                self._node_pods.setdefault(bound.node, {})[uid] = bound
                self._touch(bound.node)

    def delete_pod(self, obj: Mapping[str, Any]) -> None:
        with self._lock:
            self._forget_pod(str(obj["metadata"]["uid"]))

    @classmethod
    def compact_pod(cls, obj: Mapping[str, Any]) -> tuple[str, BoundPod | None]:
        """(uid, bound GPU pod or None): all the extender keeps of a Pod."""
        return str(obj["metadata"]["uid"]), cls._bound_pod(obj)

    def replace_pods(self, items: Iterable[Mapping[str, Any] | tuple[str, BoundPod | None]]) -> None:
        """Replace every bound GPU pod (full objects, or ``compact_pod`` pairs)."""
        pairs = [item if isinstance(item, tuple) else self.compact_pod(item) for item in items]
        fresh = {uid: bound for uid, bound in pairs if bound is not None}
        with self._lock:
            self._pods = fresh
            self._node_pods = {}
            for uid, bound in fresh.items():
                self._node_pods.setdefault(bound.node, {})[uid] = bound
            self._allocations.clear()
            self._allocation_pool.clear()
            self._versions.clear()
            self._clock += 1
            self._base = self._clock

    # ---- queries ----------------------------------------------------------------------------

    def verdicts(self, nodes: Iterable[str], request: PodRequest) -> Iterator[tuple[str, Verdict | None]]:
        """(node, verdict) for each node; ``None`` when the node has no NodeTopology."""
        names = list(nodes)
        return zip(names, self.verdict_list(names, request), strict=True)

    def verdict_list(self, nodes: list[str], request: PodRequest) -> list[Verdict | None]:
        """The verdict for each of ``nodes``, in order; ``None`` when the node has no NodeTopology.

        Per node this is one dict lookup: ``_allocations`` maps each node whose free set is current
        to its interned ``Allocation`` (shape + free GPUs), and the request is evaluated once per
        distinct allocation. The lock is held only for those lookups and to copy references (shape,
        bound pods) for the few nodes that changed since they were last asked about; placing bound
        pods and evaluating the request run outside it, so one expensive node never stalls the
        reflectors or the other requests.
        """
        with self._lock:
            allocations: list[Allocation | None] = list(map(self._allocations.get, nodes))
            stale: list[tuple[int, NodeShape, int, tuple[BoundPod, ...], Holders | None]] = []
            if None in allocations:
                for i, node in enumerate(nodes):
                    if allocations[i] is None and (shape := self._shapes.get(node)) is not None:
                        pods = tuple((self._node_pods.get(node) or {}).values())
                        version = self._versions.get(node, self._base)
                        stale.append((i, shape, version, pods, self._holders.get(node)))
        fresh: list[tuple[str, int, Allocation]] = []
        for i, shape, version, pods, holders in stale:
            ordered = sorted(pods, key=lambda b: b.order)
            free = free_with_holders(shape, holders, [(b.order[1], b.request) for b in ordered])
            allocation = self._intern(Allocation(shape, free))
            allocations[i] = allocation
            fresh.append((nodes[i], version, allocation))
        if fresh:
            with self._lock:
                for node, version, allocation in fresh:
                    if self._versions.get(node, self._base) == version and node in self._shapes:
                        self._allocations[node] = allocation
        memo: dict[Allocation | None, Verdict | None] = {None: None}
        for distinct in set(allocations):  # identity hashing: a handful of distinct allocations
            if distinct is not None:
                memo[distinct] = evaluate(distinct.shape, distinct.free, request)
        return list(map(memo.__getitem__, allocations))

    def _intern(self, allocation: Allocation) -> Allocation:
        shape = allocation.shape
        with self._lock:
            if self._interned.get(shape) is not shape:  # dropped meanwhile: not worth keeping
                return allocation
            pool = self._allocation_pool.setdefault(shape, {})
            if len(pool) > 2 * self._refs.get(shape, 0) + 64:  # allocations come and go: forget old ones
                pool.clear()
            return pool.setdefault(allocation.free, allocation)


def start_reflectors(
    connection: Any, state: ClusterState, *, page_size: int = 250, stop: threading.Event | None = None
) -> tuple[Reflector, Reflector]:
    """Start the NodeTopology and bound-Pod reflectors feeding ``state`` over ``connection`` (a
    ``nodetopo.kube.transport.KubeConnection``)."""
    stop = stop or threading.Event()
    topologies = start_watching(
        connection,
        NODETOPOLOGY_PATH,
        Handlers(
            state.replace_topologies,
            state.upsert_topology,
            state.delete_topology,
            state.topologies_synced,
            compact=state.compact_topology,
        ),
        page_size=page_size,
        stop=stop,
    )
    pods = start_watching(
        connection,
        PODS_PATH,
        Handlers(
            state.replace_pods,
            state.upsert_pod,
            state.delete_pod,
            state.pods_synced,
            compact=state.compact_pod,
        ),
        field_selector=BOUND_PODS_SELECTOR,
        page_size=page_size,
        stop=stop,
    )
    return topologies, pods


def wait_synced(state: ClusterState, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if state.synced:
            return True
        time.sleep(0.05)
    return state.synced
