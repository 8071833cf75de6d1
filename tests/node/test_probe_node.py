"""``nodetopo probe`` as an init container on the real node (kubelet + containerd, the image built by
image/build_oci.py), with the pod's own kubelet-minted service-account token bound to deploy/probe's
roles (``nodetopo-reader``, and ``nodetopo-probe-events`` in the pod's namespace): a pod without a
declaration passes with an Undeclared warning; a pod declaring ``nodetopo.io/rdma: required`` on a
node whose NodeTopology promises RDMA NICs the container cannot see fails ResourceNotReal, in its
termination message and in an Event; a pod whose image has an ``all_reduce_perf`` (a fake printing
a recorded log of 8 H100 at 159 GB/s) gets its collective judged against the model's band for the
node's 8 GPUs: ResourceNotReal. Run with ``-s`` for the real ``kubectl describe pod`` output.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import BUNDLES
from kube.cluster import LocalCluster

from nodetopo.kube.session import FIELD_MANAGER

from .node import REPO, LocalNode

pytestmark = [pytest.mark.k8s, pytest.mark.node]

NAMESPACE = "default"
BUNDLE = BUNDLES / "dgx-h100"


def probe_pod(name: str, image: str, node: LocalNode, sa: str, annotations: dict[str, str]) -> dict[str, Any]:
    field = lambda path: {"valueFrom": {"fieldRef": {"fieldPath": path}}}  # noqa: E731
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "annotations": annotations},
        "spec": {
            "serviceAccountName": sa,
            "restartPolicy": "Never",
            "nodeName": node.name,
            "initContainers": [
                {
                    "name": "topology-probe",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "args": ["probe", "--timeout", "20"],
                    "env": [
                        {"name": "NODETOPO_ANNOTATIONS_FILE", "value": "/etc/podinfo/annotations"},
                        {"name": "NODE_NAME", **field("spec.nodeName")},
                        {"name": "POD_NAME", **field("metadata.name")},
                        {"name": "POD_NAMESPACE", **field("metadata.namespace")},
                        {"name": "POD_UID", **field("metadata.uid")},
                        {"name": "KUBERNETES_SERVICE_HOST", "value": node.api_host},
                        {"name": "KUBERNETES_SERVICE_PORT", "value": str(node.api_port)},
                    ],
                    "volumeMounts": [{"name": "podinfo", "mountPath": "/etc/podinfo", "readOnly": True}],
                }
            ],
            "containers": [
                {"name": "main", "image": image, "imagePullPolicy": "Never", "args": ["--version"]}
            ],
            "volumes": [
                {
                    "name": "podinfo",
                    "downwardAPI": {
                        "items": [{"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}}]
                    },
                }
            ],
        },
    }


OWN_PERF = REPO / "tests/fixtures/perf/own"
FAKE_NCCL = "/opt/fake-nccl"


def with_fake_all_reduce_perf(pod: dict[str, Any], configmap: str, gpus: int) -> dict[str, Any]:
    """``pod`` with an ``all_reduce_perf`` on the probe's PATH (ConfigMap ``configmap``, executable)
    and ``gpus`` GPU indices in NVIDIA_VISIBLE_DEVICES; /dev/shm is not what this pod is about."""
    probe = pod["spec"]["initContainers"][0]
    probe["args"] = [*probe["args"], "--min-shm", "0"]
    probe["env"] += [
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": ",".join(str(i) for i in range(gpus))},
        {
            "name": "PATH",
            "value": f"{FAKE_NCCL}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        },
    ]
    probe["volumeMounts"].append({"name": "fake-nccl", "mountPath": FAKE_NCCL, "readOnly": True})
    pod["spec"]["volumes"].append(
        {"name": "fake-nccl", "configMap": {"name": configmap, "defaultMode": 0o755}}
    )
    return pod


def wait_done(cluster: LocalCluster, name: str, timeout: float = 180) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    pod: dict[str, Any] = {}
    while time.monotonic() < deadline:
        pod = json.loads(cluster.kubectl("get", "pod", "-n", NAMESPACE, name, "-o", "json").stdout)
        if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            return pod
        time.sleep(1)
    raise AssertionError(f"pod {name} not done after {timeout}s: {json.dumps(pod.get('status'))[:2000]}")


def init_terminated(pod: dict[str, Any]) -> dict[str, Any]:
    statuses = pod["status"].get("initContainerStatuses") or []
    return dict(statuses[0]["state"]["terminated"]) if statuses else {}


def create_reader(cluster: LocalCluster) -> str:
    """A new service account bound as deploy/probe/rbac.yaml says: ``nodetopo-reader`` cluster-wide,
    ``nodetopo-probe-events`` in its own namespace (``delete_reader`` removes them)."""
    cluster.kubectl("apply", "-f", str(REPO / "deploy/probe/rbac.yaml"))
    sa = f"probe-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "serviceaccount", "-n", NAMESPACE, sa)
    cluster.kubectl(
        "create",
        "clusterrolebinding",
        f"nodetopo-reader-{sa}",
        "--clusterrole=nodetopo-reader",
        f"--serviceaccount={NAMESPACE}:{sa}",
    )
    cluster.kubectl(
        "-n", NAMESPACE, "create", "rolebinding", f"nodetopo-probe-events-{sa}",
        "--clusterrole=nodetopo-probe-events", f"--serviceaccount={NAMESPACE}:{sa}",
    )  # fmt: skip
    return sa


def delete_reader(cluster: LocalCluster, sa: str) -> None:
    cluster.kubectl("delete", "clusterrolebinding", f"nodetopo-reader-{sa}", check=False)
    cluster.kubectl("delete", "rolebinding", "-n", NAMESPACE, f"nodetopo-probe-events-{sa}", check=False)
    cluster.kubectl("delete", "serviceaccount", "-n", NAMESPACE, sa, check=False)


def node_labels(cluster: LocalCluster, node: str) -> dict[str, str]:
    """The Node's nodetopo.io/ labels."""
    status, body = cluster.request("GET", f"/api/v1/nodes/{node}")
    assert status == 200, body
    labels: dict[str, str] = body["metadata"].get("labels", {})
    return {k: v for k, v in labels.items() if k.startswith("nodetopo.io/")}


