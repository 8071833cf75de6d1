"""The judge over time: counter rates between scans, and a debounce so that published health never flaps.

``HealthTracker.judge(readings, now)`` takes one scan's ``EdgeReading`` list (``nodetopo.health.rules``)
and gives the ``HealthReport`` to publish:

* **rates**: each counter's rise per hour over the judged window: from the last sample at least
  ``window_seconds`` old (else the oldest one kept) to now. A counter that went down was reset (a
  reboot, a driver reload, someone cleared it): its history starts again and it has no rate this
  scan. A saturated counter (``rules.CEILINGS``) has no rate. No rate is no vote: unknown, never clean.
* **debounce**: an edge is *published* degraded after ``scans_to_degrade`` consecutive scans that
  find it degraded, with the time of the first of them (``since``), and published healthy again
  after ``scans_to_clear`` consecutive clean scans. An edge that this scan could not read keeps its
  published state (a missing observation is not evidence of health), and is not counted as
  checked. What a published edge says
  (reasons, message, observed state, rates) is the judgement that published it; it changes only
  when its reasons change, so a counter moving on a degraded link does not rewrite the object
  every scan (the metrics carry the live rates).
* **baseline**: the counters as of ``baseline.at``, published so that a restarted agent (``seed``)
  judges rates across its restart from them instead of starting blind. Counters count since boot:
  the baseline says which boot (``baseline.boot``, the kernel's boot id), and one of another boot
  is not used (the node rebooted: its counters started again from 0, maybe above the recorded
  values by now); without a boot id on either side a counter lower than recorded is the reset.
  It is refreshed when the published set of degraded edges changes (the object is written then
  anyway), when the boot changed, and otherwise at most once per ``baseline_refresh_seconds``
  when a counter moved. ``baseline.edges`` is a short hash of the ids of every edge read: a
  counter absent from the baseline was 0 for an edge set of that hash; for another set only the
  listed counters are known.

Wall-clock seconds (``now``) everywhere: rates across a restart need the same clock on both sides.
"""

from __future__ import annotations

import bisect
import dataclasses
import datetime
import hashlib
from collections.abc import Mapping, Sequence

from nodetopo.health.policy import HealthPolicy
from nodetopo.health.rules import EdgeReading, Finding, rate_findings
from nodetopo.model import CounterBaseline, CounterRate, EdgeHealth, HealthReport

#: the most samples kept per edge (a window of 900 s at the 60 s interval holds 16)
MAX_SAMPLES = 64


