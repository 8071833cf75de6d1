"""The NodeResourceTopology option against the real NodeResourceTopologyMatch plugin: the SIG's CRD from
its Go module, two GPU Nodes whose NodeResourceTopology objects nodetopo's publisher writes (from the
fixture bundles, one of them with held GPUs, the single-numa-node policy stated), and kube-scheduler
built with the scheduler-plugins plugin (tests/cluster-nrt) running NodeResourceTopologyMatch as its
Filter and Score plugin.

A Guaranteed pod asking GPUs and CPUs binds to the node one of whose NUMA zones holds them all, even
where the other node has enough of each at node level; a pod that fits no single zone stays Pending
with the plugin's reason, and so does one that would fit but for the GPUs the kubelet says are held.
With deploy/noderesourcetopology/, the agent's publisher, as the agent's service account with a
node-bound token, writes its own node's object and is denied another node's.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from nodetopo.errors import PublishError
from nodetopo.kube.session import ApiSession
from nodetopo.kube.transport import connect
from nodetopo.model import PodRef
from nodetopo.model.allocation import GpuAllocation
from nodetopo.publish.noderesourcetopology import WRITTEN, NodeResourceTopologyPublisher
from nodetopo.resource.body import to_nodetopology
from nodetopo.resource.noderesourcetopology import GROUP, PLURAL, VERSION, TopologyManager

from . import scheduler_support as s
from .cluster import REPO, LocalCluster
from .noderesourcetopology import build_nrt_scheduler, nrt_crd

pytestmark = [pytest.mark.k8s, pytest.mark.slow]

RUN = uuid.uuid4().hex[:6]
SCHEDULER = "nrt-scheduler"
POOL_LABEL = f"nodetopo.test/nrt-{RUN}"
NAMESPACE = f"nrt-{RUN}"
H100 = f"nrt-{RUN}-h100"  # dgx-h100: 2 NUMA nodes, 112 CPUs and 4 GPUs each; GPUs 0, 1, 2 and 4 held
PCIE = f"nrt-{RUN}-pcie"  # pcie-8x-2socket: 2 NUMA nodes, 72 CPUs each, 6 GPUs on node 0, 2 on node 1
HOLDER = PodRef(namespace="ml", name="running", container="main")
#: Node capacity: what the node-level filters see (enough for every pod below on both nodes)
CAPACITY = {H100: ("224", "2Ti"), PCIE: ("144", "512Gi")}


def create_node(cluster: LocalCluster, name: str) -> None:
    s.create_node(cluster, name, 8, {POOL_LABEL: "true"})
    cpu, memory = CAPACITY[name]
    capacity = {"cpu": cpu, "memory": memory, "pods": "110", "nvidia.com/gpu": "8"}
    patch = {"status": {"capacity": capacity, "allocatable": capacity}}
    path = f"/api/v1/nodes/{name}/status"
    s.ok(cluster.request("PATCH", path, body=patch, content_type="application/merge-patch+json"), 200)


@pytest.fixture(scope="module")
def published(cluster: LocalCluster) -> Iterator[dict[str, dict[str, Any]]]:
    """The CRD installed, the two Nodes, and their NodeResourceTopology objects as nodetopo wrote them."""
    cluster.kubectl("apply", "--server-side", "-f", str(nrt_crd()))
    cluster.kubectl("wait", "--for=condition=Established", f"crd/{PLURAL}.{GROUP}", "--timeout=60s")
    s.create_namespace(cluster, NAMESPACE)
    manager = TopologyManager(policy="single-numa-node", scope="container")
    held = {H100: (0, 1, 2, 4), PCIE: ()}
    bundles = {H100: "dgx-h100", PCIE: "pcie-8x-2socket"}
    stored: dict[str, dict[str, Any]] = {}
    with connect(str(cluster.kubeconfig)) as connection:
        session = ApiSession(connection)
        publisher = NodeResourceTopologyPublisher(session, manager)
        for name, bundle in bundles.items():
            create_node(cluster, name)
            allocation = GpuAllocation(known=True, gpu_holders=tuple((i, (HOLDER,)) for i in held[name]))
            body = to_nodetopology(s.discover(bundle), name, allocation)
            assert publisher.apply(body, node_name=name) == WRITTEN
            stored[name] = s.ok(cluster.request("GET", f"/apis/{GROUP}/{VERSION}/{PLURAL}/{name}"), 200)
    try:
        yield stored
    finally:
        s.delete_pods(cluster, NAMESPACE)
        for name in bundles:
            cluster.request("DELETE", f"/api/v1/nodes/{name}")
            cluster.request("DELETE", f"/apis/{GROUP}/{VERSION}/{PLURAL}/{name}")


@pytest.fixture(scope="module")
def nrt_scheduler(
    cluster: LocalCluster, published: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """kube-scheduler with NodeResourceTopologyMatch as Filter and Score, for ``schedulerName:
    nrt-scheduler``; yields its log."""
    binary = build_nrt_scheduler()
    plugin = [{"name": "NodeResourceTopologyMatch"}]
    config = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(cluster.kubeconfig)},
        "leaderElection": {"leaderElect": False},
        "profiles": [
            {
                "schedulerName": SCHEDULER,
                "plugins": {"filter": {"enabled": plugin}, "score": {"enabled": plugin}},
                "pluginConfig": [
                    {
                        "name": "NodeResourceTopologyMatch",
                        # no resync: the plugin reads the objects as published (no reserve cache)
                        "args": {
                            "cacheResyncPeriodSeconds": 0,
                            "scoringStrategy": {"type": "LeastAllocated"},
                        },
                    }
                ],
            }
        ],
    }
    tmp = tmp_path_factory.mktemp("nrt-scheduler")
    process, log = s.start_scheduler(cluster, tmp, SCHEDULER, config, binary=binary)
    try:
        yield log
    finally:
        s.stop(process)


@pytest.fixture
def no_pods(cluster: LocalCluster) -> Iterator[None]:
    """Each test starts with no pod bound: the node-level filters count the bound pods' requests."""
    yield
    s.delete_pods(cluster, NAMESPACE)


