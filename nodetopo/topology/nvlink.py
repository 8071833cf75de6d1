"""NVLink: the islands (GPUs that reach each other over NVLink), the NVLink count per GPU pair and the
published GPU pair links, derived from the graph. Pure."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING

from nodetopo.model import (
    GpuLink,
    LinkClass,
    NvlinkIsland,
)
from nodetopo.topology.graph import (
    gpu_id,
    nvlink_edges,
)

if TYPE_CHECKING:
    import networkx as nx

#: The most NVLinks any single GPU has (H100/H200/B200: 18). A uniform complete NV mesh whose
#: per-GPU total (links per pair × peers) exceeds this cannot be direct wiring: it is an NVSwitch.
MAX_NVLINKS_PER_GPU = 18

# --------------------------------------------------------------------------------------------
# NVLink
# --------------------------------------------------------------------------------------------


def nvlink_islands(g: nx.Graph) -> tuple[NvlinkIsland, ...]:
    """Connected components of the NVLink subgraph (GPUs and NVSwitches), as islands of ≥ 2 GPUs.

    A component that goes through NVSwitch nodes (NVML reports SWITCH remote devices) is one fully
    connected island. From ``topo -m`` alone the switches are invisible; a complete component where
    every pair shows the same ``NV#`` is recognised as switched when that cannot be direct wiring
    (per-GPU total ``NV# × peers`` above ``MAX_NVLINKS_PER_GPU``, or above the GPU's active link
    count from ``nvlink -s``/NVML), or when sysfs shows NVSwitch functions. A uniform full mesh
    that fits in the GPU's links (4× A100 NV4, 4× GH200 NV6) is direct: fully connected, no switch.
    """
    import networkx as nx  # imported where a graph is built (see build_graph)

    sub = nx.Graph()
    for a, b, links in nvlink_edges(g):
        sub.add_edge(a, b, links=links)
    sysfs_switches = any(d.get("kind") == "nvswitch" and d.get("address") for _, d in g.nodes(data=True))
    islands: list[NvlinkIsland] = []
    components = []
    for component in nx.connected_components(sub):
        gpus = sorted(int(n.split(":")[1]) for n in component if n.startswith("gpu:"))
        if len(gpus) >= 2:
            components.append((gpus, component))
    for island_id, (gpus, component) in enumerate(sorted(components, key=lambda c: c[0])):
        switched = any(n.startswith("nvswitch:") for n in component)
        if switched:
            counts = [
                sum(
                    sub.edges[gpu_id(i), s]["links"]
                    for s in sub.neighbors(gpu_id(i))
                    if s.startswith("nvswitch:")
                )
                for i in gpus
            ]
            complete = nvswitch = True
        else:
            counts = [
                sub.edges[gpu_id(a), gpu_id(b)]["links"]
                for a, b in itertools.combinations(gpus, 2)
                if sub.has_edge(gpu_id(a), gpu_id(b))
            ]
            complete = len(counts) == len(gpus) * (len(gpus) - 1) // 2
            nvswitch = False
            if complete and len(set(counts)) == 1 and len(gpus) > 2:
                total = counts[0] * (len(gpus) - 1)
                known_totals = [
                    t for i in gpus if (t := g.nodes[gpu_id(i)]["record"].total_nvlinks) is not None and t > 0
                ]
                if known_totals:
                    nvswitch = total > max(known_totals)
                else:
                    nvswitch = total > MAX_NVLINKS_PER_GPU or sysfs_switches
        islands.append(
            NvlinkIsland(
                id=island_id,
                gpus=tuple(gpus),
                links_per_pair=min(counts),
                fully_connected=complete,
                nvswitch=nvswitch,
            )
        )
    return tuple(islands)


def gpu_nvlinks(g: nx.Graph) -> dict[tuple[int, int], int]:
    """The direct NVLink count between two GPUs ``(a, b)``, a < b, for every pair that has one."""
    counts: dict[tuple[int, int], int] = {}
    for a, b, links in nvlink_edges(g):
        if a.startswith("gpu:") and b.startswith("gpu:"):
            ia, ib = int(a[4:]), int(b[4:])
            counts[(min(ia, ib), max(ia, ib))] = links
    return counts


def gpu_links(
    gpus: Sequence[int],
    islands: Sequence[NvlinkIsland],
    nvlinks: dict[tuple[int, int], int],
    pcie: dict[tuple[int, int], LinkClass],
) -> tuple[GpuLink, ...]:
    """Every pair of ``gpus`` (a < b) that ``topo -m`` would give a cell: its direct NVLink count
    (``nvlinks``), else the links of the NVSwitch island both are in, and its PCIe class (``pcie``)."""
    switched = {i: island for island in islands if island.nvswitch for i in island.gpus}
    links: list[GpuLink] = []
    for a, b in itertools.combinations(sorted(gpus), 2):
        count = nvlinks.get((a, b))
        if not count and a in switched and switched.get(b) is switched[a]:
            count = switched[a].links_per_pair
        cls = pcie.get((a, b))
        if count or cls is not None:
            links.append(GpuLink(a=a, b=b, nvlinks=count or None, pcie=cls))
    return tuple(links)
