"""What the scheduler end-to-end tests share: the real kube-scheduler and ``nodetopo extender`` as
processes, a pool of GPU Nodes with NodeTopology objects discovered from the fixture bundles, pods
created through the API server, and the extender placement cases every scheduler path must pass.

Used by test_extender_e2e.py (the cluster's scheduler with deploy/extender/scheduler-config.yaml),
test_second_scheduler.py (deploy/scheduler's kube-scheduler, its shipped configuration and service
account) and test_extender_tls_e2e.py (HTTPS with a client certificate).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from helpers import BUNDLES

from .cluster import REPO, LocalCluster, free_port

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


# ----------------------------------------------------------------------------------------------
# API server
# ----------------------------------------------------------------------------------------------


def ok(answer: tuple[int, Any], *expected: int) -> Any:
    status, body = answer
    assert status in expected, f"HTTP {status}: {body}"
    return body


def discover(bundle: str) -> Any:
    from nodetopo.topology.discover import bundle_context, scan

    logging.getLogger("nodetopo").setLevel(logging.ERROR)
    return scan(bundle_context(BUNDLES / bundle)).topology


def create_node(cluster: LocalCluster, name: str, gpus: int, labels: dict[str, str]) -> None:
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}
    ok(cluster.request("POST", "/api/v1/nodes", body=body), 201)
    # Admission taints new Nodes not-ready until a kubelet reports; there is none, so lift it.
    ok(
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
    ok(
        cluster.request(
            "PATCH",
            f"/api/v1/nodes/{name}/status",
            body=status,
            content_type="application/merge-patch+json",
        ),
        200,
    )


def create_nodetopology(cluster: LocalCluster, body: dict[str, Any]) -> None:
    from nodetopo.resource.identity import PLURAL, VERSION

    path = f"/apis/nodetopo.io/{VERSION}/{PLURAL}"
    name = body["metadata"]["name"]
    meta_only = {k: v for k, v in body.items() if k != "status"}
    for condition in body["status"]["conditions"]:  # the publisher's job; the CRD requires it
        condition.setdefault("lastTransitionTime", "2025-01-01T00:00:00Z")
    ok(cluster.request("POST", path, body=meta_only), 201)
    ok(
        cluster.request(
            "PATCH",
            f"{path}/{name}/status",
            body={"status": body["status"]},
            content_type="application/merge-patch+json",
        ),
        200,
    )


def create_namespace(cluster: LocalCluster, namespace: str) -> None:
    """A namespace for test pods, with the ``default`` service account pods need (no controller here)."""
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    ok(cluster.request("POST", "/api/v1/namespaces", body=body), 201)
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}}
    ok(cluster.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", body=account), 201, 409)


def delete_pods(cluster: LocalCluster, namespace: str) -> None:
    """Delete every pod of ``namespace`` at once (no kubelet to wait for) and wait until they are gone."""
    status, pods = cluster.request("GET", f"/api/v1/namespaces/{namespace}/pods")
    for pod in (pods or {}).get("items", []) if status == 200 else []:
        name = pod["metadata"]["name"]
        cluster.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}?gracePeriodSeconds=0")
    deadline = time.monotonic() + 30
    while status == 200 and time.monotonic() < deadline:
        status, pods = cluster.request("GET", f"/api/v1/namespaces/{namespace}/pods")
        if not (pods or {}).get("items"):
            return
        time.sleep(0.2)


def service_account_token(cluster: LocalCluster, namespace: str, service_account: str) -> str:
    status, answer = cluster.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token",
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        },
    )
    assert status == 201, answer
    return str(answer["status"]["token"])


def extender_token(cluster: LocalCluster) -> str:
    """Apply deploy/namespace.yaml and deploy/extender/rbac.yaml; a token for that service account."""
    cluster.kubectl("apply", "-f", str(REPO / "deploy" / "namespace.yaml"))
    cluster.kubectl("apply", "-f", str(REPO / "deploy" / "extender" / "rbac.yaml"))
    return service_account_token(cluster, "nodetopo", "nodetopo-extender")


# ----------------------------------------------------------------------------------------------
# Processes: kube-scheduler and nodetopo extender
# ----------------------------------------------------------------------------------------------


def start(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
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


def stop(process: subprocess.Popen[bytes]) -> None:
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


def wait_ready(
    url: str,
    process: subprocess.Popen[bytes],
    log: Path,
    timeout: float = 60,
    context: ssl.SSLContext | None = None,
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, f"exited {process.returncode}:\n{log.read_text()[-4000:]}"
        with (
            contextlib.suppress(OSError),
            urllib.request.urlopen(url, timeout=2, context=context) as response,
        ):
            if response.status == 200:
                return
        time.sleep(0.2)
    raise AssertionError(f"{url} not ready after {timeout}s:\n{log.read_text()[-4000:]}")


@contextlib.contextmanager
def running_extender(
    cluster: LocalCluster, tmp: Path, *args: str, tls: dict[str, Path] | None = None
) -> Iterator[str]:
    """``nodetopo extender`` on loopback as its own service account (deploy/extender/rbac.yaml),
    logging to ``tmp/extender.log``; yields its URL. With ``tls`` (``certificates``) it serves HTTPS
    and requires a client certificate signed by the CA (``/readyz`` needs none)."""
    port = free_port()
    log = tmp / "extender.log"
    kubeconfig = cluster.write_kubeconfig(tmp / "extender.kubeconfig", token=extender_token(cluster))
    argv = [sys.executable, "-m", "nodetopo", "extender", f"--kubeconfig={kubeconfig}"]
    argv += [f"--listen=127.0.0.1:{port}", "--log-level=info", *args]
    context = None
    if tls is not None:
        argv += [f"--tls-cert-file={tls['tls.crt']}", f"--tls-private-key-file={tls['tls.key']}"]
        argv += [f"--tls-client-ca-file={tls['ca.crt']}"]
        context = ssl.create_default_context(cafile=str(tls["ca.crt"]))
    url = f"{'https' if tls is not None else 'http'}://127.0.0.1:{port}"
    process = start(argv, log)
    try:
        wait_ready(f"{url}/readyz", process, log, context=context)
        yield url
    finally:
        stop(process)


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def certificates(tmp: Path) -> dict[str, Path]:
    """A CA, a serving certificate for 127.0.0.1 and a client certificate, all signed by the CA."""
    files = {
        name: tmp / name for name in ("ca.crt", "ca.key", "tls.crt", "tls.key", "client.crt", "client.key")
    }
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes")
    openssl("req", "-x509", *ec, "-keyout", str(files["ca.key"]), "-out", str(files["ca.crt"]),
            "-days", "1", "-subj", "/CN=nodetopo-test-ca")  # fmt: skip
    for name, subject, extension in (
        ("tls", "/CN=nodetopo-extender", "subjectAltName=IP:127.0.0.1"),
        ("client", "/CN=kube-scheduler", "extendedKeyUsage=clientAuth"),
    ):
        csr = tmp / f"{name}.csr"
        openssl("req", "-new", *ec, "-keyout", str(files[f"{name}.key"]), "-out", str(csr), "-subj", subject)
        ext = tmp / f"{name}.ext"
        ext.write_text(extension + "\n")
        ca = ("-CA", str(files["ca.crt"]), "-CAkey", str(files["ca.key"]), "-CAcreateserial")
        openssl("x509", "-req", "-in", str(csr), *ca, "-out", str(files[f"{name}.crt"]), "-days", "1",
                "-extfile", str(ext))  # fmt: skip
    return files


def start_scheduler(
    cluster: LocalCluster,
    tmp: Path,
    name: str,
    config: dict[str, Any],
    *,
    kubeconfig: Path | None = None,
    ready: str = "Starting Kubernetes Scheduler",
    timeout: float = 90,
    binary: Path | None = None,
) -> tuple[subprocess.Popen[bytes], Path]:
    """The real kube-scheduler with ``config``; with ``kubeconfig``, delegated authentication and
    authorization as that identity (as in a pod). Returns once its log says ``ready``. ``binary``: a
    kube-scheduler built with out-of-tree plugins (default: the control plane's)."""
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    log = tmp / f"{name}.log"
    delegated = (
        [f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}"]
        if kubeconfig
        else []
    )
    process = start(
        [
            str(binary or cluster.binary("kube-scheduler")),
            f"--config={path}",
            *delegated,
            "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}",
            f"--cert-dir={tmp / (name + '-certs')}",
            "--v=2",
        ],
        log,
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:  # /healthz needs auth config; the log says when it leads
        assert process.poll() is None, f"kube-scheduler exited:\n{log.read_text()[-4000:]}"
        if log.exists() and ready in log.read_text(errors="replace"):
            time.sleep(1.0)  # informers sync right after
            return process, log
        time.sleep(0.2)
    stop(process)
    raise AssertionError(f"kube-scheduler: no {ready!r} after {timeout}s:\n{log.read_text()[-4000:]}")


def cluster_scheduler_config(cluster: LocalCluster, name: str, extender_url: str | None) -> dict[str, Any]:
    """The cluster scheduler's example (deploy/extender/scheduler-config.yaml) pointed at this cluster
    and extender (none: the default plugins only)."""
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


# ----------------------------------------------------------------------------------------------
# The GPU node pool and its pods
# ----------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Pool:
    """GPU Nodes named ``<prefix>-<suffix>`` (labelled ``nodetopo-e2e: <prefix>`` and a group) and
    a namespace for the pods; ``topologies`` maps node name → topology (None: no NodeTopology)."""

    prefix: str
    namespace: str
    topologies: dict[str, Any]

    def node(self, suffix: str) -> str:
        return f"{self.prefix}-{suffix}"

    def short(self, node: str) -> str:
        return node.removeprefix(f"{self.prefix}-")

    def pod(
        self,
        name: str,
        scheduler: str | None,
        gpus: int,
        annotations: dict[str, str] | None = None,
        *,
        group: str | None = "main",
        affinity: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A pod asking for ``gpus`` GPUs on this pool's nodes (of ``group``; None: any of them);
        ``scheduler`` None leaves the cluster's default scheduler."""
        selector = {"nodetopo-e2e": self.prefix}
        if group:
            selector["nodetopo-e2e-group"] = group
        spec: dict[str, Any] = {
            "automountServiceAccountToken": False,
            "nodeSelector": selector,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/cuda:e2e",
                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                }
            ],
        }
        if scheduler:
            spec["schedulerName"] = scheduler
        if affinity:
            spec["affinity"] = affinity
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": self.namespace, "annotations": annotations or {}},
            "spec": spec,
        }


