"""Fixtures for the extender's unit tests: NodeTopology bodies of the real-machine fixture bundles."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import BUNDLES, nodetopology_of


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
