"""Optional: the SIG's ``NodeResourceTopology`` of the node, next to its NodeTopology.

The object is ``nodetopo.resource.noderesourcetopology.to_noderesourcetopology`` of the body the
NodeTopology chain publishes, written with one server-side apply under nodetopo's field manager (the
CRD has no status subresource) with an ownerReference to the Node, so the garbage collector deletes
it with its Node. An unchanged object is skipped without any request; the first apply compares with
the stored object (a restarted agent on an unchanged node writes nothing). A scan whose essential
sources are ``Missing`` writes nothing: the stored object keeps the last good facts.

When the CRD is not installed (the apply answers 404) the publisher says so once, in a warning, and
tries again only when the object changes: the NodeTopology and the labels are published as usual.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from nodetopo.errors import PublishError
from nodetopo.kube.session import Session
from nodetopo.publish.nodetopology import owner_reference
from nodetopo.publish.ownership import apply_owned, node_involved, owns_everything
from nodetopo.resource.conditions import essential_missing
from nodetopo.resource.noderesourcetopology import (
    GROUP,
    KIND,
    PLURAL,
    VERSION,
    TopologyManager,
    to_noderesourcetopology,
)

log = logging.getLogger(__name__)

#: what ``apply`` did: written, skipped (unchanged or nothing to write), or not installed
WRITTEN, SKIPPED, NOT_INSTALLED = "written", "skipped", "crd-not-installed"


def _compared(obj: Mapping[str, Any]) -> str:
    """What decides "unchanged": the labels, the owner, the zones and the attributes."""
    metadata = obj.get("metadata") or {}
    labels = metadata.get("labels") or {}
    owners = [{k: r.get(k) for k in ("kind", "name", "uid")} for r in metadata.get("ownerReferences") or ()]
    ours = {k: v for k, v in labels.items() if k == "app.kubernetes.io/managed-by"}
    return json.dumps([ours, owners, obj.get("zones") or [], obj.get("attributes") or []], sort_keys=True)


class NodeResourceTopologyPublisher:
    """Publishes the NodeResourceTopology of NodeTopology bodies (see the module docstring)."""

    def __init__(self, session: Session, manager: TopologyManager | None = None) -> None:
        self._session = session
        self.manager = manager or TopologyManager()
        self._owners: dict[str, dict[str, Any]] = {}
        self._written: dict[str, str] = {}
        self._missing_crd: dict[str, str] = {}  #: name → the key that found the CRD missing

    def apply(self, body: Mapping[str, Any], *, node_name: str) -> str:
        if essential_missing(body):
            log.debug("NodeResourceTopology %s: this scan's facts are Missing; keeping the stored", node_name)
            return SKIPPED
        desired = to_noderesourcetopology(body, manager=self.manager)
        if desired is None:
            log.debug("NodeResourceTopology %s: no NUMA node known; nothing to publish", node_name)
            return SKIPPED
        name = str(desired["metadata"]["name"])
        owner = self._owners.get(node_name)
        if owner is None:
            owner = owner_reference(self._session.read_node(node_name))
            self._owners[node_name] = owner
        desired["metadata"]["ownerReferences"] = [owner]
        key = _compared(desired)
        if self._written.get(name) == key or self._missing_crd.get(name) == key:
            return SKIPPED
        session = self._session
        if name not in self._written and name not in self._missing_crd:
            stored = session.read_cluster_object(GROUP, VERSION, PLURAL, name)
            if stored is not None and _compared(stored) == key:
                log.debug("NodeResourceTopology %s already stored; not writing", name)
                self._written[name] = key
                return SKIPPED

        def apply(force: bool) -> dict[str, Any]:
            if force:
                return session.apply_cluster_object(
                    GROUP, VERSION, PLURAL, name, desired, status=False, force=True
                )
            return session.apply_cluster_object(GROUP, VERSION, PLURAL, name, desired, status=False)

        try:
            apply_owned(
                session,
                apply,
                what=f"{KIND} {name}",
                involved=node_involved(node_name),
                read=lambda: session.read_cluster_object(GROUP, VERSION, PLURAL, name),
                owned=owns_everything,
                host=node_name,
            )
        except PublishError as e:
            if e.status != 404:
                raise
            if name not in self._missing_crd:
                log.warning(
                    "NodeResourceTopology %s not published: the %s/%s CRD is not installed (install the "
                    "SIG's NodeResourceTopology CRD, or turn the option off); trying again when it changes",
                    name,
                    GROUP,
                    VERSION,
                )
            self._missing_crd[name] = key
            return NOT_INSTALLED
        self._missing_crd.pop(name, None)
        self._written[name] = key
        log.info("NodeResourceTopology %s written", name)
        return WRITTEN
