"""Deltas between two RESULTS.md files, figure by figure, so that a regression shows at a glance.

    python benchmarks/compare.py OLD.md NEW.md
    python benchmarks/run.py --compare OLD.md ...   # compares the run it just made against OLD.md

Figures are the rows of each file's Summary table, matched on (benchmark, figure). Every number in
a figure's value is compared with the number in the same place of the old value (``p50 / p99``
pairs, ``MiB / MiB`` pairs); every figure here is lower-is-better (times, ratios, memory, CPU,
API requests), so a number that grew by more than the noise margin is flagged ``worse``. A figure
whose verdict went from met to missed is ``REGRESSED`` whatever its numbers say.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from collections.abc import Sequence
from pathlib import Path

#: relative change below which a difference is called noise (shared 2-core machines)
NOISE = 0.10

_NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?")


@dataclasses.dataclass(frozen=True, slots=True)
class Figure:
    benchmark: str
    metric: str
    value: str
    target: str
    verdict: str

    @property
    def key(self) -> tuple[str, str]:
        """The figure's identity: its benchmark and its name without the run's parameters in
        parentheses (``(50 s measured, scaled)`` in a full run is ``(15 s …)`` in a quick one)."""
        return (self.benchmark, re.sub(r"\s*\([^)]*\d[^)]*\)", "", self.metric))


def parse_summary(text: str) -> list[Figure]:
    """The rows of the ``## Summary`` table of a RESULTS.md."""
    figures: list[Figure] = []
    in_summary = False
    for line in text.splitlines():
        if line.startswith("## "):
            in_summary = line.strip() == "## Summary"
            continue
        if not in_summary or not line.startswith("|") or line.startswith("|---"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5 or cells[0] == "benchmark":
            continue
        figures.append(Figure(*cells))
    return figures


def numbers(value: str) -> list[float]:
    """The numbers of a measured value, in order, ignoring what is in parentheses (the input name)."""
    without_notes = re.sub(r"\([^)]*\)", "", value)
    return [float(n.replace(",", "")) for n in _NUMBER.findall(without_notes)]


def _met(verdict: str) -> bool | None:
    v = verdict.strip("* ").lower()
    return {"met": True, "missed": False}.get(v)


def _change(old: float, new: float) -> str:
    if old == new:
        return "="
    if old == 0:
        return f"{new - old:+g}"
    return f"{(new - old) / abs(old) * 100:+.0f} %"


def _judge(old: Figure, new: Figure) -> str:
    was, now = _met(old.verdict), _met(new.verdict)
    if was is True and now is False:
        return "**REGRESSED** (met → missed)"
    if was is False and now is True:
        return "now met"
    a, b = numbers(old.value), numbers(new.value)
    if not a or len(a) != len(b):
        return "same" if old.value == new.value else "changed"
    worse = any(y > x * (1 + NOISE) + 1e-9 and y - x > 1e-9 for x, y in zip(a, b, strict=True))
    better = any(y < x * (1 - NOISE) - 1e-9 for x, y in zip(a, b, strict=True))
    if worse and better:
        return "mixed"
    return "worse" if worse else "better" if better else "within noise"


def compare(old_text: str, new_text: str) -> str:
    """A markdown table: every figure of ``new_text`` next to the same figure of ``old_text``."""
    old = {f.key: f for f in parse_summary(old_text)}
    new = parse_summary(new_text)
    rows = []
    for f in new:
        before = old.get(f.key)
        if before is None:
            rows.append(f"| {f.benchmark} | {f.metric} | – | {f.value} | | new figure |")
            continue
        a, b = numbers(before.value), numbers(f.value)
        delta = " / ".join(_change(x, y) for x, y in zip(a, b, strict=True)) if a and len(a) == len(b) else ""
        rows.append(
            f"| {f.benchmark} | {f.metric} | {before.value} | {f.value} | {delta} | {_judge(before, f)} |"
        )
    seen = {f.key for f in new}
    not_run = [f for f in old.values() if f.key not in seen]
    out = [
        "| benchmark | figure | before | now | change | |",
        "|---|---|---|---|---|---|",
        *rows,
    ]
    if not_run:
        out += ["", f"Not measured this time ({len(not_run)}): " + "; ".join(f.metric for f in not_run)]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("old", type=Path, help="the earlier RESULTS.md")
    parser.add_argument("new", type=Path, help="the later RESULTS.md")
    args = parser.parse_args(argv)
    print(compare(args.old.read_text(), args.new.read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
