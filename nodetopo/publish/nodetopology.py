"""Server-side apply of the NodeTopology resource: metadata on the object, facts on ``/status``.

Two applies under field manager ``nodetopo-agent`` (the object is the agent's alone: a field another
manager took is taken back, said once in a warning and an Event, ``nodetopo.publish.ownership``):

1. the object itself: ``metadata.labels`` and ``metadata.ownerReferences`` → the Node (its UID,
   read once per node), so the garbage collector deletes the NodeTopology with its Node;
2. the status subresource: the whole ``status`` of the body.

``lastTransitionTime`` of a condition is kept from the previous object while the condition's
status is unchanged and set to now otherwise.

``NodeTopologyPublisher.apply`` is THE publish chain of the object, for every writer (the agent,
``nodetopo publish``, and ``agent --dry-run`` over a session that prints): the facts of a
``Missing`` scan are replaced by the stored ones (``held_body``), an unchanged body is skipped
without any request (one key, ``skip_key``), the first apply of an object compares with the stored
one (``stored_matches``: a restarted agent on an unchanged node writes nothing), and the metadata
is applied again only when it changed: after the first write, a change of the facts alone is one
write (the status apply).
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import hashlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from nodetopo.errors import PublishError
from nodetopo.kube.events import involved_object
from nodetopo.kube.session import Session
from nodetopo.publish.ownership import apply_owned, owns_everything
from nodetopo.resource.body import content_hash
from nodetopo.resource.conditions import essential_missing
from nodetopo.resource.identity import API_VERSION, GROUP, KIND, PLURAL, VERSION

log = logging.getLogger(__name__)


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def rfc3339(moment: datetime.datetime) -> str:
    """``2026-01-31T12:00:00Z`` (seconds precision, UTC), the form Kubernetes writes."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def status_content_hash(status: Mapping[str, Any]) -> str:
    """The contract's content hash (``nodetopo.resource.body.content_hash``): sha256 of the status without
    ``contentHash`` and the conditions' times."""
    return content_hash(dict(status))


def with_transition_times(
    conditions: Sequence[Mapping[str, Any]],
    previous: Sequence[Mapping[str, Any]],
    *,
    now: str,
) -> list[dict[str, Any]]:
    """``conditions`` with ``lastTransitionTime`` set: the previous one of the same type when its
    status is unchanged (and it had a time), else ``now``."""
    before = {str(c.get("type")): c for c in previous}
    result = []
    for condition in conditions:
        timed = dict(condition)
        old = before.get(str(condition.get("type")))
        if old is not None and old.get("status") == condition.get("status") and old.get("lastTransitionTime"):
            timed["lastTransitionTime"] = old["lastTransitionTime"]
        else:
            timed["lastTransitionTime"] = now
        result.append(timed)
    return result


def owner_reference(node: Mapping[str, Any]) -> dict[str, Any]:
    """The ownerReference to a Node object (no ``controller``; ``blockOwnerDeletion`` false needs
    no extra RBAC)."""
    metadata = node["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "name": metadata["name"],
        "uid": metadata["uid"],
        "blockOwnerDeletion": False,
    }


def metadata_patch(body: Mapping[str, Any], *, owner: Mapping[str, Any]) -> dict[str, Any]:
    """The apply of the object itself: ``body``'s labels and ``owner`` as the only ownerReference."""
    metadata = body.get("metadata") or {}
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": str(metadata["name"]),
            "labels": dict(metadata.get("labels") or {}),
            "ownerReferences": [dict(owner)],
        },
    }


def status_patch(
    body: Mapping[str, Any], *, previous_conditions: Sequence[Mapping[str, Any]], now: str
) -> dict[str, Any]:
    """The apply of the status subresource: ``body``'s status with the conditions' transition times
    (kept from ``previous_conditions`` while unchanged) and its ``contentHash`` filled in."""
    name = str(body["metadata"]["name"])
    status = copy.deepcopy(dict(body["status"]))
    status["conditions"] = with_transition_times(status.get("conditions") or [], previous_conditions, now=now)
    if not status.get("contentHash"):
        status["contentHash"] = status_content_hash(status)
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": name}, "status": status}


