"""The session of ``nodetopo agent --dry-run``: the publishers' calls answered without a cluster.

The dry run is the same publish chain as the real agent (``Publisher``: the ``Missing`` guard, the
skip of unchanged objects, the label tracker) over a ``PrintingSession``: every apply is written
out as a YAML document, under a comment line that says it would be applied and as which field
manager, instead of being sent. Nothing is ever stored, so every read answers "nothing there":
no NodeTopology, no NodeFeature, a Node without labels (and without a UID, which only the cluster
knows). The object apply of a NodeTopology (its metadata) and the status apply that follows it
are one document: the object as it would then be stored, less the ownerReference to the Node
whose UID is unknown here. Any other cluster object (a NodeResourceTopology, which has no status
subresource) is one apply, printed as it is, less that ownerReference too.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import IO, Any

import yaml

from nodetopo.kube.session import FIELD_MANAGER
from nodetopo.resource.identity import PLURAL


class PrintingSession:
    """Prints what would be applied to ``out`` and makes no API call at all."""

    def __init__(self, out: IO[str], *, field_manager: str = FIELD_MANAGER) -> None:
        self._out = out
        self.field_manager = field_manager
        #: object applies (metadata) waiting for the status apply that follows them
        self._pending: dict[tuple[str, str], dict[str, Any]] = {}

    def _print(self, document: Mapping[str, Any]) -> None:
        self._out.write(f"# nodetopo agent --dry-run: would apply (field manager {self.field_manager})\n")
        self._out.write(yaml.safe_dump_all([dict(document)], sort_keys=False, explicit_start=True))
        self._out.flush()

    def read_node(self, name: str) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "uid": ""}}

    def apply_node(self, name: str, body: Mapping[str, Any], *, force: bool = False) -> dict[str, Any]:
        self._print(body)
        return copy.deepcopy(dict(body))

    def read_cluster_object(self, group: str, version: str, plural: str, name: str) -> dict[str, Any] | None:
        return None

    def apply_cluster_object(
        self,
        group: str,
        version: str,
        plural: str,
        name: str,
        body: Mapping[str, Any],
        *,
        status: bool,
        force: bool = False,
    ) -> dict[str, Any]:
        document = copy.deepcopy(dict(body))
        if not status and plural != PLURAL:
            self._print({**document, "metadata": _known_owners(document.get("metadata") or {})})
            return document
        if not status:
            self._pending[(plural, name)] = document
            return document
        pending = self._pending.pop((plural, name), None)
        if pending is not None:
            metadata = _known_owners(pending.get("metadata") or {})
            document = {**pending, "metadata": metadata, "status": document.get("status")}
        self._print(document)
        return document

    def read_namespaced_object(
        self, group: str, version: str, namespace: str, plural: str, name: str
    ) -> dict[str, Any] | None:
        return None

    def apply_namespaced_object(
        self,
        group: str,
        version: str,
        namespace: str,
        plural: str,
        name: str,
        body: Mapping[str, Any],
        *,
        force: bool = False,
    ) -> dict[str, Any]:
        self._print(body)
        return copy.deepcopy(dict(body))

    def create_event(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Nothing is stored, so nothing ever conflicts: no Event is ever asked for; none is sent."""
        return copy.deepcopy(dict(body))


def _known_owners(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """``metadata`` less the ownerReferences whose UID is unknown here (the dry run's Node has none)."""
    out = dict(metadata)
    owners = [ref for ref in out.pop("ownerReferences", None) or () if ref.get("uid")]
    if owners:
        out["ownerReferences"] = owners
    return out
