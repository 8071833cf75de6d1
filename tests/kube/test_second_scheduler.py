"""The second scheduler of deploy/scheduler/, run for real: the kube-scheduler binary of the test
control plane, started with the configuration from the ConfigMap that ``kubectl kustomize
deploy/scheduler`` builds (only the API endpoint and the extender's URL patched), as the
``nodetopo-scheduler`` service account of deploy/scheduler/rbac.yaml (a TokenRequest token, so the
shipped RBAC is what lets it run), leader election on. It calls ``nodetopo extender`` (as the
extender's own service account) on loopback.

Opted-in pods (``schedulerName: nodetopo-scheduler``) pass every extender placement case of
test_extender_e2e.py (scheduler_support.check_placement and check_unsatisfiable, on the same kind of
pool of fixture-bundle nodes); a pod that does not name it is never looked at by it; an extender
outage leaves opted-in pods Pending (not ignorable) while the cluster's scheduler with
deploy/extender/scheduler-config.yaml (ignorable) still places GPU pods. The service account's RBAC
is checked by impersonation on the real API server, and the Deployment is applied with a server-side
dry run (there is no kubelet to run it).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from . import scheduler_support as s
from .cluster import REPO, LocalCluster, free_port

pytestmark = [pytest.mark.k8s, pytest.mark.slow]

SCHEDULER_DIR = REPO / "deploy" / "scheduler"
NAME = "nodetopo-scheduler"
SERVICE_ACCOUNT = f"system:serviceaccount:nodetopo:{NAME}"
RUN = uuid.uuid4().hex[:6]


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


@pytest.fixture(scope="module")
def pool(cluster: LocalCluster) -> Iterator[s.Pool]:
    """The GPU node pool of the extender e2e (its own nodes, named second-<run>-...)."""
    with s.gpu_pool(cluster, f"second-{RUN}") as created:
        yield created


@pytest.fixture(scope="module")
def extender_url(
    cluster: LocalCluster, pool: s.Pool, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    with s.running_extender(cluster, tmp_path_factory.mktemp("second-extender")) as url:
        yield url


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
        tmp / "scheduler.kubeconfig", token=s.service_account_token(cluster, "nodetopo", NAME)
    )
    config = shipped_config(cluster)
    config["clientConnection"] = {"kubeconfig": str(kubeconfig)}  # in the pod: the service account
    config["extenders"][0]["urlPrefix"] = extender_url  # in the pod: the Service
    process, log = s.start_scheduler(
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
        s.stop(process)


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
    # every opted-in pod is sent, claim-based ones included (no resource name to match a claim by)
    assert "managedResources" not in extender
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
    lease = s.ok(
        cluster.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/nodetopo/leases/{NAME}"), 200
    )
    assert lease["spec"]["holderIdentity"], lease
    first = lease["spec"]["renewTime"]
    deadline = time.monotonic() + 15
    while lease["spec"]["renewTime"] == first and time.monotonic() < deadline:
        time.sleep(0.5)
        lease = s.ok(
            cluster.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/nodetopo/leases/{NAME}"), 200
        )
    assert lease["spec"]["renewTime"] != first, "the leader does not renew its Lease"
    forbidden = [
        line for line in second_scheduler.read_text(errors="replace").splitlines() if "forbidden" in line
    ]
    assert not forbidden, "\n".join(forbidden[:10])


def test_pods_land_where_their_topology_needs_are_met(
    cluster: LocalCluster, pool: s.Pool, second_scheduler: Path
) -> None:
    """test_extender_e2e.py's placement cases, through the second scheduler (its name on the events)."""
    s.check_placement(cluster, pool, NAME)


def test_unsatisfiable_pods_stay_pending_with_the_reason(
    cluster: LocalCluster, pool: s.Pool, second_scheduler: Path
) -> None:
    s.check_unsatisfiable(cluster, pool, NAME)


