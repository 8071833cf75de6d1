"""The cluster at 1,000 / 5,000 / 15,000 NodeTopology objects (issue 30), measured on the real
processes as users run them.

One real kube-apiserver (tests/kube/cluster.py) is populated step by step with server-side apply:
1,000 objects, then grown to 5,000, then (``--full`` only) to 15,000. The objects carry the fixture
machines' statuses, cycled, under four styles of node name (cloud, rack, pool, plain); every fifth
object is a many-models worst case whose GPUs carry one of 1,008 distinct model names (the
summary and the admission policies key on the model). One bound GPU pod per five nodes, as in
section 8. At each step, on the real processes:

- ``nodetopo extender`` (its reflectors list and watch the apiserver): RSS once /readyz says both
  caches are synced, and the time from its start to that /readyz;
- ``nodetopo summary-controller``: the time from its start to the NodeTopologySummary that
  counts every object (the summary is deleted before it starts);
- the test cluster's ``kubectl get ntopo`` and ``kubectl get ntopo -o json``: wall time, peak RSS;
- ``nodetopo export kueue`` from the cluster and ``nodetopo export kueue -f list.json`` (the
  ``-o json`` file): wall time, peak RSS (``ru_maxrss`` of the child, spawned from a small launcher);
- the size of one 8-GPU, 10-NIC object (dgx-h100) as compact JSON, with and without
  ``metadata.managedFields``, and of the whole list.

kube-scheduler create→bind with and without the extender is not measured here (sections 5 and 8
measure the extender's own side).

    python benchmarks/bench_cluster_scale.py [--quick | --full]     # prints its section
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    Row,
    Section,
    child_env,
    compile_checkout,
    ensure_paths,
    load_average,
    mib,
    spawn_measured,
    table,
)

GROUP, VERSION, PLURAL = "nodetopo.io", "v1alpha1", "nodetopologies"
STEPS = (1000, 5000)
FULL_STEP = 15000
#: the N issue 30's targets are stated at
TARGET_N = 5000
#: every MODEL_EVERY-th object (offset MODEL_OFFSET) is the many-models worst case
MODEL_EVERY, MODEL_OFFSET, MODELS = 5, 3, 1008

# issue 30's targets
EXTENDER_RSS_KIB = 100 * 1024
START_S = 5.0
KUBECTL_GET_S = 3.0
EXPORT_FILE_S = 3.0
OBJECT_BYTES = 8000

#: a child that runs past this is stopped and reported as "> limit" (export -f parses JSON as YAML)
CHILD_TIMEOUT_S = 240.0
#: the same for ``export -f`` (issue 30 measured 289–324 s at 5,000 objects)
FILE_TIMEOUT_S = 150.0
SIZE_BUNDLE = "dgx-h100"


def node_name(i: int) -> str:
    """Four styles of node name, in turn: the names differ in length and share few prefixes."""
    style = i % 4
    if style == 0:
        return f"ip-10-{i >> 16 & 255}-{i >> 8 & 255}-{i & 255}.ec2.internal"
    if style == 1:
        return f"dgx-rack{i // 32:03d}-node{i % 32:02d}"
    if style == 2:
        return f"gke-train-a3-pool-{i % 7}-{i * 2654435761 % 16**8:08x}-{i:05d}"
    return f"node{i:05d}"


def statuses_by_index(statuses: list[dict[str, Any]]) -> Callable[[int], dict[str, Any]]:
    """The status of object ``i``: the fixtures cycled; every MODEL_EVERY-th one with its GPUs
    renamed to one of MODELS distinct models."""

    def status(i: int) -> dict[str, Any]:
        base = statuses[i % len(statuses)]
        if i % MODEL_EVERY != MODEL_OFFSET or not base.get("gpus"):
            return base
        model = f"NVIDIA Bench-GPU-{i // MODEL_EVERY % MODELS:04d}"
        return {
            **base,
            "gpus": [{**gpu, "model": model} for gpu in base["gpus"]],
            "summary": {**base["summary"], "gpuModel": model},
        }

    return status


def size_index(statuses: list[dict[str, Any]]) -> int:
    """The first object that carries SIZE_BUNDLE's status as the fixture has it (not renamed)."""
    k = next(k for k, s in enumerate(statuses) if s.get("nodeName") == SIZE_BUNDLE)
    return next(i for i in range(k, 10**6, len(statuses)) if i % MODEL_EVERY != MODEL_OFFSET)


