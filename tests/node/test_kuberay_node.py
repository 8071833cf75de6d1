"""KubeRay on the real node: a RayCluster from deploy/examples/kuberay.yaml whose workers check their
placement and label themselves with the topology of the GPUs they hold.

The real parts: the KubeRay operator built from its Go module (tests/cluster-kuberay, CRDs from the same
module) running against the node's control plane; the Ray image built by ``image/build_oci.py --ray``
and imported into the node's containerd; the test device plugin advertising the 2x2-island fixture's 4
GPUs (pcie-4x-nvbridge: NVLink islands {0,1} and {2,3}); and the agent (``nodetopo agent --once``)
publishing that fixture's NodeTopology and labels for the node, with an LLDP neighbour added to a copy of
the bundle so that the node has a fabric tier (``nodetopo.io/fabric.tier-0``).

The RayCluster is the example's, adjusted for this machine only:
* images: the Ray image for every container (it holds nodetopo and Ray), ``imagePullPolicy: Never``;
* resources: small CPU and memory requests, 2 GPUs per worker (the init containers and the probe's
  ``--gpus`` alike), a smaller /dev/shm;
* the environment: the API server at the node's gateway (pods have no kube-proxy), Ray's usage stats
  off; the head Service's name in each worker's /etc/hosts (``hostAliases``: there is no cluster DNS)
  naming the gateway, where a forwarder to the head pod's GCS port stands in for kube-proxy;
* the worker's annotations keep ``nodetopo.io/gpus-in-one-island`` and drop the RDMA ones: this machine
  has no RDMA device for a container to see (test_probe_node covers the probe's RDMA checks).

What it shows: Ray reports each 2-GPU worker's nodetopo.io/ labels (its own island's gpu-domain, the
NIC class, the fabric tier) and custom resources, equal to the Node's labels for the GPUs that worker
holds (the kubelet's choice, read back through the PodResources API as ``heldBy``); a task with
``label_selector`` and a placement group with ``bundle_label_selector`` land on the matching worker,
ones that match nothing stay pending with Ray's reason; a worker whose probe fails (the device plugin
told to allocate across islands) never joins: the reason is on the pod and in its Event, and KubeRay's
status counts it not ready. Run with ``-s`` for the real ``kubectl get raycluster``, Ray's view of the
labels and the placed placement group.
"""

from __future__ import annotations

import contextlib
import copy
import json
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from agent.kube_support import Proxy
from kube.cluster import LocalCluster, free_port
from kube.kuberay import kuberay_version, running_operator

from .conftest import TIMINGS
from .node import REPO, LocalNode
from .test_allocation import TWO_ISLANDS, bundle_gpus, plugin_log, start_plugin
from .test_probe_node import node_labels, node_state_kept, publish_bundle

# a cold build of the KubeRay operator (first run on a machine) takes several minutes on 2 cores
pytestmark = [pytest.mark.k8s, pytest.mark.node, pytest.mark.slow, pytest.mark.timeout(3600)]

NAMESPACE = "ray"
EXAMPLE = REPO / "deploy" / "examples" / "kuberay.yaml"
GPU = "nvidia.com/gpu"
GPUS_PER_WORKER = 2
PREFIX = "nodetopo.io/"
#: the labels that describe the GPUs a Ray node holds (the rest describe the node)
PER_GPU = {
    "gpu.count",
    "gpu.model",
    "gpu-domain",
    "gpu-nic.distance",
    "mig.enabled",
    "nvlink.island-count",
    "nvlink.island-size",
    "nvlink.nvswitch",
    "rdma.link-layer",
    "rdma.rate-gbps",
}
LEAF = {"id": "0c:42:a1:00:00:01", "name": "leaf-a"}


