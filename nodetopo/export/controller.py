"""``nodetopo export-controller``: keep Volcano HyperNodes, Kueue's and KAI's Topology current from the
NodeTopology objects.

``nodetopo export`` writes them once; this keeps them true as nodes join and leave. Reflectors
(``nodetopo.kube.reflector``: paged list, resourceVersion watch, relist on 410) feed ``ExportState``:
each NodeTopology's ``NodePlace``, and for each target (``nodetopo.export.targets``) every object's
name, owner label, content and whether it is being deleted. A writer thread waits for a change (or the
resync period), lets a burst settle, computes what each target calls for and reconciles:

* a wanted object whose content differs from the observed one is server-side applied, field manager
  ``nodetopo-export-controller``, labelled ``OWNER_LABEL``; where the target's spec is immutable (a
  Topology's levels) the observed one is deleted first, with a UID precondition, and created again on
  the next pass;
* a wanted name taken by an object without that label is left alone (logged): it is not ours;
* an object with the label that is no longer wanted is deleted, with a UID precondition;
* an object being deleted (a finalizer holds it: Kueue keeps a Topology a ResourceFlavor names) is
  waited for, never written.

Nothing of a target is written before the NodeTopology list and that target's list completed (an
empty cache would delete every object). Failures back off with jitter and are retried; the watches
keep running meanwhile.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from nodetopo import export
from nodetopo.export.targets import FIELD_MANAGER, OWNER_LABEL, OWNER_VALUE, Target, volcano
from nodetopo.kube.pacing import retry_until_stopped
from nodetopo.kube.reflector import Handlers, Reflector, start_watching
from nodetopo.resource.identity import GROUP, VERSION
from nodetopo.resource.identity import PLURAL as NODETOPOLOGY_PLURAL

__all__ = ["FIELD_MANAGER", "OWNER_LABEL", "OWNER_VALUE"]

log = logging.getLogger(__name__)

NODETOPOLOGY_PATH = f"/apis/{GROUP}/{VERSION}/{NODETOPOLOGY_PLURAL}"
HYPERNODE_PATH = volcano().path


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Observed:
    """What the controller keeps of one object: its uid, whether it is ours, its content, and
    whether it is being deleted."""

    uid: str
    owned: bool
    content: Any
    deleting: bool = False


def _content(obj: Mapping[str, Any]) -> Any:
    """What an object says (spec, and our label's value): equal content needs no write."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return (labels.get(OWNER_LABEL), obj.get("spec"))


def observe(obj: Mapping[str, Any]) -> tuple[str, Observed]:
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    owned = labels.get(OWNER_LABEL) == OWNER_VALUE
    uid = str(meta.get("uid") or "")
    deleting = bool(meta.get("deletionTimestamp"))
    return str(meta["name"]), Observed(uid=uid, owned=owned, content=_content(obj), deleting=deleting)


def place_of(obj: Mapping[str, Any]) -> tuple[str, export.NodePlace | None]:
    places = export.places_from_nodetopologies([obj])
    return str(obj["metadata"]["name"]), places[0] if places else None


class _Collection:
    """One reflector's view: name → compacted value, ``synced`` after the first list."""

    def __init__(self, compact: Callable[[Mapping[str, Any]], tuple[str, Any]], changed: threading.Event):
        self._lock = threading.Lock()
        self._items: dict[str, Any] = {}
        self._compact = compact
        self._changed = changed
        self.synced = threading.Event()

    def replace(self, items: Iterable[tuple[str, Any]]) -> None:
        with self._lock:
            self._items = dict(items)
        self._changed.set()

    def upsert(self, obj: dict[str, Any]) -> None:
        name, value = self._compact(obj)
        with self._lock:
            changed = self._items.get(name, ...) != value
            self._items[name] = value
        if changed:
            self._changed.set()

    def delete(self, obj: dict[str, Any]) -> None:
        name = str(obj["metadata"]["name"])
        with self._lock:
            found = self._items.pop(name, ...) is not ...
        if found:
            self._changed.set()

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return dict(self._items)

    def handlers(self) -> Handlers:
        return Handlers(self.replace, self.upsert, self.delete, self.synced, compact=self._compact)


class ExportState:
    """The NodeTopology places and, per target, the observed objects."""

    def __init__(self, targets: Iterable[Target] = (volcano(),)) -> None:
        self.changed = threading.Event()
        self.targets = tuple(targets)
        self.places = _Collection(place_of, self.changed)
        self.observed = {t.name: _Collection(observe, self.changed) for t in self.targets}

    @property
    def hypernodes(self) -> _Collection:
        return self.observed["volcano"]

    def synced(self, target: Target | None = None) -> bool:
        """The NodeTopology list and ``target``'s (every target's, without one) have completed."""
        names = [target.name] if target is not None else list(self.observed)
        return self.places.synced.is_set() and all(self.observed[n].synced.is_set() for n in names)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """What one reconcile pass does for one target: apply these bodies (forced where the object is
    already ours: a hand edit of it is overwritten), delete these (name, uid), leave these names
    alone (foreign: not ours; waiting: being deleted), and the nodes' missing levels."""

    apply: tuple[tuple[dict[str, Any], bool], ...]
    delete: tuple[tuple[str, str], ...]
    foreign: tuple[str, ...]
    missing: tuple[str, ...]
    waiting: tuple[str, ...] = ()


def desired(
    places: Iterable[export.NodePlace], target: Target | None = None
) -> tuple[dict[str, dict[str, Any]], tuple[str, ...]]:
    """The objects the places call for, by name, labelled as ours; and the nodes' missing levels."""
    return (target or volcano()).wants(sorted(places, key=lambda p: p.name))


def plan(
    places: Iterable[export.NodePlace], observed: Mapping[str, Observed], target: Target | None = None
) -> Plan:
    """Pure: the writes that make the observed objects what the places call for."""
    target = target or volcano()
    wanted, missing = desired(places, target)
    apply: list[tuple[dict[str, Any], bool]] = []
    delete: list[tuple[str, str]] = []
    foreign: list[str] = []
    waiting: list[str] = []
    for name, body in sorted(wanted.items()):
        seen = observed.get(name)
        if seen is not None and not seen.owned:
            foreign.append(name)
        elif seen is not None and seen.deleting:
            waiting.append(name)
        elif seen is None or seen.content != _content(body):
            if seen is not None and target.replace:
                delete.append((name, seen.uid))  # immutable: created again once it is gone
            else:
                apply.append((body, seen is not None))
    if target.prune or wanted:
        delete += [
            (name, seen.uid)
            for name, seen in sorted(observed.items())
            if seen.owned and not seen.deleting and name not in wanted
        ]
    return Plan(
        apply=tuple(apply),
        delete=tuple(delete),
        foreign=tuple(foreign),
        missing=missing,
        waiting=tuple(waiting),
    )


Apply = Callable[[Target, str, dict[str, Any], bool], Any]
Delete = Callable[[Target, str, str], Any]


class ExportWriter:
    """Reconciles on change (debounced) and every ``resync_s``: each target whose list completed."""

    def __init__(
        self,
        state: ExportState,
        apply: Apply,
        delete: Delete,
        *,
        debounce_s: float = 0.5,
        resync_s: float = 300.0,
        stop: threading.Event | None = None,
    ) -> None:
        self.state = state
        self.apply = apply
        self.delete = delete
        self.debounce_s = debounce_s
        self.resync_s = resync_s
        self.stop = stop or threading.Event()
        self.passes = 0
        self._reported: dict[str, tuple[tuple[str, ...], ...]] = {}

    def reconcile_once(self) -> dict[str, Plan]:
        places = [p for p in self.state.places.snapshot().values() if p is not None]
        plans: dict[str, Plan] = {}
        failed: list[Exception] = []  # one refused write does not hold the others back
        for target in self.state.targets:
            if not self.state.synced(target):
                continue
            todo = plan(places, self.state.observed[target.name].snapshot(), target)
            plans[target.name] = todo
            for body, force in todo.apply:
                try:
                    self.apply(target, body["metadata"]["name"], body, force)
                except Exception as e:  # noqa: BLE001 - raised below, after the other writes
                    failed.append(e)
            for name, uid in todo.delete:
                try:
                    self.delete(target, name, uid)
                except Exception as e:  # noqa: BLE001 - raised below, after the other writes
                    failed.append(e)
            self._report(target, todo)
            if todo.apply or todo.delete:
                log.info(
                    "%s (%s) reconciled from %d node(s): %d applied, %d deleted",
                    target.kind,
                    target.name,
                    len(places),
                    len(todo.apply),
                    len(todo.delete),
                )
        self.passes += 1
        if failed:
            raise failed[0]
        return plans

    def _report(self, target: Target, todo: Plan) -> None:
        """Say each foreign, waiting and missing line once, until it changes."""
        said = (todo.foreign, todo.waiting, todo.missing)
        if self._reported.get(target.name) == said:
            return
        for name in todo.foreign:
            log.warning(
                "%s %s exists and is not labelled %s=%s: left alone",
                target.kind,
                name,
                OWNER_LABEL,
                OWNER_VALUE,
            )
        for name in todo.waiting:
            log.warning("%s %s is being deleted (a finalizer holds it): waiting", target.kind, name)
        for line in todo.missing:
            log.warning("%s: %s", target.name, line)
        self._reported[target.name] = said

    def run(self) -> None:
        while not self.stop.is_set() and not self.state.places.synced.is_set():
            self.stop.wait(0.2)
        retry_until_stopped(
            self.stop, self._reconcile_changed, what="reconciling", log=log, then=self._wait_for_change
        )

    def _reconcile_changed(self) -> None:
        self.state.changed.clear()
        self.reconcile_once()

    def _wait_for_change(self) -> None:
        started = time.monotonic()
        if self.state.changed.wait(self.resync_s) and not self.stop.is_set():
            self.stop.wait(max(0.0, self.debounce_s - (time.monotonic() - started)))


def session_writes(session: Any) -> tuple[Apply, Delete]:
    """(apply, delete) over a ``nodetopo.kube.session.ApiSession``."""

    def apply(target: Target, name: str, body: dict[str, Any], force: bool) -> Any:
        return session.apply_cluster_object(
            target.group, target.version, target.plural, name, body, status=False, force=force
        )

    def delete(target: Target, name: str, uid: str) -> Any:
        return session.delete_cluster_object(target.group, target.version, target.plural, name, uid=uid)

    return apply, delete


def start_reflectors(
    connection: Any, state: ExportState, *, page_size: int = 100, stop: threading.Event | None = None
) -> tuple[Reflector, ...]:
    """Start the NodeTopology reflector and one per target, feeding ``state`` over ``connection``."""
    started = []
    watched = [(NODETOPOLOGY_PATH, state.places)]
    watched += [(target.path, state.observed[target.name]) for target in state.targets]
    for path, collection in watched:
        started.append(
            start_watching(connection, path, collection.handlers(), page_size=page_size, stop=stop)
        )
    return tuple(started)
