"""The rules of edge health, in one place: which edges a node has, what each one does against what both
its ends support, and when that is a fault.

``edge_readings(facts, topology, policy)`` turns one scan's link readings (``Facts.health``, and the
link facts the sources already publish) into one ``EdgeReading`` per edge, with the findings of the
*instant* rules (what this scan shows); ``rate_findings`` adds the *rate* rules once the tracker
knows how fast the edge's counters rose (``nodetopo.health.tracker``). ``topology`` is the node as
derived without health (which GPU has which address, which NICs are the GPUs' rails, which GPUs sit
on one NVSwitch).

The edges and their rules (each rule can be switched off, each threshold set:
``nodetopo.health.policy``):

``<device>/pcie``: a PCI function's link to the port above it (GPUs, NICs, NVSwitches, and the
  upstream port of every switch on their way to the root port). Its capability is what both ends
  support: the lesser of the two ends' ``max_link_width`` and ``max_link_speed``.

  * ``PcieWidthDegraded``: the link runs narrower than that (x8 of x16). A width below capability
    is a fault; ``PcieLinkDown``: width 0.
  * ``PcieSpeedDegraded``: it runs slower than that, on a device that does not lower its own link
    speed (NICs, NVSwitches, switch uplinks). A GPU lowers its link speed when idle to save power:
    its current speed is reported, never judged.
  * ``PcieGenerationLimited``: a GPU whose *maximum* generation (what the link can reach, NVML /
    ``nvidia-smi -q``'s ``Max``) is below what both ends support (the GPU's own and the host's):
    the link trained lower, or a riser or a BIOS setting caps it.
  * rates: the AER totals of both ends (``aer_dev_*``: the kernel counts an error where it is seen,
    often at the link partner) and the GPU's PCIe replay counter.

``GPU<n>/nvlink``: a GPU's NVLinks. Its capability is the most active links any GPU of the same model
  on the node has (the peers of an NVSwitch board, the pairs of a bridged node).

  * ``NVLinkDown``: fewer active links than that; ``NVLinkSlow``: an active link slower than the
    fastest link of the GPU and its peers;
  * rates: replay, recovery and CRC errors of its links (NVML, else ``nvidia-smi nvlink -e``).

``<nic>/port<n>``: an RDMA port (InfiniBand or RoCE) and its wire.

  * ``PortRateBelowPeers``: an active port below the rate of the other ports of its HCA, or, for a
    GPU's rail (a nearest NIC of some GPU), of the node's other rails of the same link layer;
  * ``PortDown``: a rail that is not active while another rail of its link layer is;
  * ``PortFlapping``: ``link_downed`` or the netdev's ``carrier_changes`` rising; other counters
    rising too fast are ``PortErrorsRising``.

``GPU<n>/fabric``: a GPU's multi-node NVLink fabric (GB200/GB300): ``FabricUnhealthy`` when its health
  summary is not healthy or its health mask says degraded bandwidth, an unhealthy route or an
  incorrect configuration (``nodetopo.health.fabric`` reads the mask).

A counter at its width's ceiling (an 8-bit ``link_downed`` at 255, 16-bit ones at 65535) cannot rise:
it is *saturated*, its rate unknown (neither a fault nor clean) until someone resets it.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from nodetopo.health.fabric import fabric_problems
from nodetopo.health.policy import HealthPolicy
from nodetopo.model import (
    EdgeKind,
    EdgeName,
    Facts,
    GpuPcieReading,
    LinkState,
    NvlinkReading,
    PciAddress,
    PciDevice,
    PcieLinkReading,
    RdmaDevice,
    RemoteDeviceType,
    Topology,
)

#: the highest value each counter can hold (it stops there: saturated); absent: 64 bits
CEILINGS: dict[str, int] = {
    "port.link_downed": 0xFF,
    "port.link_error_recovery": 0xFF,
    "port.symbol_error": 0xFFFF,
    "port.port_rcv_errors": 0xFFFF,
    "port.port_xmit_discards": 0xFFFF,
    "port.local_link_integrity_errors": 0xF,
    "port.excessive_buffer_overrun_errors": 0xF,
    # seen on a V100 (nvidia-smi nvlink -e: "CRC Errors: 65535" while the link kept failing)
    "nvlink.crc": 0xFFFF,
    "nvlink.replay": 0xFFFF,
    "nvlink.recovery": 0xFFFF,
}

#: GT/s per lane of each PCIe generation
GENERATION_GTS = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}

#: counters whose rise is a flap of the port (the others are errors)
FLAP_COUNTERS = frozenset({"link_downed", "carrier_changes"})


@dataclasses.dataclass(frozen=True, slots=True)
class Finding:
    """One rule that fired: its reason and what it saw."""

    reason: str
    message: str


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class EdgeReading(EdgeName):
    """One edge as this scan saw it: its names (``EdgeName``), its state against its capability,
    the instant findings, and its cumulative error counters (summed over its parts; saturated ones
    named)."""

    observed: LinkState = dataclasses.field(default_factory=LinkState)
    capability: LinkState = dataclasses.field(default_factory=LinkState)
    findings: tuple[Finding, ...] = ()
    counters: tuple[tuple[str, int], ...] = ()
    saturated: tuple[str, ...] = ()

    @property
    def known(self) -> bool:
        """Whether this scan read anything of the edge (a state or a counter): an edge read as
        nothing is neither healthy nor degraded, and is not judged."""
        return bool(self.findings or self.counters or self.observed != LinkState())


def edge_readings(facts: Facts, topology: Topology, policy: HealthPolicy) -> tuple[EdgeReading, ...]:
    """Every edge of the node this scan could read, sorted by edge id, with its instant findings."""
    readings = [
        *_pcie_edges(facts, topology, policy),
        *_nvlink_edges(facts, topology, policy),
        *_port_edges(facts, topology, policy),
        *_fabric_edges(facts, policy),
    ]
    return tuple(sorted(readings, key=lambda r: r.edge))


def rate_findings(
    reading: EdgeReading, rates: Mapping[str, float], policy: HealthPolicy
) -> tuple[Finding, ...]:
    """The rate rules: each counter of ``reading`` that rose faster than its threshold (per hour)."""
    found: list[Finding] = []
    flaps: list[str] = []
    errors: list[str] = []
    for counter, per_hour in sorted(rates.items()):
        threshold = policy.threshold(reading.kind.value, counter)
        if threshold is None or per_hour <= threshold:
            continue
        text = f"{counter} rising {_rate(per_hour)}/h (more than {_rate(threshold)}/h)"
        (flaps if reading.kind is EdgeKind.PORT and counter in FLAP_COUNTERS else errors).append(text)
    if flaps:
        found.append(Finding("PortFlapping", "; ".join(flaps)))
    if errors:
        reason = {
            EdgeKind.PCIE: "PcieErrorsRising",
            EdgeKind.NVLINK: "NVLinkErrorsRising",
            EdgeKind.PORT: "PortErrorsRising",
            EdgeKind.FABRIC: "FabricErrorsRising",
        }[reading.kind]
        found.append(Finding(reason, "; ".join(errors)))
    return tuple(found)


def _rate(value: float) -> str:
    return f"{value:.3g}"


def saturated(kind: EdgeKind, counters: Iterable[tuple[str, int]]) -> tuple[str, ...]:
    """The counters at their ceiling (``CEILINGS``)."""
    return tuple(name for name, value in counters if value >= CEILINGS.get(f"{kind.value}.{name}", 1 << 64))


# --------------------------------------------------------------------------------------------
# PCIe
# --------------------------------------------------------------------------------------------


def _gpu_names(topology: Topology) -> dict[PciAddress, int]:
    return {g.address: g.index for g in topology.gpus if g.address is not None}


def _pcie_edges(facts: Facts, topology: Topology, policy: HealthPolicy) -> list[EdgeReading]:
    devices = {d.address: d for d in facts.pci_devices}
    links = {r.address: r for r in facts.health.pcie}
    gpus = _gpu_names(topology)
    nics = {n.address: n.name for n in topology.nics if n.address is not None}
    gpu_views = _gpu_pcie_views(facts.health.gpu_pcie, topology)
    edges: list[EdgeReading] = []
    for address, reading in links.items():
        device = devices.get(address)
        if device is None or len(device.upstream) % 2 == 0:
            # a root port (no link above it), a switch's downstream port (its link is the one
            # below it), or a place in the tree whose ports cannot be told apart: not an edge
            continue
        parent_address = device.upstream[-1]
        parent = links.get(parent_address)
        gpu = gpus.get(address)
        name = f"GPU{gpu}" if gpu is not None else nics.get(address, str(address))
        edges.append(
            _pcie_edge(
                name,
                device,
                reading,
                parent,
                parent_address,
                gpu,
                gpu_views.get(gpu) if gpu is not None else None,
                nics.get(address),
                policy,
            )
        )
    # GPUs that sysfs gave no link attributes for (a trimmed capture): what the driver says
    seen = {e.gpu for e in edges}
    for gpu, view in sorted(gpu_views.items()):
        if gpu not in seen:
            edges.append(_driver_only_pcie_edge(gpu, view, topology, policy))
    return edges


def _gpu_pcie_views(readings: Sequence[GpuPcieReading], topology: Topology) -> dict[int, GpuPcieReading]:
    """Each GPU's own view of its PCIe link, by GPU index: NVML's where it answered, else ``-q``'s."""
    by_uuid = {g.uuid: g.index for g in topology.gpus if g.uuid}
    by_address = _gpu_names(topology)
    views: dict[int, GpuPcieReading] = {}
    for r in sorted(readings, key=lambda r: r.source != "nvml"):  # NVML first
        index = r.gpu
        if index is None:
            index = by_uuid.get(r.uuid or "") if r.uuid else None
            if index is None and r.address is not None:
                index = by_address.get(r.address)
        if index is not None and index not in views:
            views[index] = r
    return views


