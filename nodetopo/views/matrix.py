"""The GPU×GPU connection matrix, as ``nvidia-smi topo -m`` prints it (``discover --matrix``).

A cell is ``NV#`` (the GPUs are joined by # NVLinks; inside an NVSwitch domain, # is the GPU's link
count to the switches, which is what ``topo -m`` shows too) or the PCIe class of the path between
them (``PIX``/``PXB``/``PHB``/``NODE``/``SYS``), with the same precedence as the derivations: NVML
common ancestor > ``topo -m`` > the sysfs PCIe tree. A pair no source can place is absent.

The graph is rebuilt from the scan's facts (the topology keeps only per-island minimums), so this
costs one more join and is computed only when asked for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from nodetopo.derive import gpu_gpu_classes, nvlink_islands, pcie_index
from nodetopo.graph import build_graph, nvlink_edges
from nodetopo.model import Facts


def gpu_matrix(facts: Facts, gpus: Sequence[int]) -> Mapping[tuple[int, int], str]:
    """``(a, b)`` → cell text for every ordered pair of distinct GPUs in ``gpus`` that is known."""
    g, _ = build_graph(facts)
    wanted = set(gpus)
    cells: dict[tuple[int, int], str] = {}
    for (a, b), cls in gpu_gpu_classes(g, pcie_index(g), sorted(wanted)).items():
        cells[(a, b)] = cells[(b, a)] = cls.name
    for island in nvlink_islands(g):
        if not island.nvswitch:
            continue
        for a in island.gpus:
            for b in island.gpus:
                if a != b and a in wanted and b in wanted:
                    cells[(a, b)] = f"NV{island.links_per_pair}"
    for x, y, links in nvlink_edges(g):
        if x.startswith("gpu:") and y.startswith("gpu:"):
            a, b = int(x.split(":", 1)[1]), int(y.split(":", 1)[1])
            if a in wanted and b in wanted:
                cells[(a, b)] = cells[(b, a)] = f"NV{links}"
    return cells
