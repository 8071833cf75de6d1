"""The node confinement follows the install: deploy/ installed twice, each time into another
namespace with renamed objects (kustomize ``namespace:`` + ``namePrefix:``), still confines each
install's agent to its own node; an agent identity without a node-bound token is denied outright.

Before the confinement keyed on the agent's role, the policy named
``system:serviceaccount:nodetopo:nodetopo-agent`` literally: under an override node A's agent could
taint, cordon and relabel node B (these tests failed).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from agent.kube_support import DEPLOY

pytestmark = pytest.mark.k8s

NODETOPOLOGIES = "/apis/nodetopo.io/v1alpha1/nodetopologies"


def overlay(directory: Path, *, namespace: str, prefix: str) -> Path:
    directory.mkdir(parents=True)
    (directory / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(DEPLOY, directory)],
                "namespace": namespace,
                "namePrefix": prefix,
            }
        )
    )
    return directory


@pytest.fixture
def installs(cluster: Any, tmp_path: Path) -> Iterator[list[dict[str, str]]]:
    """Two installs of deploy/: namespaces nt-a-*/nt-b-*, every object renamed a*-/b*-."""
    suffix = uuid.uuid4().hex[:6]
    created: list[dict[str, str]] = []
    rendered: list[dict[str, Any]] = []
    for tag in ("a", "b"):
        namespace, prefix = f"nt-{tag}-{suffix}", f"{tag}{suffix}-"
        root = overlay(tmp_path / tag, namespace=namespace, prefix=prefix)
        docs = [d for d in yaml.safe_load_all(cluster.kubectl("kustomize", str(root)).stdout) if d]
        rendered += [d for d in docs if d["kind"] != "CustomResourceDefinition"]
        cluster.kubectl("apply", "-k", str(root))
        created.append({"namespace": namespace, "service_account": f"{prefix}nodetopo-agent"})
    for install in created:
        wait_until_enforced(cluster, install)
    try:
        yield created
    finally:
        for doc in rendered:  # everything but the shared CRD
            scope = (
                ["-n", doc["metadata"]["namespace"]] if doc["kind"] in ("ServiceAccount", "DaemonSet") else []
            )
            cluster.kubectl(
                "delete", doc["kind"], doc["metadata"]["name"], *scope, "--ignore-not-found", "--wait=false"
            )


def wait_until_enforced(cluster: Any, install: dict[str, str], timeout: float = 30) -> None:
    """Until the Events policy of ``install`` denies its agent identity (the API server loads a new
    policy and its binding a moment after they are created): a token bound to no Pod may not
    create an Event."""
    import time

    path = f"/api/v1/namespaces/{install['namespace']}/serviceaccounts/{install['service_account']}/token"
    status, answer = cluster.request(
        "POST",
        path,
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 600},
        },
    )
    assert status == 201, answer
    token = answer["status"]["token"]
    event = _event("default", "Node", "nodetopo-policy-not-loaded-yet")
    deadline = time.monotonic() + timeout
    while True:
        posted, body = post(cluster, token, "/api/v1/namespaces/default/events", event)
        if posted == 403:
            return
        assert time.monotonic() < deadline, (posted, body)
        time.sleep(0.2)


def patch(cluster: Any, token: str, path: str, body: dict[str, Any]) -> tuple[int, str]:
    """A merge patch with a bearer token; (HTTP status, body text)."""
    import ssl
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        f"{cluster.server}{path}", data=json.dumps(body).encode(), method="PATCH"
    )
    request.add_header("Authorization", f"Bearer {token}")
    request.add_header("Content-Type", "application/merge-patch+json")
    context = ssl.create_default_context(cafile=str(cluster.ca_file))
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


ATTACKS = {
    "a NoExecute taint": {"spec": {"taints": [{"key": "evil", "value": "1", "effect": "NoExecute"}]}},
    "unschedulable": {"spec": {"unschedulable": True}},
    "a control-plane role label": {"metadata": {"labels": {"node-role.kubernetes.io/control-plane": ""}}},
    "another team's label": {"metadata": {"labels": {"team": "hijacked"}}},
    "a nodetopo.io/ label": {"metadata": {"labels": {"nodetopo.io/gpu.count": "8"}}},
}


def test_each_install_confines_its_agent_under_namespace_and_name_overrides(
    cluster: Any,
    installs: list[dict[str, str]],
    make_node: Callable[..., dict[str, Any]],
    node_bound_token: Callable[..., Any],
) -> None:
    nodes = [make_node(labels={"team": "ml"}) for _ in installs]
    names = [n["metadata"]["name"] for n in nodes]
    tokens = [
        node_bound_token(name, namespace=i["namespace"], service_account=i["service_account"])
        for name, i in zip(names, installs, strict=True)
    ]
    for mine, other, token in ((0, 1, tokens[0]), (1, 0, tokens[1])):
        assert token.username.startswith(f"system:serviceaccount:{installs[mine]['namespace']}:")
        # its own node: nodetopo.io/ labels only
        status, body = patch(
            cluster, token.token, f"/api/v1/nodes/{names[mine]}", ATTACKS["a nodetopo.io/ label"]
        )
        assert status == 200, body
        for what, attack in ATTACKS.items():
            status, body = patch(cluster, token.token, f"/api/v1/nodes/{names[other]}", attack)
            assert status == 403 and "may change only its own Node" in body, (what, status, body)
            if what != "a nodetopo.io/ label":
                status, body = patch(cluster, token.token, f"/api/v1/nodes/{names[mine]}", attack)
                assert status == 403, (what, status, body)
    for name in names:  # nothing of the attacks landed
        status, node = cluster.request("GET", f"/api/v1/nodes/{name}")
        assert node["metadata"]["labels"].get("team") == "ml"
        assert "node-role.kubernetes.io/control-plane" not in node["metadata"]["labels"]
        assert not node["spec"].get("unschedulable")
        assert all(t["key"] != "evil" for t in node["spec"].get("taints", []))  # TaintNodesByCondition's stay


def test_another_nodes_nodetopology_is_denied_under_overrides(
    cluster: Any,
    installs: list[dict[str, str]],
    make_node: Callable[..., dict[str, Any]],
    node_bound_token: Callable[..., Any],
    api_client_for: Callable[..., Any],
) -> None:
    import kubernetes

    mine, other = make_node(), make_node()
    token = node_bound_token(
        mine["metadata"]["name"],
        namespace=installs[1]["namespace"],
        service_account=installs[1]["service_account"],
    )
    custom = kubernetes.client.CustomObjectsApi(api_client_for(token=token.token))
    body = {
        "apiVersion": "nodetopo.io/v1alpha1",
        "kind": "NodeTopology",
        "metadata": {
            "name": other["metadata"]["name"],
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "name": other["metadata"]["name"],
                    "uid": other["metadata"]["uid"],
                }
            ],
        },
    }
    with pytest.raises(kubernetes.client.ApiException) as info:
        custom.create_cluster_custom_object("nodetopo.io", "v1alpha1", "nodetopologies", body)
    assert info.value.status == 403 and "may change only its own Node" in info.value.body


def test_an_agent_identity_without_a_node_bound_token_is_denied(
    cluster: Any, installs: list[dict[str, str]], make_node: Callable[..., dict[str, Any]]
) -> None:
    """Fails closed: the install's service account with a token bound to no Pod may write nothing."""
    node = make_node()
    install = installs[0]
    path = f"/api/v1/namespaces/{install['namespace']}/serviceaccounts/{install['service_account']}/token"
    status, answer = cluster.request(
        "POST",
        path,
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 600},
        },
    )
    assert status == 201, answer
    status, body = patch(
        cluster,
        answer["status"]["token"],
        f"/api/v1/nodes/{node['metadata']['name']}",
        ATTACKS["a nodetopo.io/ label"],
    )
    assert status == 403 and "not bound to a Pod on a Node" in body, body


