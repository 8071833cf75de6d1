"""Idle and slow connections never starve real requests (``nodetopo.httpserver``), on loopback.

The attack of issue 23: any pod on the pod network opens connections and sends nothing (or a
request head one byte at a time). Each test reproduces it against the real server classes (the
agent's health server with its shipped limits, the extender's server) and asserts that a real
request is answered within its budget: the kubelet's probe timeout (readiness: 1 s by default;
liveness 5 s as shipped) and kube-scheduler's ``httpTimeout`` (5 s as shipped). Every socket has a
timeout, so each test is bounded even where the server misbehaves.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import nodetopology_of, synced_extender
from prometheus_client.registry import CollectorRegistry

from extender.test_http_hardening import self_signed
from nodetopo.agent.health import HEALTH_LIMITS, Health, HealthServer
from nodetopo.extender.server import ExtenderHTTPServer
from nodetopo.httpserver import BoundedHandler, BoundedHTTPServer, Limits

#: The budgets a real request must meet under attack (see the module doc).
PROBE_BUDGET_S = 1.0
HTTP_TIMEOUT_BUDGET_S = 2.5  # half of kube-scheduler's 5 s httpTimeout


class Attacker:
    """``count`` connections to ``port`` that send nothing (or ``trickle``: a request head, one byte
    every 0.2 s); a connection the server closes is opened again at once, as a real attacker would."""

    def __init__(self, port: int, count: int, *, trickle: bool = False) -> None:
        self.port = port
        self.count = count
        self.trickle = trickle
        self.stop = threading.Event()
        self.opened = 0
        self.closed_by_server = 0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _connect(self) -> socket.socket:
        self.opened += 1
        return socket.create_connection(("127.0.0.1", self.port), timeout=5)

    def _run(self) -> None:
        head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 4096
        conns: list[tuple[socket.socket, int]] = []
        with contextlib.suppress(OSError):
            conns = [(self._connect(), 0) for _ in range(self.count)]
        self.ready.set()
        while not self.stop.wait(0.2):
            for i, (conn, sent) in enumerate(conns):
                if self._gone(conn):
                    self.closed_by_server += 1
                    conn.close()
                    with contextlib.suppress(OSError):
                        conns[i] = (self._connect(), 0)
                elif self.trickle and sent < len(head):
                    with contextlib.suppress(OSError):
                        conn.send(head[sent : sent + 1])
                        conns[i] = (conn, sent + 1)
        for conn, _ in conns:
            conn.close()

    @staticmethod
    def _gone(conn: socket.socket) -> bool:
        try:
            return conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            return False
        except OSError:
            return True

    def __enter__(self) -> Attacker:
        self.ready = threading.Event()
        self._thread.start()
        assert self.ready.wait(30), "the attacker could not open its connections"
        time.sleep(0.3)  # let the server take them all in
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self._thread.join(10)


def timed(port: int, method: str, path: str, body: bytes | None = None) -> tuple[int, float, bytes]:
    """One request on a new connection (as a kubelet probe makes): status, seconds, body."""
    started = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        data = response.read()
    finally:
        conn.close()
    return response.status, time.monotonic() - started, data


@pytest.fixture
def health_port() -> Iterator[int]:
    health = Health(clock=time.monotonic, interval_s=60.0)
    server = HealthServer(("127.0.0.1", 0), health, CollectorRegistry()).start()
    try:
        yield server.port
    finally:
        server.stop()


@pytest.fixture
def extender_port() -> Iterator[int]:
    state = synced_extender([nodetopology_of("dgx-h100", "node-a")])
    server = ExtenderHTTPServer(("127.0.0.1", 0), state)
    server.start_background()
    try:
        yield server.port
    finally:
        server.shutdown()
        server.server_close()


def filter_body() -> bytes:
    pod = {
        "metadata": {"name": "p", "namespace": "default", "uid": "u1"},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]},
    }
    return json.dumps({"Pod": pod, "NodeNames": ["node-a"]}).encode()


def test_healthz_answers_within_a_probe_timeout_under_64_idle_connections(health_port: int) -> None:
    assert HEALTH_LIMITS.max_connections < 64  # the attack holds more connections than there are slots
    with Attacker(health_port, 64) as attacker:
        seconds = []
        for _ in range(5):
            status, took, _ = timed(health_port, "GET", "/healthz")
            assert status == 200
            seconds.append(took)
            time.sleep(0.2)
        assert attacker.opened >= 64
    assert max(seconds) < PROBE_BUDGET_S, seconds


def test_healthz_answers_within_a_probe_timeout_under_64_slow_request_heads(health_port: int) -> None:
    with Attacker(health_port, 64, trickle=True):
        seconds = [timed(health_port, "GET", "/healthz")[1] for _ in range(5)]
    assert max(seconds) < PROBE_BUDGET_S, seconds


def test_a_filter_answers_within_the_http_timeout_under_300_idle_connections(extender_port: int) -> None:
    with Attacker(extender_port, 300):
        results = []
        for _ in range(5):
            status, took, data = timed(extender_port, "POST", "/filter", filter_body())
            results.append((status, took))
            assert status == 200 and json.loads(data)["NodeNames"] == ["node-a"], data
            time.sleep(0.2)
    assert max(took for _, took in results) < HTTP_TIMEOUT_BUDGET_S, results


class _Echo(BoundedHandler):
    def do_GET(self) -> None:
        self.send_body(200, b"ok", "text/plain")


@contextlib.contextmanager
def small_server(
    request_timeout_s: float = 30.0, ssl_context: ssl.SSLContext | None = None
) -> Iterator[BoundedHTTPServer]:
    """Four slots and a waiting room of 32 connections."""
    limits = Limits(
        max_connections=4, max_waiting=32, request_timeout_s=request_timeout_s, idle_timeout_s=30.0
    )
    server = BoundedHTTPServer(("127.0.0.1", 0), _Echo, limits=limits, ssl_context=ssl_context)
    server.start_background()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def closed_by_server(conn: socket.socket, timeout: float) -> bool:
    """The server closed ``conn`` within ``timeout`` (EOF; or a reset: it closed with bytes unread)."""
    conn.settimeout(timeout)
    try:
        return conn.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def keep_alive_get(conn: http.client.HTTPConnection) -> int:
    conn.request("GET", "/")
    response = conn.getresponse()
    response.read()
    return response.status


def test_idle_keep_alive_connections_give_their_slot_up_and_stay_usable() -> None:
    """Twelve keep-alive clients, each idle after one answer, on four slots: a new client is answered
    at once, and every idle client's next request on its same connection is answered too."""
    with small_server() as server:
        clients = [http.client.HTTPConnection("127.0.0.1", server.port, timeout=5) for _ in range(12)]
        try:
            assert [keep_alive_get(c) for c in clients] == [200] * 12
            status, took, _ = timed(server.port, "GET", "/")
            assert status == 200 and took < PROBE_BUDGET_S
            sockets = [c.sock for c in clients]
            assert [keep_alive_get(c) for c in clients] == [200] * 12
            assert [c.sock for c in clients] == sockets  # the same connections: none was closed
        finally:
            for c in clients:
                c.close()


