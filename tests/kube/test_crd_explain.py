"""`kubectl explain` on the real API server prints the CRDs' field descriptions (crds/*.yaml)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.k8s

CRDS = Path(__file__).resolve().parents[2] / "crds"


def _description(crd: str, path: str) -> str:
    """The description in crds/<crd> of ``path`` (``status.gpus.nics.distance``; lists are walked through)."""
    body = yaml.safe_load((CRDS / crd).read_text(encoding="utf-8"))
    node: dict[str, Any] = body["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for part in path.split("."):
        while "properties" not in node and "items" in node:
            node = node["items"]
        node = node["properties"][part]
    return str(node["description"])


def _explain(kubectl: Callable[..., Any], target: str) -> str:
    """``kubectl explain target``. The API server publishes a CRD's OpenAPI a moment after the CRD is
    Established, and until then kubectl says it "couldn't find resource": wait for it, bounded."""
    deadline = time.monotonic() + 60
    while True:
        done = kubectl("explain", target, user="admin", check=False)
        if done.returncode == 0:
            return str(done.stdout)
        if "couldn't find resource" not in done.stderr or time.monotonic() > deadline:
            raise AssertionError(f"kubectl explain {target} failed ({done.returncode}): {done.stderr}")
        time.sleep(0.5)


def _words(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


@pytest.mark.parametrize(
    ("crd", "resource", "path"),
    [
        ("nodetopology.yaml", "nodetopology", "status.gpus"),
        ("nodetopology.yaml", "nodetopology", "status.gpus.nics.distance"),
        ("nodetopology.yaml", "ntopo", "status.summary.worstNICDistance"),
        ("nodetopology.yaml", "nodetopology", "status.nvlinkIslands.linksPerPair"),
        ("nodetopology.yaml", "nodetopology", "status.conditions.reason"),
        ("nodetopology.yaml", "nodetopology", "status.network.tiers.level"),
        ("nodetopologysummary.yaml", "nodetopologysummary", "status.total.largestIsland"),
        ("nodetopologysummary.yaml", "ntsum", "spec.staleAfterSeconds"),
    ],
)
def test_kubectl_explain_prints_the_description(
    crd: str, resource: str, path: str, kubectl: Callable[..., Any]
) -> None:
    expected = _description(crd, path)
    assert len(expected) > 10
    text = _explain(kubectl, f"{resource}.{path}")
    out = _words(text)
    assert f"FIELD: {path.rsplit('.', 1)[-1]}" in out, text
    # kubectl wraps long lines: compare with whitespace collapsed
    assert _words(expected) in out, f"kubectl explain {resource}.{path}:\n{text}"


def test_kubectl_explain_lists_the_fields_with_their_descriptions(kubectl: Callable[..., Any]) -> None:
    out = _words(_explain(kubectl, "nodetopology.status.gpus"))
    for field in ("index", "uuid", "pcieRoot", "nearestNICs", "island"):
        assert re.search(rf"\b{field}\s+<", out), out
    assert _words(_description("nodetopology.yaml", "status.gpus.island")) in out
