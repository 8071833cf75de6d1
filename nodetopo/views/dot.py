"""A picture of the node, drawn as lstopo draws one: ``nodetopo discover -o dot`` / ``-o svg``.

``to_dot`` (pure) writes a Graphviz graph:

* the machine holds one box per NUMA node (its CPUs and memory), each holding its PCIe root
  complexes (host bridges), each holding its PCIe tree: the switches (a bridge where the tree
  branches; chains of single-child bridges are drawn as one edge) down to the GPUs, NICs, NVSwitches
  and NVMe drives; other functions are counted in the root's label;
* GPUs are filled with the colour of their NVLink island; an NVSwitch island is drawn as one hub
  joined to each of its GPUs, a directly wired island as NVLink edges between the GPU pairs (``NV#``,
  from ``views.matrix`` when given, else the island's links per pair);
* a dashed edge joins each GPU to its nearest NICs, labelled with the PCIe class (``PIX`` ...);
* GPUs and NICs that no PCIe tree places (a bundle holding only ``topo -m``) sit directly in their
  NUMA node's box, or in the machine's when their NUMA node is unknown;
* a degraded link (``Topology.health``) is drawn red with its reason: the PCIe edge into the device
  (or the chain through the bridge) whose link is degraded, a GPU whose NVLinks are degraded joined
  to its NVSwitch fabric by a red dashed edge (it is out of the island), a GPU's red dashed edge to
  each nearest NIC whose path is degraded, and the GPU or NIC whose own link is degraded outlined red
  with its reasons.

``render_svg`` runs Graphviz's ``dot`` (``dot -Tsvg``): the one part that needs a program outside
Python; without it the error says how to install it, and ``-o dot`` still works.
"""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping, Sequence

from nodetopo.command.terminal import strip_control
from nodetopo.errors import NodetopoError
from nodetopo.model import (
    EdgeHealth,
    EdgeKind,
    Facts,
    Gpu,
    LinkClass,
    Nic,
    PciAddress,
    PciDevice,
    Topology,
    format_cpulist,
)
from nodetopo.resource.body import islands_text
from nodetopo.views.render import natural_key

#: island fill colours (a colour-blind-safe qualitative palette), reused cyclically
ISLAND_COLOURS = ("#88CCEE", "#DDCC77", "#CC6677", "#117733", "#AA4499", "#44AA99", "#999933", "#882255")
NO_ISLAND_COLOUR = "#E8E8E8"
NIC_COLOUR = "#C8E6C9"
#: a degraded link, and the outline of a device whose own link is degraded
DEGRADED_COLOUR = "#D32F2F"
#: seconds ``dot`` may take (a 1,000-GPU picture takes a few)
DOT_TIMEOUT_S = 120.0

_INSTALL = (
    "install Graphviz (Debian/Ubuntu: apt-get install graphviz; Fedora/RHEL: dnf install graphviz; "
    "macOS: brew install graphviz), or use -o dot and render the graph elsewhere"
)


class GraphvizError(NodetopoError):
    """Graphviz's ``dot`` is missing or failed."""


def _q(text: object) -> str:
    """A DOT quoted string: no control characters, backslashes and quotes escaped."""
    cleaned = strip_control(str(text)).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{cleaned}"'


def _label(*lines: object) -> str:
    """A multi-line DOT label (each line cleaned, joined with DOT's centred line break)."""
    parts = [strip_control(str(line)).replace("\\", "\\\\").replace('"', '\\"') for line in lines if line]
    return '"' + "\\n".join(parts) + '"'


def _id(kind: str, key: object) -> str:
    return _q(f"{kind}:{key}")


def _endpoint_kind(
    d: PciDevice, gpus: Mapping[PciAddress, Gpu], nics: Mapping[PciAddress, list[Nic]]
) -> str | None:
    if d.address in gpus:
        return "gpu"
    if d.address in nics:
        return "nic"
    if d.is_nvswitch:
        return "nvswitch"
    if d.class_code >> 8 == 0x0108:
        return "nvme"
    if d.is_nvidia_gpu:
        return "gpu-unseen"  # a GPU function the driver did not report
    if d.is_network:
        return "net"
    return None


