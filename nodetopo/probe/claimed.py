"""A claim-based pod's declaration: the need its DRA ResourceClaims state, merged into what the pod
itself declared, as the extender merges them (``nodetopo.placement.claims``: the same reading of a
claim, the same merge, the same messages).

The pod's claims are its ``spec.resourceClaims`` (a ``resourceClaimName`` as given, a template's claim
by the name in ``status.resourceClaimStatuses``; a template's ``spec.metadata`` annotations are on
the claim made from it). The probe GETs its own Pod to find them and GETs each claim
(``resource.k8s.io/v1``). Unlike the extender, it reads an allocated claim too: its need is what the
probe checks. A claim that cannot be read (RBAC, not found, not made yet) leaves its need unknown,
never "no need": ``Declared.unread`` says why, and the checks it may ask for are skipped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from nodetopo.placement.claims import ClaimRef, claim_parts, merge, parse_claim_request
from nodetopo.placement.request import ANNOTATIONS, AnnotationError, PodRequest
from nodetopo.probe.inputs import Declared

PLURAL = "resourceclaims"

#: a claim's name -> the ResourceClaim (None: it does not exist); raises when it cannot be read
ReadClaim = Callable[[str], "Mapping[str, Any] | None"]


def _first_line(e: BaseException) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0][:300]


def with_claims(declared: Declared, namespace: str, refs: tuple[ClaimRef, ...], read: ReadClaim) -> Declared:
    """``declared`` with the need of the pod's claims ``refs`` merged in; a claim's bad annotation is
    the declaration's ``error``; a claim that cannot be read makes it ``unread``."""
    if declared.error is not None or not refs:
        return declared
    claims: list[PodRequest] = []
    names: list[str] = []
    annotated = declared.annotated
    for ref in refs:
        if ref.claim is None:
            why = f"the pod's claim {ref.name!r} has not been created from its template yet"
            return dataclasses.replace(declared, unread=why)
        where = f"ResourceClaim {namespace}/{ref.claim}"
        try:
            claim = read(ref.claim)
        except Exception as e:  # noqa: BLE001 - RBAC, an error answer, unreachable: not a fact about the claim
            return dataclasses.replace(declared, unread=f"{where} could not be read: {_first_line(e)}")
        if claim is None:
            return dataclasses.replace(declared, unread=f"{where} does not exist (yet)")
        try:
            claims.append(parse_claim_request(claim))
            annotated = annotated or any(key in claim_parts(claim)[0] for key in ANNOTATIONS)
        except AnnotationError as e:  # a PodShapeError too
            return dataclasses.replace(declared, request=None, error=f"{where}: {e}")
        names.append(ref.claim)
    request = merge(declared.request or PodRequest(), claims)
    return dataclasses.replace(declared, request=request, annotated=annotated, claims=tuple(names))
