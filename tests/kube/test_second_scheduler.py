"""The second scheduler of deploy/scheduler/, run for real: the kube-scheduler binary of the test
control plane, started with the configuration from the ConfigMap that ``kubectl kustomize
deploy/scheduler`` builds (only the API endpoint and the extender's URL patched), as the
``nodetopo-scheduler`` service account of deploy/scheduler/rbac.yaml (a TokenRequest token, so the
shipped RBAC is what lets it run), leader election on. It calls ``nodetopo extender`` (as the
extender's own service account) on loopback.

Opted-in pods (``schedulerName: nodetopo-scheduler``) are placed by topology; a pod that does not
name it is never looked at by it; an extender outage leaves opted-in pods Pending (not ignorable)
while the cluster's scheduler with deploy/extender/scheduler-config.yaml (ignorable) still places
GPU pods. The service account's RBAC is checked by impersonation on the real API server, and the
Deployment is applied with a server-side dry run (there is no kubelet to run it).
"""

from __future__ import annotations

import json
import shutil
import ssl
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
from .test_extender_e2e import (
    _create_node,
    _create_nodetopology,
    _discover,
    _extender_token,
    _ok,
    _start,
    _stop,
    _wait_ready,
)

pytestmark = [pytest.mark.k8s, pytest.mark.slow]

SCHEDULER_DIR = REPO / "deploy" / "scheduler"
NAME = "nodetopo-scheduler"
SERVICE_ACCOUNT = f"system:serviceaccount:nodetopo:{NAME}"
RUN = uuid.uuid4().hex[:6]
NAMESPACE = f"nodetopo-second-{RUN}"
#: node suffix → fixture bundle
NODES = {"h100": "dgx-h100", "pairs": "pcie-4x-nvbridge", "plain": "pcie-8x-2socket"}


def _node(suffix: str) -> str:
    return f"second-{RUN}-{suffix}"


def built(cluster: LocalCluster) -> list[dict[str, Any]]:
    done = cluster.kubectl("kustomize", str(SCHEDULER_DIR))
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def shipped_config(cluster: LocalCluster) -> dict[str, Any]:
    """The KubeSchedulerConfiguration in the ConfigMap the Deployment mounts."""
    documents = built(cluster)
    (deployment,) = [d for d in documents if d["kind"] == "Deployment"]
    (volume,) = deployment["spec"]["template"]["spec"]["volumes"]
    (config_map,) = [d for d in documents if d["kind"] == "ConfigMap"]
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]  # the hashed name
    command = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    mount = deployment["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0]["mountPath"]
    assert f"--config={mount}/config.yaml" in command
    config: dict[str, Any] = yaml.safe_load(config_map["data"]["config.yaml"])
    return config


@pytest.fixture(scope="module")
def installed(cluster: LocalCluster) -> Iterator[list[dict[str, Any]]]:
    """deploy/scheduler applied: every object with a server-side dry run, then all but the Deployment
    for real (no kubelet runs its pods; the test starts the same binary with the same config)."""
    cluster.kubectl("apply", "-f", str(REPO / "deploy" / "namespace.yaml"))
    done = cluster.kubectl("apply", "--server-side", "--dry-run=server", "-k", str(SCHEDULER_DIR))
    assert f"deployment.apps/{NAME} serverside-applied (server dry run)" in done.stdout, done.stdout
    documents = [d for d in built(cluster) if d["kind"] != "Deployment"]
    text = yaml.safe_dump_all(documents)
    cluster.kubectl("apply", "--server-side", "--field-manager=nodetopo-tests", "-f", "-", input=text)
    try:
        yield documents
    finally:
        cluster.kubectl("delete", "--ignore-not-found", "-f", "-", input=text, check=False)


def _token(cluster: LocalCluster, namespace: str, service_account: str) -> str:
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


@pytest.fixture(scope="module")
def pool(cluster: LocalCluster) -> Iterator[dict[str, str]]:
    """Three GPU nodes with NodeTopology objects and a namespace for the pods; suffix → node name."""
    from nodetopo.crd import to_nodetopology
    from nodetopo.labels import to_labels

    nodes: dict[str, str] = {}
    try:
        for suffix, bundle in NODES.items():
            topology = _discover(bundle)
            name = _node(suffix)
            nodes[suffix] = name
            _create_node(cluster, name, len(topology.gpus), {"nodetopo-second": RUN, **to_labels(topology)})
            _create_nodetopology(cluster, to_nodetopology(topology, name))
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        _ok(cluster.request("POST", "/api/v1/namespaces", body=namespace), 201)
        account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}}
        _ok(
            cluster.request("POST", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts", body=account), 201, 409
        )
        yield nodes
    finally:
        status, pods = cluster.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods")
        for pod in (pods or {}).get("items", []) if status == 200 else []:
            name = pod["metadata"]["name"]
            cluster.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/{name}?gracePeriodSeconds=0")
        cluster.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}")
        for name in nodes.values():
            cluster.request("DELETE", f"/apis/nodetopo.io/v1alpha1/nodetopologies/{name}")
            cluster.request("DELETE", f"/api/v1/nodes/{name}")