def guaranteed_pod(name: str, *, gpus: int, cpus: int) -> dict[str, Any]:
    resources = {"cpu": str(cpus), "memory": "16Gi", "nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "schedulerName": SCHEDULER,
            "nodeSelector": {POOL_LABEL: "true"},
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": resources, "limits": resources},
                }
            ],
        },
    }


def test_the_published_objects_are_what_the_plugin_reads(
    cluster: LocalCluster, published: dict[str, dict[str, Any]]
) -> None:
    listed = cluster.kubectl("get", "noderesourcetopologies", H100, PCIE).stdout
    assert H100 in listed and PCIE in listed, listed
    h100 = published[H100]
    assert h100["attributes"] == [
        {"name": "topologyManagerPolicy", "value": "single-numa-node"},
        {"name": "topologyManagerScope", "value": "container"},
    ]
    owner = h100["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"]) == ("Node", H100)
    gpus = {
        z["name"]: next(r["available"] for r in z["resources"] if r["name"] == "nvidia.com/gpu")
        for z in h100["zones"]
    }
    assert gpus == {"node-0": "1", "node-1": "3"}


def test_a_pod_binds_to_the_node_whose_one_zone_fits(
    cluster: LocalCluster, nrt_scheduler: Path, no_pods: None
) -> None:
    # 5 GPUs: only pcie's node-0 (6) holds them in one zone; h100 has 8 at node level, at most 3 free per zone
    assert s.bind(cluster, guaranteed_pod("five-gpus", gpus=5, cpus=8)) == PCIE
    # 3 GPUs and 100 CPUs: only h100's node-1 (3 free GPUs, 112 CPUs); pcie's zones have 72 CPUs
    assert s.bind(cluster, guaranteed_pod("cpus-100", gpus=3, cpus=100)) == H100


def test_a_pod_that_fits_no_zone_stays_pending(
    cluster: LocalCluster, nrt_scheduler: Path, no_pods: None
) -> None:
    # 7 GPUs: both nodes have 8 at node level, no NUMA zone has 7
    message = s.stays_pending(cluster, guaranteed_pod("seven-gpus", gpus=7, cpus=8), "cannot align container")
    assert "2 cannot align container" in message, message
    # 4 GPUs and 100 CPUs would fit h100's node-1 but for the GPU the kubelet says is held there
    message = s.stays_pending(cluster, guaranteed_pod("held", gpus=4, cpus=100), "cannot align container")
    assert "2 cannot align container" in message, message


def test_the_agent_writes_its_own_object_with_its_real_rights_and_no_other(
    cluster: LocalCluster,
    published: dict[str, Any],
    make_node: Callable[..., dict[str, Any]],
    node_bound_token: Callable[..., Any],
) -> None:
    """deploy/noderesourcetopology/ on top of the agent's RBAC: the agent's publisher, as the agent's service
    account with a token bound to a Pod on its node, writes that node's object and is denied another's."""
    files = [REPO / "deploy" / f for f in ("namespace.yaml", "serviceaccount.yaml", "rbac.yaml")]
    fresh = [f for f in files[1:] if cluster.kubectl("get", "-f", str(f), check=False).returncode != 0]
    for f in files:
        cluster.kubectl("apply", "--server-side", "-f", str(f))
    option = REPO / "deploy" / "noderesourcetopology"
    cluster.kubectl("apply", "--server-side", "-k", str(option))
    mine, other = (make_node()["metadata"]["name"] for _ in range(2))
    token = node_bound_token(mine, namespace="nodetopo", service_account="nodetopo-agent")
    manager = TopologyManager(policy="single-numa-node")
    try:
        with connect(str(token.kubeconfig)) as connection:
            session = ApiSession(connection)

            def publish(node: str) -> str:
                body = to_nodetopology(s.discover("dgx-h100"), node)
                return NodeResourceTopologyPublisher(session, manager).apply(body, node_name=node)

            deadline = time.monotonic() + 30
            while True:  # the RBAC and the policy take effect a moment after they are created
                try:
                    publish(other)
                except PublishError as e:
                    # the message is cut after its first words
                    if f"nodetopo-agent on node {mine} may write only NodeResourceTopology" in str(e):
                        assert e.status == 403, e
                        break
                    assert e.status == 403, e  # RBAC not loaded yet
                cluster.request("DELETE", f"/apis/{GROUP}/{VERSION}/{PLURAL}/{other}")
                assert time.monotonic() < deadline, "the policy never denied another node's object"
                time.sleep(0.5)
            assert publish(mine) == WRITTEN
            owner = s.ok(cluster.request("GET", f"/apis/{GROUP}/{VERSION}/{PLURAL}/{mine}"), 200)
            assert owner["metadata"]["ownerReferences"][0]["name"] == mine
    finally:
        for name in (mine, other):
            cluster.request("DELETE", f"/apis/{GROUP}/{VERSION}/{PLURAL}/{name}")
        cluster.kubectl("delete", "-k", str(option), "--ignore-not-found")
        for f in reversed(fresh):
            cluster.kubectl("delete", "-f", str(f), "--ignore-not-found")
