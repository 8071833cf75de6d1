"""Placement never counts a degraded edge as what a pod asked for (issue 24): an island that lost a
GPU's NVLinks, a PIX NIC behind a degraded link, a rail below its peers. The bodies are what
nodetopo publishes for the degraded fixture bundles."""

from __future__ import annotations

import pytest
from helpers import nodetopology_of

from nodetopo.model import LinkClass
from nodetopo.placement.fit import evaluate, node_shape
from nodetopo.placement.request import PodRequest

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
