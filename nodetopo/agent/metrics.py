"""The agent's Prometheus metrics: a custom collector that builds fresh families from ``AgentStats``.

The loop records what happened into ``AgentStats`` (thread-safe); every scrape builds new metric
families from a consistent copy of it, so there are no global metric objects to keep in sync. A
dry-run agent (``AgentStats(dry_run=True)``) writes nothing, so it counts no writes, no label
removals and no successful publish.

Metric names (all prefixed ``nodetopo_``):

==================================================  =========  ==================================
``discovery_duration_seconds{source}``              histogram  time each source took per scan
``discovery_cycles_total{trigger}``                 counter    scans by trigger (start, interval,
                                                               udev, retry)
``source_errors_total{source,reason}``              counter    source conditions by reason, per
                                                               scan; an expected absence
                                                               (Unavailable: no ibstat on a CPU
                                                               node) is not an error
``source_unavailable{source}``                      gauge      1 while a source is Unavailable
``source_stale{source}``                            gauge      1 while a source's facts are stale
``ready`` / ``consistent``                          gauge      the resource's Ready / Consistent
                                                               condition (1 True, 0 False)
``publish_writes_total{object}``                    counter    writes (object: nodetopology, labels);
                                                               none under ``--dry-run``
``publish_failures_total{object,error}``            counter    failed writes by error class
``last_successful_publish_timestamp_seconds``       gauge      Unix time of the last good publish
``label_removals_total``                            counter    label keys the agent dropped
``gpus`` / ``nvlink_islands`` / ``rdma_nics``       gauge      from the latest topology
``gpu_allocation_known``                            gauge      1 while the kubelet says who holds
                                                               each GPU, 0 while it cannot be
                                                               asked; absent when not asked
``gpus_held``                                       gauge      GPUs held by a container (when known)
``allocation_checks_total{result}``                 counter    kubelet PodResources answers:
                                                               unchanged, changed, failed
``agent_info{version,node}``                        gauge      always 1
``gpu_info{node,gpu,UUID,pci_bus_id,island,...}``   gauge      1 per GPU: the topology join of
                                                               the DCGM exporter's series
``nic_info{node,device,netdev,pci_bus_id,...}``     gauge      1 per NIC: the join of
                                                               node-exporter's NIC series
``expected_busbw_bytes_per_second{scope,island,``   gauge      the bandwidth model's all-reduce
``collective,bound}``                                          busbw band per island and node
                                                               (absent where it cannot judge)
``expected_nvlink_tx_bytes_per_second{...}``        gauge      what each GPU of an island sends
                                                               over NVLink meanwhile (the DCGM
                                                               counter the rules compare)
``edge_degraded{node,edge,kind,reason}``            gauge      1 per edge the last scan read:
                                                               1 degraded (as published), 0
                                                               healthy; absent: not read
==================================================  =========  ==================================

The join series (``gpu_info``, ``nic_info``) carry the facts of the latest topology as labels, so
that a PromQL ``* on(UUID) group_left(island, leaf) nodetopo_gpu_info`` turns any DCGM exporter
series into a per-island or per-leaf one. The join keys use the DCGM exporter's own label names
(``UUID``, ``gpu``, ``pci_bus_id`` in DCGM's ``00000000:3B:00.0`` form) and node-exporter's
(``device``: the RDMA device, ``mlx5_0``). A fact the topology does not know is an absent label,
never a placeholder: a GPU without an NVLink peer has no ``island``, a node whose place in the
network is unknown has no ``leaf``. Cardinality is one series per GPU and one per NIC (an 8-GPU,
10-NIC node: 18); the bands add four per island (busbw and NVLink send, each lower and upper) and
two per node (an 8-GPU node with one island: 6), the edges one per edge read (the dgx-h100
fixture: 53, one per PCIe link, GPU NVLink set and RDMA port).
"""

from __future__ import annotations

import bisect
import copy
import dataclasses
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypeVar

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)
from prometheus_client.registry import CollectorRegistry

from nodetopo import __version__
from nodetopo.health.rules import EdgeReading
from nodetopo.model import ConditionReason, GpuAllocation, HealthReport, PciAddress, Topology
from nodetopo.resource.conditions import typed_conditions
from nodetopo.resource.identity import PREFIX
from nodetopo.sources.base import SourceResult
from nodetopo.topology.network import nvlink_domain

NAMESPACE = "nodetopo"

