"""Shared pieces of the benchmarks: timing, process memory, result rows, the machine description."""

from __future__ import annotations

import dataclasses
import datetime
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
BUNDLES = REPO / "tests" / "fixtures" / "bundles"
CORPUS = Path(os.environ.get("NODETOPO_CORPUS", REPO.parent / "shared" / "corpus")) / "real"
LSTOPO = "lstopo-no-graphics"


def ensure_paths() -> None:
    """Make ``nodetopo`` (the checkout) and the test helpers (``tests/``) importable."""
    for path in (REPO, REPO / "tests"):
        if str(path) not in sys.path:
            sys.path.insert(0, str(path))


def child_env(**extra: str) -> dict[str, str]:
    """The environment for a benchmark subprocess: the checkout on ``PYTHONPATH``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.update(extra)
    return env


def compile_checkout() -> str | None:
    """Byte-compile ``nodetopo/`` as ``pip install`` does, before cold processes are timed: with
    ``PYTHONDONTWRITEBYTECODE`` set and no ``__pycache__`` (a fresh clone) each cold process would
    compile nodetopo from source, a cost no installed copy pays. A note for RESULTS.md when that
    could not be done (a read-only checkout), else None."""
    done = subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(REPO / "nodetopo")], capture_output=True, text=True
    )
    if done.returncode == 0:
        return None
    return (
        "nodetopo/ could not be byte-compiled (`compileall` exited "
        f"{done.returncode}): the cold-process figures include compiling it from source"
    )


# --------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Row:
    """One figure next to its target. ``ok`` None: informational, no target."""

    metric: str
    value: str
    target: str = "–"
    ok: bool | None = None

    @property
    def verdict(self) -> str:
        return {True: "met", False: "**missed**", None: "–"}[self.ok]


@dataclasses.dataclass(slots=True)
class Section:
    """The results of one benchmark: headline rows, extra markdown tables, and notes."""

    name: str
    title: str
    rows: list[Row] = dataclasses.field(default_factory=list)
    tables: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0

    def markdown(self) -> str:
        out = [f"## {self.title}", ""]
        if self.rows:
            out += ["| figure | measured | target | |", "|---|---|---|---|"]
            out += [f"| {r.metric} | {r.value} | {r.target} | {r.verdict} |" for r in self.rows]
            out.append("")
        for table in self.tables:
            out += [table, ""]
        for note in self.notes:
            out += [note, ""]
        out.append(f"_{self.name}: {self.seconds:.0f} s wall_")
        return "\n".join(out)


def table(header: Sequence[str], rows: Sequence[Sequence[object]], title: str = "") -> str:
    lines = [f"**{title}**", ""] if title else []
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "---|" * len(header))
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------------------------


def median_seconds(fn: Callable[[], object], runs: int, *, warmup: int = 1) -> tuple[float, list[float]]:
    """Median wall time of ``fn`` over ``runs`` calls (after ``warmup`` untimed calls)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), times


def process_seconds(argv: Sequence[str], runs: int, *, env: dict[str, str] | None = None) -> float:
    """Median wall time of running ``argv`` to completion (output discarded; must exit 0)."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(list(argv), env=env, capture_output=True, check=False, timeout=120)
        times.append(time.perf_counter() - start)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr[-2000:]!r}")
    return statistics.median(times)


#: Runs argv (after its stdout and stderr paths and a time limit, 0 for none) and prints its wall
#: seconds, CPU seconds, ru_maxrss (KiB), exit code and 1 when it was stopped at the limit. A child's
#: ru_maxrss keeps the high-water mark of the memory it was forked from across exec, so a child
#: spawned by run.py (tens of MiB after the other benchmarks) would report run.py's RSS; spawned
#: from this small interpreter (no site, no imports) it reports its own.
_LAUNCHER = """\
import os, sys, time
out, err, limit, argv = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4:]
flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
actions = [(os.POSIX_SPAWN_OPEN, 1, out, flags, 0o644), (os.POSIX_SPAWN_OPEN, 2, err, flags, 0o644)]
start = time.perf_counter()
pid = os.posix_spawn(argv[0], argv, os.environ, file_actions=actions)
stopped = 0
while True:
    got, status, usage = os.wait4(pid, os.WNOHANG if limit else 0)
    if got:
        break
    if time.perf_counter() - start > limit:
        os.kill(pid, 9)
        got, status, usage = os.wait4(pid, 0)
        stopped = 1
        break
    time.sleep(0.005)
