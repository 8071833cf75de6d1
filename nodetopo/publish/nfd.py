"""Optional Node Feature Discovery interop: nodetopo's labels as an NFD ``NodeFeature`` object.

Instead of applying labels to the Node itself (which needs ``nodes`` patch RBAC for every agent),
the agent writes a namespaced ``nfd.k8s-sigs.io/v1alpha1`` ``NodeFeature`` named
``nodetopo-<node>`` and labelled ``nfd.node.kubernetes.io/node-name: <node>``; nfd-master turns its
``spec.labels`` into Node labels. nfd-master only creates labels outside its default namespaces
when allowed to: run it with ``-extra-label-ns=nodetopo.io`` (Helm: ``master.extraLabelNs``).

The label set follows the same rules as the Node-label mode (``node_labels.LabelTracker``): our
keys only, a key goes after ``scans_to_remove`` consecutive clean scans, failed sources keep their
last good labels. The object is ours alone; ``spec.labels`` is applied with server-side apply, so
dropped keys disappear from it, and a field another manager took is taken back, said once in a
warning and an Event on the Node (``nodetopo.publish.ownership``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from nodetopo.kube.session import Session
from nodetopo.publish.node_labels import SCANS_TO_REMOVE, LabelTracker, TrackedLabelPublisher
from nodetopo.publish.ownership import apply_owned, node_involved, owns_everything
from nodetopo.resource.identity import PREFIX

log = logging.getLogger(__name__)

GROUP = "nfd.k8s-sigs.io"
VERSION = "v1alpha1"
PLURAL = "nodefeatures"
KIND = "NodeFeature"
NODE_NAME_LABEL = "nfd.node.kubernetes.io/node-name"
DEFAULT_NAMESPACE = "nodetopo"


def nodefeature_name(node_name: str) -> str:
    return f"nodetopo-{node_name}"


def to_nodefeature(node_name: str, namespace: str, labels: Mapping[str, str]) -> dict[str, Any]:
    """The NodeFeature object that asks nfd-master for ``labels`` on ``node_name``."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {
            "name": nodefeature_name(node_name),
            "namespace": namespace,
            "labels": {NODE_NAME_LABEL: node_name, "app.kubernetes.io/managed-by": "nodetopo"},
        },
        "spec": {"labels": dict(labels)},
    }


class NodeFeaturePublisher(TrackedLabelPublisher):
    """Applies the tracked label set as one NodeFeature object (same interface as
    ``NodeLabelPublisher``)."""

    def __init__(
        self,
        session: Session,
        node_name: str,
        *,
        namespace: str = DEFAULT_NAMESPACE,
        scans_to_remove: int = SCANS_TO_REMOVE,
    ) -> None:
        super().__init__(session, node_name, scans_to_remove=scans_to_remove)
        self.namespace = namespace

    def _adopt(self) -> LabelTracker:
        existing = self._session.read_namespaced_object(
            GROUP, VERSION, self.namespace, PLURAL, nodefeature_name(self.node_name)
        )
        labels = ((existing or {}).get("spec") or {}).get("labels") or {}
        owned = {str(k): str(v) for k, v in labels.items() if str(k).startswith(PREFIX)}
        self._written = dict(owned) if existing is not None else None
        return LabelTracker(applied=owned, scans_to_remove=self._scans_to_remove)

    def _apply(self, desired: dict[str, str]) -> None:
        body = to_nodefeature(self.node_name, self.namespace, desired)
        name = body["metadata"]["name"]
        session = self._session

        def apply(force: bool) -> dict[str, Any]:
            if force:
                return session.apply_namespaced_object(
                    GROUP, VERSION, self.namespace, PLURAL, name, body, force=True
                )
            return session.apply_namespaced_object(GROUP, VERSION, self.namespace, PLURAL, name, body)

        apply_owned(
            session,
            apply,
            what=f"{KIND} {self.namespace}/{name}",
            involved=node_involved(self.node_name),  # the Event goes on the Node: the labels are its
            read=lambda: None,
            owned=owns_everything,
            host=self.node_name,
        )
        log.info("NodeFeature %s/%s applied: %s", self.namespace, body["metadata"]["name"], sorted(desired))
