"""Allocation on the real node: the test device plugin (tests/node/deviceplugin) registered with the
real kubelet advertises a fixture bundle's GPU UUIDs as ``nvidia.com/gpu``; the kubelet chooses devices
for each pod (asking the plugin's preference: one NVLink island, or, with the test switch, different
islands) and the container gets them as ``NVIDIA_VISIBLE_DEVICES`` (and a ``/dev/nvidia<index>`` each).

With the bundle's NodeTopology published for the node, ``nodetopo probe`` as an init container of a pod
declaring ``nodetopo.io/gpus-in-one-island`` passes when the kubelet handed it one island's GPUs and
fails the pod ``PlacedWrong`` when the plugin was told to allocate across islands. Run with ``-s`` for
the real ``kubectl describe pod`` output.

Allocation truth: ``nodetopo publish --pod-resources-socket`` (the agent's PodResources reader, once)
publishes which pod holds each GPU (``status.gpus[].heldBy``), and ``nodetopo extender`` behind a real
kube-scheduler places by it: an island free by count but split by the kubelet's choice is refused.
The probe compares the GPUs its container sees with the ones heldBy gives its pod: the same pass; a
plugin told to misreport (the container told other devices than the kubelet chose) is ResourceNotReal.

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
from helpers import BUNDLES
from kube.cluster import LocalCluster
from kube.scheduler_support import (
    cluster_scheduler_config,
    running_extender,
    start_scheduler,
    stays_pending,
    stop,
)

from .node import LocalNode, NodeError
from .test_probe_node import (
    create_reader,
    delete_reader,
    init_terminated,
    node_state_kept,
    probe_pod,
    publish_bundle,
    wait_done,
)

pytestmark = [pytest.mark.k8s, pytest.mark.node]

NAMESPACE = "default"
GPU = "nvidia.com/gpu"
DGX_H100 = BUNDLES / "dgx-h100"  # 8 GPUs, one NVSwitch island
TWO_ISLANDS = BUNDLES / "pcie-4x-nvbridge"  # 4 GPUs, NVLink bridges: islands {0,1} {2,3}


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
    node: LocalNode, bundle: Path, *, across_islands: bool = False, misreport: bool = False
) -> tuple[list[str], list[list[str]]]:
    devices, islands = bundle_gpus(bundle)
    try:
        node.start_device_plugin(devices, islands, across_islands=across_islands, misreport=misreport)
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
                    "command": [
                        "/bin/sh",
                        "-c",
                        'echo "NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES"; ls /dev',
                    ],
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


def visible_devices(node: LocalNode, image: str, gpus: int, devices: list[str]) -> list[str]:
    """Run a pod asking for ``gpus`` GPUs; the device IDs its container saw in NVIDIA_VISIBLE_DEVICES
    (each with its ``/dev/nvidia<index>``, ``index`` its place in ``devices``)."""
    cluster = node.cluster
    name = f"gpus-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("apply", "-f", "-", input=json.dumps(gpu_pod(name, image, node, gpus)))
    try:
        pod = wait_phase(cluster, name, ("Succeeded", "Failed"))
        assert pod["status"]["phase"] == "Succeeded", json.dumps(pod["status"])[:2000] + plugin_log(node)
        out = cluster.kubectl("logs", "-n", NAMESPACE, name).stdout.strip()
    finally:
        cluster.kubectl("delete", "pod", "-n", NAMESPACE, name, "--wait=false", check=False)
    first, *dev = out.splitlines()
    assert first.startswith("NVIDIA_VISIBLE_DEVICES="), out
    seen = [d for d in first.removeprefix("NVIDIA_VISIBLE_DEVICES=").split(",") if d]
    assert set(seen) <= set(devices), (seen, devices, plugin_log(node))
    nodes = sorted(n for n in dev if n.startswith("nvidia"))
    assert nodes == sorted(f"nvidia{devices.index(d)}" for d in seen), (nodes, seen, plugin_log(node))
    return seen


def test_device_plugin_gives_pods_bundle_gpus_from_one_island_or_across_islands(
    plugin: LocalNode, node_image: dict[str, Any]
) -> None:
    node, image = plugin, node_image["name"]
    devices, islands = start_plugin(node, DGX_H100)
    assert len(devices) == 8 and len(islands) == 1
    status, body = node.cluster.request("GET", f"/api/v1/nodes/{node.name}")
    assert status == 200 and body["status"]["capacity"].get(GPU) == "8", body["status"]["capacity"]
    seen = visible_devices(node, image, 2, devices)
    assert len(seen) == 2 and set(seen) <= set(devices), (seen, plugin_log(node))

    # Two NVLink islands of two: packed, both devices from one island; the test switch spreads them.
    devices, islands = start_plugin(node, TWO_ISLANDS)
    assert len(devices) == 4 and [len(i) for i in islands] == [2, 2]
    status, body = node.cluster.request("GET", f"/api/v1/nodes/{node.name}")
    assert status == 200 and body["status"]["capacity"].get(GPU) == "4", body["status"]["capacity"]
    packed = visible_devices(node, image, 2, devices)
    assert len(packed) == 2 and set(packed) <= set(devices), (packed, plugin_log(node))
    assert len({island_of(islands, d) for d in packed}) == 1, (packed, islands, plugin_log(node))

    start_plugin(node, TWO_ISLANDS, across_islands=True)
    spread = visible_devices(node, image, 2, devices)
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
    assert len(visible_devices(node, image, 2, devices)) == 2


ONE_ISLAND = {"nodetopo.io/gpus-in-one-island": "true"}


def probe_gpu_pod(name: str, image: str, node: LocalNode, sa: str, gpus: int) -> dict[str, Any]:
    """test_probe_node's probe pod declaring gpus-in-one-island, its init container (the probe) and
    its main container each asking for ``gpus`` GPUs (the kubelet hands both the same devices)."""
    pod = probe_pod(name, image, node, sa, ONE_ISLAND)
    for container in [*pod["spec"]["initContainers"], *pod["spec"]["containers"]]:
        container["resources"] = {"limits": {GPU: str(gpus)}}
    # /dev/shm big enough for NCCL (the probe's shm check), as a multi-GPU pod should have it
    pod["spec"]["volumes"].append({"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}})
    pod["spec"]["initContainers"][0]["volumeMounts"].append({"name": "dshm", "mountPath": "/dev/shm"})
    return pod


def event_messages(cluster: LocalCluster, name: str, reason: str) -> list[str]:
    done = cluster.kubectl(
        "get", "events", "-n", NAMESPACE, f"--field-selector=involvedObject.name={name}", "-o", "json"
    )
    return [e.get("message", "") for e in json.loads(done.stdout)["items"] if e.get("reason") == reason]


def run_probe_pod(node: LocalNode, image: str, names: list[str], *, across_islands: bool) -> dict[str, Any]:
    """Plugin (packed or across islands) + the two-island bundle's NodeTopology + a probe pod asking
    for 2 GPUs in one island (its name appended to ``names``): the pod when done."""
    cluster = node.cluster
    start_plugin(node, TWO_ISLANDS, across_islands=across_islands)
    publish_bundle(cluster, node, TWO_ISLANDS)
    sa = create_reader(cluster)
    names.append(f"probe-gpus-{uuid.uuid4().hex[:6]}")
    try:
        cluster.kubectl("apply", "-f", "-", input=json.dumps(probe_gpu_pod(names[-1], image, node, sa, 2)))
        return wait_done(cluster, names[-1])
    finally:
        delete_reader(cluster, sa)


@pytest.fixture
def probe_pods(plugin: LocalNode) -> Iterator[list[str]]:
    """Names of the pods a test creates. Afterwards they are deleted (and gone: their GPUs are free
    for the next test), and the node's NodeTopology and labels are as before (``node_state_kept``)."""
    cluster = plugin.cluster
    names: list[str] = []
    with node_state_kept(cluster, plugin):
        try:
            yield names
        finally:
            if names:
                cluster.kubectl(
                    "delete",
                    "pod",
                    "-n",
                    NAMESPACE,
                    *names,
                    "--ignore-not-found",
                    "--grace-period=1",
                    "--timeout=60s",
                    check=False,
                )


