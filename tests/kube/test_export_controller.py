"""``nodetopo export-controller`` on the real API server, with deploy/export/'s RBAC and Volcano's
HyperNode CRD (tests/kube/volcano_crd.py): HyperNodes follow NodeTopologies as nodes join and
leave, and a HyperNode the controller did not make is never written or deleted."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from nodetopo.export.controller import FIELD_MANAGER, HYPERNODE_PATH, OWNER_LABEL, OWNER_VALUE
from nodetopo.model import FabricTier, Facts, NetworkObservation
from nodetopo.resource.body import to_nodetopology
from nodetopo.resource.identity import GROUP, VERSION
from nodetopo.topology.derive import derive_topology

from .cluster import REPO, LocalCluster
from .volcano_crd import install_hypernode_crd

pytestmark = pytest.mark.k8s

RUN = uuid.uuid4().hex[:6]
NODETOPOLOGIES = f"/apis/{GROUP}/{VERSION}/nodetopologies"
LEAF, SPINE = f"leaf-{RUN}", f"spine-{RUN}"


def _put_topology(cluster: LocalCluster, name: str, *tiers: str) -> None:
    observation = NetworkObservation(
        source="fabric.cloud", tiers=tuple(FabricTier(level=i, id=t) for i, t in enumerate(tiers))
    )
    body = to_nodetopology(derive_topology(Facts(network=(observation,))), name)
    for condition in body["status"].get("conditions") or []:
        condition.setdefault("lastTransitionTime", "2026-01-01T00:00:00Z")
    status, answer = cluster.request(
        "POST", NODETOPOLOGIES, body={k: v for k, v in body.items() if k != "status"}
    )
    assert status == 201, answer
    status, answer = cluster.request(
        "PATCH",
        f"{NODETOPOLOGIES}/{name}/status",
        body={"status": body["status"]},
        content_type="application/merge-patch+json",
    )
    assert status == 200, answer


def _members(body: dict[str, Any]) -> list[str]:
    return [m["selector"]["exactMatch"]["name"] for m in body["spec"]["members"]]


@pytest.fixture(scope="module")
def controller_kubeconfig(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Volcano's CRD, deploy/export/ applied, and a kubeconfig with the controller's token."""
    install_hypernode_crd(cluster)
    cluster.kubectl("apply", "-f", str(REPO / "deploy" / "namespace.yaml"))
    cluster.kubectl("apply", "-k", str(REPO / "deploy" / "export"))
    status, answer = cluster.request(
        "POST",
        "/api/v1/namespaces/nodetopo/serviceaccounts/nodetopo-export-controller/token",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    assert status == 201, answer
    path = tmp_path_factory.mktemp("export") / "controller.kubeconfig"
    return cluster.write_kubeconfig(path, token=answer["status"]["token"])


@contextlib.contextmanager
def _controller(kubeconfig: Path, log: Path, *extra: str) -> Iterator[subprocess.Popen[bytes]]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    argv = [sys.executable, "-m", "nodetopo", "export-controller", "--kubeconfig", str(kubeconfig)]
    argv += ["--debounce", "0.2", "--log-level", "info", *extra]
    with log.open("ab") as handle:
        process = subprocess.Popen(
            argv, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True, env=env
        )
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def _wait(
    cluster: LocalCluster,
    name: str,
    ok: Callable[[dict[str, Any] | None], bool],
    log: Path,
    timeout: float = 60,
) -> dict[str, Any] | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, body = cluster.request("GET", f"{HYPERNODE_PATH}/{name}")
        current = body if status == 200 else None
        if ok(current):
            return current
        time.sleep(0.1)
    raise AssertionError(
        f"HyperNode {name} never matched; last: {body}\n--- log ---\n{log.read_text()[-3000:]}"
    )


def test_hypernodes_follow_nodes_joining_and_leaving(
    cluster: LocalCluster, controller_kubeconfig: Path, tmp_path: Path
) -> None:
    log = tmp_path / "controller.log"
    nodes = [f"exp-{RUN}-{i}" for i in range(3)]
    leaf, spine = f"t0-{LEAF}", f"t1-{SPINE}"
    # Not the controller's: a HyperNode named as the controller would name a leaf, and one it would not.
    taken_leaf = f"taken-{RUN}"
    foreign = {
        f"t0-{taken_leaf}": [f"someone-{RUN}"],
        f"rack-{RUN}": [nodes[0]],
    }
    for name, members in foreign.items():
        body = {
            "apiVersion": "topology.volcano.sh/v1alpha1",
            "kind": "HyperNode",
            "metadata": {"name": name, "labels": {"team": "network"}},
            "spec": {
                "tier": 1,
                "members": [{"type": "Node", "selector": {"exactMatch": {"name": m}}} for m in members],
            },
        }
        status, answer = cluster.request("POST", HYPERNODE_PATH, body=body)
        assert status == 201, answer
    before = {name: cluster.request("GET", f"{HYPERNODE_PATH}/{name}")[1] for name in foreign}
    created: list[str] = []
    try:
        for node in nodes[:2]:
            _put_topology(cluster, node, LEAF, SPINE)
            created.append(node)
        _put_topology(cluster, f"exp-{RUN}-taken", taken_leaf, SPINE)
        created.append(f"exp-{RUN}-taken")
        with _controller(controller_kubeconfig, log):
            first = _wait(cluster, leaf, lambda b: b is not None and _members(b) == nodes[:2], log)
            assert first is not None
            assert first["metadata"]["labels"][OWNER_LABEL] == OWNER_VALUE
            assert first["spec"]["tier"] == 1
            assert {f["manager"] for f in first["metadata"]["managedFields"]} == {FIELD_MANAGER}
            top = _wait(cluster, spine, lambda b: b is not None, log)
            assert top is not None and top["spec"]["tier"] == 2
            assert _members(top) == sorted([leaf, f"t0-{taken_leaf}"])

            _put_topology(cluster, nodes[2], LEAF, SPINE)  # a node joins
            created.append(nodes[2])
            _wait(cluster, leaf, lambda b: b is not None and _members(b) == nodes, log)

            status, _ = cluster.request("DELETE", f"{NODETOPOLOGIES}/{nodes[0]}")  # one leaves
            assert status == 200
            created.remove(nodes[0])
            _wait(cluster, leaf, lambda b: b is not None and _members(b) == nodes[1:], log)

            for node in [n for n in created if n in nodes]:  # the leaf empties: its HyperNode goes
                assert cluster.request("DELETE", f"{NODETOPOLOGIES}/{node}")[0] == 200
                created.remove(node)
            _wait(cluster, leaf, lambda b: b is None, log)
            _wait(cluster, spine, lambda b: b is not None and _members(b) == [f"t0-{taken_leaf}"], log)
            assert "left alone" in log.read_text()
        for name, old in before.items():  # never written, never deleted
            status, now = cluster.request("GET", f"{HYPERNODE_PATH}/{name}")
            assert status == 200, now
            assert now["metadata"]["resourceVersion"] == old["metadata"]["resourceVersion"], name
            assert FIELD_MANAGER not in {f["manager"] for f in now["metadata"].get("managedFields") or []}
    finally:
        for node in created:
            cluster.request("DELETE", f"{NODETOPOLOGIES}/{node}")
        for name in [*foreign, leaf, spine]:
            cluster.request("DELETE", f"{HYPERNODE_PATH}/{name}")


def test_the_controllers_rbac_grants_nothing_else(cluster: LocalCluster, controller_kubeconfig: Path) -> None:
    """The service account reads NodeTopologies and writes HyperNodes; nothing more."""
    user = "system:serviceaccount:nodetopo:nodetopo-export-controller"
    expected = {
        ("list", "nodetopologies.nodetopo.io"): "yes",
        ("watch", "nodetopologies.nodetopo.io"): "yes",
        ("patch", "nodetopologies.nodetopo.io"): "no",
        ("get", "nodetopologies.nodetopo.io"): "no",
        ("patch", "hypernodes.topology.volcano.sh"): "yes",
        ("create", "hypernodes.topology.volcano.sh"): "yes",
        ("delete", "hypernodes.topology.volcano.sh"): "yes",
        ("update", "hypernodes.topology.volcano.sh"): "no",
        ("patch", "nodes"): "no",
        ("list", "secrets"): "no",
        ("create", "nodetopologysummaries.nodetopo.io"): "no",
    }
    seen = {}
    for verb, resource in expected:
        done = cluster.kubectl("auth", "can-i", verb, resource, f"--as={user}", check=False)
        seen[(verb, resource)] = done.stdout.strip()
    assert seen == expected
