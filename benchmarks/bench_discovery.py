"""Discovery: ``scan(bundle_context(B))`` in process and ``nodetopo discover --from B`` as a process,
against ``lstopo-no-graphics`` (hwloc) reading the same sysfs tree with ``HWLOC_FSROOT``."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from common import (
    BUNDLES,
    CORPUS,
    LSTOPO,
    Row,
    Section,
    child_env,
    median_seconds,
    ms,
    process_seconds,
    table,
)

#: in-process target for the 8-GPU bundle
DGX_TARGET_S = 0.050
LARGEST_TREE = "32em64t-2n8c+dax+nvme+mic+dimms"


def lstopo_argv() -> list[str]:
    return [LSTOPO, "--whole-io", "--of", "xml", "-"]


def lstopo_env(root: Path) -> dict[str, str]:
    # as tests/test_hwloc_referee.py: no CPUID of this machine mixed into a foreign tree
    return child_env(HWLOC_FSROOT=str(root), HWLOC_COMPONENTS="-x86", LANG="C", LC_ALL="C")


def unpack_tree(name: str, dest: Path) -> Path:
    tarball = CORPUS / "sysfs" / "hwloc" / f"{name}.tar.bz2"
    subprocess.run(["tar", "-C", str(dest), "-xjf", str(tarball)], check=True, capture_output=True)
    (top,) = [p for p in dest.iterdir() if (p / "sys").is_dir()]
    return top


def breakdown(name: str, path: Path, runs: int) -> str:
    """Where one input's in-process time goes: each source's own time and the join + derivations."""
    import statistics
    import time

    from nodetopo.derive import derive_topology
    from nodetopo.discover import bundle_context, collect

    per_source: dict[str, list[float]] = {}
    open_s, derive_s = [], []
    for _ in range(runs):
        start = time.perf_counter()
        ctx = bundle_context(path)
        open_s.append(time.perf_counter() - start)
        facts, results = collect(ctx)
        for result in results:
            per_source.setdefault(result.name, []).append(result.duration_s)
        start = time.perf_counter()
        derive_topology(facts)
        derive_s.append(time.perf_counter() - start)
    rows = [["open the bundle (cmd/ files, nvml.json)", ms(statistics.median(open_s))]]
    rows += [[f"source `{n}`", ms(statistics.median(t))] for n, t in per_source.items()]
    rows.append(["join + derivations (`derive_topology`)", ms(statistics.median(derive_s))])
    return table(["step", "median"], rows, title=f"Where the in-process time goes: {name}")


def run(quick: bool, only: Sequence[str] = ()) -> Section:
    """``only``: the names of the inputs to measure (a bundle's directory name or the corpus tree's
    name); default every input."""
    from nodetopo.discover import bundle_context, scan

    section = Section("discovery", "1. Discovery: in process, as a process, versus lstopo (hwloc)")
    runs_in, runs_proc, runs_lstopo = (5, 2, 5) if quick else (20, 5, 15)
    have_lstopo = shutil.which(LSTOPO) is not None
    rows: list[list[object]] = []
    worst_ratio: tuple[float, str] = (0.0, "")
    dgx_in = None
    with tempfile.TemporaryDirectory(prefix="nodetopo-bench-") as tmp:
        inputs: list[tuple[str, Path]] = [
            (b.name, b) for b in sorted(BUNDLES.iterdir()) if b.is_dir() and (not only or b.name in only)
        ]
        tarball: Path | None = CORPUS / "sysfs" / "hwloc" / f"{LARGEST_TREE}.tar.bz2"
        if only and LARGEST_TREE not in only:
            tarball = None
        if tarball is not None and tarball.is_file():
            inputs.append((f"{LARGEST_TREE} (corpus, sysfs only)", unpack_tree(LARGEST_TREE, Path(tmp))))
        elif tarball is not None:
            section.notes.append(f"corpus tree {tarball} not found: skipped")
        for name, path in inputs:
            in_s, _ = median_seconds(lambda path=path: scan(bundle_context(path)), runs_in)
            result = scan(bundle_context(path))
            proc_s = process_seconds(
                [sys.executable, "-m", "nodetopo", "discover", "--from", str(path), "-o", "json"],
                runs_proc,
                env=child_env(),
            )
            lstopo_s = (
                process_seconds(lstopo_argv(), runs_lstopo, env=lstopo_env(path)) if have_lstopo else None
            )
            ratio_in = in_s / lstopo_s if lstopo_s else None
            ratio_proc = proc_s / lstopo_s if lstopo_s else None
            if ratio_in is not None and ratio_in > worst_ratio[0]:
                worst_ratio = (ratio_in, name)
            if name == "dgx-h100":
                dgx_in = in_s
            topo = result.topology
            rows.append(
                [
                    name,
                    f"{len(topo.gpus)}/{len(topo.nics)}/{len(topo.pci_devices)}",
                    ms(in_s),
                    ms(proc_s),
                    ms(lstopo_s) if lstopo_s else "n/a",
                    f"{ratio_in:.2f}×" if ratio_in is not None else "n/a",
                    f"{ratio_proc:.1f}×" if ratio_proc is not None else "n/a",
                ]
            )
        # Inside the with: the worst input may be the corpus tree, unpacked under tmp.
        if worst_ratio[1]:
            section.tables.append(breakdown(worst_ratio[1], dict(inputs)[worst_ratio[1]], runs_in))
    if dgx_in is not None:
        section.rows.append(
            Row(
                "in process, dgx-h100 (8 GPUs), median",
                ms(dgx_in),
                f"≤ {ms(DGX_TARGET_S)}",
                dgx_in <= DGX_TARGET_S,
            )
        )
    if have_lstopo:
        section.rows.append(
            Row(
                "in process ÷ lstopo process, worst input",
                f"{worst_ratio[0]:.2f}× ({worst_ratio[1]})",
                "≤ 1×",
                worst_ratio[0] <= 1.0,
            )
        )
    else:
        section.notes.append(f"{LSTOPO} is not installed: no peer ratio")
    section.tables.append(
        table(
            [
                "input",
                "GPUs/NICs/PCI fns",
                "in process",
                "as a process",
                "lstopo",
                "in ÷ lstopo",
                "process ÷ lstopo",
            ],
            rows,
            title=(
                f"Medians: {runs_in} in-process scans, {runs_proc} processes, "
                f"{runs_lstopo} lstopo runs per input"
            ),
        )
    )
    section.notes.append(
        "In process = `scan(bundle_context(B))` (opens the bundle, runs every source, joins, derives), "
        "what the agent does every interval. As a process = `python -m nodetopo discover --from B -o json`, "
        "dominated by interpreter start-up and imports. lstopo = `HWLOC_FSROOT=B HWLOC_COMPONENTS=-x86 "
        "lstopo-no-graphics --whole-io --of xml -` on the same `sys/` tree (hwloc reads sysfs only; "
        "nodetopo also parses the bundle's nvidia-smi / ibstat / NVML outputs)."
    )
    return section
