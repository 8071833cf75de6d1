"""Cold ``nodetopo probe``: wall time and peak RSS of the whole process, as an init container runs it.

Input: the dgx-h100 fixture's NodeTopology (``--nodetopology FILE``: no API round trip, so the figure is
the probe's own cost; a second figure goes the API path, client and TLS included, to a port that
refuses at once), a container root with two GPUs named by ``NVIDIA_VISIBLE_DEVICES`` and no RDMA
device, annotations declaring one island + RDMA (so every check runs; the run fails ResourceNotReal).
Peer in the same run: ``python -c pass`` (the interpreter alone). Medians of ``--runs`` runs; CPU
time and peak RSS are the child's ``ru_utime + ru_stime`` and ``ru_maxrss`` (``os.wait4``), taken
by a small launcher process (``_LAUNCHER``): on a shared, loaded machine the CPU time is the stable
figure, the wall time is what a pod waits.

    python benchmarks/bench_probe.py [--runs 15]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import Row, Section, compile_checkout, ms, spawn_measured, table

ROOT = Path(__file__).resolve().parents[1]
KUBECONFIG = {
    "apiVersion": "v1",
    "kind": "Config",
    "current-context": "c",
    "clusters": [
        {"name": "c", "cluster": {"server": "https://127.0.0.1:1", "insecure-skip-tls-verify": True}}
    ],
    "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    "users": [{"name": "u", "user": {"token": "t"}}],
}


def measure(argv: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds (user + system) and peak RSS (KiB) of one run of ``argv``."""
    run = spawn_measured(argv, env)
    return run["wall"], run["cpu"], run["rss"]


def nodetopology_file(directory: Path) -> Path:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "nodetopo",
            "discover",
            "--from",
            str(ROOT / "tests/fixtures/bundles/dgx-h100"),
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    path = directory / "nodetopology.json"
    path.write_text(out.stdout)
    return path


#: wall-time targets (issue 30): the probe runs in every GPU pod's start
WALL_TARGET_S = {"probe (file)": 0.080, "probe (API refused)": 0.120}
RSS_TARGET_MIB = 40.0


def measure_all(
    runs: int,
) -> tuple[dict[str, list[tuple[float, float, int]]], str | None, tuple[float, float]]:
    """(wall s, CPU s, peak RSS KiB) of each variant, ``runs`` times, the variants in turn (so that a
    burst of load on a shared machine hits them all); a note when nodetopo could not be
    byte-compiled first; and the 1-minute load average before and after the timed runs."""
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        nt = nodetopology_file(directory)
        uuids = [g["uuid"] for g in json.loads(nt.read_text())["status"]["gpus"]][:2]
        root = directory / "root"
        (root / "dev").mkdir(parents=True)
        for i in range(2):
            (root / f"dev/nvidia{i}").write_text("")
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "NVIDIA_VISIBLE_DEVICES": ",".join(uuids)}
        probe = [sys.executable, "-m", "nodetopo", "probe", "--root", str(root), "--nodetopology", str(nt)]
        probe += ["--no-event", "--termination-log", str(directory / "term")]
        probe += [
            "--annotation",
            "nodetopo.io/gpus-in-one-island=true",
            "--annotation",
            "nodetopo.io/rdma=required",
        ]
        # the API path: the stdlib client, TLS context and all, against a port that refuses at once
        kubeconfig = directory / "kubeconfig"
        kubeconfig.write_text(json.dumps(KUBECONFIG))
        api = [a for a in probe if a not in ("--no-event",)]
        api = api[: api.index("--nodetopology")] + api[api.index("--nodetopology") + 2 :]
        api += [
            "--kubeconfig",
            str(kubeconfig),
            "--node-name",
            "n1",
            "--pod-name",
            "p",
            "--pod-namespace",
            "d",
        ]
        bare = [sys.executable, "-c", "pass"]
        argvs = {"probe (file)": probe, "probe (API refused)": api, "bare": bare}
        runs_of: dict[str, list[tuple[float, float, int]]] = {name: [] for name in argvs}
        # byte-compiled as an installed package is (pip compiles on install), whatever
        # PYTHONDONTWRITEBYTECODE says here; then one untimed run each: page cache warm, as on a
        # node that pulled the image
        not_compiled = compile_checkout()
        for argv in argvs.values():
            measure(argv, env)
        load_before = os.getloadavg()[0]
        for _ in range(runs):
            for name, argv in argvs.items():
                runs_of[name].append(measure(argv, env))
        load_after = os.getloadavg()[0]
    return runs_of, not_compiled, (load_before, load_after)


