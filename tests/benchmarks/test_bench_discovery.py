"""The discovery benchmark runs on a fresh clone: the corpus tree it unpacks outlives every use."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.mark.corpus
@pytest.mark.slow
def test_breakdown_of_the_unpacked_corpus_tree(corpus: Path) -> None:
    if not shutil.which("lstopo-no-graphics"):
        pytest.fail("lstopo-no-graphics (Debian package hwloc) is needed for the discovery benchmark")
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import bench_discovery
    finally:
        sys.path.remove(str(BENCHMARKS))
    # Only the corpus tree: it is the worst input, so its breakdown reads the unpacked tree again.
    section = bench_discovery.run(quick=True, only=[bench_discovery.LARGEST_TREE])
    breakdown = [t for t in section.tables if "Where the in-process time goes" in t]
    assert len(breakdown) == 1 and bench_discovery.LARGEST_TREE in breakdown[0]
    assert "source `sysfs.pci`" in breakdown[0]
