"""Events nodetopo posts (core/v1 ``Event``): the probe's verdict on its pod, the agent's word that it
took back a field of its own. One builder, ``event_body``, so that every Event says its text the
same way: the message through the one-line sanitiser (``nodetopo.errors.clip``: control characters,
escape sequences and newlines escaped, cut to ``MAX_MESSAGE``), whatever a NIC name or a label value
it quotes holds.

Where an Event lives: in the namespace of the object it is about; for a cluster-scoped object (a
Node, a NodeTopology) in ``default``, the one namespace the API server accepts for those besides
its own (``involvedObject.namespace`` must match; kubelet's Node Events live there too).
``kubectl describe node N`` lists them.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from nodetopo.errors import clip

#: the namespace of Events about cluster-scoped objects (Node, NodeTopology)
CLUSTER_EVENTS_NAMESPACE = "default"
#: the longest Event message (the API server refuses more than 1 KiB in events.k8s.io; be safe)
MAX_MESSAGE = 1000
NORMAL = "Normal"
WARNING = "Warning"


def involved_object(
    kind: str, name: str, *, api_version: str = "v1", namespace: str | None = None, uid: str | None = None
) -> dict[str, str]:
    """The ``involvedObject`` of an Event about one object."""
    involved = {"apiVersion": api_version, "kind": kind, "name": name}
    if namespace:
        involved["namespace"] = namespace
    if uid:
        involved["uid"] = uid
    return involved


def event_namespace(involved: Mapping[str, str]) -> str:
    """Where an Event about ``involved`` is created."""
    return involved.get("namespace") or CLUSTER_EVENTS_NAMESPACE


def event_body(
    involved: Mapping[str, str],
    *,
    reason: str,
    message: str,
    type: str,
    component: str,
    host: str | None = None,
    now: datetime.datetime | None = None,
) -> dict[str, Any]:
    """The core/v1 Event about ``involved`` (``involved_object``), its message made one line."""
    moment = now or datetime.datetime.now(datetime.UTC)
    stamp = moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    namespace = event_namespace(involved)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{involved['name'][:200]}.{component}.", "namespace": namespace},
        "involvedObject": dict(involved),
        "reason": reason,
        "message": clip(message, MAX_MESSAGE),
        "type": type,
        "source": {"component": component, **({"host": host} if host else {})},
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
