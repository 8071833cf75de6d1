"""Where a connection waits without a thread: the waiting room (epoll, until its request head has
arrived) and the reaper that enforces the request deadline."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import resource
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any

from nodetopo.httpserver.limits import HEAD_PEEK_BYTES, Limits, head_complete, peer_name

log = logging.getLogger("nodetopo.httpserver")


class Reaper:
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


class WaitingRoom:
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
            log.debug("waiting room full or closed: closing the connection of %s", peer_name(dropped.address))
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
            log.debug("closing the idle or incomplete connection of %s", peer_name(entry.address))
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


def waiting_capacity(limits: Limits) -> int:
    """``limits.max_waiting``, but at most half the file descriptors this process may open."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return limits.max_waiting
    return max(1, min(limits.max_waiting, soft // 2))
