"""Placement never counts a degraded edge as what a pod asked for (issue 24): an island that lost a
GPU's NVLinks, a PIX NIC behind a degraded link, a rail below its peers. The bodies are what
nodetopo publishes for the degraded fixture bundles."""

from __future__ import annotations

import pytest
from helpers import nodetopology_of, nodetopology_with_degraded, pending_gpu_pod, rail_down, synced_extender

from nodetopo.extender.cache import ClusterState
from nodetopo.extender.server import filter_nodes
from nodetopo.model import LinkClass
from nodetopo.placement.fit import evaluate, node_shape
from nodetopo.placement.request import MAX_NIC_DISTANCE, ONE_ISLAND, RDMA, PodRequest

EIGHT_ON_ONE_ISLAND = PodRequest(gpus=8, one_island=True)
PIX_RDMA = PodRequest(gpus=8, rdma=True, max_nic_distance=LinkClass.PIX)


@pytest.mark.parametrize(
    ("bundle", "island", "pix"),
    [
        ("dgx-h100", True, True),
        ("dgx-h100-nvlink-down", False, True),  # GPU5 is out of the island; its PCIe is fine
        ("dgx-h100-gpu-x8", True, False),  # GPU3's every NIC path crosses its x8 link
        ("dgx-h100-rail-half", True, False),  # GPU3's PIX rail runs at half rate
    ],
)
def test_a_degraded_edge_is_not_what_the_pod_asked_for(bundle: str, island: bool, pix: bool) -> None:
    shape = node_shape(nodetopology_of(bundle)["status"])
    assert evaluate(shape, shape.whole_gpus, EIGHT_ON_ONE_ISLAND).fits is island
    verdict = evaluate(shape, shape.whole_gpus, PIX_RDMA)
    assert verdict.fits is pix, verdict.reason
    # a pod that asks for neither still fits: the GPUs are there, only the edge is degraded
    assert evaluate(shape, shape.whole_gpus, PodRequest(gpus=8)).fits


@pytest.fixture(scope="module")
def degraded_cluster() -> ClusterState:
    """The extender's own state over the degraded bundles' objects and a dgx-h100 whose every
    InfiniBand rail is published degraded (only the Ethernet pair works)."""
    objects = [nodetopology_of(b) for b in ("dgx-h100-nvlink-down", "dgx-h100-gpu-x8", "dgx-h100-rail-half")]
    objects.append(
        nodetopology_with_degraded("dgx-h100", [rail_down(f"mlx5_{i}") for i in range(8)], "ib-down")
    )
    return synced_extender(objects)


NODES = ["dgx-h100-nvlink-down", "dgx-h100-gpu-x8", "dgx-h100-rail-half", "ib-down"]


@pytest.mark.parametrize(
    ("gpus", "annotations", "placed", "why"),
    [
        # one island of 8: only where no GPU left its island
        (8, {ONE_ISLAND: "true"}, {"dgx-h100-gpu-x8", "dgx-h100-rail-half", "ib-down"}, "island"),
        # 8 GPUs each at a PIX RDMA NIC: no degraded node has it (GPU3's path or rail, every rail)
        (8, {RDMA: "required", MAX_NIC_DISTANCE: "PIX"}, {"dgx-h100-nvlink-down"}, "PIX"),
        # seven GPUs at PIX: the rail-half node has them (GPU3 aside)
        (
            7,
            {MAX_NIC_DISTANCE: "PIX"},
            {"dgx-h100-nvlink-down", "dgx-h100-gpu-x8", "dgx-h100-rail-half"},
            "PIX",
        ),
    ],
)
def test_the_extender_places_only_on_what_works(
    degraded_cluster: ClusterState, gpus: int, annotations: dict[str, str], placed: set[str], why: str
) -> None:
    result = filter_nodes(degraded_cluster, {"Pod": pending_gpu_pod(gpus, annotations), "NodeNames": NODES})
    assert set(result["NodeNames"]) == placed
    refused = {**result["FailedNodes"], **result["FailedAndUnresolvableNodes"]}
    assert set(refused) == set(NODES) - placed
    assert all(why in reason for reason in refused.values()), refused


def test_a_rail_that_no_gpu_reaches_healthily_earns_no_link_layer_point() -> None:
    """A pod that prefers InfiniBand (a preference, not a filter): where every InfiniBand rail is
    degraded the node has no InfiniBand NIC anywhere, so the link score gives it nothing for one."""
    ib_down = nodetopology_with_degraded("dgx-h100", [rail_down(f"mlx5_{i}") for i in range(8)])
    shape = node_shape(ib_down["status"])
    assert (shape.rdma_layers, shape.rdma_nics) == (("Ethernet",), 2)
    prefers_ib = PodRequest(gpus=1, rdma=True, link_layer="InfiniBand")
    ethernet = PodRequest(gpus=1, rdma=True, link_layer="Ethernet")
    on_ib_down, on_ethernet = (evaluate(shape, shape.whole_gpus, r) for r in (prefers_ib, ethernet))
    assert on_ib_down.fits and on_ib_down.gpus == on_ethernet.gpus
    # link: 2 for Ethernet (the chosen GPU's RDMA NICs), 0 for InfiniBand (1 were a degraded rail counted)
    assert on_ethernet.score - on_ib_down.score == 2
