"""``nodetopo probe`` with a workload's own service account bound as deploy/probe/rbac.yaml says
(``nodetopo-reader`` through a ClusterRoleBinding, ``nodetopo-probe-events`` through a RoleBinding in
the workload's namespace), against the real API server: the roles are enough (read the node's
NodeTopology, read its pod's ResourceClaims, post the Event on the pod) and no more (no list, no
write, no Event, pod or claim in another namespace). Run with ``-s`` to see the real
``kubectl describe pod`` of a failing probe.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import BUNDLES

from nodetopo.kube.transport import connect

from .cluster import LocalCluster

pytestmark = pytest.mark.k8s

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = BUNDLES / "dgx-h100"


def _probe(kubeconfig: Path, tmp_path: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    root = tmp_path / "root"
    (root / "dev").mkdir(parents=True, exist_ok=True)
    term = tmp_path / "termination-log"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "nodetopo",
            "probe",
            "--kubeconfig",
            str(kubeconfig),
            "--root",
            str(root),
            "--termination-log",
            str(term),
            "--timeout",
            "20",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout), term.read_text()


def test_reader_role_is_enough_and_no_more(
    cluster: LocalCluster,
    make_node: Callable[..., dict[str, Any]],
    node_bound_token: Callable[..., Any],
    tmp_path: Path,
) -> None:
    cluster.kubectl("apply", "-f", str(ROOT / "deploy/probe/rbac.yaml"))
    node = make_node()["metadata"]["name"]
    sa = f"workload-{uuid.uuid4().hex[:6]}"
    namespace = f"ml-{sa}"
    bound = node_bound_token(node, namespace=namespace, service_account=sa)
    binding = bind_probe(cluster, namespace, sa)
    try:
        # no NodeTopology yet: a clear reason, and the Event still goes to the pod
        env_args = [
            "--node-name",
            node,
            "--pod-name",
            bound.pod_name,
            "--pod-namespace",
            namespace,
            "--pod-uid",
            bound.pod_uid,
        ]
        code, report, _ = _probe(
            bound.kubeconfig, tmp_path, *env_args, "--annotation", "nodetopo.io/rdma=required"
        )
        check = next(c for c in report["checks"] if c["name"] == "nodetopology")
        assert (code, check["status"]) == (0, "skip") and f"no NodeTopology for node {node} yet" in check[
            "reason"
        ]
        assert report["event"] == "posted", report["event"]

        published = cluster.publish_bundle(BUNDLE, node)
        assert published.returncode == 0, published.stderr
        code, report, term = _probe(
            bound.kubeconfig, tmp_path, *env_args, "--annotation", "nodetopo.io/rdma=required"
        )
        assert code == 1 and report["attribution"] == "ResourceNotReal", report
        assert term.startswith("ResourceNotReal: rdma: "), term
        assert report["event"] == "posted"

        described = cluster.kubectl("describe", "pod", bound.pod_name, "-n", namespace).stdout
        print(described)
        assert "TopologyProbeFailed" in described and "ResourceNotReal: rdma:" in described
        assert "TopologyProbePassed" in described  # the first run, without a NodeTopology, passed

        # no more than that: every other request of the service account is refused
        connection = connect(str(bound.kubeconfig))
        try:
            for path in (
                f"/apis/nodetopo.io/v1alpha1/nodetopologies/{node}",
                f"/api/v1/namespaces/{namespace}/pods/{bound.pod_name}",  # its pod's claims
            ):
                assert connection.request("GET", path).status == 200, path
            refused = {
                "list nodetopologies": ("GET", "/apis/nodetopo.io/v1alpha1/nodetopologies"),
                "watch nodetopologies": ("GET", "/apis/nodetopo.io/v1alpha1/nodetopologies?watch=1"),
                "delete nodetopology": ("DELETE", f"/apis/nodetopo.io/v1alpha1/nodetopologies/{node}"),
                "read node": ("GET", f"/api/v1/nodes/{node}"),
                "list pods": ("GET", f"/api/v1/namespaces/{namespace}/pods"),
                "read a pod elsewhere": ("GET", "/api/v1/namespaces/kube-system/pods/kube-apiserver"),
                "list claims": ("GET", f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims"),
                "read a claim elsewhere": (
                    "GET",
                    "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/c",
                ),
                "write a claim": (
                    "DELETE",
                    f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/c",
                ),
                "list events": ("GET", f"/api/v1/namespaces/{namespace}/events"),
                "list secrets": ("GET", f"/api/v1/namespaces/{namespace}/secrets"),
            }
            for what, (method, path) in refused.items():
                assert connection.request(method, path).status == 403, what
            # an Event in its own namespace, and in no other: not a spoofed kubelet Warning elsewhere
            for where, status in ((namespace, 201), ("default", 403), ("kube-system", 403)):
                posted = connection.request(
                    "POST", f"/api/v1/namespaces/{where}/events", body=json.dumps(spoofed(where)).encode()
                )
                assert posted.status == status, (where, posted.status, posted.data[:300])
            patch = connection.request(
                "PATCH",
                f"/apis/nodetopo.io/v1alpha1/nodetopologies/{node}",
                body=b'{"metadata":{"labels":{"x":"y"}}}',
                content_type="application/merge-patch+json",
            )
            assert patch.status == 403
        finally:
            connection.close()
    finally:
        cluster.kubectl("delete", "clusterrolebinding", binding, check=False)
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def test_the_probe_reads_its_pods_claims_with_the_roles_and_unknown_without(
    cluster: LocalCluster,
    make_node: Callable[..., dict[str, Any]],
    node_bound_token: Callable[..., Any],
    tmp_path: Path,
) -> None:
    """A need stated only on the pod's ResourceClaim is checked (the Pod, then the claim, read with the
    workload's own account); without the namespaced role the claim's need is unknown: skipped, never
    "no need"."""
    cluster.kubectl("apply", "-f", str(ROOT / "deploy/probe/rbac.yaml"))
    node = make_node()["metadata"]["name"]
    sa = f"workload-{uuid.uuid4().hex[:6]}"
    namespace = f"ml-{sa}"
    bound = node_bound_token(node, namespace=namespace, service_account=sa)
    binding = bind_probe(cluster, namespace, sa)
    try:
        published = cluster.publish_bundle(BUNDLE, node)
        assert published.returncode == 0, published.stderr
        claim = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "rdma-gpus", "annotations": {"nodetopo.io/rdma": "required"}},
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}}
                    ]
                }
            },
        }
        status, answer = cluster.request(
            "POST", f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims", body=claim
        )
        assert status == 201, answer
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "trainer", "namespace": namespace},
            "spec": {
                "nodeName": node,
                "serviceAccountName": sa,
                "automountServiceAccountToken": False,
                "resourceClaims": [{"name": "gpus", "resourceClaimName": "rdma-gpus"}],
                "containers": [
                    {
                        "name": "main",
                        "image": "registry.invalid/cuda:test",
                        "resources": {"claims": [{"name": "gpus"}]},
                    }
                ],
            },
        }
        status, answer = cluster.request("POST", f"/api/v1/namespaces/{namespace}/pods", body=pod)
        assert status == 201, answer
        args = ["--node-name", node, "--pod-name", "trainer", "--pod-namespace", namespace, "--no-event"]
        # the pod declares nothing itself: the claim's rdma=required is checked (no RDMA device here)
        code, report, term = _probe(bound.kubeconfig, tmp_path, *args)
        checks = {c["name"]: c for c in report["checks"]}
        assert checks["declared"]["status"] == "pass", checks["declared"]
        assert "with ResourceClaim rdma-gpus" in checks["declared"]["reason"]
        assert code == 1 and term.startswith("ResourceNotReal: rdma: "), report

        # without the namespaced role, the claim's need is unknown: skipped with the API's reason
        cluster.kubectl("-n", namespace, "delete", "rolebinding", f"nodetopo-probe-events-{sa}")
        code, report, _ = _probe(bound.kubeconfig, tmp_path, *args)
        checks = {c["name"]: c for c in report["checks"]}
        assert code == 0 and checks["declared"]["status"] == "skip", checks["declared"]
        assert f"Pod {namespace}/trainer could not be read" in checks["declared"]["reason"]
        assert checks["rdma"]["status"] == "skip" and not report["verdict"].startswith("Undeclared")
        code, report, _ = _probe(bound.kubeconfig, tmp_path, *args, "--strict")
        assert code == 1 and report["verdict"].startswith("failed (--strict)"), report["verdict"]
    finally:
        cluster.kubectl("delete", "clusterrolebinding", binding, check=False)
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def bind_probe(cluster: LocalCluster, namespace: str, sa: str) -> str:
    """The two bindings deploy/probe/rbac.yaml documents; returns the ClusterRoleBinding's name."""
    binding = f"nodetopo-reader-{namespace}-{sa}"
    cluster.kubectl(
        "create",
        "clusterrolebinding",
        binding,
        "--clusterrole=nodetopo-reader",
        f"--serviceaccount={namespace}:{sa}",
    )
    cluster.kubectl(
        "-n", namespace, "create", "rolebinding", f"nodetopo-probe-events-{sa}",
        "--clusterrole=nodetopo-probe-events", f"--serviceaccount={namespace}:{sa}",
    )  # fmt: skip
    return binding


def spoofed(namespace: str) -> dict[str, Any]:
    """An Event that claims to come from a kubelet, about a pod that may not exist."""
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": "spoof.", "namespace": namespace},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": "victim"},
        "reason": "Unhealthy",
        "message": "Liveness probe failed",
        "type": "Warning",
        "source": {"component": "kubelet", "host": "node-1"},
    }
