"""End to end with DRA: the real kube-scheduler (its DynamicResources plugin allocating from
ResourceSlices) calls ``nodetopo extender``, which reads each pod's ResourceClaims from the API server
as its own service account (deploy/extender/rbac.yaml: get resourceclaims).

Three GPU Nodes, each with a NodeTopology discovered from a fixture bundle and a ResourceSlice of
driver ``gpu.nvidia.com`` listing its GPUs as NVIDIA's GPU DRA driver does (the DeviceClass is
deploy/examples/dra's): ``nvs`` (dgx-h100: one NVSwitch island of 8), ``pairs-a`` and ``pairs-b``
(pcie-4x-nvbridge: 4 GPUs, NVLink-bridged pairs). The pods request no ``nvidia.com/gpu``: their
GPUs come from a ResourceClaim that asks a count of ``gpu.nvidia.com`` devices and states
``nodetopo.io/gpus-in-one-island`` on the claim.

kube-scheduler sends an extender only the pods that request one of its ``managedResources``
(``IsInterested``: container requests and limits by resource name), and a claim is not a resource
name: the cluster scheduler's configuration (deploy/extender, ``managedResources: [nvidia.com/gpu]``)
never sends a claim-based pod. The profile here is deploy/scheduler's (the opt-in second scheduler),
which has no ``managedResources``: every pod that names it is sent (docs/dra.md).

Run with ``-s`` for each pod's placement and the extender's reason.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from . import scheduler_support as s
from .cluster import REPO, LocalCluster

pytestmark = [pytest.mark.k8s, pytest.mark.slow]

RUN = uuid.uuid4().hex[:6]
WITH_EXTENDER = "nodetopo-claims-e2e"
WITHOUT_EXTENDER = "nodetopo-claims-plain-e2e"
NODES = {"nvs": "dgx-h100", "pairs-a": "pcie-4x-nvbridge", "pairs-b": "pcie-4x-nvbridge"}
ISLAND = {"nodetopo.io/gpus-in-one-island": "true"}
SLICES = "/apis/resource.k8s.io/v1/resourceslices"


def _name(suffix: str) -> str:
    return f"dra-{RUN}-{suffix}"


def _slice(node: str, topology: Any) -> dict[str, Any]:
    """The node's GPUs as NVIDIA's GPU DRA driver publishes them (the attribute the DeviceClass
    selects on, and the uuid)."""
    devices = [
        {
            "name": f"gpu-{gpu.index}",
            "attributes": {"type": {"string": "gpu"}, "uuid": {"string": gpu.uuid or f"GPU-{gpu.index}"}},
        }
        for gpu in topology.gpus
    ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpu.nvidia.com"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


@pytest.fixture(scope="module")
def pool(cluster: LocalCluster) -> Iterator[str]:
    """The three nodes, their NodeTopologies and ResourceSlices, the DeviceClass; a namespace."""
    from nodetopo.resource.body import to_nodetopology
    from nodetopo.resource.labels import to_labels

    classes = list(
        yaml.safe_load_all((REPO / "deploy" / "examples" / "dra" / "deviceclasses.yaml").read_text())
    )
    gpu_class = next(c for c in classes if c and c["metadata"]["name"] == "gpu.nvidia.com")
    s.ok(cluster.request("POST", "/apis/resource.k8s.io/v1/deviceclasses", body=gpu_class), 201, 409)
    namespace = _name("pods")
    created: list[str] = []
    try:
        for suffix, bundle in NODES.items():
            topology = s.discover(bundle)
            node = _name(suffix)
            s.create_node(cluster, node, len(topology.gpus), {"nodetopo-dra-e2e": RUN, **to_labels(topology)})
            created.append(f"/api/v1/nodes/{node}")
            s.create_nodetopology(cluster, to_nodetopology(topology, node))
            created.append(f"/apis/nodetopo.io/v1alpha1/nodetopologies/{node}")
            s.ok(cluster.request("POST", SLICES, body=_slice(node, topology)), 201)
            created.append(f"{SLICES}/{node}-gpu.nvidia.com")
        s.create_namespace(cluster, namespace)
        yield namespace
    finally:
        s.delete_pods(cluster, namespace)
        cluster.request("DELETE", f"/api/v1/namespaces/{namespace}")
        for path in reversed(created):
            cluster.request("DELETE", path)


def _scheduler_config(cluster: LocalCluster, name: str, url: str | None) -> dict[str, Any]:
    """With ``url``: deploy/scheduler's shipped configuration (the opt-in scheduler: no
    ``managedResources``, not ignorable) pointed at this cluster and extender; without: the default
    plugins only."""
    if url is None:
        return s.cluster_scheduler_config(cluster, name, None)
    config: dict[str, Any] = yaml.safe_load(
        (REPO / "deploy" / "scheduler" / "scheduler-config.yaml").read_text()
    )
    config["clientConnection"] = {"kubeconfig": str(cluster.kubeconfig)}
    config["leaderElection"] = {"leaderElect": False}
    config["profiles"] = [{"schedulerName": name}]
    (extender,) = config["extenders"]
    assert "managedResources" not in extender and extender["ignorable"] is False
    extender["urlPrefix"] = url
    return config


@pytest.fixture(scope="module")
def schedulers(cluster: LocalCluster, pool: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A profile calling the extender and a plain one (DRA's allocator alone)."""
    tmp = tmp_path_factory.mktemp("extender-claims")
    with s.running_extender(cluster, tmp) as url:
        with_extender, _ = s.start_scheduler(
            cluster, tmp, WITH_EXTENDER, _scheduler_config(cluster, WITH_EXTENDER, url)
        )
        plain, _ = s.start_scheduler(
            cluster, tmp, WITHOUT_EXTENDER, _scheduler_config(cluster, WITHOUT_EXTENDER, None)
        )
        try:
            yield
        finally:
            s.stop(with_extender)
            s.stop(plain)


