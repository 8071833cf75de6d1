"""nodetopo.acceptance: the probe's report read into labels, absent facts absent, histograms a
Prometheus text parser reads back, and the two-line use in a plain loop (no framework)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from nodetopo import acceptance
from nodetopo.acceptance import LatencyRecorder, PlacedGpu, Placement, PlacementError, StepTimer

REPO = Path(__file__).resolve().parents[2]


def report(**placement: Any) -> str:
    body = {
        "node": "gpu-a",
        "leaf": "leaf-3",
        "gpus": [
            {"index": 4, "uuid": "GPU-4", "island": 1, "numaNode": 1},
            {"index": 5, "uuid": "GPU-5", "island": 1, "numaNode": 1},
        ],
        "cpuNumaLocalRatio": 1.0,
    }
    body.update(placement)
    return json.dumps({"passed": True, "node": "gpu-a", "checks": [], "placement": body})


def samples(registry: CollectorRegistry) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def test_parse_report_reads_the_placement() -> None:
    got = acceptance.parse_report(report())
    assert got == Placement(
        node="gpu-a",
        leaf="leaf-3",
        gpus=(
            PlacedGpu(index=4, uuid="GPU-4", island=1, numa_node=1),
            PlacedGpu(index=5, uuid="GPU-5", island=1, numa_node=1),
        ),
        cpu_numa_local_ratio=1.0,
    )
    assert got.islands == "1"
    spread = acceptance.parse_report(report(gpus=[{"index": 0, "island": 0}, {"index": 7, "island": 1}]))
    assert spread.islands == "0+1"


def test_wrong_types_are_unknown_and_a_non_report_is_an_error_naming_the_file() -> None:
    got = acceptance.parse_report(
        report(leaf=7, cpuNumaLocalRatio="high", gpus=[{"index": "0"}, {"index": 1, "island": True}])
    )
    assert got.leaf is None and got.cpu_numa_local_ratio is None
    assert got.gpus == (PlacedGpu(index=1),) and got.islands is None
    with pytest.raises(PlacementError, match=r"/x/probe.json: no 'placement'"):
        acceptance.parse_report(json.dumps({"passed": True}), "/x/probe.json")
    with pytest.raises(PlacementError, match=r"/x/probe.json: not JSON"):
        acceptance.parse_report("passed: true", "/x/probe.json")


def test_cuda_visible_devices_cuts_the_placement_to_the_process_gpus() -> None:
    p = acceptance.parse_report(
        report(gpus=[{"index": i, "uuid": f"GPU-{i}", "island": i // 4} for i in range(8)])
    )
    assert [g.index for g in acceptance.visible(p, "5").gpus] == [5]  # a position in the container's order
    assert [g.index for g in acceptance.visible(p, "GPU-7,gpu-1").gpus] == [1, 7]
    assert acceptance.visible(p, "1,6").islands == "0+1"
    assert acceptance.visible(p, None) == p and acceptance.visible(p, " ") == p
    # MIG UUIDs, or more GPUs than the container has: not ours to map, keep the container's
    assert acceptance.visible(p, "MIG-1c0d2e") == p and acceptance.visible(p, "9") == p


def test_read_placement_without_a_report_knows_only_the_node(tmp_path: Path) -> None:
    missing = tmp_path / "none.json"
    assert acceptance.read_placement(missing, {"NODE_NAME": "gpu-z"}) == Placement(node="gpu-z")
    assert acceptance.read_placement(missing, {}) == Placement()
    path = tmp_path / "probe.json"
    path.write_text(report())
    env = {acceptance.REPORT_ENV: str(path), "CUDA_VISIBLE_DEVICES": "1"}
    assert [g.uuid for g in acceptance.read_placement(None, env).gpus] == ["GPU-5"]
    path.write_text("{")
    with pytest.raises(PlacementError, match=str(path)):
        acceptance.read_placement(path, {})


def test_a_deep_or_huge_report_is_a_placement_error() -> None:
    """Was: 60,000 ``[`` raised ``RecursionError`` out of ``parse_report`` (past every ``except
    ValueError`` of the workload), and a report of any length was decoded."""
    with pytest.raises(PlacementError, match=r"^/x/probe.json:2: JSON nested deeper than 32 levels$"):
        acceptance.parse_report('{"passed": true,\n"checks": ' + "[" * 60_000, "/x/probe.json")
    assert acceptance.parse_report(report(gpus=[{"index": 0, "x": [[[[[[[[1]]]]]]]]}])).gpus  # shallow reads
    huge = report(padding="x" * acceptance.MAX_REPORT_CHARS)
    with pytest.raises(PlacementError, match=rf"^/x/probe.json: more than {acceptance.MAX_REPORT_CHARS} "):
        acceptance.parse_report(huge, "/x/probe.json")


@pytest.mark.parametrize("kind", ["/dev/zero", "fifo", "directory"])
def test_a_report_path_that_is_no_regular_file_is_a_placement_error(tmp_path: Path, kind: str) -> None:
    """Was: ``/dev/zero`` read until MemoryError, a FIFO with no writer hung the workload at start.
    Run in a child under 600 MB of address space and a timeout."""
    path = {"/dev/zero": "/dev/zero", "fifo": str(tmp_path / "fifo"), "directory": str(tmp_path)}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    code = textwrap.dedent(
        f"""
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (600 * 2**20, 600 * 2**20))
        from nodetopo import acceptance
        try:
            acceptance.read_placement({path!r}, {{}})
        except acceptance.PlacementError as e:
            print("refused:", e)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.stdout.startswith(f"refused: {path}: not a regular file"), done.stdout


