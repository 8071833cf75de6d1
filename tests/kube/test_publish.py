"""Publishing the NodeTopology resource against the real kube-apiserver.

nodetopo's writes go through the ``publisher`` static user so the audit log can tell them apart.
"""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Callable
from typing import Any

import kubernetes
import pytest

from nodetopo.errors import ConflictError, ForbiddenError, InvalidError, PublishError, TransientError
from nodetopo.publish import run_publish
from nodetopo.publish.client import ApiSession, parse_retry_after, translate_api_error
from nodetopo.publish.nodetopology import (
    API_VERSION,
    GROUP,
    KIND,
    PLURAL,
    VERSION,
    NodeTopologyPublisher,
    status_content_hash,
)

from . import bodies
from .cluster import LocalCluster, free_port

pytestmark = pytest.mark.k8s

PATH = f"/apis/{GROUP}/{VERSION}/{PLURAL}"


class Clock:
    """A settable UTC clock for ``lastTransitionTime``."""

    def __init__(self) -> None:
        self.now = datetime.datetime(2026, 3, 1, 12, 0, 0, tzinfo=datetime.UTC)

    def __call__(self) -> datetime.datetime:
        return self.now

    def advance(self, seconds: int) -> None:
        self.now += datetime.timedelta(seconds=seconds)


@pytest.fixture
def session(api_client_for: Callable[..., Any]) -> ApiSession:
    return ApiSession(api_client_for("publisher"))


def _get(cluster: LocalCluster, name: str) -> dict[str, Any]:
    status, obj = cluster.request("GET", f"{PATH}/{name}")
    assert status == 200, obj
    return dict(obj)


def _conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in obj["status"]["conditions"]}