def to_dot(
    topology: Topology,
    node_name: str | None = None,
    *,
    pci_names: Mapping[tuple[int, int], str] | None = None,
    gpu_matrix: Mapping[tuple[int, int], str] | None = None,
) -> str:
    """The node as a Graphviz ``digraph`` (text). Deterministic: the same topology, the same bytes."""
    names = pci_names or {}
    return "\n".join(_lines(topology, node_name, names, gpu_matrix)) + "\n"


def _lines(
    topology: Topology,
    node_name: str | None,
    names: Mapping[tuple[int, int], str],
    matrix: Mapping[tuple[int, int], str] | None,
) -> Iterator[str]:
    gpus_at = {g.address: g for g in topology.gpus if g.address is not None}
    nics_at: dict[PciAddress, list[Nic]] = defaultdict(list)
    for n in topology.nics:
        if n.address is not None:
            nics_at[n.address].append(n)
    island_colour = {
        i.id: ISLAND_COLOURS[n % len(ISLAND_COLOURS)] for n, i in enumerate(topology.nvlink_islands)
    }
    degraded = topology.health.degraded
    pcie_degraded = {e.address: e for e in degraded if e.kind is EdgeKind.PCIE and e.address is not None}
    own: dict[tuple[str, object], list[EdgeHealth]] = defaultdict(list)
    for e in degraded:
        if e.gpu is not None:
            own[("gpu", e.gpu)].append(e)
        elif e.nic is not None:
            own[("nic", e.nic)].append(e)

    # Which endpoints to draw, by root complex; the NUMA node of each root.
    by_root: dict[str, list[tuple[PciDevice, str]]] = defaultdict(list)
    others: Counter[str] = Counter()
    votes: dict[str, Counter[int]] = defaultdict(Counter)
    for d in topology.pci_devices:
        root = d.root or "(unknown root)"
        if d.numa_node is not None:
            votes[root][d.numa_node] += 1
        if d.is_bridge:
            continue
        kind = _endpoint_kind(d, gpus_at, nics_at)
        if kind is None:
            others[root] += 1
        else:
            by_root[root].append((d, kind))
    for g in topology.gpus:
        if g.pcie_root and g.numa_node is not None:
            votes[g.pcie_root][g.numa_node] += 1
    root_numa = {r: c.most_common(1)[0][0] for r, c in votes.items() if c}
    placed_gpus = {
        g.index for g in topology.gpus if g.address in {d.address for ds in by_root.values() for d, _ in ds}
    }
    placed_nics = {
        n.name for n in topology.nics if n.address in {d.address for ds in by_root.values() for d, _ in ds}
    }

    title = [
        f"Node {node_name}" if node_name else "This node",
        f"{len(topology.gpus)} GPUs, NVLink islands {islands_text(topology) or 'none'}, "
        f"{sum(1 for n in topology.nics if n.rdma)} RDMA NICs"
        + (f", {len(degraded)} degraded link{'s' if len(degraded) != 1 else ''}" if degraded else ""),
    ]
    yield "digraph nodetopo {"
    yield "  graph [rankdir=LR, newrank=true, fontname=Helvetica, fontsize=12, nodesep=0.25,"
    yield f"         ranksep=0.35, labelloc=t, label={_label(*title)}];"
    yield '  node [fontname=Helvetica, fontsize=10, shape=box, style="rounded,filled", fillcolor=white];'
    yield '  edge [arrowhead=none, color="#666666"];'

    numa_ids = [n.id for n in topology.numa_nodes]
    numa_of_root: dict[int | None, list[str]] = defaultdict(list)
    for root in sorted(by_root):
        numa = root_numa.get(root)
        numa_of_root[numa if numa in numa_ids else None].append(root)
    loose_gpus: dict[int | None, list[Gpu]] = defaultdict(list)
    for g in topology.gpus:
        if g.index not in placed_gpus:
            loose_gpus[g.numa_node if g.numa_node in numa_ids else None].append(g)
    loose_nics: dict[int | None, list[Nic]] = defaultdict(list)
    for n in sorted(topology.nics, key=lambda n: natural_key(n.name)):
        if n.name not in placed_nics:
            loose_nics[n.numa_node if n.numa_node in numa_ids else None].append(n)

    def gpu_node(g: Gpu, indent: str) -> str:
        colour = island_colour.get(g.island, NO_ISLAND_COLOUR) if g.island is not None else NO_ISLAND_COLOUR
        island = f"island {g.island}" if g.island is not None else "no NVLink peer"
        lines = [f"GPU{g.index}", g.model, str(g.address) if g.address else None, island]
        return f"{indent}{_id('gpu', g.index)} [label={_label(*lines, *_said(own, ('gpu', g.index)))}, " + (
            f"fillcolor={_q(colour)}, {_outline(own, ('gpu', g.index), '1.5')}];"
        )

    def nic_node(n: Nic, indent: str) -> str:
        rate = f"{n.rate_gbps:g} Gb/s" if n.rate_gbps else None
        what = ", ".join(x for x in (n.link_layer, rate) if x)
        lines = [n.name + (f" ({n.netdev})" if n.netdev else ""), what, str(n.address) if n.address else None]
        fill = NIC_COLOUR if n.rdma else "white"
        label = _label(*lines, *_said(own, ("nic", n.name)))
        outline = f", {_outline(own, ('nic', n.name), '')}" if own.get(("nic", n.name)) else ""
        return f"{indent}{_id('nic', n.name)} [label={label}, fillcolor={_q(fill)}, shape=box{outline}];"

    def root_cluster(root: str, indent: str) -> Iterator[str]:
        cluster = _q(f"cluster_root_{root}")
        extra = f"+{others[root]} other functions" if others[root] else None
        yield f"{indent}subgraph {cluster} {{"
        yield f'{indent}  label={_label(f"PCIe root {root}", extra)}; style="rounded"; color="#999999";'
        host = _id("root", root)
        yield f'{indent}  {host} [label={_label("host bridge")}, shape=plaintext, style="", fontsize=9];'
        endpoints = by_root[root]
        # switches: bridges where the paths of two or more drawn endpoints part
        children: dict[PciAddress | None, set[object]] = defaultdict(set)
        for d, _ in endpoints:
            path: list[PciAddress | None] = [None, *d.upstream]
            for above, below in zip(path, [*path[1:], d.address], strict=True):
                children[above].add(below)
        switches = {b for b, kids in children.items() if b is not None and len(kids) >= 2}
        for b in sorted(switches, key=str):
            label = _label("PCIe switch", str(b))
            style = 'shape=box, style="", fontsize=8, height=0.2'
            yield f"{indent}  {_id('bridge', b)} [label={label}, {style}];"
        edges: set[tuple[str, str]] = set()
        red: dict[tuple[str, str], EdgeHealth] = {}  # a drawn edge -> the degraded link on it

        def on(segment: list[PciAddress], edge: tuple[str, str]) -> None:
            for address in segment:
                if address in pcie_degraded:
                    red.setdefault(edge, pcie_degraded[address])

        for d, kind in endpoints:
            parent: str = host
            segment: list[PciAddress] = []
            for bridge in d.upstream:
                segment.append(bridge)
                if bridge in switches:
                    edges.add((parent, _id("bridge", bridge)))
                    on(segment, (parent, _id("bridge", bridge)))
                    parent, segment = _id("bridge", bridge), []
            if kind == "gpu":
                node = _id("gpu", gpus_at[d.address].index)
                yield gpu_node(gpus_at[d.address], indent + "  ")
            elif kind == "nic":
                first = sorted(nics_at[d.address], key=lambda n: natural_key(n.name))
                node = _id("nic", first[0].name)
                for n in first:
                    yield nic_node(n, indent + "  ")
                for n in first[1:]:
                    edges.add((parent, _id("nic", n.name)))
            else:
                node = _id("pci", d.address)
                label = {
                    "nvswitch": "NVSwitch",
                    "nvme": "NVMe",
                    "gpu-unseen": "GPU (no driver)",
                    "net": "Network",
                }[kind]
                name = names.get((d.vendor, d.device))
                yield f"{indent}  {node} [label={_label(label, name, str(d.address))}, fontsize=8];"
            edges.add((parent, node))
            on([*segment, d.address], (parent, node))
        for tail, head in sorted(edges):
            e = red.get((tail, head))
            yield f"{indent}  {tail} -> {head}" + (f" [{_red(_reason(e))}, penwidth=2.5]" if e else "") + ";"
        yield f"{indent}}}"

    def numa_cluster(numa: int | None, indent: str) -> Iterator[str]:
        node = next((n for n in topology.numa_nodes if n.id == numa), None)
        if node is not None:
            memory = f"{node.memory_bytes / 2**30:.0f} GiB" if node.memory_bytes else None
            cpus = format_cpulist(node.cpus)
            label = _label(f"NUMA node {numa}", f"CPUs {cpus}" if cpus else None, memory)
        else:
            label = _label("NUMA node unknown")
        yield f"{indent}subgraph {_q(f'cluster_numa_{numa}')} {{"
        yield f'{indent}  label={label}; style="rounded,filled"; fillcolor="#F7F7F7"; color="#555555";'
        for root in numa_of_root.get(numa, []):
            yield from root_cluster(root, indent + "  ")
        for g in loose_gpus.get(numa, []):
            yield gpu_node(g, indent + "  ")
        for n in loose_nics.get(numa, []):
            yield nic_node(n, indent + "  ")
        if node is not None and not (numa_of_root.get(numa) or loose_gpus.get(numa) or loose_nics.get(numa)):
            yield f'{indent}  {_id("numa", numa)} [label="", shape=point, style=invis];'
        yield f"{indent}}}"

    for numa in numa_ids:
        yield from numa_cluster(numa, "  ")
    if numa_of_root.get(None) or loose_gpus.get(None) or loose_nics.get(None):
        yield from numa_cluster(None, "  ")

    # NVLink: a hub per NVSwitch island, edges for directly wired islands.
    for island in topology.nvlink_islands:
        colour = _q(island_colour[island.id])
        if island.nvswitch:
            hub = _id("nvlink", island.id)
            label = _label(
                f"NVSwitch fabric (island {island.id})",
                f"{len(island.gpus)} GPUs, {island.links_per_pair} NVLinks each",
            )
            yield f'  {hub} [label={label}, shape=hexagon, style="filled", fillcolor={colour}];'
            for i in island.gpus:
                yield f"  {_id('gpu', i)} -> {hub} [color={colour}, penwidth=3];"
            continue
        members = list(island.gpus)
        for x, a in enumerate(members):
            for b in members[x + 1 :]:
                cell = matrix.get((a, b)) if matrix is not None else None
                if matrix is not None and (cell is None or not cell.startswith("NV")):
                    continue  # the matrix knows this pair is not NVLinked
                text = cell if cell else f"NV{island.links_per_pair}"
                yield (
                    f"  {_id('gpu', a)} -> {_id('gpu', b)} [color={colour}, penwidth=3, label={_q(text)},"
                    f" fontsize=8];"
                )

    # a GPU whose NVLinks are degraded, out of its island: a red dashed edge to its NVSwitch fabric
    hubs = [i for i in topology.nvlink_islands if i.nvswitch]
    for e in degraded:
        if e.kind is EdgeKind.NVLINK and e.gpu is not None and e.peer == "NVSwitch" and len(hubs) == 1:
            hub = _id("nvlink", hubs[0].id)
            yield f"  {_id('gpu', e.gpu)} -> {hub} [style=dashed, {_red(_reason(e))}, penwidth=2];"

    # GPU -> nearest NICs
    nic_names = {n.name for n in topology.nics}
    for g in topology.gpus:
        if g.nic_distance is None:
            continue
        for name in sorted(g.nearest_nics, key=natural_key):
            if name in nic_names:
                yield (
                    f'  {_id("gpu", g.index)} -> {_id("nic", name)} [style=dashed, color="#2E7D32",'
                    f' label={_q(g.nic_distance.name)}, fontsize=8, fontcolor="#2E7D32"];'
                )
    # GPU -> the NICs at its best class whose path is degraded (they no longer count as nearest)
    best_class: dict[int, LinkClass] = {}
    for dist in topology.gpu_nic_distances:
        best_class[dist.gpu] = min(best_class.get(dist.gpu, dist.distance), dist.distance)
    for dist in topology.gpu_nic_distances:
        if dist.healthy or dist.nic not in nic_names or dist.distance != best_class[dist.gpu]:
            continue
        why = _why_path(own, dist.gpu, dist.nic, degraded)
        text = f"{dist.distance.name}, degraded: {_reason(why)}" if why else f"{dist.distance.name}, degraded"
        yield f"  {_id('gpu', dist.gpu)} -> {_id('nic', dist.nic)} [style=dashed, penwidth=2, {_red(text)}];"
    legend = _label(
        "GPU fill: NVLink island; thick edges: NVLink; dashed: GPU -> nearest NIC (PCIe class); "
        "green NIC: RDMA" + ("; red: a degraded link, with its reason" if degraded else "")
    )
    yield f'  {_q("legend")} [label={legend}, shape=plaintext, style="", fontsize=9];'
    yield "}"


