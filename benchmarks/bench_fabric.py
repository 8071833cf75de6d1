"""Fabric sources (issue 13): what `fabric.ib`, `fabric.lldp` and `fabric.cloud` add to a scan on
nodes that have no InfiniBand and no running lldpd — the common case, which must stay cheap.

Each input is scanned with every source and with every source but the fabric ones, alternating, and
the medians compared; the fabric sources' own times are reported too. Inputs: this machine (live:
no IB ports, lldpcli installed but lldpd not running, cloud metadata off as by default) and the
fixture bundles `cpu-only` and `dgx-h100` (IB ports but no fabric map and no iblinkinfo output:
the answer is "not installed", as on a node without infiniband-diags).

    python benchmarks/bench_fabric.py [--quick]     # prints the markdown section
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import BUNDLES, Row, Section, ensure_paths, ms, table

TARGET = 0.10  #: at most 10 % added to a scan


def run(quick: bool) -> Section:
    ensure_paths()
    from nodetopo import sources
    from nodetopo.discover import bundle_context, host_context, scan
    from nodetopo.sources.fabric import cloud, infiniband, lldp

    fabric = (infiniband, lldp, cloud)
    base = tuple(s for s in sources.ALL if s not in fabric)
    section = Section("fabric", "Fabric sources (issue 13): cost on nodes without IB or LLDP")
    runs = 15 if quick else 60
    # (name, context, counts for the target: a node without IB or LLDP)
    inputs = [
        ("this machine (live, no IB, lldpd stopped)", lambda: host_context("/", nvml="off"), True),
        ("cpu-only bundle", lambda: bundle_context(BUNDLES / "cpu-only"), True),
        (
            "dgx-h100 bundle (IB ports, no map: informational)",
            lambda: bundle_context(BUNDLES / "dgx-h100"),
            False,
        ),
    ]
    rows: list[list[object]] = []
    worst = (0.0, "")
    for name, make, counts in inputs:
        ctx = make()
        scan(ctx)  # warm up imports and caches
        with_all: list[float] = []
        without: list[float] = []
        own: dict[str, list[float]] = {}
        for _ in range(runs):
            start = time.perf_counter()
            result = scan(ctx)
            with_all.append(time.perf_counter() - start)
            for r in result.results:
                if r.name.startswith("fabric."):
                    own.setdefault(r.name, []).append(r.duration_s)
            start = time.perf_counter()
            scan(ctx, base)
            without.append(time.perf_counter() - start)
        a, b = statistics.median(with_all), statistics.median(without)
        added = (a - b) / b
        if counts and (added > worst[0] or not worst[1]):
            worst = (added, name)
        own_total = statistics.median([sum(t[i] for t in own.values()) for i in range(runs)]) if own else 0.0
        rows.append(
            [
                name,
                ms(b),
                ms(a),
                f"{added * 100:+.1f} %",
                ", ".join(f"{n} {ms(statistics.median(t))}" for n, t in sorted(own.items())) or "–",
                own_total / b,
                counts,
            ]
        )
    section.tables.append(
        table(
            ["input", "scan without fabric sources", "scan with them", "added", "fabric sources' own time"],
            [r[:5] for r in rows],
            title=f"Median of {runs} alternating scans each",
        )
    )
    own_share = max(r[5] for r in rows if r[6])
    section.rows.append(
        Row(
            "fabric sources' own time ÷ scan, worst node without IB/LLDP",
            f"{own_share * 100:.1f} %",
            "≤ 10 %",
            own_share <= TARGET,
        )
    )
    section.rows.append(
        Row(
            "added to a scan, worst node without IB/LLDP",
            f"{worst[0] * 100:+.1f} % ({worst[1]})",
            "≤ +10 %",
            worst[0] <= TARGET,
        )
    )
    return section


if __name__ == "__main__":
    print(run("--quick" in sys.argv).markdown())
