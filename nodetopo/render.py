"""The human view of a ``Topology``: the table ``nodetopo discover`` prints by default.

Read at a glance: a one-line summary, NUMA nodes, NVLink islands, GPUs with their NUMA node, island
and nearest NICs, the GPU→NIC matrix, NICs, the PCIe roots with what hangs under them, MIG devices,
and every condition. Pure: text out, no I/O.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from nodetopo.crd import islands_text, model_of, worst_nic_distance
from nodetopo.model import PciDevice, Topology, format_cpulist

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


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "  ") -> list[str]:
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    lines = [indent + "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    for row in rows:
        lines.append(indent + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return lines


def _gib(value: int | None) -> str:
    if value is None:
        return "-"
    return f"{value / 2**30:.0f} GiB" if value >= 2**30 else f"{value / 2**20:.0f} MiB"


def _opt(value: object) -> str:
    return "-" if value is None or value == "" else str(value)


def render_table(topology: Topology, node_name: str | None = None) -> str:
    out: list[str] = []
    worst = worst_nic_distance(topology)
    model = model_of(topology)
    gpu_text = f"{len(topology.gpus)} x {model}" if model else str(len(topology.gpus))
    rdma = [n for n in topology.nics if n.rdma]
    head = [
        f"Node {node_name}" if node_name else "This node",
        f"GPUs: {gpu_text}",
        f"NVLink islands: {islands_text(topology) or 'none'}",
        f"RDMA NICs: {len(rdma)}",
        f"worst GPU→NIC: {worst.name if worst else '-'}",
        f"NUMA nodes: {len(topology.numa_nodes)}",
    ]
    out.append("   ".join(head))

    if topology.numa_nodes:
        out += ["", "NUMA nodes"]
        out += _table(
            ["NODE", "CPUS", "MEMORY", "DISTANCES"],
            [
                [
                    str(n.id),
                    format_cpulist(n.cpus) or "(none)",
                    _gib(n.memory_bytes),
                    " ".join(str(d) for _, d in n.distances) or "-",
                ]
                for n in topology.numa_nodes
            ],
        )

    if topology.nvlink_islands:
        out += ["", "NVLink islands"]
        for i in topology.nvlink_islands:
            shape = "fully connected" if i.fully_connected else "partially connected"
            via = ", via NVSwitch" if i.nvswitch else ""
            gpus = format_cpulist(i.gpus)
            links = f"≥{i.links_per_pair} links per pair"
            out.append(f"  island {i.id}: GPUs {gpus} ({len(i.gpus)}), {links}, {shape}{via}")

    if topology.gpus:
        out += ["", "GPUs"]
        out += _table(
            ["GPU", "MODEL", "BUS ID", "NUMA", "CPUS", "ISLAND", "NEAREST NICS", "MIG"],
            [
                [
                    str(g.index),
                    _opt(g.model),
                    _opt(g.address),
                    _opt(g.numa_node)
                    if g.numa_affinity is None or len(g.numa_affinity) <= 1
                    else format_cpulist(g.numa_affinity),
                    format_cpulist(g.cpu_affinity) if g.cpu_affinity else "-",
                    _opt(g.island),
                    f"{','.join(g.nearest_nics)} ({g.nic_distance.name})" if g.nic_distance else "-",
                    {True: "on", False: "off", None: "-"}[g.mig_enabled],
                ]
                for g in topology.gpus
            ],
        )

    nic_names = sorted({d.nic for d in topology.gpu_nic_distances})
    if topology.gpus and nic_names:
        cells = {(d.gpu, d.nic): d.distance.name for d in topology.gpu_nic_distances}
        out += ["", "GPU → NIC (PCIe path class: PIX < PXB < PHB < NODE < SYS)"]
        out += _table(
            ["", *nic_names],
            [[f"GPU{g.index}", *(cells.get((g.index, n), "-") for n in nic_names)] for g in topology.gpus],
        )

    if topology.nics:
        out += ["", "NICs"]
        out += _table(
            ["NIC", "NETDEV", "BUS ID", "NUMA", "LINK", "STATE", "RATE", "RDMA"],
            [
                [
                    n.name,
                    _opt(n.netdev),
                    _opt(n.address),
                    _opt(n.numa_node),
                    _opt(n.link_layer),
                    _opt(n.state),
                    f"{n.rate_gbps:g} Gb/s" if n.rate_gbps else "-",
                    "yes" if n.rdma else "no",
                ]
                for n in topology.nics
            ],
        )

    roots = _roots(topology)
    if roots:
        out += ["", "PCIe roots (endpoints under each host bridge)"]
        for root, lines in roots:
            out.append(f"  {root}")
            out += [f"    {line}" for line in lines]

    if topology.mig_devices:
        out += ["", "MIG devices"]
        out += _table(
            ["PARENT", "PROFILE", "GI", "CI", "UUID"],
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
        )

    failed = [s for s in topology.sources if not s.ok]
    if topology.conditions or failed:
        out += ["", "Conditions"]
        for c in topology.conditions:
            out.append(f"  {c.source}: {c.reason.value}: {c.message}")
    ok = sorted({s.name for s in topology.sources if s.ok})
    if ok:
        out += ["", "Sources ok: " + ", ".join(ok)]
    return "\n".join(out) + "\n"


def _roots(topology: Topology) -> list[tuple[str, list[str]]]:
    gpu_at = {g.address: f"GPU{g.index}" for g in topology.gpus if g.address is not None}
    nic_at: dict[object, list[str]] = defaultdict(list)
    for n in topology.nics:
        if n.address is not None:
            nic_at[n.address].append(n.name)
    by_root: dict[str, list[PciDevice]] = defaultdict(list)
    for d in topology.pci_devices:
        if not d.is_bridge:
            by_root[d.root or "(unknown root)"].append(d)
    result: list[tuple[str, list[str]]] = []
    for root in sorted(by_root):
        devices = by_root[root]
        numa = sorted({d.numa_node for d in devices if d.numa_node is not None})
        label = f"{root} (NUMA {','.join(map(str, numa))})" if numa else root
        lines = []
        for d in devices:
            names = [gpu_at[d.address]] if d.address in gpu_at else nic_at.get(d.address, [])
            kind = (
                "NVSwitch"
                if d.is_nvswitch
                else _CLASS_NAMES.get(d.class_code >> 8, f"class {d.class_code >> 8:04x}")
            )
            what = f"{', '.join(names)} " if names else ""
            bridges = (
                f"  via {len(d.upstream)} bridge{'s' if len(d.upstream) != 1 else ''}" if d.upstream else ""
            )
            lines.append(f"{d.address}  {what}[{kind}] {d.vendor:04x}:{d.device:04x}{bridges}")
        result.append((label, lines))
    return result
