"""What every source returns, and the boundary that turns errors into conditions."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Protocol

from nodetopo.errors import ParseError
from nodetopo.host import CommandRunner, HostRoot
from nodetopo.model import Condition, ConditionReason, Facts, SourceStatus

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


class Source(Protocol):
    """A source module: ``NAME`` plus ``collect``."""

    NAME: str

    def collect(self, ctx: Context) -> SourceResult: ...


def condition(source: str, reason: ConditionReason, message: str) -> Condition:
    return Condition(source=source, reason=reason, message=message)


def failed(name: str, reason: ConditionReason, message: str) -> Facts:
    """Facts for a source that observed nothing, with the reason as its only condition."""
    # A missing tool or driver is the normal state of many nodes (no ibstat on an Ethernet node):
    # say it at info level; anything else is worth a warning.
    level = logging.INFO if reason is ConditionReason.UNAVAILABLE else logging.WARNING
    log.log(level, "source %s: %s: %s", name, reason.value, message, extra={"source": name})
    return Facts(
        sources=(SourceStatus(name=name, ok=False, message=f"{reason.value}: {message}"),),
        conditions=(condition(name, reason, message),),
    )


def guarded(name: str, collect: Callable[[], Facts]) -> SourceResult:
    """Run one source's collection, so that nothing it raises escapes as a crash.

    A ``ParseError`` that reached here (the source did not handle it itself) becomes a ParseError
    condition; any other exception is a bug, logged with its traceback and reported as Degraded.
    """
    start = time.monotonic()
    try:
        facts = collect()
    except ParseError as e:
        facts = failed(name, ConditionReason.PARSE_ERROR, str(e))
    except Exception as e:
        log.exception("source %s failed unexpectedly", name, extra={"source": name})
        facts = failed(name, ConditionReason.DEGRADED, f"internal error: {type(e).__name__}: {e}")
    return SourceResult(name=name, facts=facts, duration_s=time.monotonic() - start)
