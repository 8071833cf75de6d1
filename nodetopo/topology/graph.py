"""The one place that joins every source's facts into a single networkx graph.

Node ids are ``"<kind>:<stable id>"``:

=================  ====================================================================
``numa:0``         a NUMA node (``node`` attr: NumaNode)
``root:pci0000:3a``  a PCIe root complex / host bridge (``numa`` attr when known)
``pci:0000:3b:00.0``  a PCI function (``device`` attr: PciDevice), bridges included
``gpu:<n>``        a GPU, keyed by its nvidia-smi / NVML index (attrs: see ``GpuRecord``)
``nic:mlx5_0``     a NIC: an RDMA device, or a plain netdev on a PCI function
``nvswitch:<bdf>`` an NVSwitch (from NVML remote PCI info or sysfs)
``mig:<uuid>``     a MIG device
=================  ====================================================================

Edges carry ``kind``: ``pcie`` (child function → parent bridge or root complex), ``function``
(gpu/nic/nvswitch → the PCI function it is), ``numa`` (root complex or PCI function → NUMA node),
``nvlink`` (``links`` = count; gpu–gpu or gpu–nvswitch), ``mig`` (mig → parent gpu).

Sources are joined on the PCI address (as hwloc joins its backends by bus id). Where a source knows
no address (``nvidia-smi topo -m``, ``-L``) it is joined on the GPU index, which nvidia-smi and NVML
share. Each GPU/NIC node keeps, per fact, which source said it (``*_source`` attrs) so that the
derivations can apply the documented precedence and report disagreements.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING

from nodetopo.model import (
    Condition,
    ConditionReason,
    FabricInfo,
    Facts,
    MigDevice,
    PciAddress,
    PciDevice,
    RdmaPort,
    RemoteDeviceType,
)

if TYPE_CHECKING:
    import networkx as nx

GRAPH_SOURCE = "graph"


@dataclasses.dataclass(slots=True)
class GpuRecord:
    """What the sources say about one GPU, before derivation (mutable while joining only)."""

    index: int
    uuid: str | None = None
    model: str | None = None
    address: PciAddress | None = None
    memory_bytes: int | None = None
    cpu_affinity: frozenset[int] | None = None
    cpu_affinity_source: str | None = None
    numa_affinity: frozenset[int] | None = None
    gpu_numa_node: int | None = None
    mig_enabled: bool | None = None
    fabric: FabricInfo | None = None
    visible_to_driver: bool = True
    total_nvlinks: int | None = None  #: active NVLinks of this GPU (nvlink -s / NVML), if known


@dataclasses.dataclass(slots=True)
class NicRecord:
    name: str
    address: PciAddress | None = None
    netdevs: tuple[str, ...] = ()
    link_layer: str | None = None
    state: str | None = None
    rate_gbps: float | None = None
    rdma: bool = True
    firmware: str | None = None
    hca_type: str | None = None


def gpu_id(index: int) -> str:
    return f"gpu:{index}"


def nic_id(name: str) -> str:
    return f"nic:{name}"


def pci_id(address: PciAddress) -> str:
    return f"pci:{address}"


def build_graph(facts: Facts) -> tuple[nx.Graph, tuple[Condition, ...]]:
    """Join every source's facts into one graph. Returns the graph and the join's own conditions."""
    import networkx as nx  # here, not above: importing it costs ~0.1 s, and only a scan needs it

    g: nx.Graph = nx.Graph()
    conditions: list[Condition] = []
    _add_numa(g, facts)
    _add_pci(g, facts)
    conditions += _add_gpus(g, facts)
    conditions += _add_nics(g, facts)
    _add_nvlinks(g, facts)
    _add_migs(g, facts)
    g.graph["topo_matrix"] = facts.topo_matrix
    g.graph["nvml_common_ancestor"] = dict(facts.nvml.common_ancestor) if facts.nvml else {}
    return g, tuple(conditions)


# --------------------------------------------------------------------------------------------


def _add_numa(g: nx.Graph, facts: Facts) -> None:
    seen: set[int] = set()
    for node in sorted(facts.numa_nodes, key=lambda n: n.id):
        if node.id in seen:
            continue
        seen.add(node.id)
        g.add_node(f"numa:{node.id}", kind="numa", node=node)


def _add_pci(g: nx.Graph, facts: Facts) -> None:
    devices = {d.address: d for d in facts.pci_devices}
    for device in sorted(devices.values(), key=lambda d: d.address):
        node = pci_id(device.address)
        g.add_node(node, kind="pci", device=device)
        parent: str | None = None
        if device.upstream:
            parent = pci_id(device.upstream[-1])
            if parent not in g:
                # A bridge that sysfs listed in the path but not under bus/pci/devices (seen in
                # partial captures): keep the chain intact with a placeholder.
                g.add_node(parent, kind="pci", device=None)
        elif device.root is not None:
            parent = f"root:{device.root}"
            if parent not in g:
                g.add_node(parent, kind="pcie-root", name=device.root)
        if parent is not None:
            g.add_edge(node, parent, kind="pcie")
        if device.numa_node is not None and f"numa:{device.numa_node}" in g:
            g.add_edge(node, f"numa:{device.numa_node}", kind="numa")


def _add_gpus(g: nx.Graph, facts: Facts) -> list[Condition]:
    conditions: list[Condition] = []
    records: dict[int, GpuRecord] = {}

    def record(index: int) -> GpuRecord:
        if index not in records:
            records[index] = GpuRecord(index=index)
        return records[index]

    # 1. NVML: the preferred source (a stable API, unlike nvidia-smi's text).
    if facts.nvml is not None:
        for n in facts.nvml.gpus:
            r = record(n.index)
            r.uuid, r.model, r.address, r.memory_bytes = n.uuid, n.model, n.address, n.memory_bytes
            if n.cpu_affinity is not None:
                r.cpu_affinity, r.cpu_affinity_source = n.cpu_affinity, "nvml"
            r.gpu_numa_node = n.numa_node
            r.mig_enabled = n.mig_current
            r.fabric = n.fabric
            r.total_nvlinks = len(n.links) if n.links else r.total_nvlinks

    # 2. nvidia-smi -L (index, uuid, model) and -q -x (uuid, bus id, MIG mode), joined on the UUID.
    by_uuid = {r.uuid: r for r in records.values() if r.uuid}
    for listed in facts.listed_gpus:
        r = by_uuid.get(listed.uuid) or record(listed.index)
        r.uuid = r.uuid or listed.uuid
        r.model = r.model or listed.model
        by_uuid[listed.uuid] = r
    queried = sorted(facts.queried_gpus, key=lambda q: (q.address is None, q.address))
    for position, q in enumerate(queried):
        r_or_none = by_uuid.get(q.uuid)
        if r_or_none is None:
            # -q -x without -L/NVML: nvidia-smi orders GPUs by PCI bus id, as NVML does.
            r_or_none = record(position)
            r_or_none.uuid = q.uuid
            by_uuid[q.uuid] = r_or_none
        r = r_or_none
        r.model = r.model or q.model
        r.address = r.address or q.address
        r.memory_bytes = r.memory_bytes or q.memory_bytes
        if r.mig_enabled is None:
            r.mig_enabled = q.mig_current

    # 3. nvidia-smi topo -m: affinity columns, by index.
    if facts.topo_matrix is not None:
        for t in facts.topo_matrix.gpus:
            r = record(t.index)
            if r.cpu_affinity is None and t.cpu_affinity is not None:
                r.cpu_affinity, r.cpu_affinity_source = t.cpu_affinity, "nvidia-smi"
            r.numa_affinity = t.numa_affinity
            if r.gpu_numa_node is None:
                r.gpu_numa_node = t.gpu_numa_id

    for status in facts.nvlink_status:
        r = record(status.index)
        r.total_nvlinks = sum(1 for _, speed in status.links if speed is not None)

    # 4. sysfs: NVIDIA display/3D controllers on PCI. They give addresses to GPUs that the driver
    # sources listed without one (by bus order, as NVML enumerates), and GPUs that no driver source
    # saw are reported, never silently dropped ("0 GPUs" on a node with a broken driver is a lie).
    pci_gpus = sorted((d for d in facts.pci_devices if d.is_nvidia_gpu), key=lambda d: d.address)
    known = {r.address for r in records.values() if r.address is not None}
    unaddressed = sorted((r for r in records.values() if r.address is None), key=lambda r: r.index)
    unknown_pci = [d for d in pci_gpus if d.address not in known]
    if unaddressed and len(unaddressed) == len(unknown_pci):
        for r, d in zip(unaddressed, unknown_pci, strict=True):
            r.address = d.address
        unknown_pci = []
    elif unaddressed and unknown_pci:
        conditions.append(
            Condition(
                source=GRAPH_SOURCE,
                reason=ConditionReason.INCONSISTENT,
                message=(
                    f"nvidia-smi reports {len(records)} GPUs but PCI shows {len(pci_gpus)} NVIDIA GPUs; "
                    "GPU PCI addresses are unknown"
                ),
            )
        )
    if unknown_pci:
        driver_sources = bool(records)
        next_index = max(records, default=-1) + 1
        for d in unknown_pci:
            r = record(next_index)
            next_index += 1
            r.address = d.address
            r.visible_to_driver = False
        addresses = ", ".join(str(d.address) for d in unknown_pci)
        conditions.append(
            Condition(
                source=GRAPH_SOURCE,
                reason=ConditionReason.INCONSISTENT if driver_sources else ConditionReason.DEGRADED,
                message=(
                    f"{len(unknown_pci)} NVIDIA GPU(s) on PCI ({addresses}) are not visible to "
                    "NVML/nvidia-smi: driver missing or broken; listed without UUID or model"
                ),
            )
        )

    pci_by_address = {d.address: d for d in facts.pci_devices}
    for r in sorted(records.values(), key=lambda r: r.index):
        node = gpu_id(r.index)
        g.add_node(node, kind="gpu", record=r)
        if r.address is not None and r.address in pci_by_address:
            g.add_edge(node, pci_id(r.address), kind="function")
            device = pci_by_address[r.address]
            if r.cpu_affinity is None and device.local_cpus:
                r.cpu_affinity, r.cpu_affinity_source = device.local_cpus, "sysfs"
    return conditions


def _add_nics(g: nx.Graph, facts: Facts) -> list[Condition]:
    conditions: list[Condition] = []
    nics: dict[str, NicRecord] = {}
    netdev_owner: dict[str, str] = {}
    for dev in facts.rdma_devices:
        ports = sorted(dev.ports, key=lambda p: p.number)
        first = ports[0] if ports else RdmaPort(number=1)
        netdevs = tuple(sorted({n for p in ports for n in p.netdevs}))
        nics[dev.name] = NicRecord(
            name=dev.name,
            address=dev.address,
            netdevs=netdevs,
            link_layer=first.link_layer,
            state=first.state,
            rate_gbps=first.rate_gbps,
            firmware=dev.firmware,
            hca_type=dev.hca_type,
        )
        for n in netdevs:
            netdev_owner[n] = dev.name
    rdma_addresses = {r.address for r in nics.values() if r.address is not None}
    for net in facts.net_devices:
        if net.name in netdev_owner:
            continue
        if net.address is not None and net.address in rdma_addresses:
            owner = next(r for r in nics.values() if r.address == net.address)
            if net.name not in owner.netdevs:
                owner.netdevs = tuple(sorted((*owner.netdevs, net.name)))
            continue
        nics[net.name] = NicRecord(
            name=net.name,
            address=net.address,
            netdevs=(net.name,),
            link_layer="Ethernet",
            state=(net.operstate or "").upper() or None,
            rate_gbps=(net.speed_mbps / 1000) if net.speed_mbps and net.speed_mbps > 0 else None,
            rdma=False,
        )

    # ibstat enriches and is cross-checked against sysfs (which is primary).
    for ca in facts.ibstat:
        port = sorted(ca.ports, key=lambda p: p.number)[0] if ca.ports else None
        existing = nics.get(ca.name)
        if existing is None:
            nics[ca.name] = NicRecord(
                name=ca.name,
                link_layer=port.link_layer if port else None,
                state=port.state if port else None,
                rate_gbps=port.rate_gbps if port else None,
                firmware=ca.firmware,
                hca_type=ca.ca_type,
            )
            continue
        existing.firmware = existing.firmware or ca.firmware
        existing.hca_type = existing.hca_type or ca.ca_type
        if port is None:
            continue
        for attr, theirs in (
            ("state", port.state),
            ("link_layer", port.link_layer),
            ("rate_gbps", port.rate_gbps),
        ):
            ours = getattr(existing, attr)
            if ours is None:
                setattr(existing, attr, theirs)
            elif theirs is not None and _normalise(ours) != _normalise(theirs):
                conditions.append(
                    Condition(
                        source=GRAPH_SOURCE,
                        reason=ConditionReason.INCONSISTENT,
                        message=f"{ca.name}: sysfs says {attr}={ours}, ibstat says {theirs}",
                    )
                )

    # nvidia-smi topo -m NIC columns: names only. They add NICs when nothing else saw them.
    if facts.topo_matrix is not None:
        for t in facts.topo_matrix.nics:
            if t.name not in nics:
                nics[t.name] = NicRecord(name=t.name)

    pci_by_address = {d.address for d in facts.pci_devices}
    for name in sorted(nics):
        r = nics[name]
        node = nic_id(name)
        g.add_node(node, kind="nic", record=r)
        if r.address is not None and r.address in pci_by_address:
            g.add_edge(node, pci_id(r.address), kind="function")
    return conditions


def _normalise(value: object) -> object:
    if isinstance(value, str):
        return value.strip().lower()
    if isinstance(value, float):
        return round(value, 1)
    return value


def _add_nvlinks(g: nx.Graph, facts: Facts) -> None:
    gpu_by_address: dict[PciAddress, str] = {}
    for node, data in g.nodes(data=True):
        if data["kind"] == "gpu" and data["record"].address is not None:
            gpu_by_address[data["record"].address] = node

    nvml_links = False
    if facts.nvml is not None:
        counts: Counter[tuple[str, str]] = Counter()
        for n in facts.nvml.gpus:
            here = gpu_id(n.index)
            for link in n.links:
                if link.remote_type is RemoteDeviceType.SWITCH:
                    address = link.remote_address
                    other = f"nvswitch:{address}" if address is not None else "nvswitch:fabric"
                    if other not in g:
                        g.add_node(other, kind="nvswitch", address=address)
                        if address is not None and pci_id(address) in g:
                            g.add_edge(other, pci_id(address), kind="function")
                    counts[(here, other)] += 1
                elif link.remote_type is RemoteDeviceType.GPU and link.remote_address in gpu_by_address:
                    counts[(here, gpu_by_address[link.remote_address])] += 1
                else:
                    continue
                nvml_links = True
        for (end_a, end_b), links in counts.items():
            # Each GPU reports its own end of a GPU–GPU link: count the better-reported direction.
            links = max(links, counts.get((end_b, end_a), 0))
            g.add_edge(end_a, end_b, kind="nvlink", links=links, source="nvml")
    if not nvml_links and facts.topo_matrix is not None:
        for (index_a, index_b), cell in facts.topo_matrix.gpu_gpu:
            if cell.nvlinks > 0 and index_a != index_b:
                g.add_edge(
                    gpu_id(index_a), gpu_id(index_b), kind="nvlink", links=cell.nvlinks, source="nvidia-smi"
                )
    for d in facts.pci_devices:
        if d.is_nvswitch:
            node = f"nvswitch:{d.address}"
            if node not in g:
                g.add_node(node, kind="nvswitch", address=d.address)
                g.add_edge(node, pci_id(d.address), kind="function")


def _add_migs(g: nx.Graph, facts: Facts) -> None:
    migs: dict[str, MigDevice] = {}
    for listed in facts.listed_gpus:
        for m in listed.migs:
            migs[m.uuid] = dataclasses.replace(
                m, parent_uuid=m.parent_uuid or listed.uuid, parent_index=_first(m.parent_index, listed.index)
            )
    if facts.nvml is not None:
        for n in facts.nvml.gpus:
            for m in n.migs:
                previous = migs.get(m.uuid)
                migs[m.uuid] = dataclasses.replace(
                    m,
                    parent_uuid=m.parent_uuid or n.uuid,
                    parent_index=_first(m.parent_index, n.index),
                    profile=m.profile or (previous.profile if previous else None),
                    device_index=_first(m.device_index, previous.device_index if previous else None),
                )
    for uuid in sorted(migs):
        m = migs[uuid]
        node = f"mig:{uuid}"
        g.add_node(node, kind="mig", mig=m)
        if m.parent_index is not None and gpu_id(m.parent_index) in g:
            g.add_edge(node, gpu_id(m.parent_index), kind="mig")


def _first(*values: int | None) -> int | None:
    for v in values:
        if v is not None:
            return v
    return None


# --------------------------------------------------------------------------------------------
# Graph accessors used by the derivations
# --------------------------------------------------------------------------------------------


def nodes_of(g: nx.Graph, kind: str) -> list[str]:
    return sorted((n for n, d in g.nodes(data=True) if d["kind"] == kind), key=_sort_key)


def _sort_key(node: str) -> tuple[str, int, str]:
    kind, _, rest = node.partition(":")
    return (kind, int(rest), "") if rest.isdigit() else (kind, -1, rest)


def pci_device_of(g: nx.Graph, node: str) -> PciDevice | None:
    """The PCI function a gpu/nic/nvswitch node is, when sysfs saw it."""
    for neighbour in g.neighbors(node):
        if g.edges[node, neighbour]["kind"] == "function":
            device: PciDevice | None = g.nodes[neighbour]["device"]
            return device
    return None


def nvlink_edges(g: nx.Graph) -> Iterable[tuple[str, str, int]]:
    for a, b, data in g.edges(data=True):
        if data["kind"] == "nvlink":
            yield a, b, int(data["links"])
