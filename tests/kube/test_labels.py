"""nodetopo's Node labels (and the NFD NodeFeature mode) against the real kube-apiserver."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from nodetopo.errors import ForbiddenError
from nodetopo.kube.session import ApiSession
from nodetopo.kube.transport import connect
from nodetopo.publish.nfd import NODE_NAME_LABEL, NodeFeaturePublisher
from nodetopo.publish.node_labels import LabelTracker, NodeLabelPublisher, owned_label_keys

from .cluster import LocalCluster

pytestmark = pytest.mark.k8s

FULL = {
    "nodetopo.io/gpu.count": "8",
    "nodetopo.io/gpu.model": "NVIDIA-H100-80GB-HBM3",
    "nodetopo.io/nvlink.island-count": "1",
    "nodetopo.io/rdma": "true",
    "nodetopo.io/rdma.nic-count": "8",
    "nodetopo.io/rdma.link-layer": "InfiniBand",
    "nodetopo.io/numa.count": "2",
}
FOREIGN_LABELS = {
    "kubernetes.io/hostname": "gpu-7",
    "nvidia.com/gpu.count": "8",
    "feature.node.kubernetes.io/pci-10de.present": "true",
    "team": "ml",
}
ANNOTATIONS = {"node.alpha.kubernetes.io/ttl": "0", "example.com/owner": "infra"}
TAINTS = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]


@pytest.fixture
def session(cluster: LocalCluster) -> Iterator[ApiSession]:
    with connect(str(cluster.kubeconfig_for("publisher"))) as connection:
        yield ApiSession(connection)


@pytest.fixture
def node(make_node: Callable[..., dict[str, Any]]) -> str:
    return str(make_node(labels=FOREIGN_LABELS, annotations=ANNOTATIONS, taints=TAINTS)["metadata"]["name"])


def _node(cluster: LocalCluster, name: str) -> dict[str, Any]:
    status, obj = cluster.request("GET", f"/api/v1/nodes/{name}")
    assert status == 200, obj
    return dict(obj)


def _ours(cluster: LocalCluster, name: str) -> dict[str, str]:
    labels = _node(cluster, name)["metadata"].get("labels") or {}
    return {k: v for k, v in labels.items() if k.startswith("nodetopo.io/")}


def _foreign(cluster: LocalCluster, name: str) -> tuple[dict[str, str], dict[str, str], list[Any]]:
    obj = _node(cluster, name)
    labels = {
        k: v for k, v in (obj["metadata"].get("labels") or {}).items() if not k.startswith("nodetopo.io/")
    }
    return labels, obj["metadata"].get("annotations") or {}, obj["spec"].get("taints") or []


def test_other_labels_taints_and_annotations_are_untouched(
    cluster: LocalCluster, session: ApiSession, node: str
) -> None:
    before = _foreign(cluster, node)
    assert before[:2] == (FOREIGN_LABELS, ANNOTATIONS)
    assert TAINTS[0] in before[2]  # TaintNodesByCondition adds not-ready too
    publisher = NodeLabelPublisher(session, node)
    publisher.publish(FULL)
    assert _ours(cluster, node) == FULL
    publisher.publish({k: v for k, v in FULL.items() if k != "nodetopo.io/numa.count"})
    publisher.publish({k: v for k, v in FULL.items() if k != "nodetopo.io/numa.count"})
    publisher.publish({})
    publisher.publish({})
    assert _ours(cluster, node) == {}
    assert _foreign(cluster, node) == before
    # Our field manager owns nothing but its own keys.
    assert owned_label_keys(_node(cluster, node), field_manager="nodetopo-agent") == set()


def test_dropped_fact_goes_after_two_clean_scans(
    cluster: LocalCluster, session: ApiSession, node: str
) -> None:
    before = _foreign(cluster, node)
    publisher = NodeLabelPublisher(session, node)
    publisher.publish(FULL)
    without = {k: v for k, v in FULL.items() if k != "nodetopo.io/rdma.link-layer"}

    first = publisher.publish(without)
    assert not first.written  # one clean scan without it: nothing to write yet
    assert _ours(cluster, node) == FULL

    second = publisher.publish(without)
    assert second.written
    assert _ours(cluster, node) == without  # exactly that key is gone
    assert _foreign(cluster, node) == before


def test_transient_source_failure_removes_nothing(
    cluster: LocalCluster, session: ApiSession, node: str
) -> None:
    publisher = NodeLabelPublisher(session, node)
    publisher.publish(FULL)
    # The RDMA source fails for five scans: its keys are absent from this round's labels.
    failing = {k: v for k, v in FULL.items() if not k.startswith("nodetopo.io/rdma")}
    for _ in range(5):
        publisher.publish(failing, uncertain_prefixes=("nodetopo.io/rdma",))
    assert _ours(cluster, node) == FULL
    # Keys mapped to None mean the same: unknown this round.
    for _ in range(3):
        publisher.publish({**FULL, "nodetopo.io/gpu.count": None, "nodetopo.io/gpu.model": None})
    assert _ours(cluster, node) == FULL
    # A value seen while its source failed does not replace the last good one.
    publisher.publish({**FULL, "nodetopo.io/rdma.nic-count": "3"}, uncertain_prefixes=("nodetopo.io/rdma",))
    assert _ours(cluster, node)["nodetopo.io/rdma.nic-count"] == "8"


def test_failure_between_absent_scans_restarts_the_count(
    cluster: LocalCluster, session: ApiSession, node: str
) -> None:
    publisher = NodeLabelPublisher(session, node)
    publisher.publish(FULL)
    without = {k: v for k, v in FULL.items() if k != "nodetopo.io/numa.count"}
    publisher.publish(without)
    publisher.publish(without, uncertain_prefixes=("nodetopo.io/numa",))
    publisher.publish(without)
    assert _ours(cluster, node) == FULL
    publisher.publish(without)
    assert _ours(cluster, node) == without


def _events(cluster: LocalCluster, name: str) -> list[dict[str, Any]]:
    selector = f"involvedObject.kind=Node,involvedObject.name={name}"
    status, body = cluster.request("GET", f"/api/v1/namespaces/default/events?fieldSelector={selector}")
    assert status == 200, body
    return list(body["items"])


def test_an_admins_label_on_our_key_is_taken_back_and_said_once(
    cluster: LocalCluster, session: ApiSession, kubectl: Callable[..., Any], node: str
) -> None:
    """Was: ``HTTP 409 … conflict with "kubectl-label"``, fatal to the agent: a crash loop after
    an admin's ``kubectl label --overwrite`` on one of nodetopo's keys and an agent restart."""
    NodeLabelPublisher(session, node).publish(FULL)
    kubectl("label", "node", node, "--overwrite", "nodetopo.io/numa.count=7", user="other")
    restarted = NodeLabelPublisher(session, node)  # a new agent: adopts what it still owns
    outcome = restarted.publish(FULL)
    assert outcome.written
    stored = _node(cluster, node)
    assert _ours(cluster, node) == FULL
    assert {k: v for k, v in stored["metadata"]["labels"].items() if not k.startswith("nodetopo.io/")} == (
        FOREIGN_LABELS
    )
    assert stored["metadata"]["annotations"] == ANNOTATIONS
    assert all(taint in stored["spec"]["taints"] for taint in TAINTS)  # node-lifecycle adds its own
    assert "nodetopo.io/numa.count" in owned_label_keys(stored, field_manager="nodetopo-agent")
    events = _events(cluster, node)
    assert len(events) == 1, events
    event = events[0]
    assert (event["type"], event["reason"]) == ("Warning", "OwnedFieldReasserted")
    assert "label nodetopo.io/numa.count (set to '7' by field manager 'kubectl-label'" in event["message"]
    assert event["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Node",
        "name": node,
        "uid": stored["metadata"]["uid"],
    }
    # Said once: the next publishes own the key again and say nothing.
    restarted.publish({**FULL, "nodetopo.io/numa.count": "4"})
    NodeLabelPublisher(session, node).publish({**FULL, "nodetopo.io/numa.count": "4"})
    assert _ours(cluster, node)["nodetopo.io/numa.count"] == "4"
    assert len(_events(cluster, node)) == 1


def test_a_label_outside_the_prefix_is_never_taken(
    cluster: LocalCluster, session: ApiSession, kubectl: Callable[..., Any], node: str
) -> None:
    """An admin's labels next to ours stay theirs, whatever nodetopo applies."""
    kubectl("label", "node", node, "--overwrite", "team=infra", "nodetopo.io/gpu.count=1", user="other")
    NodeLabelPublisher(session, node).publish(FULL)
    labels = _node(cluster, node)["metadata"]["labels"]
    assert labels["team"] == "infra" and labels["nodetopo.io/gpu.count"] == "8"
    with pytest.raises(ValueError, match=r"nodetopo\.io/"):
        NodeLabelPublisher(session, node).publish({**FULL, "team": "ml"})
    assert _node(cluster, node)["metadata"]["labels"]["team"] == "infra"


