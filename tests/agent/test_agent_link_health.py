"""The agent judges the links over its scans (issue 24): a degraded edge is published after 3
consecutive degraded scans (never on the first), and an unchanged node, healthy or degraded, is
not written again."""

from __future__ import annotations

import pytest
from helpers import BUNDLES
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from nodetopo.agent.cli import build_agent
from nodetopo.agent.loop import Agent
from nodetopo.agent.metrics import EdgeState, edge_states, make_registry
from nodetopo.health.rules import EdgeReading
from nodetopo.model import NOT_JUDGED, EdgeHealth, EdgeKind, HealthReport, LinkState

from .support import FakePublisher, config


@pytest.mark.parametrize(
    ("bundle", "degraded", "writes"),
    [
        ("dgx-h100", [[], [], [], []], ["nodetopology", "labels"]),
        # the edge is published on the third scan; the labels follow (GPU3 has no healthy NIC path)
        (
            "dgx-h100-gpu-x8",
            [[], [], ["GPU3/pcie"], ["GPU3/pcie"]],
            ["nodetopology", "labels", "nodetopology", "labels"],
        ),
    ],
)
def test_a_degraded_edge_needs_three_scans_and_an_unchanged_node_is_not_rewritten(
    bundle: str, degraded: list[list[str]], writes: list[str]
) -> None:
    publisher = FakePublisher()
    agent = build_agent(config(bundle=str(BUNDLES / bundle), dry_run=True), publisher=publisher)
    for _ in range(4):
        assert agent.run_cycle().error is None
    published = [[e["edge"] for e in c["body"]["status"]["health"]["degraded"]] for c in publisher.calls]
    assert published == degraded
    assert publisher.writes == writes
    if degraded[-1]:
        assert "nodetopo.io/gpu-nic.distance" not in publisher.calls[-1]["labels"]
        assert publisher.calls[0]["labels"]["nodetopo.io/gpu-nic.distance"] == "PIX"


def edge_series(agent: Agent) -> dict[str, tuple[float, str | None]]:
    """``nodetopo_edge_degraded`` as scraped from the agent's registry: edge -> (value, reason)."""
    text = generate_latest(make_registry(agent.stats, process=False)).decode()
    found: dict[str, tuple[float, str | None]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "nodetopo_edge_degraded":
                assert sample.labels["node"] == agent.config.node_name
                assert sample.labels["edge"] not in found
                found[sample.labels["edge"]] = (sample.value, sample.labels.get("reason"))
    return found


def test_the_agent_exports_each_edge_it_judged_degraded_as_published() -> None:
    """After each scan ``edge_degraded`` has one series per edge read (53 on this board: 35 PCIe links,
    8 GPUs' NVLinks, 10 RDMA ports): 0 while healthy, 1 once the edge is published degraded (the
    third degraded scan, as the NodeTopology), with the rules that fired as its reason."""
    agent = build_agent(
        config(bundle=str(BUNDLES / "dgx-h100-rail-half"), dry_run=True), publisher=FakePublisher()
    )
    assert edge_series(agent) == {}  # nothing judged yet: no series
    seen = []
    for _ in range(4):
        assert agent.run_cycle().error is None
        series = edge_series(agent)
        assert len(series) == 53
        assert sum(1 for e in series if e.endswith("/pcie")) == 35
        assert sum(1 for e in series if e.endswith("/nvlink")) == 8
        seen.append(series["mlx5_3/port1"])
        assert all(
            value == 0.0 and reason is None for e, (value, reason) in series.items() if e != "mlx5_3/port1"
        )
    assert seen == [(0.0, None), (0.0, None), (1.0, "PortRateBelowPeers"), (1.0, "PortRateBelowPeers")]


def test_an_edge_read_as_nothing_or_a_scan_not_judged_has_no_series() -> None:
    known = EdgeReading(edge="GPU0/pcie", kind=EdgeKind.PCIE, device="GPU0", observed=LinkState(width=16))
    unread = EdgeReading(edge="GPU1/pcie", kind=EdgeKind.PCIE, device="GPU1")
    down = EdgeHealth(
        edge="GPU2/nvlink", kind=EdgeKind.NVLINK, device="GPU2", reasons=("NVLinkDown", "NVLinkSlow")
    )
    report = HealthReport(judged=True, checked=2, degraded=(down,))
    assert edge_states([known, unread], report) == (
        EdgeState(edge="GPU0/pcie", kind="pcie", degraded=False),
        EdgeState(edge="GPU2/nvlink", kind="nvlink", degraded=True, reason="NVLinkDown+NVLinkSlow"),
    )
    assert edge_states([known], NOT_JUDGED) == ()