def held_body(body: Mapping[str, Any], stored: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """``body`` (a scan whose essential sources are ``Missing``) with the facts of the ``stored``
    NodeTopology instead of its own: a wrong host root never overwrites published facts with
    zeros. This scan's sources and conditions (Ready False, Missing) are kept, so the object says
    it is not Ready and why. ``body`` itself when nothing is stored."""
    old = (stored or {}).get("status") or {}
    if not old or not old.get("summary"):
        return body
    new = dict(body.get("status") or {})
    mine = ("sources", "conditions", "agentVersion", "contentHash")
    status = {k: v for k, v in old.items() if k not in mine}
    status.update({k: new[k] for k in ("nodeName", "agentVersion", "sources") if k in new})
    conditions = [dict(c) for c in new.get("conditions") or ()]
    for c in conditions:
        c.pop("lastTransitionTime", None)
        if c.get("type") == "Ready":
            c["message"] = f"{c.get('message', '')}; facts kept from the last published scan"
    status["conditions"] = conditions
    status["contentHash"] = status_content_hash(status)
    return {**body, "status": status}


def body_hash(body: Mapping[str, Any]) -> str:
    """The content hash ``body``'s status apply carries (its ``status.contentHash``, else computed):
    what a stored object is compared with."""
    status = body.get("status") or {}
    return str(status.get("contentHash") or status_content_hash(status))


def skip_key(body: Mapping[str, Any]) -> str:
    """THE key of an unchanged body: its metadata labels and its content hash."""
    labels = dict((body.get("metadata") or {}).get("labels") or {})
    return hashlib.sha256(json.dumps([labels, body_hash(body)], sort_keys=True).encode()).hexdigest()


def stored_matches(stored: Mapping[str, Any] | None, body: Mapping[str, Any], *, node_name: str) -> bool:
    """The ``stored`` object already holds ``body``: owned by the Node ``node_name``, with the
    body's labels and its content hash."""
    if stored is None:
        return False
    metadata = stored.get("metadata") or {}
    owned = any(
        ref.get("kind") == "Node" and ref.get("name") == node_name
        for ref in metadata.get("ownerReferences") or ()
    )
    labels = dict((body.get("metadata") or {}).get("labels") or {})
    same_labels = all((metadata.get("labels") or {}).get(k) == v for k, v in labels.items())
    return owned and same_labels and (stored.get("status") or {}).get("contentHash") == body_hash(body)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ApplyOutcome:
    """What ``NodeTopologyPublisher.apply`` did: ``written`` False means skipped (no write)."""

    name: str
    written: bool


class _Stored:
    """The stored object, read at most once per ``apply`` (the ``Missing`` guard, the comparison
    and the previous conditions all use the same read)."""

    def __init__(self, session: Session, name: str) -> None:
        self._session = session
        self._name = name
        self._read = False
        self._object: dict[str, Any] | None = None

    def get(self) -> dict[str, Any] | None:
        if not self._read:
            self._object = self._session.read_cluster_object(GROUP, VERSION, PLURAL, self._name)
            self._read = True
        return self._object


class NodeTopologyPublisher:
    """Publishes NodeTopology bodies: THE publish chain of the object (see the module docstring).

    State per instance: the Node UIDs it has read (once per node), and per object the key and
    conditions it last wrote (or found stored) and the metadata (labels, ownerReferences) it last
    applied successfully. The first apply of an object reads the stored object once: to keep
    stored facts on ``Missing``, to skip a write the server already holds, and to keep its
    conditions' transition times. A new instance (the agent's resync) compares with the server
    again.
    """

    def __init__(self, session: Session, *, clock: Callable[[], datetime.datetime] = utc_now) -> None:
        self._session = session
        self._clock = clock
        self._owners: dict[str, dict[str, Any]] = {}
        self._written_key: dict[str, str] = {}
        self._written_conditions: dict[str, list[dict[str, Any]]] = {}
        self._written_metadata: dict[str, str] = {}

    def _apply(self, name: str, patch: Mapping[str, Any], *, status: bool, node: str) -> dict[str, Any]:
        """One apply of the object (``status``: of its status), taking back what is ours."""
        session = self._session

        def apply(force: bool) -> dict[str, Any]:
            if force:
                return session.apply_cluster_object(
                    GROUP, VERSION, PLURAL, name, patch, status=status, force=True
                )
            return session.apply_cluster_object(GROUP, VERSION, PLURAL, name, patch, status=status)

        def involved(stored: Mapping[str, Any] | None) -> dict[str, str]:
            uid = ((stored or {}).get("metadata") or {}).get("uid")
            return involved_object(KIND, name, api_version=API_VERSION, uid=str(uid) if uid else None)

        return apply_owned(
            session,
            apply,
            what=f"{KIND} {name}",
            involved=involved,
            read=lambda: session.read_cluster_object(GROUP, VERSION, PLURAL, name),
            owned=owns_everything,
            host=node,
        )

    def _apply_metadata(self, name: str, patch: Mapping[str, Any], key: str, *, node: str) -> None:
        self._apply(name, patch, status=False, node=node)
        self._written_metadata[name] = key

    def apply(self, body: Mapping[str, Any], *, node_name: str | None = None) -> ApplyOutcome:
        """Apply ``body`` (a ``nodetopo.resource.body.to_nodetopology`` result) unless the server already
        holds it. ``node_name`` defaults to the object's name.

        A body whose essential sources are ``Missing`` (a wrong host root) keeps the stored
        object's facts (``held_body``): Ready=False and why, never zeros over published facts."""
        name = str(body["metadata"]["name"])
        stored = _Stored(self._session, name)
        if essential_missing(body):
            body = held_body(body, stored.get())
        key = skip_key(body)
        if self._written_key.get(name) == key:
            log.debug("NodeTopology %s unchanged; not writing", name)
            return ApplyOutcome(name=name, written=False)
        node = node_name or name
        owner = self._owners.get(node)
        if owner is None:
            owner = owner_reference(self._session.read_node(node))
            self._owners[node] = owner
        if name not in self._written_key and stored_matches(stored.get(), body, node_name=node):
            log.debug("NodeTopology %s already stored; not writing", name)
            self._written_key[name] = key
            return ApplyOutcome(name=name, written=False)
        previous = self._written_conditions.get(name)
        if previous is None:
            previous = list(((stored.get() or {}).get("status") or {}).get("conditions") or [])
        meta = metadata_patch(body, owner=owner)
        meta_key = json.dumps(meta, sort_keys=True)
        metadata_applied = self._written_metadata.get(name) != meta_key
        if metadata_applied:
            self._apply_metadata(name, meta, meta_key, node=node)
        status = status_patch(body, previous_conditions=previous, now=rfc3339(self._clock()))
        try:
            written = self._apply(name, status, status=True, node=node)
        except PublishError as e:
            if metadata_applied or e.status != 404:
                raise
            # deleted behind our back: a status apply does not create, the object's apply does
            log.info("NodeTopology %s is gone; creating it again", name)
            self._written_metadata.pop(name, None)
            self._apply_metadata(name, meta, meta_key, node=node)
            written = self._apply(name, status, status=True, node=node)
        self._written_key[name] = key
        self._written_conditions[name] = list((written.get("status") or {}).get("conditions") or [])
        log.info("NodeTopology %s written", name)
        return ApplyOutcome(name=name, written=True)
