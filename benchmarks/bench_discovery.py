"""Discovery: ``scan(bundle_context(B))`` in process and ``nodetopo discover --from B`` as a process,
against ``lstopo-no-graphics`` (hwloc) reading the same sysfs tree with ``HWLOC_FSROOT``."""

from __future__ import annotations

import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from common import (
    BUNDLES,
    CORPUS,
    LSTOPO,
    Row,
    Section,
    child_env,
    compile_checkout,
    ms,
    table,
)

#: in-process target for the 8-GPU bundle
DGX_TARGET_S = 0.050
LARGEST_TREE = "32em64t-2n8c+dax+nvme+mic+dimms"


def lstopo_argv() -> list[str]:
    return [LSTOPO, "--whole-io", "--of", "xml", "-"]


def lstopo_env(root: Path) -> dict[str, str]:
    # as tests/sources/test_hwloc_referee.py: no CPUID of this machine mixed into a foreign tree
    return child_env(HWLOC_FSROOT=str(root), HWLOC_COMPONENTS="-x86", LANG="C", LC_ALL="C")


def unpack_tree(name: str, dest: Path) -> Path:
    tarball = CORPUS / "sysfs" / "hwloc" / f"{name}.tar.bz2"
    subprocess.run(["tar", "-C", str(dest), "-xjf", str(tarball)], check=True, capture_output=True)
    (top,) = [p for p in dest.iterdir() if (p / "sys").is_dir()]
    return top


def breakdown(name: str, path: Path, runs: int) -> str:
    """Where one input's in-process time goes: each source's own time and the join + derivations."""
    from nodetopo.topology.derive import derive_topology
    from nodetopo.topology.discover import bundle_context, collect

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


def paired(
    scan_once: Callable[[], object], lstopo: list[str] | None, env: dict[str, str], runs: int
) -> tuple[float, float, float | None, float | None]:
    """Medians of in-process scans and lstopo runs taken in turn (so that a burst of load on a
    shared machine hits both sides): (scan wall, scan CPU, lstopo wall, lstopo CPU) in seconds.
    CPU is this thread's time for a scan and the child's user + system time for lstopo: unlike wall
    time it does not grow with the other processes on the machine."""
    scan_once()  # warm-up
    walls, cpus, lwalls, lcpus = [], [], [], []
    for _ in range(runs):
        start, cpu = time.perf_counter(), time.thread_time()
        scan_once()
        cpus.append(time.thread_time() - cpu)
        walls.append(time.perf_counter() - start)
        if lstopo is None:
            continue
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(lstopo, env=env, capture_output=True, check=False, timeout=120)
        lwalls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(lstopo)} exited {done.returncode}: {done.stderr[-2000:]!r}")
        lcpus.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    median = statistics.median
    return (
        median(walls),
        median(cpus),
        median(lwalls) if lwalls else None,
        median(lcpus) if lcpus else None,
    )


def process_cpu_seconds(argv: list[str], runs: int, env: dict[str, str]) -> tuple[float, float]:
    """Median wall and median CPU (user + system, from ``RUSAGE_CHILDREN``) of running ``argv``."""
    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(argv, env=env, capture_output=True, check=False, timeout=120)
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr[-2000:]!r}")
        cpus.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return statistics.median(walls), statistics.median(cpus)


#: a fresh interpreter scans another bundle first (every lazy import and compiled pattern is then
#: in place), then times one scan of the input: nothing of that input from an earlier scan to reuse
_FIRST_SCAN = (
    "import sys, time\n"
    "from nodetopo.topology.discover import bundle_context, scan\n"
    "scan(bundle_context(sys.argv[2]))\n"
    "start, cpu = time.perf_counter(), time.thread_time()\n"
    "scan(bundle_context(sys.argv[1]))\n"
    "print(time.perf_counter() - start, time.thread_time() - cpu)\n"
)
#: the bundles that prime that process (the second one when the input is the first)
_PRIMERS = ("dgx-h100", "dgx-a100")


