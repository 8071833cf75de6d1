"""Edge health over time (nodetopo.health.tracker): counter rates between scans, the debounce that
keeps published health from flapping, resets, a seeded (restarted) tracker; and the policy file.
tests/health/test_bundles.py judges the two captures of a flapping rail."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from nodetopo.health import DEFAULT_POLICY, HealthTracker, PolicyError, load_policy
from nodetopo.health.rules import EdgeReading
from nodetopo.health.tracker import Sample, counter_rates
from nodetopo.model import EdgeKind

FLAP = "mlx5_6/port1"


def port(counters: dict[str, int]) -> EdgeReading:
    return EdgeReading(
        edge=FLAP,
        kind=EdgeKind.PORT,
        device="mlx5_6",
        nic="mlx5_6",
        port=1,
        counters=tuple(sorted(counters.items())),
    )


def test_the_flap_needs_k_scans_to_publish_and_k_clean_scans_to_clear() -> None:
    """K = 3 (the default): one rising scan is not published; three in a row are; the edge stays
    published through one clean scan, and clears after three clean ones. (A window of one interval:
    each scan's rate is its own interval's; the default 900 s window keeps a rise in view longer.)"""
    tracker = HealthTracker(dataclasses.replace(DEFAULT_POLICY, window_seconds=60.0))
    t, downs = 0.0, 0
    published = []
    for rising in (True, False, True, True, True, False, True, True, True, False, False, False):
        downs += 1 if rising else 0
        t += 60.0
        published.append(bool(tracker.judge((port({"link_downed": downs}),), t).degraded))
    assert published == [False, False, False, False, True, True, True, True, True, True, True, False]


def test_an_unread_scan_keeps_the_published_state() -> None:
    tracker = HealthTracker(DEFAULT_POLICY.one_shot())
    tracker.judge((port({"link_downed": 1}),), 0.0)
    assert tracker.judge((port({"link_downed": 2}),), 60.0).degraded
    report = tracker.judge((), 120.0)  # this scan read no edge at all
    assert [e.edge for e in report.degraded] == [FLAP] and report.checked == 0


def test_a_reset_counter_is_no_rate() -> None:
    """A counter that went down was reset (a reboot, a driver reload): no rate, no flap."""
    tracker = HealthTracker(DEFAULT_POLICY.one_shot())
    tracker.judge((port({"link_downed": 200}),), 0.0)
    assert tracker.judge((port({"link_downed": 0}),), 60.0).degraded == ()
    assert tracker.judge((port({"link_downed": 0}),), 120.0).degraded == ()
    assert tracker.judge((port({"link_downed": 1}),), 180.0).degraded  # a real rise after it


def test_rates_are_per_hour_over_the_window() -> None:
    samples = [Sample(0.0, {"crc": 0}), Sample(600.0, {"crc": 10}), Sample(1200.0, {"crc": 20})]
    # the window (900 s) starts at the last sample at least 900 s old: t=600, 40 more in 900 s
    assert counter_rates(samples, 1500.0, {"crc": 50}, 900.0) == {"crc": 160.0}
    # a counter the start sample lacks has no rate; younger than the window: from the oldest
    assert counter_rates(samples, 1500.0, {"crc": 50, "replay": 3}, 900.0) == {"crc": 160.0}
    assert counter_rates(samples, 700.0, {"crc": 14}, 900.0) == {"crc": 14 * 3600 / 700}
    assert counter_rates([], 1500.0, {"crc": 50}, 900.0) == {}


def test_a_seeded_degraded_edge_stays_until_clean_scans_clear_it() -> None:
    first = HealthTracker(dataclasses.replace(DEFAULT_POLICY, scans_to_degrade=1))
    first.judge((port({"link_downed": 1}),), 0.0)
    report = first.judge((port({"link_downed": 2}),), 60.0)
    second = HealthTracker(DEFAULT_POLICY)  # clears after 3 clean scans
    second.seed(report, [FLAP])
    states = [bool(second.judge((port({"link_downed": 2}),), 120.0 + 60 * k).degraded) for k in range(4)]
    assert states == [True, True, False, False]


def test_policy_file(tmp_path: Path) -> None:
    path = tmp_path / "health.yaml"
    path.write_text("scans_to_degrade: 2\nper_hour: {port.symbol_error: 100}\nrules: {pcie_speed: false}\n")
    policy = load_policy(path)
    assert policy.scans_to_degrade == 2 and policy.scans_to_clear == 3
    assert policy.threshold("port", "symbol_error") == 100 and policy.threshold("port", "link_downed") == 0
    assert not policy.rule("pcie_speed") and policy.rule("pcie_width")
    for text, key in (
        ("scans_to_clear: 0\n", "scans_to_clear"),
        ("per_hour: {port.nothing: 1}\n", "port.nothing"),
        ("rules: {pcie_width: maybe}\n", "pcie_width"),
        ("colour: red\n", "colour"),
    ):
        path.write_text(text)
        with pytest.raises(PolicyError, match=key):
            load_policy(path)
