"""The NodeResourceTopology option: the projection of the NodeTopology body on the fixture bundles, and
its publisher (skip unchanged, the first apply compared with the stored object, a missing CRD said once
and never raised, a Missing scan writes nothing)."""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from typing import Any

import pytest
from helpers import nodetopology_of, topology_of

from nodetopo.errors import PublishError
from nodetopo.model import PodRef
from nodetopo.model.allocation import GpuAllocation, ResourceCount
from nodetopo.publish.noderesourcetopology import (
    NOT_INSTALLED,
    SKIPPED,
    WRITTEN,
    NodeResourceTopologyPublisher,
)
from nodetopo.resource.body import to_nodetopology
from nodetopo.resource.noderesourcetopology import TopologyManager, to_noderesourcetopology

HOLDER = PodRef(namespace="ml", name="train-0", container="main")


def body_of(
    bundle: str, *, held: tuple[int, ...] = (), known: bool = True, advertised: int | None = None
) -> Any:
    allocation = GpuAllocation(
        known=known,
        gpu_holders=tuple((i, (HOLDER,)) for i in held),
        resources=(ResourceCount(name="nvidia.com/gpu", allocatable=advertised, allocated=len(held)),)
        if advertised is not None
        else (),
    )
    return to_nodetopology(topology_of(bundle), "gpu-1", allocation)


def zones(nrt: Mapping[str, Any]) -> dict[str, dict[str, tuple[str, str, str]]]:
    return {
        z["name"]: {r["name"]: (r["capacity"], r["allocatable"], r["available"]) for r in z["resources"]}
        for z in nrt["zones"]
    }


def test_dgx_h100_one_zone_per_numa_node_with_slit_costs() -> None:
    nrt = to_noderesourcetopology(body_of("dgx-h100"))
    assert nrt is not None
    assert nrt["apiVersion"] == "topology.node.k8s.io/v1alpha2" and nrt["kind"] == "NodeResourceTopology"
    assert nrt["metadata"]["name"] == "gpu-1"
    assert [(z["name"], z["type"]) for z in nrt["zones"]] == [("node-0", "Node"), ("node-1", "Node")]
    assert [z["costs"] for z in nrt["zones"]] == [
        [{"name": "node-0", "value": 10}, {"name": "node-1", "value": 21}],
        [{"name": "node-0", "value": 21}, {"name": "node-1", "value": 10}],
    ]
    got = zones(nrt)
    assert got["node-0"]["cpu"] == ("112", "112", "112")
    assert got["node-0"]["nvidia.com/gpu"] == ("4", "4", "4") == got["node-1"]["nvidia.com/gpu"]
    assert got["node-1"]["memory"] == (str(1 << 40),) * 3
    assert "attributes" not in nrt  # the topology manager is never guessed


def test_held_gpus_are_not_available() -> None:
    nrt = to_noderesourcetopology(body_of("dgx-h100", held=(0, 1, 5)))
    assert nrt is not None
    got = zones(nrt)
    assert got["node-0"]["nvidia.com/gpu"] == ("4", "4", "2")
    assert got["node-1"]["nvidia.com/gpu"] == ("4", "4", "3")


def test_dgx_a100_nps4_gpus_in_their_own_zones() -> None:
    nrt = to_noderesourcetopology(body_of("dgx-a100"))
    assert nrt is not None
    got = zones(nrt)
    assert len(got) == 8
    with_gpus = {name for name, res in got.items() if "nvidia.com/gpu" in res}
    assert with_gpus == {"node-1", "node-3", "node-5", "node-7"}
    assert all(got[z]["nvidia.com/gpu"] == ("2", "2", "2") for z in with_gpus)
    assert nrt["zones"][0]["costs"][4] == {"name": "node-4", "value": 32}


def test_unknown_holders_put_no_gpu_in_any_zone() -> None:
    for body in (body_of("dgx-h100", known=False), nodetopology_of("dgx-h100")):
        nrt = to_noderesourcetopology(body)
        assert nrt is not None
        assert all(set(res) == {"cpu", "memory"} for res in zones(nrt).values())


def test_another_advertised_gpu_count_puts_no_gpu_in_any_zone() -> None:
    """Time-slicing: the kubelet advertises replicas, not the GPUs nodetopo sees."""
    nrt = to_noderesourcetopology(body_of("dgx-h100", advertised=32))
    assert nrt is not None and all("nvidia.com/gpu" not in res for res in zones(nrt).values())
    same = to_noderesourcetopology(body_of("dgx-h100", advertised=8))
    assert same is not None and zones(same)["node-0"]["nvidia.com/gpu"] == ("4", "4", "4")


def test_gpus_of_unknown_numa_node_belong_to_no_zone() -> None:
    topology = topology_of("gh200-nvl")
    assert topology.gpus and all(g.numa_node is None for g in topology.gpus)
    nrt = to_noderesourcetopology(body_of("gh200-nvl"))
    assert nrt is not None
    assert all("nvidia.com/gpu" not in res for res in zones(nrt).values())


def test_mig_gpus_are_not_whole_gpus() -> None:
    topology = topology_of("a100-mig")
    parents = {m.parent_index for m in topology.mig_devices}
    nrt = to_noderesourcetopology(body_of("a100-mig"))
    assert nrt is not None
    assert zones(nrt)["node-0"]["nvidia.com/gpu"][0] == str(len(topology.gpus) - len(parents))


