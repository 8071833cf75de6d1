"""benchmarks/compare.py: the deltas between two RESULTS.md files."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def compare_module() -> Iterator[ModuleType]:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import compare

        yield compare
    finally:
        sys.path.remove(str(BENCHMARKS))


def _results(*rows: str) -> str:
    return "\n".join(
        [
            "# nodetopo benchmarks: results",
            "",
            "| machine |  |",
            "|---|---|",
            "| nproc | 2 |",
            "",
            "## Summary",
            "",
            "| benchmark | figure | measured | target | |",
            "|---|---|---|---|---|",
            *rows,
            "",
            "## 1. Discovery: in process",
            "",
            "| figure | measured | target | |",
            "|---|---|---|---|",
            "| not a summary row | 99 ms | – | – |",
        ]
    )


OLD = _results(
    "| 1. Discovery | in process ÷ lstopo process, worst input | 1.39× (dgx-a100) | ≤ 1× | **missed** |",
    "| 2. Scale | derive_topology, 1,024-device node | 184.7 ms | ≤ 250.0 ms | met |",
    "| 5. Extender | filter over HTTP, p50 / p99 | 5.04 / 8.55 ms | p50 ≤ 5 ms | **missed** |",
    "| 4. API traffic | writes over 30 cycles | 0 | 0 | met |",
    "| 3. Agent | steady RSS | 47.4 MiB | ≤ 48 MiB | met |",
    "| 3. Agent | CPU per idle minute (50 s measured, scaled) | 12 CPU-ms/min | – | – |",
)
NEW = _results(
    "| 1. Discovery | in process ÷ lstopo process, worst input | 0.95× (32em64t) | ≤ 1× | met |",
    "| 2. Scale | derive_topology, 1,024-device node | 190.0 ms | ≤ 250.0 ms | met |",
    "| 5. Extender | filter over HTTP, p50 / p99 | 4.00 / 12.00 ms | p50 ≤ 5 ms | **missed** |",
    "| 4. API traffic | writes over 30 cycles | 2 | 0 | **missed** |",
    "| 6. Probe | cold nodetopo probe | 0.2 s | ≤ 0.3 s | met |",
    "| 3. Agent | CPU per idle minute (15 s measured, scaled) | 13 CPU-ms/min | – | – |",
)


def test_each_figure_is_judged_against_the_same_figure(compare_module: ModuleType) -> None:
    lines = {
        line.split(" | ")[1]: line for line in compare_module.compare(OLD, NEW).splitlines() if " | " in line
    }
    assert lines["in process ÷ lstopo process, worst input"].endswith("| -32 % | now met |")
    assert lines["derive_topology, 1,024-device node"].endswith("| +3 % | within noise |")
    assert lines["filter over HTTP, p50 / p99"].endswith("| -21 % / +40 % | mixed |")
    assert "**REGRESSED** (met → missed)" in lines["writes over 30 cycles"]
    assert lines["cold nodetopo probe"].endswith("| new figure |")
    # a figure whose name carries the run's parameters is still the same figure
    assert lines["CPU per idle minute (15 s measured, scaled)"].endswith("| +8 % | within noise |")


def test_figures_not_measured_again_are_listed(compare_module: ModuleType) -> None:
    out = compare_module.compare(OLD, NEW)
    assert "Not measured this time (1): steady RSS" in out
    assert "not a summary row" not in out


def test_a_slower_figure_is_worse(compare_module: ModuleType) -> None:
    slower = OLD.replace("184.7 ms | ≤ 250.0 ms | met", "230.0 ms | ≤ 250.0 ms | met")
    line = next(x for x in compare_module.compare(OLD, slower).splitlines() if "1,024-device" in x)
    assert line.endswith("| +25 % | worse |")


def test_run_appends_the_comparison(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import run
        from common import Row, Section
    finally:
        sys.path.remove(str(BENCHMARKS))
    figure = Row("derive_topology, 1,024-device node", "300.0 ms", "≤ 250.0 ms", False)
    monkeypatch.setattr(
        run, "runner", lambda name, full=False: lambda quick: [Section(name, "2. Scale: x", rows=[figure])]
    )
    old = tmp_path / "RESULTS.md"
    old.write_text(OLD)
    # --compare the file the run overwrites: the old text is read first
    code = run.main(["scale", "--quick", "-o", str(old), "--compare", str(old)])
    text = old.read_text()
    assert code == 0
    assert "## Against an earlier run (RESULTS.md)" in text
    assert (
        "| 2. Scale | derive_topology, 1,024-device node | 184.7 ms | 300.0 ms | +62 % | **REGRESSED**"
        in text
    )


def test_the_header_and_each_section_say_the_load_at_their_own_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import common
        import run
        from common import Section
    finally:
        sys.path.remove(str(BENCHMARKS))
    readings = iter(f"{x}.00, 0.00, 0.00" for x in range(1, 100))
    monkeypatch.setattr(common, "load_average", lambda: next(readings))
    monkeypatch.setattr(run, "load_average", common.load_average)
    monkeypatch.setattr(run, "runner", lambda name, full=False: lambda quick: [Section(name, f"{name}: x")])
    out = tmp_path / "RESULTS.md"
    assert run.main(["scale", "probe", "--quick", "-o", str(out)]) == 0
    text = out.read_text()
    # read in turn: the run's start, then each section's start and end, then the header's end
    assert "| load average at start (1/5/15 min) | 1.00, 0.00, 0.00 |" in text
    assert "at this section's start: 2.00, 0.00, 0.00; at its end: 3.00, 0.00, 0.00" in text
    assert "at this section's start: 4.00, 0.00, 0.00; at its end: 5.00, 0.00, 0.00" in text
    assert "| load average at the end (1/5/15 min) | 6.00, 0.00, 0.00 |" in text
