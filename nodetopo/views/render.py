"""The human view of a ``Topology``: the table ``nodetopo discover`` prints by default.

Read at a glance: a summary (with Ready, and why not), the degraded links, NUMA nodes, NVLink
islands, the preferred GPU sets, GPUs with their NUMA node, island and nearest NICs, the GPU→NIC
matrix (with ``gpu_matrix``, the whole ``nvidia-smi topo -m`` style GPU×GPU+NIC matrix), NICs, the
PCIe roots with what hangs under them, MIG devices, and every condition. Pure: text out, no I/O.

A degraded link (``Topology.health``) is listed with its reasons and message, and marked ``!``
where it is in the way: a GPU or NIC whose own link is degraded, a GPU→NIC cell whose path crosses
one, a GPU×GPU cell of a GPU whose NVLinks (or fabric) are degraded.

Layout: with a ``width`` (a terminal) every line fits it — long tables drop a redundant column
(the GPU model when every GPU has the one in the summary) and then shorten their widest free-text
columns with ``…``, wide matrices are split into blocks of columns, long messages wrap. Without a
width (a pipe) nothing is shortened. Names sort naturally (``mlx5_2`` before ``mlx5_10``). Every
value is stripped of control characters: a bundle is data from elsewhere, and a GPU name must not
be able to drive the terminal.
"""

from __future__ import annotations

import dataclasses
import re
import textwrap
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from nodetopo.command.terminal import strip_control
from nodetopo.model import EdgeKind, PciDevice, Topology, format_cpulist
from nodetopo.resource.body import islands_text, model_of, worst_nic_distance
from nodetopo.resource.conditions import typed_conditions

# A few PCI class names for the roots view (PCI code and ID assignment specification).
_CLASS_NAMES = {
    0x0600: "Host bridge",
    0x0601: "ISA bridge",
    0x0604: "PCI bridge",
    0x0180: "Storage",
    0x0500: "RAM",
    0xFFFF: "Unclassified",
    0x0100: "SCSI",
    0x0101: "IDE",
    0x0104: "RAID",
    0x0106: "SATA",
    0x0108: "NVMe",
    0x0200: "Ethernet",
    0x0207: "InfiniBand",
    0x0280: "Network",
    0x0300: "VGA",
    0x0302: "3D",
    0x0380: "Display",
    0x0680: "Bridge (other)",
    0x0B40: "Co-processor",
    0x1200: "Accelerator",
    0x0C03: "USB",
    0x0C05: "SMBus",
    0x0107: "SAS",
    0x0C04: "Fibre Channel",
    0x0403: "Audio",
    0x0880: "System",
    0x00FF: "Virtio",
}

_ELLIPSIS = "…"
_BOLD, _RESET = "\x1b[1m", "\x1b[0m"
_INDENT = "  "
#: the mark of a device, a path or a pair on a degraded link
DEGRADED_MARK = "!"


def natural_key(text: str) -> tuple[tuple[int, str | int], ...]:
    """Sort key that orders digit runs by value: ``mlx5_2`` < ``mlx5_10``, ``GPU9`` < ``GPU10``."""
    parts = re.split(r"(\d+)", text)
    return tuple((1, int(p)) if i % 2 else (0, p) for i, p in enumerate(parts))


def _clean(value: object) -> str:
    return strip_control(str(value))


def _cut(text: str, width: int) -> str:
    if width <= 0:
        return ""
    return text if len(text) <= width else text[: max(width - 1, 0)] + _ELLIPSIS


@dataclasses.dataclass(frozen=True, slots=True)
class Col:
    """A table column: ``shrink`` is the narrowest it may be cut to (None: never cut); ``drop``
    orders the columns that may go entirely when the table does not fit (lowest first)."""

    header: str
    shrink: int | None = None
    drop: int | None = None


def _table(
    columns: Sequence[Col | str], rows: Sequence[Sequence[object]], width: int | None = None
) -> list[str]:
    cols = [c if isinstance(c, Col) else Col(c) for c in columns]
    cells = [[_clean(c) for c in row] for row in rows]
    widths = [max([len(c.header), *(len(r[i]) for r in cells)]) for i, c in enumerate(cols)]
    keep = list(range(len(cols)))

    def total() -> int:
        return len(_INDENT) + sum(widths[i] for i in keep) + 2 * (len(keep) - 1)

    if width is not None:
        while total() > width:
            droppable = [i for i in keep if cols[i].drop is not None]
            if not droppable:
                break
            keep.remove(min(droppable, key=lambda i: cols[i].drop or 0))
        while total() > width:
            room = {i: widths[i] - (cols[i].shrink or 0) for i in keep if cols[i].shrink is not None}
            room = {i: r for i, r in room.items() if r > 0}
            if not room:
                break
            widest = max(room, key=lambda i: (room[i], -i))
            widths[widest] -= min(room[widest], total() - width)

    def line(values: Sequence[str]) -> str:
        text = "  ".join(_cut(values[i], widths[i]).ljust(widths[i]) for i in keep)
        return (_INDENT + text).rstrip()

    return [line([c.header for c in cols]), *(line(r) for r in cells)]


