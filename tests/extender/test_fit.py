"""Placement and scoring on the shapes of real machines (fixture bundles) and on small synthetic shapes."""

from __future__ import annotations

from typing import Any

import pytest

from nodetopo.model import LinkClass
from nodetopo.placement.fit import GpuSlot, NodeShape, evaluate, free_after, node_shape, place
from nodetopo.placement.request import PodRequest


def shape(bodies: dict[str, dict[str, Any]], name: str) -> NodeShape:
    return node_shape(bodies[name]["status"])


def synthetic(islands: list[list[int]], layer: str = "InfiniBand") -> NodeShape:
    """GPUs in the given NVLink islands (island id = position), all PIX to an RDMA NIC of ``layer``."""
    slots = [
        GpuSlot(
            index=i,
            island=n,
            numa=0,
            nic=LinkClass.PIX,
            rdma_nic=LinkClass.PIX,
            rdma_layers=(layer,),
            whole=True,
        )
        for n, members in enumerate(islands)
        for i in members
    ]
    return NodeShape(gpus=tuple(sorted(slots, key=lambda g: g.index)), rdma_layers=(layer,))


def test_one_island_needs_an_island_that_large(bodies: dict[str, dict[str, Any]]) -> None:
    request = PodRequest(gpus=4, one_island=True)
    pairs = shape(bodies, "pcie-4x-nvbridge")
    verdict = evaluate(pairs, pairs.whole_gpus, request)
    assert not verdict.fits and verdict.unresolvable
    assert "at most 2 GPUs in one NVLink island, pod needs 4" in verdict.reason
    for machine in ("dgx-h100", "dgx1-v100", "dgx-a100"):
        s = shape(bodies, machine)
        assert evaluate(s, s.whole_gpus, request).fits, machine
    no_nvlink = shape(bodies, "pcie-8x-2socket")
    assert "no NVLink island" in evaluate(no_nvlink, no_nvlink.whole_gpus, request).reason


def test_two_gpu_island_pod_takes_the_free_pair_not_the_big_island() -> None:
    node = synthetic([[0, 1], [2, 3, 4, 5, 6, 7, 8, 9]])
    request = PodRequest(gpus=2, one_island=True)
    assert place(node, node.whole_gpus, request) == (0, 1)
    pair_only = synthetic([[0, 1]])
    big_only = synthetic([[0, 1, 2, 3, 4, 5, 6, 7]])
    tight = evaluate(pair_only, pair_only.whole_gpus, request)
    loose = evaluate(big_only, big_only.whole_gpus, request)
    assert tight.fits and loose.fits
    assert tight.score > loose.score


def test_real_machines_rank_a_pair_pod_onto_the_pcie_pairs(bodies: dict[str, dict[str, Any]]) -> None:
    request = PodRequest(gpus=2, one_island=True)
    scores = {m: evaluate(s, s.whole_gpus, request).score for m in bodies if (s := shape(bodies, m))}
    assert scores["pcie-4x-nvbridge"] > scores["dgx-h100"]


def test_bound_pods_are_packed_into_fragments_first(bodies: dict[str, dict[str, Any]]) -> None:
    pairs = shape(bodies, "pcie-4x-nvbridge")
    one = PodRequest(gpus=1)
    assert free_after(pairs, (one,)) == frozenset({1, 2, 3})
    assert free_after(pairs, (one, one)) == frozenset({2, 3})
    assert evaluate(pairs, free_after(pairs, (one, one)), PodRequest(gpus=2, one_island=True)).fits
    full = free_after(pairs, (one, one, one))
    verdict = evaluate(pairs, full, PodRequest(gpus=2))
    assert not verdict.fits and not verdict.unresolvable  # preemption could help: FailedNodes
    assert "3 GPUs in use by bound pods" in verdict.reason


def test_max_nic_distance(bodies: dict[str, dict[str, Any]]) -> None:
    a100 = shape(bodies, "dgx-a100")  # GPUs reach their NICs through two switches: PXB
    strict = evaluate(a100, a100.whole_gpus, PodRequest(gpus=2, max_nic_distance=LinkClass.PIX, rdma=True))
    assert not strict.fits and strict.unresolvable
    assert "at PIX or closer" in strict.reason and "best here: PXB" in strict.reason
    assert evaluate(a100, a100.whole_gpus, PodRequest(gpus=2, max_nic_distance=LinkClass.PXB, rdma=True)).fits
    h100 = shape(bodies, "dgx-h100")
    assert evaluate(h100, h100.whole_gpus, PodRequest(gpus=8, max_nic_distance=LinkClass.PIX, rdma=True)).fits


def test_numa_alignment(bodies: dict[str, dict[str, Any]]) -> None:
    request = PodRequest(gpus=4, numa_aligned=True)
    a100 = shape(bodies, "dgx-a100")  # NPS4: two GPUs per NUMA node
    verdict = evaluate(a100, a100.whole_gpus, request)
    assert not verdict.fits and "at most 2 GPUs on one NUMA node" in verdict.reason
    h100 = shape(bodies, "dgx-h100")
    chosen = evaluate(h100, h100.whole_gpus, request)
    numa = {g.index: g.numa for g in h100.gpus}
    assert chosen.fits and len({numa[i] for i in chosen.gpus}) == 1


def test_rdma_required(bodies: dict[str, dict[str, Any]]) -> None:
    request = PodRequest(gpus=1, rdma=True)
    plain = shape(bodies, "pcie-8x-2socket")
    verdict = evaluate(plain, plain.whole_gpus, request)
    assert not verdict.fits and verdict.reason.endswith("no usable RDMA NIC on this node")
    assert evaluate(plain, plain.whole_gpus, PodRequest(gpus=1)).fits


def test_mig_enabled_gpus_are_not_whole(bodies: dict[str, dict[str, Any]]) -> None:
    mig = shape(bodies, "a100-mig")
    verdict = evaluate(mig, mig.whole_gpus, PodRequest(gpus=3))
    assert not verdict.fits and "MIG-enabled" in verdict.reason
    two = evaluate(mig, mig.whole_gpus, PodRequest(gpus=2, one_island=True))
    assert two.fits and two.gpus == (2, 3)


def test_link_layer_is_a_preference() -> None:
    request = PodRequest(gpus=2, rdma=True, link_layer="Ethernet")
    ib = synthetic([[0, 1]], layer="InfiniBand")
    eth = synthetic([[0, 1]], layer="Ethernet")
    on_ib = evaluate(ib, ib.whole_gpus, request)
    on_eth = evaluate(eth, eth.whole_gpus, request)
    assert on_ib.fits and on_eth.fits
    assert on_eth.score == on_ib.score + 2


@pytest.mark.parametrize("gpus", [1, 2, 3, 4, 8])
def test_scores_stay_in_the_protocol_range(bodies: dict[str, dict[str, Any]], gpus: int) -> None:
    for machine in bodies:
        s = shape(bodies, machine)
        for request in (
            PodRequest(gpus=gpus),
            PodRequest(gpus=gpus, one_island=True, link_layer="InfiniBand"),
        ):
            verdict = evaluate(s, s.whole_gpus, request)
            assert 0 <= verdict.score <= 10
            if verdict.fits:
                assert len(verdict.gpus) == gpus and set(verdict.gpus) <= s.whole_gpus
