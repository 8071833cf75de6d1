"""``nodetopo accept RESULT --pod NAMESPACE/NAME`` against the real API server: the pod read, its node's
NodeTopology read, its GPUs taken from the kubelet's allocation the NodeTopology publishes (``heldBy``)
or refused with why when it publishes none, its ``nodetopo.io/min-busbw`` the need, the verdict posted
as an Event on the pod (``kubectl describe pod`` shows it); a pod that does not exist is one line and
exit 2, never a traceback."""

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

from .cluster import ClusterError, LocalCluster

pytestmark = pytest.mark.k8s

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = BUNDLES / "dgx-h100"
#: our own 8 × H100 run, 482.12 GB/s at 4 GiB: inside the band of an 8-GPU NVSwitch node (relative to
#: the checkout, as docs/bandwidth-model.md shows it)
LOG = "tests/fixtures/perf/own/allreduce-per-iteration-I1.txt"


def _accept(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "nodetopo",
            "accept",
            LOG,
            "--kubeconfig",
            str(cluster.kubeconfig),
            *args,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done


def _create(cluster: LocalCluster, path: str, body: dict[str, Any]) -> dict[str, Any]:
    status, created = cluster.request("POST", path, body=body)
    if status != 201:
        raise ClusterError(f"POST {path}: HTTP {status}: {created}")
    return dict(created)


def _events(cluster: LocalCluster, namespace: str, pod: str) -> list[dict[str, Any]]:
    status, listed = cluster.request(
        "GET", f"/api/v1/namespaces/{namespace}/events?fieldSelector=involvedObject.name%3D{pod}"
    )
    assert status == 200, listed
    return sorted(listed["items"], key=lambda e: int(e["metadata"]["resourceVersion"]))


def test_accept_pod_posts_the_verdict_on_the_pod(
    cluster: LocalCluster, make_node: Callable[..., dict[str, Any]]
) -> None:
    node = make_node()["metadata"]["name"]
    namespace = f"accept-{uuid.uuid4().hex[:8]}"
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
        pod = _create(
            cluster,
            f"/api/v1/namespaces/{namespace}/pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "nccl-0", "annotations": {"nodetopo.io/min-busbw": "900"}},
                "spec": {
                    "nodeName": node,
                    "automountServiceAccountToken": False,
                    "containers": [{"name": "nccl", "image": "registry.invalid/nccl-tests:test"}],
                },
            },
        )
        ref = f"{namespace}/nccl-0"

        # the pod does not exist: one line, exit 2
        missing = _accept(cluster, "--pod", f"{namespace}/nccl-9")
        assert missing.returncode == 2 and missing.stderr == f"nodetopo: pod {namespace}/nccl-9: not found\n"

        # the node has no NodeTopology yet
        none_yet = _accept(cluster, "--pod", ref)
        assert (
            none_yet.returncode == 2 and f"ran on node {node}, which has no NodeTopology" in none_yet.stderr
        )

        # published from a bundle: no kubelet allocation, so the GPUs are not known from the API
        published = cluster.publish_bundle(BUNDLE, node)
        assert published.returncode == 0, published.stderr
        unknown = _accept(cluster, "--pod", ref)
        assert unknown.returncode == 2, unknown
        assert f"the GPUs pod {ref} holds cannot be known from the API" in unknown.stderr
        assert f"give --gpus {node}=LIST" in unknown.stderr
        assert _events(cluster, namespace, "nccl-0") == []

        # with --gpus: judged by the pod's own need (900 GB/s), PlacedWrong, a Warning on the pod
        placed = _accept(cluster, "--pod", ref, "--gpus", f"{node}=all")
        print(placed.stdout, unknown.stderr)
        assert placed.returncode == 4, placed
        assert "PlacedWrong: 482.12 GB/s busbw at 4 GiB: the workload needs 900 GB/s" in placed.stdout
        assert f"pod {ref}: {node} GPU(s) all (--gpus); Event posted (Warning PlacedWrong)" in placed.stdout
        (event,) = _events(cluster, namespace, "nccl-0")
        assert (event["reason"], event["type"], event["source"]["component"]) == (
            "PlacedWrong",
            "Warning",
            "nodetopo-accept",
        )
        assert event["involvedObject"]["uid"] == pod["metadata"]["uid"]
        assert "\n" not in event["message"] and "the workload needs 900 GB/s" in event["message"]
        assert event["message"].startswith(f"{LOG}: 482.12 GB/s busbw at 4 GiB")

        # the kubelet's allocation published (as the agent does): the GPUs come from heldBy
        status, obj = cluster.request("GET", f"/apis/nodetopo.io/v1alpha1/nodetopologies/{node}")
        assert status == 200, obj
        obj["status"]["allocation"] = {"state": "Known", "source": "kubelet-podresources"}
        for gpu in obj["status"]["gpus"]:
            gpu["heldBy"] = [{"namespace": namespace, "name": "nccl-0", "container": "nccl"}]
        status, answer = cluster.request(
            "PUT", f"/apis/nodetopo.io/v1alpha1/nodetopologies/{node}/status", body=obj
        )
        assert status == 200, answer
        passed = _accept(cluster, "--pod", ref, "--min-busbw", "400", "-o", "json")
        assert passed.returncode == 0, passed
        (held,) = json.loads(passed.stdout)["pods"]
        assert (held["gpus"], held["gpusFrom"], held["minBusbwGBps"]) == (list(range(8)), "heldBy", 900.0)
        latest = _events(cluster, namespace, "nccl-0")[-1]
        assert (latest["reason"], latest["type"]) == ("Passed", "Normal"), latest
        assert "is within the expected band" in latest["message"]

        described = cluster.kubectl("describe", "pod", "nccl-0", "-n", namespace).stdout
        print(described)
        assert "PlacedWrong" in described and "Passed" in described and "nodetopo-accept" in described
    finally:
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        cluster.request("DELETE", f"/apis/nodetopo.io/v1alpha1/nodetopologies/{node}")
