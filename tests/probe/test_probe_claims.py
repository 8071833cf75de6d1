"""The probe's declaration of a claim-based pod: the need its ResourceClaims state merged into the
pod's own (``nodetopo.probe.claimed``), read through the Pod and each claim (``cli._claims``), and a
claim that cannot be read is an unknown need (skipped checks), never "no need"."""

from __future__ import annotations

import argparse
from typing import Any

from nodetopo.errors import NodetopoError
from nodetopo.placement.claims import ClaimRef
from nodetopo.probe.checks import check_declared, check_one_island, check_rdma, run_checks
from nodetopo.probe.claimed import with_claims
from nodetopo.probe.cli import _claims
from nodetopo.probe.inputs import Thresholds
from nodetopo.probe.outcome import Attribution, Status, verdict

from .test_checks import PROMISED, declared, seen

NS = "ml"


def claim(name: str, gpus: int = 2, allocated: bool = True, **annotations: str) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": name,
            "namespace": NS,
            "annotations": {f"nodetopo.io/{k.replace('_', '-')}": v for k, v in annotations.items()},
        },
        "spec": {
            "devices": {
                "requests": [
                    {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": gpus}}
                ]
            }
        },
    }
    if allocated:  # at start-up a claim is allocated: the extender skips it, the probe must not
        obj["status"] = {"allocation": {"devices": {"results": []}}}
    return obj


def reader(claims: dict[str, Any]) -> Any:
    def read(name: str) -> Any:
        value = claims.get(name)
        if isinstance(value, Exception):
            raise value
        return value

    return read


REFS = (ClaimRef(name="gpus", claim="train-gpus"),)


def test_a_need_only_on_the_claim_is_the_pods_need() -> None:
    d = with_claims(
        declared(), NS, REFS, reader({"train-gpus": claim("train-gpus", gpus_in_one_island="true")})
    )
    assert d.annotated and d.request is not None and d.request.one_island and d.request.gpus == 2
    assert d.claims == ("train-gpus",)
    c = check_declared(d)
    assert c.status is Status.PASS and "with ResourceClaim train-gpus" in c.reason, c.reason
    # the driver allocated across islands: the claim's need makes it PlacedWrong
    wrong = check_one_island(d, seen(gpu_ids=("GPU-1", "GPU-2")), PROMISED)
    assert (wrong.status, wrong.attribution) == (Status.FAIL, Attribution.PLACED_WRONG)
    # without the claim the same placement is not judged
    alone = check_one_island(declared(), seen(gpu_ids=("GPU-1", "GPU-2")), PROMISED)
    assert alone.status is Status.SKIP and not alone.asked


def test_the_pods_and_claims_needs_merge_as_the_extenders() -> None:
    two = (ClaimRef(name="a", claim="a"), ClaimRef(name="b", claim="b"))
    claims = {"a": claim("a", max_nic_distance="PHB"), "b": claim("b", gpus=1, max_nic_distance="PIX")}
    d = with_claims(declared(rdma="required"), NS, two, reader(claims))
    assert d.request is not None
    assert (d.request.rdma, d.request.max_nic_distance.name if d.request.max_nic_distance else None) == (
        True,
        "PIX",
    )
    assert d.request.gpus == 3 and d.claims == ("a", "b")


def test_a_claim_without_nodetopo_annotations_leaves_the_pod_undeclared() -> None:
    d = with_claims(declared(), NS, REFS, reader({"train-gpus": claim("train-gpus")}))
    c = check_declared(d)
    assert (c.status, c.attribution) == (Status.WARN, Attribution.UNDECLARED)


def test_a_bad_claim_annotation_fails_with_the_grammar_message() -> None:
    d = with_claims(declared(), NS, REFS, reader({"train-gpus": claim("train-gpus", rdma="maybe")}))
    c = check_declared(d)
    assert (c.status, c.attribution) == (Status.FAIL, Attribution.UNDECLARED)
    assert c.reason.startswith("ResourceClaim ml/train-gpus: ") and "rdma" in c.reason, c.reason


