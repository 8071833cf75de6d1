"""What the agent's loop publishes through: the ``AgentPublisher`` seam and its two implementations.

Both are the one publish chain, ``nodetopo.publish.Publisher`` (``NodeTopologyPublisher``: a scan
whose essential sources observed nothing keeps the stored facts, an unchanged object is not
written, the first publish compares with the stored object so that a restarted agent on an
unchanged node makes zero writes; the label tracker):

* ``ApiPublisher`` writes to the cluster through an API session (server-side apply, field
  manager ``nodetopo-agent``); ``resync()`` starts the chain afresh, so the next publish compares
  with the server again.
* ``DryRunPublisher`` is the same chain over a ``PrintingSession``: it prints what would be
  applied (YAML documents) whenever it changes, and makes no API call at all.

Tests pass their own ``AgentPublisher`` (a fake that records calls or raises).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator, Mapping
from typing import IO, Any, Protocol

from nodetopo.errors import PublishError
from nodetopo.kube.session import Session
from nodetopo.publish import Publisher, PublishOutcome
from nodetopo.publish.dryrun import PrintingSession
from nodetopo.publish.nodetopology import ApplyOutcome
from nodetopo.resource.noderesourcetopology import TopologyManager

log = logging.getLogger(__name__)

__all__ = [
    "AgentPublisher",
    "ApiPublisher",
    "DryRunPublisher",
    "PublishOutcome",
    "failed_object",
    "read_node_labels",
]

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


def read_node_labels(session: Session, node_name: str) -> dict[str, str]:
    """The labels of the agent's own Node (the ``get`` on nodes its role already has), to compare
    with GPU feature discovery's. Raises when the read fails or the object has no label map."""
    metadata = session.read_node(node_name).get("metadata")
    labels = metadata.get("labels", {}) if isinstance(metadata, Mapping) else None
    if not isinstance(labels, Mapping):
        raise ValueError(f"Node {node_name}: metadata.labels is not a map")
    return {str(k): str(v) for k, v in labels.items()}


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


class ApiPublisher:
    """``nodetopo.publish.Publisher`` for one node, its errors tagged with the object they were
    about (``failed_object``)."""

    def __init__(
        self, session: Session, node_name: str, *, nfd: bool = False, nrt: TopologyManager | None = None
    ) -> None:
        self._session = session
        self.node_name = node_name
        self._nfd = nfd
        self._nrt = nrt
        self._publisher = Publisher(session, node_name, nfd=nfd, nrt=nrt)

    def resync(self) -> None:
        self._publisher = Publisher(self._session, self.node_name, nfd=self._nfd, nrt=self._nrt)

    def publish(
        self, body: Mapping[str, Any], labels: Mapping[str, str], *, uncertain_keys: Iterable[str]
    ) -> PublishOutcome:
        topology = self.publish_topology(body)
        with tagged("labels"):
            applied = self._publisher.labels.publish(labels, uncertain_keys=sorted(uncertain_keys))
        return PublishOutcome(topology=topology, labels=applied)

    def publish_topology(self, body: Mapping[str, Any]) -> ApplyOutcome:
        with tagged("nodetopology"):
            return self._publisher.publish_topology(body)


class DryRunPublisher(ApiPublisher):
    """The agent's publish chain over a ``PrintingSession``: prints the objects the agent would
    apply, when they change. No API calls."""

    def __init__(self, node_name: str, out: IO[str], *, nrt: TopologyManager | None = None) -> None:
        super().__init__(PrintingSession(out), node_name, nrt=nrt)
