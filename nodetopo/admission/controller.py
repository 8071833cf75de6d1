"""``nodetopo summary-controller``: keep the ``NodeTopologySummary`` "cluster" current.

The one reflector (``nodetopo.kube.reflector``: paged list, then a resourceVersion watch, relist
on 410) feeds ``SummaryState``, which keeps only each node's ``NodeFacts`` (interned: identical
machines share one) and a count per distinct facts. A writer thread waits for a change, lets a burst settle
(``debounce_s``), folds the counts into the summary and server-side-applies it, as field manager
``nodetopo-summary-controller``, when its content changed, and at least every ``heartbeat_s`` so
that ``computedAt`` shows the summary is alive (the admission policies stop trusting it
``staleAfterSeconds`` after ``computedAt``). Nothing is written before the first list completed: a
summary of an empty cache would claim the cluster has nothing. Write failures back off with jitter
and are retried; the watch keeps running meanwhile.
"""

from __future__ import annotations

import datetime
import functools
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from nodetopo.admission.summary import NAME, PLURAL, SECTIONS, NodeFacts, Thresholds, facts_of, summarize
from nodetopo.kube.pacing import retry_until_stopped
from nodetopo.kube.reflector import Handlers, Reflector, start_watching
from nodetopo.resource.identity import GROUP, VERSION
from nodetopo.resource.identity import PLURAL as NODETOPOLOGY_PLURAL
from nodetopo.resource.reader import read_nodetopology

log = logging.getLogger(__name__)

FIELD_MANAGER = "nodetopo-summary-controller"
NODETOPOLOGY_PATH = f"/apis/{GROUP}/{VERSION}/{NODETOPOLOGY_PLURAL}"


class SummaryState:
    """The facts of every NodeTopology, by name, and how many nodes share each distinct facts."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_name: dict[str, NodeFacts | None] = {}
        self._counts: Counter[NodeFacts] = Counter()
        self._interned: dict[NodeFacts, NodeFacts] = {}
        self.synced = threading.Event()
        self.changed = threading.Event()
        self.changes = 0  #: applied events that changed the counts (for tests and benchmarks)

    @staticmethod
    def compact(obj: Mapping[str, Any]) -> tuple[str, NodeFacts | None]:
        read = read_nodetopology(obj, sections=SECTIONS)
        return str(obj["metadata"]["name"]), facts_of(read) if read.status is not None else None

    def _intern(self, facts: NodeFacts | None) -> NodeFacts | None:
        return None if facts is None else self._interned.setdefault(facts, facts)

    def _set(self, name: str, facts: NodeFacts | None) -> bool:
        old = self._by_name.get(name)
        if name in self._by_name and old == facts:
            return False
        if old is not None:
            self._counts[old] -= 1
            if self._counts[old] <= 0:
                del self._counts[old]
        self._by_name[name] = facts
        if facts is not None:
            self._counts[facts] += 1
        return True

    def replace(self, items: Iterable[tuple[str, NodeFacts | None]]) -> None:
        with self._lock:
            self._by_name, self._counts, self._interned = {}, Counter(), {}
            for name, facts in items:
                self._set(name, self._intern(facts))
            self.changes += 1
        self.changed.set()

    def upsert(self, obj: Mapping[str, Any]) -> None:
        name, facts = self.compact(obj)
        with self._lock:
            changed = self._set(name, self._intern(facts))
            self.changes += changed
        if changed:
            self.changed.set()

    def delete(self, obj: Mapping[str, Any]) -> None:
        name = str(obj["metadata"]["name"])
        with self._lock:
            if name not in self._by_name:
                return
            self._set(name, None)
            del self._by_name[name]
            self.changes += 1
        self.changed.set()

    def snapshot(self) -> tuple[dict[NodeFacts, int], int]:
        """(facts → node count, NodeTopology objects observed)."""
        with self._lock:
            return dict(self._counts), len(self._by_name)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _content(body: Mapping[str, Any]) -> Any:
    status = {k: v for k, v in body["status"].items() if k != "computedAt"}
    return (body["spec"], status)


class SummaryWriter:
    """Writes the summary from ``state`` on change (debounced) and on heartbeat."""

    def __init__(
        self,
        state: SummaryState,
        apply: Callable[[dict[str, Any]], Any],
        *,
        thresholds: Thresholds,
        debounce_s: float = 0.5,
        heartbeat_s: float | None = None,
        stop: threading.Event | None = None,
        clock: Callable[[], str] = _now,
    ) -> None:
        self.state = state
        self.apply = apply
        self.thresholds = thresholds
        self.debounce_s = debounce_s
        self.heartbeat_s = heartbeat_s if heartbeat_s is not None else max(1.0, thresholds.stale_after_s / 3)
        self.stop = stop or threading.Event()
        self.clock = clock
        self.writes = 0
        self.last_body: dict[str, Any] | None = None
        self._written: Any = None
        self._last_write = 0.0

    def write_once(self) -> bool:
        """Summarize now and apply when the content changed or the heartbeat is due; True if written."""
        counts, observed = self.state.snapshot()
        body = summarize(counts, computed_at=self.clock(), thresholds=self.thresholds, observed=observed)
        due = time.monotonic() - self._last_write >= self.heartbeat_s
        if _content(body) == self._written and not due:
            return False
        self.apply(body)
        self._written, self._last_write, self.last_body = _content(body), time.monotonic(), body
        self.writes += 1
        log.info(
            "summary written: %d NodeTopology objects, %d distinct shapes",
            observed,
            len(counts),
        )
        return True

    def run(self) -> None:
        while not self.stop.is_set() and not self.state.synced.wait(0.5):
            pass
        retry_until_stopped(
            self.stop,
            self._write_changed,
            what="writing the summary",
            log=log,
            then=self._wait_for_change,
            after_failure=self.state.changed.set,
        )

    def _write_changed(self) -> None:
        self.state.changed.clear()
        self.write_once()

    def _wait_for_change(self) -> None:
        remaining = max(0.0, self.heartbeat_s - (time.monotonic() - self._last_write))
        if self.state.changed.wait(remaining) and not self.stop.is_set():
            self.stop.wait(self.debounce_s)  # let a burst of changes settle into one write


def apply_with(session: Any) -> Callable[[dict[str, Any]], Any]:
    """``session.apply_cluster_object`` for the summary (a ``nodetopo.kube.session.ApiSession``)."""
    return functools.partial(session.apply_cluster_object, GROUP, VERSION, PLURAL, NAME, status=False)


def start_reflector(
    connection: Any, state: SummaryState, *, page_size: int = 100, stop: threading.Event | None = None
) -> Reflector:
    """Start the NodeTopology reflector feeding ``state`` over ``connection`` (a ``KubeConnection``)."""
    handlers = Handlers(state.replace, state.upsert, state.delete, state.synced, compact=state.compact)
    return start_watching(connection, NODETOPOLOGY_PATH, handlers, page_size=page_size, stop=stop)