def first_scan_seconds(path: Path, runs: int) -> tuple[float, float]:
    """Median wall and CPU of the first ``scan(bundle_context(path))`` of ``path`` in a fresh process
    that has scanned another bundle: what a scan costs when nothing from an earlier scan can be
    reused, without the one-off imports."""
    primer = next(BUNDLES / name for name in _PRIMERS if BUNDLES / name != path)
    walls, cpus = [], []
    for _ in range(runs):
        done = subprocess.run(
            [sys.executable, "-c", _FIRST_SCAN, str(path), str(primer)],
            env=child_env(),
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        if done.returncode != 0:
            raise RuntimeError(f"first scan of {path} exited {done.returncode}: {done.stderr[-2000:]!r}")
        wall, cpu = (float(x) for x in done.stdout.split())
        walls.append(wall)
        cpus.append(cpu)
    return statistics.median(walls), statistics.median(cpus)


def floor_rows(name: str, lstopo_s: float, lstopo_cpu: float, runs: int) -> tuple[list[Row], list[float]]:
    """What no Python ``discover`` can go below, against the same lstopo figures: the bare
    interpreter, and the interpreter importing networkx (a required dependency: the graph every
    derivation reads is a networkx graph)."""
    rows, ratios = [], []
    for label, code in (
        ("floor: `python -c pass`", "pass"),
        ("floor: `python -c 'import networkx'`", "import networkx"),
    ):
        wall, cpu = process_cpu_seconds([sys.executable, "-c", code], runs, env=child_env())
        ratios.append(wall / lstopo_s)
        rows.append(
            Row(
                f"… {label} ÷ the same lstopo process (wall; CPU)",
                f"{wall / lstopo_s:.1f}×; {cpu / lstopo_cpu:.1f}× ({ms(wall)}; {ms(cpu)} vs {name})",
            )
        )
    return rows, ratios


def run(quick: bool, only: Sequence[str] = ()) -> Section:
    """``only``: the names of the inputs to measure (a bundle's directory name or the corpus tree's
    name); default every input."""
    from nodetopo.reuse import ScanCache
    from nodetopo.topology.discover import bundle_context, scan

    section = Section("discovery", "1. Discovery: in process, as a process, versus lstopo (hwloc)")
    runs_in, runs_proc = (7, 2) if quick else (20, 5)
    have_lstopo = shutil.which(LSTOPO) is not None
    rows: list[list[object]] = []
    worst_ratio: tuple[float, str] = (0.0, "")
    worst_cpu_ratio: tuple[float, str] = (0.0, "")
    worst_first: tuple[float, str] = (0.0, "")
    worst_proc: tuple[float, float, str] | None = None
    dgx_in = None
    lstopo_of: dict[str, tuple[float, float]] = {}
    not_compiled = compile_checkout()
    if not_compiled:
        section.notes.append(not_compiled)
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
            cache = ScanCache()  # one input's scans keep their last results, as an agent's do
            in_s, in_cpu, lstopo_s, lstopo_cpu = paired(
                lambda path=path, cache=cache: scan(bundle_context(path, cache=cache)),
                lstopo_argv() if have_lstopo else None,
                lstopo_env(path),
                runs_in,
            )
            result = scan(bundle_context(path))
            first_s, _first_cpu = first_scan_seconds(path, runs_proc)
            proc_s, proc_cpu = process_cpu_seconds(
                [sys.executable, "-m", "nodetopo", "discover", "--from", str(path), "-o", "json"],
                runs_proc,
                env=child_env(),
            )
            if lstopo_s is not None and lstopo_cpu is not None:
                lstopo_of[name] = (lstopo_s, lstopo_cpu)
            ratio_in = in_s / lstopo_s if lstopo_s else None
            ratio_cpu = in_cpu / lstopo_cpu if lstopo_cpu else None
            ratio_proc = proc_s / lstopo_s if lstopo_s else None
            ratio_proc_cpu = proc_cpu / lstopo_cpu if lstopo_cpu else None
            if ratio_proc is not None and (worst_proc is None or ratio_proc > worst_proc[0]):
                worst_proc = (ratio_proc, ratio_proc_cpu or 0.0, name)
            if ratio_in is not None and ratio_in > worst_ratio[0]:
                worst_ratio = (ratio_in, name)
            if lstopo_s and first_s / lstopo_s > worst_first[0]:
                worst_first = (first_s / lstopo_s, name)
            if ratio_cpu is not None and ratio_cpu > worst_cpu_ratio[0]:
                worst_cpu_ratio = (ratio_cpu, name)
            if name == "dgx-h100":
                dgx_in = in_s
            topo = result.topology
            rows.append(
                [
                    name,
                    f"{len(topo.gpus)}/{len(topo.nics)}/{len(topo.pci_devices)}",
                    ms(in_s),
                    ms(first_s),
                    f"{first_s / lstopo_s:.2f}×" if lstopo_s else "n/a",
                    ms(proc_s),
                    ms(lstopo_s) if lstopo_s else "n/a",
                    f"{ratio_in:.2f}×" if ratio_in is not None else "n/a",
                    f"{ratio_proc:.1f}×" if ratio_proc is not None else "n/a",
                    f"{ms(in_cpu)} / {ms(lstopo_cpu)}" if lstopo_cpu is not None else ms(in_cpu),
                    f"{ratio_cpu:.2f}×" if ratio_cpu is not None else "n/a",
                    ms(proc_cpu),
                    f"{ratio_proc_cpu:.1f}×" if ratio_proc_cpu is not None else "n/a",
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
        if worst_ratio[0] > 1.0:
            section.notes.append(
                f"Rediscovery misses ≤ 1× on {worst_ratio[1]} by {(worst_ratio[0] - 1) * 100:.0f} % "
                "(the table above splits its time). What is left is reading: every scan opens, fstat-s, "
                "reads and closes each attribute file of each PCI function, eight per function, through "
                "a descriptor of its directory checked once; parsing is reused. Going further would take "
                "fewer system calls per file: the file types from one listing of the directory instead "
                "of an fstat per file (which lets a capture swap a file for a device between the two), "
                "or reading `local_cpus` only when `local_cpulist` is absent (which loses the check "
                "that the two agree)."
            )
        section.rows.append(
            Row(
                "… the same in CPU time (scan thread ÷ lstopo user + system), worst input",
                f"{worst_cpu_ratio[0]:.2f}× ({worst_cpu_ratio[1]})",
            )
        )
        section.rows.append(
            Row(
                "… the first scan of an input (nothing to reuse, imports done) ÷ lstopo process, worst input",
                f"{worst_first[0]:.2f}× ({worst_first[1]})",
            )
        )
        if worst_proc is not None:
            section.rows.append(
                Row(
                    "cold `nodetopo discover --from B -o json` ÷ lstopo process, worst input (wall; CPU)",
                    f"{worst_proc[0]:.1f}×; {worst_proc[1]:.1f}× ({worst_proc[2]})",
                )
            )
            floors, (interpreter, with_networkx) = floor_rows(
                worst_proc[2], *lstopo_of[worst_proc[2]], runs_proc * 2
            )
            section.rows += floors
            section.notes.append(
                "Cold `discover` ÷ lstopo is information, not a target (issue 30 retired the ≤ 5× one): "
                f"on {worst_proc[2]} starting the interpreter alone is {interpreter:.1f}× that lstopo run "
                f"and importing networkx {with_networkx:.1f}×. A cold `discover` near lstopo would take one "
                "that starts no Python interpreter and builds no networkx graph (another language, or "
                "asking a process that is already running); networkx is the graph every derivation reads."
            )
    else:
        section.notes.append(f"{LSTOPO} is not installed: no peer ratio")
    section.tables.append(
        table(
            [
                "input",
                "GPUs/NICs/PCI fns",
                "in process",
                "first scan in a fresh process",
                "first ÷ lstopo",
                "as a process",
                "lstopo",
                "in ÷ lstopo",
                "process ÷ lstopo",
                "CPU: in process / lstopo",
                "CPU ÷",
                "CPU: as a process",
                "CPU: process ÷ lstopo",
            ],
            rows,
            title=(
                f"Medians: {runs_in} in-process scans and {runs_in} lstopo runs in turn, "
                f"{runs_proc} processes per input"
            ),
        )
    )
    section.notes.append(
        "In process = `scan(bundle_context(B, cache=C))` (opens the bundle, runs every source, joins, "
        "derives; one scan cache C per input), what the agent does every interval: from the second "
        "scan on, a parser or derivation whose "
        "input is the same as last scan's returns its last result (every file and output is still "
        "read; `nvidia-smi -q -x` is parsed every time, as a live driver's answer differs at every "
        "call). First scan in a fresh process = one scan of B in a process that has scanned another "
        "bundle (imports done, nothing of B to reuse). "
        "As a process = `python -m nodetopo discover --from B -o json`, "
        "dominated by interpreter start-up and imports. lstopo = `HWLOC_FSROOT=B HWLOC_COMPONENTS=-x86 "
        "lstopo-no-graphics --whole-io --of xml -` on the same `sys/` tree (hwloc reads sysfs only; "
        "nodetopo also parses the bundle's nvidia-smi / ibstat / NVML outputs)."
    )
    return section