@contextlib.contextmanager
def gpu_pool(cluster: LocalCluster, prefix: str) -> Iterator[Pool]:
    """``MAIN_NODES`` (group main), a bare GPU node without NodeTopology, and the link-layer pair
    (group link), each a Node with ``nvidia.com/gpu`` capacity and the agent's labels; deleted after."""
    from nodetopo.resource.body import to_nodetopology
    from nodetopo.resource.labels import to_labels

    pool = Pool(prefix=prefix, namespace=f"{prefix}-pods", topologies={})
    created: list[tuple[str, bool]] = []
    try:
        for suffix, bundle in MAIN_NODES.items():
            topology = discover(bundle)
            name = pool.node(suffix)
            labels = {"nodetopo-e2e": prefix, "nodetopo-e2e-group": "main", **to_labels(topology)}
            create_node(cluster, name, len(topology.gpus), labels)
            created.append((name, False))
            create_nodetopology(cluster, to_nodetopology(topology, name))
            created.append((name, True))
            pool.topologies[name] = topology
        create_node(cluster, pool.node(BARE_NODE), 8, {"nodetopo-e2e": prefix, "nodetopo-e2e-group": "main"})
        created.append((pool.node(BARE_NODE), False))
        pool.topologies[pool.node(BARE_NODE)] = None
        pairs = discover("pcie-4x-nvbridge")
        for suffix, layer in LINK_NODES.items():
            name = pool.node(suffix)
            body = to_nodetopology(pairs, name)
            for nic in body["status"]["nics"]:
                nic["linkLayer"] = layer
            create_node(
                cluster, name, len(pairs.gpus), {"nodetopo-e2e": prefix, "nodetopo-e2e-group": "link"}
            )
            created.append((name, False))
            create_nodetopology(cluster, body)
            created.append((name, True))
            pool.topologies[name] = pairs
        create_namespace(cluster, pool.namespace)
        yield pool
    finally:
        delete_pods(cluster, pool.namespace)
        cluster.request("DELETE", f"/api/v1/namespaces/{pool.namespace}")
        for name, is_topology in reversed(created):
            path = (
                f"/apis/nodetopo.io/v1alpha1/nodetopologies/{name}"
                if is_topology
                else f"/api/v1/nodes/{name}"
            )
            cluster.request("DELETE", path)