def _lesser(*values: float | None) -> float | None:
    known = [v for v in values if v is not None]
    return min(known) if known else None


def _pcie_edge(
    name: str,
    device: PciDevice,
    reading: PcieLinkReading,
    parent: PcieLinkReading | None,
    parent_address: PciAddress,
    gpu: int | None,
    view: GpuPcieReading | None,
    nic: str | None,
    policy: HealthPolicy,
) -> EdgeReading:
    width = (
        reading.current_width
        if reading.current_width is not None
        else (parent.current_width if parent else None)
    )
    gts = reading.current_gts if reading.current_gts is not None else (parent.current_gts if parent else None)
    cap_width = _lesser(reading.max_width, parent.max_width if parent else None)
    cap_gts = _lesser(reading.max_gts, parent.max_gts if parent else None)
    if width is None and view is not None:
        width = view.current_width
    if cap_width is None and view is not None:
        cap_width = view.max_width
    findings: list[Finding] = []
    if policy.rule("pcie_width") and width is not None:
        if width == 0:
            findings.append(Finding("PcieLinkDown", "the link is down (width 0)"))
        elif cap_width is not None and width < cap_width:
            findings.append(
                Finding(
                    "PcieWidthDegraded",
                    f"x{width} of x{int(cap_width)} (both ends support x{int(cap_width)})",
                )
            )
    if (
        policy.rule("pcie_speed")
        and gpu is None
        and gts is not None
        and cap_gts is not None
        and gts < cap_gts
    ):
        findings.append(
            Finding("PcieSpeedDegraded", f"{gts:g} GT/s of {cap_gts:g} GT/s (both ends support {cap_gts:g})")
        )
    if gpu is not None and view is not None and policy.rule("pcie_generation"):
        finding = _generation_limited(view, parent)
        if finding is not None:
            findings.append(finding)
    counters: dict[str, int] = {}
    for key, mine, theirs in (
        ("aer_correctable", reading.aer_correctable, parent.aer_correctable if parent else None),
        ("aer_nonfatal", reading.aer_nonfatal, parent.aer_nonfatal if parent else None),
        ("aer_fatal", reading.aer_fatal, parent.aer_fatal if parent else None),
    ):
        if mine is not None or theirs is not None:
            counters[key] = (mine or 0) + (theirs or 0)
    if view is not None and view.replays is not None:
        counters["replays"] = view.replays
    items = tuple(sorted(counters.items()))
    return EdgeReading(
        edge=f"{name}/pcie",
        kind=EdgeKind.PCIE,
        device=name,
        gpu=gpu,
        nic=nic,
        address=device.address,
        peer=str(parent_address),
        observed=LinkState(width=width, gts=gts),
        capability=LinkState(width=int(cap_width) if cap_width is not None else None, gts=cap_gts),
        findings=tuple(findings),
        counters=items,
        saturated=saturated(EdgeKind.PCIE, items),
    )


