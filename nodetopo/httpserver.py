"""A small HTTP/1.1 server that survives hostile and careless clients (the extender, the agent's health port).

``http.server.ThreadingHTTPServer`` as shipped has no limits: a thread per connection without a cap,
no socket timeout (a client that sends half a request holds its thread forever), a listen backlog of
5 (a burst of concurrent connections sees resets), and every client that disconnects early prints a
``BrokenPipeError`` traceback on stderr. ``BoundedHTTPServer`` fixes each of these by construction:

* **bounded concurrency**: at most ``Limits.max_connections`` connections are served at once; the
  accept loop stops accepting until one ends, and further clients wait in the kernel's listen queue
  (``Limits.backlog``, 1024: bursts of hundreds of concurrent requests queue instead of being reset);
* **timeouts**: an idle keep-alive connection is closed after ``idle_timeout_s``; once a request
  line has arrived, the whole request (headers, body, handling, answer) must finish within
  ``request_timeout_s`` or a reaper thread shuts the socket down, however slowly the client trickles
  bytes in;
* **quiet disconnects**: a client that goes away (reset, broken pipe, timeout, TLS failure) is a
  debug log line, never a traceback; any other handler failure is one error line (traceback at
  debug level);
* **TLS** when given an ``ssl.SSLContext``: the handshake runs in the connection's thread under the
  request deadline, so a client that never finishes it cannot block the accept loop.

``BoundedHandler`` adds strict request-body reading (``read_body``): a ``Content-Length`` made of
digits and at most ``max_body`` bytes, no chunked bodies; anything else gets a 4xx answer and the
connection is closed, so the unread remainder of a refused body is never taken for the next request.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import logging
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger(__name__)

#: Errors that mean "the client went away or misbehaved at the transport level": logged at debug.
QUIET_ERRORS: tuple[type[BaseException], ...] = (ConnectionError, TimeoutError, ssl.SSLError, EOFError)


@dataclasses.dataclass(frozen=True, slots=True)
class Limits:
    """Connection limits of a ``BoundedHTTPServer``."""

    max_connections: int = 64  #: connections served at once (one thread each)
    backlog: int = 1024  #: kernel listen queue (capped by net.core.somaxconn)
    idle_timeout_s: float = 120.0  #: an idle keep-alive connection is closed after this
    request_timeout_s: float = 10.0  #: a request, from its first line to the end of the answer
    max_header_lines: int = 64  #: headers per request

    def __post_init__(self) -> None:
        if self.max_connections < 1 or self.backlog < 1 or self.max_header_lines < 1:
            raise ValueError("max_connections, backlog and max_header_lines must be >= 1")
        for name in ("idle_timeout_s", "request_timeout_s"):
            value = getattr(self, name)
            if not (0 < value < 86400):  # also refuses nan and inf
                raise ValueError(f"{name} must be a number of seconds in (0, 86400), not {value!r}")


class HttpError(Exception):
    """Answer the current request with ``status`` and a JSON ``{"Error": message}``; close if ``close``."""

    def __init__(self, status: int, message: str, *, close: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.close = close


class _Reaper:
    """Shuts down the sockets of requests that overran their deadline (one thread per server).

    While the server is saturated (a client waits for a connection slot), it also shuts down
    requests that have been in progress for longer than ``evict_after_s``, oldest first: real
    requests take milliseconds, so the oldest ones are the clients trickling bytes to hold slots.
    """

    def __init__(self, saturated: Callable[[], bool], evict_after_s: float) -> None:
        self._lock = threading.Lock()
        self._deadlines: dict[socket.socket, tuple[float, float]] = {}  #: conn → (started, deadline)
        self._saturated = saturated
        self._evict_after_s = evict_after_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="http-reaper", daemon=True)
        self._thread.start()

    def arm(self, conn: socket.socket, seconds: float) -> None:
        now = time.monotonic()
        with self._lock:
            self._deadlines[conn] = (now, now + seconds)

    def disarm(self, conn: socket.socket) -> None:
        with self._lock:
            self._deadlines.pop(conn, None)

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            now = time.monotonic()
            saturated = self._saturated()
            with self._lock:
                overdue = [
                    conn
                    for conn, (started, deadline) in self._deadlines.items()
                    if deadline <= now or (saturated and now - started > self._evict_after_s)
                ]
                for conn in overdue:
                    del self._deadlines[conn]
            for conn in overdue:
                log.debug("request too slow (deadline passed, or others wait); closing the connection")
                # The plain socket's shutdown: SSLSocket.shutdown would drop its TLS state under the reader.
                with contextlib.suppress(OSError):
                    socket.socket.shutdown(conn, socket.SHUT_RDWR)


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
        self._slots = threading.BoundedSemaphore(self.limits.max_connections)
        self.saturated = False  #: a client waits for a connection slot
        self._closing = threading.Event()
        self.reaper = _Reaper(lambda: self.saturated, self.limits.request_timeout_s / 5)
        super().__init__(address, handler)
        if ssl_context is not None:
            self.socket = ssl_context.wrap_socket(
                self.socket, server_side=True, do_handshake_on_connect=False
            )

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def get_request(self) -> tuple[socket.socket, Any]:
        conn, addr = super().get_request()
        with contextlib.suppress(OSError):
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn, addr

    def process_request(self, request: Any, client_address: Any) -> None:
        """Wait for a free connection slot (the accept loop pauses meanwhile), then serve in a thread."""
        if not self._slots.acquire(blocking=False):
            self.saturated = True  # idle keep-alive connections give their slot up (_await_request)
            try:
                while not self._slots.acquire(timeout=0.2):
                    if self._closing.is_set():
                        self.shutdown_request(request)
                        return
            finally:
                self.saturated = False
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.reaper.disarm(request)
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        error = sys.exc_info()[1]
        if isinstance(error, QUIET_ERRORS) or (isinstance(error, OSError) and error.errno in _QUIET_ERRNOS):
            log.debug("client %s: %s: %s", _peer(client_address), type(error).__name__, error)
            return
        log.error("client %s: request failed: %s: %s", _peer(client_address), type(error).__name__, error)
        log.debug("request failure", exc_info=True)

    def shutdown(self) -> None:
        self._closing.set()
        super().shutdown()

    def server_close(self) -> None:
        self._closing.set()
        self.reaper.stop()
        super().server_close()

    def start_background(self) -> threading.Thread:
        """Serve in a daemon thread (tests, the agent); ``shutdown()`` stops it."""
        thread = threading.Thread(target=self.serve_forever, name="http-server", daemon=True)
        thread.start()
        return thread


_QUIET_ERRNOS = {errno.EPIPE, errno.ECONNRESET, errno.ECONNABORTED, errno.ENOTCONN, errno.ETIMEDOUT}


def _peer(address: Any) -> str:
    if isinstance(address, tuple) and len(address) >= 2:
        return f"{address[0]}:{address[1]}"
    return str(address)


class BoundedHandler(BaseHTTPRequestHandler):
    """Request handler for ``BoundedHTTPServer``: keep-alive, deadlines, JSON errors, strict bodies."""

    protocol_version = "HTTP/1.1"
    server: BoundedHTTPServer
    error_content_type = "application/json"
    body_read = False  #: the current request's body was consumed (else the connection is closed)

    def setup(self) -> None:
        limits = self.server.limits
        super().setup()
        # A new connection must deliver its first request (and TLS handshake) within the deadline.
        self.server.reaper.arm(self.connection, limits.request_timeout_s)
        self.connection.settimeout(limits.idle_timeout_s)
        if isinstance(self.connection, ssl.SSLSocket):
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
        """Between two requests of a keep-alive connection: wait for the next one to start.

        False (close the connection) after ``idle_timeout_s``, or at once when other clients are
        waiting for a connection slot: an idle keep-alive connection must not keep a busy client
        out (kube-scheduler reopens a closed idle connection before its next request).
        """
        conn = self.connection
        deadline = time.monotonic() + self.server.limits.idle_timeout_s
        while True:
            if self._buffered(conn):
                return True
            left = deadline - time.monotonic()
            if left <= 0 or self.server.saturated:
                return False
            readable, _, _ = select.select([conn], [], [], min(left, 0.25))
            if readable:
                return True

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
