"""Shared test helpers: where the fixture bundles live, and a fixture bundle discovered offline into the
Topology and the NodeTopology object nodetopo publishes for it.

Tests import it as ``helpers``: pytest puts ``tests/`` on ``sys.path`` (the folder of the rootdir conftest).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nodetopo.model import Topology

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
BUNDLES = FIXTURES / "bundles"


def bundle_dirs() -> list[Path]:
    """Every fixture bundle, in name order."""
    return sorted(p for p in BUNDLES.iterdir() if p.is_dir())


def topology_of(bundle: str | Path) -> Topology:
    """The Topology nodetopo discovers from a fixture bundle (a name under ``BUNDLES``, or a path)."""
    from nodetopo.topology.discover import bundle_context, scan

    return scan(bundle_context(BUNDLES / bundle)).topology


def nodetopology_of(bundle: str, node_name: str | None = None) -> dict[str, Any]:
    """The NodeTopology object nodetopo publishes for a fixture bundle (discovered offline), named
    ``node_name`` or the bundle's name; the ``nodetopo`` logger is quieted for this call only (later tests
    read the logs)."""
    from nodetopo.resource.body import to_nodetopology

    logger = logging.getLogger("nodetopo")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        return to_nodetopology(topology_of(bundle), node_name or bundle)
    finally:
        logger.setLevel(level)


class GoModuleError(RuntimeError):
    """``go mod download`` of a module failed (the message says which, with the command's output)."""


def go_module_dir(module: str, version: str, cwd: Path) -> Path:
    """The directory of ``module@version`` in the Go module cache, downloaded on first use, asked from
    the module whose go.mod is in ``cwd``. Raises ``GoModuleError``; the caller fails or skips."""
    import json
    import subprocess

    done = subprocess.run(
        ["go", "mod", "download", "-json", f"{module}@{version}"],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        cwd=cwd,
    )
    if done.returncode != 0:
        raise GoModuleError(
            f"go mod download {module}@{version} failed: {done.stdout[-500:]} {done.stderr[-500:]}"
        )
    return Path(json.loads(done.stdout)["Dir"])


def required_version(go_mod: Path, module: str) -> str | None:
    """The version ``go_mod`` requires of ``module`` (``require M v`` or a line of a require block,
    a ``// indirect`` comment or not); None when it does not require it."""
    for line in go_mod.read_text().splitlines():
        words = line.split("//", 1)[0].split()
        if words[:1] == ["require"]:
            words = words[1:]
        if len(words) == 2 and words[0] == module:
            return words[1]
    return None


def nodetopology_with_degraded(bundle: str, degraded: Any, node_name: str | None = None) -> dict[str, Any]:
    """The NodeTopology the agent publishes for a fixture bundle once the edges ``degraded`` (a tuple
    of ``EdgeHealth``) are judged degraded: derived without them, as ``topology.discover`` does, and
    carrying them in ``status.health`` and the ``Degraded`` condition."""
    import dataclasses

    from nodetopo.model import NO_READINGS, HealthReport
    from nodetopo.resource.body import to_nodetopology
    from nodetopo.topology.derive import derive_topology
    from nodetopo.topology.discover import bundle_context, scan

    s = scan(bundle_context(BUNDLES / bundle))
    topology = derive_topology(dataclasses.replace(s.facts, health=NO_READINGS), tuple(degraded))
    report = HealthReport(judged=True, checked=s.topology.health.checked, degraded=tuple(degraded))
    return to_nodetopology(dataclasses.replace(topology, health=report), node_name or bundle)


def rail_down(nic: str, port: int = 1) -> Any:
    """An ``EdgeHealth``: port ``port`` of RDMA NIC ``nic`` published degraded (down, its peers up)."""
    from nodetopo.model import EdgeHealth, EdgeKind, LinkState

    return EdgeHealth(
        edge=f"{nic}/port{port}",
        kind=EdgeKind.PORT,
        device=nic,
        nic=nic,
        port=port,
        reasons=("PortDown",),
        message="DOWN while the node's other InfiniBand rails are ACTIVE",
        observed=LinkState(state="DOWN"),
        capability=LinkState(state="ACTIVE"),
    )


def synced_extender(objects: Any) -> Any:
    """The extender's ``ClusterState`` over the NodeTopology ``objects`` and no pods, both lists
    synced, as its reflectors leave it once they have listed."""
    from nodetopo.extender.cache import ClusterState

    state = ClusterState()
    state.replace_topologies(objects)
    state.replace_pods([])
    state.topologies_synced.set()
    state.pods_synced.set()
    return state


def pending_gpu_pod(gpus: int, annotations: dict[str, str]) -> dict[str, Any]:
    """A Pending pod asking ``gpus`` whole GPUs with the ``nodetopo.io/`` ``annotations``, as the
    scheduler hands it to the extender."""
    return {
        "metadata": {"name": "p", "namespace": "default", "uid": "u1", "annotations": annotations},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
        "status": {"phase": "Pending"},
    }


def require_dot() -> str:
    """Graphviz's ``dot`` program: a test that draws needs it; missing, it fails under CI (which
    installs it) and skips elsewhere."""
    import os
    import shutil

    import pytest

    found = shutil.which("dot")
    if found is None:
        message = "Graphviz `dot` is not installed (apt-get install graphviz)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found
