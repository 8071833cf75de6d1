"""promtool for the tests: built from the Prometheus Go module by tests/tools-promtool/build.sh (its own
module, cached outside the repository), or named by ``NODETOPO_PROMTOOL``.

Without Go (or the Go module proxy) the tests that need it skip, saying why; under ``CI=true`` they fail.
"""

from __future__ import annotations

import functools
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "tests" / "tools-promtool" / "build.sh"
RULES = REPO / "deploy" / "monitoring" / "nodetopo-rules.yaml"
RULE_TESTS = REPO / "tests" / "monitoring" / "rules_test.yaml"


@functools.cache
def _build() -> tuple[Path | None, str]:
    override = os.environ.get("NODETOPO_PROMTOOL")
    if override:
        return Path(override), ""
    try:
        done = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True, timeout=3600, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"{BUILD} could not run: {e}"
    if done.returncode != 0:
        why = f"{BUILD} failed (exit {done.returncode}; needs Go and the Go module proxy)"
        return None, f"{why}:\n{done.stderr[-3000:]}"
    return Path(done.stdout.strip().splitlines()[-1]) / "promtool", ""


def promtool() -> Path:
    """The promtool binary; skips (fails under CI=true) when it cannot be built."""
    binary, why = _build()
    if binary is None or not os.access(binary, os.X_OK):
        why = why or f"{binary} is not executable"
        if os.environ.get("CI") == "true":
            pytest.fail(f"promtool is missing: {why}")
        pytest.skip(f"promtool is missing: {why}")
    return binary


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(promtool()), *args], capture_output=True, text=True, timeout=600, check=False, cwd=cwd
    )


def input_series(path: Path = RULE_TESTS) -> list[dict[str, str]]:
    """Every group's input series of the rule unit tests, in one list (their nodes and workloads are
    distinct, so the groups do not collide)."""
    tests = yaml.safe_load(path.read_text())["tests"]
    seen: set[str] = set()
    out: list[dict[str, str]] = []
    for group in tests:
        for s in group["input_series"]:
            assert s["series"] not in seen, f"{s['series']} is in two groups of {path.name}"
            seen.add(s["series"])
            out.append({"series": s["series"], "values": s["values"]})
    return out


def expr_tests_file(
    directory: Path,
    series: Sequence[Mapping[str, str]],
    cases: Sequence[tuple[str, Sequence[Mapping[str, Any]]]],
    *,
    eval_time: str = "60m",
    rules: Path = RULES,
) -> Path:
    """A promtool rule-test file evaluating ``cases`` ((expr, expected samples)) at ``eval_time``
    over ``series``, with ``rules`` loaded, written into ``directory``."""
    body = {
        "rule_files": [str(rules)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "name": "expressions",
                "interval": "1m",
                "input_series": list(series),
                "promql_expr_test": [
                    {"expr": expr, "eval_time": eval_time, "exp_samples": list(expected)}
                    for expr, expected in cases
                ],
            }
        ],
    }
    path = directory / "expr_test.yaml"
    path.write_text(yaml.safe_dump(body, sort_keys=False, width=10_000))
    return path


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def series_of(name: str, labels: Mapping[str, str]) -> str:
    """A series as promtool's input_series and exp_samples write it: ``name{k="v",...}``."""
    return name + "{" + ",".join(f"{k}={_quoted(v)}" for k, v in sorted(labels.items())) + "}"


def input_series_from_scrape(
    text: str, target: Mapping[str, str], names: Sequence[str], samples: int = 10
) -> list[dict[str, str]]:
    """The samples of the families ``names`` in a /metrics text, with the target labels Prometheus
    would add (``target``: job, instance), held for ``samples`` one-minute steps."""
    from prometheus_client.parser import text_string_to_metric_families

    out = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name in names:
                out.append(
                    {"series": series_of(s.name, {**s.labels, **target}), "values": f"{s.value!r}x{samples}"}
                )
    return out
