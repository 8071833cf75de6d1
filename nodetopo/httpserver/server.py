"""``BoundedHTTPServer`` (the accept loop, the slots, TLS) and ``BoundedHandler`` (keep-alive,
deadlines, JSON errors, strict bodies); see the package doc."""

from __future__ import annotations

import contextlib
import json
import logging
import select
import socket
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from socketserver import ThreadingMixIn
from typing import Any

from nodetopo.httpserver.limits import (
    HEAD_PEEK_BYTES,
    QUIET_ERRNOS,
    QUIET_ERRORS,
    HttpError,
    Limits,
    head_complete,
    peer_name,
)
from nodetopo.httpserver.waiting import Reaper, WaitingRoom, waiting_capacity

log = logging.getLogger("nodetopo.httpserver")


class BoundedHTTPServer(ThreadingHTTPServer):
    """``ThreadingHTTPServer`` with ``Limits``, quiet disconnects and optional TLS (see the module doc)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BoundedHandler],
        *,
        limits: Limits | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.limits = limits or Limits()
        self.request_queue_size = self.limits.backlog
        self.ssl_context = ssl_context
        self._slot_lock = threading.Lock()
        self._free_slots = self.limits.max_connections
        self.saturated = False  #: a request whose head has arrived waits for a slot
        self._closing = threading.Event()
        self._parked: dict[socket.socket, float] = {}  #: connections a handler sent back to the room
        # readable while saturated or closing: keep-alive threads between requests wait on it
        self.pressure, self._pressure_w = socket.socketpair()
        self.pressure.setblocking(False)
        self._pressure_w.setblocking(False)
        self.reaper = Reaper(lambda: self.saturated, self.limits.request_timeout_s / 5)
        self.room = WaitingRoom(
            waiting_capacity(self.limits),
            self.limits.request_timeout_s,
            self._take_slot,
            self._start_thread,
            self._unsaturated,
        )
        try:
            super().__init__(address, handler)
        except BaseException:
            self._close_mechanics()
            raise
        if ssl_context is not None:
            self.socket = ssl_context.wrap_socket(
                self.socket, server_side=True, do_handshake_on_connect=False
            )

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    @property
    def closing(self) -> bool:
        return self._closing.is_set()

    def get_request(self) -> tuple[socket.socket, Any]:
        conn, addr = super().get_request()
        with contextlib.suppress(OSError):
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn, addr

    def process_request(self, request: Any, client_address: Any) -> None:
        """A new connection waits for its request head in the room; the accept loop goes on at once."""
        self.room.add(request, client_address, time.monotonic() + self.limits.request_timeout_s)

    # ---- slots (the room's thread takes them, a request's thread gives its one back) ------------

    def _take_slot(self) -> bool:
        """A free slot, or False and the server is saturated (under one lock with ``_give_slot``, so
        a slot given back at that moment wakes the room)."""
        with self._slot_lock:
            if self._free_slots > 0:
                self._free_slots -= 1
                return True
            became = not self.saturated
            self.saturated = True
        if became:
            with contextlib.suppress(OSError):
                self._pressure_w.send(b"x")
        return False

    def _give_slot(self) -> None:
        with self._slot_lock:
            self._free_slots += 1
            waiting = self.saturated
        if waiting:
            self.room.wake()

    def _unsaturated(self) -> None:
        """No request waits for a slot any more (the room's thread, under the room's lock)."""
        with self._slot_lock:
            if not self.saturated:
                return
            self.saturated = False
        if not self._closing.is_set():
            with contextlib.suppress(OSError):
                while self.pressure.recv(4096):
                    pass

    def _start_thread(self, request: socket.socket, client_address: Any) -> None:
        try:
            ThreadingMixIn.process_request(self, request, client_address)
        except BaseException:
            self._give_slot()
            raise

    def park(self, conn: socket.socket, until: float) -> None:
        """Called by the handler of ``conn`` as it ends: send the connection back to the waiting room
        (idle between two requests) instead of closing it; closed at ``until`` unless a request comes."""
        self._parked[conn] = until

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:  # noqa: BLE001 - as ThreadingMixIn: handle_error logs it (quietly for a gone client)
            self.handle_error(request, client_address)
        finally:
            self.reaper.disarm(request)
            park_until = self._parked.pop(request, None)
            if park_until is not None and not self._closing.is_set():
                self.room.add(request, client_address, park_until)  # idle: back to the room
            else:
                self.shutdown_request(request)
            self._give_slot()

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        error = sys.exc_info()[1]
        if isinstance(error, QUIET_ERRORS) or (isinstance(error, OSError) and error.errno in QUIET_ERRNOS):
            log.debug("client %s: %s: %s", peer_name(client_address), type(error).__name__, error)
            return
        log.error("client %s: request failed: %s: %s", peer_name(client_address), type(error).__name__, error)
        log.debug("request failure", exc_info=True)

    def shutdown(self) -> None:
        self._begin_closing()
        super().shutdown()

    def server_close(self) -> None:
        self._begin_closing()
        self._close_mechanics()
        super().server_close()

    def _begin_closing(self) -> None:
        self._closing.set()
        with contextlib.suppress(OSError):
            self._pressure_w.send(b"x")  # keep-alive threads between requests close their connections

    def _close_mechanics(self) -> None:
        self.room.close()
        self.reaper.stop()

    def start_background(self) -> threading.Thread:
        """Serve in a daemon thread (tests, the agent); ``shutdown()`` stops it."""
        thread = threading.Thread(target=self.serve_forever, name="http-server", daemon=True)
        thread.start()
        return thread


class BoundedHandler(BaseHTTPRequestHandler):
    """Request handler for ``BoundedHTTPServer``: keep-alive, deadlines, JSON errors, strict bodies."""

    protocol_version = "HTTP/1.1"
    server: BoundedHTTPServer
    error_content_type = "application/json"
    body_read = False  #: the current request's body was consumed (else the connection is closed)

    def setup(self) -> None:
        limits = self.server.limits
        super().setup()
        # The request head is here (the waiting room saw it); the rest must follow within the deadline.
        self.server.reaper.arm(self.connection, limits.request_timeout_s)
        self.connection.settimeout(limits.idle_timeout_s)
        if isinstance(self.connection, ssl.SSLSocket) and self.connection.version() is None:
            self.connection.settimeout(limits.request_timeout_s)
            self.connection.do_handshake()
            self.connection.settimeout(limits.idle_timeout_s)

    def handle(self) -> None:
        self.close_connection = True
        self.handle_one_request()
        while not self.close_connection:
            if not self._await_request():
                return
            self.server.reaper.arm(self.connection, self.server.limits.request_timeout_s)
            self.handle_one_request()

    def _await_request(self) -> bool:
        """Between two requests of a keep-alive connection: wait, holding the slot, for the next
        request's head while nobody else needs the slot.

        True when that head (or the start of a TLS record) has arrived. False to end this thread:
        the connection is closed after ``idle_timeout_s`` or when the server closes; it goes back
        to the waiting room (``BoundedHTTPServer.park``) as soon as another request waits for a slot, or when
        a next request has begun but its head is not complete yet (a head trickled in holds no slot).
        """
        conn = self.connection
        deadline = time.monotonic() + self.server.limits.idle_timeout_s
        poller = select.poll()  # not select.select: descriptors above 1023 are normal here
        poller.register(conn.fileno(), select.POLLIN)
        poller.register(self.server.pressure.fileno(), select.POLLIN)
        while True:
            if self._buffered(conn):
                return True
            left = deadline - time.monotonic()
            if left <= 0 or self.server.closing:
                return False
            if self.server.saturated:
                self.server.park(conn, deadline)
                return False
            events = dict(poller.poll(min(left, 1.0) * 1000))
            if conn.fileno() in events:
                if isinstance(conn, ssl.SSLSocket) or self._head_here(conn):
                    return True
                self.server.park(conn, deadline)
                return False

    @staticmethod
    def _head_here(conn: socket.socket) -> bool:
        """Whether a plain connection's buffer holds a whole request head (or EOF, or a head too
        long to wait for): then this thread serves it, else the waiting room waits for the rest."""
        try:
            data = socket.socket.recv(conn, HEAD_PEEK_BYTES, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return True  # the read in handle_one_request meets the error
        return not data or len(data) >= HEAD_PEEK_BYTES or head_complete(data)

    def _buffered(self, conn: socket.socket) -> bool:
        """Whether bytes of a next request already wait in the reader's buffer (or TLS's)."""
        if isinstance(conn, ssl.SSLSocket) and conn.pending():
            return True
        conn.settimeout(0.0)
        try:
            return bool(self.rfile.peek(1))  # type: ignore[attr-defined]
        except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return False
        finally:
            conn.settimeout(self.server.limits.idle_timeout_s)

    def handle_one_request(self) -> None:
        """One request: wait for its first line up to the idle timeout, then run it under the deadline."""
        try:
            self.raw_requestline = self.rfile.readline(65537)
        except TimeoutError:
            self.close_connection = True
            return
        if not self.raw_requestline:
            self.close_connection = True
            return
        try:
            if len(self.raw_requestline) > 65536:
                self.requestline = ""
                self.request_version = self.default_request_version
                self.command = None  # type: ignore[assignment]
                self.send_error(414)
                return
            if not self.parse_request():
                return
            if len(self.headers) > self.server.limits.max_header_lines:
                self.send_error(431, "too many header lines")
                return
            method = getattr(self, "do_" + self.command, None)
            if method is None:
                self.send_error(501, f"unsupported method {self.command!r}")
                return
            self.body_read = False
            try:
                method()
            except HttpError as e:
                self.send_json(e.status, {"Error": str(e)}, close=e.close)
            declared = self.headers.get("Transfer-Encoding") or self.headers.get("Content-Length") or "0"
            if not self.body_read and declared.strip() != "0":
                # A body nobody read (a GET with one, an unknown path): close rather than take it for
                # the next request.
                self.close_connection = True
            self.wfile.flush()
        finally:
            self.server.reaper.disarm(self.connection)

    # ---- answers ---------------------------------------------------------------------------

    def send_json(self, status: int, payload: Any, *, close: bool = False) -> None:
        self.send_body(status, json.dumps(payload, separators=(",", ":")).encode(), "application/json", close)

    def send_body(self, status: int, body: bytes, content_type: str, close: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Errors found by the stdlib parser (bad request line, headers) as JSON, then close."""
        try:
            short, _long = self.responses[code]
        except KeyError:
            short = "error"
        self.log_error("code %d, message %s", code, message or short)
        self.send_json(code, {"Error": message or short}, close=True)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    # ---- bodies ----------------------------------------------------------------------------

    def content_length(self, max_body: int) -> int:
        """The request's ``Content-Length``, or an ``HttpError`` (400, 411, 413) closing the connection."""
        if self.headers.get("Transfer-Encoding"):
            raise HttpError(
                411, "chunked or encoded request bodies are not accepted; send Content-Length", close=True
            )
        values = self.headers.get_all("Content-Length") or []
        if not values:
            raise HttpError(411, "Content-Length required", close=True)
        text = values[0].strip()
        if len(set(v.strip() for v in values)) != 1 or not text.isdigit() or not text.isascii():
            raise HttpError(400, f"bad Content-Length {values[0][:40]!r}", close=True)
        length = int(text[:20])
        if len(text) > 19 or length > max_body:
            raise HttpError(
                413, f"request body of {text[:20]} bytes is over the limit of {max_body}", close=True
            )
        return length

    def read_exactly(self, length: int, chunk: int = 65536) -> bytearray:
        """``length`` body bytes, read in chunks: memory grows with what arrives, not what is claimed."""
        self.body_read = True
        buffer = bytearray()
        while len(buffer) < length:
            data = self.rfile.read(min(chunk, length - len(buffer)))
            if not data:
                raise ConnectionError(
                    f"client closed the connection after {len(buffer)} of {length} body bytes"
                )
            buffer += data
        return buffer