def rfc3339(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(text: str) -> float | None:
    try:
        moment = datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
    except ValueError:
        return None
    return moment.timestamp()


def edge_set_hash(edges: Sequence[str]) -> str:
    """``baseline.edges``: 12 hex digits of sha256 over the sorted edge ids."""
    return hashlib.sha256("\n".join(sorted(edges)).encode()).hexdigest()[:12]


@dataclasses.dataclass(slots=True)
class Sample:
    """An edge's counters at one time; ``zeros``: a counter it does not hold was 0 (a baseline)."""

    at: float
    counters: dict[str, int]
    zeros: bool = False

    def get(self, name: str) -> int | None:
        value = self.counters.get(name)
        return 0 if value is None and self.zeros else value


@dataclasses.dataclass(slots=True)
class _Edge:
    samples: list[Sample] = dataclasses.field(default_factory=list)
    degraded_streak: int = 0
    clean_streak: int = 0
    first_degraded: float | None = None  #: the first scan of the current degraded streak
    published: EdgeHealth | None = None
    rates: dict[str, float] = dataclasses.field(default_factory=dict)  #: the last scan's rates
    #: the last scan's reading, and its counters as judged (without the saturated ones) and as kept
    #: in a sample: a reading given back unchanged (the same object) reuses both (read-only)
    reading: EdgeReading | None = None
    judged: dict[str, int] = dataclasses.field(default_factory=dict)
    kept: dict[str, int] = dataclasses.field(default_factory=dict)


def counter_rates(
    samples: Sequence[Sample], now: float, counters: Mapping[str, int], window: float
) -> dict[str, float]:
    """Each counter's rise per hour from the sample the window starts at (the last one at least
    ``window`` old, else the oldest) to ``counters`` at ``now``; a counter that went down, or that
    the start sample lacks, has no rate."""
    if not samples:
        return {}
    times = [s.at for s in samples]
    at = bisect.bisect_right(times, now - window) - 1
    start = samples[max(at, 0)]
    elapsed = now - start.at
    if elapsed <= 0:
        return {}
    rates: dict[str, float] = {}
    for name, value in counters.items():
        before = start.get(name)
        if before is None or value < before:
            continue
        rates[name] = (value - before) * 3600.0 / elapsed
    return rates


class HealthTracker:
    """Judges the edges scan after scan (module docstring). One per agent; not thread-safe."""

    def __init__(
        self, policy: HealthPolicy, *, keep_baseline: bool = True, record_since: bool = True, boot: str = ""
    ) -> None:
        self.policy = policy
        self.keep_baseline = keep_baseline
        #: the boot id of the kernel whose counters are judged ("" unknown), recorded in the baseline
        self.boot = boot
        #: False for one scan judged alone: it cannot know since when an edge has been degraded
        self.record_since = record_since
        self._edges: dict[str, _Edge] = {}
        self._baseline: CounterBaseline | None = None
        self._baseline_at: float | None = None
        #: the last scan's readings (the very same sequence: an unchanged node's, given back by
        #: ``edge_readings``), with what the baseline made of them: its counters, its edge-set hash
        self._last: (
            tuple[Sequence[EdgeReading], tuple[tuple[str, tuple[tuple[str, int], ...]], ...], str] | None
        ) = None
        #: the rates of the last scan, by edge (what the metrics show), non-zero only
        self.rates: dict[str, dict[str, float]] = {}

    # ---- a restarted agent ------------------------------------------------------------------

    def seed(self, published: HealthReport | None, edges_now: Sequence[str] = ()) -> None:
        """Start from what the last published status said (``published``): its degraded edges stay
        degraded (their streaks full) until clean scans clear them, and its baseline becomes every
        edge's first sample. ``edges_now``: the edges this node has now (a baseline for another edge
        set is used only for the counters it lists). A baseline of another boot than this
        tracker's (both known) is not used: the counters started again at the reboot."""
        if published is None or not published.judged:
            return
        for health in published.degraded:
            state = self._edges.setdefault(health.edge, _Edge())
            state.published = health
            state.degraded_streak = self.policy.scans_to_degrade
            state.first_degraded = parse_rfc3339(health.since) if health.since else None
        baseline = published.baseline
        at = parse_rfc3339(baseline.at) if baseline is not None else None
        if baseline is None or at is None:
            return
        if baseline.boot and self.boot and baseline.boot != self.boot:
            return
        listed = dict(baseline.counters)
        complete = bool(edges_now) and baseline.edges == edge_set_hash(edges_now)
        for edge in set(listed) | (set(edges_now) if complete else set()):
            state = self._edges.setdefault(edge, _Edge())
            state.samples = [Sample(at, dict(listed.get(edge, ())), zeros=complete)]
        self._baseline, self._baseline_at = baseline, at

    # ---- one scan ------------------------------------------------------------------------------

    def judge(self, readings: Sequence[EdgeReading], now: float) -> HealthReport:
        policy = self.policy
        before = {edge: state.published for edge, state in self._edges.items() if state.published is not None}
        self.rates = {}
        given = readings
        readings = [r for r in readings if r.known]
        edges = self._edges
        for reading in readings:
            state = edges.get(reading.edge)
            if state is None:
                state = edges[reading.edge] = _Edge()
            if reading is not state.reading:
                state.reading = reading
                state.judged = {k: v for k, v in reading.counters if k not in reading.saturated}
                state.kept = dict(reading.counters)
            counters = state.judged
            rates = counter_rates(state.samples, now, counters, policy.window_seconds) if counters else {}
            state.rates = rates
            rising = any(rates.values())
            if rising:
                self.rates[reading.edge] = {k: v for k, v in rates.items() if v > 0}
            _add_sample(state, now, state.kept, policy.window_seconds)
            # a rate of 0 is never above a threshold (each is at least 0)
            findings = (
                (*reading.findings, *rate_findings(reading, rates, policy)) if rising else reading.findings
            )
            if findings:
                state.clean_streak = 0
                if state.degraded_streak == 0:
                    state.first_degraded = now
                state.degraded_streak += 1
                if state.degraded_streak >= policy.scans_to_degrade:
                    state.published = _published(reading, findings, rates, state, policy, self.record_since)
            else:
                state.degraded_streak = 0
                state.first_degraded = None
                state.clean_streak += 1
                if state.published is not None and state.clean_streak >= policy.scans_to_clear:
                    state.published = None
        degraded = tuple(
            sorted(
                (s.published for s in self._edges.values() if s.published is not None), key=lambda h: h.edge
            )
        )
        changed = {h.edge: h for h in degraded} != before
        if self.keep_baseline:
            self._refresh_baseline(readings, now, changed=changed, given=given)
        return HealthReport(judged=True, checked=len(readings), degraded=degraded, baseline=self._baseline)

    def _refresh_baseline(
        self, readings: Sequence[EdgeReading], now: float, *, changed: bool, given: Sequence[EdgeReading]
    ) -> None:
        last = self._last
        if last is not None and last[0] is given and isinstance(given, tuple):
            counters, edges = last[1], last[2]
        else:
            counters = tuple(
                sorted(
                    (r.edge, tuple((k, v) for k, v in r.counters if v))
                    for r in readings
                    if any(v for _, v in r.counters)
                )
            )
            edges = edge_set_hash([r.edge for r in readings])
            self._last = (given, counters, edges)
        current = self._baseline
        moved = current is None or current.counters != counters or current.edges != edges
        due = (
            current is None
            or self._baseline_at is None
            or now - self._baseline_at >= self.policy.baseline_refresh_seconds
        )
        # a baseline of another boot, or one a counter went below (a reset: a reboot without a boot id,
        # a driver reload), is none of these counters: replaced at once
        if (
            current is None
            or changed
            or current.boot != self.boot
            or (moved and (due or _went_down(current, counters, {r.edge for r in readings})))
        ):
            self._baseline = CounterBaseline(at=rfc3339(now), edges=edges, counters=counters, boot=self.boot)
            self._baseline_at = now


def _went_down(
    baseline: CounterBaseline,
    counters: Sequence[tuple[str, tuple[tuple[str, int], ...]]],
    read: set[str],
) -> bool:
    """Whether a counter of an edge read now (``read``; ``counters``: the non-zero ones) is below what
    ``baseline`` recorded for it (an edge not read now says nothing)."""
    now = dict(counters)
    for edge, values in baseline.counters:
        if edge in read:
            mine = dict(now.get(edge, ()))
            if any(mine.get(k, 0) < v for k, v in values):
                return True
    return False


def _add_sample(state: _Edge, now: float, counters: dict[str, int], window: float) -> None:
    """Keep ``counters`` at ``now`` and the samples the next window may start at; a counter that went
    down (a reset) starts the edge's history again."""
    samples = state.samples
    if (
        samples
        and samples[-1].counters is not counters  # the very same counters: nothing went down
        and any((before := samples[-1].get(k)) is not None and v < before for k, v in counters.items())
    ):
        samples.clear()
    samples.append(Sample(now, counters))
    # the window starts at the last sample at least `window` old: keep it and everything after
    times = [s.at for s in samples]
    start = bisect.bisect_right(times, now - window) - 1
    if start > 0:
        del samples[:start]
    if len(samples) > MAX_SAMPLES:
        del samples[1 : len(samples) - MAX_SAMPLES + 1]


def _published(
    reading: EdgeReading,
    findings: Sequence[Finding],
    rates: Mapping[str, float],
    state: _Edge,
    policy: HealthPolicy,
    record_since: bool = True,
) -> EdgeHealth:
    """The edge as published: the judgement that published it, kept while its reasons are the same."""
    reasons = tuple(dict.fromkeys(f.reason for f in findings))
    if state.published is not None and state.published.reasons == reasons:
        return state.published
    judged = {c for c in rates if policy.threshold(reading.kind.value, c) is not None}
    since = state.first_degraded if record_since else None
    return EdgeHealth(
        edge=reading.edge,
        kind=reading.kind,
        device=reading.device,
        gpu=reading.gpu,
        nic=reading.nic,
        address=reading.address,
        port=reading.port,
        peer=reading.peer,
        reasons=reasons,
        message="; ".join(f.message for f in findings),
        observed=reading.observed,
        capability=reading.capability,
        since=rfc3339(since) if since is not None else None,
        rates=tuple(
            CounterRate(counter=c, per_hour=round(rates[c], 3)) for c in sorted(judged) if rates[c] > 0
        ),
    )
