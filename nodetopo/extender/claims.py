"""A claim-based pod's request: its DRA ResourceClaims read from the API server, in the pod-request
language (``nodetopo.placement.claims``), merged with what the pod itself asks.

kube-scheduler sends the extender the Pod, not its claims. ``ClaimReader`` reads each claim the pod
uses (``spec.resourceClaims``: a ``resourceClaimName`` as given, a template's claim by the name in
``status.resourceClaimStatuses``) with one GET (``resource.k8s.io/v1``; RBAC: ``get`` on
``resourceclaims``, nothing else) and keeps what it read for ``TTL_S`` seconds, so ``/filter`` and
the ``/prioritize`` that follows read each claim once (a claim's spec is immutable; an annotation
changed meanwhile is seen within the TTL). At most ``MAX_CACHED`` claims are kept.

A claim that is already allocated asks nothing more (its devices are chosen; the scheduler holds
the pod to their node). A claim that does not exist yet, or a template's claim not yet made, is
``ClaimUnavailable``: every node fails *resolvably* with the reason, and kube-scheduler tries the pod
again (its own DRA plugin waits for the claim too). A claim the API server would not give (RBAC,
an error, unreachable) is ``ClaimReadError``: the request is answered 503, which kube-scheduler
retries (or, with an ignorable extender, places the pod without it).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from nodetopo.errors import NodetopoError
from nodetopo.placement.claims import GROUP, VERSION, ClaimRef, is_allocated, merge, parse_claim_request
from nodetopo.placement.request import AnnotationError, PodRequest

PLURAL = "resourceclaims"
TTL_S = 10.0
MAX_CACHED = 4096

#: (namespace, name) -> the ResourceClaim, or None when it does not exist (a 404)
Getter = Callable[[str, str], "dict[str, Any] | None"]


class ClaimUnavailable(AnnotationError):
    """A claim of the pod does not exist (yet): every node fails resolvably, the pod is retried."""


class ClaimReadError(NodetopoError):
    """A claim could not be read from the API server: the extender answers 503."""


def session_getter(session: Any) -> Getter:
    """A ``Getter`` over an ``ApiSession`` (``read_namespaced_object``)."""

    def get(namespace: str, name: str) -> dict[str, Any] | None:
        result: dict[str, Any] | None = session.read_namespaced_object(
            GROUP, VERSION, namespace, PLURAL, name
        )
        return result

    return get


class ClaimReader:
    """Claims by (namespace, name), through ``get``, kept ``ttl_s`` seconds."""

    def __init__(
        self, get: Getter, *, ttl_s: float = TTL_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._get = get
        self._ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._cache: dict[tuple[str, str], tuple[float, PodRequest | AnnotationError | None]] = {}
        self.reads = 0  #: GETs made (the cache's misses)

    def _read(self, namespace: str, name: str) -> PodRequest | AnnotationError | None:
        """The claim's request (None: allocated, asks nothing more) or why it cannot be placed."""
        key = (namespace, name)
        now = self._clock()
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None and now - hit[0] < self._ttl_s:
                return hit[1]
        self.reads += 1
        try:
            claim = self._get(namespace, name)
        except NodetopoError as e:  # RBAC, an error answer, unreachable: not a fact about the claim
            raise ClaimReadError(
                f"ResourceClaim {namespace}/{name}: {str(e).splitlines()[0][:300]}"
            ) from None
        if claim is None:  # not cached: it may appear any moment
            return ClaimUnavailable(f"ResourceClaim {namespace}/{name} does not exist (yet)")
        value: PodRequest | AnnotationError | None
        try:
            value = None if is_allocated(claim) else parse_claim_request(claim)
        except AnnotationError as e:
            value = AnnotationError(f"ResourceClaim {namespace}/{name}: {e}")
        with self._lock:
            if len(self._cache) >= MAX_CACHED:
                self._cache.clear()
            self._cache[key] = (now, value)
        return value

    def request(
        self, namespace: str, refs: tuple[ClaimRef, ...], pod: PodRequest
    ) -> PodRequest | AnnotationError:
        """The pod's whole request (``merge``), or the first reason it cannot be placed."""
        claims = []
        for ref in refs:
            if ref.claim is None:
                return ClaimUnavailable(
                    f"the pod's claim {ref.name!r} has not been created from its template yet"
                )
            value = self._read(namespace, ref.claim)
            if isinstance(value, AnnotationError):
                return value
            if value is not None:
                claims.append(value)
        return merge(pod, claims)


def with_claims(
    reader: ClaimReader | None,
    namespace: str,
    refs: tuple[ClaimRef, ...],
    request: PodRequest | AnnotationError,
) -> PodRequest | AnnotationError:
    """``request`` with the pod's claims merged in (unchanged without claims, a reader or a request)."""
    if reader is None or not refs or isinstance(request, AnnotationError):
        return request
    return reader.request(namespace, refs, request)