def test_admins_and_other_service_accounts_are_not_subject_to_the_policy(
    cluster: Any, installs: list[dict[str, str]], make_node: Callable[..., dict[str, Any]]
) -> None:
    node = make_node(labels={"team": "ml"})
    status, body = cluster.request(
        "PATCH",
        f"/api/v1/nodes/{node['metadata']['name']}",
        body={"spec": {"unschedulable": True}},
        content_type="application/merge-patch+json",
    )
    assert status == 200, body


def post(cluster: Any, token: str, path: str, body: dict[str, Any]) -> tuple[int, str]:
    """A POST with a bearer token; (HTTP status, body text)."""
    import ssl
    import urllib.error
    import urllib.request

    request = urllib.request.Request(f"{cluster.server}{path}", data=json.dumps(body).encode(), method="POST")
    request.add_header("Authorization", f"Bearer {token}")
    request.add_header("Content-Type", "application/json")
    context = ssl.create_default_context(cafile=str(cluster.ca_file))
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def _event(namespace: str, kind: str, name: str, component: str = "nodetopo-agent") -> dict[str, Any]:
    involved = {"apiVersion": "v1", "kind": kind, "name": name}
    if kind == "Pod":
        involved["namespace"] = namespace
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{name}.", "namespace": namespace},
        "involvedObject": involved,
        "reason": "OwnedFieldReasserted",
        "message": "m",
        "type": "Warning",
        "source": {"component": component},
        "firstTimestamp": "2026-01-01T00:00:00Z",
        "lastTimestamp": "2026-01-01T00:00:00Z",
        "count": 1,
    }


