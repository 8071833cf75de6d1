"""Real Kueue, end to end: gangs kept under one leaf by the labels nodetopo writes.

16 Nodes under 4 leaves and 2 NVLink domains carry the labels ``to_labels`` derives from their
network position; ``nodetopo export kueue`` writes the Topology and ResourceFlavor. The Kueue
controller (built from its Go module by tests/cluster-kueue/build.sh), the job controller of a real
kube-controller-manager and a real kube-scheduler run against the test apiserver. A Job of 4 pods ×
8 GPUs asking ``kueue.x-k8s.io/podset-required-topology: nodetopo.io/fabric.tier-0`` is admitted and
its pods are bound under one leaf; a Job of 5 × 8 GPUs (a leaf holds 4 × 8) stays unadmitted with
Kueue's reason. The same for a RayJob (Kueue's ``ray.io/rayjob`` integration, the KubeRay operator built
from its Go module in tests/cluster-kuberay): its worker group of 4 × 8 GPUs, asking for one leaf, is
admitted and every worker pod KubeRay creates is bound under one leaf.

Kueue runs without its webhooks (the apiserver is not told about them, so the tests set what they
would default: the Job is created suspended). Kueue reads its metrics certificate from the fixed
path /etc/kueue/metrics/certs: it runs in a private mount namespace whose /etc is an overlay, so
nothing is written to the machine's /etc. Every server it starts binds 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from nodetopo import export
from nodetopo.model import (
    FabricInfo,
    FabricTier,
    Facts,
    NetworkObservation,
    NvmlGpu,
    NvmlSnapshot,
    PciAddress,
    SwitchPort,
)
from nodetopo.resource.body import to_nodetopology
from nodetopo.resource.labels import to_labels
from nodetopo.topology.derive import derive_topology

from .cluster import LocalCluster, free_port
from .kuberay import running_operator
from .kueue import build_kueue, kueue_source

# a cold build of Kueue (first run on a machine) takes 7-15 minutes on 2 cores: more than the
# suite's default per-test timeout
pytestmark = [pytest.mark.k8s, pytest.mark.slow, pytest.mark.timeout(3600)]

RUN = uuid.uuid4().hex[:6]
NAMESPACE = f"kueue-e2e-{RUN}"
KUEUE_NAMESPACE = f"kueue-system-{RUN}"
SCHEDULER = f"nodetopo-kueue-{RUN}"
LEAVES = 4
PER_LEAF = 4


def node_name(leaf: int, slot: int) -> str:
    return f"kueue-{RUN}-l{leaf}-n{slot}"


def node_facts(leaf: int, slot: int) -> Facts:
    """What a node's agent observes: its HCA on leaf ``leaf``, the one spine group, 8 GPUs in one of
    two NVLink domains (leaves 0-1 and 2-3)."""
    leaf_guid = f"0x2c5eab0300c2{leaf:04x}"
    neighbour = SwitchPort(
        nic="mlx5_0",
        port=1,
        source="fabric.ib",
        state="ACTIVE",
        switch_id=leaf_guid,
        switch_name=f"IBLEAF-{leaf}",
        switch_port=str(slot + 1),
    )
    tiers = (
        FabricTier(level=0, id=f"S-{leaf_guid[2:]}", name=f"IBLEAF-{leaf}", members=(leaf_guid,)),
        FabricTier(level=1, id="t1-e22741fae6f98f54"),
    )
    fabric = FabricInfo(
        cluster_uuid=f"dc6e40c4-d722-4357-9ba6-5291dd46127{leaf // 2}",
        clique_id=1,
        state="COMPLETED",
        health="HEALTHY",
    )
    gpus = tuple(
        NvmlGpu(
            index=i,
            uuid=f"GPU-{leaf}-{slot}-{i}",
            model="NVIDIA GB200",
            address=PciAddress(0, 0x10 + i, 0, 0),
            fabric=fabric,
        )
        for i in range(8)
    )
    return Facts(
        network=(NetworkObservation(source="fabric.ib", neighbours=(neighbour,), tiers=tiers),),
        nvml=NvmlSnapshot(driver_version="580", gpus=gpus),
    )


def ok(answer: tuple[int, Any], *expected: int) -> Any:
    status, body = answer
    assert status in expected, f"HTTP {status}: {body}"
    return body


def create_node(cluster: LocalCluster, name: str, labels: dict[str, str]) -> None:
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}
    ok(cluster.request("POST", "/api/v1/nodes", body=body), 201)
    patch = "application/merge-patch+json"
    ok(
        cluster.request(
            "PATCH", f"/api/v1/nodes/{name}", body={"spec": {"taints": None}}, content_type=patch
        ),
        200,
    )
    capacity = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"}
    status = {
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "e2e"}],
        }
    }
    ok(cluster.request("PATCH", f"/api/v1/nodes/{name}/status", body=status, content_type=patch), 200)


def self_signed(directory: Path) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kueue-e2e")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False
        )
        .sign(key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tls.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (directory / "tls.key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )


def start(argv: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    with log.open("ab") as handle:
        return subprocess.Popen(
            argv,
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
        )


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=20)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def wait_for_log(
    process: subprocess.Popen[bytes], log: Path, text: str, what: str, timeout: float = 120
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, f"{what} exited:\n{log.read_text(errors='replace')[-4000:]}"
        if log.exists() and text in log.read_text(errors="replace"):
            return
        time.sleep(0.3)
    raise AssertionError(f"{what} not ready after {timeout:.0f}s:\n{log.read_text(errors='replace')[-4000:]}")


@pytest.fixture(scope="module")
def kueue(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Kueue's CRDs, 16 labelled Nodes, the exported Topology/ResourceFlavor, queues, and the
    controllers: Kueue, the job controller, a kube-scheduler."""
    binary = build_kueue()
    crds = kueue_source() / "config" / "components" / "crd" / "bases"
    for tool in ("unshare", "mount"):
        assert shutil.which(tool), f"{tool} (util-linux) is needed to give Kueue a private /etc"
    tmp = tmp_path_factory.mktemp("kueue-e2e")
    cluster.kubectl("apply", "--server-side", "--field-manager=nodetopo-tests", "-f", str(crds))
    # `kubectl wait` fails at once on a CRD the API server has not given a status yet: again, briefly
    deadline = time.monotonic() + 60
    while (
        done := cluster.kubectl(
            "wait", "--for=condition=Established", "--timeout=60s", "crd", "--all", check=False
        )
    ).returncode != 0:
        assert "accessor error" in done.stderr and time.monotonic() < deadline, done.stderr
        time.sleep(0.5)
    processes: list[subprocess.Popen[bytes]] = []
    nodes: list[str] = []
    objects = []
    operator = contextlib.ExitStack()
    try:
        # KubeRay's CRDs and operator before Kueue, whose RayJob integration needs the RayJob CRD
        operator_log = operator.enter_context(running_operator(cluster, tmp))
        for ns in (NAMESPACE, KUEUE_NAMESPACE):
            ok(cluster.request("POST", "/api/v1/namespaces", body={"metadata": {"name": ns}}), 201)
        ok(
            cluster.request(
                "POST",
                f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts",
                body={"metadata": {"name": "default"}},
            ),
            201,
            409,
        )
        for leaf in range(LEAVES):
            for slot in range(PER_LEAF):
                name = node_name(leaf, slot)
                topology = derive_topology(node_facts(leaf, slot))
                labels = {**to_labels(topology), "kubernetes.io/hostname": name, "nodetopo-kueue-e2e": RUN}
                create_node(cluster, name, labels)
                nodes.append(name)
                objects.append(to_nodetopology(topology, name))
        result = export.kueue(
            export.places_from_nodetopologies(objects),
            name=f"nodetopo-{RUN}",
            flavor=f"nodetopo-{RUN}",
            flavor_node_labels={"nodetopo-kueue-e2e": RUN},
        )
        assert result.missing == ()
        queues = [
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ClusterQueue",
                "metadata": {"name": f"gpus-{RUN}"},
                "spec": {
                    "namespaceSelector": {},
                    "resourceGroups": [
                        {
                            "coveredResources": ["nvidia.com/gpu"],
                            "flavors": [
                                {
                                    "name": f"nodetopo-{RUN}",
                                    "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 128}],
                                }
                            ],
                        }
                    ],
                },
            },
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "LocalQueue",
                "metadata": {"name": "gpus", "namespace": NAMESPACE},
                "spec": {"clusterQueue": f"gpus-{RUN}"},
            },
        ]
        cluster.kubectl(
            "apply",
            "--server-side",
            "--field-manager=nodetopo-tests",
            "-f",
            "-",
            input=yaml.safe_dump_all([*result.objects, *queues]),
        )
        # the controllers
        kcm_log = tmp / "kcm-job.log"
        processes.append(
            start(
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
                    "--v=2",
                ],
                kcm_log,
            )
        )
        scheduler_config = tmp / "scheduler.yaml"
        scheduler_config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kubescheduler.config.k8s.io/v1",
                    "kind": "KubeSchedulerConfiguration",
                    "clientConnection": {"kubeconfig": str(cluster.kubeconfig)},
                    "leaderElection": {"leaderElect": False},
                    "profiles": [{"schedulerName": SCHEDULER}],
                }
            )
        )
        scheduler_log = tmp / "scheduler.log"
        processes.append(
            start(
                [
                    str(cluster.binary("kube-scheduler")),
                    f"--config={scheduler_config}",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={free_port()}",
                    f"--cert-dir={tmp / 'scheduler-certs'}",
                    "--v=2",
                ],
                scheduler_log,
            )
        )
        certs = tmp / "certs"
        self_signed(certs)
        health = free_port()
        config = tmp / "kueue-config.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "config.kueue.x-k8s.io/v1beta2",
                    "kind": "Configuration",
                    "namespace": KUEUE_NAMESPACE,
                    "manageJobsWithoutQueueName": False,
                    "internalCertManagement": {"enable": False},
                    "webhook": {"host": "127.0.0.1", "port": free_port(), "certDir": str(certs)},
                    "metrics": {"bindAddress": f"127.0.0.1:{free_port()}"},
                    "health": {"healthProbeBindAddress": f"127.0.0.1:{health}"},
                    "leaderElection": {"leaderElect": False},
                    "integrations": {"frameworks": ["batch/job", "ray.io/rayjob"]},
                    "featureGates": {"VisibilityOnDemand": False},
                }
            )
        )
        upper, work = tmp / "etc-upper", tmp / "etc-work"
        upper.mkdir()
        work.mkdir()
        script = (
            f"mount -t overlay overlay -o lowerdir=/etc,upperdir={upper},workdir={work} /etc"
            " && mkdir -p /etc/kueue/metrics/certs"
            f" && cp {certs}/tls.crt {certs}/tls.key /etc/kueue/metrics/certs/"
            f' && exec "$0" --config={config} --kubeconfig={cluster.kubeconfig} --zap-log-level=2'
        )
        kueue_log = tmp / "kueue.log"
        processes.append(
            start(
                ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, str(binary)],
                kueue_log,
                env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)},
            )
        )
        wait_for_log(processes[0], kcm_log, "Started controller", "kube-controller-manager (job)")
        wait_for_log(processes[1], scheduler_log, "Starting Kubernetes Scheduler", "kube-scheduler")
        wait_for_log(processes[2], kueue_log, "Starting workers", "Kueue")
        logs = {"kueue": kueue_log, "scheduler": scheduler_log, "kcm": kcm_log, "kuberay": operator_log}
        yield {"tmp": tmp, "logs": logs}
    finally:
        for process in reversed(processes):
            stop(process)
        cluster.kubectl("delete", "rayjobs", "--all", "-n", NAMESPACE, "--wait=false", check=False)
        operator.close()
        cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)
        cluster.kubectl("delete", "clusterqueue", f"gpus-{RUN}", "--wait=false", check=False)
        for name in nodes:
            cluster.request("DELETE", f"/api/v1/nodes/{name}")