def test_an_unreadable_claim_is_an_unknown_need_never_no_need() -> None:
    for claims, why in (
        ({"train-gpus": NodetopoError("403 Forbidden: resourceclaims is forbidden")}, "403 Forbidden"),
        ({}, "ResourceClaim ml/train-gpus does not exist (yet)"),
    ):
        d = with_claims(declared(), NS, REFS, reader(claims))
        assert d.unread is not None and why in d.unread, d.unread
        checks = run_checks(d, PROMISED, None, seen(), Thresholds())
        by = {c.name: c for c in checks}
        assert by["declared"].status is Status.SKIP and by["declared"].asked
        # what the claim may ask is skipped, with the reason, not "not declared" and not asked
        for name in ("gpus-in-one-island", "rdma"):
            assert by[name].status is Status.SKIP and by[name].asked and why in by[name].reason
        assert verdict(checks, strict=True).passed is False
        assert verdict(checks).passed and "skipped: declared" in verdict(checks).line
    unmade = with_claims(declared(), NS, (ClaimRef(name="gpus", claim=None),), reader({}))
    assert unmade.unread == "the pod's claim 'gpus' has not been created from its template yet"
    assert check_rdma(unmade, seen(), PROMISED).asked


class FakeSession:
    def __init__(self, pod: Any, claims: dict[str, Any]) -> None:
        self.pod = pod
        self.claims = claims
        self.reads: list[str] = []

    def read_pod(self, namespace: str, name: str) -> Any:
        self.reads.append(f"pods/{namespace}/{name}")
        if isinstance(self.pod, Exception):
            raise self.pod
        return self.pod

    def read_namespaced_object(self, group: str, version: str, namespace: str, plural: str, name: str) -> Any:
        self.reads.append(f"{group}/{version}/{plural}/{namespace}/{name}")
        return reader(self.claims)(name)


def args(**kw: Any) -> argparse.Namespace:
    base = {"pod_name": "trainer", "pod_namespace": NS, "timeout": 5.0}
    base.update(kw)
    return argparse.Namespace(**base)


def pod(*claims: dict[str, Any], statuses: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    return {"spec": {"resourceClaims": list(claims)}, "status": {"resourceClaimStatuses": list(statuses)}}


def test_the_probe_reads_its_pod_then_each_claim_a_template_by_its_made_name() -> None:
    session = FakeSession(
        pod(
            {"name": "gpus", "resourceClaimTemplateName": "one-island"},
            statuses=({"name": "gpus", "resourceClaimName": "trainer-gpus-x1"},),
        ),
        {"trainer-gpus-x1": claim("trainer-gpus-x1", gpus_in_one_island="true")},
    )
    d = _claims(args(), session, None, declared())
    assert d.request.one_island and d.claims == ("trainer-gpus-x1",)
    assert session.reads == [
        "pods/ml/trainer",
        "resource.k8s.io/v1/resourceclaims/ml/trainer-gpus-x1",
    ]


def test_a_pod_without_claims_reads_no_claim_and_one_it_cannot_read_is_unknown() -> None:
    session = FakeSession(pod(), {})
    d = _claims(args(), session, None, declared(rdma="required"))
    assert d == declared(rdma="required") and session.reads == ["pods/ml/trainer"]
    denied = _claims(args(), FakeSession(NodetopoError("403 pods is forbidden"), {}), None, declared())
    assert denied.unread == "Pod ml/trainer could not be read for its ResourceClaims: 403 pods is forbidden"
    missing = _claims(args(), FakeSession(None, {}), None, declared())
    assert missing.unread is not None and "it does not exist" in missing.unread
    no_api = _claims(args(), None, "no API access: no kubeconfig", declared())
    assert no_api.unread is not None and "no API access" in no_api.unread
    # offline (no session, no error) and no pod name: nothing to read, the declaration as it was
    assert _claims(args(), None, None, declared()) == declared()
    assert _claims(args(pod_name=None), session, None, declared()) == declared()
