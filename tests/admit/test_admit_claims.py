"""The DRA claim rules offline (``nodetopo admit`` on ResourceClaims and ResourceClaimTemplates), on the
one table of claim_cases.py that tests/kube/test_admission.py replays against the real API server."""

from __future__ import annotations

import datetime
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from admit.cases import summary
from admit.claim_cases import CLAIM_CASES, ClaimCase, claim_manifest, gpus
from nodetopo.admission.claims import check_claim
from nodetopo.admission.rules import Denial, ManifestError
from nodetopo.cli import main
from nodetopo.placement.claims import claim_gpus
from nodetopo.placement.request import ANNOTATIONS, GRAMMAR

REPO = Path(__file__).resolve().parents[2]
POLICIES = REPO / "deploy" / "admission" / "claim-policies.yaml"
EXAMPLES = REPO / "deploy" / "examples" / "dra" / "claim-templates.yaml"
NOW = datetime.datetime(2026, 6, 1, 12, 0, tzinfo=datetime.UTC)


@pytest.mark.parametrize("case", CLAIM_CASES, ids=[c.id for c in CLAIM_CASES])
def test_claim_case(case: ClaimCase) -> None:
    obj = claim_manifest(case, f"t-{case.id}", "team")
    denials = check_claim(obj, summary(case.summary, NOW), now=NOW)
    assert denials == ([Denial(*case.expected)] if case.expected else [])


def test_the_table_has_both_kinds_both_policies_and_both_outcomes() -> None:
    assert {(c.kind, c.expected is None) for c in CLAIM_CASES} == {
        (k, a) for k in ("ResourceClaim", "ResourceClaimTemplate") for a in (True, False)
    }
    assert {c.expected[0] for c in CLAIM_CASES if c.expected} == {
        "nodetopo-claim-annotations",
        "nodetopo-claim-topology",
    }
    assert len({c.id for c in CLAIM_CASES}) == len(CLAIM_CASES)


def test_the_claim_policies_carry_the_extender_grammar() -> None:
    """Both claim policies list exactly the extender's five annotations with the pods' patterns."""
    docs = [d for d in yaml.safe_load_all(POLICIES.read_text()) if d]
    assert [d["metadata"]["name"] for d in docs] == ["nodetopo-claim-annotations", "nodetopo-claim-topology"]
    expected = [[key, GRAMMAR[key].pattern] for key in ANNOTATIONS]
    for doc in docs:
        grammar = next(v["expression"] for v in doc["spec"]["variables"] if v["name"] == "grammar")
        entries = re.findall(r"\['(nodetopo\.io/[^']+)', '((?:[^'\\]|\\.)*)'", grammar)
        assert [[k, p.replace("\\\\", "\\")] for k, p in entries] == expected, doc["metadata"]["name"]
    texts = re.findall(r"'[^']*', '([^']*)'\]", docs[0]["spec"]["variables"][1]["expression"])
    assert texts == [GRAMMAR[key].expected for key in ANNOTATIONS]


def test_counting_follows_the_allocation_modes() -> None:
    spec = {"devices": {"requests": [gpus(2), gpus(0, name="all", mode="All"), gpus(3, name="m", cls="x")]}}
    assert claim_gpus(spec) == 2
    assert (
        claim_gpus(
            {"devices": {"requests": [{"name": "a", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}
        )
        == 1
    )
    assert claim_gpus({}) == 0


def test_a_malformed_claim_is_a_manifest_error() -> None:
    bad = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c"}}
    bad["spec"] = {
        "devices": {
            "requests": [{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": "2"}}]
        }
    }
    with pytest.raises(ManifestError, match=r"ResourceClaim/c: spec.devices.requests\[0\].exactly.count"):
        check_claim(bad, None)
    unquoted = {
        **bad,
        "spec": {},
        "metadata": {"name": "c", "annotations": {"nodetopo.io/gpus-in-one-island": True}},
    }
    with pytest.raises(ManifestError, match="values must be strings"):
        check_claim(unquoted, None)


def _write(path: Path, docs: list[Any]) -> Path:
    path.write_text(yaml.safe_dump_all(docs))
    return path


def test_admit_command_on_claims(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cli_logging: Any
) -> None:
    """``nodetopo admit`` judges the shipped example templates: DRA's own (no nodetopo annotation:
    admitted), nodetopo's (admitted where the cluster has the island and the NIC class, refused on a
    GH200 cluster) and a claim asking more GPUs in one island than the cluster has (exit 3)."""
    now = datetime.datetime.now(datetime.UTC)
    summary_file = _write(tmp_path / "summary.yaml", [summary("mixed", now)])
    assert main(["admit", str(EXAMPLES), "--summary", str(summary_file)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "ResourceClaimTemplate/two-gpus-one-pcie-root: admitted",
        "ResourceClaimTemplate/gpu-and-nic-one-pcie-root: admitted",
        "ResourceClaimTemplate/two-gpus-two-nics-one-pcie-root: admitted",
    ]
    annotated = EXAMPLES.with_name("nodetopo-claims.yaml")
    assert main(["admit", str(annotated), "--summary", str(summary_file)]) == 0
    capsys.readouterr()
    gh200 = _write(tmp_path / "gh200.yaml", [summary("gh200", now)])  # islands of 2, NICs at NODE
    assert main(["admit", str(annotated), "--summary", str(gh200)]) == 3
    out = capsys.readouterr().out
    assert out.splitlines() == [
        "ResourceClaimTemplate/four-gpus-one-nvlink-island: refused by nodetopo-claim-topology: claim needs "
        "4 GPUs in one NVLink island but the largest island in the cluster has 2",
        "ResourceClaimTemplate/gpu-and-pix-rdma-nic: refused by nodetopo-claim-topology: claim needs an RDMA "
        "NIC at PIX or closer but the best GPU-to-RDMA-NIC class in the cluster is NODE",
    ]
    bad = next(c for c in CLAIM_CASES if c.id == "template-island-16-too-big")
    path = _write(tmp_path / "bad.yaml", [claim_manifest(bad, "sixteen", "team")])
    assert main(["admit", str(path), "--summary", str(summary_file), "-o", "json"]) == 3
    assert json.loads(capsys.readouterr().out) == [
        {
            "object": "ResourceClaimTemplate/team/sixteen",
            "admitted": False,
            "denials": [{"policy": "nodetopo-claim-topology", "message": bad.expected[1]}],  # type: ignore[index]
        }
    ]