def test_probe_passes_a_pod_given_one_islands_gpus(
    plugin: LocalNode, probe_pods: list[str], node_image: dict[str, Any]
) -> None:
    node = plugin
    pod = run_probe_pod(node, node_image["name"], probe_pods, across_islands=False)
    name = probe_pods[-1]
    term = init_terminated(pod)
    report = node.cluster.kubectl("logs", "-n", NAMESPACE, name, "-c", "topology-probe", check=False).stdout
    why = f"{term}\n{report[-4000:]}{plugin_log(node)}"
    assert pod["status"]["phase"] == "Succeeded" and term.get("exitCode") == 0, why
    assert term.get("message", "").startswith("passed"), why
    checks = {c["name"]: c for c in json.loads(report)["checks"]}
    island = checks["gpus-in-one-island"]
    assert island["status"] == "pass" and "all in island" in island["reason"], island
    passed = event_messages(node.cluster, name, "TopologyProbePassed")
    assert passed == [term["message"].strip()], (passed, term)


def test_probe_fails_a_pod_given_gpus_across_islands_placed_wrong(
    plugin: LocalNode, probe_pods: list[str], node_image: dict[str, Any]
) -> None:
    node = plugin
    pod = run_probe_pod(node, node_image["name"], probe_pods, across_islands=True)
    name = probe_pods[-1]
    term = init_terminated(pod)
    why = f"{term}{plugin_log(node)}"
    assert pod["status"]["phase"] == "Failed" and term.get("exitCode") == 1, why
    # Across islands from a free node: the first GPU of each island (GPU 0 of {0,1}, GPU 2 of {2,3}).
    expected = (
        "PlacedWrong: gpus-in-one-island: GPUs span 2 NVLink islands: GPU 0 in island 0; GPU 2 in island 1"
    )
    assert term.get("message", "").startswith(expected), why
    assert event_messages(node.cluster, name, "TopologyProbeFailed") == [term["message"].strip()]
    described = node.cluster.kubectl("describe", "pod", "-n", NAMESPACE, name).stdout
    print(described)
    assert "TopologyProbeFailed" in described and expected in described, described


