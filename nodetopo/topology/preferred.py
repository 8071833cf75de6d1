"""Preferred GPU sets: for each set size, a partition of the allocatable GPUs into sets, best first
(see ``preferred_gpu_sets``). Pure."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterable, Sequence
from math import comb
from typing import TYPE_CHECKING

from nodetopo.model import (
    Gpu,
    LinkClass,
    NvlinkIsland,
    PreferredGpuSets,
)

if TYPE_CHECKING:
    pass

#: Above this many scored candidates (k-subsets × greedy steps), preferred sets are built
#: hierarchically instead of by exhaustive search (see ``preferred_gpu_sets``).
EXHAUSTIVE_LIMIT = 8000


# --------------------------------------------------------------------------------------------
# Preferred GPU sets
# --------------------------------------------------------------------------------------------


class _PairValues(dict[tuple[int, int], int]):
    """A value per GPU pair, computed by ``compute(a, b)`` the first time the pair is read."""

    def __init__(self, compute: Callable[[int, int], int]) -> None:
        super().__init__()
        self.compute = compute

    def __missing__(self, pair: tuple[int, int]) -> int:
        value = self[pair] = self.compute(*pair)
        return value


def preferred_sizes(gpu_count: int, island_sizes: Iterable[int]) -> tuple[int, ...]:
    """The set sizes worth precomputing: every size up to 8, then powers of two, island sizes and
    the whole node (allocators ask for 1, 2, 4, 8 GPUs or an island; a 72-GPU node needs no 37-sets)."""
    sizes = set(range(1, min(gpu_count, 8) + 1))
    sizes |= {1 << p for p in range(gpu_count.bit_length()) if 1 << p <= gpu_count}
    sizes |= set(island_sizes)
    sizes.add(gpu_count)
    return tuple(sorted(k for k in sizes if 1 <= k <= gpu_count))


def preferred_gpu_sets(
    gpus: Sequence[Gpu],
    islands: Sequence[NvlinkIsland],
    nvlinks: dict[tuple[int, int], int],
    pcie: dict[tuple[int, int], LinkClass],
) -> tuple[PreferredGpuSets, ...]:
    """For each size k in ``preferred_sizes``, a partition of the allocatable GPUs into k-sets, best first.

    Only GPUs an allocator hands out whole take part: a MIG-enabled GPU (``mig_enabled`` True) is
    shared out as MIG devices, never whole (the extender's rule too), so no set holds one; an
    unknown MIG mode counts as whole, as the extender counts it. Each set is scored (lower is
    better) by, in order:

    1. the number of NVLink islands it spans (a GPU outside every island counts as its own);
    2. whether every pair has a direct NVLink (or a switch): a pair without one talks over PCIe;
    3. the number of NUMA nodes spanned: a set across sockets puts the pod's CPUs, memory and
       GPUDirect traffic across the SMP interconnect for every GPU, and a kubelet Topology Manager
       with ``single-numa-node`` cannot align it at all;
    4. the fewest links on a pair (more is better: between GPUs already linked directly this is a
       difference in peer bandwidth, so it ranks below the socket);
    5. the number of distinct nearest-NIC groups (GPUs whose nearest NICs are the same share a PCIe
       switch / NIC: GPUDirect RDMA traffic stays local);
    6. the worst PCIe class between two of its GPUs;
    7. the GPU indices (so the result is deterministic).

    When that costs at most ``EXHAUSTIVE_LIMIT`` scored candidates (k-subsets × steps: every size
    on an 8- or 16-GPU node), the partition is built greedily and exhaustively: the best-scoring
    k-set of the GPUs not yet used, then the best of the rest, until fewer than k remain. Beyond
    that (NVL72, very large nodes) the GPUs are ordered by (island, NUMA node, nearest NICs,
    index), cut into consecutive k-sets, and
    the sets sorted by score: linear in the number of GPUs.
    """
    by_index = {gpu.index: gpu for gpu in gpus if gpu.mig_enabled is not True}
    island_of = {i: island.id for island in islands for i in island.gpus if i in by_index}
    switched = {island.id for island in islands if island.nvswitch}
    nic_group = {i: g.nearest_nics for i, g in by_index.items()}
    numa_of = {i: g.numa_affinity or frozenset({-1}) for i, g in by_index.items()}
    #: links between two GPUs: the direct count, or "plenty" inside an NVSwitch island
    switch_links = 1_000

    def pair_links(a: int, b: int) -> int:
        direct = nvlinks.get((a, b), 0)
        if direct:
            return direct
        island = island_of.get(a)
        return switch_links if island is not None and island in switched and island == island_of.get(b) else 0

    # what score reads of a pair, each computed once per call of this function: the exhaustive
    # search scores every k-subset, so one pair is read by many candidates
    class_of = _PairValues(lambda a, b: int(pcie.get((a, b), LinkClass.PIX)))
    links_of = _PairValues(pair_links)

    # and what it reads of one GPU, in forms a candidate combines fast: its island (a GPU outside
    # every island is its own), its nearest-NIC group (None: none known) and its NUMA nodes as bits
    island_key = {i: island_of.get(i, -1 - i) for i in by_index}
    nic_key = {i: group or None for i, group in nic_group.items()}
    numa_bit = {n: 1 << b for b, n in enumerate(sorted({n for nodes in numa_of.values() for n in nodes}))}
    numa_mask = {i: sum(numa_bit[n] for n in nodes) for i, nodes in numa_of.items()}

    @functools.cache  # the greedy steps score the remaining GPUs' subsets again
    def score(members: tuple[int, ...]) -> tuple[object, ...]:
        spanned = set(map(island_key.__getitem__, members))
        pairs = tuple(itertools.combinations(members, 2))
        worst = max(map(class_of.__getitem__, pairs), default=int(LinkClass.PIX))
        if len(spanned) == 1 and next(iter(spanned)) in switched:
            all_linked, min_links = 0, -switch_links  # one NVSwitch domain: every pair alike
        else:
            links = list(map(links_of.__getitem__, pairs))
            all_linked = 0 if all(links) else 1
            min_links = -min(links) if links else 0
        nic_groups = set(map(nic_key.__getitem__, members))
        nic_groups.discard(None)
        numa = 0
        for i in members:
            numa |= numa_mask[i]
        return (len(spanned), all_linked, numa.bit_count(), min_links, len(nic_groups), worst, members)

    order = sorted(
        by_index,
        key=lambda i: (island_of.get(i, 1_000_000 + i), min(numa_of[i]), nic_group[i], i),
    )
    result: list[PreferredGpuSets] = []
    island_sizes = [sum(1 for i in island.gpus if i in by_index) for island in islands]
    for k in preferred_sizes(len(order), island_sizes):
        sets: list[tuple[int, ...]]
        if k == 1:
            sets = sorted(((i,) for i in order), key=score)  # what the greedy search would pick, in O(N)
        elif comb(len(order), k) * (len(order) // k) <= EXHAUSTIVE_LIMIT:
            remaining = sorted(order)
            sets = []
            while len(remaining) >= k:
                best = min(itertools.combinations(remaining, k), key=score)
                sets.append(best)
                chosen = set(best)
                remaining = [i for i in remaining if i not in chosen]
        else:
            chunks = (tuple(sorted(order[s : s + k])) for s in range(0, len(order) - k + 1, k))
            sets = sorted(chunks, key=score)
        result.append(PreferredGpuSets(size=k, sets=tuple(sets)))
    return tuple(result)