def _generation_limited(view: GpuPcieReading, parent: PcieLinkReading | None) -> Finding | None:
    """A GPU whose link can reach only a lower generation than both the GPU and the host support."""
    host = view.host_max_gen
    if host is None and parent is not None and parent.max_gts is not None:
        host = next((g for g, gts in GENERATION_GTS.items() if abs(gts - parent.max_gts) < 0.1), None)
    if view.max_gen is None or view.device_max_gen is None or host is None:
        return None
    both = min(view.device_max_gen, host)
    if view.max_gen >= both:
        return None
    return Finding(
        "PcieGenerationLimited",
        f"Gen{view.max_gen} at most, though the GPU supports Gen{view.device_max_gen} and the host Gen{host}",
    )


def _driver_only_pcie_edge(
    gpu: int, view: GpuPcieReading, topology: Topology, policy: HealthPolicy
) -> EdgeReading:
    address = next((g.address for g in topology.gpus if g.index == gpu), None)
    findings: list[Finding] = []
    if policy.rule("pcie_width") and view.current_width is not None and view.max_width is not None:
        if view.current_width == 0:
            findings.append(Finding("PcieLinkDown", "the link is down (width 0)"))
        elif view.current_width < view.max_width:
            findings.append(Finding("PcieWidthDegraded", f"x{view.current_width} of x{view.max_width}"))
    if policy.rule("pcie_generation"):
        finding = _generation_limited(view, None)
        if finding is not None:
            findings.append(finding)
    counters = (("replays", view.replays),) if view.replays is not None else ()
    gts = GENERATION_GTS.get(view.current_gen or 0)
    cap_gen = (
        min(g for g in (view.max_gen, view.device_max_gen, view.host_max_gen) if g is not None)
        if (view.max_gen or view.device_max_gen or view.host_max_gen)
        else None
    )
    return EdgeReading(
        edge=f"GPU{gpu}/pcie",
        kind=EdgeKind.PCIE,
        device=f"GPU{gpu}",
        gpu=gpu,
        address=address,
        observed=LinkState(width=view.current_width, gts=gts),
        capability=LinkState(width=view.max_width, gts=GENERATION_GTS.get(cap_gen or 0)),
        findings=tuple(findings),
        counters=counters,
        saturated=saturated(EdgeKind.PCIE, counters),
    )


