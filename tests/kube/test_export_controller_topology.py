"""``nodetopo export-controller --export kueue --export kai`` on the real API server, with the chart's
RBAC for those exports and the Topology CRDs (tests/kube/topology_crds.py): each Topology is created
from the NodeTopologies, replaced (its levels are immutable) when the fleet's levels change, waited
for while a finalizer holds it, and never written when it is not the controller's."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from kube.chart_support import render
from nodetopo import export
from nodetopo.export.controller import FIELD_MANAGER, NODETOPOLOGY_PATH, OWNER_LABEL, OWNER_VALUE

from .cluster import LocalCluster
from .test_export_controller import _controller, _put_topology
from .topology_crds import install_topology_crds

pytestmark = pytest.mark.k8s

RUN = uuid.uuid4().hex[:6]
NAME = f"nt-{RUN}"
RELEASE = "exptopo"
ACCOUNT = f"{RELEASE}-nodetopo-export-controller"
PATHS = {"kueue": "/apis/kueue.x-k8s.io/v1beta2/topologies", "kai": "/apis/kai.scheduler/v1alpha1/topologies"}


@pytest.fixture(scope="module")
def topology_kubeconfig(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The CRDs, the chart's export-controller account and role for kueue + kai, and its token."""
    install_topology_crds(cluster)
    docs = render(
        RELEASE, "nodetopo",
        "--set", "exportController.enabled=true", "--set", "exportController.exports={kueue,kai}",
    )  # fmt: skip
    mine = [d for d in docs if d["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding")]
    mine = [d for d in mine if d["metadata"]["name"] == ACCOUNT]
    assert len(mine) == 3, [d["metadata"]["name"] for d in docs]
    cluster.kubectl("create", "namespace", "nodetopo", check=False)
    cluster.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(mine))
    status, answer = cluster.request(
        "POST",
        f"/api/v1/namespaces/nodetopo/serviceaccounts/{ACCOUNT}/token",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    assert status == 201, answer
    path = tmp_path_factory.mktemp("export-topology") / "controller.kubeconfig"
    return cluster.write_kubeconfig(path, token=answer["status"]["token"])


def _expected(cluster: LocalCluster, fmt: str) -> list[str]:
    """The levels ``nodetopo export`` gives for every NodeTopology the cluster has now (other tests'
    too: the controller sees the whole fleet)."""
    status, listed = cluster.request("GET", NODETOPOLOGY_PATH)
    assert status == 200, listed
    places = export.places_from_nodetopologies(listed["items"])
    result = export.kueue(places, name=NAME) if fmt == "kueue" else export.kai(places, name=NAME)
    return [level["nodeLabel"] for level in result.objects[0]["spec"]["levels"]]


def _levels(body: dict[str, Any] | None) -> list[str] | None:
    return None if body is None else [level["nodeLabel"] for level in body["spec"]["levels"]]


def _wait(
    cluster: LocalCluster,
    fmt: str,
    ok: Callable[[dict[str, Any] | None], bool],
    log: Path,
    timeout: float = 60,
) -> dict[str, Any] | None:
    deadline = time.monotonic() + 60
    body: Any = None
    while time.monotonic() < deadline:
        status, body = cluster.request("GET", f"{PATHS[fmt]}/{NAME}")
        current = body if status == 200 else None
        if ok(current):
            return current
        time.sleep(0.1)
    raise AssertionError(
        f"{fmt} Topology {NAME} never matched; last: {body}\n--- log ---\n{log.read_text()[-3000:]}"
    )


def test_topologies_follow_the_fleets_levels(
    cluster: LocalCluster, topology_kubeconfig: Path, tmp_path: Path
) -> None:
    log = tmp_path / "controller.log"
    nodes = [f"exptopo-{RUN}-{i}" for i in range(2)]
    deep = f"exptopo-{RUN}-deep"
    created: list[str] = []
    args = ("--export", "kueue", "--export", "kai", "--topology-name", NAME)
    try:
        for node in nodes:
            _put_topology(cluster, node, f"leaf-{RUN}")
            created.append(node)
        with _controller(topology_kubeconfig, log, *args):
            first = {}
            for fmt in PATHS:
                want = _expected(cluster, fmt)
                body = _wait(cluster, fmt, lambda b, w=want: _levels(b) == w, log)
                assert body is not None
                assert body["metadata"]["labels"] == {OWNER_LABEL: OWNER_VALUE}
                assert {f["manager"] for f in body["metadata"]["managedFields"]} == {FIELD_MANAGER}
                first[fmt] = body["metadata"]["uid"]

            # a node five tiers deep joins: the levels change; immutable, so each Topology is replaced
            _put_topology(cluster, deep, *(f"t{i}-{RUN}" for i in range(5)))
            created.append(deep)
            for fmt in PATHS:
                want = _expected(cluster, fmt)
                assert "nodetopo.io/fabric.tier-4" in want
                body = _wait(cluster, fmt, lambda b, w=want: _levels(b) == w, log)
                assert body is not None and body["metadata"]["uid"] != first[fmt]

            # Kueue holds a Topology a ResourceFlavor names with a finalizer: the controller waits
            status, answer = cluster.request(
                "PATCH",
                f"{PATHS['kueue']}/{NAME}",
                body={"metadata": {"finalizers": ["example.com/in-use"]}},
                content_type="application/merge-patch+json",
            )
            assert status == 200, answer
            held = answer["metadata"]["uid"]
            assert cluster.request("DELETE", f"{NODETOPOLOGY_PATH}/{deep}")[0] == 200  # it leaves
            created.remove(deep)
            _wait(cluster, "kueue", lambda b: b is not None and "deletionTimestamp" in b["metadata"], log)
            deadline = time.monotonic() + 30
            while "being deleted (a finalizer holds it): waiting" not in log.read_text():
                assert time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.2)
            status, answer = cluster.request(
                "PATCH",
                f"{PATHS['kueue']}/{NAME}",
                body={"metadata": {"finalizers": None}},
                content_type="application/merge-patch+json",
            )
            assert status == 200, answer
            want = _expected(cluster, "kueue")
            body = _wait(cluster, "kueue", lambda b: _levels(b) == want and b["metadata"]["uid"] != held, log)
            assert body is not None and "deletionTimestamp" not in body["metadata"]

        # a Topology of that name that is not the controller's is never written
        for fmt in PATHS:
            assert cluster.request("DELETE", f"{PATHS[fmt]}/{NAME}")[0] == 200
        _wait(cluster, "kai", lambda b: b is None, log)
        theirs = {
            "apiVersion": "kai.scheduler/v1alpha1",
            "kind": "Topology",
            "metadata": {"name": NAME, "labels": {"team": "network"}},
            "spec": {"levels": [{"nodeLabel": "example.com/rack"}, {"nodeLabel": "kubernetes.io/hostname"}]},
        }
        status, before = cluster.request("POST", PATHS["kai"], body=theirs)
        assert status == 201, before
        with _controller(topology_kubeconfig, log, *args):
            _wait(cluster, "kueue", lambda b: b is not None, log)  # the controller has run a pass
            deadline = time.monotonic() + 30
            while f"Topology {NAME} exists and is not labelled" not in log.read_text():
                assert time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.2)
        status, now = cluster.request("GET", f"{PATHS['kai']}/{NAME}")
        assert status == 200 and now["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    finally:
        for node in created:
            cluster.request("DELETE", f"{NODETOPOLOGY_PATH}/{node}")
        for path in PATHS.values():
            cluster.request("PATCH", f"{path}/{NAME}", body={"metadata": {"finalizers": None}},
                            content_type="application/merge-patch+json")  # fmt: skip
            cluster.request("DELETE", f"{path}/{NAME}")


def test_the_charts_role_for_topologies_grants_nothing_else(
    cluster: LocalCluster, topology_kubeconfig: Path
) -> None:
    user = f"system:serviceaccount:nodetopo:{ACCOUNT}"
    expected = {
        ("list", "nodetopologies.nodetopo.io"): "yes",
        ("get", "nodetopologies.nodetopo.io"): "no",
        ("patch", "topologies.kueue.x-k8s.io"): "yes",
        ("delete", "topologies.kueue.x-k8s.io"): "yes",
        ("update", "topologies.kueue.x-k8s.io"): "no",
        ("patch", "topologies.kai.scheduler"): "yes",
        ("create", "resourceflavors.kueue.x-k8s.io"): "no",
        ("patch", "hypernodes.topology.volcano.sh"): "no",
        ("patch", "nodes"): "no",
        ("list", "secrets"): "no",
    }
    seen = {}
    for verb, resource in expected:
        done = cluster.kubectl("auth", "can-i", verb, resource, f"--as={user}", check=False)
        seen[(verb, resource)] = done.stdout.strip()
    assert seen == expected
