"""Fixtures for the extender's unit tests: NodeTopology bodies of the real-machine fixture bundles."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

BUNDLES = Path(__file__).resolve().parents[1] / "fixtures" / "bundles"


def nodetopology_of(bundle: str, node_name: str | None = None) -> dict[str, Any]:
    """The NodeTopology object nodetopo publishes for a fixture bundle (discovered offline)."""
    from nodetopo.resource.body import to_nodetopology
    from nodetopo.topology.discover import bundle_context, scan

    logger = logging.getLogger("nodetopo")
    level = logger.level
    logger.setLevel(logging.ERROR)  # quiet discovery, for this call only (later tests read the logs)
    try:
        return to_nodetopology(scan(bundle_context(BUNDLES / bundle)).topology, node_name or bundle)
    finally:
        logger.setLevel(level)


@pytest.fixture(scope="session")
def bodies() -> dict[str, dict[str, Any]]:
    names = [
        "dgx-h100",
        "dgx-a100",
        "dgx1-v100",
        "pcie-4x-nvbridge",
        "pcie-8x-2socket",
        "a100-mig",
        "gh200-nvl",
    ]
    missing = [n for n in names if not (BUNDLES / n).is_dir()]
    assert not missing, f"fixture bundles missing: {missing}"
    return {n: nodetopology_of(n) for n in names}