def _start_scheduler(
    cluster: LocalCluster, tmp: Path, name: str, config: dict[str, Any], *, kubeconfig: Path, ready: str
) -> tuple[Any, Path]:
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    log = tmp / f"{name}.log"
    process = _start(
        [
            str(cluster.binary("kube-scheduler")),
            f"--config={path}",
            # as in the pod: delegated authentication/authorization with the same identity
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}",
            f"--cert-dir={tmp / (name + '-certs')}",
            "--v=2",
        ],
        log,
    )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        assert process.poll() is None, f"kube-scheduler exited:\n{log.read_text()[-4000:]}"
        if log.exists() and ready in log.read_text(errors="replace"):
            time.sleep(1.0)  # informers sync right after
            return process, log
        time.sleep(0.2)
    _stop(process)
    raise AssertionError(f"kube-scheduler: no {ready!r} after 90s:\n{log.read_text()[-4000:]}")


@pytest.fixture(scope="module")
def extender_url(
    cluster: LocalCluster, pool: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("second-extender")
    port = free_port()
    log = tmp / "extender.log"
    kubeconfig = cluster.write_kubeconfig(tmp / "extender.kubeconfig", token=_extender_token(cluster))
    argv = [sys.executable, "-m", "nodetopo", "extender", f"--kubeconfig={kubeconfig}"]
    extender = _start([*argv, f"--listen=127.0.0.1:{port}", "--log-level=info"], log)
    try:
        _wait_ready(f"http://127.0.0.1:{port}/readyz", extender, log)
        yield f"http://127.0.0.1:{port}"
    finally:
        _stop(extender)


@pytest.fixture(scope="module")
def second_scheduler(
    cluster: LocalCluster,
    installed: list[dict[str, Any]],
    extender_url: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Path]:
    """kube-scheduler with the shipped config, as the shipped service account; yields its log."""
    tmp = tmp_path_factory.mktemp("second-scheduler")
    kubeconfig = cluster.write_kubeconfig(
        tmp / "scheduler.kubeconfig", token=_token(cluster, "nodetopo", NAME)
    )
    config = shipped_config(cluster)
    config["clientConnection"] = {"kubeconfig": str(kubeconfig)}  # in the pod: the service account
    config["extenders"][0]["urlPrefix"] = extender_url  # in the pod: the Service
    process, log = _start_scheduler(
        cluster,
        tmp,
        NAME,
        config,
        kubeconfig=kubeconfig,
        ready="successfully acquired lease nodetopo/nodetopo-scheduler",
    )
    try:
        yield log
    finally:
        _stop(process)


def _pod(name: str, gpus: int, annotations: dict[str, str], scheduler: str | None = NAME) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "nodeSelector": {"nodetopo-second": RUN},
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
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "annotations": annotations},
        "spec": spec,
    }


