"""``Publisher`` (the agent's long-lived writer) and ``run_publish`` (``nodetopo publish``, one shot):
the NodeTopology and the labels of one node through one API session. See the package docstring."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from nodetopo.kube.session import ApiSession, Session
from nodetopo.kube.transport import connect
from nodetopo.publish.nfd import DEFAULT_NAMESPACE, NodeFeaturePublisher
from nodetopo.publish.node_labels import SCANS_TO_REMOVE, LabelOutcome, NodeLabelPublisher
from nodetopo.publish.noderesourcetopology import NodeResourceTopologyPublisher
from nodetopo.publish.nodetopology import ApplyOutcome, NodeTopologyPublisher
from nodetopo.resource.noderesourcetopology import TopologyManager

__all__ = ["PublishOutcome", "Publisher", "run_publish"]

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PublishOutcome:
    topology: ApplyOutcome
    labels: LabelOutcome
    #: what the NodeResourceTopology publisher did (``written``, ``skipped``, ``crd-not-installed``);
    #: None when the option is off
    noderesourcetopology: str | None = None


class Publisher:
    """NodeTopology + labels for one node, through one session (field manager ``nodetopo-agent``):
    ``NodeTopologyPublisher`` (the object's chain) and the label publisher; with ``nrt`` (the
    topology manager as the user states it), the SIG's NodeResourceTopology after each NodeTopology
    (``NodeResourceTopologyPublisher``). Raises
    ``nodetopo.errors.PublishError`` subclasses; ``retryable`` says whether to back off and retry."""

    def __init__(
        self,
        session: Session,
        node_name: str,
        *,
        nfd: bool = False,
        nfd_namespace: str = DEFAULT_NAMESPACE,
        scans_to_remove: int = SCANS_TO_REMOVE,
        nrt: TopologyManager | None = None,
    ) -> None:
        self.node_name = node_name
        self.topology = NodeTopologyPublisher(session)
        self.nrt = NodeResourceTopologyPublisher(session, nrt) if nrt is not None else None
        self.nrt_outcome: str | None = None  #: the last ``NodeResourceTopologyPublisher.apply``
        self.labels: NodeLabelPublisher | NodeFeaturePublisher
        if nfd:
            self.labels = NodeFeaturePublisher(
                session, node_name, namespace=nfd_namespace, scans_to_remove=scans_to_remove
            )
        else:
            self.labels = NodeLabelPublisher(session, node_name, scans_to_remove=scans_to_remove)

    def publish(
        self,
        body: Mapping[str, Any],
        labels: Mapping[str, str | None],
        *,
        uncertain_keys: Iterable[str] = (),
        uncertain_prefixes: Iterable[str] = (),
    ) -> PublishOutcome:
        """Write the NodeTopology (``NodeTopologyPublisher.apply``: a ``Missing`` scan keeps the
        stored facts), then the labels (see ``node_labels`` for the label input)."""
        topology = self.publish_topology(body)
        applied = self.labels.publish(
            labels, uncertain_keys=uncertain_keys, uncertain_prefixes=uncertain_prefixes
        )
        return PublishOutcome(topology=topology, labels=applied, noderesourcetopology=self.nrt_outcome)

    def publish_topology(self, body: Mapping[str, Any]) -> ApplyOutcome:
        """Write the NodeTopology only (and its NodeResourceTopology, when enabled)."""
        outcome = self.topology.apply(body, node_name=self.node_name)
        if self.nrt is not None:
            self.nrt_outcome = self.nrt.apply(body, node_name=self.node_name)
        return outcome


def run_publish(
    body: dict[str, Any],
    labels: dict[str, str],
    *,
    node_name: str,
    kubeconfig: str | None,
    nfd: bool,
    context: str | None = None,
    nfd_namespace: str = DEFAULT_NAMESPACE,
    uncertain_keys: Iterable[str] = (),
    uncertain_prefixes: Iterable[str] = (),
    nrt: TopologyManager | None = None,
) -> PublishOutcome:
    """One-shot publish (``nodetopo publish``): connection from ``kubeconfig`` or in-cluster config."""
    with connect(kubeconfig, context=context) as connection:
        publisher = Publisher(
            ApiSession(connection),
            node_name,
            nfd=nfd,
            nfd_namespace=nfd_namespace,
            scans_to_remove=1,
            nrt=nrt,
        )
        return publisher.publish(
            body, labels, uncertain_keys=uncertain_keys, uncertain_prefixes=uncertain_prefixes
        )