#: One info series: its labels, in exposition order (a label the topology does not know is left out).
Labels = tuple[tuple[str, str], ...]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ExpectedBand:
    """One expected band, as the bandwidth model computes it for this node (``nodetopo.agent.bands``).

    ``scope``: ``island`` (a collective inside NVLink island ``island``), ``node`` (across every GPU
    of the node), ``network`` (the node's share of a collective across nodes, per rail).
    ``quantity``: ``busbw`` (the bus bandwidth, ``expected_busbw_bytes_per_second``) or ``nvlink_tx``
    (what each GPU of the island sends over NVLink meanwhile, ``expected_nvlink_tx_bytes_per_second``).
    """

    scope: str
    island: int | None = None
    collective: str = "all_reduce"
    quantity: str = "busbw"
    lower_bytes_per_second: float
    upper_bytes_per_second: float


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class EdgeState:
    """The observed state of one edge of the node's graph, as edge health judges it.

    ``edge``: the edge's id (edge health's ``<device>/<kind>``: ``GPU3/pcie``, ``GPU1/nvlink``,
    ``mlx5_2/port1``); ``kind``: ``pcie``, ``nvlink``, ``port`` or ``fabric`` (``nodetopo.model.EdgeKind``);
    ``reason`` why it is degraded (the rules that fired, joined with ``+``).
    """

    edge: str
    kind: str
    degraded: bool
    reason: str | None = None


def edge_states(edges: Sequence[EdgeReading], report: HealthReport) -> tuple[EdgeState, ...]:
    """What ``edge_degraded`` shows after a scan: each edge ``report`` publishes degraded (1, with its
    reasons), and each other edge the scan read (0): one series per edge read, sorted by edge. An edge
    the scan read nothing of is neither healthy nor degraded, and a scan not judged (``report.judged``
    False) knows neither: no series."""
    if not report.judged:
        return ()
    degraded = {e.edge: e for e in report.degraded}
    states = [
        EdgeState(edge=e.edge, kind=e.kind.value, degraded=True, reason="+".join(e.reasons) or None)
        for e in report.degraded
    ]
    states += [
        EdgeState(edge=r.edge, kind=r.kind.value, degraded=False)
        for r in edges
        if r.known and r.edge not in degraded
    ]
    return tuple(sorted(states, key=lambda s: s.edge))


def dcgm_bus_id(address: PciAddress) -> str:
    """A PCI address as the DCGM exporter's ``pci_bus_id`` label writes it: ``00000000:3B:00.0``."""
    return f"{address.domain:08X}:{address.bus:02X}:{address.device:02X}.{address.function}"


def _joined(values: Sequence[str]) -> str | None:
    """Several values of one label, sorted and joined by ``+`` (``mlx5_0+mlx5_1``); None for none."""
    return "+".join(sorted(values)) or None


def _labels(pairs: Sequence[tuple[str, str | None]]) -> Labels:
    return tuple((k, v) for k, v in pairs if v is not None and v != "")


def leaf_of(topology: Topology) -> str | None:
    """The node's tier-0 group (leaf / ToR switch, or the cloud's local block), when known."""
    return next((t.id for t in topology.network.tiers if t.level == 0), None)


def gpu_info(topology: Topology, node: str) -> tuple[Labels, ...]:
    """``nodetopo_gpu_info``: one label set per GPU, by index."""
    leaf = leaf_of(topology)
    domain, _ = nvlink_domain(topology.fabric)
    out: list[Labels] = []
    for g in sorted(topology.gpus, key=lambda g: g.index):
        if domain is not None:
            gpu_domain: str | None = domain
        elif g.island is not None and node:
            gpu_domain = f"{node}.nvl{g.island}"
        else:
            gpu_domain = None
        out.append(
            _labels(
                (
                    ("node", node),
                    ("gpu", str(g.index)),
                    ("UUID", g.uuid),
                    ("pci_bus_id", dcgm_bus_id(g.address) if g.address is not None else None),
                    ("island", str(g.island) if g.island is not None else None),
                    ("numa_node", str(g.numa_node) if g.numa_node is not None else None),
                    ("nearest_nic", _joined(g.nearest_nics)),
                    ("nic_class", g.nic_distance.name if g.nic_distance is not None else None),
                    ("nvlink_domain", gpu_domain),
                    ("leaf", leaf),
                )
            )
        )
    return tuple(out)


