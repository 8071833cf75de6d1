"""The admission summary counts only healthy capacity (issue 24): the NodeTopology objects are those
nodetopo publishes for the degraded fixture bundles, and one of the dgx-h100 whose every InfiniBand
rail is published degraded (only its two Ethernet NICs still work)."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import nodetopology_of, nodetopology_with_degraded, rail_down

from nodetopo.admission.summary import node_facts, summarize_objects
from nodetopo.model import LinkClass

NOW = "2026-03-02T10:00:00Z"

IB_DOWN = tuple(rail_down(f"mlx5_{i}") for i in range(8))


def total(*objects: dict[str, Any]) -> dict[str, Any]:
    summary: dict[str, Any] = summarize_objects(objects, computed_at=NOW)["status"]["total"]
    return summary


def test_a_gpu_out_of_its_island_is_not_counted_in_the_largest_island() -> None:
    healthy, degraded = total(nodetopology_of("dgx-h100")), total(nodetopology_of("dgx-h100-nvlink-down"))
    assert (healthy["largestIsland"], degraded["largestIsland"]) == (8, 7)
    assert degraded["gpus"] == 8  # GPU5 still works on its own: only its NVLinks are degraded


@pytest.mark.parametrize("bundle", ["dgx-h100-gpu-x8", "dgx-h100-rail-half"])
def test_a_degraded_pix_path_of_one_gpu_leaves_the_others_pix(bundle: str) -> None:
    """GPU3's PIX NIC is behind a degraded edge; the other seven GPUs keep theirs: the node still
    offers PIX (each check refuses only what no node offers), and GPU3 is counted at what works."""
    facts = node_facts(nodetopology_of(bundle)["status"])
    assert (facts.best_nic, facts.best_rdma_nic, facts.largest_island) == (LinkClass.PIX, LinkClass.PIX, 8)


def test_the_rails_published_degraded_are_not_rdma_capacity() -> None:
    obj = nodetopology_with_degraded("dgx-h100", IB_DOWN)
    assert [e["edge"] for e in obj["status"]["health"]["degraded"]] == [f"mlx5_{i}/port1" for i in range(8)]
    healthy, degraded = total(nodetopology_of("dgx-h100")), total(obj)
    assert healthy["rdmaLinkLayers"] == ["Ethernet", "InfiniBand"]
    assert healthy["bestRDMANICDistance"] == "PIX"
    # only the Ethernet pair works: its link layer alone, at the class the GPUs have to it
    assert degraded["rdmaLinkLayers"] == ["Ethernet"]
    assert degraded["bestRDMANICDistance"] == degraded["bestNICDistance"] == "NODE"
    assert (degraded["rdmaNodes"], degraded["gpus"], degraded["largestIsland"]) == (1, 8, 8)


def test_a_node_none_of_whose_rdma_nics_works_offers_no_rdma() -> None:
    obj = nodetopology_with_degraded("dgx-h100", (*IB_DOWN, rail_down("mlx5_8"), rail_down("mlx5_9")))
    offer = total(obj)
    assert (offer["rdmaNodes"], offer["rdmaLinkLayers"], offer["bestRDMANICDistance"]) == (0, [], "none")
