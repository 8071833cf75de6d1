"""Every field of the project's CRDs carries a description, so `kubectl explain` answers for each one,
and the answer says what the field means to its reader, not how the schema or the agent works."""

from __future__ import annotations

import re
from collections.abc import Iterator
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


#: how the schema, the API machinery or the agent works, which `kubectl explain` readers cannot act on:
#: validation mechanics, printer columns, the status subresource, the kubelet's RPC names, what older
#: agents wrote phrased as the code reads it, the body's compaction rules
IMPLEMENTATION = re.compile(
    r"\bpattern\b|\benum\b|subresource|printer column|GetAllocatableResources|\(List\)"
    r"|\bas agents before\b|\bread when\b|\bleft out when\b",
    re.I,
)


def descriptions(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, str]]:
    """(path, description) of the schema and every property, item and map value under it."""
    if "description" in schema:
        yield path or ".", str(schema["description"])
    for name, sub in (schema.get("properties") or {}).items():
        yield from descriptions(sub, f"{path}.{name}")
    for key, suffix in (("items", "[]"), ("additionalProperties", "{}")):
        if isinstance(schema.get(key), dict):
            yield from descriptions(schema[key], path + suffix)


@pytest.mark.parametrize("crd", CRDS, ids=[p.name for p in CRDS])
def test_descriptions_say_what_a_field_means(crd: Path) -> None:
    body = yaml.safe_load(crd.read_text(encoding="utf-8"))
    notes = [
        f"{path}: {text!r}"
        for version in body["spec"]["versions"]
        for path, text in descriptions(version["schema"]["openAPIV3Schema"])
        if IMPLEMENTATION.search(text)
    ]
    assert not notes, f"{crd.name}: implementation notes in kubectl explain:\n" + "\n".join(notes)


def test_the_check_finds_an_implementation_note() -> None:
    schema = {
        "description": "A node.",
        "properties": {
            "a": {"description": "One of PIX, SYS (pattern: a nullable enum rejects null)"},
            "b": {"items": {"description": "Devices held (List)."}},
            "c": {"additionalProperties": {"description": "What the printer columns show."}},
            "d": {"description": "The NUMA nodes closest to the GPU."},
        },
    }
    found = [path for path, text in descriptions(schema) if IMPLEMENTATION.search(text)]
    assert found == [".a", ".b[]", ".c{}"]
