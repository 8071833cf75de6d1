"""Allocation on the real node: the test device plugin (tests/node/deviceplugin) registered with the
real kubelet advertises a fixture bundle's GPU UUIDs as ``nvidia.com/gpu``; the kubelet chooses devices
for each pod (asking the plugin's preference: one NVLink island, or, with the test switch, different
islands) and the container gets them as ``NVIDIA_VISIBLE_DEVICES``.

Device plugin logs: ``<node workdir>/deviceplugin.log`` (printed when a case fails).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kube.cluster import LocalCluster

from .node import REPO, LocalNode, NodeError

pytestmark = [pytest.mark.k8s, pytest.mark.node]

NAMESPACE = "default"
GPU = "nvidia.com/gpu"
DGX_H100 = REPO / "tests/fixtures/bundles/dgx-h100"  # 8 GPUs, one NVSwitch island
TWO_ISLANDS = REPO / "tests/fixtures/bundles/pcie-4x-nvbridge"  # 4 GPUs, NVLink bridges: islands {0,1} {2,3}


def bundle_gpus(bundle: Path) -> tuple[list[str], list[list[str]]]:
    """The bundle's GPU UUIDs (by index) and its NVLink islands as groups of UUIDs, read from the
    NodeTopology that ``nodetopo discover --from BUNDLE`` derives."""
    done = subprocess.run(
        [sys.executable, "-m", "nodetopo", "discover", "--from", str(bundle), "-o", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)["status"]
    by_index = {g["index"]: g["uuid"] for g in status["gpus"]}
    devices = [by_index[i] for i in sorted(by_index)]
    islands = [[by_index[i] for i in island["gpus"]] for island in status["nvlinkIslands"]]
    return devices, islands


def island_of(islands: list[list[str]], device: str) -> int:
    return next(i for i, island in enumerate(islands) if device in island)


@pytest.fixture
def plugin(node: LocalNode) -> Iterator[LocalNode]:
    """The node; the device plugin is stopped after the test."""
    try:
        yield node
    finally:
        node.stop_device_plugin()


def start_plugin(
    node: LocalNode, bundle: Path, *, across_islands: bool = False
) -> tuple[list[str], list[list[str]]]:
    devices, islands = bundle_gpus(bundle)
    try:
        node.start_device_plugin(devices, islands, across_islands=across_islands)
    except NodeError as e:
        pytest.fail(f"the test device plugin did not register: {e}", pytrace=False)
    return devices, islands


def plugin_log(node: LocalNode) -> str:
    log = node.log("deviceplugin")
    return f"\n--- {log} ---\n" + (log.read_text(errors="replace")[-6000:] if log.exists() else "(none)")


def gpu_pod(name: str, image: str, node: LocalNode, gpus: int) -> dict[str, Any]:
    """A pod on ``node`` requesting ``gpus`` GPUs whose container prints what it was given."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "restartPolicy": "Never",
            "nodeName": node.name,
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": ["/bin/sh", "-c", 'echo "NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES"'],
                    "resources": {"limits": {GPU: str(gpus)}},
                }
            ],
        },
    }


def wait_phase(
    cluster: LocalCluster, name: str, phases: tuple[str, ...], timeout: float = 120
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    pod: dict[str, Any] = {}
    while time.monotonic() < deadline:
        pod = json.loads(cluster.kubectl("get", "pod", "-n", NAMESPACE, name, "-o", "json").stdout)
        if pod.get("status", {}).get("phase") in phases:
            return pod
        time.sleep(0.5)
    raise AssertionError(
        f"pod {name} not {'/'.join(phases)} after {timeout}s: {json.dumps(pod.get('status'))[:2000]}"
    )


def visible_devices(node: LocalNode, image: str, gpus: int) -> list[str]:
    """Run a pod asking for ``gpus`` GPUs; the device IDs its container saw in NVIDIA_VISIBLE_DEVICES."""
    cluster = node.cluster
    name = f"gpus-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("apply", "-f", "-", input=json.dumps(gpu_pod(name, image, node, gpus)))
    try:
        pod = wait_phase(cluster, name, ("Succeeded", "Failed"))
        assert pod["status"]["phase"] == "Succeeded", json.dumps(pod["status"])[:2000] + plugin_log(node)
        out = cluster.kubectl("logs", "-n", NAMESPACE, name).stdout.strip()
    finally:
        cluster.kubectl("delete", "pod", "-n", NAMESPACE, name, "--wait=false", check=False)
    assert out.startswith("NVIDIA_VISIBLE_DEVICES="), out
    return [d for d in out.removeprefix("NVIDIA_VISIBLE_DEVICES=").split(",") if d]


def test_device_plugin_gives_pods_bundle_gpus_from_one_island_or_across_islands(
    plugin: LocalNode, node_image: dict[str, Any]
) -> None:
    node, image = plugin, node_image["name"]
    devices, islands = start_plugin(node, DGX_H100)
    assert len(devices) == 8 and len(islands) == 1
    status, body = node.cluster.request("GET", f"/api/v1/nodes/{node.name}")
    assert status == 200 and body["status"]["capacity"].get(GPU) == "8", body["status"]["capacity"]
    seen = visible_devices(node, image, 2)
    assert len(seen) == 2 and set(seen) <= set(devices), (seen, plugin_log(node))

    # Two NVLink islands of two: packed, both devices from one island; the test switch spreads them.
    devices, islands = start_plugin(node, TWO_ISLANDS)
    assert len(devices) == 4 and [len(i) for i in islands] == [2, 2]
    status, body = node.cluster.request("GET", f"/api/v1/nodes/{node.name}")
    assert status == 200 and body["status"]["capacity"].get(GPU) == "4", body["status"]["capacity"]
    packed = visible_devices(node, image, 2)
    assert len(packed) == 2 and set(packed) <= set(devices), (packed, plugin_log(node))
    assert len({island_of(islands, d) for d in packed}) == 1, (packed, islands, plugin_log(node))

    start_plugin(node, TWO_ISLANDS, across_islands=True)
    spread = visible_devices(node, image, 2)
    assert len(spread) == 2 and set(spread) <= set(devices), (spread, plugin_log(node))
    assert len({island_of(islands, d) for d in spread}) == 2, (spread, islands, plugin_log(node))

    # The kubelet restarts (it recreates kubelet.sock and empties the device-plugin directory): the
    # plugin serves and registers again, and its devices become allocatable again.
    log = node.log("deviceplugin")
    offset = log.stat().st_size
    node.stop_kubelet()
    node.start_kubelet()
    deadline = time.monotonic() + 60
    allocatable = None
    while time.monotonic() < deadline:
        with log.open("rb") as handle:
            handle.seek(offset)
            again = b"registering again" in handle.read()
        status, body = node.cluster.request("GET", f"/api/v1/nodes/{node.name}")
        allocatable = body["status"].get("allocatable", {}).get(GPU) if status == 200 else None
        if again and allocatable == "4":
            break
        time.sleep(0.5)
    else:
        raise AssertionError(f"after a kubelet restart: allocatable {GPU} {allocatable}" + plugin_log(node))
    assert len(visible_devices(node, image, 2)) == 2
