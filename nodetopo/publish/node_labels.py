"""nodetopo's own Node labels, applied with server-side apply, removed only on evidence of absence.

The applied set is exactly nodetopo's keys (all under ``nodetopo.io/``): a key we stop applying is
removed by the API server; labels, taints and annotations of other managers are never in our
patch and so never touched. A key of ours that another manager took (an admin's ``kubectl label
--overwrite``) is taken back, with one warning and one Event on the Node saying which key and who
had set it (``nodetopo.publish.ownership``); a conflict is never fatal.

Input of one scan (``LabelTracker.observe`` / ``NodeLabelPublisher.publish``):

* ``labels: Mapping[str, str | None]``: a key with a value is observed; a key mapped to ``None``
  is *unknown this round* (its source failed) and keeps its last good value;
* ``uncertain_keys``: exact keys unknown this round (``nodetopo.resource.labels.uncertain_keys(topology)``),
  whatever ``labels`` says;
* ``uncertain_prefixes``: key prefixes (plain ``str.startswith``) of sources that failed this
  round, e.g. ``("nodetopo.io/rdma",)``; every matching key is unknown this round;
* every other previously applied key is *absent in a clean scan*. It is removed once it has been
  absent in ``scans_to_remove`` (default 2) consecutive clean scans; an unknown round in between
  restarts the count.

The first publish reads the Node once and adopts the ``nodetopo.io/`` labels our field manager
already owns (an agent restarted while a source is failing does not drop that source's labels).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from nodetopo.kube.session import Session
from nodetopo.publish.ownership import apply_owned, node_involved, owns_label
from nodetopo.resource.identity import PREFIX, check_label_keys

log = logging.getLogger(__name__)

SCANS_TO_REMOVE = 2


class LabelTracker:
    """Which labels to apply after each scan (pure state machine, no I/O). See the module doc."""

    def __init__(self, *, applied: Mapping[str, str] | None = None, scans_to_remove: int = SCANS_TO_REMOVE):
        if scans_to_remove < 1:
            raise ValueError("scans_to_remove must be >= 1")
        self.scans_to_remove = scans_to_remove
        self._applied: dict[str, str] = dict(applied or {})
        self._absent_scans: dict[str, int] = {}

    @property
    def applied(self) -> dict[str, str]:
        return dict(self._applied)

    def absent_scans(self, key: str) -> int:
        """How many consecutive clean scans ``key`` has been absent from (0 when present)."""
        return self._absent_scans.get(key, 0)

    def observe(
        self,
        labels: Mapping[str, str | None],
        *,
        uncertain_keys: Iterable[str] = (),
        uncertain_prefixes: Iterable[str] = (),
    ) -> dict[str, str]:
        """Record one scan; return the label set to apply now."""
        check_label_keys(labels)
        prefixes = tuple(uncertain_prefixes)
        uncertain = frozenset(uncertain_keys)
        result: dict[str, str] = {}
        for key in sorted(set(labels) | set(self._applied)):
            value = labels.get(key)
            previous = self._applied.get(key)
            unknown = (key in labels and value is None) or key in uncertain or key.startswith(prefixes)
            if unknown:
                self._absent_scans.pop(key, None)
                if previous is not None:
                    result[key] = previous
                elif value is not None:
                    result[key] = value  # nothing better known: take this round's partial value
            elif value is not None:
                self._absent_scans.pop(key, None)
                result[key] = value
            elif previous is not None:
                count = self._absent_scans.get(key, 0) + 1
                if count >= self.scans_to_remove:
                    self._absent_scans.pop(key, None)
                    log.info("label %s absent in %d clean scans; removing it", key, count)
                else:
                    self._absent_scans[key] = count
                    result[key] = previous
        self._applied = result
        return dict(result)


def owned_label_keys(obj: Mapping[str, Any], *, field_manager: str) -> set[str]:
    """Label keys ``field_manager`` owns through Apply on ``obj`` (from ``metadata.managedFields``)."""
    keys: set[str] = set()
    for entry in (obj.get("metadata") or {}).get("managedFields") or ():
        if entry.get("manager") != field_manager or entry.get("operation") != "Apply":
            continue
        if entry.get("subresource"):
            continue
        labels = ((entry.get("fieldsV1") or {}).get("f:metadata") or {}).get("f:labels") or {}
        keys.update(field[2:] for field in labels if field.startswith("f:"))
    return keys


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class LabelOutcome:
    """What one publish did: ``written`` False means the applied set was unchanged (no write)."""

    written: bool
    applied: Mapping[str, str]


class TrackedLabelPublisher:
    """Tracks each scan's labels (``LabelTracker``) and applies the resulting set only when it
    changed. Subclasses say where the set lives: ``_adopt`` reads what we own there at first use,
    ``_apply`` writes a new set."""

    def __init__(self, session: Session, node_name: str, *, scans_to_remove: int = SCANS_TO_REMOVE):
        self._session = session
        self.node_name = node_name
        self._scans_to_remove = scans_to_remove
        self._tracker: LabelTracker | None = None
        self._written: dict[str, str] | None = None

    def _adopt(self) -> LabelTracker:
        raise NotImplementedError

    def _apply(self, desired: dict[str, str]) -> None:
        raise NotImplementedError

    def publish(
        self,
        labels: Mapping[str, str | None],
        *,
        uncertain_keys: Iterable[str] = (),
        uncertain_prefixes: Iterable[str] = (),
    ) -> LabelOutcome:
        """Track one scan's labels; apply them when the applied set changed."""
        check_label_keys(labels)
        if self._tracker is None:
            self._tracker = self._adopt()
        desired = self._tracker.observe(
            labels, uncertain_keys=uncertain_keys, uncertain_prefixes=uncertain_prefixes
        )
        if desired == self._written:
            return LabelOutcome(written=False, applied=desired)
        self._apply(desired)
        self._written = dict(desired)
        return LabelOutcome(written=True, applied=desired)


class NodeLabelPublisher(TrackedLabelPublisher):
    """Applies the tracked label set to one Node under the session's field manager."""

    def _adopt(self) -> LabelTracker:
        node = self._session.read_node(self.node_name)
        current = (node.get("metadata") or {}).get("labels") or {}
        owned = {
            key: str(current[key])
            for key in owned_label_keys(node, field_manager=self._session.field_manager)
            if key.startswith(PREFIX) and key in current
        }
        self._written = dict(owned)
        return LabelTracker(applied=owned, scans_to_remove=self._scans_to_remove)

    def _apply(self, desired: dict[str, str]) -> None:
        metadata: dict[str, Any] = {"name": self.node_name}
        if desired:
            metadata["labels"] = desired
        body = {"apiVersion": "v1", "kind": "Node", "metadata": metadata}
        check_label_keys(desired)  # nothing outside nodetopo.io/ is ever applied, forced or not
        session = self._session
        apply_owned(
            session,
            lambda force: (
                session.apply_node(self.node_name, body, force=True)
                if force
                else session.apply_node(self.node_name, body)
            ),
            what=f"Node {self.node_name}",
            involved=node_involved(self.node_name),
            read=lambda: session.read_node(self.node_name),
            owned=owns_label,
            host=self.node_name,
        )
        log.info("node %s labels applied: %s", self.node_name, sorted(desired))
