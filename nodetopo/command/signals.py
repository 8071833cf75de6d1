"""SIGTERM and SIGINT for a long-running process, without doing anything unsafe in the handler.

A Python signal handler runs in the main thread *between two bytecodes of whatever it was doing*.
If the handler takes a lock that the interrupted code holds (``threading.Event.set`` takes the
event's condition lock; ``logging`` takes its handler's lock), the main thread waits for itself
forever: 0.1.0's agent did exactly that with ``--backoff-max-seconds nan`` and a SIGTERM. So the
handler here only records the signal number; the interpreter's wakeup file descriptor (written by
the C-level handler) wakes a watcher thread, and *that* thread calls ``on_stop`` — from ordinary
thread context, where taking locks and logging are safe.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any


class StopSignals:
    """``install()`` routes SIGTERM/SIGINT to ``on_stop(signal name)`` via a watcher thread.

    ``close()`` restores what was there before."""

    def __init__(
        self, on_stop: Callable[[str], None], signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT)
    ):
        self.on_stop = on_stop
        self.signals = signals
        self.received: int | None = None  #: the last stop signal (set by the handler, nothing else)
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._write_fd, False)
        self._previous: dict[int, Any] = {}
        self._previous_wakeup = -1
        self._thread = threading.Thread(target=self._watch, name="stop-signals", daemon=True)

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        self.received = signum  # an attribute store: no lock, no I/O, no allocation worth the name

    def install(self) -> StopSignals:
        """Install the handlers (main thread only) and start the watcher."""
        self._previous_wakeup = signal.set_wakeup_fd(self._write_fd, warn_on_full_buffer=False)
        for signum in self.signals:
            self._previous[signum] = signal.signal(signum, self._handler)
        self._thread.start()
        return self

    def _watch(self) -> None:
        while True:
            try:
                data = os.read(self._read_fd, 64)
            except OSError:
                return
            if not data:
                return
            for signum in data:
                if signum in self.signals:
                    self.on_stop(signal.Signals(signum).name)

    def close(self) -> None:
        """Restore the previous handlers and wakeup fd; end the watcher."""
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()
        with contextlib.suppress(ValueError):
            signal.set_wakeup_fd(self._previous_wakeup)
        os.close(self._write_fd)  # the watcher reads EOF and ends
        if self._thread.is_alive():
            self._thread.join(5)
        os.close(self._read_fd)


def run_until_stopped(
    run: Callable[[], None], log: logging.Logger, what: str, *events: threading.Event
) -> None:
    """``run()`` (a controller's loop, which returns once its stop event is set) with SIGTERM and
    SIGINT logged (``SIGTERM: shutting down``) and setting ``events`` (its stop event and whatever
    wakes it), from the watcher thread; the previous handlers are back when it returns."""

    def on_stop(name: str) -> None:
        log.info("%s: shutting down", name)
        for event in events:
            event.set()

    signals = StopSignals(on_stop).install()
    log.info("%s started", what)
    try:
        run()
    finally:
        signals.close()
