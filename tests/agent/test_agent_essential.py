"""A missing or empty /sys (a wrong host mount): not Ready, with the reason, and never a published zero.

issue 16: ``agent --once --dry-run`` with a host root that does not exist labelled the node
``gpu.count=0`` and ``rdma=false`` and reported Ready=True.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from agent.support import DGX_H100, FakeClock, FakePublisher, SwitchableScan, config
from nodetopo.agent.loop import Agent
from nodetopo.agent.publisher import ApiPublisher
from nodetopo.host import ReplayRunner
from nodetopo.resource.body import to_nodetopology
from nodetopo.sources.base import Context
from nodetopo.topology.discover import bundle_context, host_context, scan


def agent_for(ctx: Context, publisher: Any = None) -> tuple[Agent, Any, SwitchableScan]:
    clock, scan_fn = FakeClock(), SwitchableScan(ctx)
    publisher = publisher or FakePublisher()
    agent = Agent(
        config(), scan=scan_fn, publisher=publisher, clock=clock, sleep=clock.sleep, random=lambda: 0.5
    )
    return agent, publisher, scan_fn


def ready(body: Mapping[str, Any]) -> dict[str, Any]:
    return dict(next(c for c in body["status"]["conditions"] if c["type"] == "Ready"))


def wrong_root(tmp_path: Path, kind: str) -> Context:
    """A host root with no /sys under it: a directory that does not exist, or an empty one."""
    root = tmp_path / "host"
    if kind == "empty":
        root.mkdir()
    return host_context(root, runner=ReplayRunner({}), nvml="off")


@pytest.mark.parametrize("kind", ["nonexistent", "empty"])
def test_wrong_root_from_the_start_publishes_no_negative_label(tmp_path: Path, kind: str) -> None:
    agent, publisher, _ = agent_for(wrong_root(tmp_path, kind))
    outcome = agent.run_cycle("start")
    assert outcome.published
    body = publisher.calls[-1]["body"]
    condition = ready(body)
    assert condition["status"] == "False" and condition["reason"] == "Missing", condition
    assert "sysfs.pci" in condition["message"] and "sysfs.numa" in condition["message"]
    # nothing of this scan may be a label: no gpu.count=0, rdma=false, rdma.nic-count=0
    assert publisher.applied_labels == {}
    assert body["status"]["summary"]["numaNodes"] is None


@pytest.mark.parametrize("kind", ["nonexistent", "empty"])
def test_wrong_root_after_a_good_scan_keeps_facts_and_labels(tmp_path: Path, kind: str) -> None:
    agent, publisher, scan_fn = agent_for(bundle_context(DGX_H100))
    agent.run_cycle("start")
    before = publisher.applied_labels
    assert before["nodetopo.io/gpu.count"] == "8" and before["nodetopo.io/rdma"] == "true"
    scan_fn.ctx = wrong_root(tmp_path, kind)
    for trigger in ("interval", "interval", "interval"):  # more than the 2 scans that remove a label
        outcome = agent.run_cycle(trigger)
        assert outcome.published and outcome.removed_labels == ()
    assert publisher.applied_labels == before
    body = publisher.calls[-1]["body"]
    assert ready(body)["status"] == "False"
    assert body["status"]["summary"]["gpuCount"] == 8 and body["status"]["summary"]["rdmaNICs"] == 10
    assert {"sysfs.pci", "sysfs.numa"} <= set(agent.keeper.stale_sources)


class StoredSession:
    """An ``ApiSession`` double holding one stored NodeTopology and Node (what a restarted agent finds)."""

    field_manager = "nodetopo-agent"

    def __init__(self, stored: dict[str, Any], labels: dict[str, str]) -> None:
        self.stored = stored
        self.node = {"metadata": {"name": "node-a", "uid": "u-1", "labels": dict(labels)}}
        self.applied: list[tuple[str, dict[str, Any]]] = []

    def read_node(self, name: str) -> dict[str, Any]:
        return copy.deepcopy(self.node)

    def apply_node(self, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        self.applied.append(("node", dict(body)))
        return copy.deepcopy(self.node)

    def read_cluster_object(self, group: str, version: str, plural: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.stored)

    def apply_cluster_object(
        self, group: str, version: str, plural: str, name: str, body: Mapping[str, Any], *, status: bool
    ) -> dict[str, Any]:
        self.applied.append(("status" if status else "object", copy.deepcopy(dict(body))))
        if status:
            self.stored["status"] = copy.deepcopy(body["status"])
        return copy.deepcopy(self.stored)


def test_restarted_agent_with_wrong_root_keeps_the_stored_facts(tmp_path: Path) -> None:
    good = to_nodetopology(scan(bundle_context(DGX_H100)).topology, "node-a")
    good["metadata"]["ownerReferences"] = [{"kind": "Node", "name": "node-a", "uid": "u-1"}]
    session = StoredSession(good, {"nodetopo.io/gpu.count": "8"})
    agent, _, _ = agent_for(wrong_root(tmp_path, "empty"), ApiPublisher(session, "node-a"))  # type: ignore[arg-type]
    assert agent.run_cycle("start").published
    written = [body for kind, body in session.applied if kind == "status"]
    assert written, "the not-Ready condition must be published"
    status = written[-1]["status"]
    assert ready(written[-1])["reason"] == "Missing"
    assert status["summary"]["gpuCount"] == 8 and len(status["gpus"]) == 8
    assert status["summary"]["rdmaNICs"] == 10 and status["numaNodes"] == good["status"]["numaNodes"]
    assert not [body for kind, body in session.applied if kind == "node"]  # no label write at all
