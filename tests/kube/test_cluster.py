"""The test control plane itself: what the other Kubernetes tests rely on."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .cluster import LocalCluster
from .conftest import BoundToken

pytestmark = pytest.mark.k8s

NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"


def _whoami(cluster: LocalCluster, token: str, tmp_path: Path, kubectl: Callable[..., Any]) -> dict[str, Any]:
    config = cluster.write_kubeconfig(tmp_path / "whoami.yaml", token=token)
    done = kubectl("auth", "whoami", "-o", "json", f"--kubeconfig={config}", check=False)
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout)["status"]["userInfo"])


def test_server_version_and_authorization_mode(cluster: LocalCluster, kubectl: Callable[..., Any]) -> None:
    status, version = cluster.request("GET", "/version")
    assert status == 200
    assert version["gitVersion"].startswith("v1.34.")
    denied = kubectl("get", "nodes", user="nobody", check=False)
    assert denied.returncode != 0
    assert 'User "nodetopo-test-nobody" cannot list resource "nodes"' in denied.stderr
    status, _ = cluster.request(
        "GET", "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies", user="admin"
    )
    assert status == 200


def test_node_bound_token_carries_the_node_name(
    cluster: LocalCluster,
    kubectl: Callable[..., Any],
    make_node: Callable[..., dict[str, Any]],
    node_bound_token: Callable[..., BoundToken],
    tmp_path: Path,
) -> None:
    node = make_node()
    bound = node_bound_token(node["metadata"]["name"])
    user = _whoami(cluster, bound.token, tmp_path, kubectl)
    assert user["username"] == "system:serviceaccount:default:nodetopo-agent"
    assert user["extra"][NODE_NAME_EXTRA] == [node["metadata"]["name"]]
    assert user["extra"]["authentication.kubernetes.io/node-uid"] == [node["metadata"]["uid"]]
    assert user["extra"]["authentication.kubernetes.io/pod-name"] == [bound.pod_name]
    # No RBAC grant yet: authenticated, but forbidden.
    denied = kubectl("get", "nodes", f"--kubeconfig={bound.kubeconfig}", check=False)
    assert "cannot list resource" in denied.stderr


def test_audit_log_counts_requests_by_user(cluster: LocalCluster, kubectl: Callable[..., Any]) -> None:
    mark = cluster.audit_barrier()
    kubectl("get", "ntopo", user="other")
    kubectl("get", "nodes", user="other")
    events = cluster.audit_events(since=mark, user="other")
    # kubectl's discovery requests (/api, /apis) have no objectRef.
    assert sorted((e["verb"], e["objectRef"]["resource"]) for e in events if "objectRef" in e) == [
        ("list", "nodes"),
        ("list", "nodetopologies"),
    ]
    assert cluster.audit_events(since=mark, user="publisher") == []


def test_stop_kills_every_process(cluster: LocalCluster, tmp_path: Path) -> None:
    second = LocalCluster(cluster.bin_dir, workdir=tmp_path / "second")
    second.start()
    pids = [pid for _, pid in second.processes()]
    assert len(pids) == 2
    second.start_controller_manager()
    pids = [pid for _, pid in second.processes()]
    second.stop()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    second.stop()  # idempotent
