"""The Helm chart on a real node: ``helm install`` (the real helm from tests/cluster-helm) of
charts/nodetopo into its own release namespace, with only what the harness cannot provide changed by
values (pull policy Never: no registry; the API server's address as the pod sees it: no kube-proxy).
The real kubelet starts the agent from the image built by image/build_oci.py; it must be Running,
Ready and publish its node's NodeTopology and nodetopo.io/ labels under the release's identity.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kube.chart_support import CHART, helm

from .node import LocalNode

pytestmark = [pytest.mark.k8s, pytest.mark.node]

RELEASE = "chart"
NAMESPACE = "chart-node"
AGENT = f"{RELEASE}-nodetopo-agent"
MARKS: dict[str, int] = {}  # audit-log offset taken before the install


def kubeconfig(node: LocalNode) -> str:
    return str(node.cluster.kubeconfig_for("admin"))


@pytest.fixture(scope="module")
def release(
    node: LocalNode, node_image: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    cluster = node.cluster
    assert node.forwarder is not None
    if node.forwarder._listener is None:
        node.forwarder.start()
    crds_there = cluster.kubectl("get", "crd", "nodetopologies.nodetopo.io", check=False).returncode == 0
    values = Path(tmp_path_factory.mktemp("chart")) / "values.yaml"
    values.write_text(
        json.dumps(
            {
                "image": {"pullPolicy": "Never"},
                "crds": {"install": not crds_there},
                "agent": {
                    # the test kubelet's --root-dir is not /var/lib/kubelet
                    "podResources": {"hostPath": str(node.kubelet_root / "pod-resources")},
                    "extraEnv": [
                        {"name": "KUBERNETES_SERVICE_HOST", "value": node.api_host},
                        {"name": "KUBERNETES_SERVICE_PORT", "value": str(node.api_port)},
                    ],
                },
            }
        )
    )
    cluster.kubectl("create", "namespace", NAMESPACE)
    MARKS["before install"] = cluster.audit_barrier()
    helm(
        "install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--kubeconfig", kubeconfig(node),
        "-f", str(values), "--wait", "--timeout", "180s",
    )  # fmt: skip
    try:
        yield RELEASE
    finally:
        helm(
            "uninstall",
            RELEASE,
            "--namespace",
            NAMESPACE,
            "--kubeconfig",
            kubeconfig(node),
            "--wait",
            check=False,
        )
        cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)
        # Leave the node as the other node tests expect to find it: no NodeTopology, no nodetopo.io/ label.
        cluster.kubectl("delete", "nodetopology", node.name, "--ignore-not-found", check=False)
        status, body = cluster.request("GET", f"/api/v1/nodes/{node.name}")
        if status == 200:
            drop = {k: None for k in body["metadata"].get("labels", {}) if k.startswith("nodetopo.io/")}
            if drop:
                cluster.request("PATCH", f"/api/v1/nodes/{node.name}", body={"metadata": {"labels": drop}})


def test_helm_install_runs_the_agent_and_it_publishes(node: LocalNode, release: str) -> None:
    cluster = node.cluster
    # `helm install --wait` alone proves little here: with one node, the DaemonSet's maxUnavailable
    # (10%, rounded up to 1) lets helm call it ready before the pod is.
    deadline = time.monotonic() + 180
    while True:
        pods = json.loads(
            cluster.kubectl(
                "get", "pods", "-n", NAMESPACE, "-l", f"app.kubernetes.io/name={AGENT}", "-o", "json"
            ).stdout
        )["items"]
        assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
        pod = pods[0]
        conditions = {c["type"]: c["status"] for c in pod["status"].get("conditions", [])}
        if pod["status"].get("phase") == "Running" and conditions.get("Ready") == "True":
            break
        events = cluster.kubectl("get", "events", "-n", NAMESPACE, check=False).stdout[-3000:]
        assert time.monotonic() < deadline, f"agent not Ready: {json.dumps(pod['status'])[-3000:]}\n{events}"
        time.sleep(1)
    assert pod["spec"]["nodeName"] == node.name and pod["spec"]["serviceAccountName"] == AGENT
    topology = published_topology(node, timeout_s=60)
    # the agent asked the real kubelet through the chart's pod-resources mount, as uid 0
    assert topology["status"]["allocation"]["state"] == "Known", topology["status"]["allocation"]
    owners = topology["metadata"]["ownerReferences"]
    assert [(o["kind"], o["name"]) for o in owners] == [("Node", node.name)]
    assert {c["type"] for c in topology["status"]["conditions"]} >= {"Ready"}
    _, body = cluster.request("GET", f"/api/v1/nodes/{node.name}")
    labels = body["metadata"].get("labels", {})
    assert any(k.startswith("nodetopo.io/") for k in labels), labels
    # Written by the release's own identity (the kubelet-minted token of its ServiceAccount).
    writes = [
        e
        for e in cluster.audit_events(
            since=MARKS["before install"], user=f"system:serviceaccount:{NAMESPACE}:{AGENT}"
        )
        if e["verb"] in ("create", "patch", "update")
    ]
    assert {e["objectRef"]["resource"] for e in writes} >= {"nodetopologies", "nodes"}, writes[:5]
    listed = helm(
        "list", "--namespace", NAMESPACE, "--kubeconfig", str(cluster.kubeconfig_for("admin")), "-o", "json"
    )
    assert [(r["name"], r["status"]) for r in json.loads(listed.stdout)] == [(RELEASE, "deployed")]
    policy = cluster.kubectl("get", "validatingadmissionpolicybinding", f"{AGENT}-own-node", "-o", "json")
    assert json.loads(policy.stdout)["spec"]["policyName"] == f"{AGENT}-own-node"


def published_topology(node: LocalNode, *, timeout_s: float) -> dict[str, Any]:
    """The node's NodeTopology once the agent has published its conditions (polled every second)."""
    deadline = time.monotonic() + timeout_s
    while True:
        status, topology = node.cluster.request(
            "GET", f"/apis/nodetopo.io/v1alpha1/nodetopologies/{node.name}"
        )
        if status == 200 and topology.get("status", {}).get("conditions"):
            return dict(topology)
        assert time.monotonic() < deadline, (status, topology)
        time.sleep(1)


def test_kubectl_ntopo_shows_the_node_the_chart_published(node: LocalNode, release: str) -> None:
    """The newcomer's path to the end: after `helm install`, `kubectl ntopo get <node>` (the real
    kubectl finding the plugin on PATH) shows what the agent published for this node."""
    cluster = node.cluster
    topology = published_topology(node, timeout_s=120)
    scripts = Path(sys.executable).parent  # where `pip install` put the kubectl-ntopo console script
    assert (scripts / "kubectl-ntopo").exists(), f"no kubectl-ntopo next to {sys.executable}"
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env.update(PATH=f"{scripts}{os.pathsep}{env.get('PATH', '')}", COLUMNS="200")
    done = subprocess.run(
        [
            str(cluster.binary("kubectl")),
            "ntopo",
            "get",
            node.name,
            "--kubeconfig",
            str(cluster.kubeconfig_for("admin")),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    print(f"\n$ kubectl ntopo get {node.name}\n{done.stdout}")
    assert node.name in done.stdout
    numa = len(topology["status"]["numaNodes"])
    assert f"NUMA nodes: {numa}" in done.stdout, done.stdout
