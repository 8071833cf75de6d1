"""Every field of the project's CRDs carries a description, so `kubectl explain` answers for each one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
CRDS = sorted((ROOT / "crds").glob("node*.yaml"))


#: The API server forbids anything but name/generateName under a CRD's top-level metadata (it
#: explains it as the standard ObjectMeta), so that one field is described by Kubernetes itself.
SERVER_DESCRIBED = {".metadata"}


def undescribed(schema: dict[str, Any], path: str = "") -> list[str]:
    """Paths (``.status.gpus[].index``) of properties without a non-empty description."""
    missing: list[str] = []
    for name, sub in (schema.get("properties") or {}).items():
        here = f"{path}.{name}"
        if here not in SERVER_DESCRIBED and not str(sub.get("description", "")).strip():
            missing.append(here)
        missing += undescribed(sub, here)
    items = schema.get("items")
    if isinstance(items, dict):
        missing += undescribed(items, path + "[]")
    return missing


def test_there_are_crds() -> None:
    assert {p.name for p in CRDS} >= {"nodetopology.yaml", "nodetopologysummary.yaml"}


@pytest.mark.parametrize("crd", CRDS, ids=[p.name for p in CRDS])
def test_every_field_has_a_description(crd: Path) -> None:
    body = yaml.safe_load(crd.read_text(encoding="utf-8"))
    for version in body["spec"]["versions"]:
        schema = version["schema"]["openAPIV3Schema"]
        assert schema.get("properties"), f"{crd.name} {version['name']}: no properties (walk found nothing)"
        missing = undescribed(schema)
        assert not missing, f"{crd.name} {version['name']}: fields without a description: {missing}"


def test_the_walk_finds_a_missing_description() -> None:
    schema = {
        "properties": {
            "a": {"type": "string", "description": "ok"},
            "b": {"type": "array", "description": "ok", "items": {"properties": {"c": {"type": "integer"}}}},
            "d": {"type": "object", "description": " ", "properties": {}},
        }
    }
    assert undescribed(schema) == [".b[].c", ".d"]