wall = time.perf_counter() - start
code = os.waitstatus_to_exitcode(status)
print(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss, code, stopped)
"""


def spawn_measured(
    argv: Sequence[str],
    env: dict[str, str],
    *,
    stdout: Path | str = os.devnull,
    stderr: Path | str = os.devnull,
    timeout: float = 0.0,
) -> dict[str, Any]:
    """One run of ``argv`` (``argv[0]`` a path) from a small launcher: ``wall`` and ``cpu`` seconds,
    peak RSS ``rss`` (KiB, the child's own ``ru_maxrss``), exit code ``rc``, and ``stopped`` when it
    ran past ``timeout`` seconds (0: no limit) and was killed."""
    launcher = [sys.executable, "-S", "-c", _LAUNCHER, str(stdout), str(stderr), str(timeout), *argv]
    done = subprocess.run(launcher, env=env, capture_output=True, text=True, check=True)
    wall, cpu, rss, rc, stopped = done.stdout.split()
    return {"wall": float(wall), "cpu": float(cpu), "rss": int(rss), "rc": int(rc), "stopped": stopped == "1"}


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile (``pct`` in 0..100)."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(pct / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds < 10 else f"{seconds:.1f} s"


# --------------------------------------------------------------------------------------------
# Process memory and CPU (Linux /proc)
# --------------------------------------------------------------------------------------------


def proc_status_kib(pid: int | str, field: str) -> int:
    """A ``kB`` field of ``/proc/<pid>/status`` (``VmRSS``, ``VmHWM``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def proc_cpu_seconds(pid: int | str) -> float:
    """User + system CPU seconds of a process so far (``/proc/<pid>/stat``)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2 :].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def mib(kib: float) -> str:
    return f"{kib / 1024:.1f} MiB"


def import_rss_kib(statement: str) -> int:
    """RSS (VmRSS, KiB) of a fresh ``python -c <statement>`` right after it ran."""
    code = f"{statement}\nimport pathlib\nprint(pathlib.Path('/proc/self/status').read_text())"
    done = subprocess.run(
        [sys.executable, "-c", code], env=child_env(), capture_output=True, text=True, check=True, timeout=120
    )
    for line in done.stdout.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS from {statement!r}")


# --------------------------------------------------------------------------------------------
# The machine
# --------------------------------------------------------------------------------------------


def load_average() -> str:
    """The 1/5/15-minute load average now, as RESULTS.md writes it (``unknown`` where unavailable)."""
    try:
        return ", ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def machine(load_at_start: str | None = None) -> list[tuple[str, str]]:
    """The environment header. ``load_at_start``: the load average read when the run began (a
    header written at the end would otherwise report the load the run itself made)."""
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        mem_kib = proc_status_meminfo_total()
        memory = f"{mem_kib / 1024 / 1024:.1f} GiB"
    except (OSError, KeyError):
        memory = "unknown"
    try:
        lstopo = subprocess.run([LSTOPO, "--version"], capture_output=True, text=True, check=False).stdout
    except OSError:
        lstopo = "not installed"
    return [
        ("date", datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")),
        ("nproc", str(os.cpu_count())),
        ("CPU", cpu),
        ("memory", memory),
        ("Python", f"{platform.python_version()} ({platform.python_implementation()})"),
        ("kernel", platform.release()),
        ("hwloc", lstopo.strip() or "unknown"),
        ("load average at start (1/5/15 min)", load_at_start or load_average()),
        ("load average at the end (1/5/15 min)", load_average()),
    ]


def proc_status_meminfo_total() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1])
    raise KeyError("MemTotal")