SCHEDULER = "nodetopo-allocation-e2e"


def sleeper(
    name: str, image: str, gpus: int, *, node: str | None = None, scheduler: str | None = None
) -> dict[str, Any]:
    """A pod holding ``gpus`` GPUs until deleted: bound to ``node``, or placed by ``scheduler``
    (declaring gpus-in-one-island)."""
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 1,
        "automountServiceAccountToken": False,
        "containers": [
            {
                "name": "main",
                "image": image,
                "imagePullPolicy": "Never",
                "command": ["/bin/sh", "-c", "sleep 3600"],
                "resources": {"limits": {GPU: str(gpus)}},
            }
        ],
    }
    if node:
        spec["nodeName"] = node
    if scheduler:
        spec["schedulerName"] = scheduler
    annotations = ONE_ISLAND if scheduler else {}
    meta = {"name": name, "namespace": NAMESPACE, "annotations": annotations}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def publish_allocation(node: LocalNode) -> dict[str, Any]:
    """The two-island bundle's NodeTopology with what the kubelet's PodResources API says: its status."""
    socket = node.kubelet_root / "pod-resources" / "kubelet.sock"
    publish_bundle(node.cluster, node, TWO_ISLANDS, "--pod-resources-socket", str(socket))
    done = node.cluster.kubectl("get", "nodetopology", node.name, "-o", "json")
    status: dict[str, Any] = json.loads(done.stdout)["status"]
    return status


def holders(status: dict[str, Any]) -> dict[int, list[str]]:
    """GPU index → names of the pods holding it (from heldBy), for every GPU."""
    return {g["index"]: [h["name"] for h in g.get("heldBy") or []] for g in status["gpus"]}


def retry_until_bound(cluster: LocalCluster, name: str, timeout: float = 60) -> None:
    """Wait until the pending pod is bound, touching it every few seconds. The scheduler retries a pod
    the extender refused on the next cluster event, here the deletion of the pod that held a GPU; it
    may see that deletion before the extender's pod watch does and be refused again, and then waits
    for the next event (or minutes). A change to the pod itself is such an event."""
    deadline = time.monotonic() + timeout
    touched = 0
    while time.monotonic() < deadline:
        pod = json.loads(cluster.kubectl("get", "pod", "-n", NAMESPACE, name, "-o", "json").stdout)
        if pod["spec"].get("nodeName"):
            return
        touched += 1
        cluster.kubectl("label", "pod", "-n", NAMESPACE, name, f"retry={touched}", "--overwrite")
        time.sleep(3)
    raise AssertionError(f"pod {name} not bound after {timeout}s: {json.dumps(pod.get('status'))[:2000]}")