# --------------------------------------------------------------------------------------------
# NVLink
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(slots=True)
class _Links:
    active: int = 0
    speeds: list[float] = dataclasses.field(default_factory=list)
    counters: dict[str, int] = dataclasses.field(default_factory=dict)
    switched: bool = False


def _nvlink_states(facts: Facts) -> dict[int, _Links]:
    """Per GPU: its active links (NVML's probe, else ``nvlink -s``), their speeds and summed counters
    (NVML's, else ``nvlink -e``'s)."""
    states: dict[int, _Links] = {}
    nvml = [r for r in facts.health.nvlinks if r.source == "nvml"]
    smi = [r for r in facts.health.nvlinks if r.source != "nvml"]
    if facts.nvml is not None:
        for nvml_gpu in facts.nvml.gpus:
            if nvml_gpu.links:
                state = states.setdefault(nvml_gpu.index, _Links())
                state.switched = any(link.remote_type is RemoteDeviceType.SWITCH for link in nvml_gpu.links)
    probed: dict[int, list[NvlinkReading]] = defaultdict(list)
    for r in nvml:
        probed[r.gpu].append(r)
    for gpu, mine in probed.items():
        state = states.setdefault(gpu, _Links())
        state.active = sum(1 for r in mine if r.active)
        state.speeds = [r.speed_gbps for r in mine if r.active and r.speed_gbps]
    for status in facts.nvlink_status:
        if status.index in probed or not status.links:
            continue
        state = states.setdefault(status.index, _Links())
        state.active = sum(1 for _, speed in status.links if speed is not None)
        state.speeds = [speed for _, speed in status.links if speed]
    for source in (nvml, smi):
        by_gpu: dict[int, dict[str, int]] = defaultdict(dict)
        for r in source:
            for key, value in (("replay", r.replay), ("recovery", r.recovery), ("crc", r.crc)):
                if value is not None:
                    by_gpu[r.gpu][key] = by_gpu[r.gpu].get(key, 0) + value
        for gpu, counters in by_gpu.items():
            known = states.get(gpu)
            if known is not None and not known.counters:
                known.counters = counters
    return states


