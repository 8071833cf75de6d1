"""A real local Ray node started with the labels file and resources nodetopo writes.

It must report those labels; tasks and placement groups selecting them (``label_selector``,
``bundle_label_selector``, ``topology_strategy`` on ``nodetopo.io/gpu-domain``) are placed, and ones
whose selector does not match stay unscheduled. Footprint: one head node, ``--num-cpus=1``, no dashboard.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import BUNDLES

from nodetopo.cli import main

pytestmark = pytest.mark.slow


NODE = "ray-e2e-node"


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
def ray_node() -> Iterator[tuple[Any, dict[str, str]]]:
    ray = _ray()
    import yaml

    workdir = Path(tempfile.mkdtemp(prefix="ntray-", dir="/tmp"))  # raylet socket paths must stay short
    labels_file, resources_file = workdir / "labels.yaml", workdir / "resources.json"
    argv = [
        "ray",
        "--from",
        str(BUNDLES / "dgx-h100"),
        "--node-name",
        NODE,
        "--labels-file",
        str(labels_file),
    ]
    assert main([*argv, "--resources-file", str(resources_file)]) == 0
    labels = yaml.safe_load(labels_file.read_text())
    port = _free_port()
    ray_cli = str(Path(sys.executable).with_name("ray"))
    log = workdir / "ray-start.log"
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    with log.open("ab") as handle:
        process = subprocess.Popen(
            [
                ray_cli if os.access(ray_cli, os.X_OK) else "ray",
                "start",
                "--head",
                "--block",
                f"--port={port}",
                "--node-ip-address=127.0.0.1",
                "--num-cpus=1",
                "--num-gpus=0",
                "--include-dashboard=False",
                "--disable-usage-stats",
                f"--temp-dir={workdir / 't'}",
                f"--labels-file={labels_file}",
                f"--resources={resources_file.read_text().strip()}",
            ],
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
        )
    sigterm = signal.getsignal(signal.SIGTERM)  # ray.init installs its own and keeps it
    try:
        deadline = time.monotonic() + 90
        while True:
            assert process.poll() is None, (
                f"ray start exited {process.returncode}:\n{log.read_text()[-4000:]}"
            )
            if "Ray runtime started" in log.read_text(errors="replace"):
                break
            assert time.monotonic() < deadline, f"ray did not start:\n{log.read_text()[-4000:]}"
            time.sleep(0.5)
        ray.init(address=f"127.0.0.1:{port}", log_to_driver=False, logging_level="WARNING")
        yield ray, labels
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
        time.sleep(2)  # raylet and GCS leave after the --block parent; then clear their group
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        shutil.rmtree(workdir, ignore_errors=True)


def test_the_node_reports_the_labels_and_resources(ray_node: tuple[Any, dict[str, str]]) -> None:
    ray, labels = ray_node
    (node,) = [n for n in ray.nodes() if n["Alive"]]
    assert labels["nodetopo.io/gpu-domain"] == f"{NODE}.nvl0"
    assert {k: node["Labels"].get(k) for k in labels} == labels
    assert node["Resources"]["nodetopo.io/nvlink-island-8"] == 1
    assert node["Resources"]["nodetopo.io/rdma-nic"] == 10


def test_label_selector_places_or_holds_tasks(ray_node: tuple[Any, dict[str, str]]) -> None:
    ray, labels = ray_node

    def where() -> str:
        return str(ray.get_runtime_context().get_node_id())

    matching = ray.remote(
        num_cpus=0, label_selector={"nodetopo.io/gpu-domain": labels["nodetopo.io/gpu-domain"]}
    )(where)
    assert ray.get(matching.remote(), timeout=60)
    island = ray.remote(num_cpus=0, label_selector={"nodetopo.io/nvlink.island-size": "in(4,8)"})(where)
    assert ray.get(island.remote(), timeout=60)
    elsewhere = ray.remote(num_cpus=0, label_selector={"nodetopo.io/gpu-domain": "another-domain"})(where)
    ref = elsewhere.remote()
    ready, _ = ray.wait([ref], timeout=5)
    assert ready == []
    ray.cancel(ref, force=True)


def test_placement_groups_select_the_gpu_domain(ray_node: tuple[Any, dict[str, str]]) -> None:
    ray, labels = ray_node
    from ray.util.placement_group import placement_group, remove_placement_group

    domain = labels["nodetopo.io/gpu-domain"]
    bundles = [{"CPU": 0.1, "nodetopo.io/nvlink-island-8": 0.5}, {"CPU": 0.1}]
    placed = placement_group(
        bundles, strategy="STRICT_PACK", bundle_label_selector=[{"nodetopo.io/gpu-domain": domain}] * 2
    )
    assert placed.wait(60)
    remove_placement_group(placed)
    packed = placement_group([{"CPU": 0.1}] * 2, topology_strategy={"nodetopo.io/gpu-domain": "STRICT_PACK"})
    assert packed.wait(60)
    remove_placement_group(packed)
    unmatched = placement_group(
        [{"CPU": 0.1}], bundle_label_selector=[{"nodetopo.io/gpu-domain": "another-domain"}]
    )
    assert not unmatched.wait(5)
    assert ray.util.placement_group_table(unmatched)["state"] == "PENDING"
    remove_placement_group(unmatched)