def _create(cluster: LocalCluster, pod: dict[str, Any]) -> str:
    _ok(cluster.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", body=pod), 201)
    return str(pod["metadata"]["name"])


def _node_of(cluster: LocalCluster, name: str, timeout: float) -> str | None:
    deadline = time.monotonic() + timeout
    while True:
        pod = _ok(cluster.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods/{name}"), 200)
        if pod["spec"].get("nodeName") or time.monotonic() > deadline:
            return pod["spec"].get("nodeName")
        time.sleep(0.2)


def _events(cluster: LocalCluster, name: str) -> list[dict[str, Any]]:
    path = f"/api/v1/namespaces/{NAMESPACE}/events?fieldSelector=involvedObject.name%3D{name}"
    return list(_ok(cluster.request("GET", path), 200)["items"])


def _reporter(event: dict[str, Any]) -> str:
    return str(event.get("reportingComponent") or event.get("source", {}).get("component", ""))


def _filter_calls(url: str) -> float:
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as response:
        text = response.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("nodetopo_extender_requests_total{") and 'verb="filter"' in line
    )


def test_the_shipped_config_opts_pods_in_and_blocks_only_them(cluster: LocalCluster) -> None:
    config = shipped_config(cluster)
    assert [p["schedulerName"] for p in config["profiles"]] == [NAME]
    assert config["leaderElection"] == {
        "leaderElect": True,
        "resourceLock": "leases",
        "resourceNamespace": "nodetopo",
        "resourceName": NAME,
    }
    assert "kubeconfig" not in config.get("clientConnection", {})  # in-cluster: the service account
    (extender,) = config["extenders"]
    assert extender["urlPrefix"] == "http://nodetopo-extender.nodetopo.svc:8888"
    assert extender["managedResources"] == [{"name": "nvidia.com/gpu", "ignoredByScheduler": False}]
    assert extender["nodeCacheCapable"] is True
    # Only opted-in pods depend on it: they wait for the extender rather than land topology-blind.
    assert extender["ignorable"] is False
    # The cluster's own scheduler sends every GPU pod to the extender: an outage must not block them.
    for shipped in ("scheduler-config.yaml", "tls/scheduler-config.yaml"):
        (default,) = yaml.safe_load((REPO / "deploy" / "extender" / shipped).read_text())["extenders"]
        assert default["ignorable"] is True, shipped
    documents = built(cluster)
    (deployment,) = [d for d in documents if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"].startswith("registry.k8s.io/kube-scheduler:v")
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == NAME
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    policy = yaml.safe_load((REPO / "deploy" / "extender" / "networkpolicy.yaml").read_text())
    peers = [
        p["podSelector"]["matchLabels"]
        for p in policy["spec"]["ingress"][0]["from"]
        if "namespaceSelector" not in p
    ]
    assert any(peer.items() <= labels.items() for peer in peers), "the extender's NetworkPolicy must admit it"


def test_leader_election_holds_its_lease_with_the_shipped_rbac(
    cluster: LocalCluster, second_scheduler: Path
) -> None:
    lease = _ok(
        cluster.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/nodetopo/leases/{NAME}"), 200
    )
    assert lease["spec"]["holderIdentity"], lease
    first = lease["spec"]["renewTime"]
    deadline = time.monotonic() + 15
    while lease["spec"]["renewTime"] == first and time.monotonic() < deadline:
        time.sleep(0.5)
        lease = _ok(
            cluster.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/nodetopo/leases/{NAME}"), 200
        )
    assert lease["spec"]["renewTime"] != first, "the leader does not renew its Lease"
    forbidden = [
        line for line in second_scheduler.read_text(errors="replace").splitlines() if "forbidden" in line
    ]
    assert not forbidden, "\n".join(forbidden[:10])


def test_opted_in_pods_are_placed_by_topology(
    cluster: LocalCluster, pool: dict[str, str], second_scheduler: Path
) -> None:
    pair = _create(cluster, _pod("pair", 2, {"nodetopo.io/gpus-in-one-island": "true"}))
    assert _node_of(cluster, pair, 60) == pool["pairs"]  # a free NVLink pair, not a cut 8-GPU island
    pix = {"nodetopo.io/max-nic-distance": "PIX", "nodetopo.io/rdma": "required"}
    full = _create(cluster, _pod("pix8", 8, pix))
    assert _node_of(cluster, full, 60) == pool["h100"]
    scheduled = [e for e in _events(cluster, full) if e.get("reason") == "Scheduled"]
    assert scheduled and {_reporter(e) for e in scheduled} == {NAME}, scheduled
    numa = _create(cluster, _pod("numa8", 8, {"nodetopo.io/numa-aligned": "true"}))
    assert _node_of(cluster, numa, 15) is None
    messages = [e.get("message", "") for e in _events(cluster, numa) if e.get("reason") == "FailedScheduling"]
    assert any("GPUs on one NUMA node, pod needs 8" in m for m in messages), messages


def test_pods_that_do_not_name_it_are_left_alone(
    cluster: LocalCluster, pool: dict[str, str], extender_url: str, second_scheduler: Path
) -> None:
    before = _filter_calls(extender_url)
    name = _create(cluster, _pod("default", 1, {"nodetopo.io/rdma": "required"}, scheduler=None))
    _node_of(cluster, name, 10)  # the cluster's scheduler may or may not run in this session
    assert not [e for e in _events(cluster, name) if _reporter(e) == NAME]
    assert _filter_calls(extender_url) == before, "the extender was asked about a pod not opted in"
    pod = _ok(cluster.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods/{name}"), 200)
    assert pod["spec"]["schedulerName"] == "default-scheduler"
    # The same pod opted in is sent to the extender: the count above can move.
    opted_in = _create(cluster, _pod("opted-in", 1, {"nodetopo.io/rdma": "required"}))
    assert _node_of(cluster, opted_in, 60) in set(pool.values())
    assert _filter_calls(extender_url) > before


def test_an_extender_outage_blocks_only_opted_in_pods(
    cluster: LocalCluster, pool: dict[str, str], tmp_path: Path
) -> None:
    """Both shipped configs against an extender that does not answer (a port nobody listens on)."""
    dead = f"http://127.0.0.1:{free_port()}"
    processes = []
    try:
        for scheduler, config in (
            ("outage-second", shipped_config(cluster)),
            (
                "outage-default",
                yaml.safe_load((REPO / "deploy" / "extender" / "scheduler-config.yaml").read_text()),
            ),
        ):
            config["clientConnection"] = {"kubeconfig": str(cluster.kubeconfig)}
            config["leaderElection"] = {"leaderElect": False}  # the Lease is the fixture scheduler's
            config["profiles"] = [{"schedulerName": scheduler}]
            config["extenders"][0]["urlPrefix"] = dead
            process, _ = _start_scheduler(
                cluster,
                tmp_path,
                scheduler,
                config,
                kubeconfig=cluster.kubeconfig,
                ready="Starting Kubernetes Scheduler",
            )
            processes.append(process)
        blocked = _create(cluster, _pod("outage-second", 1, {}, scheduler="outage-second"))
        placed = _create(cluster, _pod("outage-default", 1, {}, scheduler="outage-default"))
        assert _node_of(cluster, placed, 60) in set(pool.values())  # ignorable: placed topology-blind
        assert _node_of(cluster, blocked, 5) is None  # not ignorable: waits for the extender
        messages = [
            e.get("message", "") for e in _events(cluster, blocked) if e.get("reason") == "FailedScheduling"
        ]
        assert messages, json.dumps(_events(cluster, blocked))[:2000]
    finally:
        for process in processes:
            _stop(process)


def test_the_service_account_can_schedule_and_nothing_more(
    cluster: LocalCluster, installed: list[dict[str, Any]], pool: dict[str, str]
) -> None:
    """Impersonating the scheduler's service account (kubectl --as) on the real API server."""

    def can(verb: str, resource: str, namespace: str = "", subresource: str = "", name: str = "") -> bool:
        args = ["auth", "can-i", verb, f"{resource}/{name}" if name else resource, f"--as={SERVICE_ACCOUNT}"]
        args += [f"--namespace={namespace}"] if namespace else ["--all-namespaces"]
        if subresource:
            args.append(f"--subresource={subresource}")
        done = cluster.kubectl(*args, check=False)
        assert done.stdout.strip() in {"yes", "no"}, (args, done.stdout, done.stderr)
        return done.stdout.strip() == "yes"

    allowed = [
        ("create", "pods", "default", "binding", ""),
        ("patch", "pods", "default", "status", ""),
        ("delete", "pods", "default", "", ""),  # preemption
        ("watch", "pods", "", "", ""),
        ("list", "nodes", "", "", ""),
        ("watch", "persistentvolumeclaims", "", "", ""),
        ("update", "persistentvolumeclaims", "default", "", ""),  # volume binding
        ("update", "persistentvolumes", "", "", ""),
        ("create", "events.events.k8s.io", "default", "", ""),
        ("create", "leases.coordination.k8s.io", "nodetopo", "", ""),
        ("get", "leases.coordination.k8s.io", "nodetopo", "", NAME),
        ("update", "leases.coordination.k8s.io", "nodetopo", "", NAME),
        ("get", "configmaps", "kube-system", "", "extension-apiserver-authentication"),
        ("create", "tokenreviews.authentication.k8s.io", "", "", ""),
    ]
    denied = [
        ("get", "secrets", "nodetopo", "", ""),
        ("list", "secrets", "", "", ""),
        ("patch", "nodes", "", "", ""),
        ("update", "nodes", "", "", ""),
        ("delete", "nodes", "", "", ""),
        ("create", "pods", "default", "", ""),
        ("update", "leases.coordination.k8s.io", "nodetopo", "", "someone-else"),
        ("get", "configmaps", "nodetopo", "", ""),
        ("get", "configmaps", "kube-system", "", "kubeadm-config"),
        ("update", "configmaps", "kube-system", "", "extension-apiserver-authentication"),
        ("create", "nodetopologies.nodetopo.io", "", "", ""),
        ("create", "clusterrolebindings.rbac.authorization.k8s.io", "", "", ""),
    ]
    wrong = [rule for rule in allowed if not can(*rule)] + [("DENY", *rule) for rule in denied if can(*rule)]
    assert not wrong, wrong
    # And real impersonated requests, not only the review.
    assert cluster.kubectl("get", "nodes", f"--as={SERVICE_ACCOUNT}", check=False).returncode == 0
    refused = cluster.kubectl("get", "secrets", "-n", "nodetopo", f"--as={SERVICE_ACCOUNT}", check=False)
    assert refused.returncode != 0 and "forbidden" in refused.stderr, refused.stderr
    patch = cluster.kubectl(
        "label", "node", "--all", "nodetopo-second-rbac=x", f"--as={SERVICE_ACCOUNT}", check=False
    )
    assert patch.returncode != 0 and "forbidden" in patch.stderr, patch.stderr


def test_the_tls_component_calls_the_extender_over_https(
    cluster: LocalCluster, installed: list[dict[str, Any]], pool: dict[str, str], tmp_path: Path
) -> None:
    """deploy/scheduler/tls: the same config but for urlPrefix and tlsConfig, the client certificate
    mounted where tlsConfig reads it, and the real kube-scheduler with that config reaching an
    extender that requires a client certificate."""
    from .test_extender_tls_e2e import certificates

    shutil.copytree(REPO / "deploy", tmp_path / "deploy")
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        "resources: [../deploy/scheduler]\ncomponents: [../deploy/scheduler/tls]\n"
    )
    done = cluster.kubectl("apply", "--server-side", "--dry-run=server", "-k", str(overlay))
    assert f"deployment.apps/{NAME} serverside-applied (server dry run)" in done.stdout, done.stdout
    documents = [d for d in yaml.safe_load_all(cluster.kubectl("kustomize", str(overlay)).stdout) if d]
    (config_map,) = [d for d in documents if d["kind"] == "ConfigMap"]
    (deployment,) = [d for d in documents if d["kind"] == "Deployment"]
    pod_spec = deployment["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod_spec["volumes"]}
    assert volumes["config"]["configMap"]["name"] == config_map["metadata"]["name"]
    config = yaml.safe_load(config_map["data"]["config.yaml"])
    (extender,) = config["extenders"]
    tls = extender.pop("tlsConfig")
    assert extender.pop("urlPrefix") == "https://nodetopo-extender.nodetopo.svc:8888"
    plain = shipped_config(cluster)
    del plain["extenders"][0]["urlPrefix"]
    assert config == plain  # the TLS variant differs in nothing else (ignorable: false included)
    mounts = {m["name"]: m["mountPath"] for m in pod_spec["containers"][0]["volumeMounts"]}
    secret = volumes["extender-tls"]["secret"]["secretName"]
    assert secret == "nodetopo-scheduler-extender-client"
    assert {Path(p).parent for p in tls.values()} == {Path(mounts["extender-tls"])}
    assert {Path(p).name for p in tls.values()} == {"ca.crt", "tls.crt", "tls.key"}  # kubernetes.io/tls keys

    files = certificates(tmp_path)
    port = free_port()
    log = tmp_path / "extender.log"
    kubeconfig = cluster.write_kubeconfig(tmp_path / "extender.kubeconfig", token=_extender_token(cluster))
    extender_process = _start(
        [
            sys.executable, "-m", "nodetopo", "extender", f"--kubeconfig={kubeconfig}",
            f"--listen=127.0.0.1:{port}", "--log-level=info",
            f"--tls-cert-file={files['tls.crt']}", f"--tls-private-key-file={files['tls.key']}",
            f"--tls-client-ca-file={files['ca.crt']}",
        ],
        log,
    )  # fmt: skip
    scheduler = None
    try:
        _wait_ready_https(port, files["ca.crt"], extender_process, log)
        own = cluster.write_kubeconfig(
            tmp_path / "scheduler.kubeconfig", token=_token(cluster, "nodetopo", NAME)
        )
        config["clientConnection"] = {"kubeconfig": str(own)}
        config["leaderElection"] = {"leaderElect": False}  # the Lease is the fixture scheduler's
        config["profiles"] = [{"schedulerName": "nodetopo-scheduler-tls"}]  # not to race it for pods
        config["extenders"][0]["urlPrefix"] = f"https://127.0.0.1:{port}"
        config["extenders"][0]["tlsConfig"] = {
            "caFile": str(files["ca.crt"]),
            "certFile": str(files["client.crt"]),
            "keyFile": str(files["client.key"]),
        }
        scheduler, _ = _start_scheduler(
            cluster, tmp_path, "tls", config, kubeconfig=own, ready="Starting Kubernetes Scheduler"
        )
        # Only the extender answers this (1 GPU fits the pool, the earlier tests' pods notwithstanding):
        # its reason in the events proves the HTTPS call with the client certificate was answered.
        typo = {"nodetopo.io/max-nic-distance": "CLOSE"}
        name = _create(cluster, _pod("tls-typo", 1, typo, "nodetopo-scheduler-tls"))
        expect = "nodetopo.io/max-nic-distance: expected one of PIX|PXB|PHB|NODE|SYS"
        deadline = time.monotonic() + 45
        messages: list[str] = []
        while time.monotonic() < deadline and not any(expect in m for m in messages):
            time.sleep(0.5)
            events = _events(cluster, name)
            messages = [e.get("message", "") for e in events if e.get("reason") == "FailedScheduling"]
        assert any(expect in m for m in messages), messages
        assert _node_of(cluster, name, 0) is None
    finally:
        if scheduler is not None:
            _stop(scheduler)
        _stop(extender_process)


def _wait_ready_https(port: int, ca: Path, process: Any, log: Path) -> None:
    context = ssl.create_default_context(cafile=str(ca))
    deadline = time.monotonic() + 60
    while True:  # /readyz needs no client certificate
        try:
            with urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", timeout=2, context=context) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        assert process.poll() is None and time.monotonic() < deadline, log.read_text()[-4000:]
        time.sleep(0.2)
