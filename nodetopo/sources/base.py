"""What every source returns, and the boundary that turns errors into conditions."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Protocol

from nodetopo.errors import ParseError
from nodetopo.host import CommandError, CommandRunner, HostRoot
from nodetopo.model import Condition, ConditionReason, Facts, SourceStatus
from nodetopo.reuse import ScanCache
from nodetopo.sources.commands import Command, describe

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SourceResult:
    """What one source observed (``facts``) plus how it fared, and how long it took."""

    name: str
    facts: Facts
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return all(status.ok for status in self.facts.sources)


#: Sources without which a node's topology is unknown, and how to tell that one observed nothing.
#: Every Linux host with GPUs or RDMA NICs has PCI functions and at least one NUMA node (a
#: non-NUMA kernel still has ``cpu/online``, which the NUMA source reads as node 0): when either is
#: empty, the host root is wrong (``/sys`` not mounted where ``--host-root`` says, an empty
#: directory) and every fact read under it, zeros included, would be a confident wrong answer.
#: Any other source may be absent on a healthy node (no ``ibstat`` on a CPU node, no driver).
ESSENTIAL: dict[str, Callable[[Facts], bool]] = {
    "sysfs.pci": lambda facts: bool(facts.pci_devices),
    "sysfs.numa": lambda facts: bool(facts.numa_nodes),
}


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Context:
    """The seams a source may use. ``nvml`` is an ``NvmlApi`` or None (see sources.nvml)."""

    root: HostRoot
    runner: CommandRunner
    #: an ``NvmlApi``, or the path of an ``nvml.json`` dump, or None for the live library
    nvml: object | None = None
    #: use the live NVML library: None = only when ``root`` is this system's ``/``. The DaemonSet
    #: reads sysfs under ``/host`` but sees the host's GPUs through the NVIDIA runtime: it sets True.
    live_nvml: bool | None = None
    command_timeout_s: float = 20.0
    #: a fabric map written by ``nodetopo fabric`` (InfiniBand leaf/tiers for every host port);
    #: None: each InfiniBand port asks only the switch at its far end (see sources.fabric.infiniband)
    fabric_map: str | None = None
    #: cloud instance metadata as ``<provider>=<base URL>`` (gce, aws, oci); None = off (the default)
    cloud_metadata: str | None = None
    cloud_timeout_s: float = 1.0
    #: ``root`` is a capture bundle (an absent file is "not in the bundle")
    bundle: bool = False
    #: what the sources and the derivations keep from the last scan through this context, to give
    #: back for an equal input (nodetopo.reuse): one per agent, shared with nothing else
    cache: ScanCache = dataclasses.field(default_factory=ScanCache, compare=False, repr=False)
    #: the context is scanned again and again (the agent): ``sysfs.links`` keeps its files open
    #: between scans, in ``cache`` (``sources.linkfiles``); a one-off scan opens and closes each
    rescans: bool = False


class Source(Protocol):
    """A source module: ``NAME``, the commands it runs (``COMMANDS``, see sources.commands) and
    ``collect``."""

    NAME: str
    COMMANDS: tuple[Command, ...]

    def collect(self, ctx: Context) -> SourceResult: ...


def condition(source: str, reason: ConditionReason, message: str) -> Condition:
    return Condition(source=source, reason=reason, message=message)


def failure_level(reason: ConditionReason) -> int:
    """The level a source logs a failure at: a missing tool or driver is the normal state of many
    nodes (no ibstat on an Ethernet node), said at info level; anything else is worth a warning."""
    return logging.INFO if reason is ConditionReason.UNAVAILABLE else logging.WARNING


def failed(name: str, reason: ConditionReason, message: str) -> Facts:
    """Facts for a source that observed nothing, with the reason as its only condition."""
    log.log(failure_level(reason), "source %s: %s: %s", name, reason.value, message, extra={"source": name})
    return unobserved(name, reason, message)


def unobserved(name: str, reason: ConditionReason, message: str) -> Facts:
    """``failed``'s facts without its log line (for a caller that logs them itself)."""
    return Facts(
        sources=(SourceStatus(name=name, ok=False, message=f"{reason.value}: {message}"),),
        conditions=(condition(name, reason, message),),
    )


def settled(facts: Facts) -> Facts:
    """``facts`` with a source's status made to agree with its conditions: a source that reports
    any condition of its own is not ok (a status says ok only when it had nothing to say), so no
    source is both "ok" and listed under its own Unavailable/ParseError/... condition."""

    def has_own(status: SourceStatus) -> bool:
        # nvidia-smi reports its commands' statuses (``nvidia-smi topo -m``) under the source name,
        # each condition's message starting with the command
        return any(
            c.source == status.name
            or (status.name.startswith(c.source + " ") and c.message.startswith(status.name + ":"))
            for c in facts.conditions
        )

    if not any(s.ok and has_own(s) for s in facts.sources):
        return facts
    sources = tuple(dataclasses.replace(s, ok=False) if s.ok and has_own(s) else s for s in facts.sources)
    return dataclasses.replace(facts, sources=sources)


def check_essential(result: SourceResult, ctx: Context) -> SourceResult:
    """``result`` with a ``Missing`` condition when it is an essential source (``ESSENTIAL``) that
    observed nothing; its ``Unavailable`` conditions become that one condition. Other results and
    essential ones that failed otherwise (ParseError, Timeout) are returned unchanged."""
    observed = ESSENTIAL.get(result.name)
    facts = result.facts
    if observed is None or observed(facts):
        return result
    if any(c.reason is not ConditionReason.UNAVAILABLE for c in facts.conditions if c.source == result.name):
        return result
    said = "; ".join(c.message for c in facts.conditions if c.source == result.name) or "no facts"
    if ctx.bundle:
        hint = f"the bundle {ctx.root.path} lacks it."
    else:
        hint = f"is the host's /sys mounted at {ctx.root.sys()}?"
    message = f"essential source observed nothing ({said}): {hint} The topology is unknown, not empty"
    log.error("source %s: %s", result.name, message, extra={"source": result.name})
    kept = tuple(c for c in facts.conditions if c.source != result.name)
    status = tuple(
        SourceStatus(name=s.name, ok=False, message=f"{ConditionReason.MISSING.value}: {said}")
        if s.name == result.name
        else s
        for s in facts.sources
    ) or (SourceStatus(name=result.name, ok=False, message=f"{ConditionReason.MISSING.value}: no facts"),)
    missing = condition(result.name, ConditionReason.MISSING, message)
    return dataclasses.replace(
        result, facts=dataclasses.replace(facts, sources=status, conditions=(missing, *kept))
    )


def guarded(name: str, collect: Callable[[], Facts]) -> SourceResult:
    """Run one source's collection, so that nothing it raises escapes as a crash.

    A ``ParseError`` that reached here (the source did not handle it itself) becomes a ParseError
    condition, and a command's failure the condition ``sources.commands`` maps it to; any other
    exception is a bug, logged with its traceback and reported as Degraded.
    """
    start = time.monotonic()
    try:
        facts = collect()
    except ParseError as e:
        facts = failed(name, ConditionReason.PARSE_ERROR, str(e))
    except CommandError as e:
        facts = failed(name, *describe(e))
    except Exception as e:
        log.exception("source %s failed unexpectedly", name, extra={"source": name})
        facts = failed(name, ConditionReason.DEGRADED, f"internal error: {type(e).__name__}: {e}")
    return SourceResult(name=name, facts=settled(facts), duration_s=time.monotonic() - start)