# ---- the parts ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ray_image(node: LocalNode, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The Ray image, built as docs/deploy.md documents (``image/build_oci.py --ray``) and imported."""
    archive = tmp_path_factory.mktemp("ray-image") / "nodetopo-ray.oci.tar"
    done = subprocess.run(
        [sys.executable, str(REPO / "image" / "build_oci.py"), "--ray", "--out", str(archive)],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(
            f"image/build_oci.py --ray failed ({done.returncode}):\n{done.stderr[-4000:]}", pytrace=False
        )
    summary = json.loads(done.stdout)
    TIMINGS["ray image build"] = float(summary["seconds"])
    TIMINGS["ray image MB (compressed)"] = round(summary["compressed_bytes"] / 1e6, 1)
    started = time.monotonic()
    node.import_image(archive)
    TIMINGS["ray image import"] = round(time.monotonic() - started, 2)
    archive.unlink()
    return str(summary["name"])


@pytest.fixture(scope="module")
def kuberay(node: LocalNode, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The KubeRay operator on the node's control plane, the namespace of the example and deploy/probe's
    ``nodetopo-reader`` role (the example binds it); yields the operator's log."""
    cluster = node.cluster
    started = time.monotonic()
    with running_operator(cluster, tmp_path_factory.mktemp("kuberay")) as log:
        TIMINGS[f"kuberay {kuberay_version()} up (build if cold; CRDs; start)"] = round(
            time.monotonic() - started, 2
        )
        cluster.kubectl("create", "namespace", NAMESPACE)
        try:
            wait_for(
                lambda: (
                    cluster.kubectl(
                        "get", "serviceaccount", "default", "-n", NAMESPACE, check=False
                    ).returncode
                    == 0
                    and cluster.kubectl(
                        "get", "configmap", "kube-root-ca.crt", "-n", NAMESPACE, check=False
                    ).returncode
                    == 0
                ),
                "the namespace's default ServiceAccount and kube-root-ca.crt",
                timeout=60,
            )
            cluster.kubectl("apply", "-f", str(REPO / "deploy" / "probe" / "rbac.yaml"))
            yield log
        finally:
            cluster.kubectl("delete", "rayclusters", "--all", "-n", NAMESPACE, "--wait=false", check=False)
            cluster.kubectl("delete", "namespace", NAMESPACE, "--timeout=120s", check=False)


def agent_publish(node: LocalNode, bundle: Path, tmp: Path) -> Path:
    """``nodetopo agent --once`` publishing ``bundle`` (a copy in ``tmp`` with an LLDP neighbour: leaf
    ``LEAF``) as the node's NodeTopology and labels; returns the copy."""
    copied = tmp / "bundle"
    if not copied.exists():
        shutil.copytree(bundle, copied, symlinks=True)
        # lldpd answered during the capture: its socket is an empty file, its answer a cmd/ file
        (copied / "run").mkdir(exist_ok=True)
        (copied / "run" / "lldpd.socket").write_text("")
        (copied / "cmd" / "lldpcli-neighbors.json").write_text(json.dumps(lldp_neighbours()))
    argv = [
        sys.executable, "-m", "nodetopo", "agent", "--from", str(copied), "--once", "--node-name", node.name,
        "--kubeconfig", str(node.cluster.kubeconfig_for("admin")), f"--listen=127.0.0.1:{free_port()}",
        "--start-delay-max-seconds=0",
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return copied


def lldp_neighbours() -> dict[str, Any]:
    """``lldpcli -f json0 show neighbors``: one switch (``LEAF``) on the node's Ethernet port."""
    chassis = {
        "id": [{"type": "mac", "value": LEAF["id"]}],
        "name": [{"value": LEAF["name"]}],
        "capability": [{"type": "Bridge", "enabled": True}, {"type": "Router", "enabled": True}],
    }
    port = {"id": [{"type": "ifname", "value": "Ethernet12"}], "ttl": [{"value": "120"}]}
    return {"lldp": [{"interface": [{"name": "eno1", "via": "LLDP", "chassis": [chassis], "port": [port]}]}]}


# ---- the RayCluster --------------------------------------------------------------------------------


def example() -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """deploy/examples/kuberay.yaml: the RBAC objects and the RayCluster."""
    docs = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    cluster = next(d for d in docs if d["kind"] == "RayCluster")
    return [d for d in docs if d is not cluster], cluster


def adjusted(name: str, image: str, node: LocalNode, *, replicas: int) -> dict[str, Any]:
    """The example's RayCluster with this machine's images, resources and environment (module doc), and
    ``replicas`` workers."""
    _, body = example()
    body = copy.deepcopy(body)
    body["metadata"]["name"] = name
    env = [
        {"name": "KUBERNETES_SERVICE_HOST", "value": node.api_host},
        {"name": "KUBERNETES_SERVICE_PORT", "value": str(node.api_port)},
        {"name": "RAY_USAGE_STATS_ENABLED", "value": "0"},
    ]
    head = body["spec"]["headGroupSpec"]["template"]["spec"]
    (group,) = body["spec"]["workerGroupSpecs"]
    worker = group["template"]["spec"]
    for container in [*head["containers"], *worker["initContainers"], *worker["containers"]]:
        container["image"] = image
        container["imagePullPolicy"] = "Never"
        container["env"] = [*container.get("env", []), *env]
    head["containers"][0]["resources"] = {
        "requests": {"cpu": "500m", "memory": "2Gi"},
        "limits": {"memory": "2Gi"},
    }
    gpus = str(GPUS_PER_WORKER)
    worker["containers"][0]["resources"] = {
        "requests": {"cpu": "250m", "memory": "1536Mi", GPU: gpus},
        "limits": {"memory": "1536Mi", GPU: gpus},
    }
    for init in worker["initContainers"]:
        init["resources"]["limits"][GPU] = gpus
    probe = next(c for c in worker["initContainers"] if c["args"][0] == "probe")
    probe["args"][probe["args"].index("--gpus") + 1] = gpus
    next(v for v in worker["volumes"] if v["name"] == "dshm")["emptyDir"]["sizeLimit"] = "512Mi"
    annotations = group["template"]["metadata"]["annotations"]
    for key in ("nodetopo.io/rdma", "nodetopo.io/max-nic-distance"):
        annotations.pop(key)
    # the head Service's name resolves to the node's gateway, where HeadService forwards to the head
    worker["hostAliases"] = [
        {"ip": node.api_host, "hostnames": [f"{name}-head-svc.{NAMESPACE}.svc.cluster.local"]}
    ]
    group["replicas"] = replicas
    return body


def kubectl_json(cluster: LocalCluster, *args: str) -> Any:
    return json.loads(cluster.kubectl(*args, "-o", "json").stdout)


def pods(cluster: LocalCluster, name: str, node_type: str) -> list[dict[str, Any]]:
    selector = f"ray.io/cluster={name},ray.io/node-type={node_type}"
    items: list[dict[str, Any]] = kubectl_json(cluster, "get", "pods", "-n", NAMESPACE, "-l", selector)[
        "items"
    ]
    return items


def wait_for(check: Any, what: str, *, timeout: float, why: Any = None) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not after {timeout:.0f}s{why() if why else ''}")
        time.sleep(1)


def ready(pod: dict[str, Any]) -> bool:
    conditions = {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions", [])}
    return conditions.get("Ready") == "True"


def describe(cluster: LocalCluster, name: str, operator_log: Path | None = None) -> str:
    text = (
        "\n--- kubectl get pods ---\n" + cluster.kubectl("get", "pods", "-n", NAMESPACE, "-o", "wide").stdout
    )
    for pod in [*pods(cluster, name, "head"), *pods(cluster, name, "worker")]:
        text += cluster.kubectl(
            "describe", "pod", "-n", NAMESPACE, pod["metadata"]["name"], check=False
        ).stdout[-3000:]
        for container in ("ray-head", "ray-worker"):
            logs = cluster.kubectl(
                "logs", "-n", NAMESPACE, pod["metadata"]["name"], "-c", container, check=False
            )
            if logs.returncode == 0:
                text += f"\n--- logs {container} ---\n{logs.stdout[-3000:]}"
    if operator_log is not None:
        text += f"\n--- {operator_log} ---\n{operator_log.read_text(errors='replace')[-3000:]}"
    return text


GCS_PORT = 6379


class HeadService(Proxy):
    """What the head Service gives the workers on a real cluster: its name resolves (the workers'
    ``hostAliases`` name the node's gateway: there is no cluster DNS) and its GCS port reaches the head
    pod (this forwarder on the gateway, in kube-proxy's place). ``target`` is set once the head pod has
    its address; until then connections are refused and KubeRay's wait-gcs-ready init container waits."""

    def __init__(self, host: str) -> None:
        super().__init__(("127.0.0.1", 0), host)
        self.port = GCS_PORT


@contextlib.contextmanager
def ray_cluster(
    node: LocalNode, image: str, operator_log: Path, name: str, *, replicas: int, workers_ready: bool
) -> Iterator[dict[str, Any]]:
    """The example's RBAC objects and its adjusted RayCluster ``name`` with ``replicas`` workers, applied
    at once; yields the head pod once Ready (with ``workers_ready``: once KubeRay counts every worker
    ready). Afterwards the RayCluster and its pods are gone (their GPUs free)."""
    cluster = node.cluster
    rbac, _ = example()
    body = adjusted(name, image, node, replicas=replicas)
    service = HeadService(node.api_host).start()
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(rbac))
    cluster.kubectl("apply", "-f", "-", input=json.dumps(body))
    why = lambda: describe(cluster, name, operator_log)  # noqa: E731
    try:
        started = time.monotonic()
        address = wait_for(
            lambda: next((p["status"].get("podIP") for p in pods(cluster, name, "head")), None),
            f"the head pod of RayCluster {name} has an address",
            timeout=300,
            why=why,
        )
        service.target = (address, GCS_PORT)
        head = wait_for(
            lambda: next((p for p in pods(cluster, name, "head") if ready(p)), None),
            f"the head pod of RayCluster {name} Ready",
            timeout=300,
            why=why,
        )
        TIMINGS[f"{name}: head ready"] = round(time.monotonic() - started, 2)
        if workers_ready:

            def all_ready() -> bool:
                status = kubectl_json(cluster, "get", "raycluster", "-n", NAMESPACE, name).get("status", {})
                return bool(status.get("readyWorkerReplicas") == replicas)

            wait_for(all_ready, f"{replicas} workers of RayCluster {name} ready", timeout=400, why=why)
            TIMINGS[f"{name}: {replicas} workers ready"] = round(time.monotonic() - started, 2)
        yield head
    finally:
        cluster.kubectl("delete", "raycluster", "-n", NAMESPACE, name, "--wait=false", check=False)
        with contextlib.suppress(AssertionError):
            wait_for(
                lambda: not pods(cluster, name, "head") and not pods(cluster, name, "worker"),
                f"the pods of RayCluster {name} gone",
                timeout=120,
            )
        service.stop()


def ray_driver(cluster: LocalCluster, head: dict[str, Any], script: str, *, timeout: float = 240) -> Any:
    """Run ``script`` (Python, connected to the Ray cluster) on the head pod (``kubectl exec``, as a
    user would); it prints one JSON line last, returned parsed."""
    program = "import json, ray\nray.init(logging_level='ERROR', log_to_driver=False)\n" + textwrap.dedent(
        script
    )
    argv = [
        str(cluster.binary("kubectl")), f"--kubeconfig={cluster.kubeconfig_for('admin')}",
        "exec", "-n", NAMESPACE, head["metadata"]["name"], "-c", "ray-head", "--", "python3", "-c", program,
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, (
        f"the driver failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def ray_nodes(cluster: LocalCluster, head: dict[str, Any]) -> list[dict[str, Any]]:
    nodes: list[dict[str, Any]] = ray_driver(
        cluster,
        head,
        """
        print(json.dumps([
            {
                "id": n["NodeID"], "ip": n["NodeManagerAddress"],
                "labels": n["Labels"], "resources": n["Resources"],
            }
            for n in ray.nodes() if n["Alive"]
        ]))
        """,
    )
    return nodes


# ---- a worker placed wrong never joins ---------------------------------------------------------------


def test_a_worker_whose_probe_fails_never_joins_the_ray_cluster(
    node: LocalNode, ray_image: str, kuberay: Path, tmp_path: Path
) -> None:
    cluster = node.cluster
    name = "misplaced"
    with contextlib.ExitStack() as stack:
        stack.callback(node.stop_device_plugin)
        stack.enter_context(node_state_kept(cluster, node))
        start_plugin(node, TWO_ISLANDS, across_islands=True)
        agent_publish(node, TWO_ISLANDS, tmp_path)
        head = stack.enter_context(
            ray_cluster(node, ray_image, kuberay, name, replicas=1, workers_ready=False)
        )

        def failed_probe() -> tuple[dict[str, Any], dict[str, Any]] | None:
            for pod in pods(cluster, name, "worker"):
                for status in pod["status"].get("initContainerStatuses") or []:
                    terminated = status.get("state", {}).get("terminated") or status.get("lastState", {}).get(
                        "terminated"
                    )
                    if status["name"] == "nodetopo-probe" and terminated and terminated.get("exitCode") == 1:
                        return pod, terminated
            return None

        pod, terminated = wait_for(
            failed_probe,
            "the worker's probe failed",
            timeout=300,
            why=lambda: describe(cluster, name, kuberay),
        )
        worker = pod["metadata"]["name"]
        why = f"{terminated}{describe(cluster, name)}{plugin_log(node)}"
        expected = (
            "PlacedWrong: gpus-in-one-island: GPUs span 2 NVLink islands: "
            "GPU 0 in island 0; GPU 2 in island 1"
        )
        assert terminated.get("message", "").startswith(expected), why
        events = kubectl_json(
            cluster, "get", "events", "-n", NAMESPACE, f"--field-selector=involvedObject.name={worker}"
        )["items"]
        failed = {e["message"] for e in events if e.get("reason") == "TopologyProbeFailed"}
        assert failed == {terminated["message"].strip()}, (failed, why)
        # the probe runs first: the labels, KubeRay's wait for the head and Ray itself never start
        statuses = {s["name"]: s for s in pod["status"]["initContainerStatuses"]}
        assert not statuses["nodetopo-labels"].get("state", {}).get("terminated"), why
        assert pod["status"]["containerStatuses"][0].get("ready") is False, why
        # KubeRay: one worker desired, none ready; Ray: the head alone
        status = kubectl_json(cluster, "get", "raycluster", "-n", NAMESPACE, name)["status"]
        assert status.get("desiredWorkerReplicas") == 1, status
        assert status.get("readyWorkerReplicas", 0) == 0 and status.get("availableWorkerReplicas", 0) == 0, (
            status
        )
        conditions = {c["type"]: c for c in status.get("conditions", [])}
        assert conditions["HeadPodReady"]["status"] == "True", status
        assert conditions["RayClusterProvisioned"]["status"] == "False", status
        assert [n["ip"] for n in ray_nodes(cluster, head)] == [head["status"]["podIP"]]
        print("\n$ kubectl get raycluster -n ray", name)
        print(cluster.kubectl("get", "raycluster", "-n", NAMESPACE, name).stdout)
        print("status.conditions:", json.dumps(status.get("conditions"), indent=1))
        print(f"$ kubectl get pod -n ray {worker}")
        print(cluster.kubectl("get", "pod", "-n", NAMESPACE, worker).stdout)
        described = cluster.kubectl("describe", "pod", "-n", NAMESPACE, worker).stdout
        print(described[described.index("Events:") :])


# ---- workers labelled by the GPUs they hold -------------------------------------------------------


@pytest.fixture(scope="module")
def gpu_cluster(
    node: LocalNode, ray_image: str, kuberay: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """The packing device plugin, the agent's NodeTopology, and the example's RayCluster with two 2-GPU
    workers, all ready. Yields the head pod, the workers, the NodeTopology (its ``heldBy`` read from the
    kubelet's PodResources API once the workers run) and the Node's labels."""
    cluster = node.cluster
    name = "gpu-cluster"
    tmp = tmp_path_factory.mktemp("gpu-cluster")
    with contextlib.ExitStack() as stack:
        stack.callback(node.stop_device_plugin)
        stack.enter_context(node_state_kept(cluster, node))
        start_plugin(node, TWO_ISLANDS)
        copied = agent_publish(node, TWO_ISLANDS, tmp)
        head = stack.enter_context(
            ray_cluster(node, ray_image, kuberay, name, replicas=2, workers_ready=True)
        )
        # which pod holds each GPU, from the kubelet's PodResources API (the agent does not ask the
        # kubelet about a bundle's GPUs; `publish` does, as in test_allocation)
        socket = node.kubelet_root / "pod-resources" / "kubelet.sock"
        publish_bundle(cluster, node, copied, "--pod-resources-socket", str(socket))
        status = kubectl_json(cluster, "get", "nodetopology", node.name)["status"]
        print("\n$ kubectl get raycluster -n ray")
        print(cluster.kubectl("get", "raycluster", "-n", NAMESPACE).stdout)
        yield {
            "name": name,
            "head": head,
            "workers": pods(cluster, name, "worker"),
            "status": status,
            "node_labels": node_labels(cluster, node.name),
        }


def held_gpus(status: dict[str, Any], pod: str) -> list[int]:
    """The GPU indices the kubelet handed ``pod`` (NodeTopology ``heldBy``, from PodResources)."""
    return sorted(g["index"] for g in status["gpus"] if pod in [h["name"] for h in g.get("heldBy") or []])


def island_of(status: dict[str, Any], gpus: list[int]) -> int:
    (island,) = [i["id"] for i in status["nvlinkIslands"] if set(gpus) <= set(i["gpus"])]
    return int(island)


def test_ray_reports_each_workers_labels_for_the_gpus_it_holds(
    node: LocalNode, gpu_cluster: dict[str, Any]
) -> None:
    cluster, status, on_node = node.cluster, gpu_cluster["status"], gpu_cluster["node_labels"]
    by_ip = {n["ip"]: n for n in ray_nodes(cluster, gpu_cluster["head"])}
    assert len(by_ip) == 3, by_ip  # the head and both workers joined
    domains = set()
    devices, _ = bundle_gpus(TWO_ISLANDS)
    for pod in gpu_cluster["workers"]:
        ray_node = by_ip[pod["status"]["podIP"]]
        held = held_gpus(status, pod["metadata"]["name"])
        assert len(held) == GPUS_PER_WORKER, (held, status["gpus"])
        island = island_of(status, held)  # the packing plugin keeps a worker's GPUs in one island
        labels = {k: v for k, v in ray_node["labels"].items() if k.startswith(PREFIX)}
        why = json.dumps({"ray": ray_node, "held": held, "node": on_node}, indent=1)
        # the labels that describe the node are the Node's own ...
        assert {k: v for k, v in labels.items() if k.removeprefix(PREFIX) not in PER_GPU | {"node-name"}} == {
            k: v for k, v in on_node.items() if k.removeprefix(PREFIX) not in PER_GPU
        }, why
        assert (
            labels[PREFIX + "fabric.tier-0"]
            == on_node[PREFIX + "fabric.tier-0"]
            == LEAF["id"].replace(":", "-")
        )
        # ... the ones that describe GPUs are those of the two this worker holds: its own island
        assert labels[PREFIX + "gpu-domain"] == f"{node.name}.nvl{island}", why
        assert labels[PREFIX + "gpu.count"] == str(GPUS_PER_WORKER), why
        assert (labels[PREFIX + "nvlink.island-count"], labels[PREFIX + "nvlink.island-size"]) == (
            "1",
            "2",
        ), why
        for key in ("gpu.model", "gpu-nic.distance", "rdma.link-layer", "rdma.rate-gbps", "mig.enabled"):
            assert labels[PREFIX + key] == on_node[PREFIX + key], (key, why)
        assert on_node[PREFIX + "nvlink.island-count"] == "2" and PREFIX + "gpu-domain" not in on_node, why
        assert labels[PREFIX + "node-name"] == node.name
        assert ray_node["labels"]["example.com/worker-group"] == "gpu-workers"  # the group's static label
        # custom resources: one whole 2-GPU island, the node's 2 RDMA NICs; Ray's GPUs are the pod's
        resources = ray_node["resources"]
        assert (
            resources.get("nodetopo.io/nvlink-island-2") == 1 and resources.get("nodetopo.io/rdma-nic") == 2
        ), why
        assert resources.get("GPU") == GPUS_PER_WORKER, why
        # the container's own view agrees: NVIDIA_VISIBLE_DEVICES names exactly the held GPUs
        env = cluster.kubectl(
            "exec",
            "-n",
            NAMESPACE,
            pod["metadata"]["name"],
            "-c",
            "ray-worker",
            "--",
            "printenv",
            "NVIDIA_VISIBLE_DEVICES",
        ).stdout.strip()
        assert sorted(devices.index(d) for d in env.split(",")) == held, (env, held)
        domains.add(labels[PREFIX + "gpu-domain"])
    assert domains == {f"{node.name}.nvl0", f"{node.name}.nvl1"}
    worker = by_ip[gpu_cluster["workers"][0]["status"]["podIP"]]
    print("\nRay's view of a worker (ray.nodes()):")
    print(
        json.dumps({"Labels": worker["labels"], "Resources": worker["resources"]}, indent=2, sort_keys=True)
    )


SELECTORS = """
import ray.util.state
from ray.util.placement_group import placement_group, placement_group_table, remove_placement_group

def where():
    return ray.get_runtime_context().get_node_id()

out = {"tasks": {}, "groups": {}}
for domain in DOMAINS:
    task = ray.remote(num_cpus=0, label_selector={"nodetopo.io/gpu-domain": domain})(where)
    out["tasks"][domain] = ray.get(task.remote(), timeout=120)
    group = placement_group(
        [{"GPU": 1, "nodetopo.io/nvlink-island-2": 0.5}] * 2,
        strategy="STRICT_PACK",
        bundle_label_selector=[{"nodetopo.io/gpu-domain": domain}] * 2,
    )
    assert group.wait(120), placement_group_table(group)
    table = placement_group_table(group)
    out["groups"][domain] = {k: table[k] for k in ("state", "strategy", "bundles", "bundles_to_node_id")}
    remove_placement_group(group)

nowhere = ray.remote(num_cpus=0, label_selector={"nodetopo.io/gpu-domain": "no-such-domain"})(where)
ref = nowhere.remote()
ready, _ = ray.wait([ref], timeout=10)
out["pending_task_done"] = bool(ready)
task_id = ref.task_id().hex()
task = ray.util.state.get_task(task_id)
task = task[0] if isinstance(task, list) else task
out["pending_task"] = {"state": str(task.state), "label_selector": task.label_selector} if task else None
ray.cancel(ref, force=True)
group = placement_group([{"CPU": 0.1}], bundle_label_selector=[{"nodetopo.io/gpu-domain": "no-such-domain"}])
out["pending_group_ready"] = group.wait(10)
table = placement_group_table(group)
out["pending_group"] = {"state": table["state"], "stats": table.get("stats")}
remove_placement_group(group)
print(json.dumps(out))
"""


def test_label_selectors_place_on_the_matching_worker_and_hold_what_matches_nothing(
    node: LocalNode, gpu_cluster: dict[str, Any]
) -> None:
    cluster = node.cluster
    workers = {
        n["labels"][PREFIX + "gpu-domain"]: n["id"]
        for n in ray_nodes(cluster, gpu_cluster["head"])
        if PREFIX + "gpu-domain" in n["labels"]
    }
    assert sorted(workers) == [f"{node.name}.nvl0", f"{node.name}.nvl1"], workers
    out = ray_driver(cluster, gpu_cluster["head"], f"DOMAINS = {sorted(workers)!r}\n" + SELECTORS)
    why = json.dumps(out, indent=1)
    for domain, ray_node in workers.items():
        assert out["tasks"][domain] == ray_node, why
        group = out["groups"][domain]
        assert group["state"] == "CREATED" and set(group["bundles_to_node_id"].values()) == {ray_node}, why
    assert out["pending_task_done"] is False, why
    assert out["pending_task"]["state"] == "PENDING_NODE_ASSIGNMENT", why
    assert out["pending_group_ready"] is False and out["pending_group"]["state"] == "PENDING", why
    assert out["pending_group"]["stats"]["scheduling_state"] == "INFEASIBLE", why  # Ray's own word
    print("\nA placed placement group (placement_group_table):")
    print(json.dumps(out["groups"][f"{node.name}.nvl1"], indent=2, sort_keys=True))
    print("\nOne whose bundle_label_selector matches nothing:")
    print(json.dumps(out["pending_group"], indent=2, sort_keys=True))
    print("\nA task whose label_selector matches nothing (ray.util.state.get_task):")
    print(json.dumps(out["pending_task"], indent=2, sort_keys=True))