def test_series_carry_the_placement_and_leave_unknown_facts_out() -> None:
    registry = CollectorRegistry()
    placement = acceptance.parse_report(report())
    clock = iter([10.0, 11.5, 20.0, 20.004]).__next__
    steps = StepTimer("pretrain", registry=registry, placement=placement, replica="pod-0", clock=clock)
    with steps.step():
        pass
    with steps.step():
        pass
    got = samples(registry)
    base = {"workload": "pretrain", "replica": "pod-0", "node": "gpu-a", "island": "1", "leaf": "leaf-3"}
    assert got["nodetopo_step_seconds_count"] == [(base, 2.0)]
    assert got["nodetopo_step_seconds_sum"][0][1] == pytest.approx(1.504)
    buckets = {labels["le"]: value for labels, value in got["nodetopo_step_seconds_bucket"]}
    assert len(buckets) == 54 and buckets["+Inf"] == 2.0
    assert buckets["0.003815"] == 0.0 and buckets["0.004768"] == 1.0
    assert buckets["1.262177"] == 1.0 and buckets["1.577722"] == 2.0  # 1.5 s: in (1.262177, 1.577722]
    assert got["nodetopo_workload_gpu_info"] == [
        ({"workload": "pretrain", "replica": "pod-0", "node": "gpu-a", "gpu": str(i), "UUID": f"GPU-{i}",
          "island": "1", "numa_node": "1", "leaf": "leaf-3"}, 1.0)
        for i in (4, 5)
    ]  # fmt: skip
    assert got["nodetopo_workload_cpu_numa_local_ratio"] == [
        ({"workload": "pretrain", "replica": "pod-0", "node": "gpu-a"}, 1.0)
    ]
    # no report: the node only; no island, no leaf, no GPU, no ratio (absent, not "none" or 0)
    bare = CollectorRegistry()
    LatencyRecorder("chat", registry=bare, placement=Placement(node="cpu-1"), replica="r", p99=0.25).observe(
        0.1
    )
    got = samples(bare)
    assert got["nodetopo_request_seconds_count"] == [
        ({"workload": "chat", "replica": "r", "node": "cpu-1"}, 1.0)
    ]
    assert "nodetopo_workload_gpu_info" not in got and "nodetopo_workload_cpu_numa_local_ratio" not in got
    assert got["nodetopo_latency_objective_seconds"] == [
        ({"workload": "chat", "replica": "r", "quantile": "0.99"}, 0.25)
    ]


def test_one_workload_per_registry_shares_its_placement_series() -> None:
    registry = CollectorRegistry()
    placement = acceptance.parse_report(report())
    StepTimer("svc", registry=registry, placement=placement, replica="a").observe(1.0)
    LatencyRecorder("svc", registry=registry, p999=2.0).observe(0.5)  # same workload: same replica
    got = samples(registry)
    assert len(got["nodetopo_workload_gpu_info"]) == 2
    assert got["nodetopo_request_seconds_count"][0][0]["replica"] == "a"
    with pytest.raises(ValueError, match="positive"):
        LatencyRecorder("other", registry=registry, placement=placement, p99=0)
    with pytest.raises(ValueError, match="name"):
        StepTimer("", registry=registry)


EXAMPLE = """
    import json, os, time
    from nodetopo import acceptance

    steps = acceptance.StepTimer("toy-train", port=int(os.environ["PORT"]))
    for step in range(5):
        with steps.step():
            time.sleep(0.01 * (1 + step % 2))
    print(json.dumps("ready"), flush=True)
    time.sleep(60)
"""


def test_a_plain_training_loop_serves_its_series_over_http(tmp_path: Path) -> None:
    """docs/runtime-acceptance.md's example as a process: the report file from the environment,
    /metrics on PORT."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    path = tmp_path / "probe.json"
    path.write_text(report())
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(EXAMPLE))
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "PORT": str(port), "POD_NAME": "toy-0",
           acceptance.REPORT_ENV: str(path)}  # fmt: skip
    process = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == '"ready"'
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            text = response.read().decode()
    finally:
        process.kill()
        process.wait(timeout=10)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    (count,) = [s for s in families["nodetopo_step_seconds"].samples if s.name.endswith("_count")]
    assert count.value == 5.0
    assert count.labels == {
        "workload": "toy-train",
        "replica": "toy-0",
        "node": "gpu-a",
        "island": "1",
        "leaf": "leaf-3",
    }