def job(name: str, pods: int) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"kueue.x-k8s.io/queue-name": "gpus"}},
        "spec": {
            "suspend": True,  # what Kueue's webhook would default
            "parallelism": pods,
            "completions": pods,
            "template": {
                "metadata": {
                    "annotations": {"kueue.x-k8s.io/podset-required-topology": "nodetopo.io/fabric.tier-0"}
                },
                "spec": {
                    "schedulerName": SCHEDULER,
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "containers": [
                        {
                            "name": "train",
                            "image": "registry.invalid/train:never-pulled",
                            "resources": {
                                "requests": {"nvidia.com/gpu": "8"},
                                "limits": {"nvidia.com/gpu": "8"},
                            },
                        }
                    ],
                },
            },
        },
    }


def workload_of(cluster: LocalCluster, job_name: str) -> dict[str, Any] | None:
    items = json.loads(
        cluster.kubectl("get", "workloads.kueue.x-k8s.io", "-n", NAMESPACE, "-o", "json").stdout
    )["items"]
    for w in items:
        if any(o.get("name") == job_name for o in w["metadata"].get("ownerReferences", [])):
            return dict(w)
    return None


def condition(workload: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    for c in (workload or {}).get("status", {}).get("conditions", []):
        if c["type"] == kind:
            return dict(c)
    return None


def wait(predicate: Any, what: str, logs: dict[str, Path], timeout: float = 120) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(1)
    tails = "\n".join(f"--- {k}:\n{p.read_text(errors='replace')[-3000:]}" for k, p in logs.items())
    raise AssertionError(f"{what} after {timeout:.0f}s\n{tails}")


def test_a_gang_is_admitted_and_bound_under_one_leaf(cluster: LocalCluster, kueue: dict[str, Any]) -> None:
    cluster.kubectl("create", "-f", "-", input=yaml.safe_dump(job("fits", 4)))
    admitted = wait(
        lambda: (c := condition(workload_of(cluster, "fits"), "Admitted")) and c["status"] == "True",
        "the 4×8-GPU Job was not admitted",
        kueue["logs"],
    )
    assert admitted

    def bound() -> list[str] | None:
        pods = json.loads(
            cluster.kubectl("get", "pods", "-n", NAMESPACE, "-l", "job-name=fits", "-o", "json").stdout
        )["items"]
        names = [p["spec"].get("nodeName") for p in pods]
        return names if len(names) == 4 and all(names) else None

    nodes = wait(bound, "the Job's 4 pods were not all bound", kueue["logs"], timeout=180)
    leaves = set()
    for name in nodes:
        node = json.loads(cluster.kubectl("get", "node", name, "-o", "json").stdout)
        leaves.add(node["metadata"]["labels"]["nodetopo.io/fabric.tier-0"])
    assert len(set(nodes)) == 4 and len(leaves) == 1, (nodes, leaves)


def test_a_gang_larger_than_a_leaf_stays_unadmitted_with_kueues_reason(
    cluster: LocalCluster, kueue: dict[str, Any]
) -> None:
    cluster.kubectl("create", "-f", "-", input=yaml.safe_dump(job("too-big", 5)))
    pending = wait(
        lambda: (
            (c := condition(workload_of(cluster, "too-big"), "QuotaReserved"))
            and c["status"] == "False"
            and c
        ),
        "no QuotaReserved=False condition on the 5×8-GPU Job's Workload",
        kueue["logs"],
    )
    # Kueue's own words, e.g. 'couldn't assign flavors to pod set main: topology "nodetopo-…" allows to
    # fit only 4 out of 5 pod(s)': one leaf holds 4 nodes of 8 GPUs
    assert "allows to fit only 4 out of 5 pod(s)" in pending["message"], pending
    time.sleep(5)
    assert (condition(workload_of(cluster, "too-big"), "Admitted") or {}).get("status") != "True"
    spec = json.loads(cluster.kubectl("get", "job", "-n", NAMESPACE, "too-big", "-o", "json").stdout)["spec"]
    assert spec["suspend"] is True


def rayjob(name: str, workers: int) -> dict[str, Any]:
    """A RayJob whose worker group of ``workers`` × 8 GPUs asks Kueue for one leaf (the head asks for no
    resource Kueue covers). No submitter: the job is submitted by hand (InteractiveMode)."""

    def template(container: str, gpus: int, annotations: dict[str, str]) -> dict[str, Any]:
        resources = {"requests": {"nvidia.com/gpu": str(gpus)}, "limits": {"nvidia.com/gpu": str(gpus)}}
        return {
            "metadata": {"annotations": annotations},
            "spec": {
                "schedulerName": SCHEDULER,
                "automountServiceAccountToken": False,
                "containers": [
                    {
                        "name": container,
                        "image": "registry.invalid/ray:never-pulled",
                        **({"resources": resources} if gpus else {}),
                    }
                ],
            },
        }

    leaf = {"kueue.x-k8s.io/podset-required-topology": "nodetopo.io/fabric.tier-0"}
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"kueue.x-k8s.io/queue-name": "gpus"}},
        "spec": {
            "suspend": True,  # what Kueue's webhook would default
            "shutdownAfterJobFinishes": True,  # KubeRay suspends only a RayJob that cleans up after itself
            "submissionMode": "InteractiveMode",
            "rayClusterSpec": {
                "headGroupSpec": {"rayStartParams": {}, "template": template("ray-head", 0, {})},
                "workerGroupSpecs": [
                    {
                        "groupName": "gpu-workers",
                        "replicas": workers,
                        "minReplicas": workers,
                        "maxReplicas": workers,
                        "rayStartParams": {},
                        "template": template("ray-worker", 8, leaf),
                    }
                ],
            },
        },
    }


