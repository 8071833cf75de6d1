"""Client-side rate limit (token bucket) and backoff, on a fake clock."""

from __future__ import annotations

import logging
import threading

import pytest

from agent.support import FakeClock
from nodetopo.kube.pacing import Backoff, TokenBucket, retry_until_stopped


def test_token_bucket_allows_a_burst_then_qps() -> None:
    clock = FakeClock()
    bucket = TokenBucket(1.0, 5, clock=clock, sleep=clock.sleep)
    waits = [bucket.acquire() for _ in range(8)]
    assert waits[:5] == [0.0] * 5
    assert waits[5:] == pytest.approx([1.0, 1.0, 1.0])
    clock.now += 100  # idle: refills to the burst, not beyond
    assert [bucket.acquire() for _ in range(6)] == pytest.approx([0, 0, 0, 0, 0, 1.0])


def test_twenty_requests_at_qps_one_take_fifteen_seconds() -> None:
    clock = FakeClock()
    bucket = TokenBucket(1.0, 5, clock=clock, sleep=clock.sleep)
    start = clock.now
    for _ in range(20):
        bucket.acquire()
    assert clock.now - start == pytest.approx(15.0)


def test_backoff_grows_caps_and_honours_retry_after() -> None:
    backoff = Backoff(1.0, 10.0, random=lambda: 1.0)
    assert [backoff.next_delay() for _ in range(6)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert backoff.next_delay(retry_after=42.0) == 42.0
    backoff.reset()
    low = Backoff(1.0, 10.0, random=lambda: 0.0)
    assert low.next_delay() == 0.5  # equal jitter: never less than half the ceiling
    assert backoff.next_delay() == 1.0


class _RecordingStop(threading.Event):
    """A stop event whose waits return at once and are recorded."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(float(timeout or 0.0))
        return self.is_set()


def test_retry_until_stopped_backs_off_through_failures_and_resets(caplog: pytest.LogCaptureFixture) -> None:
    stop = _RecordingStop()
    outcomes = iter([ValueError("refused"), ValueError("refused"), None, ValueError("again"), None])
    calls: list[str] = []

    def step() -> None:
        calls.append("step")
        outcome = next(outcomes)
        if outcome is not None:
            raise outcome

    def then() -> None:
        calls.append("then")
        if calls.count("then") == 2:
            stop.set()

    log = logging.getLogger("test.retry")
    with caplog.at_level(logging.WARNING, logger="test.retry"):
        retry_until_stopped(
            stop, step, what="writing", log=log, then=then, after_failure=lambda: calls.append("after")
        )
    assert calls == ["step", "after", "step", "after", "step", "then", "step", "after", "step", "then"]
    first, second, after_reset = stop.waits
    assert 0.5 <= first <= 1.0 and 1.0 <= second <= 2.0 and 0.5 <= after_reset <= 1.0
    assert caplog.messages[0].startswith("writing failed (ValueError: refused); retry in ")
