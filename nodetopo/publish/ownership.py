"""What nodetopo applies is its own: a field another manager took is taken back, and said once.

Every apply of the publishers (the Node's ``nodetopo.io/`` labels, the NodeTopology object and its
status, the NFD NodeFeature) goes through ``apply_owned``. It is a server-side apply with
``force=false``; when the API server answers 409 because another field manager owns some of the
applied fields (an admin's ``kubectl label node N nodetopo.io/numa.count=7 --overwrite``: manager
``kubectl-label``), and every conflicting field is one the publisher owns (``owned``: a
``nodetopo.io/`` label of the Node; any field of the agent's own NodeTopology or NodeFeature), the
same apply is sent again with ``force=true``. Force moves only the fields of the applied body to
nodetopo's manager, and the body holds only nodetopo's own fields (``check_label_keys``: nothing
outside ``nodetopo.io/`` is ever in a Node apply), so no other field changes hands.

It says so once, where an operator looks: one warning log line and one Event (reason
``OwnedFieldReasserted``, on the Node for labels, on the NodeTopology for its fields), naming each
field, the manager that had set it and the value it had (from the 409's causes and the object's
``managedFields``). The next publishes own the field again and say nothing; only another edit by
hand is reported again. A conflict on a field the publisher does not own is raised as it came
(``ConflictError``, retryable: never fatal). An Event that cannot be posted (no RBAC) is a log line.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from typing import Any

from nodetopo.errors import ConflictError, PublishError, clip
from nodetopo.kube.events import WARNING, event_body, event_namespace, involved_object
from nodetopo.kube.session import Session
from nodetopo.resource.identity import PREFIX

log = logging.getLogger(__name__)

REASON = "OwnedFieldReasserted"
LABEL_FIELD = ".metadata.labels."


def label_field(key: str) -> str:
    """The managed-fields path of the label ``key`` (as a 409's causes name it)."""
    return LABEL_FIELD + key


def owns_label(field: str) -> bool:
    """``field`` is a ``nodetopo.io/`` label: the only fields of a Node nodetopo owns."""
    return field.startswith(LABEL_FIELD + PREFIX)


def owns_everything(field: str) -> bool:
    """Every field of an object that is nodetopo's alone (the NodeTopology, the NodeFeature)."""
    return True


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class TakenField:
    """One field taken back: who had set it, when, and to what (None: not read)."""

    field: str
    manager: str
    value: str | None = None
    since: str | None = None

    def describe(self) -> str:
        what = f"label {self.field[len(LABEL_FIELD) :]}" if self.field.startswith(LABEL_FIELD) else self.field
        had = f" to {clip(self.value, 80)!r}" if self.value is not None else ""
        when = f" at {self.since}" if self.since else ""
        return f"{what} (set{had} by field manager {clip(self.manager, 80)!r}{when})"


def _label_value(obj: Mapping[str, Any] | None, field: str) -> str | None:
    if obj is None or not field.startswith(LABEL_FIELD):
        return None
    labels = (obj.get("metadata") or {}).get("labels") or {}
    value = labels.get(field[len(LABEL_FIELD) :])
    return str(value) if value is not None else None


def _manager_time(obj: Mapping[str, Any] | None, manager: str) -> str | None:
    """When ``manager`` last wrote ``obj`` (its newest ``managedFields`` entry)."""
    times = [
        str(entry["time"])
        for entry in ((obj or {}).get("metadata") or {}).get("managedFields") or ()
        if isinstance(entry, Mapping) and entry.get("manager") == manager and entry.get("time")
    ]
    return max(times) if times else None


def taken_fields(
    conflicts: tuple[tuple[str, str], ...], stored: Mapping[str, Any] | None
) -> list[TakenField]:
    """The conflicts of a 409 with what the stored object says of them."""
    return [
        TakenField(
            field=field,
            manager=manager,
            value=_label_value(stored, field),
            since=_manager_time(stored, manager),
        )
        for field, manager in conflicts
    ]


def apply_owned(
    session: Session,
    apply: Callable[[bool], dict[str, Any]],
    *,
    what: str,
    involved: Callable[[Mapping[str, Any] | None], dict[str, str]],
    read: Callable[[], Mapping[str, Any] | None],
    owned: Callable[[str], bool],
    host: str | None = None,
) -> dict[str, Any]:
    """``apply(force)`` (a server-side apply by nodetopo's manager), taking back the fields it
    owns when another manager holds them: see the module docstring.

    ``what`` names the object for messages (``Node gpu-7``); ``read`` reads it (for who set the
    fields and to what); ``involved`` makes the Event's ``involvedObject`` from that read (its UID);
    ``owned`` says which fields nodetopo owns there; ``host`` is the Event's source host.
    """
    try:
        return apply(False)
    except ConflictError as e:
        if not e.conflicts or not all(owned(field) for field, _ in e.conflicts):
            raise
        conflicts = e.conflicts
    try:
        stored = read()
    except PublishError as e:  # who set it is for the message only
        log.debug("cannot read %s to say who set its fields: %s", what, e)
        stored = None
    taken = taken_fields(conflicts, stored)
    written = apply(True)
    said = "; ".join(t.describe() for t in taken)
    message = (
        f"{session.field_manager} took back {said} on {what}: these fields are published by "
        "nodetopo, and a change by hand is overwritten; to change what nodetopo publishes, change "
        "its configuration or the node"
    )
    log.warning("%s", clip(message, 2000))
    try:
        target = involved(stored)
        body = event_body(
            target, reason=REASON, message=message, type=WARNING, component=session.field_manager, host=host
        )
        session.create_event(event_namespace(target), body)
    except PublishError as e:
        log.warning("cannot post the Event about %s: %s", what, e)
    return written


def node_involved(name: str) -> Callable[[Mapping[str, Any] | None], dict[str, str]]:
    """``involved`` for the Node ``name`` (its UID from the read, when there was one)."""

    def involved(stored: Mapping[str, Any] | None) -> dict[str, str]:
        uid = ((stored or {}).get("metadata") or {}).get("uid")
        return involved_object("Node", name, uid=str(uid) if uid else None)

    return involved