@contextlib.contextmanager
def node_state_kept(cluster: LocalCluster, node: LocalNode) -> Iterator[None]:
    """Afterwards the node's NodeTopology is deleted and its nodetopo.io/ labels are as before the
    block (``nodetopo publish`` of a bundle labels the Node after the bundle; the agent tests expect
    the host's, and an agent removes a key only after two clean scans)."""
    before = node_labels(cluster, node.name)
    try:
        yield
    finally:
        cluster.kubectl("delete", "nodetopology", node.name, "--ignore-not-found", check=False)
        after = node_labels(cluster, node.name)
        if before != after:
            # Put them back as nodetopo's own field manager (server-side apply, forced): a plain
            # patch would make the test's client their owner, and every later apply of nodetopo's
            # (agent or publish) that changes one of them would fail with a conflict.
            apply = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node.name, "labels": before}}
            status, body = cluster.request(
                "PATCH",
                f"/api/v1/nodes/{node.name}?fieldManager={FIELD_MANAGER}&force=true",
                body=apply,
                content_type="application/apply-patch+yaml",
            )
            assert status == 200, body
            left = {k: None for k, v in node_labels(cluster, node.name).items() if before.get(k) != v}
            if left:  # keys of other managers that the block added
                cluster.request(
                    "PATCH",
                    f"/api/v1/nodes/{node.name}",
                    body={"metadata": {"labels": left}},
                    content_type="application/merge-patch+json",
                )


@contextlib.contextmanager
def bundle_published(cluster: LocalCluster, node: LocalNode, bundle: Path, *extra: str) -> Iterator[None]:
    """``publish_bundle`` for the block, the node's state kept (``node_state_kept``)."""
    with node_state_kept(cluster, node):
        publish_bundle(cluster, node, bundle, *extra)
        yield