def compact_bytes(obj: Any) -> int:
    return len(json.dumps(obj, separators=(",", ":")).encode())


def without_managed_fields(obj: dict[str, Any]) -> dict[str, Any]:
    metadata = {k: v for k, v in obj.get("metadata", {}).items() if k != "managedFields"}
    return {**obj, "metadata": metadata}


def run_child(argv: Sequence[str], log_path: Path, *, stdout: Path | str = os.devnull, timeout: float) -> Any:
    """One run of ``argv`` (see ``common.spawn_measured``); its stderr to ``log_path``; a non-zero
    exit fails the step unless the run was stopped at ``timeout``."""
    result = spawn_measured(argv, child_env(), stdout=stdout, stderr=log_path, timeout=timeout)
    if not result["stopped"] and result["rc"] != 0:
        raise RuntimeError(f"{' '.join(argv[:4])} … exited {result['rc']}:\n{log_path.read_text()[-2000:]}")
    return result


def first_summary(cluster: Any, kubeconfig: str, nodes: int, log_path: Path) -> dict[str, Any]:
    """Start ``nodetopo summary-controller`` with no summary written; seconds until the summary
    counts all ``nodes`` objects, the controller's RSS then, and the summary's size."""
    from common import proc_status_kib

    path = f"/apis/{GROUP}/{VERSION}/nodetopologysummaries/cluster"
    status_code, answer = cluster.request("DELETE", path)
    if status_code not in (200, 404):
        raise RuntimeError(f"DELETE the summary: HTTP {status_code}: {answer}")
    argv = [sys.executable, "-m", "nodetopo", "summary-controller", "--kubeconfig", kubeconfig]
    with log_path.open("wb") as log:
        started = time.monotonic()
        process = subprocess.Popen(argv, env=child_env(), stdout=log, stderr=subprocess.STDOUT)
        try:
            while True:
                status_code, body = cluster.request("GET", path)
                if status_code == 200 and body["status"].get("observedNodeTopologies") == nodes:
                    break
                if process.poll() is not None:
                    raise RuntimeError(f"summary-controller exited {process.returncode}")
                if time.monotonic() - started > CHILD_TIMEOUT_S:
                    raise RuntimeError(f"no summary of {nodes} objects in {CHILD_TIMEOUT_S:.0f} s")
                time.sleep(0.05)  # not every 5 ms: the GETs would load the 2 CPUs it runs on
            seconds = time.monotonic() - started
            rss = proc_status_kib(process.pid, "VmRSS")
        finally:
            process.terminate()
            process.wait(timeout=30)
    models = len(body["status"].get("models") or {}) + int(body["status"].get("modelsOmitted") or 0)
    return {"seconds": seconds, "rss": rss, "bytes": compact_bytes(body), "models": models}


def served_sizes(cluster: Any, nodes: int, size_name: str) -> dict[str, int]:
    """Compact JSON bytes as the apiserver serves them (kubectl's output leaves managedFields out):
    one object, and the whole list read in pages of 500, each with and without managedFields."""
    path = f"/apis/{GROUP}/{VERSION}/{PLURAL}"
    status_code, obj = cluster.request("GET", f"{path}/{size_name}")
    if status_code != 200:
        raise RuntimeError(f"GET {size_name}: HTTP {status_code}: {obj}")
    gpus, nics = len(obj["status"]["gpus"]), len(obj["status"]["nics"])
    if (gpus, nics) != (8, 10):
        raise RuntimeError(f"{size_name}: {gpus} GPUs, {nics} NICs, not 8 and 10")
    sizes = {
        "object_bytes": compact_bytes(obj),
        "object_bytes_bare": compact_bytes(without_managed_fields(obj)),
    }
    total = bare = count = 0
    token = ""
    while True:
        query = f"?limit=500&continue={urllib.parse.quote(token)}" if token else "?limit=500"
        status_code, page = cluster.request("GET", path + query)
        if status_code != 200:
            raise RuntimeError(f"GET {path}{query}: HTTP {status_code}: {str(page)[:500]}")
        items = page.pop("items")
        count += len(items)
        total += compact_bytes(page) + sum(compact_bytes(i) + 1 for i in items)
        bare += compact_bytes(page) + sum(compact_bytes(without_managed_fields(i)) + 1 for i in items)
        token = page["metadata"].get("continue") or ""
        if not token:
            break
    if count != nodes:
        raise RuntimeError(f"the apiserver listed {count} objects, not {nodes}")
    return {**sizes, "list_bytes": total, "list_bytes_bare": bare}


