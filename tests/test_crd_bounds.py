"""Every list and string of the NodeTopology schema is bounded, and the bounds are limits.py's (issue 17).

An unbounded schema let one node publish 20,000 GPUs in two-GPU islands (1.1 MB, schema-valid) and
slow every /filter of the scheduler extender. tests/kube/test_crd_bounds.py proves that the real
API server refuses objects over these bounds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from nodetopo.resource import limits as crd
from nodetopo.resource.body import _source

CRD = Path(__file__).resolve().parents[1] / "crds" / "nodetopology.yaml"


def schema() -> dict[str, Any]:
    document = yaml.safe_load(CRD.read_text())
    version: dict[str, Any] = document["spec"]["versions"][0]
    return version["schema"]["openAPIV3Schema"]  # type: ignore[no-any-return]


def walk(node: dict[str, Any], path: str = "") -> dict[str, dict[str, Any]]:
    """path → schema node, for every array and string below ``status`` (``[]`` marks list items)."""
    found: dict[str, dict[str, Any]] = {}
    kind = node.get("type")
    if kind in ("array", "string"):
        found[path] = node
    if kind == "array":
        found.update(walk(node["items"], path + "[]"))
    for key, child in (node.get("properties") or {}).items():
        found.update(walk(child, f"{path}.{key}" if path else key))
    return found


def test_every_list_and_string_in_the_status_is_bounded() -> None:
    nodes = {p: n for p, n in walk(schema()).items() if p.startswith("status")}
    assert len(nodes) > 40
    unbounded = [
        path
        for path, node in nodes.items()
        if (node["type"] == "array" and "maxItems" not in node)
        or (node["type"] == "string" and "maxLength" not in node and "enum" not in node)
    ]
    assert unbounded == []


def test_the_bounds_are_the_ones_crd_py_and_the_extender_use() -> None:
    nodes = walk(schema())
    expected = {
        "status.gpus": crd.MAX_GPUS,
        "status.nvlinkIslands[].gpus": crd.MAX_GPUS,
        "status.preferredGPUSets": crd.MAX_GPUS,
        "status.preferredGPUSets[].sets": crd.MAX_GPUS,
        "status.preferredGPUSets[].sets[]": crd.MAX_GPUS,
        "status.nics": crd.MAX_NICS,
        "status.gpus[].nics": crd.MAX_NICS,
        "status.gpus[].nearestNICs": crd.MAX_NICS,
        "status.nvlinkIslands": crd.MAX_ISLANDS,
        "status.gpuLinks": crd.MAX_GPU_LINKS,
        "status.numaNodes": crd.MAX_NUMA_NODES,
        "status.numaNodes[].distances": crd.MAX_NUMA_NODES,
        "status.migDevices": crd.MAX_MIG_DEVICES,
        "status.sources": crd.MAX_SOURCES,
        "status.conditions": crd.MAX_CONDITIONS,
        "status.health.degraded": crd.MAX_EDGES,
        "status.health.degraded[].reasons": crd.MAX_REASONS,
        "status.health.degraded[].rates": crd.MAX_RATES,
    }
    assert {p: nodes[p]["maxItems"] for p in expected} == expected
    assert nodes["status.sources[].message"]["maxLength"] == crd.MAX_SOURCE_MESSAGE
    assert nodes["status.health.degraded[].message"]["maxLength"] == crd.MAX_MESSAGE
    for path in ("status.health.degraded[].observed.state", "status.health.degraded[].capability.state"):
        assert nodes[path]["maxLength"] == crd.MAX_STATE
    for path in ("status.gpus[].cpuAffinity", "status.numaNodes[].cpus"):
        assert nodes[path]["maxLength"] == crd.MAX_CPULIST


def test_what_nodetopo_publishes_stays_within_the_bounds() -> None:
    """A source message longer than the schema allows is cut, not refused by the API server."""
    from nodetopo.model import SourceStatus

    status = _source(SourceStatus(name="nvidia-smi", ok=False, message="x" * 100_000))
    assert len(status["message"]) == crd.MAX_SOURCE_MESSAGE
