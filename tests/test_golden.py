"""Golden tests: every fixture bundle → the NodeTopology body and labels nodetopo publishes for it.

The goldens are the whole output, so any change in behaviour shows up as a diff to review.
After a deliberate change, regenerate them with::

    NODETOPO_UPDATE_GOLDEN=1 python -m pytest tests/test_golden.py

and read the diff before committing. Facts that must hold whatever the goldens say are checked
against each bundle's hand-written ``expected.yaml`` in tests/bundle/test_bundles_expected.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from nodetopo.resource.body import to_nodetopology
from nodetopo.resource.labels import to_labels
from nodetopo.topology.discover import bundle_context, scan

FIXTURES = Path(__file__).parent / "fixtures"
BUNDLES = sorted(p for p in (FIXTURES / "bundles").glob("*") if p.is_dir())
GOLDEN = FIXTURES / "golden"
UPDATE = os.environ.get("NODETOPO_UPDATE_GOLDEN") == "1"


def render(bundle: Path) -> str:
    topology = scan(bundle_context(bundle)).topology
    document = {"nodeTopology": to_nodetopology(topology, bundle.name), "labels": to_labels(topology)}
    return json.dumps(document, indent=1, sort_keys=True) + "\n"


def test_there_are_bundles() -> None:
    assert len(BUNDLES) >= 7, "tests/fixtures/bundles should hold the machine bundles (make fixtures)"


@pytest.mark.parametrize("bundle", BUNDLES, ids=[b.name for b in BUNDLES])
def test_golden(bundle: Path) -> None:
    actual = render(bundle)
    golden = GOLDEN / f"{bundle.name}.json"
    if UPDATE:
        golden.write_text(actual)
    assert golden.is_file(), f"no golden for {bundle.name}: run with NODETOPO_UPDATE_GOLDEN=1"
    assert actual == golden.read_text(), f"{bundle.name}: output changed; regenerate deliberately if intended"


def test_no_stale_goldens() -> None:
    names = {b.name for b in BUNDLES}
    stale = sorted(p.name for p in GOLDEN.glob("*.json") if p.stem not in names)
    assert not stale, f"goldens without a bundle: {stale}"