def _claim_pod(
    cluster: LocalCluster,
    namespace: str,
    scheduler: str,
    gpus: int,
    annotations: dict[str, str],
    node: str | None,
) -> dict[str, Any]:
    """A ResourceClaim of ``gpus`` gpu.nvidia.com devices with ``annotations`` (created now) and a pod
    using it through ``scheduler``, on this test's nodes (``node``: that one only)."""
    name = f"c{gpus}-{uuid.uuid4().hex[:5]}"
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": gpus}}
                ]
            }
        },
    }
    s.ok(
        cluster.request(
            "POST", f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims", body=claim
        ),
        201,
    )
    selector = {"nodetopo-dra-e2e": RUN}
    if node:
        selector["kubernetes.io/hostname"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "schedulerName": scheduler,
            "automountServiceAccountToken": False,
            "nodeSelector": selector,
            "resourceClaims": [{"name": "gpus", "resourceClaimName": name}],
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/cuda:e2e",
                    "resources": {"claims": [{"name": "gpus"}]},
                }
            ],
        },
    }


def _allocated(cluster: LocalCluster, namespace: str, name: str) -> list[str]:
    claim = s.ok(
        cluster.request("GET", f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}"), 200
    )
    return sorted(r["device"] for r in claim["status"]["allocation"]["devices"]["results"])


@pytest.fixture(autouse=True)
def _hostnames(cluster: LocalCluster, pool: str) -> None:
    """The fake Nodes carry no kubernetes.io/hostname (no kubelet set it): label them."""
    for suffix in NODES:
        node = _name(suffix)
        body = {"metadata": {"labels": {"kubernetes.io/hostname": node}}}
        s.ok(
            cluster.request(
                "PATCH", f"/api/v1/nodes/{node}", body=body, content_type="application/merge-patch+json"
            ),
            200,
        )


def test_a_claim_asking_four_gpus_in_one_island_lands_on_the_nvswitch_node(
    cluster: LocalCluster, pool: str, schedulers: None
) -> None:
    """Three nodes have at least 4 free GPU devices each; only ``nvs`` has 4 in one island. (The
    template test below takes nvs's other 4.)"""
    pod = _claim_pod(cluster, pool, WITH_EXTENDER, 4, ISLAND, None)
    node = s.bind(cluster, pod)
    devices = _allocated(cluster, pool, pod["metadata"]["name"])
    print(f"4 GPUs, gpus-in-one-island on the claim: bound to {node}, devices {devices}")
    assert node == _name("nvs")
    assert len(devices) == 4


