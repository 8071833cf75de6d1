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
* ``GET /healthz`` (process alive), ``GET /readyz`` (caches synced; JSON counts).

Until the caches have synced, ``/filter`` and ``/prioritize`` answer ``503`` with a JSON ``Error``;
kube-scheduler treats any non-200 as a failed scheduling attempt and retries the pod with backoff
(unless the extender is configured ``ignorable``, which this one must not be).

Accepted sockets get ``TCP_NODELAY``: the scheduler sends each request in more than one segment and
without it Nagle's algorithm plus delayed ACKs add ~40 ms to every call.
"""

from __future__ import annotations

import gc
import json
import logging
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from nodetopo.extender.cache import ClusterState
from nodetopo.extender.fit import REASON_PREFIX
from nodetopo.extender.request import AnnotationError, parse_pod_request

log = logging.getLogger(__name__)

NO_TOPOLOGY = REASON_PREFIX + "no NodeTopology for this node (is the nodetopo agent running there?)"
MAX_BODY_BYTES = 64 * 1024 * 1024


class ProtocolError(ValueError):
    """The request body is not valid ``ExtenderArgs``."""


def _candidate_names(args: dict[str, Any]) -> tuple[list[str], dict[str, Any] | None]:
    """Node names from ``NodeNames`` or, without the node cache, ``Nodes.items`` (kept for the answer)."""
    names = args.get("NodeNames")
    if names is not None:
        if not isinstance(names, list):
            raise ProtocolError("NodeNames must be a list of strings")
        return [str(n) for n in names], None
    nodes = args.get("Nodes") or {}
    by_name = {str(n["metadata"]["name"]): n for n in nodes.get("items") or []}
    return list(by_name), by_name


def filter_nodes(state: ClusterState, args: dict[str, Any]) -> dict[str, Any]:
    """``ExtenderArgs`` → ``ExtenderFilterResult``."""
    names, objects = _candidate_names(args)
    passed: list[str] = []
    failed: dict[str, str] = {}
    unresolvable: dict[str, str] = {}
    try:
        request = parse_pod_request(args.get("Pod") or {})
    except AnnotationError as e:
        unresolvable = {n: f"{REASON_PREFIX}{e}" for n in names}
    else:
        for node, verdict in state.verdicts(names, request):
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
    if objects is not None:
        result["NodeNames"] = None
        result["Nodes"] = {"items": [objects[n] for n in passed]}
    return result


def prioritize_nodes(state: ClusterState, args: dict[str, Any]) -> list[dict[str, Any]]:
    """``ExtenderArgs`` → ``HostPriorityList`` (0 for nodes without a fit or a NodeTopology)."""
    names, _ = _candidate_names(args)
    try:
        request = parse_pod_request(args.get("Pod") or {})
    except AnnotationError:
        return [{"Host": n, "Score": 0} for n in names]
    return [
        {"Host": node, "Score": verdict.score if verdict is not None and verdict.fits else 0}
        for node, verdict in state.verdicts(names, request)
    ]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the scheduler's Go client reuses connections
    server: ExtenderHTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def _send(self, status: int, payload: Any) -> None:
        body = json.dumps(payload, separators=(",", ":")).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        state = self.server.state
        if self.path == "/healthz":
            self._send(200, {"status": "ok"})
        elif self.path == "/readyz":
            payload = {"synced": state.synced, **state.counts()}
            self._send(200 if state.synced else 503, payload)
        else:
            self._send(404, {"Error": f"no such path {self.path}"})

    def do_POST(self) -> None:
        verb = self.path.rstrip("/").rsplit("/", 1)[-1]
        if verb not in ("filter", "prioritize"):
            self._send(404, {"Error": f"unknown extender verb {self.path!r} (filter, prioritize)"})
            return
        length = int(self.headers.get("Content-Length") or 0)
        if length <= 0 or length > MAX_BODY_BYTES:
            self._send(400, {"Error": f"bad Content-Length {length}"})
            return
        raw = self.rfile.read(length)
        state = self.server.state
        if not state.synced:
            self._send(503, {"Error": state.not_synced_reason()})
            return
        self.server.freeze_cache_once()
        started = time.perf_counter()
        try:
            args = json.loads(raw)
            if not isinstance(args, dict):
                raise ProtocolError("ExtenderArgs must be a JSON object")
            answer: Any = filter_nodes(state, args) if verb == "filter" else prioritize_nodes(state, args)
        except (ValueError, KeyError, TypeError) as e:
            log.warning("bad %s request: %s", verb, e)
            self._send(400, {"Error": f"bad ExtenderArgs: {e}"})
            return
        self._send(200, answer)
        if log.isEnabledFor(logging.DEBUG):
            pod = (args.get("Pod") or {}).get("metadata") or {}
            log.debug(
                "%s %s/%s: %.2f ms: %s",
                verb,
                pod.get("namespace"),
                pod.get("name"),
                (time.perf_counter() - started) * 1000,
                json.dumps(answer)[:2000],
            )


class ExtenderHTTPServer(ThreadingHTTPServer):
    """A threading HTTP server that sets ``TCP_NODELAY`` on every accepted connection."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], state: ClusterState) -> None:
        self.state = state
        self._frozen = False
        super().__init__(address, _Handler)

    def freeze_cache_once(self) -> None:
        """After the first sync, move the (large, long-lived) cache out of the garbage collector's
        sight: with 5,000 cached nodes, full collections triggered by request garbage otherwise
        traverse the whole cache and show up as p99 spikes (benchmarks/RESULTS.md)."""
        if not self._frozen:
            self._frozen = True
            gc.collect()
            gc.freeze()

    def get_request(self) -> tuple[socket.socket, Any]:
        conn, addr = super().get_request()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn, addr

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def start_background(self) -> threading.Thread:
        """Serve in a daemon thread (tests, benchmarks); ``shutdown()`` stops it."""
        thread = threading.Thread(target=self.serve_forever, name="extender-http", daemon=True)
        thread.start()
        return thread


def make_server(state: ClusterState, host: str = "0.0.0.0", port: int = 8888) -> ExtenderHTTPServer:
    return ExtenderHTTPServer((host, port), state)