def publish_bundle(cluster: LocalCluster, node: LocalNode, bundle: Path, *extra: str) -> None:
    """``nodetopo publish --from BUNDLE`` as ``node``'s NodeTopology (created afresh)."""
    cluster.kubectl("delete", "nodetopology", node.name, "--ignore-not-found")
    published = cluster.publish_bundle(bundle, node.name, *extra, user="admin")
    assert published.returncode == 0, published.stderr


def test_probe_init_container_on_the_real_node(
    node_cluster: LocalCluster, node: LocalNode, node_image: dict[str, Any]
) -> None:
    cluster = node_cluster
    sa = create_reader(cluster)
    names = []
    with contextlib.ExitStack() as stack:
        stack.enter_context(bundle_published(cluster, node, BUNDLE))
        stack.callback(delete_reader, cluster, sa)
        stack.callback(
            lambda: [
                cluster.kubectl("delete", "pod", "-n", NAMESPACE, n, "--wait=false", check=False)
                for n in names
            ]
        )
        undeclared = f"probe-undeclared-{uuid.uuid4().hex[:6]}"
        names.append(undeclared)
        cluster.kubectl(
            "apply", "-f", "-", input=json.dumps(probe_pod(undeclared, node_image["name"], node, sa, {}))
        )
        pod = wait_done(cluster, undeclared)
        term = init_terminated(pod)
        assert pod["status"]["phase"] == "Succeeded" and term.get("exitCode") == 0, term
        assert term.get("message", "").startswith("passed with warning Undeclared"), term

        failing = f"probe-rdma-{uuid.uuid4().hex[:6]}"
        names.append(failing)
        pod_spec = probe_pod(failing, node_image["name"], node, sa, {"nodetopo.io/rdma": "required"})
        cluster.kubectl("apply", "-f", "-", input=json.dumps(pod_spec))
        pod = wait_done(cluster, failing)
        term = init_terminated(pod)
        assert pod["status"]["phase"] == "Failed" and term.get("exitCode") == 1, term
        assert term.get("message", "").startswith("ResourceNotReal: rdma: "), term
        described = cluster.kubectl("describe", "pod", "-n", NAMESPACE, failing).stdout
        print(described)
        assert "TopologyProbeFailed" in described and "ResourceNotReal: rdma:" in described

        # the collective smoke test through a fake all_reduce_perf printing a recorded log
        configmap = f"fake-nccl-{uuid.uuid4().hex[:6]}"
        log = (OWN_PERF / "allreduce-one-gpu-degraded.txt").read_text(encoding="utf-8")
        cluster.kubectl(
            "-n", NAMESPACE, "create", "configmap", configmap,
            f"--from-literal=all_reduce_perf=#!/bin/sh\ncat {FAKE_NCCL}/log.txt\n",
            f"--from-literal=log.txt={log}",
        )  # fmt: skip
        stack.callback(cluster.kubectl, "-n", NAMESPACE, "delete", "configmap", configmap, check=False)
        collective = f"probe-collective-{uuid.uuid4().hex[:6]}"
        names.append(collective)
        pod_spec = with_fake_all_reduce_perf(
            probe_pod(collective, node_image["name"], node, sa, {}), configmap, 8
        )
        cluster.kubectl("apply", "-f", "-", input=json.dumps(pod_spec))
        pod = wait_done(cluster, collective)
        term = init_terminated(pod)
        assert pod["status"]["phase"] == "Failed" and term.get("exitCode") == 1, term
        printed = cluster.kubectl("logs", "-n", NAMESPACE, collective, "-c", "topology-probe").stdout
        report, _ = json.JSONDecoder().raw_decode(printed[printed.index("{") :])
        check = next(c for c in report["checks"] if c["name"] == "collective")
        assert (check["status"], check.get("attribution")) == ("fail", "ResourceNotReal"), check
        assert check["reason"].startswith("159.49 GB/s busbw at 8 GiB is 0.35 of the expected"), check
