"""Client-side pacing of API requests: a token bucket (the transport's rate limit,
``KubeConnection.bucket``), exponential backoff with jitter (the reflector's relists, the
agent's retries), and the controllers' loop that backs off through API failures
(``retry_until_stopped``: the summary and export controllers).

Both take their clock, sleep and random source as parameters, so tests run them on a fake clock.
"""

from __future__ import annotations

import logging
import random as _random
import threading
from collections.abc import Callable


class TokenBucket:
    """At most ``burst`` requests at once, refilled at ``qps`` per second (client-go's default shape)."""

    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        clock: Callable[[], float],
        sleep: Callable[[float], None],
    ) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError("qps must be > 0 and burst >= 1")
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(burst)
        self._updated = clock()
        self._lock = threading.Lock()
        self.waited_seconds = 0.0  #: total time spent waiting for a token

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._updated) * self.qps)
        self._updated = now

    def acquire(self) -> float:
        """Take one token, sleeping until one is available; return the seconds waited."""
        with self._lock:
            self._refill()
            self._tokens -= 1.0
            wait = 0.0 if self._tokens >= 0 else -self._tokens / self.qps
        if wait > 0:
            self._sleep(wait)
            self.waited_seconds += wait
        return wait


class Backoff:
    """Exponential backoff with "equal jitter": the n-th delay is uniform in [d/2, d], d = min(max,
    initial * 2**n). ``Retry-After`` from the server is a floor. ``reset()`` after a success."""

    def __init__(self, initial: float, maximum: float, *, random: Callable[[], float]) -> None:
        self.initial = initial
        self.maximum = maximum
        self._random = random
        self.failures = 0

    def next_delay(self, retry_after: float | None = None) -> float:
        ceiling = min(self.maximum, self.initial * (2.0 ** min(self.failures, 32)))
        self.failures += 1
        delay = ceiling / 2 + self._random() * ceiling / 2
        if retry_after is not None and retry_after > delay:
            delay = retry_after
        return delay

    def reset(self) -> None:
        self.failures = 0


def retry_until_stopped(
    stop: threading.Event,
    step: Callable[[], object],
    *,
    what: str,
    log: logging.Logger,
    then: Callable[[], None],
    after_failure: Callable[[], None] = lambda: None,
) -> None:
    """Call ``step`` until ``stop`` is set, ``then`` after each success (the controller's wait for
    the next change). A failure is logged on ``log`` (``what`` failed) and retried after a
    ``Backoff`` of 1 s doubling to 30 s, jittered, reset by the next success; ``after_failure``
    runs once that wait is over."""
    backoff = Backoff(1.0, 30.0, random=_random.random)
    while not stop.is_set():
        try:
            step()
            backoff.reset()
        except Exception as e:  # noqa: BLE001 - keep the controller alive through API failures
            delay = backoff.next_delay()
            log.warning("%s failed (%s: %s); retry in %.1fs", what, type(e).__name__, e, delay)
            stop.wait(delay)
            after_failure()
            continue
        then()
