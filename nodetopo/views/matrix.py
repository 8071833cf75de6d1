"""The GPU×GPU connection matrix, as ``nvidia-smi topo -m`` prints it (``discover --matrix`` and
``kubectl ntopo matrix``).

A cell is ``NV#`` (the GPUs are joined by # NVLinks; inside an NVSwitch domain, # is the GPU's link
count to the switches, which is what ``topo -m`` shows too) or the PCIe class of the path between
them (``PIX``/``PXB``/``PHB``/``NODE``/``SYS``), with the same precedence as the derivations: NVML
common ancestor > ``topo -m`` > the sysfs PCIe tree. A pair no source can place is absent.

The cells come from ``Topology.gpu_links`` (``derive.gpu_links``, published as ``status.gpuLinks``),
so the node's own table and the published object show the same matrix. A node of more than
``MAX_LINKED_GPUS`` GPUs has no links in its topology; ``discover --matrix`` then derives them from
the facts with the same function (one more graph join, only when asked for).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from nodetopo.model import Facts, GpuLink, Topology


def link_cells(links: Iterable[GpuLink]) -> dict[tuple[int, int], str]:
    """``(a, b)`` and ``(b, a)`` → cell text, for every link that has one."""
    cells: dict[tuple[int, int], str] = {}
    for link in links:
        if link.nvlinks:
            cells[(link.a, link.b)] = cells[(link.b, link.a)] = f"NV{link.nvlinks}"
        elif link.pcie is not None:
            cells[(link.a, link.b)] = cells[(link.b, link.a)] = link.pcie.name
    return cells


def gpu_matrix(facts: Facts, gpus: Sequence[int]) -> Mapping[tuple[int, int], str]:
    """``(a, b)`` → cell text for every ordered pair of distinct GPUs in ``gpus`` that is known,
    derived from ``facts`` (for any number of GPUs)."""
    from nodetopo.topology.derive import gpu_gpu_classes, pcie_index
    from nodetopo.topology.graph import build_graph
    from nodetopo.topology.nvlink import gpu_links, gpu_nvlinks, nvlink_islands

    g, _ = build_graph(facts)
    wanted = sorted(set(gpus))
    classes = gpu_gpu_classes(g, pcie_index(g), wanted)
    return link_cells(gpu_links(wanted, nvlink_islands(g), gpu_nvlinks(g), classes))


def node_matrix(topology: Topology, facts: Facts) -> Mapping[tuple[int, int], str]:
    """The matrix of a node discovered here: its topology's links, or (a node of more GPUs than
    links are derived for) the same derivation over ``facts``."""
    if topology.gpu_links is not None:
        return link_cells(topology.gpu_links)
    return gpu_matrix(facts, [g.index for g in topology.gpus])