def nic_info(topology: Topology, node: str) -> tuple[Labels, ...]:
    """``nodetopo_nic_info``: one label set per NIC, by name. ``switch``: the switch(es) its ports
    are cabled to, from the fabric sources; ``nearest_gpus``: the GPUs it is nearest to."""
    leaf = leaf_of(topology)
    nearest: dict[str, list[str]] = {}
    for g in topology.gpus:
        for name in g.nearest_nics:
            nearest.setdefault(name, []).append(str(g.index))
    out: list[Labels] = []
    for n in sorted(topology.nics, key=lambda n: n.name):
        names = {n.name, n.netdev} - {None}
        switches = {
            p.switch_id
            for p in topology.network.neighbours
            if p.nic in names and p.switch_id and p.peer_is_switch is not False
        }
        gpus = sorted(nearest.get(n.name, ()), key=int)
        out.append(
            _labels(
                (
                    ("node", node),
                    ("device", n.name),
                    ("netdev", n.netdev),
                    ("pci_bus_id", str(n.address) if n.address is not None else None),
                    ("numa_node", str(n.numa_node) if n.numa_node is not None else None),
                    ("link_layer", n.link_layer),
                    ("rdma", "true" if n.rdma else "false"),
                    ("nearest_gpus", "+".join(gpus) or None),
                    ("switch", _joined([s for s in switches if s is not None])),
                    ("leaf", leaf),
                )
            )
        )
    return tuple(out)


DURATION_BUCKETS: tuple[float, ...] = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0)


@dataclasses.dataclass(slots=True)
class _Histogram:
    counts: list[int]  #: per bucket (not cumulative), plus +Inf last
    total: float = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(DURATION_BUCKETS, value)] += 1
        self.total += value

    def cumulative(self) -> list[tuple[str, float]]:
        result: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip((*DURATION_BUCKETS, float("inf")), self.counts, strict=True):
            running += count
            result.append(("+Inf" if bound == float("inf") else repr(bound), float(running)))
        return result


@dataclasses.dataclass(slots=True)
class _State:
    durations: dict[str, _Histogram] = dataclasses.field(default_factory=dict)
    cycles: dict[str, int] = dataclasses.field(default_factory=dict)
    source_errors: dict[tuple[str, str], int] = dataclasses.field(default_factory=dict)
    stale: dict[str, int] = dataclasses.field(default_factory=dict)
    unavailable: dict[str, int] = dataclasses.field(default_factory=dict)
    ready: int | None = None
    consistent: int | None = None
    writes: dict[str, int] = dataclasses.field(default_factory=lambda: {"nodetopology": 0, "labels": 0})
    failures: dict[tuple[str, str], int] = dataclasses.field(default_factory=dict)
    last_success: float | None = None
    label_removals: int = 0
    gpus: int | None = None
    islands: int | None = None
    rdma_nics: int | None = None
    allocation_known: int | None = None
    gpus_held: int | None = None
    allocation_checks: dict[str, int] = dataclasses.field(default_factory=dict)
    gpu_info: tuple[Labels, ...] = ()
    nic_info: tuple[Labels, ...] = ()
    bands: tuple[ExpectedBand, ...] = ()
    edges: tuple[EdgeState, ...] = ()


