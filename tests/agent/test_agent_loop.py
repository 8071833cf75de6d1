"""The agent loop on a fake clock: schedule, debounce, backoff, stale-keep, change detection, SIGTERM."""

from __future__ import annotations

import pytest

from agent.support import (
    DGX_H100,
    DRIVER_MISMATCH,
    FakeClock,
    FakePublisher,
    SwitchableScan,
    all_nvidia_smi,
    bundle_with,
    config,
    make_agent,
    stop_after,
)
from nodetopo.agent.loop import Agent, Debouncer, jitter_bounds
from nodetopo.agent.staleness import failure_of
from nodetopo.errors import ForbiddenError, InvalidError, TransientError
from nodetopo.model import ConditionReason
from nodetopo.topology.discover import bundle_context


def test_unchanged_scans_write_once_then_nothing() -> None:
    clock, publisher = FakeClock(), FakePublisher()
    agent, scan = make_agent(clock, publisher)
    stop_after(clock, agent, 300)
    assert agent.run() == 0
    assert scan.count == 5  # t=0, 60, 120, 180, 240 (stopped during the sleep to 300)
    assert publisher.writes == ["nodetopology", "labels"]
    assert [o.written for o in agent.outcomes] == [("nodetopology", "labels"), (), (), (), ()]
    assert publisher.applied_labels["nodetopo.io/gpu.count"] == "8"
    assert agent.health.ready()[0]


def test_start_delay_and_jittered_interval() -> None:
    clock, publisher = FakeClock(), FakePublisher()
    randoms = iter([0.25, 0.0, 1.0, 0.5] + [0.5] * 10)
    agent = Agent(
        config(start_delay_max_seconds=30, jitter=0.1),
        scan=SwitchableScan(bundle_context(DGX_H100)),
        publisher=publisher,
        clock=clock,
        sleep=clock.sleep,
        random=lambda: next(randoms),
    )
    stop_after(clock, agent, 7.5 + 54 + 66 + 1)
    agent.run()
    assert clock.slept[:3] == pytest.approx([7.5, 54.0, 66.0])  # 0.25*30; 60*(1-0.1); 60*(1+0.1)
    low, high = jitter_bounds(agent.config)
    assert low == pytest.approx(54) and high == pytest.approx(66)


def test_burst_of_udev_events_is_one_rediscovery() -> None:
    clock, publisher = FakeClock(), FakePublisher()
    agent, scan = make_agent(clock, publisher, debounce_seconds=2.0, debounce_max_seconds=10.0)
    fired = []

    def burst(c: FakeClock, seconds: float) -> bool:
        if fired:
            return False
        fired.append(True)  # the first sleep after the start scan: 20 events in 1.9 s, 5 s in
        for i in range(20):
            c.now += 0.1 if i else 5.0
            agent.notify(f"pci add 0000:3b:00.{i % 8}")
        return True  # the first event woke the loop

    clock.on_sleep.append(burst)
    clock.on_sleep.append(lambda c, s: agent.stop() if len(agent.outcomes) >= 2 else None)
    agent.run()
    triggers = [o.trigger for o in agent.outcomes]
    assert triggers == ["start", "udev"]
    assert scan.count == 2
    assert agent.debouncer.total == 20 and agent.debouncer.pending == 0
    # slept 60 s (woken by the burst at +5 s), then exactly the 2 s quiet time after the last event
    assert clock.slept[:2] == pytest.approx([60.0, 2.0])


def test_debouncer_caps_a_never_ending_burst() -> None:
    clock = FakeClock()
    debouncer = Debouncer(2.0, 10.0, clock=clock)
    assert debouncer.due_at() is None
    start = clock.now
    for _ in range(30):
        debouncer.add()
        clock.now += 1.0
    assert debouncer.due_at() == start + 10.0
    assert debouncer.clear() == 30 and debouncer.due_at() is None


def test_retryable_errors_back_off_with_jitter_and_retry_after() -> None:
    clock, publisher = FakeClock(), FakePublisher()
    publisher.errors = [
        TransientError("apiserver down"),
        TransientError("apiserver down"),
        TransientError("429", status=429, retry_after=30.0),
        TransientError("apiserver down"),
    ]
    agent, _ = make_agent(clock, publisher, backoff_initial_seconds=1.0, backoff_max_seconds=8.0)
    stop_after(clock, agent, 200)
    assert agent.run() == 0
    delays = [o.retry_in for o in agent.outcomes[:4]]
    # equal jitter with random()=0.5: 0.75 * min(8, 1 * 2**n); the 3rd is raised to Retry-After
    assert delays == pytest.approx([0.75, 1.5, 30.0, 6.0])
    assert [o.trigger for o in agent.outcomes[:6]] == [
        "start",
        "retry",
        "retry",
        "retry",
        "retry",
        "interval",
    ]
    assert agent.outcomes[4].published and agent.backoff.failures == 0
    snapshot = agent.stats.snapshot()
    assert snapshot.failures == {("unknown", "TransientError"): 4}
    assert snapshot.label_removals == 0


def test_backoff_is_capped() -> None:
    clock, publisher = FakeClock(), FakePublisher()
    publisher.errors = [TransientError("down") for _ in range(12)]
    agent, _ = make_agent(clock, publisher, backoff_initial_seconds=1.0, backoff_max_seconds=8.0)
    stop_after(clock, agent, 500)
    agent.run()
    delays = [o.retry_in for o in agent.outcomes if o.retry_in is not None]
    assert max(delays) == pytest.approx(6.0) and len(delays) == 12
    assert agent.outcomes[-1].published


