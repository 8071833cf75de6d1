"""RBAC + the ValidatingAdmissionPolicy confine a token bound to a Pod on node A to node A.

The token is requested for a Pod (spec.nodeName=A) of deploy/'s ServiceAccount; its userInfo.extra
carries authentication.kubernetes.io/node-name=A, which the policy keys on.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from agent.kube_support import NAMESPACE, SERVICE_ACCOUNT, apply_deploy
from agent.support import DGX_H100

from kube.bodies import apply_nodetopology
from nodetopo.errors import ForbiddenError
from nodetopo.kube.session import ApiSession
from nodetopo.publish.nodetopology import owner_reference
from nodetopo.resource.body import to_nodetopology
from nodetopo.topology.discover import bundle_context, scan

pytestmark = pytest.mark.k8s

GROUP, VERSION, PLURAL = "nodetopo.io", "v1alpha1", "nodetopologies"


@pytest.fixture
def two_nodes(
    cluster: Any,
    tmp_path: Path,
    make_node: Callable[..., dict[str, Any]],
    node_bound_token: Callable[..., Any],
    api_client_for: Callable[..., Any],
) -> tuple[ApiSession, Any, dict[str, Any], dict[str, Any]]:
    apply_deploy(cluster, tmp_path)
    node_a = make_node(labels={"team": "ml"}, annotations={"owner": "ops"})
    node_b = make_node(labels={"team": "ml"})
    token = node_bound_token(node_a["metadata"]["name"], namespace=NAMESPACE, service_account=SERVICE_ACCOUNT)
    client = api_client_for(token=token.token)
    return ApiSession(client), client, node_a, node_b


def topology(name: str, owner: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "NodeTopology",
        "metadata": {
            "name": name,
            "labels": {"app.kubernetes.io/managed-by": "nodetopo"},
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "name": owner["metadata"]["name"],
                    "uid": owner["metadata"]["uid"],
                    "blockOwnerDeletion": False,
                }
            ],
        },
    }


def node_patch(name: str, **metadata: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, **metadata}}


def denied(call: Callable[[], Any], reason: str) -> str:
    with pytest.raises(ForbiddenError) as info:
        call()
    message = str(info.value)
    assert reason in message, message
    return message


def test_own_node_labels_and_nodetopology_are_allowed(two_nodes: Any, cluster: Any) -> None:
    session, _, node_a, _ = two_nodes
    a = node_a["metadata"]["name"]
    stored = session.apply_node(a, node_patch(a, labels={"nodetopo.io/gpu.count": "8"}))
    assert stored["metadata"]["labels"]["nodetopo.io/gpu.count"] == "8"
    assert stored["metadata"]["labels"]["team"] == "ml"  # other labels untouched
    session.apply_cluster_object(GROUP, VERSION, PLURAL, a, topology(a, node_a), status=False)
    body = to_nodetopology(scan(bundle_context(DGX_H100)).topology, a)
    stored = apply_nodetopology(
        session, body, owner=owner_reference(node_a), previous_conditions=[], now="2026-01-01T00:00:00Z"
    )
    assert stored["status"]["nodeName"] == a and stored["status"]["summary"]["gpuCount"] == 8


def test_other_nodes_labels_are_denied(two_nodes: Any) -> None:
    session, _, node_a, node_b = two_nodes
    b = node_b["metadata"]["name"]
    message = denied(
        lambda: session.apply_node(b, node_patch(b, labels={"nodetopo.io/gpu.count": "8"})),
        "may change only its own Node and NodeTopology",
    )
    assert node_a["metadata"]["name"] in message and b in message


def test_non_prefix_labels_on_own_node_are_denied(two_nodes: Any) -> None:
    session, client, node_a, _ = two_nodes
    a = node_a["metadata"]["name"]
    denied(  # a new key
        lambda: session.apply_node(a, node_patch(a, labels={"kubernetes.io/hostname": "x"})),
        "only labels under nodetopo.io/",
    )
    core = kubernetes.client.CoreV1Api(client)
    for labels in ({"team": "hijacked"}, {"team": None}):  # change or remove another's label
        with pytest.raises(kubernetes.client.ApiException) as info:
            core.patch_node(a, {"metadata": {"labels": labels}})
        assert info.value.status == 403 and "only labels under nodetopo.io/" in info.value.body


def test_taints_and_annotations_on_own_node_are_denied(two_nodes: Any) -> None:
    session, _, node_a, _ = two_nodes
    a = node_a["metadata"]["name"]
    taint = {**node_patch(a), "spec": {"taints": [{"key": "evil", "value": "1", "effect": "NoSchedule"}]}}
    denied(lambda: session.apply_node(a, taint), "may not change a Node's spec")
    denied(
        lambda: session.apply_node(a, node_patch(a, annotations={"nodetopo.io/note": "x"})),
        "may not change a Node's spec (taints ...), annotations",
    )
    unschedulable = {**node_patch(a), "spec": {"unschedulable": True}}
    denied(lambda: session.apply_node(a, unschedulable), "may not change a Node's spec")


def test_other_nodes_nodetopology_is_denied(two_nodes: Any) -> None:
    session, _, _, node_b = two_nodes
    b = node_b["metadata"]["name"]
    denied(
        lambda: session.apply_cluster_object(GROUP, VERSION, PLURAL, b, topology(b, node_b), status=False),
        "may change only its own Node and NodeTopology",
    )


def test_own_nodetopology_owned_by_another_uid_is_denied(two_nodes: Any) -> None:
    session, _, node_a, node_b = two_nodes
    a = node_a["metadata"]["name"]
    wrong_owner = topology(a, node_b)
    denied(
        lambda: session.apply_cluster_object(GROUP, VERSION, PLURAL, a, wrong_owner, status=False),
        "must be owned by Node " + a,
    )
    forged = topology(a, node_a)
    forged["metadata"]["ownerReferences"][0]["uid"] = "00000000-0000-0000-0000-000000000000"
    denied(
        lambda: session.apply_cluster_object(GROUP, VERSION, PLURAL, a, forged, status=False),
        "must be owned by Node " + a,
    )
    no_owner = topology(a, node_a)
    no_owner["metadata"]["ownerReferences"] = []
    denied(
        lambda: session.apply_cluster_object(GROUP, VERSION, PLURAL, a, no_owner, status=False),
        "must be owned by Node " + a,
    )


def test_every_delete_and_node_create_is_denied(two_nodes: Any, cluster: Any) -> None:
    session, client, node_a, _ = two_nodes
    a = node_a["metadata"]["name"]
    session.apply_cluster_object(GROUP, VERSION, PLURAL, a, topology(a, node_a), status=False)
    core = kubernetes.client.CoreV1Api(client)
    custom = kubernetes.client.CustomObjectsApi(client)
    for call in (
        lambda: custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, a),
        lambda: core.delete_node(a),
        lambda: core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": a + "-new"}}),
        lambda: core.list_node(),
        lambda: core.list_namespaced_secret("kube-system"),
    ):
        with pytest.raises(kubernetes.client.ApiException) as info:
            call()
        assert info.value.status == 403, info.value.body
    status, _ = cluster.request("GET", f"/apis/{GROUP}/{VERSION}/{PLURAL}/{a}")
    assert status == 200  # still there
