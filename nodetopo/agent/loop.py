"""The agent's loop: discover, publish on change, sleep; wake early for debounced hot-plug events.

Schedule:

* the first scan after ``uniform(0, start_delay_max)`` (a fleet rollout does not hit the API
  server at once); ``--once`` starts at once;
* then every ``interval × uniform(1 - jitter, 1 + jitter)``;
* a burst of udev events becomes ONE scan, ``debounce`` after the last event of the burst (at the
  latest ``debounce_max`` after its first event);
* at most one forced resync (``AgentPublisher.resync``: compare with the server again) per
  ``resync`` seconds.

Error policy:

* a ``PublishError`` whose class is retryable → exponential backoff with jitter (``Retry-After``
  as a floor), then a fresh scan and publish;
* a fatal one (Forbidden, Invalid) → ``run`` returns 1 (the kubelet restarts the pod). A conflict
  never is: the publish chain takes back the fields the agent owns (an admin's label on one of its
  keys; ``nodetopo.publish.ownership``), and any other conflict is retried with backoff;
* any other exception → logged with its traceback, this cycle's publish skipped, the loop goes on.

``stop()`` (SIGTERM) lets the current scan and write finish, then ``run`` returns 0. Nothing is
removed on the way out: the labels and the NodeTopology belong to the Node.

Every clock, sleep and random source is a constructor parameter; so is the publisher and the event
source. Tests drive the loop on a fake clock without touching private attributes.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import random as random_module
import threading
import time
from collections.abc import Callable, Iterable, Mapping

from nodetopo.agent.bands import BandCache
from nodetopo.agent.config import AgentConfig
from nodetopo.agent.health import Health
from nodetopo.agent.metrics import AgentStats, edge_states
from nodetopo.agent.publisher import AgentPublisher, failed_object
from nodetopo.agent.staleness import StaleKeeper
from nodetopo.agent.udev import EventSource, NoEvents
from nodetopo.errors import ForbiddenError, PublishError
from nodetopo.kube.pacing import Backoff
from nodetopo.kubelet.allocation import allocation_of
from nodetopo.model import GpuAllocation, KubeletAllocation, Topology
from nodetopo.resource.body import to_nodetopology
from nodetopo.resource.labels import node_labels, uncertain_keys
from nodetopo.resource.reader import read_nodetopology
from nodetopo.topology.discover import Scan
from nodetopo.topology.interop import align_with_labels

log = logging.getLogger(__name__)

#: How long after publishing started failing a 403 is still taken for a recovering API server
#: (RBAC caches not yet synced after a restart) and retried, instead of being fatal.
FORBIDDEN_GRACE_S = 60.0


class Debouncer:
    """Collapses a burst of events into one due time (thread-safe)."""

    def __init__(self, quiet_s: float, max_s: float, *, clock: Callable[[], float]) -> None:
        self.quiet_s = quiet_s
        self.max_s = max(max_s, quiet_s)
        self._clock = clock
        self._lock = threading.Lock()
        self._first: float | None = None
        self._last: float | None = None
        self.pending = 0  #: events in the current burst
        self.total = 0  #: events seen since start

    def add(self) -> None:
        with self._lock:
            now = self._clock()
            if self._first is None:
                self._first = now
            self._last = now
            self.pending += 1
            self.total += 1

    def due_at(self) -> float | None:
        """When the current burst should be acted on (None: no events pending)."""
        with self._lock:
            if self._first is None or self._last is None:
                return None
            return min(self._last + self.quiet_s, self._first + self.max_s)

    def clear(self) -> int:
        """Forget the pending burst (a scan is starting); return how many events it held."""
        with self._lock:
            count, self.pending = self.pending, 0
            self._first = self._last = None
            return count


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CycleOutcome:
    """What one scan + publish did."""

    trigger: str
    published: bool  #: the publish succeeded (written or unchanged)
    written: tuple[str, ...] = ()  #: objects written: "nodetopology", "labels"
    removed_labels: tuple[str, ...] = ()
    error: BaseException | None = None
    fatal: bool = False
    retry_in: float | None = None  #: back off this long, then try again


class Agent:
    """One node's agent. ``run()`` is the loop; ``run_cycle()`` is one scan + publish."""

    def __init__(
        self,
        config: AgentConfig,
        *,
        scan: Callable[[], Scan],
        publisher: AgentPublisher,
        events: EventSource | None = None,
        stats: AgentStats | None = None,
        health: Health | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] | None = None,
        random: Callable[[], float] = random_module.random,
        allocation: Callable[[], KubeletAllocation | str] | None = None,
        node_labels: Callable[[], Mapping[str, str]] | None = None,
    ) -> None:
        self.config = config
        self._scan = scan
        #: reads the labels of the agent's own Node (GFD's ``nvidia.com/gpu.*``); None: never
        self._read_node_labels = node_labels
        #: asks the kubelet which container holds which device (a str: why it could not); None: never
        self._read_allocation = allocation
        self._observed: KubeletAllocation | str | None = None  #: the last answer (or reason)
        self._last_good_allocation: KubeletAllocation | None = None
        self._allocation_failing_since: float | None = None  #: start of the current run of failures
        self._topology: Topology | None = None  #: the last scan's topology, for allocation changes
        self._next_allocation_at = clock()
        self.publisher = publisher
        self.events: EventSource = events if events is not None else NoEvents()
        self.stats = stats if stats is not None else AgentStats(config.node_name, dry_run=config.dry_run)
        #: the bandwidth model's bands of the latest topology, computed again when it changes
        self.bands = BandCache(config.node_name)
        self._clock = clock
        self._wall_clock = wall_clock
        self._random = random
        self.health = (
            health
            if health is not None
            else Health(
                clock=clock,
                interval_s=config.interval_seconds,
                min_grace_s=3 * config.command_timeout_seconds,
            )
        )
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._sleep = sleep if sleep is not None else self._wait
        self.debouncer = Debouncer(config.debounce_seconds, config.debounce_max_seconds, clock=clock)
        self.backoff = Backoff(config.backoff_initial_seconds, config.backoff_max_seconds, random=random)
        self._failing_since: float | None = None  #: start of the current run of failed publishes
        self.keeper = StaleKeeper(wall_clock=wall_clock)
        self.outcomes: list[CycleOutcome] = []  #: the last outcomes (at most 100), oldest first
        self.events_available = False
        self._last_applied: dict[str, str] | None = None
        self._last_resync = clock()

    # ---- control (any thread) --------------------------------------------------------------

    def stop(self) -> None:
        """Finish the current scan and write, then leave ``run`` with 0. Safe from a signal handler."""
        self._stop.set()
        self._wake.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def notify(self, event: str = "") -> None:
        """A hot-plug event (the event source's callback): rediscover after the burst settles."""
        log.debug("event: %s", event)
        self.debouncer.add()
        self._wake.set()

    def _wait(self, seconds: float) -> None:
        self._wake.wait(max(0.0, seconds))
        self._wake.clear()

    # ---- schedule --------------------------------------------------------------------------

    def start_delay(self) -> float:
        return 0.0 if self.config.once else self._random() * self.config.start_delay_max_seconds

    def next_interval(self) -> float:
        spread = self.config.jitter * (2 * self._random() - 1)
        return self.config.interval_seconds * (1 + spread)

    def _sleep_until(self, deadline: float, *, wake_for_events: bool) -> None:
        while not self._stop.is_set():
            now = self._clock()
            wake = deadline
            due = self.debouncer.due_at() if wake_for_events else None
            if due is not None:
                wake = min(wake, due)
            if now >= wake:
                return
            if self._allocation_due(now):
                self.check_allocation()
                continue
            if self._read_allocation is not None and self._topology is not None:
                wake = min(wake, self._next_allocation_at)
            self.health.beat(wake - now)
            self._sleep(wake - now)

    def _allocation_due(self, now: float) -> bool:
        """Between scans, while publishing works: is it time to ask the kubelet again?"""
        return (
            self._read_allocation is not None
            and self._topology is not None
            and self._failing_since is None
            and now >= self._next_allocation_at
        )

    def _allocation(self, topology: Topology) -> tuple[GpuAllocation | None, bool]:
        """Ask the kubelet (when configured) and join its answer to ``topology``'s GPUs; the
        allocation (None: not asked) and whether the answer differs from the last one.

        A failure right after good answers (a kubelet restart takes seconds, and its device
        assignments survive it in its checkpoint) keeps the last good answer for up to
        ``allocation_grace_seconds``, so a restart neither writes the NodeTopology twice nor sends the
        extender back to estimating; a failure that lasts longer makes the allocation Unknown."""
        if self._read_allocation is None:
            return None, False
        before = self._observed
        answer = self._read_allocation()
        now = self._clock()
        self._next_allocation_at = now + self.config.allocation_interval_seconds
        failed = isinstance(answer, str)
        if isinstance(answer, str):
            if self._allocation_failing_since is None:
                self._allocation_failing_since = now
            waited = now - self._allocation_failing_since
            if self._last_good_allocation is not None and waited < self.config.allocation_grace_seconds:
                if waited == 0:
                    log.warning(
                        "kubelet PodResources: %s; keeping its last answer for up to %.0fs",
                        answer,
                        self.config.allocation_grace_seconds,
                    )
                answer = self._last_good_allocation
        else:
            if self._allocation_failing_since is not None:
                log.info("kubelet PodResources answers again")
            self._allocation_failing_since = None
            self._last_good_allocation = answer
        self._observed = answer
        allocation = allocation_of(topology, answer)
        changed = answer != before
        self.stats.record_allocation(allocation, changed=changed and before is not None, failed=failed)
        return allocation, changed

    def check_allocation(self) -> CycleOutcome | None:
        """Ask the kubelet again; when its answer changed, publish the NodeTopology (not the labels:
        they depend on the topology only). Never raises. None when nothing changed."""
        if self._read_allocation is None or self._topology is None:
            return None
        try:
            allocation, changed = self._allocation(self._topology)
            if not changed or allocation is None:
                return None
            body = to_nodetopology(self._topology, self.config.node_name, allocation)
            log.info(
                "GPU allocation changed: %s",
                "; ".join(
                    f"GPU {i}: {', '.join(f'{h.namespace}/{h.name}' for h in hs)}"
                    for i, hs in allocation.gpu_holders
                )
                if allocation.known
                else allocation.message,
                extra={"node": self.config.node_name, "trigger": "allocation"},
            )
            outcome = self._publish("allocation", body, None, ())
        except Exception as e:  # the loop's policy: log, skip this publish, go on
            log.exception("allocation check failed unexpectedly; skipping this publish")
            outcome = CycleOutcome(trigger="allocation", published=False, error=e)
        self.outcomes.append(outcome)
        del self.outcomes[:-100]
        if outcome.fatal:
            self.stop()
        return outcome

    # ---- the loop --------------------------------------------------------------------------

    def run(self) -> int:
        """The loop. Returns the process exit code: 0 (stopped, or ``--once`` published), 1 (fatal)."""
        if not self.config.once:
            self.events_available = self.events.start(self.notify)
            if not self.events_available:
                log.info("no hot-plug events: rediscovering every %.0fs only", self.config.interval_seconds)
        try:
            return self._loop()
        finally:
            self.events.stop()

    def _loop(self) -> int:
        self._sleep_until(self._clock() + self.start_delay(), wake_for_events=False)
        trigger = "start"
        attempts = 0
        while not self._stop.is_set():
            self.health.beat()
            self.debouncer.clear()
            outcome = self.run_cycle(trigger)
            attempts += 1
            if outcome.fatal:
                return 1
            if self.config.once:
                if outcome.published:
                    return 0
                if outcome.retry_in is None or attempts >= self.config.once_attempts:
                    log.error("--once: giving up after %d attempt(s)", attempts)
                    return 1
            if outcome.retry_in is not None:
                deadline, scheduled = self._clock() + outcome.retry_in, "retry"
            else:
                deadline, scheduled = self._clock() + self.next_interval(), "interval"
            self._sleep_until(deadline, wake_for_events=not self.config.once)
            trigger = scheduled if self._clock() >= deadline else "udev"
        log.info("stopping: nothing removed (the labels and the NodeTopology stay with the Node)")
        return 0

    def run_cycle(self, trigger: str = "manual") -> CycleOutcome:
        """One scan and publish. Never raises (the outcome says what happened)."""
        try:
            outcome = self._cycle(trigger)
        except Exception as e:  # the loop's policy: log, skip this publish, go on
            log.exception("cycle (%s) failed unexpectedly; skipping this publish", trigger)
            outcome = CycleOutcome(trigger=trigger, published=False, error=e)
        self.outcomes.append(outcome)
        del self.outcomes[:-100]
        return outcome

    def _cycle(self, trigger: str) -> CycleOutcome:
        scan = self.keeper.apply(self._scan())
        topology = align_with_labels(scan.topology, self._node_labels())
        self.stats.record_scan(trigger, scan.results, topology, self.keeper.stale_sources)
        self.stats.record_bands(self.bands.bands(topology))
        self.stats.record_edges(edge_states(scan.edges, topology.health))
        self._topology = topology
        body = to_nodetopology(topology, self.config.node_name, self._allocation(topology)[0])
        labels = node_labels(body)
        uncertain = uncertain_keys(topology)
        rdma_nics = sum(1 for n in topology.nics if n.rdma)
        ready = read_nodetopology(body, sections={"conditions"}).facts.condition("Ready")
        log.info(
            "scan (%s) in %.2fs: %d GPUs, %d NVLink islands, %d RDMA NICs%s",
            trigger,
            scan.duration_s,
            len(topology.gpus),
            len(topology.nvlink_islands),
            rdma_nics,
            f"; stale: {', '.join(self.keeper.stale_sources)}" if self.keeper.stale_sources else "",
            extra={  # the facts as fields of a JSON log line
                "node": self.config.node_name,
                "trigger": trigger,
                "duration_s": round(scan.duration_s, 3),
                "gpus": len(topology.gpus),
                "nvlink_islands": len(topology.nvlink_islands),
                "rdma_nics": rdma_nics,
                "ready": ready is not None and ready.status == "True",
                "reason": ready.reason if ready is not None else None,
                "stale": list(self.keeper.stale_sources),
            },
        )
        if self._clock() - self._last_resync >= self.config.resync_seconds:
            log.info("periodic resync: comparing with the server again")
            self.publisher.resync()
            self._last_resync = self._clock()
        return self._publish(trigger, body, labels, uncertain)

    def _node_labels(self) -> Mapping[str, str] | None:
        """The Node's labels, or None (not configured, or the read failed: then nothing is compared
        and no label is taken in this scan)."""
        if self._read_node_labels is None:
            return None
        try:
            return self._read_node_labels()
        except (PublishError, ValueError) as e:  # a failed read is an unknown, never an empty label set
            log.warning("could not read the Node's labels: %s; not comparing with them this scan", e)
            return None

    def _publish(
        self, trigger: str, body: dict[str, object], labels: dict[str, str] | None, uncertain: Iterable[str]
    ) -> CycleOutcome:
        """Publish ``body`` and ``labels`` (None: the NodeTopology only)."""
        try:
            if labels is None:
                topology_only = self.publisher.publish_topology(body)
                result = None
            else:
                result = self.publisher.publish(body, labels, uncertain_keys=uncertain)
        except PublishError as e:
            obj = failed_object(e)
            self.stats.record_failure(obj, type(e).__name__)
            now = self._clock()
            recovering = self._failing_since is not None and now - self._failing_since < FORBIDDEN_GRACE_S
            if self._failing_since is None:
                self._failing_since = now
            if isinstance(e, ForbiddenError) and recovering:
                # A kube-apiserver that has just come back answers 403 until its RBAC caches have
                # synced: inside a run of failures, Forbidden is retried for a while, not fatal.
                log.warning("publish forbidden while the API server recovers; retrying: %s", e)
            elif not e.retryable:
                log.error("publish failed (%s, fatal: %s): %s", obj, type(e).__name__, e)
                return CycleOutcome(trigger=trigger, published=False, error=e, fatal=True)
            delay = self.backoff.next_delay(e.retry_after)
            log.warning(
                "publish failed (%s: %s), attempt %d; retrying in %.1fs",
                type(e).__name__,
                e,
                self.backoff.failures,
                delay,
            )
            return CycleOutcome(trigger=trigger, published=False, error=e, retry_in=delay)
        self.backoff.reset()
        self._failing_since = None
        if result is None:
            if topology_only.written:
                self.stats.record_write("nodetopology")
            return CycleOutcome(
                trigger=trigger, published=True, written=("nodetopology",) if topology_only.written else ()
            )
        written = tuple(
            name
            for name, done in (("nodetopology", result.topology.written), ("labels", result.labels.written))
            if done
        )
        for name in written:
            self.stats.record_write(name)
        applied = dict(result.labels.applied)
        removed = tuple(sorted(set(self._last_applied or ()) - set(applied)))
        if removed:
            log.info("labels removed (absent in consecutive clean scans): %s", ", ".join(removed))
        self._last_applied = applied
        self.stats.record_success(self._wall_clock(), len(removed))
        self.health.mark_ready()
        return CycleOutcome(trigger=trigger, published=True, written=written, removed_labels=removed)


def jitter_bounds(config: AgentConfig) -> tuple[float, float]:
    """The shortest and longest interval the loop may pick (for docs and tests)."""
    return (
        config.interval_seconds * (1 - config.jitter),
        math.nextafter(config.interval_seconds * (1 + config.jitter), math.inf),
    )
