"""The agent judges the links over its scans (issue 24): a degraded edge is published after 3
consecutive degraded scans (never on the first), and an unchanged node, healthy or degraded, is
not written again."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodetopo.agent.cli import build_agent

from .support import FakePublisher, config

BUNDLES = Path(__file__).resolve().parents[1] / "fixtures" / "bundles"


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
