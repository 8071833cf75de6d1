"""nodetopo.acceptance in Ray: actors on a real local Ray node with two GPUs (declared, as on a
KubeRay worker whose init container ran ``nodetopo probe --report``) each time their steps and serve
them, labelled with the GPU Ray handed them (``CUDA_VISIBLE_DEVICES``), its island and the leaf."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.slow

REPORT = {
    "passed": True,
    "node": "ray-gpu-1",
    "checks": [],
    "placement": {
        "node": "ray-gpu-1",
        "leaf": "leaf-7",
        "gpus": [
            {"index": 2, "uuid": "GPU-aaaa", "island": 0, "numaNode": 0},
            {"index": 6, "uuid": "GPU-bbbb", "island": 1, "numaNode": 1},
        ],
        "cpuNumaLocalRatio": 1.0,
    },
}


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail("the `ray` package is missing: pip install -e '.[test]'")
        pytest.skip("the `ray` package is not installed (it is in the `test` extra)")
    return ray


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def ray_gpu_node() -> Iterator[tuple[Any, Path]]:
    ray = _ray()
    workdir = Path(tempfile.mkdtemp(prefix="ntacc-", dir="/tmp"))  # raylet socket paths must stay short
    report = workdir / "probe.json"
    report.write_text(json.dumps(REPORT))
    port = _free_port()
    ray_cli = str(Path(sys.executable).with_name("ray"))
    log = workdir / "ray-start.log"
    with log.open("ab") as handle:
        process = subprocess.Popen(
            [
                ray_cli if os.access(ray_cli, os.X_OK) else "ray",
                "start", "--head", "--block", f"--port={port}", "--node-ip-address=127.0.0.1",
                "--num-cpus=2", "--num-gpus=2", "--include-dashboard=False", "--disable-usage-stats",
                f"--temp-dir={workdir / 't'}",
            ],
            stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"},
        )  # fmt: skip
    sigterm = signal.getsignal(signal.SIGTERM)  # ray.init installs its own and keeps it
    try:
        deadline = time.monotonic() + 90
        while "Ray runtime started" not in log.read_text(errors="replace"):
            assert process.poll() is None, (
                f"ray start exited {process.returncode}:\n{log.read_text()[-4000:]}"
            )
            assert time.monotonic() < deadline, f"ray did not start:\n{log.read_text()[-4000:]}"
            time.sleep(0.5)
        ray.init(address=f"127.0.0.1:{port}", log_to_driver=False, logging_level="WARNING")
        yield ray, report
    finally:
        with contextlib.suppress(Exception):
            ray.shutdown()
        if sigterm is not None:
            signal.signal(signal.SIGTERM, sigterm)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
        time.sleep(2)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        shutil.rmtree(workdir, ignore_errors=True)


def test_ray_actors_label_their_steps_with_the_gpu_ray_gave_them(ray_gpu_node: tuple[Any, Path]) -> None:
    ray, report = ray_gpu_node

    class Trainer:
        """docs/runtime-acceptance.md's Ray example: a GPU actor that times its steps and serves them
        on `port` (defined here, so that Ray ships it by value: the workers cannot import the tests)."""

        def __init__(self, port: int) -> None:
            from nodetopo import acceptance

            self.steps = acceptance.StepTimer("ray-train", port=port)

        def train(self, steps: int) -> str:
            for _ in range(steps):
                with self.steps.step():
                    time.sleep(0.01)
            return os.environ.get("CUDA_VISIBLE_DEVICES", "")

    env = {"env_vars": {"NODETOPO_PROBE_REPORT": str(report)}}
    actor = ray.remote(num_gpus=1, num_cpus=0, runtime_env=env)(Trainer)
    ports = [_free_port(), _free_port()]
    trainers = [actor.remote(p) for p in ports]
    visible = ray.get([t.train.remote(3) for t in trainers], timeout=120)
    assert sorted(visible) == ["0", "1"]  # Ray gave each actor one of the two GPUs
    gpus = REPORT["placement"]["gpus"]
    assert isinstance(gpus, list)
    for port, devices in zip(ports, visible, strict=True):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            families = {f.name: f for f in text_string_to_metric_families(response.read().decode())}
        mine = gpus[int(devices)]  # CUDA_VISIBLE_DEVICES: a position in the container's GPU order
        (count,) = [s for s in families["nodetopo_step_seconds"].samples if s.name.endswith("_count")]
        assert count.value == 3.0
        assert {k: count.labels[k] for k in ("workload", "node", "island", "leaf")} == {
            "workload": "ray-train",
            "node": "ray-gpu-1",
            "island": str(mine["island"]),
            "leaf": "leaf-7",
        }
        (gpu,) = families["nodetopo_workload_gpu_info"].samples
        assert gpu.labels["UUID"] == mine["uuid"] and gpu.labels["gpu"] == str(mine["index"])