class AgentStats:
    """What the agent has done so far. Written by the loop, read by the collector (and tests)."""

    def __init__(self, node_name: str = "", *, dry_run: bool = False) -> None:
        self.node_name = node_name
        self.dry_run = dry_run
        self._lock = threading.Lock()
        self._state = _State()

    def snapshot(self) -> _State:
        with self._lock:
            return copy.deepcopy(self._state)

    def record_scan(
        self,
        trigger: str,
        results: Sequence[SourceResult],
        topology: Topology,
        stale_sources: Sequence[str],
    ) -> None:
        with self._lock:
            state = self._state
            state.cycles[trigger] = state.cycles.get(trigger, 0) + 1
            for result in results:
                hist = state.durations.setdefault(result.name, _Histogram([0] * (len(DURATION_BUCKETS) + 1)))
                hist.observe(result.duration_s)
                state.stale[result.name] = 1 if result.name in stale_sources else 0
                absent = {
                    c.source for c in result.facts.conditions if c.reason is ConditionReason.UNAVAILABLE
                }
                for name in {result.name, *(c.source for c in result.facts.conditions)}:
                    state.unavailable[name] = 1 if name in absent else 0
                for cond in result.facts.conditions:
                    if cond.reason is ConditionReason.UNAVAILABLE:
                        continue  # the normal state of many nodes, not an error to count every scan
                    key = (cond.source, cond.reason.value)
                    state.source_errors[key] = state.source_errors.get(key, 0) + 1
            by_type = {c.type: c.status for c in typed_conditions(topology)}
            state.ready = 1 if by_type.get("Ready") == "True" else 0
            state.consistent = 1 if by_type.get("Consistent") == "True" else 0
            state.gpus = len(topology.gpus)
            state.islands = len(topology.nvlink_islands)
            state.rdma_nics = sum(1 for n in topology.nics if n.rdma)
            state.gpu_info = gpu_info(topology, self.node_name)
            state.nic_info = nic_info(topology, self.node_name)

    def record_bands(self, bands: Sequence[ExpectedBand]) -> None:
        """The bandwidth model's bands for this node's latest topology (replacing the last ones)."""
        with self._lock:
            self._state.bands = tuple(bands)

    def record_edges(self, edges: Sequence[EdgeState]) -> None:
        """Edge health's judgement of every observed edge (replacing the last one)."""
        with self._lock:
            self._state.edges = tuple(edges)

    def record_allocation(self, allocation: GpuAllocation, *, changed: bool, failed: bool = False) -> None:
        """One answer (or failure) of the kubelet's PodResources API; ``allocation`` is what is
        published (a failure within the grace keeps the last answer)."""
        with self._lock:
            state = self._state
            state.allocation_known = 1 if allocation.known else 0
            state.gpus_held = len(allocation.gpu_holders) if allocation.known else None
            result = "failed" if failed or not allocation.known else "changed" if changed else "unchanged"
            state.allocation_checks[result] = state.allocation_checks.get(result, 0) + 1

    def record_write(self, obj: str) -> None:
        if self.dry_run:
            return
        with self._lock:
            self._state.writes[obj] = self._state.writes.get(obj, 0) + 1

    def record_failure(self, obj: str, error: str) -> None:
        with self._lock:
            key = (obj, error)
            self._state.failures[key] = self._state.failures.get(key, 0) + 1

    def record_success(self, when: float, removed_labels: int) -> None:
        if self.dry_run:
            return
        with self._lock:
            self._state.last_success = when
            self._state.label_removals += removed_labels


