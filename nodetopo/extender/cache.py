"""The extender's view of the cluster: NodeTopology shapes by node and the GPU pods bound to each node.

``ClusterState`` is the thread-safe store the HTTP handlers read. ``Reflector`` keeps one kind of
object in it current the way client-go's reflector does: a paged list (``limit``/``continue``), then
a watch from the list's ``resourceVersion`` with bookmarks; a watch that ends is resumed from the
last seen ``resourceVersion``; ``410 Gone`` (the version was compacted) or a broken stream after
repeated failures means a fresh list that *replaces* the kind's contents, so deletions missed while
disconnected are not kept. Errors back off exponentially with jitter. ``ClusterState.synced`` is true
once both kinds have completed their first list; until then the extender answers 503.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

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
        self._interned: dict[NodeShape, NodeShape] = {}
        self._pods: dict[str, BoundPod] = {}
        self._node_pods: dict[str, dict[str, BoundPod]] = {}
        #: node → its current allocation (shape + free GPUs); dropped whenever the node changes
        self._allocations: dict[str, Allocation] = {}
        #: interned allocations: identical machines in identical states share one object
        self._allocation_pool: dict[tuple[NodeShape, frozenset[int]], Allocation] = {}
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

    def upsert_topology(self, obj: Mapping[str, Any]) -> None:
        name, shape, holders = self.compact_topology(obj)  # the object's cost is paid here, outside the lock
        with self._lock:
            self._shapes[name] = self._interned.setdefault(shape, shape)
            if holders is None:
                self._holders.pop(name, None)
            else:
                self._holders[name] = holders
            self._touch(name)

    def delete_topology(self, obj: Mapping[str, Any]) -> None:
        name = str(obj["metadata"]["name"])
        with self._lock:
            self._shapes.pop(name, None)
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
            self._interned = {}
            self._shapes = {name: self._interned.setdefault(shape, shape) for name, shape, _ in triples}
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
        key = (allocation.shape, allocation.free)
        with self._lock:
            pool = self._allocation_pool
            if len(pool) > 2 * len(self._shapes) + 1024:  # shapes come and go: forget old ones
                pool.clear()
            return pool.setdefault(key, allocation)


# --------------------------------------------------------------------------------------------
# Reflector: paged list + resourceVersion watch
# --------------------------------------------------------------------------------------------


class Gone(Exception):
    """The watch's resourceVersion is too old (HTTP 410 or an ERROR event with code 410)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Handlers:
    """What a reflector calls. ``compact`` turns each listed object into what ``replace`` keeps, page by
    page, so a list of thousands of objects never holds all their full bodies at once."""

    replace: Callable[[list[Any]], None]
    upsert: Callable[[dict[str, Any]], None]
    delete: Callable[[dict[str, Any]], None]
    synced: threading.Event
    compact: Callable[[dict[str, Any]], Any] = lambda obj: obj