def measure_step(cluster: Any, nodes: int, tmp: Path, size_name: str) -> dict[str, Any]:
    from bench_kube import _measure

    kubeconfig = str(cluster.kubeconfig)
    kubectl = [str(cluster.binary("kubectl")), f"--kubeconfig={kubeconfig}"]
    step: dict[str, Any] = {}
    extender = [sys.executable, "-m", "nodetopo", "extender", "--listen", "127.0.0.1:0", "--kubeconfig"]
    step["extender"] = _measure([*extender, kubeconfig], tmp / f"extender-{nodes}.log", nodes)
    step["summary"] = first_summary(cluster, kubeconfig, nodes, tmp / f"summary-{nodes}.log")
    list_path = tmp / f"list-{nodes}.json"
    export = [sys.executable, "-m", "nodetopo", "export", "kueue"]
    for key, argv, out, limit in (
        ("get", [*kubectl, "get", "ntopo"], os.devnull, CHILD_TIMEOUT_S),
        ("get_json", [*kubectl, "get", "ntopo", "-o", "json"], list_path, CHILD_TIMEOUT_S),
        ("export_cluster", [*export, "--kubeconfig", kubeconfig], os.devnull, CHILD_TIMEOUT_S),
        ("export_file", [*export, "-f", str(list_path)], os.devnull, FILE_TIMEOUT_S),
    ):
        step[key] = run_child(argv, tmp / f"{key}-{nodes}.log", stdout=out, timeout=limit)
    step["list_file_bytes"] = list_path.stat().st_size
    listed = json.loads(list_path.read_text())["items"]
    if len(listed) != nodes:
        raise RuntimeError(f"kubectl listed {len(listed)} objects, not {nodes}")
    del listed
    list_path.unlink()
    step.update(served_sizes(cluster, nodes, size_name))
    return step


# --------------------------------------------------------------------------------------------
# The section
# --------------------------------------------------------------------------------------------


def _seconds(child: dict[str, Any]) -> str:
    return f"> {child['wall']:.0f} s (stopped)" if child["stopped"] else f"{child['wall']:.2f} s"


def _child_cell(child: dict[str, Any]) -> str:
    peak = "≥ " if child["stopped"] else ""
    return f"{_seconds(child)}; {peak}{mib(child['rss'])}"


def _kb(n: int) -> str:
    return f"{n / 1000:.1f} KB" if n < 10**6 else f"{n / 10**6:.1f} MB"


#: a figure's value for the growth ratio, and whether it is a lower bound (a child stopped)
Value = tuple[float, bool]
#: (label, the figure of one step, (label, value) for the growth table, target text, verdict or None)
Figure = tuple[
    str, Callable[[dict[str, Any]], str], tuple[str, Callable[[dict[str, Any]], Value]] | None, str, Any
]


def _exact(x: float) -> Value:
    return float(x), False


def _wall(child: dict[str, Any]) -> Value:
    return child["wall"], child["stopped"]


def _ratio(a: Value, b: Value) -> str:
    """``b ÷ a``, with ≥ / ≤ where one side is a lower bound; – where both are or ``a`` is 0."""
    if (a[1] and b[1]) or a[0] == 0:
        return "–"
    return f"{'≥ ' if b[1] else '≤ ' if a[1] else ''}{b[0] / a[0]:.2f}×"