class AgentCollector:
    """A prometheus-client collector: ``collect()`` builds the families from ``stats``' snapshot."""

    def __init__(self, stats: AgentStats) -> None:
        self._stats = stats

    def describe(self) -> list[Any]:
        return []  # families vary with the sources seen; describe lazily

    def collect(self) -> Iterator[Any]:
        s = self._stats.snapshot()
        ns = NAMESPACE
        info = GaugeMetricFamily(
            f"{ns}_agent_info", "nodetopo agent build and node", labels=["version", "node"]
        )
        info.add_metric([__version__, self._stats.node_name], 1.0)
        yield info

        hist = HistogramMetricFamily(
            f"{ns}_discovery_duration_seconds", "Time each discovery source took per scan", labels=["source"]
        )
        for source, h in sorted(s.durations.items()):
            hist.add_metric([source], h.cumulative(), h.total)
        yield hist

        yield _counter(f"{ns}_discovery_cycles", "Discovery scans, by trigger", ["trigger"], s.cycles)
        yield _counter(
            f"{ns}_source_errors",
            "Source conditions per scan, by reason (Unavailable, an expected absence, is not counted)",
            ["source", "reason"],
            s.source_errors,
        )
        yield _gauge(
            f"{ns}_source_stale",
            "1 while a source's facts are kept from an earlier scan",
            ["source"],
            s.stale,
        )
        yield _gauge(
            f"{ns}_source_unavailable",
            "1 while a source reports Unavailable (tool, driver or file not there: often expected)",
            ["source"],
            s.unavailable,
        )
        for name, doc, flag in (
            ("ready", "1 when the published NodeTopology is Ready, 0 when it is partial", s.ready),
            ("consistent", "1 when the sources agree (the Consistent condition), else 0", s.consistent),
        ):
            gauge = GaugeMetricFamily(f"{ns}_{name}", doc)
            if flag is not None:
                gauge.add_metric([], float(flag))
            yield gauge

        yield _counter(f"{ns}_publish_writes", "API writes made, by object", ["object"], s.writes)
        yield _counter(
            f"{ns}_publish_failures",
            "Failed publishes, by object and error class",
            ["object", "error"],
            s.failures,
        )
        last = GaugeMetricFamily(
            f"{ns}_last_successful_publish_timestamp_seconds",
            "Unix time of the last publish that succeeded (written or verified unchanged)",
        )
        if s.last_success is not None:
            last.add_metric([], s.last_success)
        yield last
        yield CounterMetricFamily(
            f"{ns}_label_removals",
            f"{PREFIX} label keys removed from the Node",
            value=float(s.label_removals),
        )
        gauges: tuple[tuple[str, str, int | None], ...] = (
            ("gpus", "GPUs in the latest topology", s.gpus),
            ("nvlink_islands", "NVLink islands in the latest topology", s.islands),
            ("rdma_nics", "RDMA NICs in the latest topology", s.rdma_nics),
            (
                "gpu_allocation_known",
                "1 while the kubelet's PodResources API says who holds each GPU, 0 while it cannot be asked",
                s.allocation_known,
            ),
            ("gpus_held", "GPUs held by a container, per the kubelet (absent while unknown)", s.gpus_held),
        )
        for name, doc, reading in gauges:
            gauge = GaugeMetricFamily(f"{ns}_{name}", doc)
            if reading is not None:
                gauge.add_metric([], float(reading))
            yield gauge
        yield _counter(
            f"{ns}_allocation_checks",
            "Answers of the kubelet's PodResources API: unchanged, changed, failed",
            ["result"],
            s.allocation_checks,
        )
        yield from self._join_families(s)

    def _join_families(self, s: _State) -> Iterator[Any]:
        """The topology join series, the bandwidth bands and the edge states (label sets vary by
        sample: an unknown fact is an absent label)."""
        ns = NAMESPACE
        node = self._stats.node_name
        for name, doc, rows in (
            ("gpu_info", "1 per GPU, labelled with its topology (join key of DCGM series: UUID)", s.gpu_info),
            (
                "nic_info",
                "1 per NIC, labelled with its topology (join key of node-exporter: device)",
                s.nic_info,
            ),
        ):
            family = GaugeMetricFamily(f"{ns}_{name}", doc)
            for labels in rows:
                family.add_sample(f"{ns}_{name}", dict(labels), 1.0)
            yield family
        families = {
            "busbw": GaugeMetricFamily(
                f"{ns}_expected_busbw_bytes_per_second",
                "The bandwidth model's expected bus bandwidth (lower and upper bound) per island and node",
            ),
            "nvlink_tx": GaugeMetricFamily(
                f"{ns}_expected_nvlink_tx_bytes_per_second",
                "The bandwidth model's expected NVLink send rate of each GPU of an island in the collective",
            ),
        }
        for band in s.bands:
            gauge = families.get(band.quantity)
            if gauge is None:
                continue
            base = _labels(
                (
                    ("node", node),
                    ("scope", band.scope),
                    ("island", str(band.island) if band.island is not None else None),
                    ("collective", band.collective),
                )
            )
            for bound, value in (
                ("lower", band.lower_bytes_per_second),
                ("upper", band.upper_bytes_per_second),
            ):
                gauge.add_sample(gauge.name, {**dict(base), "bound": bound}, value)
        yield from families.values()
        edges = GaugeMetricFamily(
            f"{ns}_edge_degraded", "1 while an edge of the node's graph is degraded, 0 while healthy"
        )
        for edge in s.edges:
            labels = _labels(
                (("node", node), ("edge", edge.edge), ("kind", edge.kind), ("reason", edge.reason))
            )
            edges.add_sample(edges.name, dict(labels), 1.0 if edge.degraded else 0.0)
        yield edges


def _counter(name: str, doc: str, labels: list[str], values: Mapping[Any, int]) -> CounterMetricFamily:
    """A counter family with one sample per entry of ``values``, in key order (see ``_samples``)."""
    return _samples(CounterMetricFamily(name, doc, labels=labels), values)


def _gauge(name: str, doc: str, labels: list[str], values: Mapping[Any, int]) -> GaugeMetricFamily:
    """A gauge family with one sample per entry of ``values``, in key order (see ``_samples``)."""
    return _samples(GaugeMetricFamily(name, doc, labels=labels), values)


_Family = TypeVar("_Family", CounterMetricFamily, GaugeMetricFamily)


def _samples(family: _Family, values: Mapping[Any, int]) -> _Family:
    """``family`` with a sample per entry of ``values``, sorted: a key is one label value, or a
    tuple of them (one per label)."""
    for key, count in sorted(values.items()):
        family.add_metric(list(key) if isinstance(key, tuple) else [key], float(count))
    return family


def make_registry(stats: AgentStats, *, process: bool = True) -> CollectorRegistry:
    """A registry with the agent collector (and the process collector: RSS, CPU, open fds)."""
    from prometheus_client import ProcessCollector

    registry = CollectorRegistry(auto_describe=False)
    registry.register(AgentCollector(stats))
    if process:
        ProcessCollector(registry=registry)
    return registry
