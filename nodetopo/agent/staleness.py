"""A failed source keeps its last good facts, marked Stale, until it is clean again.

A missing observation is not evidence of absence. A source's round is
*failed* when it reports ParseError, Timeout, Degraded or Missing (an essential source saw
nothing), or when a part of it that answered in its last good round is now Unavailable
(nvidia-smi gone after a driver reload). A failed round with a last good round on record is
replaced by that round's facts, with this round's statuses and conditions plus a ``Stale``
condition; the topology is then derived from the merged facts. A clean round becomes the new
last good round. Memory only: a restarted agent starts afresh (the publisher then keeps the
labels it finds on the Node for sources that are not trustworthy, and the stored NodeTopology's
facts when an essential source is Missing).
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
from collections.abc import Callable, Sequence

from nodetopo.model import NO_READINGS, Condition, ConditionReason, Facts
from nodetopo.sources.base import SourceResult
from nodetopo.topology.derive import derive_topology
from nodetopo.topology.discover import Scan

log = logging.getLogger(__name__)

FAILED_REASONS = frozenset(
    {ConditionReason.PARSE_ERROR, ConditionReason.TIMEOUT, ConditionReason.DEGRADED, ConditionReason.MISSING}
)


@dataclasses.dataclass(frozen=True, slots=True)
class _Good:
    result: SourceResult
    at: float  #: wall-clock time of the round


def _unavailable(result: SourceResult) -> frozenset[str]:
    return frozenset(s.name for s in result.facts.sources if not s.ok)


def failure_of(result: SourceResult, last_good: SourceResult | None) -> str | None:
    """Why ``result`` cannot be trusted (a short text), or None when it is clean.

    Untrustworthy: a ParseError, Timeout or Degraded condition; or, compared with the last good
    round, a part that is newly not ok or a new Unavailable condition (a file that became
    unreadable, a NUMA node left out).
    """
    bad = [c for c in result.facts.conditions if c.reason in FAILED_REASONS]
    if bad:
        return "; ".join(f"{c.reason.value}: {c.message}" for c in bad)
    if last_good is not None:
        newly = sorted(_unavailable(result) - _unavailable(last_good))
        if newly:
            return "now unavailable: " + ", ".join(newly)
        known = {(c.source, c.message) for c in last_good.facts.conditions}
        new = [c for c in result.facts.conditions if (c.source, c.message) not in known]
        if new:
            return "; ".join(f"{c.reason.value}: {c.message}" for c in new)
    return None


class StaleKeeper:
    """Remembers each source's last good round and substitutes it for failed rounds."""

    def __init__(self, *, wall_clock: Callable[[], float]) -> None:
        self._wall_clock = wall_clock
        self._good: dict[str, _Good] = {}
        self.stale_sources: tuple[str, ...] = ()  #: the sources kept stale in the last ``apply``

    def apply(self, scan: Scan) -> Scan:
        """``scan`` with failed sources replaced by their last good facts (re-derived if any)."""
        now = self._wall_clock()
        results: list[SourceResult] = []
        stale: list[str] = []
        for result in scan.results:
            previous = self._good.get(result.name)
            why = failure_of(result, previous.result if previous else None)
            if why is None:
                self._good[result.name] = _Good(result, now)
                results.append(result)
            elif previous is None:
                results.append(result)
            else:
                stale.append(result.name)
                results.append(_stale(result, previous, why))
        self.stale_sources = tuple(stale)
        if not stale:
            return scan
        log.warning("keeping the last good facts of %s (marked Stale)", ", ".join(stale))
        facts = merge(results)
        # the links were judged on this scan's own readings (scan.topology.health): what is kept
        # stale is the topology's facts, derived again without the edges published degraded
        health = scan.topology.health
        topology = derive_topology(dataclasses.replace(facts, health=NO_READINGS), health.degraded)
        return Scan(
            facts=facts,
            results=tuple(results),
            topology=dataclasses.replace(topology, health=health),
            duration_s=scan.duration_s,
            edges=scan.edges,
        )


def _stale(result: SourceResult, good: _Good, why: str) -> SourceResult:
    """The last good facts with this round's statuses and conditions, led by a Stale condition for
    each part that failed (so ``status.conditions`` shows ``Stale`` for it)."""
    since = datetime.datetime.fromtimestamp(good.at, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    message = f"facts kept from the last good scan ({since}) because this one failed: {why}"
    parts = [s.name for s in result.facts.sources if not s.ok] or [result.name]
    stale = tuple(Condition(source=name, reason=ConditionReason.STALE, message=message) for name in parts)
    facts = dataclasses.replace(
        good.result.facts,
        sources=result.facts.sources,
        conditions=(*stale, *result.facts.conditions),
    )
    return dataclasses.replace(result, facts=facts)


def merge(results: Sequence[SourceResult]) -> Facts:
    facts = Facts()
    for result in results:
        facts = facts.merge(result.facts)
    return facts
