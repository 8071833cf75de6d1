"""The table as ``nodetopo discover`` prints it: ``render.render_table`` plus what it needs from
outside — the stream's width and style, PCI names from pci.ids, the GPU×GPU matrix on request."""

from __future__ import annotations

from typing import TextIO

from nodetopo.command.terminal import output_width, use_style
from nodetopo.model import Facts, Topology
from nodetopo.views.pciids import read_pci_names
from nodetopo.views.render import render_table


def table_text(
    topology: Topology,
    facts: Facts,
    node_name: str | None,
    stream: TextIO,
    *,
    matrix: bool = False,
    bundle: str | None = None,
) -> str:
    """The table for ``stream``: laid out for its width when it is a terminal, plain when piped.
    ``bundle``: the bundle read, whose manifest says where and when it was captured."""
    origin = None
    if bundle is not None:
        from nodetopo.bundle import read_manifest

        manifest = read_manifest(bundle)
        origin = f"bundle {bundle}: {manifest.describe()}" if manifest else f"bundle {bundle} (no manifest)"
    names = read_pci_names({(d.vendor, d.device) for d in topology.pci_devices})
    cells = None
    if matrix:
        from nodetopo.views.matrix import node_matrix

        cells = node_matrix(topology, facts)
    return render_table(
        topology,
        node_name,
        width=output_width(stream),
        style=use_style(stream),
        pci_names=names,
        gpu_matrix=cells,
        origin=origin,
    )