@pytest.mark.parametrize("error", [ForbiddenError("denied", status=403), InvalidError("bad", status=422)])
def test_fatal_errors_exit_non_zero(error: Exception) -> None:
    clock, publisher = FakeClock(), FakePublisher()
    publisher.errors = [error]
    agent, _ = make_agent(clock, publisher)
    stop_after(clock, agent, 1000)
    assert agent.run() == 1
    assert len(agent.outcomes) == 1 and agent.outcomes[0].fatal


def test_forbidden_while_the_api_server_recovers_is_retried() -> None:
    """A restarted kube-apiserver answers 403 until its RBAC caches sync (seen in the outage test):
    inside a run of failures that is retried; alone, or past the grace period, it is fatal."""
    clock, publisher = FakeClock(), FakePublisher()
    publisher.errors = [TransientError("connection refused"), ForbiddenError("denied", status=403)]
    agent, _ = make_agent(clock, publisher)
    stop_after(clock, agent, 30)
    assert agent.run() == 0
    assert [o.fatal for o in agent.outcomes[:2]] == [False, False]
    assert agent.outcomes[1].retry_in is not None and agent.outcomes[2].published

    clock, publisher = FakeClock(), FakePublisher()
    publisher.errors = [TransientError("connection refused")] * 40 + [ForbiddenError("denied", status=403)]
    agent, _ = make_agent(clock, publisher, backoff_max_seconds=5.0)
    stop_after(clock, agent, 10_000)
    assert agent.run() == 1  # 40 failures at up to 5 s each: the 403 comes after the grace period
    assert agent.outcomes[-1].fatal


def test_unexpected_exception_skips_the_publish_and_the_loop_goes_on() -> None:
    clock, publisher = FakeClock(), FakePublisher()
    publisher.errors = [RuntimeError("a bug")]
    agent, _ = make_agent(clock, publisher)
    stop_after(clock, agent, 120)
    assert agent.run() == 0
    first, second = agent.outcomes
    assert isinstance(first.error, RuntimeError) and not first.fatal and first.retry_in is None
    assert second.trigger == "interval" and second.published


def test_sigterm_finishes_the_current_write_and_removes_nothing() -> None:
    clock, publisher = FakeClock(), FakePublisher()
    agent, scan = make_agent(clock, publisher)
    publisher.during_publish = agent.stop  # SIGTERM arrives while the write is in flight
    assert agent.run() == 0
    assert scan.count == 1
    assert publisher.writes == ["nodetopology", "labels"]  # the write completed
    assert agent.outcomes[0].published and agent.outcomes[0].removed_labels == ()


def test_once_retries_then_gives_up() -> None:
    clock, publisher = FakeClock(), FakePublisher()
    publisher.errors = [TransientError("down") for _ in range(10)]
    agent, _ = make_agent(clock, publisher, once=True, once_attempts=3)
    assert agent.run() == 1
    assert len(agent.outcomes) == 3


def test_once_publishes_and_exits() -> None:
    clock, publisher = FakeClock(), FakePublisher()
    agent, _ = make_agent(clock, publisher, once=True, start_delay_max_seconds=30)
    assert agent.run() == 0
    assert clock.slept == [] and publisher.writes == ["nodetopology", "labels"]


def test_forced_resync_at_most_once_per_period() -> None:
    clock, publisher = FakeClock(), FakePublisher()
    agent, _ = make_agent(clock, publisher, interval_seconds=600, resync_seconds=3600)
    stop_after(clock, agent, 3 * 3600)
    agent.run()
    assert publisher.resyncs == 2  # cycles every 600 s up to 10200 s: resyncs at 3600 and 7200
    # a resync that finds the same content writes again only in the dry-run double; the API
    # publisher compares with the server (tests/kube): here we only count the resyncs.


def test_failed_source_keeps_last_good_facts_marked_stale_until_clean() -> None:
    clock, publisher = FakeClock(), FakePublisher()
    good = bundle_context(DGX_H100)
    scan = SwitchableScan(good)
    agent, _ = make_agent(clock, publisher, scan)
    first = agent.run_cycle("start")
    labels_before = publisher.applied_labels
    assert first.published

    scan.ctx = bundle_with(commands=all_nvidia_smi(DRIVER_MISMATCH))
    broken = agent.run_cycle("interval")
    assert agent.keeper.stale_sources == ("nvidia-smi",)
    body = publisher.calls[-1]["body"]
    conditions = {(c["type"], c["reason"]) for c in body["status"]["conditions"]}
    assert ("Ready", "Stale") in conditions or any(r == "Stale" for _, r in conditions)
    assert body["status"]["summary"]["gpuCount"] == 8
    assert publisher.applied_labels == labels_before  # nothing dropped, nothing changed
    assert broken.removed_labels == ()
    assert broken.written == ("nodetopology",)  # the conditions changed; the labels did not

    scan.ctx = good
    healed = agent.run_cycle("interval")
    assert agent.keeper.stale_sources == ()
    assert healed.written == ("nodetopology",)
    assert publisher.applied_labels == labels_before
    assert agent.stats.snapshot().stale["nvidia-smi"] == 0


def test_failure_of_names_newly_unavailable_parts() -> None:
    good = bundle_context(DGX_H100)
    from nodetopo.sources import ibstat

    ok = ibstat.collect(good)
    assert failure_of(ok, None) is None
    missing = ibstat.collect(bundle_with(commands={("ibstat",): None}))
    assert failure_of(missing, None) is None  # never seen: Unavailable is the truth
    assert "now unavailable" in (failure_of(missing, ok) or "")
    assert any(c.reason is ConditionReason.UNAVAILABLE for c in missing.facts.conditions)
