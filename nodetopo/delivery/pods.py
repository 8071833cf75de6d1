"""Where a result ran, from its pods (``nodetopo accept --pod``), and the Event the verdict leaves on
each of them.

A pod's place: its node (``spec.nodeName``) and the GPUs the kubelet handed it, as that node's
NodeTopology publishes them (``status.gpus[].heldBy`` under ``status.allocation.state: Known``, read
by ``PublishedStatus.held_by``, the rule the probe follows too). The API has no other record of which
GPUs a pod holds (the pod spec only counts them): where the object does not say, ``--gpus NODE=LIST``
must. The pod's ``nodetopo.io/min-busbw`` is the need it declares. Pure (``place_of``) behind one
reader (``read_places``) that takes the session.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from nodetopo.errors import BundleError
from nodetopo.kube.events import NORMAL, WARNING, event_body, involved_object
from nodetopo.placement.request import MIN_BUSBW, AnnotationError, parse_min_busbw
from nodetopo.resource.identity import GROUP, PLURAL, VERSION
from nodetopo.resource.published import PublishedAllocation, ResourceError
from nodetopo.resource.reader import read_nodetopology

COMPONENT = "nodetopo-accept"
PASSED = "Passed"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PodPlace:
    """Where one pod ran."""

    namespace: str
    name: str
    uid: str | None
    node: str
    #: indices of the node's GPUs the pod holds; None: every GPU (``--gpus NODE=all``)
    gpus: tuple[int, ...] | None
    gpus_from: str  #: ``heldBy`` or ``--gpus``
    min_busbw: float | None  #: the pod's ``nodetopo.io/min-busbw``, GB/s

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


def parse_pod_ref(text: str) -> tuple[str, str]:
    """``NAMESPACE/NAME`` (a bare ``NAME`` is in ``default``)."""
    namespace, sep, name = text.partition("/")
    if not sep:
        namespace, name = "default", text
    if not namespace or not name or "/" in name:
        raise BundleError(f"--pod {text!r}: expected NAMESPACE/NAME")
    return namespace, name


def pod_node(pod: Mapping[str, Any], ref: str) -> str:
    """The node the pod was scheduled to."""
    node = (pod.get("spec") or {}).get("nodeName") if isinstance(pod.get("spec"), Mapping) else None
    if not isinstance(node, str) or not node:
        raise BundleError(f"pod {ref}: not scheduled to a node (no spec.nodeName): it has run nowhere yet")
    return node


def place_of(
    pod: Mapping[str, Any],
    nodetopology: Mapping[str, Any],
    given: Mapping[str, tuple[int, ...] | None] | None = None,
) -> PodPlace:
    """The place of ``pod`` (as the API serves it) on ``nodetopology`` (its node's object).
    ``given``: ``--gpus`` by node (None for ``all``); on a node not in it, the pod holds the GPUs the
    kubelet handed it as the object publishes them. ``BundleError`` when they cannot be known or the
    pod's ``nodetopo.io/min-busbw`` is not a number of GB/s."""
    metadata = pod.get("metadata") or {}
    namespace = str(metadata.get("namespace") or "default")
    name = str(metadata.get("name") or "")
    ref = f"{namespace}/{name}"
    node = pod_node(pod, ref)
    annotations = metadata.get("annotations") or {}
    try:
        need = parse_min_busbw(annotations if isinstance(annotations, Mapping) else {})
    except AnnotationError as e:
        raise BundleError(f"pod {ref}: {e}") from None
    uid = metadata.get("uid")
    place = PodPlace(
        namespace=namespace,
        name=name,
        uid=uid if isinstance(uid, str) else None,
        node=node,
        gpus=None,
        gpus_from="--gpus",
        min_busbw=need,
    )
    if given and node in given:
        return dataclasses.replace(place, gpus=given[node])
    try:
        status = read_nodetopology(nodetopology, sections={"gpus", "allocation"}).status
    except ResourceError as e:
        raise BundleError(f"NodeTopology/{node}: {e}") from None
    give = f"give --gpus {node}=LIST (the GPUs the pod holds, by their index in NodeTopology/{node})"
    if status is None:
        raise BundleError(
            f"the GPUs pod {ref} holds cannot be known: NodeTopology/{node} has no status; {give}"
        )
    held = status.held_by(namespace, name)
    if held is None:
        raise BundleError(
            f"the GPUs pod {ref} holds cannot be known from the API: NodeTopology/{node} "
            f"{_unknown_holders(status.allocation)}; {give}"
        )
    if not held:
        raise BundleError(
            f"NodeTopology/{node} lists no GPU held by pod {ref} (a pod that has finished, or one the agent "
            f"has not published yet); {give}"
        )
    return dataclasses.replace(place, gpus=tuple(sorted(g.gpu.index for g in held)), gpus_from="heldBy")


def _unknown_holders(allocation: PublishedAllocation | None) -> str:
    """Why an object's ``heldBy`` does not say who holds its GPUs."""
    if allocation is None:
        return "does not say who holds its GPUs (no status.allocation: its agent does not ask its kubelet)"
    if allocation.state == "Known":
        return "does not list the holders of every GPU"
    message = f": {allocation.message}" if allocation.message else ""
    return f"does not know who holds its GPUs (allocation {allocation.state or 'unstated'}{message})"


def read_places(
    session: Any,
    refs: Sequence[str],
    objects: dict[str, Mapping[str, Any]],
    given: Mapping[str, tuple[int, ...] | None],
    known: Collection[str] = (),
) -> list[PodPlace]:
    """Each pod of ``refs`` read through ``session`` (``ApiSession``), with its node's NodeTopology
    from ``objects`` (``-f``) or else the API (added to ``objects``); ``given``: ``--gpus`` by node;
    ``known``: the nodes whose topology is at hand already (``--from-bundle``), read from the API only
    for their ``heldBy`` when ``--gpus`` does not name them."""
    places = []
    for text in refs:
        namespace, name = parse_pod_ref(text)
        pod = session.read_pod(namespace, name)
        if pod is None:
            raise BundleError(f"pod {namespace}/{name}: not found")
        node = pod_node(pod, f"{namespace}/{name}")
        if node not in objects and not (node in given and node in known):
            obj = session.read_cluster_object(GROUP, VERSION, PLURAL, node)
            if obj is None:
                raise BundleError(f"pod {namespace}/{name} ran on node {node}, which has no NodeTopology")
            objects[node] = obj
        places.append(place_of(pod, objects.get(node, {}), given))
    return places


def merged(places: Sequence[PodPlace]) -> dict[str, tuple[int, ...] | None]:
    """The GPUs held per node by all the pods (two pods of a gang on one node add up)."""
    out: dict[str, tuple[int, ...] | None] = {}
    for p in places:
        if p.gpus is None or (p.node in out and out[p.node] is None):
            out[p.node] = None
        else:
            out[p.node] = tuple(sorted({*(out.get(p.node) or ()), *p.gpus}))
    return out


def declared_need(places: Sequence[PodPlace]) -> tuple[float | None, str]:
    """The highest ``nodetopo.io/min-busbw`` of the pods, and which pod declares it."""
    best: PodPlace | None = None
    for p in places:
        if p.min_busbw is not None and (best is None or p.min_busbw > (best.min_busbw or 0)):
            best = p
    if best is None:
        return None, ""
    return best.min_busbw, f"{MIN_BUSBW} of pod {best.ref}"


def event(
    place: PodPlace, verdict: str, message: str, now: datetime.datetime | None = None
) -> dict[str, Any]:
    """The core/v1 Event of a verdict on one pod: the verdict word as reason, ``Normal`` for Passed."""
    return event_body(
        involved_object("Pod", place.name, namespace=place.namespace, uid=place.uid),
        reason=verdict,
        message=message,
        type=NORMAL if verdict == PASSED else WARNING,
        component=COMPONENT,
        host=place.node,
        now=now,
    )
