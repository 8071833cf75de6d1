"""The agent reads its own Node's labels each scan (GPU feature discovery's ``nvidia.com/gpu.*``):
a disagreement with its facts is published in ``Consistent``; the clique becomes the NVLink domain
only when NVML is not available; a failed read compares nothing and never stops the loop."""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping
from typing import Any

from agent.support import BUNDLES, DGX_H100, FakeClock, SwitchableScan, config
from nodetopo.agent.loop import Agent
from nodetopo.agent.publisher import ApiPublisher, read_node_labels
from nodetopo.errors import TransientError
from nodetopo.topology.discover import bundle_context

CLIQUE = "7d3f1c2a-5b6e-4f80-9a1d-2c4b6e8f0a13.32766"


class NodeSession:
    """An ``ApiSession`` double: one Node with the labels other labellers wrote, no NodeTopology yet."""

    field_manager = "nodetopo-agent"

    def __init__(self, labels: dict[str, str]) -> None:
        self.node: dict[str, Any] = {"metadata": {"name": "node-a", "uid": "u-1", "labels": dict(labels)}}
        self.stored: dict[str, Any] | None = None
        self.status: list[dict[str, Any]] = []
        self.node_writes: list[dict[str, Any]] = []
        self.fail_reads = 0  #: how many reads of the Node fail before they work again

    def read_node(self, name: str) -> dict[str, Any]:
        if self.fail_reads:
            self.fail_reads -= 1
            raise TransientError("GET node-a: connection refused")
        return copy.deepcopy(self.node)

    def apply_node(self, name: str, body: Mapping[str, Any], *, force: bool = False) -> dict[str, Any]:
        self.node_writes.append(copy.deepcopy(dict(body)))
        labels = body.get("metadata", {}).get("labels", {})
        self.node["metadata"]["labels"].update(labels)
        return copy.deepcopy(self.node)

    def read_cluster_object(self, group: str, version: str, plural: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.stored)

    def apply_cluster_object(
        self, group: str, version: str, plural: str, name: str, body: Mapping[str, Any], *, status: bool
    ) -> dict[str, Any]:
        if self.stored is None:
            self.stored = {"metadata": copy.deepcopy(dict(body["metadata"]))}
        if status:
            self.status.append(copy.deepcopy(dict(body["status"])))
            self.stored["status"] = copy.deepcopy(body["status"])
        return copy.deepcopy(self.stored)


def agent_on(session: NodeSession, bundle: str = "dgx-h100") -> Agent:
    clock = FakeClock()
    return Agent(
        config(),
        scan=SwitchableScan(bundle_context(DGX_H100 if bundle == "dgx-h100" else BUNDLES / bundle)),
        publisher=ApiPublisher(session, "node-a"),  # type: ignore[arg-type]
        clock=clock,
        sleep=clock.sleep,
        random=lambda: 0.5,
        node_labels=functools.partial(read_node_labels, session, "node-a"),  # type: ignore[arg-type]
    )


def condition(status: Mapping[str, Any], kind: str) -> dict[str, Any]:
    return dict(next(c for c in status["conditions"] if c["type"] == kind))


def test_gfd_count_disagreement_is_published_in_consistent() -> None:
    session = NodeSession({"nvidia.com/gpu.count": "7", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})
    assert agent_on(session).run_cycle("start").published
    consistent = condition(session.status[-1], "Consistent")
    assert consistent["status"] == "False"
    assert consistent["message"] == "nvidia.com/gpu.count is 7, nodetopo found 8 GPUs"
    # Ready says whether nodetopo could read, not whether another project's label agrees
    assert condition(session.status[-1], "Ready")["status"] == "True"
    # nodetopo still writes only its own keys
    written = {k for body in session.node_writes for k in body["metadata"]["labels"]}
    assert written and all(k.startswith("nodetopo.io/") for k in written)


def test_agreeing_labels_leave_consistent_true() -> None:
    session = NodeSession({"nvidia.com/gpu.count": "8", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})
    assert agent_on(session).run_cycle("start").published
    assert condition(session.status[-1], "Consistent")["status"] == "True"


def test_the_disagreement_clears_when_the_label_is_corrected() -> None:
    session = NodeSession({"nvidia.com/gpu.count": "7"})
    agent = agent_on(session)
    assert agent.run_cycle("start").published
    assert condition(session.status[-1], "Consistent")["status"] == "False"
    session.node["metadata"]["labels"]["nvidia.com/gpu.count"] = "8"
    assert agent.run_cycle("interval").published
    assert condition(session.status[-1], "Consistent")["status"] == "True"


def test_a_failed_label_read_compares_nothing_and_publishes() -> None:
    session = NodeSession({"nvidia.com/gpu.count": "7"})
    session.fail_reads = 1  # the agent's own read; the label publisher reads the Node again after it
    outcome = agent_on(session).run_cycle("start")
    assert outcome.published and outcome.error is None
    assert condition(session.status[-1], "Consistent")["status"] == "True"


def test_clique_label_is_the_nvlink_domain_without_nvml() -> None:
    session = NodeSession({"nvidia.com/gpu.clique": CLIQUE})
    assert agent_on(session, "gpu-no-driver").run_cycle("start").published
    status = session.status[-1]
    assert status["network"]["nvlinkDomain"]["id"] == CLIQUE
    provenance = condition(status, "SourceNodeLabels")
    assert provenance["status"] == "True" and "nvidia.com/gpu.clique" in provenance["message"]
    assert session.node["metadata"]["labels"]["nodetopo.io/nvlink.domain"] == CLIQUE
    assert "nodetopo.io/nvlink.domain-healthy" not in session.node["metadata"]["labels"]  # unknown
