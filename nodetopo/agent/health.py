"""Liveness, readiness and metrics over HTTP on one port.

* ``/healthz``: 200 while the loop makes progress. The loop promises, each time it goes to sleep
  or starts a scan, when it will next report (``Health.beat(expect_within)``); the check fails
  once that promise is late by the grace: 3 intervals, and never less than 3 command timeouts (a
  scan that waits on a slow ``nvidia-smi`` within its timeout is working, not stuck; with a short
  interval the scan itself would otherwise outlast the grace and the kubelet restart a healthy
  agent).
* ``/readyz``: 200 once the first publish succeeded (written, or found unchanged on the server).
* ``/metrics``: the Prometheus text format from the agent's registry.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry

from nodetopo.httpserver import BoundedHandler, BoundedHTTPServer, Limits

log = logging.getLogger(__name__)


class Health:
    """The loop's heartbeat and readiness, read by the HTTP handler (thread-safe)."""

    def __init__(self, *, clock: Callable[[], float], interval_s: float, min_grace_s: float = 0.0) -> None:
        self._clock = clock
        self.grace_s = max(3 * interval_s, min_grace_s)
        self._deadline = clock() + self.grace_s
        self._ready = False
        self._lock = threading.Lock()

    def beat(self, expect_within: float = 0.0) -> None:
        """The loop is alive; it will beat again within ``expect_within`` seconds."""
        with self._lock:
            self._deadline = self._clock() + expect_within + self.grace_s

    def mark_ready(self) -> None:
        with self._lock:
            self._ready = True

    def alive(self) -> tuple[bool, str]:
        with self._lock:
            late = self._clock() - self._deadline
        if late > 0:
            return False, f"loop stuck: no progress for {late + self.grace_s:.0f}s beyond its schedule\n"
        return True, "ok\n"

    def ready(self) -> tuple[bool, str]:
        with self._lock:
            ready = self._ready
        return (True, "ok\n") if ready else (False, "first publish not done yet\n")


#: The health port's connection limits. Its real clients are the kubelet's probes and a scraper or
#: two (at most ~4 requests at once); a slot is held only by a request whose head has arrived (idle
#: and half-sent connections wait without one, nodetopo.httpserver), so 32 slots leave room for
#: clients that do not read a large /metrics answer while a probe still finds a slot at once.
HEALTH_LIMITS = Limits(max_connections=32, idle_timeout_s=60.0, request_timeout_s=10.0)


class HealthServer:
    """A bounded HTTP server for the three endpoints (``nodetopo.httpserver``), in a daemon thread."""

    def __init__(self, address: tuple[str, int], health: Health, registry: CollectorRegistry) -> None:
        handler = _make_handler(health, registry)
        self._server = BoundedHTTPServer(address, handler, limits=HEALTH_LIMITS)
        self._thread = threading.Thread(target=self._server.serve_forever, name="nodetopo-http", daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> HealthServer:
        self._thread.start()
        log.info("serving /healthz, /readyz and /metrics on port %d", self.port)
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _make_handler(health: Health, registry: CollectorRegistry) -> type[BoundedHandler]:
    class Handler(BoundedHandler):
        server_version = "nodetopo-agent"

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/healthz":
                self._answer(*health.alive())
            elif path == "/readyz":
                self._answer(*health.ready())
            elif path == "/metrics":
                body = generate_latest(registry)
                self._send(200, body, CONTENT_TYPE_LATEST)
            else:
                self._send(404, b"not found: try /healthz, /readyz or /metrics\n", "text/plain")

        def _answer(self, ok: bool, text: str) -> None:
            self._send(200 if ok else 503, text.encode(), "text/plain; charset=utf-8")

        def _send(self, code: int, body: bytes, content_type: str) -> None:
            self.send_body(code, body, content_type)

    return Handler