def medians(measured: list[tuple[float, float, int]]) -> tuple[float, float, float, float]:
    """Median wall s, median CPU s, median and max peak RSS MiB."""
    rss = [r / 1024 for _, _, r in measured]
    return (
        statistics.median(w for w, _, _ in measured),
        statistics.median(c for _, c, _ in measured),
        statistics.median(rss),
        max(rss),
    )


def run(quick: bool) -> Section:
    section = Section("probe", "7. `nodetopo probe`: cold start and peak memory (issue 11)")
    runs = 7 if quick else 20
    measured, not_compiled, (load_before, load_after) = measure_all(runs)
    if not_compiled:
        section.notes.append(not_compiled)
    rows = []
    for name, label in (
        ("probe (file)", "cold `nodetopo probe`, NodeTopology from a file"),
        ("probe (API refused)", "cold `nodetopo probe`, API path (stdlib client + TLS, port refusing)"),
    ):
        wall, cpu, rss, rss_max = medians(measured[name])
        section.rows.append(
            Row(
                f"{label} (wall; CPU)",
                f"{ms(wall)}; {ms(cpu)}",
                f"≤ {ms(WALL_TARGET_S[name])}",
                wall <= WALL_TARGET_S[name],
            )
        )
        section.rows.append(
            Row(
                "… its peak RSS (median; max)",
                f"{rss:.1f} MiB; {rss_max:.1f} MiB",
                f"≤ {RSS_TARGET_MIB:.0f} MiB",
                rss_max <= RSS_TARGET_MIB,
            )
        )
    for name, measured_runs in measured.items():
        wall, cpu, rss, rss_max = medians(measured_runs)
        rows.append([name, ms(wall), ms(max(w for w, _, _ in measured_runs)), ms(cpu), f"{rss:.1f} MiB"])
    section.tables.append(
        table(
            ["process", "wall (median)", "wall (max)", "CPU (median)", "peak RSS (median)"],
            rows,
            title=f"Medians of {runs} runs each, the three in turn (load average {load_before:.2f} before, "
            f"{load_after:.2f} after, on {os.cpu_count()} CPUs)",
        )
    )
    section.notes.append(
        "Input: the dgx-h100 fixture's NodeTopology, a container root with two GPUs named by "
        "`NVIDIA_VISIBLE_DEVICES` and no RDMA device, annotations declaring one island + RDMA (every check "
        "runs; the run fails ResourceNotReal). The API path reads a kubeconfig file (PyYAML); in a pod the "
        "service account's files are read instead, without PyYAML. bare = `python -c pass`, the "
        "interpreter alone. CPU and peak RSS are the child's `ru_utime + ru_stime` and `ru_maxrss` "
        "(`os.wait4`), taken by a small launcher: a child's `ru_maxrss` keeps the high-water mark of the "
        "process it was forked from, which would be run.py's. On a loaded machine CPU is the stable figure, "
        "wall is what a pod waits. "
        "nodetopo is byte-compiled first (as `pip install` leaves it)."
    )
    return section


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    measured_all, not_compiled, (load_before, load_after) = measure_all(args.runs)
    if not_compiled:
        print(not_compiled)
    print(f"load average {load_before:.2f} before, {load_after:.2f} after, on {os.cpu_count()} CPUs")
    for name, measured in measured_all.items():
        wall, cpu, rss, rss_max = medians(measured)
        print(
            f"{name}: wall median {wall * 1000:.0f} ms (max {max(w for w, _, _ in measured) * 1000:.0f} ms), "
            f"CPU median {cpu * 1000:.0f} ms, "
            f"peak RSS median {rss:.1f} MiB (max {rss_max:.1f} MiB), {len(measured)} runs"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
