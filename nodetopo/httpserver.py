"""A small HTTP/1.1 server that survives hostile and careless clients (the extender, the agent's health port).

``http.server.ThreadingHTTPServer`` as shipped has no limits: a thread per connection without a cap,
no socket timeout (a client that sends half a request holds its thread forever), a listen backlog of
5 (a burst of concurrent connections sees resets), and every client that disconnects early prints a
``BrokenPipeError`` traceback on stderr. ``BoundedHTTPServer`` fixes each of these by construction:

* **a slot only for a request that has arrived**: the accept loop never waits. A new connection
  goes to a waiting room (one thread, edge-triggered epoll) and holds no thread and no slot until
  the head of its request (request line and headers) is in the socket buffer, which must happen
  within ``request_timeout_s`` of connecting or the connection is closed. A keep-alive connection
  goes back to the room between requests when others need its slot (after ``idle_timeout_s`` it
  is closed). The room holds at most ``Limits.max_waiting`` connections (and at most half the
  process's file descriptors); when it is full, the connection waiting longest is closed. So idle
  connections and request heads sent a byte at a time cost a file descriptor each, never a slot:
  a real request waits only for other requests that have arrived (issue 23: 64 idle connections
  held the health port's 16 slots and made ``/healthz`` take 6-15 s);
* **bounded concurrency**: at most ``Limits.max_connections`` requests are served at once (one
  thread each); requests whose head has arrived wait for a slot in arrival order, and while one
  waits, requests in progress for longer than a fifth of ``request_timeout_s`` are shut down,
  oldest first (real requests take milliseconds: those are clients trickling a body or not
  reading the answer). The kernel's listen queue is ``Limits.backlog`` (1024) deep;
* **timeouts**: once a request's head has arrived, the rest (body, handling, answer) must finish
  within ``request_timeout_s`` or a reaper thread shuts the socket down, however slowly the
  client trickles bytes in;
* **quiet disconnects**: a client that goes away (reset, broken pipe, timeout, TLS failure) is a
  debug log line, never a traceback; any other handler failure is one error line (traceback at
  debug level);
* **TLS** when given an ``ssl.SSLContext``: the room cannot read a head through TLS, so a TLS
  connection takes a slot when its first bytes arrive; the handshake runs in the connection's
  thread under the request deadline (and the eviction above), so a client that never finishes it
  cannot block the accept loop.

``BoundedHandler`` adds strict request-body reading (``read_body``): a ``Content-Length`` made of
digits and at most ``max_body`` bytes, no chunked bodies; anything else gets a 4xx answer and the
connection is closed, so the unread remainder of a refused body is never taken for the next request.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import errno
import json
import logging
import resource
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from socketserver import ThreadingMixIn
from typing import Any

log = logging.getLogger(__name__)

#: Errors that mean "the client went away or misbehaved at the transport level": logged at debug.
QUIET_ERRORS: tuple[type[BaseException], ...] = (ConnectionError, TimeoutError, ssl.SSLError, EOFError)

#: How much of a waiting connection's buffer is looked at for the end of its request head: a head
#: longer than this takes a slot when this much has arrived (the handler refuses it under its
#: deadline: 64 header lines, 64 KiB request line).
HEAD_PEEK_BYTES = 16384


@dataclasses.dataclass(frozen=True, slots=True)
class Limits:
    """Connection limits of a ``BoundedHTTPServer``."""

    max_connections: int = 64  #: requests served at once (one thread each)
    max_waiting: int = 1024  #: connections waiting for a request head without a slot (see the module doc)
    backlog: int = 1024  #: kernel listen queue (capped by net.core.somaxconn)
    idle_timeout_s: float = 120.0  #: an idle keep-alive connection is closed after this
    request_timeout_s: float = 10.0  #: a request's head must arrive within this, then the rest
    max_header_lines: int = 64  #: headers per request

    def __post_init__(self) -> None:
        for name in ("max_connections", "max_waiting", "backlog", "max_header_lines"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, not {getattr(self, name)!r}")
        for name in ("idle_timeout_s", "request_timeout_s"):
            value = getattr(self, name)
            if not (0 < value < 86400):  # also refuses nan and inf
                raise ValueError(f"{name} must be a number of seconds in (0, 86400), not {value!r}")


def head_complete(data: bytes) -> bool:
    """Whether ``data`` (the start of a request) holds the whole head: the empty line after the
    headers, in any of the line endings the stdlib parser accepts."""
    return b"\n\r\n" in data or b"\n\n" in data


class HttpError(Exception):
    """Answer the current request with ``status`` and a JSON ``{"Error": message}``; close if ``close``."""

    def __init__(self, status: int, message: str, *, close: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.close = close


class _Reaper:
    """Shuts down the sockets of requests that overran their deadline (one thread per server).

    While the server is saturated (a request waits for a slot), it also shuts down requests that
    have been in progress for longer than ``evict_after_s``, oldest first: real requests take
    milliseconds, so the oldest ones are the clients trickling bytes to hold slots.
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
        """Stop, and shut down every request still in progress (the server is closing)."""
        self._stop.set()
        with self._lock:
            conns = list(self._deadlines)
            self._deadlines.clear()
        for conn in conns:
            _shut(conn)

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
                _shut(conn)


