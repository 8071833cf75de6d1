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
    """Each pod of ``refs`` read through ``session`` (``ApiSession``), placed by ``places_of``."""
    pods = []
    for text in refs:
        namespace, name = parse_pod_ref(text)
        pod = session.read_pod(namespace, name)
        if pod is None:
            raise BundleError(f"pod {namespace}/{name}: not found")
        pods.append(pod)
    return places_of(session, pods, objects, given, known)


def places_of(
    session: Any,
    pods: Sequence[Mapping[str, Any]],
    objects: dict[str, Mapping[str, Any]],
    given: Mapping[str, tuple[int, ...] | None],
    known: Collection[str] = (),
) -> list[PodPlace]:
    """The place of each of ``pods`` (as the API serves them), with its node's NodeTopology from
    ``objects`` (``-f``) or else read through ``session`` (added to ``objects``); ``given``: ``--gpus``
    by node; ``known``: the nodes whose topology is at hand already (``--from-bundle``), read from the
    API only for their ``heldBy`` when ``--gpus`` does not name them. Every pod that cannot be placed
    (not scheduled, no NodeTopology, GPUs not known) is named in one ``BundleError``: a gang is placed
    whole or not at all."""
    places = []
    refused: list[str] = []
    for pod in pods:
        metadata = pod.get("metadata") or {}
        ref = f"{metadata.get('namespace') or 'default'}/{metadata.get('name') or ''}"
        try:
            node = pod_node(pod, ref)
            if node not in objects and not (node in given and node in known):
                obj = session.read_cluster_object(GROUP, VERSION, PLURAL, node)
                if obj is None:
                    raise BundleError(f"pod {ref} ran on node {node}, which has no NodeTopology")
                objects[node] = obj
            places.append(place_of(pod, objects.get(node, {}), given))
        except BundleError as e:
            refused.append(str(e))
    if len(refused) == 1:
        raise BundleError(refused[0])
    if refused:
        raise BundleError(f"{len(refused)} of {len(pods)} pods cannot be placed: " + "; ".join(refused))
    return places


# --------------------------------------------------------------------------------------------
# The pods of a workload (``nodetopo expect --job`` / ``--raycluster``)
# --------------------------------------------------------------------------------------------

#: the labels the Job controller sets on its pods: the current one first, then the legacy one it
#: still sets (and the only one before Kubernetes 1.27)
JOB_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")
#: the labels KubeRay sets on a RayCluster's pods
RAY_CLUSTER_LABEL = "ray.io/cluster"
RAY_NODE_TYPE_LABEL = "ray.io/node-type"
#: a pod in one of these phases has stopped: it holds no GPU any more
FINISHED_PHASES = frozenset({"Succeeded", "Failed"})


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Workload:
    """A Job or a RayCluster whose pods are a gang."""

    kind: str  #: ``Job`` or ``RayCluster``
    namespace: str
    name: str

    @property
    def ref(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"

    @property
    def selectors(self) -> tuple[str, ...]:
        """The label selectors its pods are listed by (their union is the workload's pods)."""
        if self.kind == "Job":
            return tuple(f"{label}={self.name}" for label in JOB_NAME_LABELS)
        return (f"{RAY_CLUSTER_LABEL}={self.name}",)


def parse_workload_ref(kind: str, text: str) -> Workload:
    """``NAMESPACE/NAME`` of a ``Job`` or ``RayCluster`` (a bare ``NAME`` is in ``default``)."""
    flag = f"--{kind.lower()}"
    namespace, sep, name = text.partition("/")
    if not sep:
        namespace, name = "default", text
    if not namespace or not name or "/" in name:
        raise BundleError(f"{flag} {text!r}: expected NAMESPACE/NAME")
    return Workload(kind=kind, namespace=namespace, name=name)


def _labels(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    labels = (pod.get("metadata") or {}).get("labels")
    return labels if isinstance(labels, Mapping) else {}


def _requests_gpus(pod: Mapping[str, Any]) -> bool:
    """The pod asks for GPUs: a device-plugin GPU count, or a DRA resource claim (which may be GPUs;
    counted in, so that heldBy decides)."""
    from nodetopo.placement.request import pod_gpus

    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        return False
    if spec.get("resourceClaims"):
        return True
    try:
        return pod_gpus(spec) > 0
    except AnnotationError:
        return True  # a count nodetopo cannot read: heldBy decides, never a silent drop


def gang_of(
    workload: Workload, pods: Sequence[Mapping[str, Any]]
) -> tuple[list[Mapping[str, Any]], list[str]]:
    """The pods of ``workload`` that make its gang, from ``pods`` (the union of its selectors' lists,
    in any order, repeats allowed), sorted by name; and a line for each pod left out and why.

    A pod of the workload (its label names it, in its namespace) that has finished (``Succeeded``,
    ``Failed``) holds no GPU: left out. A Job: every other pod. A RayCluster: its workers
    (``ray.io/node-type=worker``), and any other of its pods (the head) only when it asks for GPUs.
    Pods not yet scheduled stay in: placing them refuses the gang, naming them."""
    seen: dict[str, Mapping[str, Any]] = {}
    for pod in pods:
        metadata = pod.get("metadata") or {}
        if str(metadata.get("namespace") or "default") != workload.namespace:
            continue
        labels = _labels(pod)
        if workload.kind == "Job":
            ours = any(labels.get(label) == workload.name for label in JOB_NAME_LABELS)
        else:
            ours = labels.get(RAY_CLUSTER_LABEL) == workload.name
        if ours:
            seen.setdefault(str(metadata.get("name") or ""), pod)
    gang: list[Mapping[str, Any]] = []
    left: list[str] = []
    for name in sorted(seen):
        pod = seen[name]
        ref = f"{workload.namespace}/{name}"
        phase = (pod.get("status") or {}).get("phase") if isinstance(pod.get("status"), Mapping) else None
        if phase in FINISHED_PHASES:
            left.append(f"pod {ref}: {phase}, it holds no GPU")
        elif (
            workload.kind == "RayCluster"
            and _labels(pod).get(RAY_NODE_TYPE_LABEL) != "worker"
            and not _requests_gpus(pod)
        ):
            node_type = _labels(pod).get(RAY_NODE_TYPE_LABEL) or "no ray.io/node-type"
            left.append(f"pod {ref}: {node_type}, it asks for no GPU")
        else:
            gang.append(pod)
    return gang, left


def read_gang(session: Any, workload: Workload) -> tuple[list[Mapping[str, Any]], list[str]]:
    """The gang of ``workload`` (``gang_of``) from its pods listed through ``session``; a workload
    with no pod to place is a ``BundleError``."""
    listed: list[Mapping[str, Any]] = []
    for selector in workload.selectors:
        listed += session.list_pods(workload.namespace, selector).get("items") or []
    gang, left = gang_of(workload, listed)
    if not gang:
        why = f" ({'; '.join(left)})" if left else ""
        raise BundleError(
            f"{workload.ref}: no pod to place (listed by {' or '.join(workload.selectors)}){why}"
        )
    return gang, left


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