def test_a_node_without_numa_facts_has_no_object() -> None:
    body = body_of("dgx-h100")
    body["status"]["numaNodes"] = []
    assert to_noderesourcetopology(body) is None


def test_the_stated_topology_manager_is_the_attributes() -> None:
    manager = TopologyManager(policy="single-numa-node", scope="pod")
    nrt = to_noderesourcetopology(body_of("dgx-h100"), manager=manager)
    assert nrt is not None
    assert nrt["attributes"] == [
        {"name": "topologyManagerPolicy", "value": "single-numa-node"},
        {"name": "topologyManagerScope", "value": "pod"},
    ]
    only_policy = to_noderesourcetopology(body_of("dgx-h100"), manager=TopologyManager(policy="restricted"))
    assert only_policy is not None
    assert only_policy["attributes"] == [{"name": "topologyManagerPolicy", "value": "restricted"}]
    with pytest.raises(ValueError, match="single-numa-node"):
        TopologyManager(policy="single-numa")


class NrtSession:
    """An ``ApiSession`` double for one NodeResourceTopology (``crd``: whether the CRD is installed)."""

    field_manager = "nodetopo-agent"

    def __init__(self, *, crd: bool = True) -> None:
        self.crd = crd
        self.stored: dict[str, Any] | None = None
        self.applied: list[dict[str, Any]] = []
        self.reads = 0

    def read_node(self, name: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "uid": "u-1"}}

    def read_cluster_object(self, group: str, version: str, plural: str, name: str) -> dict[str, Any] | None:
        self.reads += 1
        return copy.deepcopy(self.stored)

    def apply_cluster_object(
        self,
        group: str,
        version: str,
        plural: str,
        name: str,
        body: Mapping[str, Any],
        *,
        status: bool,
        force: bool = False,
    ) -> dict[str, Any]:
        assert (group, version, plural, status) == (
            "topology.node.k8s.io",
            "v1alpha2",
            "noderesourcetopologies",
            False,
        )
        if not self.crd:
            raise PublishError("the server could not find the requested resource", status=404)
        self.applied.append(copy.deepcopy(dict(body)))
        self.stored = copy.deepcopy(dict(body))
        return copy.deepcopy(self.stored)


def test_publisher_writes_once_with_the_node_as_owner_then_skips() -> None:
    session = NrtSession()
    publisher = NodeResourceTopologyPublisher(session, TopologyManager(policy="single-numa-node"))  # type: ignore[arg-type]
    body = body_of("dgx-h100")
    assert publisher.apply(body, node_name="gpu-1") == WRITTEN
    assert publisher.apply(body, node_name="gpu-1") == SKIPPED
    assert len(session.applied) == 1
    owner = session.applied[0]["metadata"]["ownerReferences"]
    assert owner == [
        {"apiVersion": "v1", "kind": "Node", "name": "gpu-1", "uid": "u-1", "blockOwnerDeletion": False}
    ]
    assert publisher.apply(body_of("dgx-h100", held=(2,)), node_name="gpu-1") == WRITTEN
    assert (
        len(session.applied) == 2 and session.reads == 1
    )  # the stored object is read on the first apply only


def test_restarted_publisher_compares_with_the_stored_object() -> None:
    session = NrtSession()
    body = body_of("dgx-h100")
    NodeResourceTopologyPublisher(session).apply(body, node_name="gpu-1")  # type: ignore[arg-type]
    assert NodeResourceTopologyPublisher(session).apply(body, node_name="gpu-1") == SKIPPED  # type: ignore[arg-type]
    assert len(session.applied) == 1


def test_missing_crd_is_said_once_and_never_raised(caplog: pytest.LogCaptureFixture) -> None:
    session = NrtSession(crd=False)
    publisher = NodeResourceTopologyPublisher(session)  # type: ignore[arg-type]
    body = body_of("dgx-h100")
    with caplog.at_level(logging.WARNING, logger="nodetopo.publish.noderesourcetopology"):
        assert publisher.apply(body, node_name="gpu-1") == NOT_INSTALLED
        assert publisher.apply(body, node_name="gpu-1") == SKIPPED  # unchanged: not asked again
        assert publisher.apply(body_of("dgx-h100", held=(1,)), node_name="gpu-1") == NOT_INSTALLED
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "CRD is not installed" in warnings[0]
    session.crd = True
    assert publisher.apply(body_of("dgx-h100"), node_name="gpu-1") == WRITTEN


def test_missing_scan_writes_nothing() -> None:
    session = NrtSession()
    body = body_of("dgx-h100")
    for c in body["status"]["conditions"]:
        if c["type"] == "Ready":
            c.update(status="False", reason="Missing")
    publisher = NodeResourceTopologyPublisher(session)  # type: ignore[arg-type]
    assert publisher.apply(body, node_name="gpu-1") == SKIPPED and not session.applied


def test_the_dry_run_prints_the_object_without_the_unknown_owner() -> None:
    import io

    import yaml

    from nodetopo.publish.dryrun import PrintingSession

    out = io.StringIO()
    manager = TopologyManager(policy="single-numa-node")
    publisher = NodeResourceTopologyPublisher(PrintingSession(out), manager)
    assert publisher.apply(body_of("dgx-h100"), node_name="gpu-1") == WRITTEN
    (document,) = [d for d in yaml.safe_load_all(out.getvalue()) if d]
    assert document["kind"] == "NodeResourceTopology" and "ownerReferences" not in document["metadata"]
    assert document["attributes"] == [{"name": "topologyManagerPolicy", "value": "single-numa-node"}]