def figures() -> list[Figure]:
    def ext(s: dict[str, Any]) -> Any:
        return s["extender"]

    return [
        (
            "objects written (server-side apply, 2 requests each) + pods",
            lambda s: s["populate"],
            None,
            "–",
            None,
        ),
        ("load average (1/5/15 min) at the step's start", lambda s: s["load_start"], None, "–", None),
        ("load average (1/5/15 min) at the step's end", lambda s: s["load_end"], None, "–", None),
        (
            "`nodetopo extender` RSS once synced (median over 5 s)",
            lambda s: mib(ext(s)["rss"]),
            ("extender RSS once synced", lambda s: _exact(ext(s)["rss"])),
            f"≤ {mib(EXTENDER_RSS_KIB)} at 5,000",
            lambda s: ext(s)["rss"] <= EXTENDER_RSS_KIB,
        ),
        (
            "… its RSS when it starts listening; its VmHWM",
            lambda s: f"{mib(ext(s)['listening'])}; {mib(ext(s)['hwm'])}",
            ("extender VmHWM", lambda s: _exact(ext(s)["hwm"])),
            "–",
            None,
        ),
        (
            "`nodetopo extender` start to /readyz (both caches listed)",
            lambda s: f"{ext(s)['ready_s']:.2f} s",
            ("extender start to /readyz", lambda s: _exact(ext(s)["ready_s"])),
            f"≤ {START_S:.0f} s clean at 5,000",
            lambda s: ext(s)["ready_s"] <= START_S,
        ),
        (
            "`nodetopo summary-controller` start to the first NodeTopologySummary",
            lambda s: f"{s['summary']['seconds']:.2f} s",
            ("summary controller start to first summary", lambda s: _exact(s["summary"]["seconds"])),
            f"≤ {START_S:.0f} s clean at 5,000",
            lambda s: s["summary"]["seconds"] <= START_S,
        ),
        (
            "… the controller's RSS then; the summary's size (compact JSON); GPU model labels in it",
            lambda s: f"{mib(s['summary']['rss'])}; {_kb(s['summary']['bytes'])}; {s['summary']['models']}",
            ("the summary's size", lambda s: _exact(s["summary"]["bytes"])),
            "–",
            None,
        ),
        (
            "`kubectl get ntopo` (wall; kubectl peak RSS)",
            lambda s: _child_cell(s["get"]),
            ("`kubectl get ntopo` wall", lambda s: _wall(s["get"])),
            f"≤ {KUBECTL_GET_S:.0f} s at 5,000",
            lambda s: not s["get"]["stopped"] and s["get"]["wall"] <= KUBECTL_GET_S,
        ),
        (
            "`kubectl get ntopo -o json` (wall; kubectl peak RSS)",
            lambda s: _child_cell(s["get_json"]),
            ("`kubectl get ntopo -o json` wall", lambda s: _wall(s["get_json"])),
            "–",
            None,
        ),
        (
            "`nodetopo export kueue` from the cluster (wall; peak RSS)",
            lambda s: _child_cell(s["export_cluster"]),
            ("`export kueue` from the cluster, wall", lambda s: _wall(s["export_cluster"])),
            "–",
            None,
        ),
        (
            "`nodetopo export kueue -f list.json` (the `-o json` file; wall; peak RSS)",
            lambda s: _child_cell(s["export_file"]),
            ("`export kueue -f`, wall", lambda s: _wall(s["export_file"])),
            f"≤ {EXPORT_FILE_S:.0f} s at 5,000",
            lambda s: not s["export_file"]["stopped"] and s["export_file"]["wall"] <= EXPORT_FILE_S,
        ),
        (
            f"one 8-GPU, 10-NIC object ({SIZE_BUNDLE}), compact JSON, as served (managedFields included)",
            lambda s: f"{s['object_bytes']:,} B",
            None,
            f"≤ {OBJECT_BYTES / 1000:.0f} KB",
            lambda s: s["object_bytes"] <= OBJECT_BYTES,
        ),
        (
            "… the same object without managedFields",
            lambda s: f"{s['object_bytes_bare']:,} B",
            None,
            f"≤ {OBJECT_BYTES / 1000:.0f} KB",
            lambda s: s["object_bytes_bare"] <= OBJECT_BYTES,
        ),
        (
            "the whole list as served, compact JSON: with / without managedFields; kubectl's `-o json` file",
            lambda s: f"{_kb(s['list_bytes'])} / {_kb(s['list_bytes_bare'])}; {_kb(s['list_file_bytes'])}",
            ("the list as served (managedFields included)", lambda s: _exact(s["list_bytes"])),
            "–",
            None,
        ),
    ]


def _verdict(ok: bool | None) -> str:
    return {True: "met", False: "**missed**", None: "–"}[ok]