def _nvlink_edges(facts: Facts, topology: Topology, policy: HealthPolicy) -> list[EdgeReading]:
    states = _nvlink_states(facts)
    if not states:
        return []
    model = {g.index: g.model for g in topology.gpus}
    switched_islands = {i for island in topology.nvlink_islands if island.nvswitch for i in island.gpus}
    peers_best: dict[str | None, int] = defaultdict(int)
    fastest: dict[str | None, float] = defaultdict(float)
    for gpu, state in states.items():
        peers_best[model.get(gpu)] = max(peers_best[model.get(gpu)], state.active)
        fastest[model.get(gpu)] = max([fastest[model.get(gpu)], *state.speeds])
    edges = []
    for gpu, state in sorted(states.items()):
        capability = peers_best[model.get(gpu)]
        findings: list[Finding] = []
        if policy.rule("nvlink_links") and state.active < capability:
            findings.append(
                Finding(
                    "NVLinkDown",
                    f"{state.active} of {capability} NVLinks active (its peers have {capability})",
                )
            )
        best = fastest[model.get(gpu)]
        slow = [s for s in state.speeds if best and s < best * 0.99]
        if policy.rule("nvlink_speed") and slow:
            findings.append(
                Finding("NVLinkSlow", f"{len(slow)} link(s) at {min(slow):g} GB/s, the others at {best:g}")
            )
        items = tuple(sorted(state.counters.items()))
        peer = "NVSwitch" if state.switched or gpu in switched_islands else None
        edges.append(
            EdgeReading(
                edge=f"GPU{gpu}/nvlink",
                kind=EdgeKind.NVLINK,
                device=f"GPU{gpu}",
                gpu=gpu,
                address=next((g.address for g in topology.gpus if g.index == gpu), None),
                peer=peer,
                observed=LinkState(links=state.active),
                capability=LinkState(links=capability),
                findings=tuple(findings),
                counters=items,
                saturated=saturated(EdgeKind.NVLINK, items),
            )
        )
    return edges


# --------------------------------------------------------------------------------------------
# RDMA ports
# --------------------------------------------------------------------------------------------


def _card(device: RdmaDevice) -> object:
    """The card an RDMA device is a port of (the functions of one PCI device), or the device itself."""
    if device.address is None:
        return device.name
    return (device.address.domain, device.address.bus, device.address.device)