def node_of(cluster: LocalCluster, namespace: str, name: str, timeout: float) -> str | None:
    """The node the pod is bound to, waiting up to ``timeout`` seconds; None if still unbound."""
    deadline = time.monotonic() + timeout
    while True:
        pod = ok(cluster.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}"), 200)
        node = pod["spec"].get("nodeName")
        if node or time.monotonic() > deadline:
            return str(node) if node else None
        time.sleep(0.2)


def create_pod(cluster: LocalCluster, pod: dict[str, Any]) -> str:
    namespace = pod["metadata"]["namespace"]
    ok(cluster.request("POST", f"/api/v1/namespaces/{namespace}/pods", body=pod), 201)
    return str(pod["metadata"]["name"])


def bind(cluster: LocalCluster, pod: dict[str, Any], timeout: float = 60) -> str:
    """Create the pod and wait until the scheduler binds it; return the node name."""
    name = create_pod(cluster, pod)
    node = node_of(cluster, pod["metadata"]["namespace"], name, timeout)
    if node:
        return node
    current = ok(
        cluster.request("GET", f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods/{name}"), 200
    )
    raise AssertionError(f"pod {name} not bound after {timeout}s: {json.dumps(current.get('status'))}")


def events(cluster: LocalCluster, namespace: str, name: str) -> list[dict[str, Any]]:
    path = f"/api/v1/namespaces/{namespace}/events?fieldSelector=involvedObject.name%3D{name}"
    return list(ok(cluster.request("GET", path), 200)["items"])


def reporter(event: dict[str, Any]) -> str:
    """Who reported an event: for a scheduler, its profile's schedulerName."""
    return str(event.get("reportingComponent") or event.get("source", {}).get("component", ""))


def stays_pending(cluster: LocalCluster, pod: dict[str, Any], expect: str, timeout: float = 45) -> str:
    """Create the pod; it must stay unbound and get a FailedScheduling event containing ``expect``."""
    namespace, name = pod["metadata"]["namespace"], create_pod(cluster, pod)
    deadline = time.monotonic() + timeout
    messages: list[str] = []
    while time.monotonic() < deadline:
        found = events(cluster, namespace, name)
        messages = [e.get("message", "") for e in found if e.get("reason") == "FailedScheduling"]
        if any(expect in m for m in messages):
            break
        time.sleep(0.5)
    current = ok(cluster.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}"), 200)
    assert not current["spec"].get("nodeName"), f"{name} was bound to {current['spec']['nodeName']}"
    assert any(expect in m for m in messages), f"no FailedScheduling event with {expect!r}: {messages}"
    return next(m for m in messages if expect in m)


# ----------------------------------------------------------------------------------------------
# The extender cases: each scheduler path that calls the extender runs them on a fresh pool
# ----------------------------------------------------------------------------------------------


def check_placement(cluster: LocalCluster, pool: Pool, scheduler: str) -> None:
    """Pods with each ``nodetopo.io/`` annotation land on a node that satisfies it, placed by
    ``scheduler`` (its name on the Scheduled event)."""
    eight_gpu = {"h100-a", "h100-b", "a100", "v100"}

    def placed(name: str, gpus: int, annotations: dict[str, str], group: str = "main") -> str:
        return pool.short(bind(cluster, pool.pod(name, scheduler, gpus, annotations, group=group)))

    # 2 GPUs in one island: a free pair (PCIe NVLink pairs, the MIG node's two whole GPUs, GH200),
    # never cut into an 8-GPU island.
    pair = placed("pair", 2, {"nodetopo.io/gpus-in-one-island": "true"})
    assert pair in {"pairs-a", "pairs-b", "mig", "gh200"}, pair
    scheduled = [e for e in events(cluster, pool.namespace, "pair") if e.get("reason") == "Scheduled"]
    assert scheduled and {reporter(e) for e in scheduled} == {scheduler}, scheduled

    island4 = placed("island4", 4, {"nodetopo.io/gpus-in-one-island": "true"})
    assert island4 in eight_gpu, island4

    pix = {
        "nodetopo.io/max-nic-distance": "PIX",
        "nodetopo.io/rdma": "required",
        "nodetopo.io/gpus-in-one-island": "true",
    }
    full = placed("pix8", 8, pix)
    assert full in {"h100-a", "h100-b", "v100"} - {island4}, full  # the DGX A100's NICs are PXB

    numa = placed("numa4", 4, {"nodetopo.io/numa-aligned": "true"})
    assert numa in {"h100-a", "h100-b", "v100", "pairs-a", "pairs-b", "plain-a", "plain-b"}, numa

    for i in range(3):
        rdma = placed(f"rdma-{i}", 1, {"nodetopo.io/rdma": "required"})
        assert rdma not in {"plain-a", "plain-b", "bare"}, rdma

    ib = placed("ib", 2, {"nodetopo.io/link-layer": "InfiniBand"}, group="link")
    eth = placed("eth", 2, {"nodetopo.io/link-layer": "Ethernet"}, group="link")
    assert (ib, eth) == ("ll-ib", "ll-eth")


def check_unsatisfiable(cluster: LocalCluster, pool: Pool, scheduler: str) -> None:
    """Pods no node satisfies, or with a bad annotation, stay Pending with the extender's reason."""
    message = stays_pending(
        cluster,
        pool.pod("numa8", scheduler, 8, {"nodetopo.io/numa-aligned": "true"}),
        "GPUs on one NUMA node, pod needs 8",
    )
    assert "nodetopo: " in message
    stays_pending(
        cluster,
        pool.pod("typo", scheduler, 1, {"nodetopo.io/max-nic-distance": "CLOSE"}),
        "nodetopo.io/max-nic-distance: expected one of PIX|PXB|PHB|NODE|SYS",
    )
