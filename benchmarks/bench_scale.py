"""Scale: ``derive_topology`` on synthetic ``Facts`` (NVL72-like node; PCIe trees of 8 … 1,024 devices).

Each case runs in a child process (``python benchmarks/bench_scale.py --case NAME``) with a time
limit, so a derivation that explodes is reported as "> limit" instead of stalling the run. The child
times, in this order and printing a JSON line after each: the graph join alone (``build_graph``),
the derivation with ``preferred_gpu_sets`` replaced by a stub (what the rest of the derivations
cost), then the real ``derive_topology``. With ``--profile`` it prints the top of a cProfile.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import Row, Section, child_env, ensure_paths, median_seconds, ms, table

NVL72 = "nvl72"
DEVICE_COUNTS = (8, 16, 32, 64, 128, 256, 512, 1024)
TARGETS_S = {NVL72: 0.025, "pcie-1024": 0.250}


def facts_for(case: str) -> Any:
    from synthetic import nvl72_node, pcie_node

    if case == NVL72:
        return nvl72_node()
    return pcie_node(int(case.removeprefix("pcie-")))


def _emit(**fields: Any) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def child(case: str, runs: int, profile: str) -> None:
    """Time one case (runs in the child process)."""
    ensure_paths()
    import nodetopo.topology.derive as derive
    from nodetopo.topology.graph import build_graph

    facts = facts_for(case)
    _emit(
        gpus=len(facts.nvml.gpus) if facts.nvml else 0,
        nics=len(facts.rdma_devices),
        pci=len(facts.pci_devices),
    )
    graph_s, _ = median_seconds(lambda: build_graph(facts), runs)
    _emit(graph_s=graph_s)
    real = derive.preferred_gpu_sets
    derive.preferred_gpu_sets = lambda *args, **kwargs: ()  # type: ignore[assignment]
    try:
        rest_s, _ = median_seconds(lambda: derive.derive_topology(facts), runs)
        if profile == "rest":
            _emit(profile=_profile(lambda: derive.derive_topology(facts)))
    finally:
        derive.preferred_gpu_sets = real
    _emit(rest_s=rest_s)
    if profile == "full":
        _emit(profile=_profile(lambda: derive.derive_topology(facts)))
        return
    first, _ = median_seconds(lambda: derive.derive_topology(facts), 1, warmup=0)
    full_s = (
        first if first > 1.0 else median_seconds(lambda: derive.derive_topology(facts), runs, warmup=0)[0]
    )
    _emit(full_s=full_s)


def _profile(fn: Any, top: int = 12) -> str:
    profiler = cProfile.Profile()
    profiler.runcall(fn)
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    lines = [ln for ln in out.getvalue().splitlines() if ln.strip()]
    start = next((i for i, ln in enumerate(lines) if ln.lstrip().startswith("ncalls")), 0)
    header = [ln.strip() for ln in lines[:start] if "function calls" in ln]
    return "\n".join(
        header + [ln.replace(str(Path(__file__).resolve().parent.parent) + "/", "") for ln in lines[start:]]
    )


def measure(case: str, runs: int, limit_s: float, profile: str = "") -> tuple[dict[str, Any], bool]:
    """Run the child for ``case``; (merged JSON fields, finished within the limit)."""
    argv = [sys.executable, __file__, "--case", case, "--runs", str(runs)]
    if profile:
        argv += ["--profile", profile]
    try:
        done = subprocess.run(
            argv, env=child_env(), capture_output=True, text=True, timeout=limit_s, check=False
        )
        output, finished = done.stdout, done.returncode == 0
        if done.returncode != 0:
            raise RuntimeError(f"{case}: child failed: {done.stderr[-3000:]}")
    except subprocess.TimeoutExpired as e:
        raw = e.stdout or b""
        output, finished = raw.decode() if isinstance(raw, bytes) else raw, False
    fields: dict[str, Any] = {}
    for line in output.splitlines():
        if line.startswith("{"):
            fields.update(json.loads(line))
    return fields, finished


def run(quick: bool) -> Section:
    section = Section("scale", "2. Scale: derivations on synthetic nodes")
    runs = 3 if quick else 7
    limit_s = 20.0 if quick else 60.0
    cases = [NVL72] + [f"pcie-{n}" for n in DEVICE_COUNTS]
    results: dict[str, dict[str, Any]] = {}
    full_gave_up = False
    rows = []
    for case in cases:
        if case != NVL72 and full_gave_up:
            # a smaller tree already exceeded the limit: time only the join and the other derivations
            fields, _ = measure(case, runs, limit_s, profile="rest")
            fields.pop("profile", None)
            fields["skipped"] = True
        else:
            fields, finished = measure(case, runs, limit_s)
            if not finished and case != NVL72:
                full_gave_up = True
        results[case] = fields
        full = fields.get("full_s")
        if full is not None:
            full_text = ms(full)
        elif fields.get("skipped"):
            full_text = "not run (a smaller size exceeded the limit)"
        else:
            full_text = f"> {limit_s:.0f} s (stopped)"
        rest = fields.get("rest_s")
        share = f"{(1 - rest / full) * 100:.0f} %" if full and rest is not None else "–"
        rows.append(
            [
                "NVL72-like (72 GPUs, 72 NICs)" if case == NVL72 else case.removeprefix("pcie-"),
                f"{fields.get('gpus', '?')}/{fields.get('nics', '?')}/{fields.get('pci', '?')}",
                ms(fields["graph_s"]) if "graph_s" in fields else "–",
                ms(rest) if rest is not None else "–",
                full_text,
                share,
            ]
        )
    for case, target in TARGETS_S.items():
        fields = results.get(case, {})
        full = fields.get("full_s")
        label = "72-GPU NVL72-like node" if case == NVL72 else "1,024-device node"
        value = (
            ms(full)
            if full is not None
            else (f"> {limit_s:.0f} s" if not fields.get("skipped") else "not run")
        )
        section.rows.append(
            Row(f"derive_topology, {label}", value, f"≤ {ms(target)}", full is not None and full <= target)
        )
        rest = fields.get("rest_s")
        if rest is not None:
            section.rows.append(
                Row(f"… {label} without preferred_gpu_sets", ms(rest), f"≤ {ms(target)}", rest <= target)
            )
    section.tables.append(
        table(
            [
                "devices",
                "GPUs/NICs/PCI fns",
                "build_graph",
                "derive w/o preferred sets",
                "derive_topology",
                "preferred sets share",
            ],
            rows,
            title=f"Growth (medians of {runs}; each case in a child process limited to {limit_s:.0f} s)",
        )
    )
    section.notes.append(
        "PCIe trees are boards of 8 functions: a PCIe switch (upstream port + 4 downstream ports), 2 GPUs "
        "(NVML, no NVLink) and 1 RDMA NIC, one root complex per board, 2 NUMA nodes. The NVL72-like node "
        "has 72 GPUs with 18 NVLinks each into the NVSwitch fabric (NVML remote type SWITCH), a fabric "
        "clique, one NIC per GPU, 36 NUMA nodes. 'w/o preferred sets' replaces `preferred_gpu_sets` with a "
        "stub inside the benchmark's child process (nodetopo itself is not modified)."
    )
    # where the time goes
    profile_case = NVL72
    fields, finished = measure(profile_case, 1, limit_s * 2, profile="full")
    if finished and "profile" in fields:
        section.notes.append(
            f"cProfile of `derive_topology` on the NVL72-like node (top "
            f"by own time):\n\n```\n{fields['profile']}\n```"
        )
    fields, _ = measure("pcie-1024", 1, limit_s, profile="rest")
    if "profile" in fields:
        section.notes.append(
            "cProfile of the derivations *without* preferred sets on the 1,024-device node (top by own time):"
            f"\n\n```\n{fields['profile']}\n```"
        )
    return section


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--case", required=True)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--profile", choices=["", "full", "rest"], default="")
    args = parser.parse_args()
    child(args.case, args.runs, args.profile)


if __name__ == "__main__":
    main()
