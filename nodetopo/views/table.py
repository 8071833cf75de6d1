"""The table as ``nodetopo discover`` prints it: ``render.render_table`` plus what it needs from
outside — the stream's width and style, PCI names from pci.ids, the GPU×GPU matrix on request."""

from __future__ import annotations

from typing import TextIO

from nodetopo.model import Facts, Topology
from nodetopo.render import render_table
from nodetopo.terminal import output_width, use_style
from nodetopo.views.pciids import read_pci_names


def table_text(
    topology: Topology, facts: Facts, node_name: str | None, stream: TextIO, *, matrix: bool = False
) -> str:
    """The table for ``stream``: laid out for its width when it is a terminal, plain when piped."""
    names = read_pci_names({(d.vendor, d.device) for d in topology.pci_devices})
    cells = None
    if matrix:
        from nodetopo.views.matrix import gpu_matrix

        cells = gpu_matrix(facts, [g.index for g in topology.gpus])
    return render_table(
        topology,
        node_name,
        width=output_width(stream),
        style=use_style(stream),
        pci_names=names,
        gpu_matrix=cells,
    )
