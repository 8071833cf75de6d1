"""End to end: the real kube-scheduler calls ``nodetopo extender`` on loopback.

Nodes are plain Node objects with ``nvidia.com/gpu`` capacity and a NodeTopology discovered from the
real-machine fixture bundles (8-GPU NVSwitch, DGX-1 hybrid cube, PCIe NVLink pairs, PCIe without
NVLink, MIG, GH200). Pods with each ``nodetopo.io/`` annotation are created one at a time through a
scheduler profile that calls the extender, and must be bound to a node that satisfies them;
unsatisfiable pods stay Pending with the extender's reason in their events. A second scheduler
without the extender places pods by ``nodeAffinity`` on the ``nodetopo.io/`` labels alone.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from .cluster import REPO, LocalCluster, free_port

pytestmark = [pytest.mark.k8s, pytest.mark.slow]

BUNDLES = REPO / "tests" / "fixtures" / "bundles"
RUN = uuid.uuid4().hex[:6]
NAMESPACE = f"nodetopo-e2e-{RUN}"
WITH_EXTENDER = "nodetopo-extender-e2e"
WITHOUT_EXTENDER = "nodetopo-plain-e2e"

#: node suffix → fixture bundle. The "ll-" pair differs only in its NICs' link layer.
MAIN_NODES = {
    "h100-a": "dgx-h100",
    "h100-b": "dgx-h100",
    "a100": "dgx-a100",
    "v100": "dgx1-v100",
    "pairs-a": "pcie-4x-nvbridge",
    "pairs-b": "pcie-4x-nvbridge",
    "plain-a": "pcie-8x-2socket",
    "plain-b": "pcie-8x-2socket",
    "mig": "a100-mig",
    "gh200": "gh200-nvl",
    "l40s": "no-ibstat",
}
BARE_NODE = "bare"  # GPUs but no NodeTopology (agent not running)
LINK_NODES = {"ll-ib": "InfiniBand", "ll-eth": "Ethernet"}


def _node(suffix: str) -> str:
    return f"e2e-{RUN}-{suffix}"


def _discover(bundle: str) -> Any:
    from nodetopo.discover import bundle_context, scan

    logging.getLogger("nodetopo").setLevel(logging.ERROR)
    return scan(bundle_context(BUNDLES / bundle)).topology


def _ok(answer: tuple[int, Any], *expected: int) -> Any:
    status, body = answer
    assert status in expected, f"HTTP {status}: {body}"
    return body


def _create_node(cluster: LocalCluster, name: str, gpus: int, labels: dict[str, str]) -> None:
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}
    _ok(cluster.request("POST", "/api/v1/nodes", body=body), 201)
    # Admission taints new Nodes not-ready until a kubelet reports; there is none, so lift it.
    _ok(
        cluster.request(
            "PATCH",
            f"/api/v1/nodes/{name}",
            body={"spec": {"taints": None}},
            content_type="application/merge-patch+json",
        ),
        200,
    )
    capacity = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
    status = {
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "e2e"}],
        }
    }
    _ok(
        cluster.request(
            "PATCH",
            f"/api/v1/nodes/{name}/status",
            body=status,
            content_type="application/merge-patch+json",
        ),
        200,
    )


def _create_nodetopology(cluster: LocalCluster, body: dict[str, Any]) -> None:
    from nodetopo.crd import PLURAL, VERSION

    path = f"/apis/nodetopo.io/{VERSION}/{PLURAL}"
    name = body["metadata"]["name"]
    meta_only = {k: v for k, v in body.items() if k != "status"}
    for condition in body["status"]["conditions"]:  # the publisher's job; the CRD requires it
        condition.setdefault("lastTransitionTime", "2025-01-01T00:00:00Z")
    _ok(cluster.request("POST", path, body=meta_only), 201)
    _ok(
        cluster.request(
            "PATCH",
            f"{path}/{name}/status",
            body={"status": body["status"]},
            content_type="application/merge-patch+json",
        ),
        200,
    )


@pytest.fixture(scope="module")
def gpu_nodes(cluster: LocalCluster) -> Iterator[dict[str, Any]]:
    """The Node + NodeTopology pool; returns name → topology (None for the bare node)."""
    from nodetopo.crd import to_nodetopology
    from nodetopo.labels import to_labels

    created: list[tuple[str, bool]] = []
    topologies: dict[str, Any] = {}
    try:
        for suffix, bundle in MAIN_NODES.items():
            topology = _discover(bundle)
            name = _node(suffix)
            labels = {"nodetopo-e2e": RUN, "nodetopo-e2e-group": "main", **to_labels(topology)}
            _create_node(cluster, name, len(topology.gpus), labels)
            created.append((name, False))
            _create_nodetopology(cluster, to_nodetopology(topology, name))
            created.append((name, True))
            topologies[name] = topology
        _create_node(cluster, _node(BARE_NODE), 8, {"nodetopo-e2e": RUN, "nodetopo-e2e-group": "main"})
        created.append((_node(BARE_NODE), False))
        topologies[_node(BARE_NODE)] = None
        pairs = _discover("pcie-4x-nvbridge")
        for suffix, layer in LINK_NODES.items():
            name = _node(suffix)
            body = to_nodetopology(pairs, name)
            for nic in body["status"]["nics"]:
                nic["linkLayer"] = layer
            _create_node(cluster, name, len(pairs.gpus), {"nodetopo-e2e": RUN, "nodetopo-e2e-group": "link"})
            created.append((name, False))
            _create_nodetopology(cluster, body)
            created.append((name, True))
            topologies[name] = pairs
        _ok(
            cluster.request(
                "POST",
                "/api/v1/namespaces",
                body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
            ),
            201,
        )
        _ok(
            cluster.request(
                "POST",
                f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts",
                body={"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}},
            ),
            201,
            409,
        )
        yield topologies
    finally:
        status, pods = cluster.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods")
        for pod in (pods or {}).get("items", []) if status == 200 else []:
            cluster.request(
                "DELETE",
                f"/api/v1/namespaces/{NAMESPACE}/pods/{pod['metadata']['name']}?gracePeriodSeconds=0",
            )
        for name, is_topology in reversed(created):
            path = (
                f"/apis/nodetopo.io/v1alpha1/nodetopologies/{name}"
                if is_topology
                else f"/api/v1/nodes/{name}"
            )
            cluster.request("DELETE", path)


def _start(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    with log.open("ab") as handle:
        return subprocess.Popen(
            argv,
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=REPO,
            env=env,
        )


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def _extender_token(cluster: LocalCluster) -> str:
    """Apply deploy/namespace.yaml and deploy/extender/rbac.yaml; a token for that service account."""
    cluster.kubectl("apply", "-f", str(REPO / "deploy" / "namespace.yaml"))
    cluster.kubectl("apply", "-f", str(REPO / "deploy" / "extender" / "rbac.yaml"))
    status, answer = cluster.request(
        "POST",
        "/api/v1/namespaces/nodetopo/serviceaccounts/nodetopo-extender/token",
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        },
    )
    assert status == 201, answer
    return str(answer["status"]["token"])


def _as_token(cluster: LocalCluster, token: str, method: str, path: str, body: Any = None) -> int:
    import ssl
    import urllib.error

    request = urllib.request.Request(
        f"{cluster.server}{path}",
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    context = ssl.create_default_context(cafile=str(cluster.ca_file))
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def test_extender_service_account_is_read_only(cluster: LocalCluster) -> None:
    """deploy/extender/rbac.yaml: list/watch NodeTopology objects and pods, nothing else."""
    token = _extender_token(cluster)
    assert _as_token(cluster, token, "GET", "/apis/nodetopo.io/v1alpha1/nodetopologies?limit=1") == 200
    assert _as_token(cluster, token, "GET", "/api/v1/pods?limit=1") == 200
    assert _as_token(cluster, token, "GET", "/api/v1/pods?watch=1&timeoutSeconds=1") == 200
    denied = [
        ("GET", "/api/v1/nodes", None),
        ("GET", "/api/v1/secrets", None),
        ("DELETE", "/apis/nodetopo.io/v1alpha1/nodetopologies/anything", None),
        ("POST", "/apis/nodetopo.io/v1alpha1/nodetopologies", {"apiVersion": "nodetopo.io/v1alpha1"}),
        ("POST", "/api/v1/namespaces/default/pods", {"apiVersion": "v1", "kind": "Pod"}),
    ]
    for method, path, body in denied:
        assert _as_token(cluster, token, method, path, body) == 403, (method, path)


def _wait_ready(url: str, process: subprocess.Popen[bytes], log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, f"exited {process.returncode}:\n{log.read_text()[-4000:]}"
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2) as response:
            if response.status == 200:
                return
        time.sleep(0.2)
    raise AssertionError(f"{url} not ready after {timeout}s:\n{log.read_text()[-4000:]}")


def _scheduler_config(cluster: LocalCluster, name: str, extender_url: str | None) -> dict[str, Any]:
    """The shipped example (deploy/extender/scheduler-config.yaml) pointed at this cluster and extender."""
    config: dict[str, Any] = yaml.safe_load(
        (REPO / "deploy" / "extender" / "scheduler-config.yaml").read_text()
    )
    config["clientConnection"] = {"kubeconfig": str(cluster.kubeconfig)}
    config["leaderElection"] = {"leaderElect": False}
    config["profiles"] = [{"schedulerName": name}]
    if extender_url:
        config["extenders"][0]["urlPrefix"] = extender_url
    else:
        del config["extenders"]
    return config


def _start_scheduler(
    cluster: LocalCluster, tmp: Path, name: str, extender_url: str | None
) -> subprocess.Popen[bytes]:
    config = tmp / f"{name}.yaml"
    config.write_text(yaml.safe_dump(_scheduler_config(cluster, name, extender_url)))
    port = free_port()
    log = tmp / f"{name}.log"
    process = _start(
        [
            str(cluster.binary("kube-scheduler")),
            f"--config={config}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={tmp / (name + '-certs')}",
            "--v=2",
        ],
        log,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # /healthz needs auth config; the log says when it leads
        assert process.poll() is None, f"kube-scheduler exited:\n{log.read_text()[-4000:]}"
        if log.exists() and "Starting Kubernetes Scheduler" in log.read_text(errors="replace"):
            time.sleep(1.0)  # informers sync right after
            return process
        time.sleep(0.2)
    raise AssertionError(f"kube-scheduler did not start:\n{log.read_text()[-4000:]}")


@pytest.fixture(scope="module")
def extender_scheduler(
    cluster: LocalCluster, gpu_nodes: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("extender-e2e")
    port = free_port()
    log = tmp / "extender.log"
    env_python = [sys.executable, "-m", "nodetopo"]
    # The extender runs as its own service account, with exactly the RBAC of deploy/extender/.
    kubeconfig = cluster.write_kubeconfig(tmp / "extender.kubeconfig", token=_extender_token(cluster))
    extender = _start(
        [
            *env_python,
            "extender",
            f"--kubeconfig={kubeconfig}",
            f"--listen=127.0.0.1:{port}",
            "--page-size=5",  # several pages even for this small pool
            "--log-level=info",
        ],
        log,
    )
    scheduler = None
    try:
        _wait_ready(f"http://127.0.0.1:{port}/readyz", extender, log)
        scheduler = _start_scheduler(cluster, tmp, WITH_EXTENDER, f"http://127.0.0.1:{port}")
        yield WITH_EXTENDER
    finally:
        if scheduler is not None:
            _stop(scheduler)
        _stop(extender)


@pytest.fixture(scope="module")
def plain_scheduler(
    cluster: LocalCluster, gpu_nodes: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    process = _start_scheduler(cluster, tmp_path_factory.mktemp("plain-e2e"), WITHOUT_EXTENDER, None)
    try:
        yield WITHOUT_EXTENDER
    finally:
        _stop(process)


def _pod(
    name: str,
    scheduler: str,
    gpus: int,
    annotations: dict[str, str] | None = None,
    *,
    group: str = "main",
    affinity: dict[str, Any] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "automountServiceAccountToken": False,
        "nodeSelector": {"nodetopo-e2e": RUN, "nodetopo-e2e-group": group},
        "containers": [
            {
                "name": "main",
                "image": "registry.invalid/cuda:e2e",
                "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
            }
        ],
    }
    if affinity:
        spec["affinity"] = affinity
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "annotations": annotations or {}},
        "spec": spec,
    }


def _bind(cluster: LocalCluster, pod: dict[str, Any], timeout: float = 60) -> str:
    """Create the pod and wait until the scheduler binds it; return the node name."""
    name = pod["metadata"]["name"]
    _ok(cluster.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", body=pod), 201)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        current = _ok(cluster.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods/{name}"), 200)
        node = current["spec"].get("nodeName")
        if node:
            return str(node)
        time.sleep(0.2)
    raise AssertionError(f"pod {name} not bound after {timeout}s: {json.dumps(current.get('status'))}")


def _stays_pending(cluster: LocalCluster, pod: dict[str, Any], expect: str, timeout: float = 45) -> str:
    """Create the pod; it must stay unbound and get a FailedScheduling event containing ``expect``."""
    name = pod["metadata"]["name"]
    _ok(cluster.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", body=pod), 201)
    deadline = time.monotonic() + timeout
    messages: list[str] = []
    while time.monotonic() < deadline:
        events = _ok(
            cluster.request(
                "GET",
                f"/api/v1/namespaces/{NAMESPACE}/events?fieldSelector=involvedObject.name%3D{name}",
            ),
            200,
        )
        messages = [e.get("message", "") for e in events["items"] if e.get("reason") == "FailedScheduling"]
        if any(expect in m for m in messages):
            break
        time.sleep(0.5)
    current = _ok(cluster.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods/{name}"), 200)
    assert not current["spec"].get("nodeName"), f"{name} was bound to {current['spec']['nodeName']}"
    assert any(expect in m for m in messages), f"no FailedScheduling event with {expect!r}: {messages}"
    return next(m for m in messages if expect in m)


def _short(node: str) -> str:
    return node.removeprefix(f"e2e-{RUN}-")


def test_pods_land_where_their_topology_needs_are_met(cluster: LocalCluster, extender_scheduler: str) -> None:
    s = extender_scheduler
    eight_gpu = {"h100-a", "h100-b", "a100", "v100"}

    # 2 GPUs in one island: a free pair (PCIe NVLink pairs, the MIG node's two whole GPUs, GH200),
    # never cut into an 8-GPU island.
    pair = _short(_bind(cluster, _pod("pair", s, 2, {"nodetopo.io/gpus-in-one-island": "true"})))
    assert pair in {"pairs-a", "pairs-b", "mig", "gh200"}, pair

    island4 = _short(_bind(cluster, _pod("island4", s, 4, {"nodetopo.io/gpus-in-one-island": "true"})))
    assert island4 in eight_gpu, island4

    pix = {
        "nodetopo.io/max-nic-distance": "PIX",
        "nodetopo.io/rdma": "required",
        "nodetopo.io/gpus-in-one-island": "true",
    }
    full = _short(_bind(cluster, _pod("pix8", s, 8, pix)))
    assert full in {"h100-a", "h100-b", "v100"} - {island4}, full  # the DGX A100's NICs are PXB

    numa = _short(_bind(cluster, _pod("numa4", s, 4, {"nodetopo.io/numa-aligned": "true"})))
    assert numa in {"h100-a", "h100-b", "v100", "pairs-a", "pairs-b", "plain-a", "plain-b"}, numa

    for i in range(3):
        rdma = _short(_bind(cluster, _pod(f"rdma-{i}", s, 1, {"nodetopo.io/rdma": "required"})))
        assert rdma not in {"plain-a", "plain-b", "bare"}, rdma

    ib = _short(_bind(cluster, _pod("ib", s, 2, {"nodetopo.io/link-layer": "InfiniBand"}, group="link")))
    eth = _short(_bind(cluster, _pod("eth", s, 2, {"nodetopo.io/link-layer": "Ethernet"}, group="link")))
    assert (ib, eth) == ("ll-ib", "ll-eth")


def test_unsatisfiable_pods_stay_pending_with_the_reason(
    cluster: LocalCluster, extender_scheduler: str
) -> None:
    s = extender_scheduler
    message = _stays_pending(
        cluster,
        _pod("numa8", s, 8, {"nodetopo.io/numa-aligned": "true"}),
        "GPUs on one NUMA node, pod needs 8",
    )
    assert "nodetopo: " in message
    _stays_pending(
        cluster,
        _pod("typo", s, 1, {"nodetopo.io/max-nic-distance": "CLOSE"}),
        "nodetopo.io/max-nic-distance: expected one of PIX|PXB|PHB|NODE|SYS",
    )


def test_node_affinity_on_nodetopo_labels_without_the_extender(
    cluster: LocalCluster, gpu_nodes: dict[str, Any], plain_scheduler: str
) -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "nodetopo.io/nvlink.island-size", "operator": "Gt", "values": ["3"]},
                            {"key": "nodetopo.io/rdma", "operator": "In", "values": ["true"]},
                        ]
                    }
                ]
            }
        }
    }
    matching = {
        name
        for name, topology in gpu_nodes.items()
        if topology is not None
        and max((len(i.gpus) for i in topology.nvlink_islands), default=1) > 3
        and any(n.rdma for n in topology.nics)
    }
    assert len(matching) >= 3
    landed = {_bind(cluster, _pod(f"affinity-{i}", plain_scheduler, 0, affinity=affinity)) for i in range(8)}
    assert landed <= matching, sorted(landed - matching)
    impossible = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "nodetopo.io/nvlink.island-size", "operator": "Gt", "values": ["8"]}
                        ]
                    }
                ]
            }
        }
    }
    _stays_pending(
        cluster, _pod("affinity-none", plain_scheduler, 0, affinity=impossible), "affinity", timeout=30
    )
