"""End to end: the real kube-scheduler calls ``nodetopo extender`` on loopback.

Nodes are plain Node objects with ``nvidia.com/gpu`` capacity and a NodeTopology discovered from the
real-machine fixture bundles (8-GPU NVSwitch, DGX-1 hybrid cube, PCIe NVLink pairs, PCIe without
NVLink, MIG, GH200). Pods with each ``nodetopo.io/`` annotation are created one at a time through a
scheduler profile that calls the extender, and must be bound to a node that satisfies them;
unsatisfiable pods stay Pending with the extender's reason in their events. A second scheduler
without the extender places pods by ``nodeAffinity`` on the ``nodetopo.io/`` labels alone.

The placement cases live in scheduler_support.py: test_second_scheduler.py runs the same cases
through deploy/scheduler's kube-scheduler (its shipped configuration, service account and Lease).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from . import scheduler_support as s
from .cluster import LocalCluster

pytestmark = [pytest.mark.k8s, pytest.mark.slow]

RUN = uuid.uuid4().hex[:6]
WITH_EXTENDER = "nodetopo-extender-e2e"
WITHOUT_EXTENDER = "nodetopo-plain-e2e"


@pytest.fixture(scope="module")
def pool(cluster: LocalCluster) -> Iterator[s.Pool]:
    with s.gpu_pool(cluster, f"e2e-{RUN}") as created:
        yield created


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
    """deploy/extender/rbac.yaml: list/watch NodeTopology objects and pods, get a ResourceClaim by
    name (404: allowed, not there), nothing else."""
    token = s.extender_token(cluster)
    assert _as_token(cluster, token, "GET", "/apis/nodetopo.io/v1alpha1/nodetopologies?limit=1") == 200
    assert _as_token(cluster, token, "GET", "/api/v1/pods?limit=1") == 200
    assert _as_token(cluster, token, "GET", "/api/v1/pods?watch=1&timeoutSeconds=1") == 200
    claims = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"
    assert _as_token(cluster, token, "GET", f"{claims}/absent") == 404
    denied = [
        ("GET", claims, None),
        ("GET", "/apis/resource.k8s.io/v1/resourceclaims", None),
        ("GET", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaimtemplates/absent", None),
        ("GET", "/api/v1/nodes", None),
        ("GET", "/api/v1/secrets", None),
        ("DELETE", "/apis/nodetopo.io/v1alpha1/nodetopologies/anything", None),
        ("POST", "/apis/nodetopo.io/v1alpha1/nodetopologies", {"apiVersion": "nodetopo.io/v1alpha1"}),
        ("POST", "/api/v1/namespaces/default/pods", {"apiVersion": "v1", "kind": "Pod"}),
    ]
    for method, path, body in denied:
        assert _as_token(cluster, token, method, path, body) == 403, (method, path)


@pytest.fixture(scope="module")
def extender_scheduler(
    cluster: LocalCluster, pool: s.Pool, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The cluster's scheduler as deploy/extender/scheduler-config.yaml configures it, calling the
    extender (which pages its lists: several pages even for this small pool)."""
    tmp = tmp_path_factory.mktemp("extender-e2e")
    with s.running_extender(cluster, tmp, "--page-size=5") as url:
        config = s.cluster_scheduler_config(cluster, WITH_EXTENDER, url)
        scheduler, _ = s.start_scheduler(cluster, tmp, WITH_EXTENDER, config)
        try:
            yield WITH_EXTENDER
        finally:
            s.stop(scheduler)


@pytest.fixture(scope="module")
def plain_scheduler(
    cluster: LocalCluster, pool: s.Pool, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("plain-e2e")
    config = s.cluster_scheduler_config(cluster, WITHOUT_EXTENDER, None)
    process, _ = s.start_scheduler(cluster, tmp, WITHOUT_EXTENDER, config)
    try:
        yield WITHOUT_EXTENDER
    finally:
        s.stop(process)


def test_pods_land_where_their_topology_needs_are_met(
    cluster: LocalCluster, pool: s.Pool, extender_scheduler: str
) -> None:
    s.check_placement(cluster, pool, extender_scheduler)


def test_unsatisfiable_pods_stay_pending_with_the_reason(
    cluster: LocalCluster, pool: s.Pool, extender_scheduler: str
) -> None:
    s.check_unsatisfiable(cluster, pool, extender_scheduler)


def test_node_affinity_on_nodetopo_labels_without_the_extender(
    cluster: LocalCluster, pool: s.Pool, plain_scheduler: str
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
        for name, topology in pool.topologies.items()
        if topology is not None
        and max((len(i.gpus) for i in topology.nvlink_islands), default=1) > 3
        and any(n.rdma for n in topology.nics)
    }
    assert len(matching) >= 3
    landed = {
        s.bind(cluster, pool.pod(f"affinity-{i}", plain_scheduler, 0, affinity=affinity)) for i in range(8)
    }
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
    s.stays_pending(
        cluster, pool.pod("affinity-none", plain_scheduler, 0, affinity=impossible), "affinity", timeout=30
    )
