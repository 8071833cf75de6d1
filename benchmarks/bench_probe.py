"""Cold ``nodetopo probe``: wall time and peak RSS of the whole process, as an init container runs it.

Input: the dgx-h100 fixture's NodeTopology (``--nodetopology FILE``: no API round trip, so the figure is
the probe's own cost; a second figure goes the API path, client and TLS included, to a port that
refuses at once), a container root with two GPUs named by ``NVIDIA_VISIBLE_DEVICES`` and no RDMA
device, annotations declaring one island + RDMA (so every check runs; the run fails ResourceNotReal).
Peer in the same run: ``python -c pass`` (the interpreter alone). Medians of ``--runs`` runs; CPU
time and peak RSS are the child's ``ru_utime + ru_stime`` and ``ru_maxrss`` (``os.wait4``): on a
shared, loaded machine the CPU time is the stable figure, the wall time is what a pod waits.

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
import time
from pathlib import Path

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
    start = time.perf_counter()
    child = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
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
        runs: dict[str, list[tuple[float, float, int]]] = {
            "probe (file)": [],
            "probe (API refused)": [],
            "bare": [],
        }
        argvs = {"probe (file)": probe, "probe (API refused)": api, "bare": bare}
        for argv in argvs.values():
            measure(argv, env)  # page cache warm, as on a node that pulled the image
        for _ in range(args.runs):
            for name, argv in argvs.items():
                runs[name].append(measure(argv, env))
        results = runs
    for name, measured in results.items():
        walls = [w for w, _, _ in measured]
        cpus = [c for _, c, _ in measured]
        rss = [r / 1024 for _, _, r in measured]
        print(
            f"{name}: wall median {statistics.median(walls) * 1000:.0f} ms (max {max(walls) * 1000:.0f} ms), "
            f"CPU median {statistics.median(cpus) * 1000:.0f} ms, "
            f"peak RSS median {statistics.median(rss):.1f} MiB (max {max(rss):.1f} MiB), {len(measured)} runs"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