def test_pods_that_do_not_name_it_are_left_alone(
    cluster: LocalCluster, pool: s.Pool, extender_url: str, second_scheduler: Path
) -> None:
    before = _filter_calls(extender_url)
    name = s.create_pod(cluster, pool.pod("default", None, 1, {"nodetopo.io/rdma": "required"}))
    s.node_of(cluster, pool.namespace, name, 10)  # the cluster's scheduler may or may not run here
    assert not [e for e in s.events(cluster, pool.namespace, name) if s.reporter(e) == NAME]
    assert _filter_calls(extender_url) == before, "the extender was asked about a pod not opted in"
    pod = s.ok(cluster.request("GET", f"/api/v1/namespaces/{pool.namespace}/pods/{name}"), 200)
    assert pod["spec"]["schedulerName"] == "default-scheduler"
    # The same pod opted in is sent to the extender: the count above can move.
    opted_in = s.create_pod(cluster, pool.pod("opted-in", NAME, 1, {"nodetopo.io/rdma": "required"}))
    assert s.node_of(cluster, pool.namespace, opted_in, 60) in pool.topologies
    assert _filter_calls(extender_url) > before


def test_an_extender_outage_blocks_only_opted_in_pods(
    cluster: LocalCluster, pool: s.Pool, tmp_path: Path
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
            process, _ = s.start_scheduler(
                cluster,
                tmp_path,
                scheduler,
                config,
                kubeconfig=cluster.kubeconfig,
                ready="Starting Kubernetes Scheduler",
            )
            processes.append(process)
        blocked = s.create_pod(cluster, pool.pod("outage-second", "outage-second", 1))
        placed = s.create_pod(cluster, pool.pod("outage-default", "outage-default", 1))
        # ignorable: placed topology-blind; not ignorable: waits for the extender
        assert s.node_of(cluster, pool.namespace, placed, 60) in pool.topologies
        assert s.node_of(cluster, pool.namespace, blocked, 5) is None
        found = s.events(cluster, pool.namespace, blocked)
        messages = [e.get("message", "") for e in found if e.get("reason") == "FailedScheduling"]
        assert messages, json.dumps(found)[:2000]
    finally:
        for process in processes:
            s.stop(process)


def test_the_service_account_can_schedule_and_nothing_more(
    cluster: LocalCluster, installed: list[dict[str, Any]], pool: s.Pool
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
    cluster: LocalCluster, installed: list[dict[str, Any]], pool: s.Pool, tmp_path: Path
) -> None:
    """deploy/scheduler/tls: the same config but for urlPrefix and tlsConfig, the client certificate
    mounted where tlsConfig reads it, and the real kube-scheduler with that config reaching an
    extender that requires a client certificate."""
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

    files = s.certificates(tmp_path)
    scheduler = None
    extender = contextlib.ExitStack()
    try:
        url = extender.enter_context(s.running_extender(cluster, tmp_path, tls=files))
        own = cluster.write_kubeconfig(
            tmp_path / "scheduler.kubeconfig", token=s.service_account_token(cluster, "nodetopo", NAME)
        )
        config["clientConnection"] = {"kubeconfig": str(own)}
        config["leaderElection"] = {"leaderElect": False}  # the Lease is the fixture scheduler's
        config["profiles"] = [{"schedulerName": "nodetopo-scheduler-tls"}]  # not to race it for pods
        config["extenders"][0]["urlPrefix"] = url
        config["extenders"][0]["tlsConfig"] = {
            "caFile": str(files["ca.crt"]),
            "certFile": str(files["client.crt"]),
            "keyFile": str(files["client.key"]),
        }
        scheduler, _ = s.start_scheduler(
            cluster, tmp_path, "tls", config, kubeconfig=own, ready="Starting Kubernetes Scheduler"
        )
        # Only the extender answers this (1 GPU fits the pool, the earlier tests' pods notwithstanding):
        # its reason in the events proves the HTTPS call with the client certificate was answered.
        typo = {"nodetopo.io/max-nic-distance": "CLOSE"}
        name = s.create_pod(cluster, pool.pod("tls-typo", "nodetopo-scheduler-tls", 1, typo))
        expect = "nodetopo.io/max-nic-distance: expected one of PIX|PXB|PHB|NODE|SYS"
        deadline = time.monotonic() + 45
        messages: list[str] = []
        while time.monotonic() < deadline and not any(expect in m for m in messages):
            time.sleep(0.5)
            events = s.events(cluster, pool.namespace, name)
            messages = [e.get("message", "") for e in events if e.get("reason") == "FailedScheduling"]
        assert any(expect in m for m in messages), messages
        assert s.node_of(cluster, pool.namespace, name, 0) is None
    finally:
        if scheduler is not None:
            s.stop(scheduler)
        extender.close()


def test_the_chart_scheduler_runs_under_a_release_name(
    cluster: LocalCluster, pool: s.Pool, extender_url: str, tmp_path: Path
) -> None:
    """The chart's second scheduler (``scheduler.enabled``) for a release not named nodetopo: its
    objects applied, the real kube-scheduler started from the chart's ConfigMap as the release's
    service account, holding the release's Lease with the release's RBAC, and placing pods that name
    the release's scheduler through the extender."""
    from kube.chart_support import render

    release, namespace = f"g{RUN}", f"chart-g{RUN}"
    name = f"{release}-nodetopo-scheduler"
    values = [f"--set={v}" for v in ("namespace.create=true", "crds.install=false")]
    values += [f"--set={v}" for v in ("extender.enabled=true", "scheduler.enabled=true")]
    # no kubelet runs the Deployments' pods: the test runs the binary
    docs = [d for d in render(release, namespace, *values) if d["kind"] not in ("Deployment", "DaemonSet")]
    text = yaml.safe_dump_all(docs)
    outside = [d for d in docs if d["metadata"].get("namespace") != namespace and d["kind"] != "Namespace"]
    scheduler = None
    try:
        cluster.kubectl(
            "apply",
            "--server-side",
            "-f",
            "-",
            input=yaml.safe_dump_all([d for d in docs if d["kind"] == "Namespace"]),
        )
        cluster.kubectl("apply", "--server-side", "-f", "-", input=text)
        (config_map,) = [d for d in docs if d["kind"] == "ConfigMap"]
        config = yaml.safe_load(config_map["data"]["config.yaml"])
        assert config["profiles"] == [{"schedulerName": name}]
        assert (
            config["extenders"][0]["urlPrefix"] == f"http://{release}-nodetopo-extender.{namespace}.svc:8888"
        )
        own = cluster.write_kubeconfig(
            tmp_path / "chart.kubeconfig", token=s.service_account_token(cluster, namespace, name)
        )
        config["clientConnection"] = {"kubeconfig": str(own)}  # in the pod: the service account
        config["extenders"][0]["urlPrefix"] = extender_url  # in the pod: the release's Service
        scheduler, log = s.start_scheduler(
            cluster,
            tmp_path,
            name,
            config,
            kubeconfig=own,
            ready=f"successfully acquired lease {namespace}/{name}",
        )
        placed = s.bind(
            cluster, pool.pod("chart-island", name, 4, {"nodetopo.io/gpus-in-one-island": "true"})
        )
        assert pool.short(placed) in {"h100-a", "h100-b", "a100", "v100"}, placed  # only 8-GPU islands fit
        forbidden = [line for line in log.read_text(errors="replace").splitlines() if "forbidden" in line]
        assert not forbidden, "\n".join(forbidden[:10])
    finally:
        if scheduler is not None:
            s.stop(scheduler)
        for doc in outside:
            meta = doc["metadata"]
            where = ("-n", meta["namespace"]) if "namespace" in meta else ()
            cluster.kubectl("delete", doc["kind"], meta["name"], *where, "--ignore-not-found", check=False)
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", "--ignore-not-found", check=False)
