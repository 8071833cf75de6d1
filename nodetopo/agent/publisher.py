"""What the agent's loop publishes through: the ``AgentPublisher`` seam and its two implementations.

* ``ApiPublisher`` writes to the cluster through ``nodetopo.publish`` (server-side apply, field
  manager ``nodetopo-agent``). On its first publish (and after ``resync()``) it reads the stored
  NodeTopology once and does not write it when its ``status.contentHash`` and owner already match:
  a restarted agent on an unchanged node makes zero writes. A scan whose essential sources
  observed nothing (a wrong host root) keeps the stored object's facts (``held_body``): it says
  Ready=False and why, and never overwrites published facts with zeros.
* ``DryRunPublisher`` prints what would be written (the NodeTopology body and the Node label patch,
  as YAML documents) whenever it changes, and makes no API call at all.

Tests pass their own ``AgentPublisher`` (a fake that records calls or raises).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator, Mapping
from typing import IO, Any, Protocol

import yaml

from nodetopo.errors import PublishError
from nodetopo.publish import Publisher, PublishOutcome
from nodetopo.publish.client import ApiSession
from nodetopo.publish.node_labels import SCANS_TO_REMOVE, LabelOutcome, LabelTracker
from nodetopo.publish.nodetopology import (
    ApplyOutcome,
    held_body,
    status_content_hash,
)
from nodetopo.resource.conditions import essential_missing
from nodetopo.resource.identity import GROUP, PLURAL, VERSION

log = logging.getLogger(__name__)

__all__ = ["AgentPublisher", "ApiPublisher", "DryRunPublisher", "PublishOutcome", "failed_object"]

#: how a publisher says which object a ``PublishError`` was about (``nodetopology`` or ``labels``)
FAILED_OBJECT_ATTR = "nodetopo_object"


def failed_object(error: BaseException) -> str:
    """``nodetopology`` or ``labels`` for an error an ``AgentPublisher`` tagged, else ``unknown``."""
    return str(getattr(error, FAILED_OBJECT_ATTR, "unknown"))


@contextlib.contextmanager
def tagged(obj: str) -> Iterator[None]:
    """Tag a ``PublishError`` raised in the block with the object it was about."""
    try:
        yield
    except PublishError as e:
        setattr(e, FAILED_OBJECT_ATTR, obj)
        raise


class AgentPublisher(Protocol):
    """Publishes one scan's NodeTopology body and labels. Raises ``nodetopo.errors.PublishError``."""

    def publish(
        self, body: Mapping[str, Any], labels: Mapping[str, str], *, uncertain_keys: Iterable[str]
    ) -> PublishOutcome: ...

    def publish_topology(self, body: Mapping[str, Any]) -> ApplyOutcome:
        """Publish only the NodeTopology (an allocation change between scans): the labels are not
        observed again, so a label's "absent in consecutive clean scans" count is not advanced."""

    def resync(self) -> None:
        """Forget what was written, so the next publish compares with the server again."""


def _body_hash(body: Mapping[str, Any]) -> str:
    status = body.get("status") or {}
    return str(status.get("contentHash") or status_content_hash(status))


class ApiPublisher:
    """``nodetopo.publish.Publisher`` for one node, plus the restart-without-writes check."""

    def __init__(self, session: ApiSession, node_name: str, *, nfd: bool = False) -> None:
        self._session = session
        self.node_name = node_name
        self._nfd = nfd
        self._publisher = Publisher(session, node_name, nfd=nfd)
        self._stored_hash: str | None = None  #: the status hash the server holds, when known

    def resync(self) -> None:
        self._publisher = Publisher(self._session, self.node_name, nfd=self._nfd)
        self._stored_hash = None

    def _stored_matches(self, body: Mapping[str, Any], wanted: str) -> bool:
        name = str(body["metadata"]["name"])
        stored = self._session.read_cluster_object(GROUP, VERSION, PLURAL, name)
        if stored is None:
            return False
        metadata = stored.get("metadata") or {}
        owned = any(
            ref.get("kind") == "Node" and ref.get("name") == self.node_name
            for ref in metadata.get("ownerReferences") or ()
        )
        labels = dict((body.get("metadata") or {}).get("labels") or {})
        same_labels = all((metadata.get("labels") or {}).get(k) == v for k, v in labels.items())
        return owned and same_labels and (stored.get("status") or {}).get("contentHash") == wanted

    def publish(
        self, body: Mapping[str, Any], labels: Mapping[str, str], *, uncertain_keys: Iterable[str]
    ) -> PublishOutcome:
        topology = self.publish_topology(body)
        with tagged("labels"):
            applied = self._publisher.labels.publish(labels, uncertain_keys=sorted(uncertain_keys))
        return PublishOutcome(topology=topology, labels=applied)

    def publish_topology(self, body: Mapping[str, Any]) -> ApplyOutcome:
        with tagged("nodetopology"):
            if essential_missing(body):
                name = str(body["metadata"]["name"])
                body = held_body(body, self._session.read_cluster_object(GROUP, VERSION, PLURAL, name))
            wanted = _body_hash(body)
            if self._stored_hash is None and self._stored_matches(body, wanted):
                self._stored_hash = wanted
            if self._stored_hash == wanted:
                topology = ApplyOutcome(
                    name=str(body["metadata"]["name"]), written=False, content_hash=wanted
                )
            else:
                topology = self._publisher.topology.apply(body, node_name=self.node_name)
                self._stored_hash = wanted
        return topology


class DryRunPublisher:
    """Prints the objects the agent would apply, when they change. No API calls."""

    def __init__(self, node_name: str, out: IO[str]) -> None:
        self.node_name = node_name
        self._out = out
        self._tracker = LabelTracker(scans_to_remove=SCANS_TO_REMOVE)
        self._written_hash: str | None = None
        self._written_labels: dict[str, str] | None = None

    def resync(self) -> None:
        self._written_hash = None
        self._written_labels = None

    def publish_topology(self, body: Mapping[str, Any]) -> ApplyOutcome:
        wanted = _body_hash(body)
        changed = wanted != self._written_hash
        if changed:
            self._out.write("# nodetopo agent --dry-run: would apply (field manager nodetopo-agent)\n")
            self._out.write(yaml.safe_dump_all([dict(body)], sort_keys=False, explicit_start=True))
            self._out.flush()
        self._written_hash = wanted
        return ApplyOutcome(name=str(body["metadata"]["name"]), written=changed, content_hash=wanted)

    def publish(
        self, body: Mapping[str, Any], labels: Mapping[str, str], *, uncertain_keys: Iterable[str]
    ) -> PublishOutcome:
        wanted = _body_hash(body)
        desired = self._tracker.observe(labels, uncertain_keys=sorted(uncertain_keys))
        documents: list[dict[str, Any]] = []
        topology_changed = wanted != self._written_hash
        labels_changed = desired != self._written_labels
        if topology_changed:
            documents.append(dict(body))
        if labels_changed:
            documents.append(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {"name": self.node_name, "labels": dict(desired)},
                }
            )
        if documents:
            self._out.write("# nodetopo agent --dry-run: would apply (field manager nodetopo-agent)\n")
            self._out.write(yaml.safe_dump_all(documents, sort_keys=False, explicit_start=True))
            self._out.flush()
        self._written_hash = wanted
        self._written_labels = dict(desired)
        return PublishOutcome(
            topology=ApplyOutcome(
                name=str(body["metadata"]["name"]), written=topology_changed, content_hash=wanted
            ),
            labels=LabelOutcome(written=labels_changed, applied=desired),
        )