def test_an_event_that_cannot_be_posted_does_not_stop_the_takeover(
    cluster: LocalCluster, kubectl: Callable[..., Any], node: str, tmp_path: Path
) -> None:
    """The agent's RBAC without ``create events``: the key is still taken back, and the log says
    why no Event was posted."""
    with connect(str(cluster.kubeconfig_for("publisher"))) as connection:
        NodeLabelPublisher(ApiSession(connection), node).publish(FULL)
    kubectl("label", "node", node, "--overwrite", "nodetopo.io/rdma=false", user="other")
    with connect(str(cluster.kubeconfig_for("publisher"))) as connection:
        session = ApiSession(connection)

        def refused(namespace: str, body: Any) -> dict[str, Any]:
            raise ForbiddenError("create Event in default: HTTP 403: forbidden", status=403)

        session.create_event = refused  # type: ignore[method-assign]
        NodeLabelPublisher(session, node).publish(FULL)
    assert _ours(cluster, node)["nodetopo.io/rdma"] == "true"
    assert _events(cluster, node) == []


def test_unchanged_labels_make_zero_requests(cluster: LocalCluster, session: ApiSession, node: str) -> None:
    publisher = NodeLabelPublisher(session, node)
    mark = cluster.audit_barrier()
    assert publisher.publish(FULL).written
    first = cluster.audit_events(since=mark, user="publisher")
    assert sorted(e["verb"] for e in first) == ["get", "patch"]  # adopt (read once), apply

    mark = cluster.audit_barrier()
    for _ in range(3):
        assert not publisher.publish(dict(FULL)).written
    assert cluster.audit_events(since=mark, user="publisher") == []