def test_a_rayjobs_worker_group_is_admitted_and_bound_under_one_leaf(
    cluster: LocalCluster, kueue: dict[str, Any]
) -> None:
    cluster.kubectl("create", "-f", "-", input=yaml.safe_dump(rayjob("ray-fits", 4)))
    admitted = wait(
        lambda: (c := condition(workload_of(cluster, "ray-fits"), "Admitted")) and c["status"] == "True",
        "the RayJob's 4×8-GPU worker group was not admitted",
        kueue["logs"],
    )
    assert admitted
    workload = workload_of(cluster, "ray-fits")
    assert workload is not None
    assignments = {a["name"]: a for a in workload["status"]["admission"]["podSetAssignments"]}
    assert assignments["gpu-workers"]["count"] == 4, assignments

    def bound() -> list[str] | None:
        status = json.loads(
            cluster.kubectl("get", "rayjob", "-n", NAMESPACE, "ray-fits", "-o", "json").stdout
        )
        name = status.get("status", {}).get("rayClusterName")
        if not name:
            return None
        selector = f"ray.io/cluster={name},ray.io/node-type=worker"
        pods = json.loads(
            cluster.kubectl("get", "pods", "-n", NAMESPACE, "-l", selector, "-o", "json").stdout
        )["items"]
        names = [p["spec"].get("nodeName") for p in pods]
        return names if len(names) == 4 and all(names) else None

    nodes = wait(bound, "the RayJob's 4 worker pods were not all bound", kueue["logs"], timeout=180)
    leaves = set()
    for name in nodes:
        node = json.loads(cluster.kubectl("get", "node", name, "-o", "json").stdout)
        leaves.add(node["metadata"]["labels"]["nodetopo.io/fabric.tier-0"])
    assert len(set(nodes)) == 4 and len(leaves) == 1, (nodes, leaves)
