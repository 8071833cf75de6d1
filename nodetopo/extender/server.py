"""The HTTP side of the extender: the kube-scheduler extender protocol on top of ``ClusterState``.

Wire format (``k8s.io/kube-scheduler/extender/v1``; Go structs without JSON tags, so the keys are the
Go field names):

* ``POST /filter`` takes ``ExtenderArgs`` ``{"Pod": {...}, "NodeNames": [...]}`` (``"Nodes":
  {"items": [...]}`` instead when the scheduler is not ``nodeCacheCapable``) and answers
  ``ExtenderFilterResult`` ``{"NodeNames": [...], "FailedNodes": {node: reason},
  "FailedAndUnresolvableNodes": {node: reason}, "Error": ""}``. A node that could not take the pod
  even with all its GPUs free is *unresolvable* (preemption would not help); a node that is only
  short because of bound pods is in ``FailedNodes``.
* ``POST /prioritize`` takes the same arguments and answers ``HostPriorityList``
  ``[{"Host": node, "Score": 0..10}]``.
* ``GET /healthz`` (process alive), ``GET /readyz`` (caches synced; JSON counts), ``GET /metrics``
  (Prometheus text format).

Until the caches have synced, ``/filter`` and ``/prioritize`` answer ``503`` with a JSON ``Error``;
kube-scheduler treats any non-200 as a failed scheduling attempt and retries the pod with backoff,
unless the extender is configured ``ignorable`` (the cluster's own scheduler, as shipped): then it
places the pod without the extender.

Every bad request gets a 4xx JSON ``{"Error": ...}``: a body that is not ``ExtenderArgs`` (a JSON
object whose ``Pod`` is an object with fields of the API's types, ``NodeNames`` a list of strings) is
400; a pod whose *values* are wrong (an unknown annotation value) is a normal answer that rejects every
node with the reason, as kube-scheduler shows it in the pod's events.

Memory is bounded by design (``RequestLimits``): a body is at most ``max_body_bytes`` (8 MiB: the
largest real request is a 3 MiB pod, the API server's request limit, plus 20,000 node names of the
maximum 253 characters), and each request reserves its worst-case decode cost from one shared
``memory_budget_bytes`` before it is read and decoded (``decode_cost``: measured CPython bounds for
JSON values and text); requests that do not fit wait briefly, then get 503 (kube-scheduler retries).

Accepted sockets get ``TCP_NODELAY``: the scheduler sends each request in more than one segment and
without it Nagle's algorithm plus delayed ACKs add ~40 ms to every call.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import logging
import ssl
import threading
import time
from collections.abc import Mapping
from json.encoder import encode_basestring_ascii as _encode_str  # what json.dumps uses
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from nodetopo.extender.cache import ClusterState
from nodetopo.extender.claims import ClaimReader, ClaimReadError, ClaimUnavailable, with_claims
from nodetopo.extender.limits import RequestLimits, decode_cost
from nodetopo.httpserver import BoundedHandler, BoundedHTTPServer, HttpError, Limits
from nodetopo.placement.claims import ClaimRef, pod_claims
from nodetopo.placement.fit import REASON_PREFIX
from nodetopo.placement.request import AnnotationError, PodRequest, PodShapeError, parse_pod_request

log = logging.getLogger(__name__)

NO_TOPOLOGY = REASON_PREFIX + "no NodeTopology for this node (is the nodetopo agent running there?)"


class ProtocolError(ValueError):
    """The request body is not valid ``ExtenderArgs``."""


class MemoryBudget:
    """Bytes that requests in flight may hold, shared by all connections."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.used = 0
        self._cond = threading.Condition()

    def acquire(self, amount: int, timeout: float) -> bool:
        if amount > self.total:
            return False
        deadline = time.monotonic() + timeout
        with self._cond:
            while self.used + amount > self.total:
                left = deadline - time.monotonic()
                if (left <= 0 or not self._cond.wait(left)) and self.used + amount > self.total:
                    return False
            self.used += amount
            return True

    def release(self, amount: int) -> None:
        with self._cond:
            self.used -= amount
            self._cond.notify_all()