def _shut(conn: socket.socket) -> None:
    """Shut a connection down under the thread reading it (which then sees EOF and closes it).
    The plain socket's shutdown: SSLSocket.shutdown would drop its TLS state under the reader."""
    with contextlib.suppress(OSError):
        socket.socket.shutdown(conn, socket.SHUT_RDWR)


@dataclasses.dataclass(slots=True)
class _Waiting:
    """A connection in the waiting room."""

    conn: socket.socket
    address: Any
    deadline: float  #: closed at this time (monotonic) unless its request head arrived
    tls: bool
    started: bool = False  #: some bytes of a request head have arrived


class _WaitingRoom:
    """Connections that hold no slot (see the module doc): one thread, one edge-triggered epoll.

    A connection is *ready* when its request head is in its socket buffer (a TLS connection: when
    any bytes arrived). Ready connections are handed to ``dispatch`` in arrival order as slots
    free up; the others are closed at their deadline, on EOF, or when the room is full (the one
    that has waited longest).
    """

    _EVENTS = select.EPOLLIN | select.EPOLLRDHUP | select.EPOLLET

    def __init__(
        self,
        capacity: int,
        request_timeout_s: float,
        take_slot: Callable[[], bool],
        dispatch: Callable[[socket.socket, Any], None],
        unsaturated: Callable[[], None],
    ) -> None:
        self._capacity = capacity
        self._request_timeout_s = request_timeout_s
        self._take_slot = take_slot
        self._dispatch = dispatch
        self._unsaturated = unsaturated
        self._lock = threading.Lock()
        self._waiting: dict[int, _Waiting] = {}  #: by file descriptor; oldest first
        self._ready: collections.deque[_Waiting] = collections.deque()
        self._epoll = select.epoll()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._epoll.register(self._wake_r.fileno(), select.EPOLLIN)
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="http-waiting-room", daemon=True)
        self._thread.start()

    def add(self, conn: socket.socket, address: Any, deadline: float) -> None:
        """Take ``conn`` in until its request head arrives (or ``deadline``)."""
        entry = _Waiting(conn=conn, address=address, deadline=deadline, tls=isinstance(conn, ssl.SSLSocket))
        dropped: _Waiting | None = None
        with self._lock:
            if self._closed:
                dropped = entry
            else:
                if len(self._waiting) + len(self._ready) >= self._capacity:
                    if self._waiting:
                        oldest = next(iter(self._waiting))
                        dropped = self._forget(oldest)
                    else:
                        dropped = self._ready.popleft()
                try:  # registered last: an edge for bytes already there is reported at once
                    fd = conn.fileno()
                    self._epoll.register(fd, self._EVENTS)
                    self._waiting[fd] = entry
                except (OSError, ValueError):  # closed meanwhile (fileno -1), or not pollable
                    closed, dropped = dropped, entry
                    if closed is not None:
                        _close(closed.conn)
        if dropped is not None:
            log.debug("waiting room full or closed: closing the connection of %s", _peer(dropped.address))
            _close(dropped.conn)

    def wake(self) -> None:
        """A slot was freed while requests wait for one: dispatch them now."""
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def close(self) -> None:
        with self._lock:
            self._closed = True
            entries = [*self._waiting.values(), *self._ready]
            self._waiting.clear()
            self._ready.clear()
        self.wake()
        self._thread.join(5)
        for entry in entries:
            _close(entry.conn)
        with contextlib.suppress(OSError):
            self._epoll.close()
        self._wake_r.close()
        self._wake_w.close()

    def _forget(self, fd: int) -> _Waiting | None:
        entry = self._waiting.pop(fd, None)
        if entry is not None:
            with contextlib.suppress(OSError, ValueError):
                self._epoll.unregister(fd)
        return entry

    def _run(self) -> None:
        next_sweep = 0.0
        while True:
            try:
                events = self._epoll.poll(0.1)
            except OSError:
                return  # closed
            with self._lock:
                if self._closed:
                    return
            now = time.monotonic()
            for fd, mask in events:
                if fd == self._wake_r.fileno():
                    with contextlib.suppress(OSError):
                        while self._wake_r.recv(4096):
                            pass
                    continue
                self._look(fd, mask, now)
            if now >= next_sweep:
                self._sweep(now)
                next_sweep = now + 0.1
            self._hand_out()

    def _look(self, fd: int, mask: int, now: float) -> None:
        with self._lock:
            entry = self._waiting.get(fd)
        if entry is None:
            return
        try:
            data: bytes | None = socket.socket.recv(
                entry.conn, HEAD_PEEK_BYTES, socket.MSG_PEEK | socket.MSG_DONTWAIT
            )
        except (BlockingIOError, InterruptedError):
            data = None
        except OSError:
            data = b""
        if data is None:
            verdict = "close" if mask & (select.EPOLLHUP | select.EPOLLERR) else "wait"
        elif not data:
            verdict = "close"  # the client went away
        elif entry.tls or len(data) >= HEAD_PEEK_BYTES or head_complete(data):
            verdict = "ready"
        elif mask & (select.EPOLLRDHUP | select.EPOLLHUP):
            verdict = "close"  # the client stopped sending mid-head
        else:
            verdict = "wait"
            if not entry.started:  # a request has begun: its head is due within the deadline
                entry.started = True
                entry.deadline = min(entry.deadline, now + self._request_timeout_s)
        if verdict == "wait":
            return
        with self._lock:
            if self._waiting.get(fd) is not entry:
                return
            self._forget(fd)
            if verdict == "ready":
                self._ready.append(entry)
        if verdict == "close":
            _close(entry.conn)

    def _sweep(self, now: float) -> None:
        with self._lock:
            late = [fd for fd, entry in self._waiting.items() if entry.deadline <= now]
            expired = [e for e in map(self._forget, late) if e is not None]
            while self._ready and self._ready[0].deadline + self._request_timeout_s <= now:
                expired.append(self._ready.popleft())  # its client has given up long ago
        for entry in expired:
            log.debug("closing the idle or incomplete connection of %s", _peer(entry.address))
            _close(entry.conn)

    def _hand_out(self) -> None:
        while True:
            with self._lock:
                if not self._ready:
                    self._unsaturated()
                    return
                if not self._take_slot():  # the server is saturated from here on
                    return
                entry = self._ready.popleft()
            try:
                self._dispatch(entry.conn, entry.address)
            except Exception:  # a thread that cannot start: the connection is closed, the slot freed
                log.exception("could not serve a connection")
                _close(entry.conn)


def _close(conn: socket.socket) -> None:
    with contextlib.suppress(OSError):
        conn.close()


def _waiting_capacity(limits: Limits) -> int:
    """``limits.max_waiting``, but at most half the file descriptors this process may open."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return limits.max_waiting
    return max(1, min(limits.max_waiting, soft // 2))


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
        self.reaper = _Reaper(lambda: self.saturated, self.limits.request_timeout_s / 5)
        self.room = _WaitingRoom(
            _waiting_capacity(self.limits),
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
        if isinstance(error, QUIET_ERRORS) or (isinstance(error, OSError) and error.errno in _QUIET_ERRNOS):
            log.debug("client %s: %s: %s", _peer(client_address), type(error).__name__, error)
            return
        log.error("client %s: request failed: %s: %s", _peer(client_address), type(error).__name__, error)
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