def test_created_with_owner_then_updated(
    cluster: LocalCluster, session: ApiSession, make_node: Callable[..., dict[str, Any]]
) -> None:
    node = make_node()
    name = node["metadata"]["name"]
    clock = Clock()
    publisher = NodeTopologyPublisher(session, clock=clock)
    body = bodies.hgx_h100(name)

    outcome = publisher.apply(body)

    assert outcome.written
    obj = _get(cluster, name)
    assert obj["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "name": name,
            "uid": node["metadata"]["uid"],
            "blockOwnerDeletion": False,
        }
    ]
    assert obj["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "nodetopo"}
    assert obj["status"]["summary"] == body["status"]["summary"]
    assert obj["status"]["contentHash"] == body["status"]["contentHash"]
    assert {c["lastTransitionTime"] for c in obj["status"]["conditions"]} == {"2026-03-01T12:00:00Z"}
    managers = {
        (m["manager"], m["operation"], m.get("subresource", "")) for m in obj["metadata"]["managedFields"]
    }
    assert managers == {("nodetopo-agent", "Apply", ""), ("nodetopo-agent", "Apply", "status")}

    # Update: one GPU lost; Ready flips to False; the other conditions keep their time.
    clock.advance(600)
    changed = bodies.variant(body, gpuCount=7)
    changed["status"]["gpus"] = changed["status"]["gpus"][:7]
    changed["status"]["conditions"][0].update(status="False", reason="Degraded", message="GPU 7 lost")
    changed = bodies.finish(changed)
    assert publisher.apply(changed).written

    obj = _get(cluster, name)
    assert obj["status"]["summary"]["gpuCount"] == 7
    assert [g["index"] for g in obj["status"]["gpus"]] == list(range(7))
    conditions = _conditions(obj)
    assert conditions["Ready"]["status"] == "False"
    assert conditions["Ready"]["lastTransitionTime"] == "2026-03-01T12:10:00Z"
    assert conditions["Consistent"]["lastTransitionTime"] == "2026-03-01T12:00:00Z"
    assert conditions["SourceNvml"]["lastTransitionTime"] == "2026-03-01T12:00:00Z"


def test_transition_times_survive_a_new_publisher(
    cluster: LocalCluster, session: ApiSession, make_node: Callable[..., dict[str, Any]]
) -> None:
    """A restarted agent reads the object once and keeps the times of unchanged conditions."""
    name = make_node()["metadata"]["name"]
    first = Clock()
    NodeTopologyPublisher(session, clock=first).apply(bodies.hgx_h100(name))
    later = Clock()
    later.advance(3600)
    changed = bodies.variant(bodies.hgx_h100(name), rdmaNICs=7)
    assert NodeTopologyPublisher(session, clock=later).apply(changed).written
    obj = _get(cluster, name)
    assert obj["status"]["summary"]["rdmaNICs"] == 7
    assert {c["lastTransitionTime"] for c in obj["status"]["conditions"]} == {"2026-03-01T12:00:00Z"}


def test_unchanged_topology_makes_zero_requests(
    cluster: LocalCluster, session: ApiSession, make_node: Callable[..., dict[str, Any]]
) -> None:
    name = make_node()["metadata"]["name"]
    publisher = NodeTopologyPublisher(session)
    body = bodies.hgx_h100(name)

    mark = cluster.audit_barrier()
    assert publisher.apply(body).written
    first = cluster.audit_events(since=mark, user="publisher")
    # Node read once (owner UID), object read once (previous conditions), two applies.
    assert sorted(
        (e["verb"], e["objectRef"]["resource"], e["objectRef"].get("subresource", "")) for e in first
    ) == [
        ("get", "nodes", ""),
        ("get", "nodetopologies", ""),
        ("patch", "nodetopologies", ""),
        ("patch", "nodetopologies", "status"),
    ]

    mark = cluster.audit_barrier()
    for _ in range(3):
        assert not publisher.apply(bodies.hgx_h100(name)).written  # an equal, freshly built body
    assert cluster.audit_events(since=mark, user="publisher") == []

    # A change is written with exactly the two applies: no re-read of the Node or the object.
    mark = cluster.audit_barrier()
    assert publisher.apply(bodies.variant(body, migDevices=0, rdmaNICs=4)).written
    again = cluster.audit_events(since=mark, user="publisher")
    assert sorted((e["verb"], e["objectRef"].get("subresource", "")) for e in again) == [
        ("patch", ""),
        ("patch", "status"),
    ]


def test_node_deletion_garbage_collects_the_resource(
    controller_manager: LocalCluster, session: ApiSession, make_node: Callable[..., dict[str, Any]]
) -> None:
    cluster = controller_manager
    name = make_node()["metadata"]["name"]
    NodeTopologyPublisher(session).apply(bodies.hgx_h100(name))
    assert _get(cluster, name)["status"]["nodeName"] == name

    status, _ = cluster.request("DELETE", f"/api/v1/nodes/{name}")
    assert status == 200
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status, _ = cluster.request("GET", f"{PATH}/{name}")
        if status == 404:
            break
        time.sleep(0.5)
    assert status == 404, "the garbage collector did not delete the NodeTopology of a deleted Node"


def test_conflicting_status_owner_is_reported_not_overwritten(
    cluster: LocalCluster,
    session: ApiSession,
    kubectl: Callable[..., Any],
    make_node: Callable[..., dict[str, Any]],
) -> None:
    name = make_node()["metadata"]["name"]
    publisher = NodeTopologyPublisher(session)
    publisher.apply(bodies.hgx_h100(name))
    # Someone else takes over the GPU count with server-side apply (force, as kubectl would).
    patch = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name},
        "status": {"summary": {"gpuCount": 4, "islands": "1x8", "rdmaNICs": 8, "migDevices": 0}},
    }
    kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",
        "--field-manager=someone-else",
        "--subresource=status",
        "-f",
        "-",
        user="other",
        input=json.dumps(patch),
    )

    with pytest.raises(ConflictError) as info:
        publisher.apply(bodies.variant(bodies.hgx_h100(name), gpuCount=3))
    assert info.value.status == 409
    assert not info.value.retryable
    assert 'conflict with "someone-else"' in str(info.value)
    assert ".status.summary.gpuCount" in str(info.value)
    assert _get(cluster, name)["status"]["summary"]["gpuCount"] == 4

    # Not remembered as written: the next attempt tries (and fails) again instead of skipping.
    with pytest.raises(ConflictError):
        publisher.apply(bodies.variant(bodies.hgx_h100(name), gpuCount=3))


def test_forbidden_is_translated(
    api_client_for: Callable[..., Any], make_node: Callable[..., dict[str, Any]]
) -> None:
    name = make_node()["metadata"]["name"]
    publisher = NodeTopologyPublisher(ApiSession(api_client_for("nobody")))
    with pytest.raises(ForbiddenError) as info:
        publisher.apply(bodies.hgx_h100(name))
    assert info.value.status == 403
    assert 'User "nodetopo-test-nobody" cannot get resource "nodes"' in str(info.value)
    assert isinstance(info.value.__cause__, kubernetes.client.ApiException)


