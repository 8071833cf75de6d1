"""Edge health (issue 24): what the link readings (the `sysfs.links` source: PCIe link speed, width and
AER totals of every GPU, NIC, NVSwitch and bridge on their way to the root port, and the error
counters of every RDMA port) add to a rescan's CPU time.

Each input is scanned as the agent scans it (a context that rescans, so the link files stay open
between scans, and the agent's health tracker, the clock moving on by the agent's 60 s interval at
every scan: every source, the links read, judged over scans and derived) and
with `sysfs.links` answering nothing (its `collect` and the link reads `sysfs.pci` does for it,
`PcieTexts.offer`, replaced inside this benchmark's process, so nothing of it is read and no PCIe
edge is judged; nodetopo itself is not modified), in pairs of
alternating order, each timed scan a rescan (after an untimed scan of the same variant); the figure
is the median of the paired differences in the scanning thread's CPU time over the median scan
without the readings. Inputs: the fixture bundles `dgx-h100` (69 PCI functions, 10 RDMA ports)
and `cpu-only` (3 PCI functions, 2 RDMA ports); dgx-h100 once more scanned as `nodetopo discover`
scans (a context that does not rescan, each scan judged alone), with a third of the pairs; and
dgx-h100 once more as the agent's whole cycle (``Agent.run_cycle`` of the agent ``build_agent`` wires for
the bundle, over the dry-run publisher: the scan, the body, the labels, the metrics, the publish check),
with the same pairs, to show what the readings add to what the agent pays per interval.

    python benchmarks/bench_health.py [--quick]     # prints the markdown section
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import BUNDLES, Row, Section, ensure_paths, ms, table

TARGET = 0.10  #: at most 10 % added to a scan (issue 24, on dgx-h100)
INPUTS = ("dgx-h100", "cpu-only")


#: the agent's default interval: the clock of the agent-style scans moves on by this much per scan
INTERVAL_S = 60.0


def _timed_scan(scan: Any, ctx: Any, **judging: Any) -> float:
    """CPU seconds of this thread for one scan."""
    cpu = time.thread_time()
    scan(ctx, **judging)
    return time.thread_time() - cpu


def _agent_cycles(pairs: int, use_links: Any) -> tuple[float, float, float]:
    """Median CPU of the agent's cycle without and with the link readings, and the median of the
    paired differences (A/B in alternating order, one agent per variant, each timed cycle after an
    untimed one of the same agent)."""
    import io

    from nodetopo.agent import config as agent_config
    from nodetopo.agent.cli import build_agent
    from nodetopo.agent.publisher import DryRunPublisher

    config = agent_config.load(
        {"bundle": str(BUNDLES / "dgx-h100"), "node_name": "bench", "dry_run": True, "udev": False}, {}
    )
    agents = {
        with_links: build_agent(config, publisher=DryRunPublisher("bench", io.StringIO()))
        for with_links in (True, False)
    }

    def one(with_links: bool) -> float:
        use_links(with_links)
        agents[with_links].run_cycle("interval")
        cpu = time.thread_time()
        agents[with_links].run_cycle("interval")
        return time.thread_time() - cpu

    for _ in range(3):
        one(True)
        one(False)
    cpu: dict[bool, list[float]] = {True: [], False: []}
    for i in range(pairs):
        for with_links in (True, False) if i % 2 == 0 else (False, True):
            cpu[with_links].append(one(with_links))
    without = statistics.median(cpu[False])
    added = statistics.median(a - b for a, b in zip(cpu[True], cpu[False], strict=True))
    return without, statistics.median(cpu[True]), added / without


def run(quick: bool) -> Section:
    ensure_paths()
    from nodetopo.health import DEFAULT_POLICY, HealthTracker
    from nodetopo.model import Facts
    from nodetopo.sources import links
    from nodetopo.sources.base import SourceResult
    from nodetopo.topology.discover import bundle_context, scan

    real, real_offer = links.collect, links.PcieTexts.offer

    def use_links(with_links: bool) -> None:
        links.collect = real if with_links else unread
        links.PcieTexts.offer = real_offer if with_links else not_offered  # type: ignore[method-assign,assignment]

    def unread(ctx: Any, facts: Any) -> SourceResult:
        return SourceResult(name=links.NAME, facts=Facts())

    def not_offered(*args: Any) -> None:
        return None

    section = Section("health", "Edge health (issue 24): cost of the link readings per rescan")
    pairs = 100 if quick else 300
    rows: list[list[object]] = []
    ratios: dict[str, float] = {}
    clock = [1.8e9]
    try:
        for name, agent in [(n, True) for n in INPUTS] + [("dgx-h100", False)]:
            # one context per variant: each keeps its own last scan (and its link files) and its own
            # tracker, as one agent would
            contexts = {v: bundle_context(BUNDLES / name, rescans=agent) for v in (True, False)}
            trackers = {v: HealthTracker(DEFAULT_POLICY) for v in (True, False)}

            def judging(with_links: bool, agent: bool = agent, trackers: Any = trackers) -> dict[str, Any]:
                if not agent:
                    return {}
                clock[0] += INTERVAL_S
                return {"judge": trackers[with_links], "now": clock[0]}

            def one(with_links: bool, ctx_of: dict[bool, Any] = contexts, judging: Any = judging) -> float:
                use_links(with_links)
                scan(ctx_of[with_links], **judging(with_links))  # the untimed scan before: a rescan
                return _timed_scan(scan, ctx_of[with_links], **judging(with_links))

            for _ in range(3):  # warm up imports and caches, both ways
                one(True)
                one(False)
            cpu: dict[bool, list[float]] = {True: [], False: []}
            for i in range(pairs if agent else pairs // 3):
                # A/B in alternating order, so drift and whatever else runs on the machine hit both alike
                for with_links in (True, False) if i % 2 == 0 else (False, True):
                    cpu[with_links].append(one(with_links))
            without = statistics.median(cpu[False])
            added = statistics.median(a - b for a, b in zip(cpu[True], cpu[False], strict=True)) / without
            label = name if agent else f"{name}, judged as `discover` judges (one scan alone)"
            ratios[label] = added
            rows.append(
                [
                    label,
                    ms(without),
                    ms(statistics.median(cpu[True])),
                    f"{added * 100:+.1f} %",
                    f"{1 + added:.2f}",
                ]
            )
        cycle_without, cycle_with, cycle_added = _agent_cycles(pairs, use_links)
        label = "dgx-h100, the agent's whole cycle (scan, body, labels, metrics, publish check)"
        ratios[label] = cycle_added
        rows.append(
            [
                label,
                ms(cycle_without),
                ms(cycle_with),
                f"{cycle_added * 100:+.1f} %",
                f"{1 + cycle_added:.2f}",
            ],
        )
    finally:
        links.collect = real
        links.PcieTexts.offer = real_offer  # type: ignore[method-assign]
    section.tables.append(
        table(
            ["input", "CPU: rescan without the link readings", "with", "added CPU", "ratio with / without"],
            rows,
            title=f"{pairs} A/B pairs each ({pairs // 3} for the `discover` row), alternating order; "
            "added = median of paired differences ÷ median without",
        )
    )
    section.rows.append(
        Row(
            "added to a rescan's CPU time by the link readings (median of paired A/B differences), dgx-h100",
            f"{ratios['dgx-h100'] * 100:+.1f} %",
            "≤ +10 %",
            ratios["dgx-h100"] <= TARGET,
        )
    )
    section.rows.append(
        Row(
            "the same on cpu-only (informational)",
            f"{ratios['cpu-only'] * 100:+.1f} %",
        )
    )
    section.rows.append(
        Row(
            "the same on dgx-h100 judged as `discover` judges, files not kept open (informational)",
            f"{ratios['dgx-h100, judged as `discover` judges (one scan alone)'] * 100:+.1f} %",
        )
    )
    section.rows.append(
        Row(
            "the same on dgx-h100 for the agent's whole cycle: scan, body, labels, metrics, publish check "
            "(informational)",
            f"{ratios[label] * 100:+.1f} %",
        )
    )
    section.notes.append(
        "Each scan as the agent scans: a context that rescans (`rescans=True`: the link files stay "
        "open between scans, `max_link_*` read once per function directory) and the agent's "
        "`HealthTracker` (rates and debounce over scans), its clock moving on by the agent's 60 s "
        "interval at every scan. The `discover` row scans as `nodetopo discover` does over and over: "
        "every file opened and read, each scan judged alone. The agent's whole cycle is "
        "`Agent.run_cycle` of the agent `build_agent` wires for the bundle over the dry-run publisher "
        "(the same publish chain over a session that prints, unchanged objects skipped): what the "
        "readings add there is what the agent pays per interval, the edges' body, labels and metrics "
        "included; its log line is below this process's log level."
    )
    section.notes.append(
        "CPU = the scanning thread's CPU time (`time.thread_time`). 'Without' replaces "
        "`sysfs.links`'s `collect` and `PcieTexts.offer` (the link attributes `sysfs.pci` reads "
        "through the directory it has open) inside this process: nothing under `bus/pci/devices/*/` "
        "`*_link_*`/`aer_dev_*` or `class/infiniband/*/ports/*/counters` is read, and the PCIe and "
        "port edges are judged on what the other sources read. The driver's link readings "
        "(`nvidia-smi nvlink -e`, `-q -x`, NVML) are read by both variants."
    )
    return section


if __name__ == "__main__":
    print(run("--quick" in sys.argv).markdown())