def render_rows(
    columns: Sequence[Col | str], rows: Sequence[Sequence[object]], width: int | None = None
) -> str:
    """A plain table laid out as every table in this module is (``kubectl ntopo nodes``)."""
    return "\n".join(_table(columns, rows, width)) + "\n"


def _matrix(
    corner: str,
    groups: Sequence[Sequence[str]],
    rows: Sequence[tuple[str, Mapping[str, str]]],
    width: int | None,
) -> list[str]:
    """A matrix of short cells. When it is wider than ``width`` it is split into blocks of columns,
    each group of columns (GPUs, NICs) starting a block of its own."""
    columns = [c for group in groups for c in group]
    label_width = max([len(corner), *(len(_clean(r)) for r, _ in rows)])
    col_width = max([4, *(len(_clean(c)) for c in columns)])
    if width is None or len(_INDENT) + label_width + len(columns) * (col_width + 2) <= width:
        blocks = [columns]
    else:
        per_block = max(1, (width - len(_INDENT) - label_width) // (col_width + 2))
        blocks = []
        for group in (g for g in groups if g):
            size = -(-len(group) // -(-len(group) // per_block))  # balanced: 10 in 9s → 5 + 5
            blocks += [list(group[i : i + size]) for i in range(0, len(group), size)]
    out: list[str] = []
    for n, block in enumerate(blocks):
        if n:
            out.append("")
        out += _table([corner, *block], [[r, *(cells.get(c, "-") for c in block)] for r, cells in rows])
    return out


def _wrap(text: str, width: int | None, indent: str = _INDENT, hang: str = "    ") -> list[str]:
    text = indent + _clean(text)
    if width is None or len(text) <= width:
        return [text]
    return textwrap.wrap(
        text,
        width=max(width, len(hang) + 10),
        subsequent_indent=hang,
        break_long_words=True,
        break_on_hyphens=False,
        drop_whitespace=True,
    ) or [text]


def _pack(parts: Iterable[str], width: int | None, sep: str = "   ") -> list[str]:
    """Join ``parts`` on one line, or on as many lines as ``width`` needs (never splitting a part)."""
    lines: list[str] = []
    current = ""
    for part in (_clean(p) for p in parts):
        candidate = f"{current}{sep}{part}" if current else part
        if current and width is not None and len(candidate) > width:
            lines.append(current)
            current = part
        else:
            current = candidate
    if current:
        lines.append(current)
    return lines


def _gib(value: int | None) -> str:
    if value is None:
        return "-"
    return f"{value / 2**30:.0f} GiB" if value >= 2**30 else f"{value / 2**20:.0f} MiB"


def _opt(value: object) -> str:
    return "-" if value is None or value == "" else str(value)


def render_table(
    topology: Topology,
    node_name: str | None = None,
    *,
    width: int | None = None,
    style: bool = False,
    pci_names: Mapping[tuple[int, int], str] | None = None,
    gpu_matrix: Mapping[tuple[int, int], str] | None = None,
    origin: str | None = None,
) -> str:
    """The table. ``width``: lay out for a terminal this wide (None: a pipe, nothing shortened);
    ``style``: bold section titles; ``pci_names``: ``(vendor, device)`` → name (from pci.ids);
    ``gpu_matrix``: GPU pair → ``NV#``/PCIe class cell (``views.matrix``), shown as a topo -m matrix;
    ``origin``: where the facts come from (a bundle's manifest), a line under the summary.
    """
    out: list[str] = []
    titles: set[int] = set()

    def section(title: str) -> None:
        out.append("")
        for line in _wrap(title, width, indent="", hang="  "):
            titles.add(len(out))
            out.append(line)

    worst = worst_nic_distance(topology)
    model = model_of(topology)
    gpu_text = f"{len(topology.gpus)} x {model}" if model else str(len(topology.gpus))
    rdma = [n for n in topology.nics if n.rdma]
    by_type = {c.type: c for c in typed_conditions(topology)}
    ready, consistent = by_type["Ready"], by_type["Consistent"]
    head = [
        f"Node {node_name}" if node_name else "This node",
        f"Ready: {ready.status}" + ("" if ready.status == "True" else f" ({ready.reason})"),
        f"GPUs: {gpu_text}",
        f"NVLink islands: {islands_text(topology) or 'none'}",
        f"RDMA NICs: {len(rdma)}",
        f"worst GPU→NIC: {worst.name if worst else '-'}",
        f"NUMA nodes: {len(topology.numa_nodes) or 'unknown'}",
    ]
    if consistent.status != "True":
        head.append("Consistent: False")
    degraded = topology.health.degraded
    if degraded:
        head.append(f"Degraded: {len(degraded)} link{'s' if len(degraded) != 1 else ''}")
    out += _pack(head, width)
    if origin:
        out += _wrap(origin, width, indent=_INDENT, hang=_INDENT + "  ")
    if ready.status != "True":
        out += _wrap(f"not ready: {ready.message}", width, indent=_INDENT, hang=_INDENT + "  ")
    mark_gpus = {e.gpu for e in degraded if e.gpu is not None}
    mark_nics = {e.nic for e in degraded if e.nic is not None}
    off_nvlink = {
        e.gpu for e in degraded if e.gpu is not None and e.kind in (EdgeKind.NVLINK, EdgeKind.FABRIC)
    }
    mark = f"; {DEGRADED_MARK}: on a degraded link" if degraded else ""

    if degraded:
        section(f"Degraded links ({DEGRADED_MARK} below: what sits on one)")
        since = any(e.since for e in degraded)
        out += _table(
            ["LINK", Col("REASONS", shrink=10), Col("MESSAGE", shrink=16), *(["SINCE"] if since else [])],
            [
                [e.edge, ", ".join(e.reasons) or "-", e.message or "-", *([_opt(e.since)] if since else [])]
                for e in degraded
            ],
            width,
        )

    if topology.numa_nodes:
        section("NUMA nodes")
        out += _table(
            ["NODE", Col("CPUS", shrink=12), "MEMORY", Col("DISTANCES", shrink=12)],
            [
                [
                    str(n.id),
                    format_cpulist(n.cpus) or "(none)",
                    _gib(n.memory_bytes),
                    " ".join(str(d) for _, d in n.distances) or "-",
                ]
                for n in topology.numa_nodes
            ],
            width,
        )

    if topology.nvlink_islands:
        section("NVLink islands")
        for i in topology.nvlink_islands:
            shape = "fully connected" if i.fully_connected else "partially connected"
            via = ", via NVSwitch" if i.nvswitch else ""
            gpus = format_cpulist(i.gpus)
            links = f"≥{i.links_per_pair} links per pair"
            out += _wrap(f"island {i.id}: GPUs {gpus} ({len(i.gpus)}), {links}, {shape}{via}", width)

    multi = [p for p in topology.preferred_gpu_sets if p.size > 1 and p.sets]
    if multi:
        section("Preferred GPU sets (best first)")
        for p in multi:
            sets = "  ".join("{" + format_cpulist(s) + "}" for s in p.sets)
            out += _wrap(f"{p.size} GPUs: {sets}", width, hang=_INDENT + " " * (len(f"{p.size} GPUs: ")))

    if topology.gpus:
        section("GPUs")
        one_model = len({g.model for g in topology.gpus}) == 1 and model is not None
        out += _table(
            [
                "GPU",
                Col("MODEL", shrink=10, drop=1 if one_model else None),
                "BUS ID",
                Col("NUMA", shrink=4),
                Col("CPUS", shrink=9),
                "ISLAND",
                Col("NEAREST NICS", shrink=12),
                "MIG",
            ],
            [
                [
                    str(g.index) + (DEGRADED_MARK if g.index in mark_gpus else ""),
                    _opt(g.model),
                    _opt(g.address),
                    _opt(g.numa_node)
                    if g.numa_affinity is None or len(g.numa_affinity) <= 1
                    else format_cpulist(g.numa_affinity),
                    format_cpulist(g.cpu_affinity) if g.cpu_affinity else "-",
                    _opt(g.island),
                    f"{','.join(sorted(g.nearest_nics, key=natural_key))} ({g.nic_distance.name})"
                    if g.nic_distance
                    else "-",
                    {True: "on", False: "off", None: "-"}[g.mig_enabled],
                ]
                for g in topology.gpus
            ],
            width,
        )

    nic_names = sorted({d.nic for d in topology.gpu_nic_distances}, key=natural_key)
    if topology.gpus and (nic_names or gpu_matrix is not None):
        cells: dict[str, dict[str, str]] = defaultdict(dict)
        for d in topology.gpu_nic_distances:
            cells[f"GPU{d.gpu}"][d.nic] = d.distance.name + ("" if d.healthy else DEGRADED_MARK)
        groups: list[list[str]] = [list(nic_names)]
        if gpu_matrix is not None:
            section(f"GPU topology matrix (X: self, NV#: # NVLinks; PCIe: PIX<PXB<PHB<NODE<SYS{mark})")
            groups.insert(0, [f"GPU{g.index}" for g in topology.gpus])
            for a in topology.gpus:
                cells[f"GPU{a.index}"][f"GPU{a.index}"] = "X"
                for b in topology.gpus:
                    cell = gpu_matrix.get((a.index, b.index))
                    if cell is not None and a.index != b.index:
                        off = a.index in off_nvlink or b.index in off_nvlink
                        cells[f"GPU{a.index}"][f"GPU{b.index}"] = cell + (DEGRADED_MARK if off else "")
        else:
            section(f"GPU → NIC (PCIe path class: PIX < PXB < PHB < NODE < SYS{mark})")
        out += _matrix("", groups, [(f"GPU{g.index}", cells[f"GPU{g.index}"]) for g in topology.gpus], width)

    if topology.nics:
        section("NICs")
        out += _table(
            [
                "NIC",
                Col("NETDEV", shrink=6),
                "BUS ID",
                "NUMA",
                Col("LINK", shrink=5),
                Col("STATE", shrink=4),
                "RATE",
                "RDMA",
            ],
            [
                [
                    n.name + (DEGRADED_MARK if n.name in mark_nics else ""),
                    _opt(n.netdev),
                    _opt(n.address),
                    _opt(n.numa_node),
                    _opt(n.link_layer),
                    _opt(n.state),
                    f"{n.rate_gbps:g} Gb/s" if n.rate_gbps else "-",
                    "yes" if n.rdma else "no",
                ]
                for n in sorted(topology.nics, key=lambda n: natural_key(n.name))
            ],
            width,
        )

    roots = _roots(topology, pci_names or {})
    if roots:
        section("PCIe roots (endpoints under each host bridge)")
        for root, endpoints in roots:
            out.append(_INDENT + root)
            for choices in endpoints:
                fits = [c for c in choices if width is None or len(c) + 2 * len(_INDENT) <= width]
                line = fits[0] if fits else _cut(choices[-1], (width or 0) - 2 * len(_INDENT))
                out.append(_INDENT * 2 + line)

    if topology.mig_devices:
        section("MIG devices")
        out += _table(
            ["PARENT", "PROFILE", "GI", "CI", Col("UUID", shrink=12)],
            [
                [
                    f"GPU{m.parent_index}" if m.parent_index is not None else "-",
                    _opt(m.profile),
                    _opt(m.gpu_instance),
                    _opt(m.compute_instance),
                    m.uuid,
                ]
                for m in topology.mig_devices
            ],
            width,
        )

    failed = [s for s in topology.sources if not s.ok]
    if topology.conditions or failed:
        section("Conditions")
        for c in topology.conditions:
            out += _wrap(f"{c.source}: {c.reason.value}: {c.message}", width)
    ok = sorted({s.name for s in topology.sources if s.ok}, key=natural_key)
    if ok:
        out.append("")
        out += _pack(["Sources ok:", *(f"{name}," for name in ok[:-1]), ok[-1]], width, sep=" ")
    text = [strip_control(line) for line in out]
    if style:
        text = [f"{_BOLD}{line}{_RESET}" if i in titles else line for i, line in enumerate(text)]
    return "\n".join(text) + "\n"


def _roots(topology: Topology, names: Mapping[tuple[int, int], str]) -> list[tuple[str, list[list[str]]]]:
    """Each root complex with its endpoints; each endpoint as its lines from fullest to shortest."""
    gpu_at = {g.address: f"GPU{g.index}" for g in topology.gpus if g.address is not None}
    nic_at: dict[object, list[str]] = defaultdict(list)
    for n in topology.nics:
        if n.address is not None:
            nic_at[n.address].append(n.name)
    by_root: dict[str, list[PciDevice]] = defaultdict(list)
    for d in topology.pci_devices:
        if not d.is_bridge:
            by_root[d.root or "(unknown root)"].append(d)
    result: list[tuple[str, list[list[str]]]] = []
    for root in sorted(by_root):  # pciDDDD:BB: fixed-width hex, sorted as text
        devices = by_root[root]
        numa = sorted({d.numa_node for d in devices if d.numa_node is not None})
        label = f"{root} (NUMA {','.join(map(str, numa))})" if numa else root
        lines: list[list[str]] = []
        for d in devices:
            found = [gpu_at[d.address]] if d.address in gpu_at else nic_at.get(d.address, [])
            kind = (
                "NVSwitch"
                if d.is_nvswitch
                else _CLASS_NAMES.get(d.class_code >> 8, f"class {d.class_code >> 8:04x}")
            )
            what = f"{', '.join(sorted(found, key=natural_key))} " if found else ""
            ids = f"{d.vendor:04x}:{d.device:04x}"
            name = names.get((d.vendor, d.device))
            bridges = (
                f" via {len(d.upstream)} bridge{'s' if len(d.upstream) != 1 else ''}" if d.upstream else ""
            )
            start = f"{d.address}  {what}[{kind}]{bridges}  "
            choices = [f"{name} ({ids})", name] if name else [ids]
            lines.append([_clean(start + choice) for choice in choices])
        result.append((label, lines))
    return result