def _reason(e: EdgeHealth | None) -> str:
    """``NVLinkDown: 12 of 18 NVLinks active ...``: an edge's reasons and message, for a label."""
    if e is None:
        return ""
    return f"{', '.join(e.reasons) or 'degraded'}: {e.message}" if e.message else ", ".join(e.reasons)


def _red(text: str) -> str:
    """The attributes of an edge drawn red, labelled ``text``."""
    colour = _q(DEGRADED_COLOUR)
    return f"color={colour}, label={_q(text)}, fontsize=8, fontcolor={colour}"


def _said(own: Mapping[tuple[str, object], Sequence[EdgeHealth]], key: tuple[str, object]) -> list[str]:
    """The label lines of a device whose own links are degraded: ``degraded: GPU3/pcie PcieWidthDegraded``."""
    return [f"degraded: {e.edge} {', '.join(e.reasons)}" for e in own.get(key, ())]


def _outline(
    own: Mapping[tuple[str, object], Sequence[EdgeHealth]], key: tuple[str, object], width: str
) -> str:
    return f"color={_q(DEGRADED_COLOUR)}, penwidth=3" if own.get(key) else f"penwidth={width}"


def _why_path(
    own: Mapping[tuple[str, object], Sequence[EdgeHealth]], gpu: int, nic: str, degraded: Sequence[EdgeHealth]
) -> EdgeHealth | None:
    """The degraded edge a GPU→NIC path crosses: the NIC's own, else the GPU's PCIe link, else a bridge's."""
    for e in own.get(("nic", nic), ()):
        return e
    for e in own.get(("gpu", gpu), ()):
        if e.kind is EdgeKind.PCIE:
            return e
    return next((e for e in degraded if e.gpu is None and e.nic is None), None)


