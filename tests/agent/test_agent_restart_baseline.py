"""A restarted agent judges counter rates across its restart from what the last published NodeTopology
recorded (issue 24): the counters, when and on which boot they were read. A counter lower than
recorded, or a baseline of another boot, is a reset (a reboot): never a negative rate, never a flap.

The flapping rail: ``dgx-h100-flap-1`` and ``-flap-2`` are two captures of one node ten minutes
apart (4 more link downs, 8 more carrier changes, 55 more symbol errors on mlx5_6/port1).
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import BUNDLES

from nodetopo.agent.cli import build_agent
from nodetopo.agent.restart import SeededJudge, parse_boot_id, read_boot_id
from nodetopo.errors import TransientError
from nodetopo.health import DEFAULT_POLICY, HealthTracker
from nodetopo.health.tracker import rfc3339
from nodetopo.host import HostRoot
from nodetopo.resource.baseline import published_health
from nodetopo.resource.body import to_nodetopology
from nodetopo.topology.discover import bundle_context, scan

from .support import FakePublisher, config

FLAP = "mlx5_6/port1"
BOOT_A = "4c6f1b5e-96a4-4a8e-9d0b-2f1f3c1a7e01"
BOOT_B = "0f2d9a33-1c7b-4e55-8a61-7d9b2e4c5f02"


def _stored(body: dict[str, Any], *, seconds_ago: float) -> dict[str, Any]:
    """``body`` as the API serves it back, its baseline read ``seconds_ago`` before now."""
    stored = json.loads(json.dumps(body))
    stored["status"]["health"]["baseline"]["at"] = rfc3339(time.time() - seconds_ago)
    return stored


def _published_by_an_agent(bundle: str) -> dict[str, Any]:
    """The NodeTopology an agent (the production wiring) published after one scan of ``bundle``."""
    publisher = FakePublisher()
    agent = build_agent(config(bundle=str(BUNDLES / bundle), dry_run=True), publisher=publisher)
    assert agent.run_cycle().error is None
    return copy.deepcopy(dict(publisher.calls[-1]["body"]))


def _degraded_over_cycles(bundle: str, stored: dict[str, Any] | None, cycles: int = 3) -> list[list[str]]:
    publisher = FakePublisher()
    agent = build_agent(
        config(bundle=str(BUNDLES / bundle), dry_run=True), publisher=publisher, read_published=lambda: stored
    )
    for _ in range(cycles):
        assert agent.run_cycle().error is None
    return [[e["edge"] for e in c["body"]["status"]["health"]["degraded"]] for c in publisher.calls]


def test_the_agent_publishes_its_counter_baseline() -> None:
    body = _published_by_an_agent("dgx-h100-flap-1")
    baseline = body["status"]["health"]["baseline"]
    assert baseline["counters"][FLAP] == {"carrier_changes": 8, "link_downed": 3, "symbol_error": 40}
    assert "boot" not in baseline  # the bundle holds no boot id: unknown, left out


def test_a_restarted_agent_judges_the_rise_since_the_last_published_scan() -> None:
    """The agent restarts ten minutes after the last published scan; the rail flapped in between. Its
    first scans judge that rise (the edge is published on the third, as any degraded edge); without
    the published status the same scans see a quiet port."""
    stored = _stored(_published_by_an_agent("dgx-h100-flap-1"), seconds_ago=600)
    assert _degraded_over_cycles("dgx-h100-flap-2", stored) == [[], [], [FLAP]]
    assert _degraded_over_cycles("dgx-h100-flap-2", None) == [[], [], []]


def test_the_first_scan_after_a_restart_has_the_rate() -> None:
    stored = _stored(_published_by_an_agent("dgx-h100-flap-1"), seconds_ago=600)
    tracker = HealthTracker(DEFAULT_POLICY)
    judge = SeededJudge(tracker, lambda: stored)
    report = scan(bundle_context(BUNDLES / "dgx-h100-flap-2"), judge=judge).topology.health
    assert report.degraded == ()  # one scan: not yet published (3 scans degrade an edge)
    rates = tracker.rates[FLAP]
    assert rates == pytest.approx(
        {"carrier_changes": 48.0, "link_downed": 24.0, "symbol_error": 330.0}, rel=0.01
    )


def test_a_counter_lower_than_recorded_is_a_reset_not_a_negative_rate_or_a_flap() -> None:
    """The node rebooted (no boot id known): its counters are below the published ones. No rate, no
    flap, and the baseline is replaced at once by what this boot counts."""
    stored = _stored(_published_by_an_agent("dgx-h100-flap-2"), seconds_ago=600)
    tracker = HealthTracker(DEFAULT_POLICY)
    judge = SeededJudge(tracker, lambda: stored)
    ctx = bundle_context(BUNDLES / "dgx-h100-flap-1", rescans=True)
    now = time.time()
    for i in range(4):
        report = scan(ctx, judge=judge, now=now + 60 * i).topology.health
        assert report.degraded == ()
        assert FLAP not in tracker.rates
        assert all(v >= 0 for rates in tracker.rates.values() for v in rates.values())
    assert report.baseline is not None
    assert dict(report.baseline.counters)[FLAP] == (
        ("carrier_changes", 8),
        ("link_downed", 3),
        ("symbol_error", 40),
    )
    assert report.baseline.at == rfc3339(now)
    assert _degraded_over_cycles("dgx-h100-flap-1", stored, cycles=4) == [[], [], [], []]


@pytest.mark.parametrize(("before", "after", "judged"), [(BOOT_A, BOOT_A, True), (BOOT_A, BOOT_B, False)])
def test_a_baseline_of_another_boot_is_not_used(before: str, after: str, judged: bool) -> None:
    """The counters rose above the recorded ones, but the boot id says the node rebooted in between:
    what they count is this boot's, not a rise since the baseline."""
    first = HealthTracker(DEFAULT_POLICY.one_shot(), boot=before)
    s1 = scan(bundle_context(BUNDLES / "dgx-h100-flap-1"), judge=first, now=time.time() - 600)
    body = to_nodetopology(s1.topology, "gpu-node-17")
    assert body["status"]["health"]["baseline"]["boot"] == before
    health = published_health(json.loads(json.dumps(body)))
    assert health is not None and health.baseline is not None and health.baseline.boot == before

    second = HealthTracker(DEFAULT_POLICY.one_shot(), boot=after)
    judge = SeededJudge(second, lambda: json.loads(json.dumps(body)))
    report = scan(bundle_context(BUNDLES / "dgx-h100-flap-2"), judge=judge).topology.health
    assert [e.edge for e in report.degraded] == ([FLAP] if judged else [])
    assert (FLAP in second.rates) is judged
    assert report.baseline is not None and report.baseline.boot == after
    if not judged:  # replaced at once: the published baseline is this boot's
        assert report.baseline.at != health.baseline.at