def test_over_tls_idle_connections_hold_no_slot_and_keep_alive_ones_stay_usable(tmp_path: Path) -> None:
    """TLS: a connection that never starts its handshake waits without a slot; twelve keep-alive
    clients on four slots, idle after an answer, are parked with their TLS state and answered again."""
    cert, key = self_signed(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    client_context = ssl.create_default_context(cafile=str(cert))
    with small_server(ssl_context=context) as server:
        silent = [socket.create_connection(("127.0.0.1", server.port), timeout=5) for _ in range(20)]
        clients = [
            http.client.HTTPSConnection("127.0.0.1", server.port, timeout=5, context=client_context)
            for _ in range(12)
        ]
        try:
            started = time.monotonic()
            assert [keep_alive_get(c) for c in clients] == [200] * 12
            sockets = [c.sock for c in clients]
            assert [keep_alive_get(c) for c in clients] == [200] * 12
            assert [c.sock for c in clients] == sockets
            assert time.monotonic() - started < 24 * PROBE_BUDGET_S
        finally:
            for conn in [*silent, *clients]:
                conn.close()


def test_a_request_head_that_never_completes_is_closed_at_the_deadline() -> None:
    with (
        small_server(request_timeout_s=1.0) as server,
        socket.create_connection(("127.0.0.1", server.port), timeout=5) as slow,
    ):
        slow.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
        started = time.monotonic()
        assert closed_by_server(slow, timeout=5)
        assert time.monotonic() - started < 3  # request_timeout_s=1, checked every 0.1 s


def test_the_waiting_room_is_bounded_and_drops_its_oldest_silent_connection() -> None:
    with small_server() as server:
        silent = [socket.create_connection(("127.0.0.1", server.port), timeout=5) for _ in range(100)]
        try:
            time.sleep(0.5)
            assert timed(server.port, "GET", "/")[0] == 200
            gone = [i for i, conn in enumerate(silent) if closed_by_server(conn, timeout=0.05)]
            assert len(gone) == 100 - 32 + 1, gone  # the room holds 32: the real client's entry took one
            assert gone == list(range(len(gone))), gone  # oldest first
        finally:
            for conn in silent:
                conn.close()


def test_limits_refuse_a_waiting_room_of_nothing() -> None:
    with pytest.raises(ValueError, match="max_waiting"):
        Limits(max_waiting=0)


def test_a_connection_closed_before_the_room_takes_it_costs_nothing() -> None:
    """A handler parks a connection whose socket was closed under it (a reaper, a reset): the room
    drops it instead of raising in the thread that must still give its slot back."""
    with small_server() as server:
        gone = socket.socket()
        gone.close()
        for _ in range(8):  # more than the four slots: none may leak
            server.room.add(gone, ("127.0.0.1", 0), time.monotonic() + 5)
        assert [timed(server.port, "GET", "/")[0] for _ in range(6)] == [200] * 6