def test_the_agent_creates_events_only_about_its_own_node_in_default(
    cluster: Any,
    installs: list[dict[str, str]],
    make_node: Callable[..., dict[str, Any]],
    node_bound_token: Callable[..., Any],
) -> None:
    """RBAC grants ``create events`` cluster-wide; the policy admits only the agent's own word."""
    mine, other = (make_node()["metadata"]["name"] for _ in range(2))
    install = installs[1]
    token = node_bound_token(mine, namespace=install["namespace"], service_account=install["service_account"])
    events = "/api/v1/namespaces/{}/events"
    for kind in ("Node", "NodeTopology"):
        status, body = post(cluster, token.token, events.format("default"), _event("default", kind, mine))
        assert status == 201, (kind, status, body)
    refused = {
        "another node": ("default", _event("default", "Node", other)),
        "a spoofed kubelet": ("default", _event("default", "Node", mine, component="kubelet")),
        "a workload's namespace": (install["namespace"], _event(install["namespace"], "Pod", mine)),
    }
    for what, (namespace, event) in refused.items():
        status, body = post(cluster, token.token, events.format(namespace), event)
        assert status == 403 and "may only create core/v1 Events" in body, (what, status, body)


def test_the_agent_takes_back_its_key_with_its_real_rights_and_says_so(
    cluster: Any,
    installs: list[dict[str, str]],
    make_node: Callable[..., dict[str, Any]],
    node_bound_token: Callable[..., Any],
    tmp_path: Path,
) -> None:
    """The label takeover and its Event, as the installed agent's identity (RBAC + both policies)."""
    from nodetopo.kube.config import ClusterAccess
    from nodetopo.kube.session import ApiSession
    from nodetopo.kube.transport import KubeConnection
    from nodetopo.publish.node_labels import NodeLabelPublisher

    name = make_node(labels={"team": "ml"})["metadata"]["name"]
    install = installs[0]
    token = node_bound_token(name, namespace=install["namespace"], service_account=install["service_account"])
    access = ClusterAccess(server=cluster.server, ca_file=str(cluster.ca_file), token=token.token)
    labels = {"nodetopo.io/gpu.count": "8", "nodetopo.io/numa.count": "2"}
    with KubeConnection(access) as connection:
        NodeLabelPublisher(ApiSession(connection), name).publish(labels)
    cluster.kubectl("label", "node", name, "--overwrite", "nodetopo.io/numa.count=7", "team=infra")
    with KubeConnection(access) as connection:
        NodeLabelPublisher(ApiSession(connection), name).publish(labels)
    _, node = cluster.request("GET", f"/api/v1/nodes/{name}")
    assert node["metadata"]["labels"]["nodetopo.io/numa.count"] == "2"
    assert node["metadata"]["labels"]["team"] == "infra"
    selector = f"involvedObject.kind=Node,involvedObject.name={name}"
    _, found = cluster.request("GET", f"/api/v1/namespaces/default/events?fieldSelector={selector}")
    assert [e["reason"] for e in found["items"]] == ["OwnedFieldReasserted"], found["items"]
