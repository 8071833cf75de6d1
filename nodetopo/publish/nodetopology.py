"""Server-side apply of the NodeTopology resource: metadata on the object, facts on ``/status``.

Two applies under field manager ``nodetopo-agent`` with ``force=False`` (a field owned by another
manager is a ``ConflictError``, reported, never silently taken over):

1. the object itself: ``metadata.labels`` and ``metadata.ownerReferences`` → the Node (its UID,
   read once per node), so the garbage collector deletes the NodeTopology with its Node;
2. the status subresource: the whole ``status`` of the body.

``lastTransitionTime`` of a condition is kept from the previous object while the condition's
status is unchanged and set to now otherwise. ``NodeTopologyPublisher`` remembers the status
content hash it last wrote successfully and skips an unchanged body without any request, and the
metadata it last applied, which it applies again only when it changed: after the first write, a
change of the facts alone is one write (the status apply).
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
from nodetopo.publish.client import ApiSession
from nodetopo.resource.body import content_hash
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


def apply_nodetopology(
    session: ApiSession,
    body: Mapping[str, Any],
    *,
    owner: Mapping[str, Any],
    previous_conditions: Sequence[Mapping[str, Any]],
    now: str,
    metadata: bool = True,
) -> dict[str, Any]:
    """Apply ``body``'s metadata (unless ``metadata`` is False), then its status; return the object
    the server stored.

    ``owner`` is the ownerReference (``owner_reference(node)``). Stateless: no skip, no reads.
    Without the metadata apply the object must exist already (a status apply does not create it:
    404). Raises ``nodetopo.errors.PublishError`` subclasses.
    """
    name = str(body["metadata"]["name"])
    if metadata:
        session.apply_cluster_object(
            GROUP, VERSION, PLURAL, name, metadata_patch(body, owner=owner), status=False
        )
    patch = status_patch(body, previous_conditions=previous_conditions, now=now)
    return session.apply_cluster_object(GROUP, VERSION, PLURAL, name, patch, status=True)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ApplyOutcome:
    """What ``NodeTopologyPublisher.apply`` did: ``written`` False means skipped (no request)."""

    name: str
    written: bool
    content_hash: str


class NodeTopologyPublisher:
    """Publishes NodeTopology bodies, skipping unchanged ones without touching the API.

    State per instance: the Node UIDs it has read (once per node), and per object the status hash
    and conditions it last wrote successfully and the metadata (labels, ownerReferences) it last
    applied successfully. The first write of an object reads the existing object once, to keep
    its conditions' transition times, and applies metadata and status; later changes apply the
    metadata only when it changed, so a status change costs one write. ``forget()`` drops the
    write memory so the next ``apply`` writes both again (e.g. a periodic resync, or after the
    object was deleted).
    """

    def __init__(self, session: ApiSession, *, clock: Callable[[], datetime.datetime] = utc_now) -> None:
        self._session = session
        self.session = session  #: for callers that read the stored object (``held_body``)
        self._clock = clock
        self._owners: dict[str, dict[str, Any]] = {}
        self._written_hash: dict[str, str] = {}
        self._written_conditions: dict[str, list[dict[str, Any]]] = {}
        self._written_metadata: dict[str, str] = {}

    def forget(self) -> None:
        self._written_hash.clear()
        self._written_conditions.clear()
        self._written_metadata.clear()

    def _skip_key(self, body: Mapping[str, Any]) -> str:
        labels = dict((body.get("metadata") or {}).get("labels") or {})
        status_hash = status_content_hash(body.get("status") or {})
        return hashlib.sha256(json.dumps([labels, status_hash], sort_keys=True).encode()).hexdigest()

    def _apply_metadata(self, name: str, patch: Mapping[str, Any], key: str) -> None:
        self._session.apply_cluster_object(GROUP, VERSION, PLURAL, name, patch, status=False)
        self._written_metadata[name] = key

    def apply(self, body: Mapping[str, Any], *, node_name: str | None = None) -> ApplyOutcome:
        """Apply ``body`` (a ``nodetopo.resource.body.to_nodetopology`` result) unless unchanged since the
        last successful write. ``node_name`` defaults to the object's name."""
        name = str(body["metadata"]["name"])
        key = self._skip_key(body)
        if self._written_hash.get(name) == key:
            log.debug("NodeTopology %s unchanged; not writing", name)
            return ApplyOutcome(name=name, written=False, content_hash=key)
        node = node_name or name
        owner = self._owners.get(node)
        if owner is None:
            owner = owner_reference(self._session.read_node(node))
            self._owners[node] = owner
        previous = self._written_conditions.get(name)
        if previous is None:
            existing = self._session.read_cluster_object(GROUP, VERSION, PLURAL, name)
            previous = list(((existing or {}).get("status") or {}).get("conditions") or [])
        meta = metadata_patch(body, owner=owner)
        meta_key = json.dumps(meta, sort_keys=True)
        metadata_applied = self._written_metadata.get(name) != meta_key
        if metadata_applied:
            self._apply_metadata(name, meta, meta_key)
        status = status_patch(body, previous_conditions=previous, now=rfc3339(self._clock()))
        try:
            stored = self._session.apply_cluster_object(GROUP, VERSION, PLURAL, name, status, status=True)
        except PublishError as e:
            if metadata_applied or e.status != 404:
                raise
            # deleted behind our back: a status apply does not create, the object's apply does
            log.info("NodeTopology %s is gone; creating it again", name)
            self._written_metadata.pop(name, None)
            self._apply_metadata(name, meta, meta_key)
            stored = self._session.apply_cluster_object(GROUP, VERSION, PLURAL, name, status, status=True)
        self._written_hash[name] = key
        self._written_conditions[name] = list((stored.get("status") or {}).get("conditions") or [])
        log.info("NodeTopology %s written", name)
        return ApplyOutcome(name=name, written=True, content_hash=key)
