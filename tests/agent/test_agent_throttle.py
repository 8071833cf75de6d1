"""Client-side rate limit (token bucket) and backoff, on a fake clock."""

from __future__ import annotations

import pytest

from agent.support import FakeClock
from nodetopo.kube.pacing import Backoff, TokenBucket


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
