"""The admission rules for DRA claims, offline: what ``deploy/admission/claim-policies.yaml`` decides
for a ResourceClaim or a ResourceClaimTemplate (``resource.k8s.io/v1``), with the same messages.

A claim states its topology need with nodetopo's annotations (``nodetopo.placement.claims``: on a
claim ``metadata.annotations``, on a template ``spec.metadata.annotations``) and asks its GPUs by
count from a GPU device class (``gpu.nvidia.com``). Two policies, as for pods:

``nodetopo-claim-annotations`` (no parameters)
    every ``nodetopo.io/`` annotation of the claim is one of the extender's five and parses; the
    pods' messages.
``nodetopo-claim-topology`` (parameters: the ``NodeTopologySummary``)
    only when the annotations parse and the summary is fresh: the pods' feasibility checks
    (``rules.feasibility_errors``) for the claim's GPUs, with "claim" for "pod" in the message
    (``claim needs 16 GPUs in one NVLink island but the largest island in the cluster has 8``).
    No declaration rule: a claim is not a pod, the pod using it is judged as a pod.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any

from nodetopo.admission.rules import (
    Denial,
    ManifestError,
    PodGroup,
    _timestamp,
    check,
    describe,
    feasibility_errors,
    is_checked,
    is_fresh,
)
from nodetopo.placement.claims import annotation_errors, claim_gpus, claim_parts, is_claim
from nodetopo.placement.request import PodShapeError

CLAIM_ANNOTATIONS_POLICY = "nodetopo-claim-annotations"
CLAIM_TOPOLOGY_POLICY = "nodetopo-claim-topology"


def check_claim(
    obj: Mapping[str, Any], summary: Mapping[str, Any] | None, *, now: datetime.datetime | None = None
) -> list[Denial]:
    """The denials the claim policies give a ResourceClaim or template on CREATE (empty: admitted)."""
    try:
        annotations, spec = claim_parts(obj)
        gpus = claim_gpus(spec)
    except PodShapeError as e:  # not a claim the API server admits
        raise ManifestError(f"{describe(obj)}: {e}") from None
    for key, value in annotations.items():
        if not isinstance(value, str):  # YAML `true` unquoted: the API server refuses the object
            raise ManifestError(
                f"{describe(obj)}: annotation {key}: values must be strings (quote {value!r})"
            )
    errors = annotation_errors(annotations)
    if errors:
        return [Denial(CLAIM_ANNOTATIONS_POLICY, "; ".join(errors))]
    if summary is None:
        return []
    created = now or _timestamp((obj.get("metadata") or {}).get("creationTimestamp"))
    if not is_fresh(summary, created or datetime.datetime.now(datetime.UTC)):
        return []
    found = feasibility_errors(PodGroup(template={}, pods=1), annotations, summary, gpus=gpus, noun="claim")
    return [Denial(CLAIM_TOPOLOGY_POLICY, "; ".join(found))] if found else []


def check_object(
    obj: Mapping[str, Any], summary: Mapping[str, Any] | None, *, now: datetime.datetime | None = None
) -> list[Denial]:
    """A claim by ``check_claim``, anything else the policies judge by ``rules.check``."""
    return check_claim(obj, summary, now=now) if is_claim(obj) else check(obj, summary, now=now)


def check_documents(
    documents: Sequence[Any], summary: Mapping[str, Any] | None, *, now: datetime.datetime | None = None
) -> list[tuple[str, list[Denial]]]:
    """(object, denials) for every object of a kind the policies judge in a manifest's documents
    (``List`` items included): Pods, Jobs, the workloads and DRA claims and claim templates."""
    results = []
    for document in documents:
        if not isinstance(document, Mapping):
            continue
        items = document.get("items") if str(document.get("kind", "")).endswith("List") else [document]
        for obj in items or []:
            if isinstance(obj, Mapping) and (is_checked(obj) or is_claim(obj)):
                results.append((describe(obj), check_object(obj, summary, now=now)))
    return results