def find_dot() -> str | None:
    return shutil.which("dot")


def render_svg(dot_text: str, *, dot: str | None = None, timeout_s: float = DOT_TIMEOUT_S) -> bytes:
    """``dot_text`` as SVG, by Graphviz's ``dot``. Raises ``GraphvizError`` when it is missing or fails."""
    program = dot or find_dot()
    if program is None:
        raise GraphvizError(f"-o svg needs Graphviz's `dot` program, which is not on PATH: {_INSTALL}")
    try:
        done = subprocess.run(
            [program, "-Tsvg"], input=dot_text.encode(), capture_output=True, timeout=timeout_s, check=False
        )
    except FileNotFoundError as e:
        raise GraphvizError(f"{program}: not found: {_INSTALL}") from e
    except subprocess.TimeoutExpired as e:
        raise GraphvizError(f"{program} -Tsvg did not finish in {timeout_s:g}s") from e
    if done.returncode != 0:
        message = strip_control(done.stderr.decode(errors="replace"))[:300]
        raise GraphvizError(f"{program} -Tsvg failed (exit {done.returncode}): {message}")
    return done.stdout


def picture(topology: Topology, facts: Facts, node_name: str | None, fmt: str) -> str:
    """``fmt`` ``dot`` (the graph) or ``svg`` (drawn by Graphviz), with PCI names from the system's
    pci.ids and the NVLink pairs of the topology (or, on a node too large for them, the scan's facts)."""
    from nodetopo.views.matrix import node_matrix
    from nodetopo.views.pciids import read_pci_names

    if fmt == "svg" and find_dot() is None:  # say so before the work
        raise GraphvizError(f"-o svg needs Graphviz's `dot` program, which is not on PATH: {_INSTALL}")
    text = to_dot(
        topology,
        node_name,
        pci_names=read_pci_names({(d.vendor, d.device) for d in topology.pci_devices}),
        gpu_matrix=node_matrix(topology, facts),
    )
    return text if fmt == "dot" else render_svg(text).decode("utf-8", errors="replace")


__all__: Sequence[str] = ("GraphvizError", "picture", "render_svg", "to_dot")