def test_restarted_agent_adopts_its_keys_and_keeps_them_while_a_source_fails(
    cluster: LocalCluster, session: ApiSession, node: str
) -> None:
    NodeLabelPublisher(session, node).publish(FULL)
    restarted = NodeLabelPublisher(session, node)
    mark = cluster.audit_barrier()
    failing = {k: v for k, v in FULL.items() if not k.startswith("nodetopo.io/rdma")}
    assert not restarted.publish(failing, uncertain_prefixes=("nodetopo.io/rdma",)).written
    assert [e["verb"] for e in cluster.audit_events(since=mark, user="publisher")] == ["get"]
    assert _ours(cluster, node) == FULL


def test_foreign_key_is_refused_before_any_request(
    cluster: LocalCluster, session: ApiSession, node: str
) -> None:
    publisher = NodeLabelPublisher(session, node)
    mark = cluster.audit_barrier()
    with pytest.raises(ValueError, match=r"'team' is not under 'nodetopo.io/'"):
        publisher.publish({**FULL, "team": "gpu"})
    with pytest.raises(ValueError, match="not a valid label name"):
        publisher.publish({"nodetopo.io/gpu count": "8"})
    assert cluster.audit_events(since=mark, user="publisher") == []


# --------------------------------------------------------------------------------------------
# NFD interop
# --------------------------------------------------------------------------------------------

