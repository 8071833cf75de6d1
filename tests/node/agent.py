"""The agent's DaemonSet on the real node, for the tests of ``test_daemonset.py``: the test overlay of
deploy/, the installed agent and its pod (``Agent``), and what the tests read of them.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from kube.cluster import LocalCluster

from .node import REPO, LocalNode

NAMESPACE = "nodetopo"
SELECTOR = "app.kubernetes.io/name=nodetopo-agent"
AGENT_USER = f"system:serviceaccount:{NAMESPACE}:nodetopo-agent"
WRITES = {"create", "update", "patch", "delete", "deletecollection"}
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"


def write_overlay(directory: Path, node: LocalNode) -> Path:
    """The test overlay: deploy/ + pull policy Never + the API server's address for the pod + the
    test kubelet's root directory (it is not /var/lib/kubelet) for the PodResources socket."""
    directory.mkdir(parents=True, exist_ok=True)
    deployed = yaml.safe_load((REPO / "deploy" / "daemonset.yaml").read_text())
    volumes = [v["name"] for v in deployed["spec"]["template"]["spec"]["volumes"]]
    patch = [
        {"op": "replace", "path": "/spec/template/spec/containers/0/imagePullPolicy", "value": "Never"},
        {
            "op": "replace",
            "path": f"/spec/template/spec/volumes/{volumes.index('pod-resources')}/hostPath/path",
            "value": str(node.kubelet_root / "pod-resources"),
        },
        {
            "op": "add",
            "path": "/spec/template/spec/containers/0/env/-",
            "value": {"name": "KUBERNETES_SERVICE_HOST", "value": node.api_host},
        },
        {
            "op": "add",
            "path": "/spec/template/spec/containers/0/env/-",
            "value": {"name": "KUBERNETES_SERVICE_PORT", "value": str(node.api_port)},
        },
    ]
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(REPO / "deploy", directory)],
        "patches": [
            {"target": {"kind": "DaemonSet", "name": "nodetopo-agent"}, "patch": yaml.safe_dump(patch)}
        ],
    }
    (directory / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return directory


class Agent:
    """The installed DaemonSet and its pod on ``node``."""

    def __init__(self, node: LocalNode) -> None:
        self.node = node
        self.cluster: LocalCluster = node.cluster
        self.installed_at = 0.0
        self.ready_after = 0.0

    def pods(self) -> list[dict[str, Any]]:
        done = self.cluster.kubectl("get", "pods", "-n", NAMESPACE, "-l", SELECTOR, "-o", "json")
        return [p for p in json.loads(done.stdout)["items"] if not p["metadata"].get("deletionTimestamp")]

    def pod(self) -> dict[str, Any]:
        pods = self.pods()
        assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
        return pods[0]

    def wait(
        self, what: str, check: Callable[[dict[str, Any]], bool], timeout: float = 120
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            pods = self.pods()
            if len(pods) == 1 and check(pods[0]):
                return pods[0]
            last = [(p["metadata"]["name"], p.get("status")) for p in pods]
            time.sleep(0.5)
        raise AssertionError(
            f"agent pod not {what} after {timeout:.0f}s: {json.dumps(last)[-3000:]}\n{self.events()}"
        )

    def wait_ready(self, timeout: float = 120) -> dict[str, Any]:
        assert self.node.forwarder is not None
        if self.node.forwarder._listener is None:
            self.node.forwarder.start()
        return self.wait("Ready", is_ready, timeout)

    def events(self) -> str:
        return str(self.cluster.kubectl("get", "events", "-n", NAMESPACE, check=False).stdout)[-3000:]

    def logs(self, pod: dict[str, Any]) -> str:
        return str(self.cluster.kubectl("logs", "-n", NAMESPACE, pod["metadata"]["name"]).stdout)

    def token(self, pod: dict[str, Any]) -> str:
        """The pod's projected service-account token, as the real kubelet wrote it on the node."""
        volumes = (
            self.node.kubelet_root / "pods" / pod["metadata"]["uid"] / "volumes" / "kubernetes.io~projected"
        )
        tokens = sorted(volumes.glob("kube-api-access-*/token"))
        assert tokens, f"no projected token under {volumes}"
        return tokens[0].read_text().strip()

    def metrics(self, pod: dict[str, Any]) -> str:
        url = f"http://{pod['status']['podIP']}:8080/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            return str(response.read().decode())

    def writes_since(self, offset: int) -> list[dict[str, Any]]:
        events = self.cluster.audit_events(since=offset, user=AGENT_USER)
        return [e for e in events if e["verb"] in WRITES]

    def node_labels(self) -> dict[str, str]:
        status, body = self.cluster.request("GET", f"/api/v1/nodes/{self.node.name}")
        assert status == 200, body
        return dict(body["metadata"].get("labels", {}))

    def node_events(self, reason: str) -> list[dict[str, Any]]:
        """The Events about the agent's Node with ``reason`` (in "default": cluster-scoped objects')."""
        selector = f"involvedObject.kind=Node,involvedObject.name={self.node.name},reason={reason}"
        status, body = self.cluster.request(
            "GET", f"/api/v1/namespaces/default/events?fieldSelector={selector}"
        )
        assert status == 200, body
        return list(body["items"])

    def nodetopology(self) -> dict[str, Any]:
        status, body = self.cluster.request(
            "GET", f"/apis/nodetopo.io/v1alpha1/nodetopologies/{self.node.name}"
        )
        assert status == 200, body
        return dict(body)


def label_managers(obj: dict[str, Any], key: str) -> set[str]:
    """The field managers of ``obj``'s label ``key`` (its ``managedFields``, any operation)."""
    return {
        str(entry.get("manager"))
        for entry in obj["metadata"].get("managedFields") or ()
        if f"f:{key}" in (((entry.get("fieldsV1") or {}).get("f:metadata") or {}).get("f:labels") or {})
    }


def is_ready(pod: dict[str, Any]) -> bool:
    conditions = {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions", [])}
    return pod.get("status", {}).get("phase") == "Running" and conditions.get("Ready") == "True"


def is_running_unready(pod: dict[str, Any]) -> bool:
    statuses = pod.get("status", {}).get("containerStatuses", [])
    return bool(statuses) and "running" in statuses[0].get("state", {}) and not statuses[0].get("ready")


def jwt_claims(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    return dict(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))))


def normalized(status: dict[str, Any]) -> dict[str, Any]:
    """A NodeTopology status without what differs between two scans at different times."""
    out = json.loads(json.dumps(status))
    for key in ("lastUpdateTime", "observedTime", "contentHash", "lastScanTime"):
        out.pop(key, None)
    for condition in out.get("conditions", []):
        condition.pop("lastTransitionTime", None)
        condition.pop("observedGeneration", None)
    return dict(out)


def bearer(agent: Agent, token: str, method: str, path: str, body: Any) -> tuple[int, Any]:
    request = urllib.request.Request(
        f"{agent.cluster.server}{path}", data=json.dumps(body).encode(), method=method
    )
    request.add_header("Authorization", f"Bearer {token}")
    request.add_header(
        "Content-Type", "application/merge-patch+json" if method == "PATCH" else "application/json"
    )
    context = ssl.create_default_context(cafile=str(agent.cluster.ca_file))
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
