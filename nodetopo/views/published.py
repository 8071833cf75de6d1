"""The GPU×GPU matrix from a published NodeTopology alone (``kubectl ntopo matrix``).

An object with ``status.gpuLinks`` gives every cell, exactly as ``nodetopo discover --matrix`` on the
node (``views.matrix.link_cells``). An object without it (a node of more than 64 GPUs, an older
agent) keeps no per-pair links, so a cell is given only where the object implies it, and a pair it
does not place is left out (the table prints ``-``), never guessed:

* inside an NVSwitch island: ``NV#``, # the island's links per pair (what ``topo -m`` shows there);
* inside a directly wired island of two GPUs: ``NV#`` (its one pair is its minimum);
* inside a fully connected, directly wired island of more: ``NV#+`` (at least # links; the exact
  count per pair is in ``nodetopo discover --matrix`` on the node);
* across islands or without NVLink: ``SYS`` when the GPUs' NUMA nodes differ, ``NODE`` when they
  share one but not a PCIe root complex. Pairs under one root (PIX, PXB or PHB) are not placed.
"""

from __future__ import annotations

from collections.abc import Mapping

from nodetopo.model import Topology
from nodetopo.views.matrix import link_cells


def published_gpu_matrix(topology: Topology) -> Mapping[tuple[int, int], str]:
    """``(a, b)`` → cell text for the ordered pairs of distinct GPUs the object places."""
    if topology.gpu_links is not None:
        return link_cells(topology.gpu_links)
    cells: dict[tuple[int, int], str] = {}
    in_island: set[tuple[int, int]] = set()
    for island in topology.nvlink_islands:
        exact = island.nvswitch or len(island.gpus) == 2
        for a in island.gpus:
            for b in island.gpus:
                if a == b:
                    continue
                in_island.add((a, b))
                if exact:
                    cells[(a, b)] = f"NV{island.links_per_pair}"
                elif island.fully_connected:
                    cells[(a, b)] = f"NV{island.links_per_pair}+"
    for ga in topology.gpus:
        for gb in topology.gpus:
            if ga.index == gb.index or (ga.index, gb.index) in in_island:
                continue
            if ga.numa_node is None or gb.numa_node is None:
                continue
            if ga.numa_node != gb.numa_node:
                cells[(ga.index, gb.index)] = "SYS"
            elif ga.pcie_root is not None and gb.pcie_root is not None and ga.pcie_root != gb.pcie_root:
                cells[(ga.index, gb.index)] = "NODE"
    return cells