NODEFEATURE_CRD = Path(__file__).parent / "manifests" / "nodefeature-crd.yaml"


@pytest.fixture(scope="module")
def nodefeature_crd(cluster: LocalCluster) -> LocalCluster:
    cluster.kubectl("apply", "--server-side", "--field-manager=nodetopo-tests", "-f", str(NODEFEATURE_CRD))
    cluster.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s", "crd/nodefeatures.nfd.k8s-sigs.io"
    )
    status, answer = cluster.request(
        "POST",
        "/api/v1/namespaces",
        body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "nodetopo"}},
    )
    assert status in (201, 409), answer
    return cluster


def test_nfd_mode_writes_a_nodefeature_and_leaves_the_node_alone(
    nodefeature_crd: LocalCluster, session: ApiSession, node: str
) -> None:
    cluster = nodefeature_crd
    before = _node(cluster, node)["metadata"]
    publisher = NodeFeaturePublisher(session, node)
    assert publisher.publish(FULL).written
    path = f"/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/nodetopo/nodefeatures/nodetopo-{node}"
    status, feature = cluster.request("GET", path)
    assert status == 200
    assert feature["metadata"]["labels"][NODE_NAME_LABEL] == node
    assert feature["spec"]["labels"] == FULL
    assert _node(cluster, node)["metadata"]["labels"] == before["labels"]
    assert _node(cluster, node)["metadata"]["resourceVersion"] == before["resourceVersion"]

    # Same rules as on the Node: a dropped key goes after two clean scans.
    without = {k: v for k, v in FULL.items() if k != "nodetopo.io/numa.count"}
    assert not publisher.publish(without).written
    assert publisher.publish(without).written
    _, feature = cluster.request("GET", path)
    assert feature["spec"]["labels"] == without
    # A restarted agent adopts the object's labels: unchanged input, no write.
    assert not NodeFeaturePublisher(session, node).publish(without).written


# --------------------------------------------------------------------------------------------
# The tracker alone (no request)
# --------------------------------------------------------------------------------------------


def test_tracker_counts_clean_scans_per_key() -> None:
    tracker = LabelTracker(scans_to_remove=2)
    assert tracker.observe({"nodetopo.io/a": "1", "nodetopo.io/b": "2"}) == {
        "nodetopo.io/a": "1",
        "nodetopo.io/b": "2",
    }
    assert tracker.observe({"nodetopo.io/a": "1"}) == {"nodetopo.io/a": "1", "nodetopo.io/b": "2"}
    assert tracker.absent_scans("nodetopo.io/b") == 1
    assert tracker.observe({"nodetopo.io/b": "3"}) == {"nodetopo.io/a": "1", "nodetopo.io/b": "3"}
    assert tracker.absent_scans("nodetopo.io/b") == 0
    assert tracker.observe({"nodetopo.io/b": "3"}) == {"nodetopo.io/b": "3"}


def test_tracker_takes_a_first_value_even_from_a_failing_source() -> None:
    tracker = LabelTracker()
    assert tracker.observe({"nodetopo.io/rdma": "true"}, uncertain_prefixes=("nodetopo.io/rdma",)) == {
        "nodetopo.io/rdma": "true"
    }


def test_tracker_with_one_scan_removes_at_once() -> None:
    tracker = LabelTracker(applied={"nodetopo.io/a": "1", "nodetopo.io/b": "2"}, scans_to_remove=1)
    assert tracker.observe({"nodetopo.io/a": "1"}) == {"nodetopo.io/a": "1"}
    with pytest.raises(ValueError):
        LabelTracker(scans_to_remove=0)
