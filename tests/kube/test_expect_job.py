"""``nodetopo expect --job NAMESPACE/NAME`` against the real API server and the real Job controller:
the Job's pods found by the labels the controller sets on them, each placed as ``accept --pod`` places a
pod (its node, its node's NodeTopology, its GPUs from ``heldBy``), the band printed for the whole gang
of two pods on two dgx-h100 nodes; while one pod is not scheduled yet, exit 2 naming it, never the band
of a smaller gang."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import BUNDLES

from .cluster import ClusterError, LocalCluster, free_port

pytestmark = pytest.mark.k8s

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = BUNDLES / "dgx-h100"


@contextlib.contextmanager
def job_controller(cluster: LocalCluster, tmp: Path) -> Iterator[None]:
    """kube-controller-manager running the Job controller only, for the length of the block."""
    log = tmp / "kcm-job.log"
    with log.open("ab") as handle:
        process = subprocess.Popen(
            [
                str(cluster.binary("kube-controller-manager")),
                f"--kubeconfig={cluster.kubeconfig}",
                f"--authentication-kubeconfig={cluster.kubeconfig}",
                f"--authorization-kubeconfig={cluster.kubeconfig}",
                "--controllers=job",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                f"--cert-dir={tmp / 'kcm-certs'}",
            ],
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


def _create(cluster: LocalCluster, path: str, body: dict[str, Any]) -> dict[str, Any]:
    status, created = cluster.request("POST", path, body=body)
    if status != 201:
        raise ClusterError(f"POST {path}: HTTP {status}: {created}")
    return dict(created)


def _expect(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "nodetopo", "expect", "--kubeconfig", str(cluster.kubeconfig), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done


def _job_pods(cluster: LocalCluster, namespace: str, count: int) -> list[dict[str, Any]]:
    """The Job's pods once the controller has created ``count`` of them, by name."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status, listed = cluster.request("GET", f"/api/v1/namespaces/{namespace}/pods")
        assert status == 200, listed
        if len(listed["items"]) >= count:
            return sorted(listed["items"], key=lambda p: p["metadata"]["name"])
        time.sleep(0.5)
    raise AssertionError(f"the Job controller did not create {count} pods in {namespace}")


def _bind(cluster: LocalCluster, namespace: str, pod: str, node: str) -> None:
    """Schedule ``pod`` to ``node`` as kube-scheduler does (the binding subresource)."""
    _create(
        cluster,
        f"/api/v1/namespaces/{namespace}/pods/{pod}/binding",
        {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": pod, "namespace": namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        },
    )


def _hold(cluster: LocalCluster, node: str, namespace: str, pod: str) -> None:
    """Publish the kubelet's allocation on ``node``, as the agent does: every GPU held by ``pod``."""
    status, obj = cluster.request("GET", f"/apis/nodetopo.io/v1alpha1/nodetopologies/{node}")
    assert status == 200, obj
    obj["status"]["allocation"] = {"state": "Known", "source": "kubelet-podresources"}
    for gpu in obj["status"]["gpus"]:
        gpu["heldBy"] = [{"namespace": namespace, "name": pod, "container": "nccl"}]
    status, answer = cluster.request(
        "PUT", f"/apis/nodetopo.io/v1alpha1/nodetopologies/{node}/status", body=obj
    )
    assert status == 200, answer


def test_expect_job_gives_the_band_of_its_pods_or_names_the_one_not_scheduled(
    cluster: LocalCluster, make_node: Callable[..., dict[str, Any]], tmp_path: Path
) -> None:
    nodes = [make_node()["metadata"]["name"] for _ in range(2)]
    namespace = f"expect-{uuid.uuid4().hex[:8]}"
    _create(
        cluster,
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
    )
    try:
        _create(
            cluster,
            f"/api/v1/namespaces/{namespace}/serviceaccounts",
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}},
        )
        for node in nodes:
            published = cluster.publish_bundle(BUNDLE, node)
            assert published.returncode == 0, published.stderr
        with job_controller(cluster, tmp_path):
            _create(
                cluster,
                f"/apis/batch/v1/namespaces/{namespace}/jobs",
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "metadata": {"name": "allreduce"},
                    "spec": {
                        "parallelism": 2,
                        "completions": 2,
                        "completionMode": "Indexed",
                        "template": {
                            "spec": {
                                "restartPolicy": "Never",
                                "automountServiceAccountToken": False,
                                "containers": [
                                    {
                                        "name": "nccl",
                                        "image": "registry.invalid/nccl-tests:test",
                                        "resources": {"limits": {"nvidia.com/gpu": "8"}},
                                    }
                                ],
                            }
                        },
                    },
                },
            )
            first, second = (p["metadata"]["name"] for p in _job_pods(cluster, namespace, 2))
        # the labels are the controller's own, not the test's
        status, listed = cluster.request("GET", f"/api/v1/namespaces/{namespace}/pods/{first}")
        assert (
            status == 200 and listed["metadata"]["labels"]["batch.kubernetes.io/job-name"] == "allreduce"
        ), listed

        _bind(cluster, namespace, first, nodes[0])
        _hold(cluster, nodes[0], namespace, first)
        pending = _expect(cluster, "--job", f"{namespace}/allreduce")
        print(pending.stderr)
        assert pending.returncode == 2, pending
        assert pending.stdout == ""
        assert (
            pending.stderr
            == f"nodetopo: pod {namespace}/{second}: not scheduled to a node (no spec.nodeName): it has run "
            "nowhere yet\n"
        )

        _bind(cluster, namespace, second, nodes[1])
        _hold(cluster, nodes[1], namespace, second)
        placed = _expect(cluster, "--job", f"{namespace}/allreduce")
        print(placed.stdout)
        assert placed.returncode == 0, placed
        assert placed.stdout.startswith("all_reduce over 16 GPUs on 2 nodes")
        assert f"pod {namespace}/{second}: {nodes[1]} GPU(s) 0,1,2,3,4,5,6,7 (heldBy)" in placed.stdout
        as_json = json.loads(_expect(cluster, "--job", f"{namespace}/allreduce", "-o", "json").stdout)
        assert sorted(as_json["nodes"]) == sorted(nodes) and as_json["ranks"] == 16
        assert [p["pod"] for p in as_json["pods"]] == [f"{namespace}/{first}", f"{namespace}/{second}"]
        band = as_json["busbw"]
        assert 0 < band["lowGBps"] <= band["expectedGBps"] <= band["highGBps"], band
    finally:
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        for node in nodes:
            cluster.request("DELETE", f"/apis/nodetopo.io/v1alpha1/nodetopologies/{node}")
