"""Each degraded fixture bundle through the real agent loop to the real kube-apiserver (issue 24).

The agent scans the bundle as it scans a node (its tracker, ``scans_to_degrade`` scans before an edge
is published degraded), publishes with a token bound to a pod on its node, and then:

* the stored NodeTopology carries exactly the bundle's degraded edges, the ``Degraded`` condition
  naming them and the facts that follow (islands, nearest NICs), as the bundle's hand-written
  ``expected.yaml`` says under ``health:``;
* the Node's ``nodetopo.io/`` labels are the ones ``expected.yaml`` says (null: absent);
* the extender, fed the objects as the API server serves them, never places on a degraded edge what
  a pod asked for, and the admission summary over them counts only what works;
* further scans of the unchanged bundle make no write at all (counted in the audit log): no flap.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest
import yaml
from agent.kube_support import AGENT_USER
from agent.support import config
from helpers import BUNDLES, nodetopology_of, pending_gpu_pod, synced_extender

from kube.test_agent_cluster import WRITE_VERBS, agent_labels, make_session, node_a, stored_topology
from nodetopo.admission.summary import summarize_objects
from nodetopo.agent.loop import Agent
from nodetopo.agent.publisher import ApiPublisher
from nodetopo.extender.server import filter_nodes
from nodetopo.health import DEFAULT_POLICY, HealthTracker
from nodetopo.placement.request import MAX_NIC_DISTANCE, ONE_ISLAND
from nodetopo.topology.discover import bundle_context, scan

pytestmark = pytest.mark.k8s

__all__ = ["node_a"]  # the fixture, shared with the agent's other cluster tests

#: bundle → (the pod that asks for what the degraded edge takes away, GPUs it asks)
CASES = {
    "dgx-h100-nvlink-down": ({ONE_ISLAND: "true"}, 8),
    "dgx-h100-gpu-x8": ({MAX_NIC_DISTANCE: "PIX"}, 8),
    "dgx-h100-rail-half": ({MAX_NIC_DISTANCE: "PIX"}, 8),
}


@pytest.mark.parametrize("bundle", sorted(CASES))
def test_a_degraded_bundle_changes_the_object_the_labels_the_extender_and_the_summary(
    cluster: Any, node_a: tuple[str, Any], bundle: str
) -> None:
    name, token = node_a
    expected = yaml.safe_load((BUNDLES / bundle / "expected.yaml").read_text())["health"]
    ctx = bundle_context(BUNDLES / bundle)
    tracker = HealthTracker(DEFAULT_POLICY)  # the agent's judge: K scans publish, K clean ones clear
    agent = Agent(
        config(node_name=name),
        scan=lambda: scan(ctx, judge=tracker),
        publisher=ApiPublisher(make_session(token.kubeconfig), name),
    )
    healthy_labels: dict[str, str] = {}
    for cycle in range(1, DEFAULT_POLICY.scans_to_degrade + 1):
        outcome = agent.run_cycle("start" if cycle == 1 else "interval")
        assert outcome.published, outcome
        stored = stored_topology(cluster, name)
        assert stored is not None
        degraded = [e["edge"] for e in (stored["status"].get("health") or {}).get("degraded") or []]
        if cycle < DEFAULT_POLICY.scans_to_degrade:  # not yet: K consecutive scans publish it
            assert degraded == [], (cycle, degraded)
            healthy_labels = agent_labels(cluster, name)
    assert degraded == [e["edge"] for e in expected["degraded"]]

    # the object: the edge, its reasons, the condition naming it, the facts that follow
    status = stored["status"]
    reasons = {e["edge"]: e["reasons"] for e in status["health"]["degraded"]}
    assert reasons == {e["edge"]: e["reasons"] for e in expected["degraded"]}
    condition = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert condition["status"] == "True" and all(e in condition["message"] for e in reasons)
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"  # Ready is about reading the node, not about its hardware
    islands = [
        {k: i[k] for k in ("gpus", "linksPerPair", "fullyConnected", "nvswitch")}
        for i in status["nvlinkIslands"]
    ]
    assert islands == expected["nvlinkIslands"]
    for want in expected.get("gpus", []):
        gpu = next(g for g in status["gpus"] if g["index"] == want["index"])
        assert gpu.get("nearestNICs", []) == want["nearestNICs"]
        assert gpu.get("nicDistance") == want["nicDistance"]

    # the labels follow: a key whose fact the degraded edge takes away is removed after the label
    # keeper's clean scans (a missing observation is not evidence of absence), then nothing moves
    wanted = {k: v for k, v in expected["labels"].items()}
    for _ in range(3):
        labels = agent_labels(cluster, name)
        if all(labels.get(k) == v for k, v in wanted.items()):
            break
        agent.run_cycle("interval")
    else:
        labels = agent_labels(cluster, name)
    for key, value in wanted.items():
        assert labels.get(key) == value, (key, labels.get(key), value)
    moved = {k for k in set(labels) | set(healthy_labels) if labels.get(k) != healthy_labels.get(k)}
    assert moved == {k for k, v in wanted.items() if healthy_labels.get(k) != v}
    k = DEFAULT_POLICY.scans_to_degrade
    print(f"{bundle}: degraded published at scan {k}, labels moved {sorted(moved)}")
    stored = stored_topology(cluster, name)
    assert stored is not None

    # the extender (the object as the API server serves it) and the summary count what works
    annotations, gpus = CASES[bundle]
    pod = pending_gpu_pod(gpus, annotations)
    control = nodetopology_of("dgx-h100", "healthy-peer")  # the same machine with every link healthy
    nodes = [name, "healthy-peer"]
    result = filter_nodes(synced_extender([stored, control]), {"Pod": pod, "NodeNames": nodes})
    assert result["NodeNames"] == ["healthy-peer"], result
    refused = {**result["FailedNodes"], **result["FailedAndUnresolvableNodes"]}
    assert set(refused) == {name}
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    summary = summarize_objects([stored], computed_at=now)
    total = summary["status"]["total"]
    print(f"{bundle}: extender: {refused[name]}; summary: {total}")
    if ONE_ISLAND in annotations:  # the island lost its GPU: the summary says what is left
        assert total["largestIsland"] == max(len(i["gpus"]) for i in expected["nvlinkIslands"]) < gpus

    # repeated scans of the unchanged bundle: no write, no flap
    offset = cluster.audit_barrier()
    for _ in range(3):
        again = agent.run_cycle("interval")
        assert again.published and again.written == (), again
    writes = [e for e in cluster.audit_events(since=offset, user=AGENT_USER) if e["verb"] in WRITE_VERBS]
    assert writes == []
    assert agent_labels(cluster, name) == labels
