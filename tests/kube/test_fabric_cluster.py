"""The network position on a real API server: status.network, the tier labels, and the exported
Kueue objects applied with Kueue's own CRDs (from its Go module)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from nodetopo import export
from nodetopo.kube.session import ApiSession
from nodetopo.model import FabricTier, Facts, NetworkObservation, SwitchPort
from nodetopo.publish import Publisher
from nodetopo.resource.body import to_nodetopology
from nodetopo.resource.identity import GROUP, PLURAL, VERSION
from nodetopo.resource.labels import to_labels, uncertain_keys
from nodetopo.topology.derive import derive_topology

from .cluster import LocalCluster
from .kueue import kueue_crds

pytestmark = pytest.mark.k8s


def rail_host(leaves: list[str]) -> Facts:
    """A rail-optimised host: one HCA per leaf, the leaf set as tier 0, a spine group as tier 1."""
    neighbours = tuple(
        SwitchPort(
            nic=f"mlx5_{i}",
            port=1,
            source="fabric.ib",
            state="ACTIVE",
            switch_id=leaf,
            switch_name=f"B09-P1-IBLEAF-0{i + 1}-05-with-a-rather-long-name-" + "x" * 300,
            switch_port="8",
        )
        for i, leaf in enumerate(leaves)
    )
    tiers = (
        FabricTier(level=0, id="t0-def1c8bdd47c76a0", name="+".join(leaves), members=tuple(leaves)),
        FabricTier(level=1, id="t1-e22741fae6f98f54"),
    )
    return Facts(network=(NetworkObservation(source="fabric.ib", neighbours=neighbours, tiers=tiers),))


def test_network_status_and_tier_labels_are_published(
    cluster: LocalCluster, api_client_for: Callable[..., Any], make_node: Callable[..., dict[str, Any]]
) -> None:
    node = make_node()["metadata"]["name"]
    topology = derive_topology(rail_host([f"0x2c5eab0300c2{n:04x}" for n in range(4)]))
    body = to_nodetopology(topology, node)
    labels = to_labels(topology)
    publisher = Publisher(ApiSession(api_client_for("publisher")), node)
    assert publisher.publish(body, labels, uncertain_keys=uncertain_keys(topology)).topology.written
    status, stored = cluster.request("GET", f"/apis/{GROUP}/{VERSION}/{PLURAL}/{node}")
    assert status == 200
    assert stored["status"]["network"] == body["status"]["network"]  # nothing pruned, bounds hold
    assert len(stored["status"]["network"]["neighbours"][0]["switchName"]) == 256
    _, node_obj = cluster.request("GET", f"/api/v1/nodes/{node}")
    assert node_obj["metadata"]["labels"]["nodetopo.io/fabric.tier-0"] == "t0-def1c8bdd47c76a0"
    assert node_obj["metadata"]["labels"]["nodetopo.io/fabric.tier-1"] == "t1-e22741fae6f98f54"


def test_exported_kueue_objects_apply_with_kueues_crds(cluster: LocalCluster) -> None:
    for crd in kueue_crds(("topologies", "resourceflavors")):
        cluster.kubectl("apply", "--server-side", "--field-manager=nodetopo-tests", "-f", str(crd))
    cluster.kubectl(
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/topologies.kueue.x-k8s.io",
        "crd/resourceflavors.kueue.x-k8s.io",
    )
    suffix = uuid.uuid4().hex[:8]
    objects = [to_nodetopology(derive_topology(rail_host([f"0x{n:016x}"])), f"gpu-{n}") for n in range(4)]
    result = export.kueue(
        export.places_from_nodetopologies(objects),
        name=f"nodetopo-{suffix}",
        flavor=f"nodetopo-{suffix}",
        flavor_node_labels={"nodetopo.io/rdma": "true"},
        nvlink=False,
    )
    cluster.kubectl(
        "apply",
        "--server-side",
        "--field-manager=nodetopo-tests",
        "-f",
        "-",
        input=yaml.safe_dump_all(list(result.objects)),
    )
    topology = yaml.safe_load(
        cluster.kubectl("get", "topologies.kueue.x-k8s.io", f"nodetopo-{suffix}", "-o", "yaml").stdout
    )
    assert [level["nodeLabel"] for level in topology["spec"]["levels"]] == [
        "nodetopo.io/fabric.tier-1",
        "nodetopo.io/fabric.tier-0",
        "kubernetes.io/hostname",
    ]
    flavor = yaml.safe_load(
        cluster.kubectl("get", "resourceflavors.kueue.x-k8s.io", f"nodetopo-{suffix}", "-o", "yaml").stdout
    )
    assert flavor["spec"]["topologyName"] == f"nodetopo-{suffix}"
    # Kueue's own CRD validation rejects what it must: the hostname level anywhere but last
    bad = dict(result.objects[0])
    bad = {
        **bad,
        "metadata": {"name": f"bad-{suffix}"},
        "spec": {"levels": list(reversed(bad["spec"]["levels"]))},
    }
    rejected = cluster.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(bad), check=False)
    assert rejected.returncode != 0 and "kubernetes.io/hostname" in rejected.stderr