def test_heldby_shows_the_kubelets_choice_and_the_extender_places_by_it(
    plugin: LocalNode, probe_pods: list[str], node_image: dict[str, Any], tmp_path: Path
) -> None:
    node, image, cluster = plugin, node_image["name"], plugin.cluster
    start_plugin(node, TWO_ISLANDS, across_islands=True)
    # Two 1-GPU pods, one after the other: spread over the islands by the plugin (GPU 0, then GPU 2).
    first, second, third = (f"{n}-{uuid.uuid4().hex[:6]}" for n in ("held-a", "held-b", "wants-island"))
    for name in (first, second):
        probe_pods.append(name)
        cluster.kubectl("apply", "-f", "-", input=json.dumps(sleeper(name, image, 1, node=node.name)))
        wait_phase(cluster, name, ("Running",))
    status = publish_allocation(node)
    allocation = status.get("allocation", {})
    assert allocation.get("state") == "Known", allocation
    assert allocation.get("source") == "kubelet-podresources", allocation
    assert {"name": GPU, "allocatable": 4, "allocated": 2} in allocation.get("resources", []), allocation
    assert holders(status) == {0: [first], 1: [], 2: [second], 3: []}, (status["gpus"], plugin_log(node))
    held = next(g["heldBy"] for g in status["gpus"] if g["index"] == 0)
    assert held == [{"namespace": NAMESPACE, "name": first, "container": "main"}], held

    with running_extender(cluster, tmp_path) as url:
        config = cluster_scheduler_config(cluster, SCHEDULER, url)
        scheduler, log = start_scheduler(cluster, tmp_path, SCHEDULER, config)
        try:
            # 2 GPUs are free by count (the scheduler's own fit passes) but one in each island.
            probe_pods.append(third)
            stays_pending(
                cluster, sleeper(third, image, 2, scheduler=SCHEDULER), "at most 1 GPUs in one NVLink island"
            )
            # The kubelet packs from now on; deleting the pod on GPU 2 frees island 1 whole: the
            # waiting pod is placed there and the kubelet gives it GPUs 2 and 3.
            start_plugin(node, TWO_ISLANDS)
            cluster.kubectl("delete", "pod", "-n", NAMESPACE, second, "--grace-period=1", "--timeout=60s")
            try:
                retry_until_bound(cluster, third)
                wait_phase(cluster, third, ("Running",), timeout=90)
            except AssertionError as e:
                tails = "".join(
                    f"\n--- {f} ---\n{f.read_text(errors='replace')[-3000:]}"
                    for f in (log, tmp_path / "extender.log")
                )
                raise AssertionError(f"{e}{tails}{plugin_log(node)}") from e
        finally:
            stop(scheduler)
    pod = json.loads(cluster.kubectl("get", "pod", "-n", NAMESPACE, third, "-o", "json").stdout)
    assert pod["spec"]["nodeName"] == node.name, pod["spec"]
    status = publish_allocation(node)
    assert holders(status) == {0: [first], 1: [], 2: [third], 3: [third]}, (status["gpus"], plugin_log(node))


