# ruff: noqa: E501  (a table: one case per entry, messages kept whole so they can be grepped)
"""ONE table of admission cases for DRA claims (deploy/admission/claim-policies.yaml), for ``nodetopo
admit`` (tests/admit/test_admit_claims.py) and for the real API server (tests/kube/test_admission.py).
The summaries are tests/admit/cases.py's (``mixed``: the largest island 8, 6 GPUs on one NUMA node,
NICs at PIX, InfiniBand only; ``gh200``: the best NIC at NODE).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from nodetopo.admission.claims import CLAIM_ANNOTATIONS_POLICY as CANN
from nodetopo.admission.claims import CLAIM_TOPOLOGY_POLICY as CTOPO

ISLAND = {"nodetopo.io/gpus-in-one-island": "true"}
GPU = "gpu.nvidia.com"
NIC = "rdma.dra.net"


def gpus(count: int, *, name: str = "gpus", cls: str = GPU, mode: str | None = None) -> dict[str, Any]:
    """One ``exactly`` request."""
    exactly: dict[str, Any] = {"deviceClassName": cls}
    if mode == "All":
        exactly["allocationMode"] = "All"
    else:
        exactly["count"] = count
    return {"name": name, "exactly": exactly}


def first_available(*counts: int, name: str = "gpus") -> dict[str, Any]:
    """A prioritized list: one alternative per count, in order."""
    return {
        "name": name,
        "firstAvailable": [{"name": f"n{c}", "deviceClassName": GPU, "count": c} for c in counts],
    }


@dataclasses.dataclass(frozen=True, slots=True)
class ClaimCase:
    id: str
    annotations: dict[str, str]
    requests: tuple[dict[str, Any], ...]
    expected: tuple[str, str] | None  #: (policy, message), or None: admitted
    template: bool = False  #: a ResourceClaimTemplate (annotations in spec.metadata) instead of a claim
    on_template_metadata: bool = False  #: a template with the annotations on its own metadata
    constraints: tuple[dict[str, Any], ...] = ()
    summary: str = "mixed"

    @property
    def kind(self) -> str:
        return "ResourceClaimTemplate" if self.template else "ResourceClaim"


CLAIM_CASES: tuple[ClaimCase, ...] = (
    ClaimCase("island-8-fits", ISLAND, (gpus(8),), None),
    ClaimCase(
        "island-16-too-big",
        ISLAND,
        (gpus(16),),
        (CTOPO, "claim needs 16 GPUs in one NVLink island but the largest island in the cluster has 8"),
    ),
    ClaimCase(
        "template-island-16-too-big",
        ISLAND,
        (gpus(16),),
        (CTOPO, "claim needs 16 GPUs in one NVLink island but the largest island in the cluster has 8"),
        template=True,
    ),
    # a template's own metadata is not copied to its claims: the need is not stated
    ClaimCase(
        "template-own-metadata-not-read", ISLAND, (gpus(16),), None, template=True, on_template_metadata=True
    ),
    ClaimCase(
        "two-requests-add-up",
        ISLAND,
        (gpus(8, name="a"), gpus(8, name="b")),
        (CTOPO, "claim needs 16 GPUs in one NVLink island but the largest island in the cluster has 8"),
    ),
    ClaimCase("first-available-takes-the-fewest", ISLAND, (first_available(16, 8),), None),
    ClaimCase(
        "first-available-every-alternative-too-big",
        ISLAND,
        (first_available(16, 12),),
        (CTOPO, "claim needs 12 GPUs in one NVLink island but the largest island in the cluster has 8"),
    ),
    ClaimCase("all-mode-is-unknown", ISLAND, (gpus(0, mode="All"),), None),
    ClaimCase("mig-class-not-whole-gpus", ISLAND, (gpus(16, cls="mig.nvidia.com"),), None),
    ClaimCase(
        "nics-are-not-gpus",
        ISLAND,
        (gpus(2), gpus(16, name="nics", cls=NIC)),
        None,
    ),
    ClaimCase(
        "pcie-root-alone-is-dra-s",
        {},
        (gpus(16),),
        None,
        constraints=({"matchAttribute": "resource.kubernetes.io/pcieRoot"},),
    ),
    ClaimCase(
        "numa-8-too-big",
        {"nodetopo.io/numa-aligned": "yes"},
        (gpus(8),),
        (CTOPO, "claim needs 8 GPUs on one NUMA node but the most on one NUMA node in the cluster is 6"),
    ),
    ClaimCase(
        "rdma-ethernet-absent",
        {"nodetopo.io/rdma": "required", "nodetopo.io/link-layer": "Ethernet"},
        (gpus(1, name="gpu"), gpus(1, name="nic", cls=NIC)),
        (CTOPO, "claim requires RDMA over Ethernet but the usable RDMA NICs in the cluster are InfiniBand"),
    ),
    ClaimCase(
        "nic-pix-fits",
        {"nodetopo.io/max-nic-distance": "PIX"},
        (gpus(1, name="gpu"), gpus(1, name="nic", cls=NIC)),
        None,
    ),
    ClaimCase(
        "nic-pix-tighter-than-the-cluster",
        {"nodetopo.io/max-nic-distance": "pix"},
        (gpus(1, name="gpu"), gpus(1, name="nic", cls=NIC)),
        (CTOPO, "claim needs a NIC at PIX or closer but the best GPU-to-NIC class in the cluster is NODE"),
        template=True,
        summary="gh200",
    ),
    ClaimCase(
        "island-and-rdma-nic-class",
        {**ISLAND, "nodetopo.io/rdma": "required", "nodetopo.io/max-nic-distance": "PXB"},
        (gpus(4),),
        (
            CTOPO,
            "claim needs 4 GPUs in one NVLink island but the largest island in the cluster has 2; "
            "claim needs an RDMA NIC at PXB or closer but the best GPU-to-RDMA-NIC class in the cluster is NODE",
        ),
        summary="gh200",
    ),
    ClaimCase(
        "bad-value",
        {"nodetopo.io/gpus-in-one-island": "maybe"},
        (gpus(2),),
        (CANN, 'nodetopo.io/gpus-in-one-island: expected true or false, got "maybe"'),
    ),
    ClaimCase(
        "pod-only-annotation",
        {"nodetopo.io/gpus-per-pod": "2", "nodetopo.io/topology": "any"},
        (gpus(2),),
        (
            CANN,
            "unknown annotation nodetopo.io/gpus-per-pod and 1 more; known: gpus-in-one-island, "
            "max-nic-distance, numa-aligned, rdma, link-layer",
        ),
        template=True,
    ),
    ClaimCase("stale-summary-refuses-nothing", ISLAND, (gpus(16),), None, summary="stale"),
    ClaimCase("missing-summary-refuses-nothing", ISLAND, (gpus(16),), None, summary="missing"),
    ClaimCase("partial-summary-refuses-nothing", ISLAND, (gpus(16),), None, summary="partial"),
)


def claim_manifest(case: ClaimCase, name: str, namespace: str) -> dict[str, Any]:
    """The ResourceClaim or ResourceClaimTemplate of ``case`` (``resource.k8s.io/v1``)."""
    spec: dict[str, Any] = {"devices": {"requests": [dict(r) for r in case.requests]}}
    if case.constraints:
        spec["devices"]["constraints"] = [dict(c) for c in case.constraints]
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if not case.template:
        if case.annotations:
            meta["annotations"] = dict(case.annotations)
        return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": meta, "spec": spec}
    claim_meta: dict[str, Any] = {}
    if case.annotations:
        (meta if case.on_template_metadata else claim_meta)["annotations"] = dict(case.annotations)
    body: dict[str, Any] = {"spec": spec}
    if claim_meta:
        body["metadata"] = claim_meta
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": meta,
        "spec": body,
    }