def test_unreachable_server_is_transient(cluster: LocalCluster, tmp_path: Any) -> None:
    config = kubernetes.client.Configuration()
    config.host = f"https://127.0.0.1:{free_port()}"
    config.ssl_ca_cert = str(cluster.ca_file)
    config.retries = 0
    with kubernetes.client.ApiClient(config) as client, pytest.raises(TransientError) as info:
        NodeTopologyPublisher(ApiSession(client)).apply(bodies.hgx_h100("unreachable"))
    assert info.value.retryable
    assert "read Node unreachable" in str(info.value)


def test_run_publish_one_shot(cluster: LocalCluster, make_node: Callable[..., dict[str, Any]]) -> None:
    name = make_node(labels={"kubernetes.io/hostname": "x"})["metadata"]["name"]
    outcome = run_publish(
        bodies.pcie_pair(name),
        {"nodetopo.io/gpu.count": "2", "nodetopo.io/rdma": "false"},
        node_name=name,
        kubeconfig=str(cluster.kubeconfig_for("publisher")),
        nfd=False,
    )
    assert outcome.topology.written and outcome.labels.written
    assert _get(cluster, name)["status"]["summary"]["gpuModel"] == "NVIDIA L40S"
    _, node = cluster.request("GET", f"/api/v1/nodes/{name}")
    assert node["metadata"]["labels"] == {
        "kubernetes.io/hostname": "x",
        "nodetopo.io/gpu.count": "2",
        "nodetopo.io/rdma": "false",
    }
    # A one-shot run is one clean, final scan: a key it lacks goes at once, an uncertain one stays.
    run_publish(
        bodies.pcie_pair(name),
        {"nodetopo.io/gpu.count": "2"},
        node_name=name,
        kubeconfig=str(cluster.kubeconfig_for("publisher")),
        nfd=False,
        uncertain_prefixes=("nodetopo.io/gpu.",),
    )
    _, node = cluster.request("GET", f"/api/v1/nodes/{name}")
    assert node["metadata"]["labels"] == {"kubernetes.io/hostname": "x", "nodetopo.io/gpu.count": "2"}


# --------------------------------------------------------------------------------------------
# Pure pieces (no request)
# --------------------------------------------------------------------------------------------


def test_content_hash_ignores_times_and_itself() -> None:
    status = bodies.hgx_h100("n")["status"]
    timed = dict(status, contentHash="0" * 64)
    timed["conditions"] = [dict(c, lastTransitionTime="2020-01-01T00:00:00Z") for c in status["conditions"]]
    assert status_content_hash(timed) == status_content_hash(status)
    flipped = dict(
        status, conditions=[dict(status["conditions"][0], status="False"), *status["conditions"][1:]]
    )
    assert status_content_hash(flipped) != status_content_hash(status)


@pytest.mark.parametrize(
    ("header", "seconds"),
    [("7", 7.0), (None, None), ("soon", None), ("Sun, 01 Mar 2026 12:00:30 GMT", 30.0)],
)
def test_retry_after(header: str | None, seconds: float | None) -> None:
    now = datetime.datetime(2026, 3, 1, 12, 0, 0, tzinfo=datetime.UTC).timestamp()
    assert parse_retry_after(header, now=now) == seconds


@pytest.mark.parametrize(
    ("status", "kind", "retryable"),
    [
        (409, ConflictError, False),
        (401, ForbiddenError, False),
        (403, ForbiddenError, False),
        (400, InvalidError, False),
        (422, InvalidError, False),
        (429, TransientError, True),
        (503, TransientError, True),
        (404, PublishError, True),
    ],
)
def test_status_codes_map_to_error_classes(status: int, kind: type[PublishError], retryable: bool) -> None:
    error = kubernetes.client.ApiException(status=status, reason="x")
    error.headers = {"Retry-After": "3"}
    translated = translate_api_error(error, action="apply")
    assert isinstance(translated, kind)
    assert translated.retryable is retryable
    assert translated.status == status
    if kind is TransientError:
        assert translated.retry_after == 3.0