def _port_edges(facts: Facts, topology: Topology, policy: HealthPolicy) -> list[EdgeReading]:
    rails = {name for gpu in topology.gpus for name in gpu.nearest_nics}
    counters = {(r.nic, r.port): r for r in facts.health.ports}
    ports = [(device, port) for device in facts.rdma_devices for port in device.ports]
    if not ports:  # no class/infiniband in sysfs: what ibstat says
        ports = [
            (RdmaDevice(name=ca.name, hca_type=ca.ca_type, ports=ca.ports), port)
            for ca in facts.ibstat
            for port in ca.ports
        ]
    active = [(d, p) for d, p in ports if (p.state or "").upper() == "ACTIVE"]
    edges = []
    for device, port in ports:
        state = (port.state or "").upper() or None
        layer = port.link_layer
        card = _card(device)
        peers = [p for d, p in active if _card(d) == card and p is not port and p.link_layer == layer]
        if device.name in rails:
            peers += [
                p for d, p in active if d.name in rails and d.name != device.name and p.link_layer == layer
            ]
        rates = [p.rate_gbps for p in peers if p.rate_gbps]
        capability = max([*rates, port.rate_gbps or 0.0]) or None
        findings: list[Finding] = []
        if (
            policy.rule("port_rate")
            and state == "ACTIVE"
            and port.rate_gbps
            and capability
            and port.rate_gbps < capability
        ):
            whose = "its rails" if device.name in rails else "its HCA's other ports"
            findings.append(
                Finding("PortRateBelowPeers", f"{port.rate_gbps:g} Gb/s, {whose} run at {capability:g} Gb/s")
            )
        if (
            policy.rule("port_down")
            and device.name in rails
            and state not in (None, "ACTIVE")
            and any(d.name in rails and d.name != device.name and p.link_layer == layer for d, p in active)
        ):
            findings.append(
                Finding(
                    "PortDown",
                    f"{state} while the node's other {layer or ''} rails are ACTIVE".replace("  ", " "),
                )
            )
        reading = counters.get((device.name, port.number))
        values = dict(reading.counters) if reading is not None else {}
        if reading is not None and reading.carrier_changes is not None:
            values["carrier_changes"] = reading.carrier_changes
        items = tuple(sorted(values.items()))
        edges.append(
            EdgeReading(
                edge=f"{device.name}/port{port.number}",
                kind=EdgeKind.PORT,
                device=device.name,
                nic=device.name,
                address=device.address,
                port=port.number,
                observed=LinkState(rate_gbps=port.rate_gbps, state=state),
                capability=LinkState(rate_gbps=capability, state="ACTIVE" if device.name in rails else None),
                findings=tuple(findings),
                counters=items,
                saturated=saturated(EdgeKind.PORT, items),
            )
        )
    return edges


# --------------------------------------------------------------------------------------------
# The multi-node NVLink fabric
# --------------------------------------------------------------------------------------------


def _fabric_edges(facts: Facts, policy: HealthPolicy) -> list[EdgeReading]:
    if facts.nvml is None:
        return []
    edges = []
    for gpu in facts.nvml.gpus:
        fabric = gpu.fabric
        if fabric is None:
            continue
        in_domain = bool(fabric.cluster_uuid.strip("0-"))
        said = fabric.health_mask is not None or fabric.health not in (None, "", "NOT_SUPPORTED")
        if not (in_domain or said):
            continue
        problems = fabric_problems(fabric) if policy.rule("fabric") else []
        findings = (Finding("FabricUnhealthy", ", ".join(problems)),) if problems else ()
        edges.append(
            EdgeReading(
                edge=f"GPU{gpu.index}/fabric",
                kind=EdgeKind.FABRIC,
                device=f"GPU{gpu.index}",
                gpu=gpu.index,
                address=gpu.address,
                peer=f"{fabric.cluster_uuid}.{fabric.clique_id}" if in_domain else None,
                observed=LinkState(state=fabric.health or fabric.state),
                capability=LinkState(state="HEALTHY"),
                findings=findings,
            )
        )
    return edges
