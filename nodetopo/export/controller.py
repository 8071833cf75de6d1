"""``nodetopo export-controller``: keep Volcano HyperNodes current from the NodeTopology objects.

``nodetopo export volcano`` lists node names once; this keeps that list true as nodes join and
leave. Two reflectors (``nodetopo.kube.reflector``: paged list, resourceVersion watch, relist on
410) feed ``ExportState``: each NodeTopology's ``NodePlace`` and every HyperNode's name, owner label
and content. A writer thread waits for a change (or the resync period), lets a burst settle, computes
the HyperNodes ``export.volcano`` gives for the current places and reconciles:

* a wanted HyperNode whose content differs from the observed one is server-side applied, field manager
  ``nodetopo-export-controller``, labelled ``OWNER_LABEL``;
* a wanted name taken by a HyperNode without that label is left alone (logged): it is not ours;
* a HyperNode with the label that is no longer wanted is deleted, with a UID precondition.

Nothing is written before both lists completed (an empty cache would delete every HyperNode).
Failures back off with jitter and are retried; the watches keep running meanwhile.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from nodetopo import export
from nodetopo.kube.reflector import Handlers, Reflector, list_function
from nodetopo.resource.identity import GROUP, VERSION
from nodetopo.resource.identity import PLURAL as NODETOPOLOGY_PLURAL

log = logging.getLogger(__name__)

FIELD_MANAGER = "nodetopo-export-controller"
#: the label on every HyperNode this controller writes; it deletes only objects that carry it
OWNER_LABEL = "app.kubernetes.io/managed-by"
OWNER_VALUE = FIELD_MANAGER
VOLCANO_GROUP, VOLCANO_VERSION, HYPERNODE_PLURAL = "topology.volcano.sh", "v1alpha1", "hypernodes"
NODETOPOLOGY_PATH = f"/apis/{GROUP}/{VERSION}/{NODETOPOLOGY_PLURAL}"
HYPERNODE_PATH = f"/apis/{VOLCANO_GROUP}/{VOLCANO_VERSION}/{HYPERNODE_PLURAL}"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Observed:
    """What the controller keeps of one HyperNode: its uid, whether it is ours, its content."""

    uid: str
    owned: bool
    content: Any


def _content(obj: Mapping[str, Any]) -> Any:
    """What a HyperNode says (spec, and our label's value): equal content needs no write."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return (labels.get(OWNER_LABEL), obj.get("spec"))


def observe(obj: Mapping[str, Any]) -> tuple[str, Observed]:
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    owned = labels.get(OWNER_LABEL) == OWNER_VALUE
    return str(meta["name"]), Observed(uid=str(meta.get("uid") or ""), owned=owned, content=_content(obj))


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
    """The NodeTopology places and the observed HyperNodes."""

    def __init__(self) -> None:
        self.changed = threading.Event()
        self.places = _Collection(place_of, self.changed)
        self.hypernodes = _Collection(observe, self.changed)

    def synced(self) -> bool:
        return self.places.synced.is_set() and self.hypernodes.synced.is_set()


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """What one reconcile pass does: apply these bodies (forced where the object is already ours: a
    hand edit of it is overwritten), delete these (name, uid), leave these names alone."""

    apply: tuple[tuple[dict[str, Any], bool], ...]
    delete: tuple[tuple[str, str], ...]
    foreign: tuple[str, ...]
    missing: tuple[str, ...]


def desired(places: Iterable[export.NodePlace]) -> tuple[dict[str, dict[str, Any]], tuple[str, ...]]:
    """The HyperNodes the places call for, by name, labelled as ours; and the nodes' missing levels."""
    result = export.volcano(sorted(places, key=lambda p: p.name))
    wanted: dict[str, dict[str, Any]] = {}
    for obj in result.objects:
        body = {**obj, "metadata": {**obj["metadata"], "labels": {OWNER_LABEL: OWNER_VALUE}}}
        wanted[body["metadata"]["name"]] = body
    return wanted, result.missing


def plan(places: Iterable[export.NodePlace], observed: Mapping[str, Observed]) -> Plan:
    """Pure: the writes that make the observed HyperNodes what the places call for."""
    wanted, missing = desired(places)
    apply: list[tuple[dict[str, Any], bool]] = []
    foreign: list[str] = []
    for name, body in sorted(wanted.items()):
        seen = observed.get(name)
        if seen is not None and not seen.owned:
            foreign.append(name)
        elif seen is None or seen.content != _content(body):
            apply.append((body, seen is not None))
    stale = tuple(
        (name, seen.uid) for name, seen in sorted(observed.items()) if seen.owned and name not in wanted
    )
    return Plan(apply=tuple(apply), delete=stale, foreign=tuple(foreign), missing=missing)


class ExportWriter:
    """Reconciles on change (debounced) and every ``resync_s``."""

    def __init__(
        self,
        state: ExportState,
        apply: Callable[[str, dict[str, Any], bool], Any],
        delete: Callable[[str, str], Any],
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
        self._reported: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())

    def reconcile_once(self) -> Plan:
        places = [p for p in self.state.places.snapshot().values() if p is not None]
        todo = plan(places, self.state.hypernodes.snapshot())
        failed: list[Exception] = []  # one refused write does not hold the others back
        for body, force in todo.apply:
            try:
                self.apply(body["metadata"]["name"], body, force)
            except Exception as e:  # noqa: BLE001 - raised below, after the other writes
                failed.append(e)
        for name, uid in todo.delete:
            try:
                self.delete(name, uid)
            except Exception as e:  # noqa: BLE001 - raised below, after the other writes
                failed.append(e)
        if (todo.foreign, todo.missing) != self._reported:
            for name in todo.foreign:
                log.warning(
                    "HyperNode %s exists and is not labelled %s=%s: left alone",
                    name,
                    OWNER_LABEL,
                    OWNER_VALUE,
                )
            for line in todo.missing:
                log.warning("%s", line)
            self._reported = (todo.foreign, todo.missing)
        self.passes += 1
        if failed:
            raise failed[0]
        if todo.apply or todo.delete:
            log.info(
                "HyperNodes reconciled from %d node(s): %d applied, %d deleted",
                len(places),
                len(todo.apply),
                len(todo.delete),
            )
        return todo

    def run(self) -> None:
        while not self.stop.is_set() and not self.state.synced():
            self.stop.wait(0.2)
        failures = 0
        while not self.stop.is_set():
            try:
                self.state.changed.clear()
                self.reconcile_once()
                failures = 0
            except Exception as e:  # noqa: BLE001 - keep the controller alive through API failures
                failures += 1
                delay = min(30.0, 0.5 * 2 ** min(failures, 6)) * random.uniform(0.5, 1.0)
                log.warning(
                    "reconciling HyperNodes failed (%s: %s); retry in %.1fs", type(e).__name__, e, delay
                )
                self.stop.wait(delay)
                continue
            started = time.monotonic()
            if self.state.changed.wait(self.resync_s) and not self.stop.is_set():
                self.stop.wait(max(0.0, self.debounce_s - (time.monotonic() - started)))


def session_writes(
    session: Any,
) -> tuple[Callable[[str, dict[str, Any], bool], Any], Callable[[str, str], Any]]:
    """(apply, delete) over a ``nodetopo.kube.session.ApiSession``."""

    def apply(name: str, body: dict[str, Any], force: bool) -> Any:
        return session.apply_cluster_object(
            VOLCANO_GROUP, VOLCANO_VERSION, HYPERNODE_PLURAL, name, body, status=False, force=force
        )

    def delete(name: str, uid: str) -> Any:
        return session.delete_cluster_object(VOLCANO_GROUP, VOLCANO_VERSION, HYPERNODE_PLURAL, name, uid=uid)

    return apply, delete


def start_reflectors(
    connection: Any, state: ExportState, *, page_size: int = 100, stop: threading.Event | None = None
) -> tuple[Reflector, Reflector]:
    """Start the NodeTopology and HyperNode reflectors feeding ``state`` over ``connection``."""
    started = []
    for path, collection in ((NODETOPOLOGY_PATH, state.places), (HYPERNODE_PATH, state.hypernodes)):
        reflector = Reflector(
            list_function(connection, path), path, collection.handlers(), page_size=page_size, stop=stop
        )
        reflector.start()
        started.append(reflector)
    return started[0], started[1]
