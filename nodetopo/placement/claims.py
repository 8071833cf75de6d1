"""What a DRA ResourceClaim (or ResourceClaimTemplate) asks of a node's topology, in the pod-request
language (``PodRequest``), and a claim-based pod's whole request.

How a claim says "N GPUs in one island" (DRA's own vocabulary stops at ``pcieRoot``/``numaNode``):
its GPUs are the devices of its requests whose ``deviceClassName`` is a GPU class (``GPU_CLASSES``:
``gpu.nvidia.com``, the class NVIDIA's GPU DRA driver installs), counted as the scheduler allocates
them; its topology need is nodetopo's own annotations, the extender's five (``ANNOTATIONS``:
``gpus-in-one-island``, ``max-nic-distance``, ``numa-aligned``, ``rdma``, ``link-layer``), with the
pods' grammar, on the claim:

* a ResourceClaim: ``metadata.annotations``;
* a ResourceClaimTemplate: ``spec.metadata.annotations``, the annotations every claim made from it
  carries (the template's own ``metadata`` is not copied to its claims, so it is not read).

A ``matchAttribute`` constraint on ``resource.kubernetes.io/pcieRoot`` is *not* read as "one
island": it means "one PCIe root complex", which is stricter than one island on NVSwitch machines
and says nothing of NVLink on PCIe machines; DRA enforces it itself.

Counting (``claim_gpus``): ``exactly`` with ``allocationMode: ExactCount`` (the default) is its
``count`` (default 1); ``allocationMode: All`` is unknown (every matching device of a node) and
counts 0, so nothing is refused for it; ``firstAvailable`` (a prioritized list) is the fewest GPUs
any of its alternatives asks, since the scheduler may give that one. A claim that is already
allocated (``status.allocation``) has its devices: a pod sharing it asks no more of a node.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from nodetopo.model import LinkClass
from nodetopo.placement.request import (
    ANNOTATIONS,
    GRAMMAR,
    LINK_LAYER,
    MAX_NIC_DISTANCE,
    NUMA_ALIGNED,
    ONE_ISLAND,
    RDMA,
    AnnotationError,
    PodRequest,
    PodShapeError,
    as_list,
    as_object,
    check_value,
)
from nodetopo.resource.identity import PREFIX

GROUP = "resource.k8s.io"
VERSION = "v1"
CLAIM = "ResourceClaim"
TEMPLATE = "ResourceClaimTemplate"
#: The device classes whose devices are whole GPUs (NVIDIA's DRA driver's; its MIG class is not).
GPU_CLASSES = frozenset({"gpu.nvidia.com"})
_TRUE = frozenset({"true", "yes", "1"})
_KNOWN = ", ".join(key.removeprefix(PREFIX) for key in ANNOTATIONS)


def is_claim(obj: Mapping[str, Any]) -> bool:
    """A ``resource.k8s.io`` ResourceClaim or ResourceClaimTemplate (any served version)."""
    return str(obj.get("apiVersion", "")).partition("/")[0] == GROUP and obj.get("kind") in (CLAIM, TEMPLATE)


def claim_parts(obj: Mapping[str, Any]) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """(the claim's annotations, its ``ResourceClaimSpec``) of a ResourceClaim or a template."""
    if obj.get("kind") == TEMPLATE:
        template = as_object(obj.get("spec"), "ResourceClaimTemplate.spec")
        meta = as_object(template.get("metadata"), "ResourceClaimTemplate.spec.metadata")
        annotations = meta.get("annotations")
        spec = as_object(template.get("spec"), "spec.spec")
        return as_object(annotations, "spec.metadata.annotations"), spec
    meta = as_object(obj.get("metadata"), "ResourceClaim.metadata")
    return as_object(meta.get("annotations"), "metadata.annotations"), as_object(obj.get("spec"), "spec")


def _count(request: Mapping[str, Any], classes: frozenset[str], what: str) -> int:
    if request.get("deviceClassName") not in classes:
        return 0
    if request.get("allocationMode", "ExactCount") != "ExactCount":  # All: unknown, refuses nothing
        return 0
    count = request.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise PodShapeError(f"{what}.count must be a whole number, got {count!r:.40}")
    return count


def claim_gpus(spec: Mapping[str, Any], classes: frozenset[str] = GPU_CLASSES) -> int:
    """The GPUs a ``ResourceClaimSpec`` asks at least (see the module's "Counting")."""
    devices = as_object(as_object(spec, "spec").get("devices"), "spec.devices")
    total = 0
    for i, request in enumerate(as_list(devices.get("requests"), "spec.devices.requests")):
        what = f"spec.devices.requests[{i}]"
        request = as_object(request, what)
        if request.get("exactly") is not None:
            total += _count(as_object(request["exactly"], f"{what}.exactly"), classes, f"{what}.exactly")
        elif request.get("firstAvailable") is not None:
            alternatives = as_list(request["firstAvailable"], f"{what}.firstAvailable")
            total += min(
                (
                    _count(as_object(sub, f"{what}.firstAvailable[{j}]"), classes, f"{what}.firstAvailable")
                    for j, sub in enumerate(alternatives)
                ),
                default=0,
            )
    return total


def annotation_errors(annotations: Mapping[str, Any]) -> list[str]:
    """The grammar errors of a claim's ``nodetopo.io/`` annotations (the pods' messages)."""
    errors = []
    for key in ANNOTATIONS:
        if key in annotations:
            try:
                check_value(key, annotations[key], GRAMMAR[key])
            except AnnotationError as e:
                errors.append(str(e))
    unknown = sorted(str(k) for k in annotations if str(k).startswith(PREFIX) and k not in ANNOTATIONS)
    if unknown:
        more = f" and {len(unknown) - 1} more" if len(unknown) > 1 else ""
        errors.append(f"unknown annotation {unknown[0]}{more}; known: {_KNOWN}")
    return errors


def parse_claim_request(obj: Mapping[str, Any], classes: frozenset[str] = GPU_CLASSES) -> PodRequest:
    """The ``PodRequest`` of a ResourceClaim or ResourceClaimTemplate: its GPUs and its annotations.
    A malformed annotation is an ``AnnotationError`` (the first one's message)."""
    annotations, spec = claim_parts(as_object(obj, "ResourceClaim"))
    errors = annotation_errors(annotations)
    if errors:
        raise AnnotationError(errors[0])
    values = {key: str(annotations[key]).lower() for key in ANNOTATIONS if key in annotations}
    distance = values.get(MAX_NIC_DISTANCE)
    layer = values.get(LINK_LAYER)
    return PodRequest(
        gpus=claim_gpus(spec, classes),
        one_island=values.get(ONE_ISLAND) in _TRUE,
        max_nic_distance=LinkClass[distance.upper()] if distance else None,
        numa_aligned=values.get(NUMA_ALIGNED) in _TRUE,
        rdma=values.get(RDMA) in ("required", "true"),
        link_layer={"infiniband": "InfiniBand", "ethernet": "Ethernet"}.get(layer or ""),
    )


def is_allocated(claim: Mapping[str, Any]) -> bool:
    """True when a ResourceClaim's devices are allocated (``status.allocation``)."""
    status = claim.get("status")
    return isinstance(status, Mapping) and bool(status.get("allocation"))


@dataclasses.dataclass(frozen=True, slots=True)
class ClaimRef:
    """One entry of a pod's ``spec.resourceClaims``: the ResourceClaim it names, when known."""

    name: str  #: the name in the pod
    claim: str | None  #: the ResourceClaim's name; None: made from a template and not yet created


def pod_claims(pod: Mapping[str, Any]) -> tuple[ClaimRef, ...]:
    """The ResourceClaims a pod uses: ``resourceClaimName`` as given, a template's claim by the name
    the pod's ``status.resourceClaimStatuses`` records (None until the claim controller made it)."""
    spec = as_object(pod.get("spec"), "Pod.spec")
    status = as_object(pod.get("status"), "Pod.status")
    made: dict[str, str | None] = {}
    for entry in as_list(status.get("resourceClaimStatuses"), "Pod.status.resourceClaimStatuses"):
        entry = as_object(entry, "Pod.status.resourceClaimStatuses[]")
        claim = entry.get("resourceClaimName")
        made[str(entry.get("name"))] = claim if isinstance(claim, str) and claim else None
    refs = []
    for i, entry in enumerate(as_list(spec.get("resourceClaims"), "Pod.spec.resourceClaims")):
        entry = as_object(entry, f"Pod.spec.resourceClaims[{i}]")
        name = str(entry.get("name", ""))
        direct = entry.get("resourceClaimName")
        refs.append(ClaimRef(name=name, claim=direct if isinstance(direct, str) else made.get(name)))
    return tuple(refs)


def merge(pod: PodRequest, claims: Iterable[PodRequest]) -> PodRequest:
    """A claim-based pod's whole request: its own (``nvidia.com/gpu`` and its annotations) and its
    claims'. The GPUs add up; a need any of them states holds for all of the pod's GPUs (a pod is
    placed on one node: two claims "each in one island" are judged as one island); the tightest
    NIC class wins; the pod's link-layer preference before a claim's."""
    result = pod
    for claim in claims:
        distances = [d for d in (result.max_nic_distance, claim.max_nic_distance) if d is not None]
        result = dataclasses.replace(
            result,
            gpus=result.gpus + claim.gpus,
            one_island=result.one_island or claim.one_island,
            max_nic_distance=min(distances) if distances else None,
            numa_aligned=result.numa_aligned or claim.numa_aligned,
            rdma=result.rdma or claim.rdma,
            link_layer=result.link_layer or claim.link_layer,
        )
    return result
