"""The Helm chart on a real node: ``helm install --wait`` (the real helm from tests/cluster-helm) of
charts/nodetopo into its own release namespace, with only what the harness cannot provide changed by
values (pull policy Never: no registry; the API server's address as the pod sees it: no kube-proxy).
The real kubelet starts the agent from the image built by image/build_oci.py; when helm returns it
must be Ready and have published its node's NodeTopology and nodetopo.io/ labels under the release's
identity; the commands NOTES.txt prints then work as printed, `helm test` included.
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
import yaml
from kube.chart_support import CHART, helm, helm_binary, render_tests

from .node import LocalNode

pytestmark = [pytest.mark.k8s, pytest.mark.node]

RELEASE = "chart"
NAMESPACE = "chart-node"
AGENT = f"{RELEASE}-nodetopo-agent"
MARKS: dict[str, int] = {}  # audit-log offset taken before the install
INSTALLED: dict[str, str] = {}  # what `helm install` printed ("stdout"), the values file ("values")


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
    done = helm(
        "install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--kubeconfig", kubeconfig(node),
        "-f", str(values), "--wait", "--timeout", "180s",
    )  # fmt: skip
    INSTALLED["stdout"], INSTALLED["values"] = done.stdout, str(values)
    INSTALLED["agents"] = cluster.kubectl(
        "get", "pods", "-n", NAMESPACE, "-l", f"app.kubernetes.io/name={AGENT}", "-o", "json"
    ).stdout  # the moment `helm install --wait` returned
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


def test_helm_install_wait_returns_once_the_agent_is_ready(node: LocalNode, release: str) -> None:
    """`helm install --wait` waits for the agent on every node: with one node and a maxUnavailable
    of 10% (rounded up to one pod) it returned before the pod was Ready; with 0 it waits for it."""
    (pod,) = json.loads(INSTALLED["agents"])["items"]
    conditions = {c["type"]: c["status"] for c in pod["status"].get("conditions", [])}
    events = node.cluster.kubectl("get", "events", "-n", NAMESPACE, check=False).stdout[-3000:]
    assert pod["status"].get("phase") == "Running" and conditions.get("Ready") == "True", (
        f"helm returned with the agent not Ready: {json.dumps(pod['status'])[-3000:]}\n{events}"
    )


def test_helm_install_runs_the_agent_and_it_publishes(node: LocalNode, release: str) -> None:
    cluster = node.cluster
    (pod,) = json.loads(
        cluster.kubectl(
            "get", "pods", "-n", NAMESPACE, "-l", f"app.kubernetes.io/name={AGENT}", "-o", "json"
        ).stdout
    )["items"]
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


def notes_commands() -> list[str]:
    """The command lines of the NOTES `helm install` printed (indented two spaces)."""
    notes = INSTALLED["stdout"].split("NOTES:", 1)[1]
    return [line.strip() for line in notes.splitlines() if line.startswith("  ") and " " in line.strip()]


def test_the_commands_the_notes_print_work_as_printed(node: LocalNode, release: str) -> None:
    """What NOTES.txt tells a newcomer to run next, run as printed (the test's kubectl and helm,
    the admin kubeconfig): the rollout is complete, `kubectl get ntopo` lists the node, and
    `helm test --logs` passes and shows what its pod printed: the node's NodeTopology labels."""
    cluster = node.cluster
    commands = notes_commands()
    assert commands[:4] == [
        f"kubectl -n {NAMESPACE} rollout status daemonset/{AGENT}",
        "kubectl get ntopo",
        "kubectl get nodes -L "
        "nodetopo.io/gpu.count,nodetopo.io/nvlink.island-size,nodetopo.io/gpu-nic.distance",
        f"helm test {RELEASE} -n {NAMESPACE} --logs",
    ], commands
    admin = ["--kubeconfig", kubeconfig(node)]
    outputs = []
    for command in commands[:4]:
        tool, *args = command.split()
        binary = str(helm_binary()) if tool == "helm" else str(cluster.binary("kubectl"))
        done = subprocess.run(
            [binary, *args, *admin, *(["--timeout", "60s"] if tool == "helm" else [])],
            capture_output=True, text=True, timeout=180, check=False,
        )  # fmt: skip
        assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-2000:])
        print(f"\n$ {command}\n{done.stdout}")
        outputs.append(done.stdout)
    assert "successfully rolled out" in outputs[0]
    assert node.name in outputs[1] and node.name in outputs[2]
    assert "Phase:          Succeeded" in outputs[3], outputs[3]
    test_pod = f"{RELEASE}-nodetopo-test"
    status, pod = cluster.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods/{test_pod}")
    assert status == 200 and pod["status"]["phase"] == "Succeeded" and pod["spec"]["nodeName"] == node.name
    # --logs: helm printed the pod's log, the node's nodetopo.io/ labels as the NodeTopology gives them
    logs = outputs[3].split(f"POD LOGS: {test_pod}", 1)[1]
    _, body = cluster.request("GET", f"/api/v1/nodes/{node.name}")
    printed = yaml.safe_load("\n".join(line for line in logs.splitlines() if line.startswith("nodetopo.io/")))
    assert printed["nodetopo.io/gpu.count"] == body["metadata"]["labels"]["nodetopo.io/gpu.count"], logs


def test_helm_test_fails_for_a_node_without_a_nodetopology(node: LocalNode, release: str) -> None:
    """The chart's test pod (rendered with the release's values), asking for a node nothing
    published: it fails, and says what is missing."""
    cluster = node.cluster
    (missing,) = render_tests(RELEASE, NAMESPACE, "-f", INSTALLED["values"])
    name = f"{RELEASE}-nodetopo-test-missing"
    missing["metadata"] = {"name": name, "namespace": NAMESPACE}
    container = missing["spec"]["containers"][0]
    assert "--node-name=$(NODE_NAME)" in container["args"]
    container["args"] = ["ray", "--node-name=no-such-node", "--wait=3"]
    cluster.kubectl("create", "-f", "-", input=json.dumps(missing))
    try:
        deadline = time.monotonic() + 120
        while True:
            _, pod = cluster.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods/{name}")
            if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
                break
            assert time.monotonic() < deadline, pod.get("status")
            time.sleep(1)
        assert pod["status"]["phase"] == "Failed"
        logs = cluster.kubectl("logs", "-n", NAMESPACE, name).stdout
        assert "NodeTopology/no-such-node: not found" in logs, logs
    finally:
        cluster.kubectl("delete", "pod", "-n", NAMESPACE, name, "--grace-period=0", "--force", check=False)