class Reflector:
    """Keeps one resource collection in sync.

    ``list_func`` is a generated ``kubernetes.client`` list method (``CoreV1Api.list_pod_for_all_namespaces``,
    or ``CustomObjectsApi.list_cluster_custom_object`` with group/version/plural bound): it takes the
    standard list/watch keyword arguments and, with ``_preload_content=False``, returns the raw
    urllib3 response (``.data`` for a list, ``.stream()`` for a watch). That is stable across client
    releases, unlike ``ApiClient.call_api``.
    """

    def __init__(
        self,
        list_func: Callable[..., Any],
        what: str,
        handlers: Handlers,
        *,
        field_selector: str | None = None,
        page_size: int = 500,
        watch_timeout_s: int = 300,
        stop: threading.Event | None = None,
    ) -> None:
        self.list_func = list_func
        self.what = what
        self.handlers = handlers
        self.field_selector = field_selector
        self.page_size = page_size
        self.watch_timeout_s = watch_timeout_s
        self.stop = stop or threading.Event()
        self.resource_version: str | None = None
        self.lists = 0  #: completed lists (the first one, plus relists after 410 or failures)
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name=f"reflector {self.what}", daemon=True)
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _get(self, *, read_timeout: float, **params: Any) -> Any:
        query = {k: v for k, v in params.items() if v is not None}
        if self.field_selector:
            query["field_selector"] = self.field_selector
        return self.list_func(**query, _preload_content=False, _request_timeout=(10.0, read_timeout))

    def list_all(self) -> None:
        """A consistent paged list; replaces the collection and records its resourceVersion."""
        items: list[Any] = []
        token: str | None = None
        while True:
            response = self._get(limit=self.page_size, _continue=token, read_timeout=60.0)
            page = json.loads(response.data)
            items.extend(self.handlers.compact(obj) for obj in page.get("items") or [])
            meta = page.get("metadata") or {}
            token = meta.get("continue") or None
            if token is None:
                self.resource_version = str(meta.get("resourceVersion") or "") or None
                break
        self.handlers.replace(items)
        self.lists += 1
        self.handlers.synced.set()
        log.info("listed %s: %d objects at resourceVersion %s", self.what, len(items), self.resource_version)

    def watch_once(self) -> None:
        """One watch request from ``resource_version`` until the server ends it (or ``stop``)."""
        timeout = self.watch_timeout_s + random.randint(0, max(1, self.watch_timeout_s // 5))
        response = self._get(
            watch=True,
            resource_version=self.resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=timeout,
            read_timeout=timeout + 30.0,
        )
        try:
            for line in _lines(response):
                if self.stop.is_set():
                    return
                event = json.loads(line)
                kind = event.get("type")
                obj = event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise Gone(obj.get("message", "resourceVersion too old"))
                    raise RuntimeError(f"watch {self.what}: {obj.get('message', obj)}")
                version = (obj.get("metadata") or {}).get("resourceVersion")
                if kind in ("ADDED", "MODIFIED"):
                    self.handlers.upsert(obj)
                elif kind == "DELETED":
                    self.handlers.delete(obj)
                if version:
                    self.resource_version = str(version)
        finally:
            response.release_conn()

    def run(self) -> None:
        failures = 0
        while not self.stop.is_set():
            try:
                if self.resource_version is None:
                    self.list_all()
                self.watch_once()
                failures = 0
            except Gone as e:
                log.info("watch %s: %s; listing again", self.what, e)
                self.resource_version = None
            except Exception as e:  # noqa: BLE001 - keep watching through any API or network failure
                failures += 1
                delay = min(30.0, 0.5 * 2 ** min(failures, 6)) * random.uniform(0.5, 1.0)
                log.warning(
                    "watch %s failed (%s: %s); retrying in %.1fs", self.what, type(e).__name__, e, delay
                )
                if getattr(e, "status", None) == 410 or failures >= 5:
                    self.resource_version = None
                self.stop.wait(delay)


def _lines(response: Any) -> Iterator[bytes]:
    """The newline-delimited JSON events of a streaming watch response."""
    pending = b""
    for chunk in response.stream(65536, decode_content=True):
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            if line.strip():
                yield line
    if pending.strip():
        yield pending


def start_reflectors(
    api_client: Any, state: ClusterState, *, page_size: int = 500, stop: threading.Event | None = None
) -> tuple[Reflector, Reflector]:
    """Start the NodeTopology and bound-Pod reflectors feeding ``state``."""
    import kubernetes

    stop = stop or threading.Event()
    custom: Any = kubernetes.client.CustomObjectsApi(api_client)
    core: Any = kubernetes.client.CoreV1Api(api_client)
    topologies = Reflector(
        functools.partial(custom.list_cluster_custom_object, GROUP, VERSION, PLURAL),
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
    pods = Reflector(
        core.list_pod_for_all_namespaces,
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
    topologies.start()
    pods.start()
    return topologies, pods


def wait_synced(state: ClusterState, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if state.synced:
            return True
        time.sleep(0.05)
    return state.synced