def test_where_no_island_fits_the_claim_the_pod_stays_pending_with_the_reason(
    cluster: LocalCluster, pool: str, schedulers: None
) -> None:
    pod = _claim_pod(cluster, pool, WITH_EXTENDER, 4, ISLAND, _name("pairs-a"))
    message = s.stays_pending(cluster, pod, "at most 2 GPUs in one NVLink island, pod needs 4")
    print(f"4 GPUs in one island, only pairs-a allowed: Pending: {message}")
    # a claim that fits one of its islands is placed there
    pod = _claim_pod(cluster, pool, WITH_EXTENDER, 2, ISLAND, _name("pairs-a"))
    assert s.bind(cluster, pod) == _name("pairs-a")


def test_without_the_extender_dra_places_the_same_claim_across_islands(
    cluster: LocalCluster, pool: str, schedulers: None
) -> None:
    """The control: DRA's allocator alone has no word for an island and gives pairs-b's 4 GPUs (two
    islands) to the claim; the annotation is then for the probe to catch."""
    pod = _claim_pod(cluster, pool, WITHOUT_EXTENDER, 4, ISLAND, _name("pairs-b"))
    assert s.bind(cluster, pod) == _name("pairs-b")
    devices = _allocated(cluster, pool, pod["metadata"]["name"])
    print(f"4 GPUs, gpus-in-one-island, no extender: bound to pairs-b, devices {devices}")
    assert devices == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]


def test_a_template_s_claim_is_read_by_the_name_in_the_pod_s_status(
    cluster: LocalCluster, pool: str, schedulers: None
) -> None:
    """A pod whose claim comes from the template ``four-gpus-one-nvlink-island``
    (deploy/examples/dra/nodetopo-claims.yaml). The harness runs no resourceclaim controller, so the
    test does its part as that controller does: the claim made from the template's ``spec`` (its
    ``spec.metadata.annotations`` copied), owned by the pod, its name recorded in the pod's
    ``status.resourceClaimStatuses``. The extender reads it by that name."""
    examples = yaml.safe_load_all((REPO / "deploy" / "examples" / "dra" / "nodetopo-claims.yaml").read_text())
    template = next(t for t in examples if t["metadata"]["name"] == "four-gpus-one-nvlink-island")
    template["metadata"] = {"name": template["metadata"]["name"], "namespace": pool}
    resource = "/apis/resource.k8s.io/v1/namespaces"
    s.ok(cluster.request("POST", f"{resource}/{pool}/resourceclaimtemplates", body=template), 201, 409)
    name = f"tpl-{uuid.uuid4().hex[:5]}"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": pool},
        "spec": {
            "schedulerName": WITH_EXTENDER,
            "automountServiceAccountToken": False,
            "nodeSelector": {"nodetopo-dra-e2e": RUN},
            "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "four-gpus-one-nvlink-island"}],
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/cuda:e2e",
                    "resources": {"claims": [{"name": "gpus"}]},
                }
            ],
        },
    }
    created = s.ok(cluster.request("POST", f"/api/v1/namespaces/{pool}/pods", body=pod), 201)
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": f"{name}-gpus-x1",
            "namespace": pool,
            "annotations": {
                **template["spec"]["metadata"]["annotations"],
                "resource.kubernetes.io/pod-claim-name": "gpus",
            },
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": name,
                    "uid": created["metadata"]["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": template["spec"]["spec"],
    }
    s.ok(cluster.request("POST", f"{resource}/{pool}/resourceclaims", body=claim), 201)
    status = {
        "status": {
            "resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": claim["metadata"]["name"]}]
        }
    }
    s.ok(
        cluster.request(
            "PATCH",
            f"/api/v1/namespaces/{pool}/pods/{name}/status",
            body=status,
            content_type="application/strategic-merge-patch+json",
        ),
        200,
    )
    node = s.node_of(cluster, pool, name, 60)
    devices = _allocated(cluster, pool, claim["metadata"]["name"]) if node else []
    print(f"template four-gpus-one-nvlink-island: bound to {node}, devices {devices}")
    assert node == _name("nvs"), [e.get("message") for e in s.events(cluster, pool, name)]
