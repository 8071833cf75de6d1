"""Preferred GPU sets hold only GPUs an allocator hands out whole, and keep a set on one socket
before they count NVLinks (issue 23)."""

from __future__ import annotations

import pytest
from helpers import BUNDLES
from helpers import topology_of as topology

from nodetopo.model import Topology


def sets_by_size(t: Topology) -> dict[int, list[tuple[int, ...]]]:
    return {p.size: list(p.sets) for p in t.preferred_gpu_sets}


@pytest.mark.parametrize("bundle", sorted(p.name for p in BUNDLES.iterdir() if p.is_dir()))
def test_no_preferred_set_holds_a_mig_enabled_gpu(bundle: str) -> None:
    """The extender never allocates a MIG-enabled GPU whole: a set holding one is a set nobody gets."""
    t = topology(bundle)
    mig = {g.index for g in t.gpus if g.mig_enabled is True}
    whole = len(t.gpus) - len(mig)
    for p in t.preferred_gpu_sets:
        assert p.size <= whole
        for s in p.sets:
            assert not mig & set(s), f"size {p.size}: {s} holds MIG-enabled GPUs {sorted(mig & set(s))}"


def test_a100_mig_prefers_the_two_whole_gpus() -> None:
    t = topology("a100-mig")
    assert sorted(g.index for g in t.gpus if g.mig_enabled) == [0, 1]
    assert sets_by_size(t) == {1: [(2,), (3,)], 2: [(2, 3)]}


def test_hybrid_cube_pairs_stay_on_one_socket_before_counting_links() -> None:
    """DGX-1 (V100): every GPU has a same-socket NVLink partner, so no preferred pair crosses sockets,
    even where a cross-socket pair has two links (GPU0-GPU4, NV2) and the same-socket one has one."""
    t = topology("dgx1-v100")
    numa = {g.index: g.numa_node for g in t.gpus}
    assert sorted(set(numa.values())) == [0, 1]
    pairs = sets_by_size(t)[2]
    assert all(numa[a] == numa[b] for a, b in pairs), pairs
    # within a socket the double links still come first: 2-3 and 6-7 (NV2, one NIC switch each)
    assert pairs == [(2, 3), (6, 7), (0, 1), (4, 5)]
    assert sets_by_size(t)[4] == [(0, 1, 2, 3), (4, 5, 6, 7)]
