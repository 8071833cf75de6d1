"""Discovery: run every source through its seams, join, derive. The one entry point for a scan."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from pathlib import Path

from nodetopo import sources
from nodetopo.bundle import open_bundle
from nodetopo.host import CommandRunner, HostRoot, SubprocessRunner
from nodetopo.model import Facts, Topology
from nodetopo.reuse import ScanCache
from nodetopo.sources.base import Context, Source, SourceResult, check_essential
from nodetopo.topology.derive import derive_topology

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, slots=True)
class Scan:
    """One discovery round: the raw facts, what each source took, and the derived topology."""

    facts: Facts
    results: tuple[SourceResult, ...]
    topology: Topology
    duration_s: float


def collect(ctx: Context, selected: Sequence[Source] | None = None) -> tuple[Facts, tuple[SourceResult, ...]]:
    """Run each source (never raises for a source's failure) and merge what they observed."""
    facts = Facts()
    results: list[SourceResult] = []
    for source in selected if selected is not None else sources.ALL:
        result = check_essential(source.collect(ctx), ctx)
        log.debug(
            "source %s: %.3fs ok=%s", source.NAME, result.duration_s, result.ok, extra={"source": source.NAME}
        )
        results.append(result)
        facts = facts.merge(result.facts)
    return facts, tuple(results)


def scan(ctx: Context, selected: Sequence[Source] | None = None) -> Scan:
    """Collect and derive. Facts equal to the last scan's through ``ctx`` give back its topology (an
    unchanged node re-discovered every interval); any other facts are derived afresh (nodetopo.reuse)."""
    start = time.monotonic()
    facts, results = collect(ctx, selected)
    topology = ctx.cache.last(derive_topology)(facts)
    return Scan(facts=facts, results=results, topology=topology, duration_s=time.monotonic() - start)


def host_context(
    root: str | Path = "/",
    runner: CommandRunner | None = None,
    timeout_s: float = 20.0,
    nvml: str = "auto",
    *,
    fabric_map: str | None = None,
    cloud_metadata: str | None = None,
    cache: ScanCache | None = None,
) -> Context:
    """The seams for a live host (``root`` is ``/host`` in the DaemonSet).

    ``nvml``: ``auto`` uses the live NVML library only when ``root`` is ``/``; ``on`` also under
    another root (a container that reads the host's sysfs at /host and sees its GPUs through the
    NVIDIA container runtime); ``off`` never. ``fabric_map`` and ``cloud_metadata``: see the
    fabric sources (both off when None). ``cache``: what the scans through the context keep from
    each other (a fresh one when None; see ``Context.cache``).
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
    )


def bundle_context(path: str | Path, *, cache: ScanCache | None = None) -> Context:
    """The seams for a capture bundle: its sys/ tree, its cmd/ outputs, its NVML dump (``cache``: as
    for ``host_context``)."""
    root, runner, nvml_dump = open_bundle(path)
    # the path, not a loaded dump: the NVML source reads it, so a bad nvml.json is its condition
    return Context(
        root=root,
        runner=runner,
        nvml=nvml_dump,
        bundle=True,
        cache=cache if cache is not None else ScanCache(),
    )
