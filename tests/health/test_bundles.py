"""Edge health end to end on the degraded fixture bundles: each case is detected from its bundle
alone, the flapping port from two captures of one node, and rates carry across an agent restart
through what the NodeTopology publishes.

The bundles are generated (tests/fixtures/gen_bundle.py) from their layouts, each with a
hand-written expected.yaml that tests/bundle/test_bundles_expected.py holds nodetopo's whole output to.
"""

from __future__ import annotations

import dataclasses
import datetime
import json

import pytest
from helpers import BUNDLES

from nodetopo.health import DEFAULT_POLICY, HealthTracker
from nodetopo.health.policy import HealthPolicy
from nodetopo.health.rules import EdgeReading
from nodetopo.model import EdgeKind, Facts
from nodetopo.resource.body import to_nodetopology
from nodetopo.resource.conditions import degraded_condition
from nodetopo.resource.reader import read_nodetopology
from nodetopo.topology.derive import derive_topology
from nodetopo.topology.discover import bundle_context, scan

FLAP = "mlx5_6/port1"


def captured_at(bundle: str) -> float:
    text = json.loads((BUNDLES / bundle / "manifest.json").read_text())["capturedAt"]
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def edges_of(bundle: str) -> tuple[EdgeReading, ...]:
    return scan(bundle_context(BUNDLES / bundle)).edges


@pytest.mark.parametrize(
    ("bundle", "edge", "reasons", "message"),
    [
        ("dgx-h100-gpu-x8", "GPU3/pcie", ("PcieWidthDegraded",), "x8 of x16 (both ends support x16)"),
        (
            "dgx-h100-nvlink-down",
            "GPU5/nvlink",
            ("NVLinkDown",),
            "12 of 18 NVLinks active (its peers have 18)",
        ),
        (
            "dgx-h100-rail-half",
            "mlx5_3/port1",
            ("PortRateBelowPeers",),
            "200 Gb/s, its rails run at 400 Gb/s",
        ),
    ],
)
def test_each_degraded_bundle_has_exactly_its_edge(
    bundle: str, edge: str, reasons: tuple[str, ...], message: str
) -> None:
    report = scan(bundle_context(BUNDLES / bundle)).topology.health
    assert [(e.edge, e.reasons, e.message) for e in report.degraded] == [(edge, reasons, message)]
    assert report.checked == scan(bundle_context(BUNDLES / "dgx-h100")).topology.health.checked


def test_the_healthy_dgx_h100_has_every_edge_read_and_none_degraded() -> None:
    s = scan(bundle_context(BUNDLES / "dgx-h100"))
    kinds = {e.kind for e in s.edges}
    assert kinds == {EdgeKind.PCIE, EdgeKind.NVLINK, EdgeKind.PORT}
    assert all(e.known for e in s.edges) and s.topology.health.degraded == ()
    # the GPUs idle at Gen1 below their Gen5: reported as observed, not a finding
    gpu0 = next(e for e in s.edges if e.edge == "GPU0/pcie")
    assert gpu0.observed.gts is not None and gpu0.capability.gts is not None
    assert gpu0.observed.gts < gpu0.capability.gts and gpu0.findings == ()


def test_a_rule_switched_off_does_not_fire() -> None:
    policy = HealthPolicy(rules={"pcie_width": False})
    s = scan(bundle_context(BUNDLES / "dgx-h100-gpu-x8"), judge=HealthTracker(policy.one_shot()))
    assert s.topology.health.degraded == ()


def test_a_node_none_of_whose_links_could_be_read_is_degraded_unknown() -> None:
    """Nothing read: the Degraded condition is Unknown, never False (nothing is known healthy)."""
    unknown = EdgeReading(edge="mlx5_0/port1", kind=EdgeKind.PORT, device="mlx5_0", nic="mlx5_0", port=1)
    report = HealthTracker(DEFAULT_POLICY.one_shot(), keep_baseline=False).judge((unknown,), 0.0)
    topology = dataclasses.replace(derive_topology(Facts()), health=report)
    condition = degraded_condition(topology)
    assert condition is not None
    assert (condition["status"], condition["reason"]) == ("Unknown", "NoLinkReadings")
    assert to_nodetopology(topology, "n")["status"]["health"] == {"checked": 0, "degraded": []}


def test_two_captures_of_a_flapping_rail_are_judged_flapping() -> None:
    first, second = edges_of("dgx-h100-flap-1"), edges_of("dgx-h100-flap-2")
    tracker = HealthTracker(DEFAULT_POLICY.one_shot())
    assert tracker.judge(first, captured_at("dgx-h100-flap-1")).degraded == ()
    report = tracker.judge(second, captured_at("dgx-h100-flap-2"))
    (edge,) = report.degraded
    assert edge.edge == FLAP and edge.reasons == ("PortFlapping", "PortErrorsRising")
    # 4 downs and 8 carrier changes in 10 minutes; 55 symbol errors (more than 10/h)
    rates = {r.counter: r.per_hour for r in edge.rates}
    assert rates == {"carrier_changes": 48.0, "link_downed": 24.0, "symbol_error": 330.0}
    assert edge.since == "2026-03-02T10:10:00Z"
    assert tracker.rates == {FLAP: rates}


def test_a_restarted_agent_judges_the_rate_across_its_restart() -> None:
    """The first agent publishes its baseline with flap-1's counters; a second one, seeded from what
    the API serves back, sees flap-2 and judges the ten minutes between them."""
    first = HealthTracker(DEFAULT_POLICY.one_shot())
    s1 = scan(bundle_context(BUNDLES / "dgx-h100-flap-1"), judge=first, now=captured_at("dgx-h100-flap-1"))
    body = to_nodetopology(s1.topology, "gpu-node-17")
    assert body["status"]["health"]["baseline"]["counters"][FLAP] == {
        "carrier_changes": 8,
        "link_downed": 3,
        "symbol_error": 40,
    }
    published = read_nodetopology(body).status.health
    assert published.baseline == s1.topology.health.baseline

    second = HealthTracker(DEFAULT_POLICY.one_shot())
    second.seed(published, [e.edge for e in s1.edges])
    s2 = scan(bundle_context(BUNDLES / "dgx-h100-flap-2"), judge=second, now=captured_at("dgx-h100-flap-2"))
    assert [e.edge for e in s2.topology.health.degraded] == [FLAP]
    # without the seed, the second capture alone is healthy
    alone = scan(bundle_context(BUNDLES / "dgx-h100-flap-2"), judge=HealthTracker(DEFAULT_POLICY.one_shot()))
    assert alone.topology.health.degraded == ()


def test_the_published_links_of_a_gpu_out_of_its_island_are_pcie() -> None:
    """GPU5's NVLinks are degraded: its pairs are published as what PCIe gives them, the other
    pairs keep their 18 links."""
    links = {
        (x.a, x.b): x for x in scan(bundle_context(BUNDLES / "dgx-h100-nvlink-down")).topology.gpu_links or ()
    }
    assert len(links) == 28
    assert all(
        link.nvlinks is None and link.pcie is not None for (a, b), link in links.items() if 5 in (a, b)
    )
    assert {link.nvlinks for (a, b), link in links.items() if 5 not in (a, b)} == {18}