def build_section(section: Section, steps: dict[int, dict[str, Any]], failed: str | None) -> None:
    measured = sorted(steps)
    header = ["figure", *(f"N = {n:,}" for n in measured), "target (issue 30)", f"at {TARGET_N:,}"]
    rows = []
    for label, cell, _, target, judge in figures():
        at = steps.get(TARGET_N) if target != "–" and "5,000" in target else None
        if target != "–" and "5,000" not in target and measured:
            at = steps[measured[-1]]  # a per-object target: the same object at every N
        ok = judge(at) if judge is not None and at is not None else None
        rows.append([label, *(cell(steps[n]) for n in measured), target, _verdict(ok)])
        if judge is not None and measured:
            n = TARGET_N if TARGET_N in steps else measured[-1]
            value = cell(steps[n])
            section.rows.append(Row(f"{label}, {n:,} objects", value, target if ok is not None else "–", ok))
    section.tables.append(table(header, rows, title="At each N, on one apiserver grown step by step"))
    pairs = list(itertools.pairwise(measured))
    if pairs:
        growth = []
        for _, _, grows, _, _ in figures():
            if grows is not None:
                label, of = grows
                growth.append([label, *(_ratio(of(steps[a]), of(steps[b])) for a, b in pairs)])
        section.tables.append(
            table(
                ["figure", *(f"{b:,} ÷ {a:,} (N ×{b / a:.0f})" for a, b in pairs)],
                growth,
                title="How it grows with N",
            )
        )
    if failed:
        section.notes.append(f"The run stopped at the next step: `{failed}`.")


def run(quick: bool, *, full: bool = False, steps: Sequence[int] | None = None) -> Section:
    ensure_paths()
    from bench_admission import _statuses
    from bench_agent import local_cluster
    from bench_kube import PODS_PER_NODE, _populate

    chosen = list(steps or ((1000,) if quick else (*STEPS, FULL_STEP) if full else STEPS))
    section = Section(
        "cluster-scale", "10. The cluster at 1,000 / 5,000 / 15,000 NodeTopology objects (issue 30)"
    )
    started = time.monotonic()
    not_compiled = compile_checkout()
    statuses = _statuses()
    status = statuses_by_index(statuses)
    size_name = node_name(size_index(statuses))
    results: dict[int, dict[str, Any]] = {}
    failed = None
    with tempfile.TemporaryDirectory(prefix="nodetopo-bench-cluster-") as tmp, local_cluster() as cluster:
        written = 0
        for nodes in chosen:
            load_start = load_average()
            try:
                populate_s = _populate(cluster, nodes, start=written, name=node_name, status=status)
                written = nodes
                step = measure_step(cluster, nodes, Path(tmp), size_name)
            except (RuntimeError, OSError, ValueError, KeyError) as e:  # keep the steps measured so far
                failed = f"N = {nodes:,}: {type(e).__name__}: {str(e)[:500]}"
                break
            step["populate"] = (
                f"{nodes:,} (+{nodes - (max(results) if results else 0):,} in {populate_s:.0f} s); "
                f"{round(nodes * PODS_PER_NODE):,} pods"
            )
            step["load_start"], step["load_end"] = load_start, load_average()
            results[nodes] = step
    build_section(section, results, failed)
    section.notes.append(
        "One real etcd + kube-apiserver (the test cluster's v1.34 binaries), populated with server-side "
        "apply by 4 threads (the object, then its status: the managedFields are those two writers'), "
        "grown step by step; each figure is one run of the real command against it, in turn, alone "
        "(nothing else of this benchmark running). The objects carry the fixture machines' statuses, "
        f"cycled, under four styles of node name; every {MODEL_EVERY}th is the many-models worst case "
        f"(its GPUs renamed to one of {MODELS:,} models). The extender is `nodetopo extender --listen "
        "127.0.0.1:0 --kubeconfig <admin>` (the `_measure` of section 8); the summary controller runs "
        "with the admin kubeconfig after the summary was deleted, timed from its start to the summary "
        "that counts every object (read back every 50 ms). Peak RSS of a child is its `ru_maxrss` (`wait4`), "
        f"spawned from a small `python -S` launcher (its ~9 MiB: the figure's floor); a child still "
        f"running after {CHILD_TIMEOUT_S:.0f} s (`export -f`: "
        f"{FILE_TIMEOUT_S:.0f} s) is stopped and its figures are lower bounds. Sizes are compact JSON "
        "(`separators=(',', ':')`) of what the apiserver serves (GET of the object; the list in pages of "
        "500), with and without `metadata.managedFields` (kubectl's `-o json` leaves them out; its file is "
        "indented). kube-scheduler create→bind with and without the extender is not measured here."
    )
    if not_compiled:
        section.notes.append(not_compiled)
    section.seconds = time.monotonic() - started
    return section


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="1,000 objects only")
    parser.add_argument("--full", action="store_true", help="grow to 15,000 objects too")
    parser.add_argument("--steps", type=int, nargs="+", help="the Ns, ascending (default: 1,000 5,000)")
    args = parser.parse_args()
    print(run(args.quick, full=args.full, steps=args.steps).markdown())


if __name__ == "__main__":
    main()