def probe_with_heldby(
    node: LocalNode, image: str, names: list[str], annotations: dict[str, str]
) -> tuple[dict[str, Any], list[int], dict[str, Any], str]:
    """A probe pod asking for 2 GPUs whose init container waits 10 s before probing. The kubelet
    allocates a pod's devices when it admits it, so meanwhile the main container is listed by the
    PodResources API: published as heldBy (``nodetopo publish --pod-resources-socket``) before the
    probe reads the NodeTopology. Returns the pod when done, the GPUs heldBy gives it, the probe's
    checks by name, and what to print on failure."""
    cluster = node.cluster
    publish_bundle(cluster, node, TWO_ISLANDS)
    sa = create_reader(cluster)
    name = f"probe-held-{uuid.uuid4().hex[:6]}"
    names.append(name)
    pod = probe_pod(name, image, node, sa, annotations)
    for container in [*pod["spec"]["initContainers"], *pod["spec"]["containers"]]:
        container["resources"] = {"limits": {GPU: "2"}}
    pod["spec"]["volumes"].append({"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}})
    pod["spec"]["initContainers"][0]["volumeMounts"].append({"name": "dshm", "mountPath": "/dev/shm"})
    pod["spec"]["initContainers"][0]["command"] = ["/bin/sh", "-c", 'sleep 10; exec nodetopo "$@"', "sh"]
    try:
        cluster.kubectl("apply", "-f", "-", input=json.dumps(pod))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            current = json.loads(cluster.kubectl("get", "pod", "-n", NAMESPACE, name, "-o", "json").stdout)
            statuses = current["status"].get("initContainerStatuses") or []
            if statuses and "running" in statuses[0].get("state", {}):
                break
            assert current["status"].get("phase") == "Pending", json.dumps(current["status"])[:2000]
            time.sleep(0.3)
        else:
            raise AssertionError(f"the probe did not start: {json.dumps(current['status'])[:2000]}")
        held = holders(publish_allocation(node))
        pod_gpus = sorted(i for i, holding in held.items() if name in holding)
        done = wait_done(cluster, name)
    finally:
        delete_reader(cluster, sa)
    term = init_terminated(done)
    report = cluster.kubectl("logs", "-n", NAMESPACE, name, "-c", "topology-probe", check=False).stdout
    why = f"{held}\n{term}\n{report[-4000:]}{plugin_log(node)}"
    try:
        checks = {c["name"]: c for c in json.loads(report)["checks"]}
    except (ValueError, KeyError) as e:
        raise AssertionError(f"no probe report: {e}\n{why}") from e
    return done, pod_gpus, checks, why


def test_probe_checks_the_container_against_the_gpus_heldby_names(
    plugin: LocalNode, probe_pods: list[str], node_image: dict[str, Any]
) -> None:
    """heldBy names the GPUs the kubelet chose; the container sees exactly those: the probe says so."""
    start_plugin(plugin, TWO_ISLANDS)
    done, pod_gpus, checks, why = probe_with_heldby(plugin, node_image["name"], probe_pods, ONE_ISLAND)
    assert pod_gpus in ([0, 1], [2, 3]), why
    term = init_terminated(done)
    assert done["status"]["phase"] == "Succeeded" and term.get("exitCode") == 0, why
    expected = f"GPU(s) {','.join(map(str, pod_gpus))}: handed to this pod by the kubelet and visible"
    assert checks["kubelet-allocation"] == {
        "name": "kubelet-allocation",
        "status": "pass",
        "reason": expected,
    }, why


def test_probe_fails_a_container_that_sees_other_gpus_than_heldby_resource_not_real(
    plugin: LocalNode, probe_pods: list[str], node_image: dict[str, Any]
) -> None:
    """A broken plugin tells the container the next GPU after each one the kubelet chose: the GPUs are
    real and published, but not the ones this pod holds: ResourceNotReal, naming both."""
    start_plugin(plugin, TWO_ISLANDS, misreport=True)
    done, pod_gpus, checks, why = probe_with_heldby(plugin, node_image["name"], probe_pods, {})
    assert pod_gpus in ([0, 1], [2, 3]), why
    term = init_terminated(done)
    assert done["status"]["phase"] == "Failed" and term.get("exitCode") == 1, why
    seen = ",".join(str(i) for i in sorted((i + 1) % 4 for i in pod_gpus))  # the next GPU of each
    held = ",".join(map(str, pod_gpus))
    expected = (
        f"the kubelet handed GPU(s) {held} to this pod, the container sees {seen} (NVIDIA_VISIBLE_DEVICES)"
    )
    check = checks["kubelet-allocation"]
    assert check == {
        "name": "kubelet-allocation",
        "status": "fail",
        "reason": expected,
        "attribution": "ResourceNotReal",
    }, why
    assert term.get("message", "").startswith(f"ResourceNotReal: kubelet-allocation: {expected}"), why
    failed = event_messages(plugin.cluster, probe_pods[-1], "TopologyProbeFailed")
    assert failed == [term["message"].strip()], (failed, why)