@dataclasses.dataclass(frozen=True, slots=True)
class ExtenderArgs:
    """What the extender keeps of a request: the node names, the pod's request (or why it is unusable)."""

    names: list[str]
    request: PodRequest | AnnotationError
    pod: str  #: namespace/name, for logs
    nodes: dict[str, Any] | None = None  #: without the node cache: the Node objects by name, for the answer
    namespace: str = ""  #: the pod's, where its claims are
    claims: tuple[ClaimRef, ...] = ()  #: the DRA ResourceClaims the pod uses (``pod_claims``)


def parse_extender_args(args: Any) -> ExtenderArgs:
    """A decoded body → ``ExtenderArgs``; ``ProtocolError`` when its JSON shape is wrong."""
    if not isinstance(args, Mapping):
        raise ProtocolError("ExtenderArgs must be a JSON object")
    pod = args.get("Pod")
    if not isinstance(pod, Mapping):
        raise ProtocolError(f"Pod must be an object, not {type(pod).__name__}")
    try:
        claims = pod_claims(pod)
        request: PodRequest | AnnotationError = parse_pod_request(pod)
    except PodShapeError as e:
        raise ProtocolError(f"Pod: {e}") from None
    except AnnotationError as e:
        request = e
    meta = pod.get("metadata")
    namespace = str(meta.get("namespace") or "")[:253] if isinstance(meta, Mapping) else ""
    ref = f"{namespace}/{str(meta.get('name'))[:253]}" if isinstance(meta, Mapping) else "?"
    common: dict[str, Any] = {"request": request, "pod": ref, "namespace": namespace, "claims": claims}
    names = args.get("NodeNames")
    if names is not None:
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ProtocolError("NodeNames must be a list of strings")
        return ExtenderArgs(names=names, **common)
    nodes = args.get("Nodes")
    if nodes is None:
        return ExtenderArgs(names=[], **common)
    items = nodes.get("items") if isinstance(nodes, Mapping) else None
    if not isinstance(nodes, Mapping) or not isinstance(items if items is not None else [], list):
        raise ProtocolError("Nodes must be an object with a list of items")
    by_name: dict[str, Any] = {}
    for item in items or []:
        meta = item.get("metadata") if isinstance(item, Mapping) else None
        name = meta.get("name") if isinstance(meta, Mapping) else None
        if not isinstance(name, str):
            raise ProtocolError("every Nodes item needs metadata.name (a string)")
        by_name[name] = item
    return ExtenderArgs(names=list(by_name), nodes=by_name, **common)


def filter_nodes(state: ClusterState, args: Mapping[str, Any] | ExtenderArgs) -> dict[str, Any]:
    """``ExtenderArgs`` → ``ExtenderFilterResult``."""
    parsed = args if isinstance(args, ExtenderArgs) else parse_extender_args(args)
    names = parsed.names
    passed: list[str] = []
    failed: dict[str, str] = {}
    unresolvable: dict[str, str] = {}
    request = parsed.request
    if isinstance(request, ClaimUnavailable):  # the claim may appear: worth another try
        failed = {n: f"{REASON_PREFIX}{request}" for n in names}
    elif isinstance(request, AnnotationError):
        unresolvable = {n: f"{REASON_PREFIX}{request}" for n in names}
    else:
        for node, verdict in zip(names, state.verdict_list(names, request), strict=True):
            if verdict is None:
                if request.constrained:
                    failed[node] = NO_TOPOLOGY
                else:
                    passed.append(node)
            elif verdict.fits:
                passed.append(node)
            elif verdict.unresolvable:
                unresolvable[node] = verdict.reason
            else:
                failed[node] = verdict.reason
    result: dict[str, Any] = {
        "NodeNames": passed,
        "FailedNodes": failed,
        "FailedAndUnresolvableNodes": unresolvable,
        "Error": "",
    }
    if parsed.nodes is not None:
        result["NodeNames"] = None
        result["Nodes"] = {"items": [parsed.nodes[n] for n in passed]}
    return result


def prioritize_scores(state: ClusterState, args: Mapping[str, Any] | ExtenderArgs) -> list[int]:
    """The score of each node of ``args``, in order (0 for nodes without a fit or a NodeTopology)."""
    parsed = args if isinstance(args, ExtenderArgs) else parse_extender_args(args)
    if isinstance(parsed.request, AnnotationError):
        return [0] * len(parsed.names)
    return [
        verdict.score if verdict is not None and verdict.fits else 0
        for verdict in state.verdict_list(parsed.names, parsed.request)
    ]


