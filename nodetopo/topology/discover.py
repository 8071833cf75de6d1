"""Discovery: run every source through its seams, join, judge the links, derive. The one entry point
for a scan.

A scan reads every source, then the links of the devices they found (``sources.links``), derives
the topology as if every link were healthy, judges each edge with the rules of ``nodetopo.health``
(through ``judge``: the agent's tracker, which debounces over scans; by default one judgement of
this scan alone), and derives again without the edges published degraded (islands shrink, NIC
classes move). Both derivations are reused while their inputs are equal (``Context.cache``).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from nodetopo import sources
from nodetopo.bundle import open_bundle
from nodetopo.health.policy import DEFAULT_POLICY, HealthPolicy
from nodetopo.health.rules import EdgeReading, edge_readings
from nodetopo.health.tracker import HealthTracker
from nodetopo.host import CommandRunner, HostRoot, SubprocessRunner
from nodetopo.model import NO_READINGS, EdgeHealth, Facts, HealthReport, Topology
from nodetopo.reuse import ScanCache
from nodetopo.sources import links
from nodetopo.sources.base import Context, Source, SourceResult, check_essential
from nodetopo.topology.derive import derive_topology

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, slots=True)
class Scan:
    """One discovery round: the raw facts, what each source took, the derived topology (with its
    health), and the edges judged."""

    facts: Facts
    results: tuple[SourceResult, ...]
    topology: Topology
    duration_s: float
    edges: tuple[EdgeReading, ...] = ()


class Judge(Protocol):
    """Judges one scan's edges (``HealthTracker``)."""

    policy: HealthPolicy

    def judge(self, readings: Sequence[EdgeReading], now: float) -> HealthReport: ...


def collect(ctx: Context, selected: Sequence[Source] | None = None) -> tuple[Facts, tuple[SourceResult, ...]]:
    """Run each source (never raises for a source's failure) and merge what they observed, then read
    the links of the devices found (``sources.links``)."""
    facts = Facts()
    results: list[SourceResult] = []
    for source in selected if selected is not None else sources.ALL:
        result = check_essential(source.collect(ctx), ctx)
        log.debug(
            "source %s: %.3fs ok=%s", source.NAME, result.duration_s, result.ok, extra={"source": source.NAME}
        )
        results.append(result)
        facts = facts.merge(result.facts)
    if selected is None or any(s.NAME in ("sysfs.pci", "sysfs.rdma") for s in selected):
        result = links.collect(ctx, facts)
        results.append(result)
        facts = facts.merge(result.facts)
    return facts, tuple(results)


def derive_healthy(facts: Facts, degraded: tuple[EdgeHealth, ...]) -> Topology:
    """``derive_topology`` of a scan with degraded edges (its own function: the scan cache keeps one
    result per function, so the derivation without health and this one do not evict each other)."""
    return derive_topology(facts, degraded)


def judged(ctx: Context, facts: Facts, judge: Judge, now: float) -> tuple[Topology, tuple[EdgeReading, ...]]:
    """The topology of ``facts`` with its links judged by ``judge`` at ``now`` (wall-clock seconds)."""
    topology_facts = dataclasses.replace(facts, health=NO_READINGS)
    plain = ctx.cache.last(derive_topology)(topology_facts)
    # pure: an unchanged node's edges are the last scan's (the tracker judges them again: its rates move)
    edges = ctx.cache.last(edge_readings)(facts, plain, judge.policy)
    report = judge.judge(edges, now)
    topology = ctx.cache.last(derive_healthy)(topology_facts, report.degraded) if report.degraded else plain
    return ctx.cache.last(with_health)(topology, report), edges


def with_health(topology: Topology, report: HealthReport) -> Topology:
    """``topology`` carrying ``report`` (cached: an unchanged node gives back the same topology)."""
    return dataclasses.replace(topology, health=report)


def scan(
    ctx: Context,
    selected: Sequence[Source] | None = None,
    *,
    judge: Judge | None = None,
    now: float | None = None,
) -> Scan:
    """Collect, judge the links and derive. Facts equal to the last scan's through ``ctx`` give back
    its topology (an unchanged node re-discovered every interval); any other facts are derived
    afresh (nodetopo.reuse). ``judge``: the agent's tracker; by default this scan is judged alone
    (``HealthPolicy.one_shot``: nothing to debounce, no rates, no ``since``: the output of one
    scan depends only on what it read). ``now``: the wall-clock time of the
    scan (default: now)."""
    start = time.monotonic()
    facts, results = collect(ctx, selected)
    if judge is None:
        judge = HealthTracker(DEFAULT_POLICY.one_shot(), keep_baseline=False, record_since=False)
    topology, edges = judged(ctx, facts, judge, time.time() if now is None else now)
    return Scan(
        facts=facts, results=results, topology=topology, duration_s=time.monotonic() - start, edges=edges
    )


def host_context(
    root: str | Path = "/",
    runner: CommandRunner | None = None,
    timeout_s: float = 20.0,
    nvml: str = "auto",
    *,
    fabric_map: str | None = None,
    cloud_metadata: str | None = None,
    cache: ScanCache | None = None,
    rescans: bool = False,
) -> Context:
    """The seams for a live host (``root`` is ``/host`` in the DaemonSet).

    ``nvml``: ``auto`` uses the live NVML library only when ``root`` is ``/``; ``on`` also under
    another root (a container that reads the host's sysfs at /host and sees its GPUs through the
    NVIDIA container runtime); ``off`` never. ``fabric_map`` and ``cloud_metadata``: see the
    fabric sources (both off when None). ``cache``: what the scans through the context keep from
    each other (a fresh one when None; see ``Context.cache``); ``rescans``: the context is scanned
    again and again (the agent; see ``Context.rescans``).
    """
    live = {"auto": None, "on": True, "off": False}[nvml]
    return Context(
        root=HostRoot(root),
        runner=runner or SubprocessRunner(),
        command_timeout_s=timeout_s,
        live_nvml=live,
        fabric_map=fabric_map,
        cloud_metadata=cloud_metadata,
        cache=cache if cache is not None else ScanCache(),
        rescans=rescans,
    )


def bundle_context(path: str | Path, *, cache: ScanCache | None = None, rescans: bool = False) -> Context:
    """The seams for a capture bundle: its sys/ tree, its cmd/ outputs, its NVML dump (``cache``,
    ``rescans``: as for ``host_context``)."""
    root, runner, nvml_dump = open_bundle(path)
    # the path, not a loaded dump: the NVML source reads it, so a bad nvml.json is its condition
    return Context(
        root=root,
        runner=runner,
        nvml=nvml_dump,
        bundle=True,
        cache=cache if cache is not None else ScanCache(),
        rescans=rescans,
    )