def test_a_stored_object_that_cannot_be_read_starts_the_judgement_afresh() -> None:
    def failing() -> dict[str, Any] | None:
        raise TransientError("read nodetopologies/node-a: connection refused")

    for read in (
        failing,
        lambda: None,
        lambda: {"metadata": {"name": "node-a"}},
        lambda: ["not", "an", "object"],
    ):
        tracker = HealthTracker(DEFAULT_POLICY.one_shot())
        report = scan(
            bundle_context(BUNDLES / "dgx-h100-flap-2"), judge=SeededJudge(tracker, read)
        ).topology.health
        assert report.judged and report.degraded == ()  # type: ignore[arg-type]


def test_the_boot_id(tmp_path: Path) -> None:
    assert parse_boot_id(BOOT_A.upper() + "\n") == BOOT_A
    assert parse_boot_id("not a boot id\n") == ""
    assert read_boot_id(HostRoot(tmp_path), bundle=True) == ""  # a bundle without one: unknown
    (tmp_path / "proc/sys/kernel/random").mkdir(parents=True)
    (tmp_path / "proc/sys/kernel/random/boot_id").write_text(BOOT_B + "\n")
    assert read_boot_id(HostRoot(tmp_path), bundle=True) == BOOT_B
    # a live host's is this kernel's (not namespaced: a container sees its node's)
    live = Path("/proc/sys/kernel/random/boot_id")
    expected = parse_boot_id(live.read_text()) if live.exists() else ""
    assert read_boot_id(HostRoot(tmp_path), bundle=False) == expected