def prioritize_nodes(state: ClusterState, args: Mapping[str, Any] | ExtenderArgs) -> list[dict[str, Any]]:
    """``ExtenderArgs`` → ``HostPriorityList`` (0 for nodes without a fit or a NodeTopology)."""
    parsed = args if isinstance(args, ExtenderArgs) else parse_extender_args(args)
    scores = prioritize_scores(state, parsed)
    return [{"Host": node, "Score": score} for node, score in zip(parsed.names, scores, strict=True)]


_SCORE_TAILS: dict[int, str] = {}


def encode_priorities(names: list[str], scores: list[int]) -> bytes:
    """``HostPriorityList`` as compact JSON, byte for byte what ``json.dumps`` makes of
    ``prioritize_nodes``'s list, without building a dict per node (~4× faster at 5,000 nodes)."""
    tails = _SCORE_TAILS
    for score in set(scores):
        if score not in tails:
            tails[score] = f',"Score":{int(score)}}}'
    return (
        "["
        + ",".join(['{"Host":' + _encode_str(n) + tails[s] for n, s in zip(names, scores, strict=True)])
        + "]"
    ).encode()


class ExtenderMetrics:
    """The extender's Prometheus metrics (``GET /metrics``)."""

    def __init__(self, state: ClusterState) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "nodetopo_extender_requests_total", "Requests answered", ["verb", "code"], registry=self.registry
        )
        self.duration = Histogram(
            "nodetopo_extender_request_duration_seconds",
            "Time to answer /filter and /prioritize (after the body was read)",
            ["verb"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
            registry=self.registry,
        )
        self.budget_used = Gauge(
            "nodetopo_extender_memory_budget_used_bytes",
            "Bytes reserved by requests in flight (bodies and their decoded form)",
            registry=self.registry,
        )
        self.budget_total = Gauge(
            "nodetopo_extender_memory_budget_bytes",
            "The shared request memory budget",
            registry=self.registry,
        )
        self.synced = Gauge(
            "nodetopo_extender_synced", "1 once both caches have synced", registry=self.registry
        )
        self.objects = Gauge(
            "nodetopo_extender_cache_objects", "Objects in the cache", ["kind"], registry=self.registry
        )
        self._state = state

    def render(self, budget: MemoryBudget) -> bytes:
        self.budget_used.set(budget.used)
        self.budget_total.set(budget.total)
        self.synced.set(1 if self._state.synced else 0)
        for kind, count in self._state.counts().items():
            self.objects.labels(kind).set(count)
        return bytes(generate_latest(self.registry))


class _Handler(BoundedHandler):
    server: ExtenderHTTPServer

    def do_GET(self) -> None:
        state = self.server.state
        path = self.path.split("?", 1)[0]
        if path == "/healthz":
            self.send_json(200, {"status": "ok"})
        elif path == "/readyz":
            payload = {"synced": state.synced, **state.counts()}
            self.send_json(200 if state.synced else 503, payload)
        elif path == "/metrics":
            self._require_client_certificate()
            self.send_body(200, self.server.metrics.render(self.server.budget), CONTENT_TYPE_LATEST)
        else:
            self.send_json(404, {"Error": f"no such path {self.path[:200]!r}"})

    def do_POST(self) -> None:
        verb = self.path.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
        if verb not in ("filter", "prioritize"):
            # The body is not read: close so that it is never taken for the next request.
            raise HttpError(
                404, f"unknown extender verb {self.path[:200]!r} (filter, prioritize)", close=True
            )
        code = 500
        try:
            self._require_client_certificate()
            code = self._serve(verb)
        except HttpError as e:
            code = e.status
            raise
        finally:
            self.server.metrics.requests.labels(verb, str(code)).inc()

    def _require_client_certificate(self) -> None:
        """With a client CA (``--tls-client-ca-file``), the caller must have shown a verified certificate."""
        context = self.server.ssl_context
        if context is None or context.verify_mode == ssl.CERT_NONE:
            return
        conn = self.connection
        if not isinstance(conn, ssl.SSLSocket) or not conn.getpeercert():
            raise HttpError(
                403, "a client certificate signed by the extender's client CA is required", close=True
            )

    def _serve(self, verb: str) -> int:
        limits = self.server.request_limits
        budget = self.server.budget
        length = self.content_length(limits.max_body_bytes)
        if not budget.acquire(length, limits.budget_wait_s):
            raise HttpError(503, "extender busy: request memory budget exhausted; retry", close=True)
        reserved = length
        try:
            raw = self.read_exactly(length)
            state = self.server.state
            if not state.synced:
                raise HttpError(503, state.not_synced_reason())
            cost = decode_cost(raw)  # held together with the body while decoding
            if length + cost > budget.total:
                raise HttpError(413, f"request too complex: decoding it could take {cost} bytes")
            if not budget.acquire(cost, limits.budget_wait_s):
                raise HttpError(503, "extender busy: request memory budget exhausted; retry")
            reserved += cost
            self.server.freeze_cache_once()
            started = time.perf_counter()
            try:
                decoded = json.loads(raw)
            except (ValueError, RecursionError) as e:
                raise HttpError(
                    400, f"bad ExtenderArgs: not JSON ({type(e).__name__}: {str(e)[:200]})"
                ) from None
            del raw
            try:
                args = parse_extender_args(decoded)
            except ProtocolError as e:
                log.info("bad %s request: %s", verb, e)
                raise HttpError(400, f"bad ExtenderArgs: {e}") from None
            del decoded
            try:  # a claim-based pod: what its ResourceClaims ask (one GET each, cached briefly)
                request = with_claims(self.server.claims, args.namespace, args.claims, args.request)
            except ClaimReadError as e:
                raise HttpError(503, f"cannot read the pod's claims: {e}") from None
            args = dataclasses.replace(args, request=request)
            answer: Any
            if verb == "filter":
                answer = filter_nodes(state, args)
                self.send_json(200, answer)
            else:
                answer = prioritize_scores(state, args)
                self.send_body(200, encode_priorities(args.names, answer), "application/json")
            elapsed = time.perf_counter() - started
            self.server.metrics.duration.labels(verb).observe(elapsed)
            if log.isEnabledFor(logging.DEBUG):
                log.debug("%s %s: %.2f ms: %s", verb, args.pod, elapsed * 1000, json.dumps(answer)[:2000])
            return 200
        finally:
            budget.release(reserved)


class ExtenderHTTPServer(BoundedHTTPServer):
    """The extender's HTTP server: ``BoundedHTTPServer`` (connection limits, timeouts, TLS) plus the
    shared request memory budget and the metrics."""

    def __init__(
        self,
        address: tuple[str, int],
        state: ClusterState,
        *,
        limits: Limits | None = None,
        request_limits: RequestLimits | None = None,
        ssl_context: ssl.SSLContext | None = None,
        claims: ClaimReader | None = None,
    ) -> None:
        self.state = state
        self.claims = claims  #: None: claim-based pods are judged by what the pod itself asks
        self.request_limits = request_limits or RequestLimits()
        self.budget = MemoryBudget(self.request_limits.memory_budget_bytes)
        self.metrics = ExtenderMetrics(state)
        self._frozen = False
        self._freeze_lock = threading.Lock()
        super().__init__(address, _Handler, limits=limits, ssl_context=ssl_context)

    def freeze_cache_once(self) -> None:
        """After the first sync, move the (large, long-lived) cache out of the garbage collector's
        sight: with 5,000 cached nodes, full collections triggered by request garbage otherwise
        traverse the whole cache and show up as p99 spikes (benchmarks/RESULTS.md)."""
        if not self._frozen:
            with self._freeze_lock:
                if not self._frozen:
                    self._frozen = True
                    gc.collect()
                    gc.freeze()


def make_server(
    state: ClusterState,
    host: str = "0.0.0.0",
    port: int = 8888,
    *,
    limits: Limits | None = None,
    request_limits: RequestLimits | None = None,
    ssl_context: ssl.SSLContext | None = None,
    claims: ClaimReader | None = None,
) -> ExtenderHTTPServer:
    return ExtenderHTTPServer(
        (host, port),
        state,
        limits=limits,
        request_limits=request_limits,
        ssl_context=ssl_context,
        claims=claims,
    )
