"""Dynamic Resource Allocation on the real node: the test DRA driver (tests/node/dradriver) registered
with the real kubelet as two drivers, ``gpu.nvidia.com`` for a fixture bundle's GPUs and ``dra.net``
for its RDMA NICs (the attributes of NVIDIA's GPU driver and of dranet: tests/node/dra.py), publishing
ResourceSlices; the real kube-scheduler allocates claims, the real kubelet has the driver prepare them
and containerd injects the CDI devices the driver wrote.

Measured here, not assumed: which claim shapes the scheduler places right on a fixture when the driver
publishes its devices in the order that misleads a first-fit allocator (``--order across-groups``:
consecutive GPUs from different NVLink islands; ``reversed``: the NICs of the last root complex
first). The DeviceClasses and claim templates are deploy/examples/dra's.

Driver logs: ``<node workdir>/dradriver-<driver>.log`` (printed when a case fails). Run with ``-s`` for
the real ``kubectl get resourceslices`` and claim output.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import BUNDLES
from kube.cluster import LocalCluster

from . import dra
from .dra import GPU_DRIVER, NIC_DRIVER, PCIE_ROOT
from .node import LocalNode, NodeError

pytestmark = [pytest.mark.k8s, pytest.mark.node]

NAMESPACE = "default"
TWO_ISLANDS = BUNDLES / "pcie-4x-nvbridge"  # islands {0,1} under pci0000:40, {2,3} under pci0000:c0
DGX_H100 = BUNDLES / "dgx-h100"  # 8 GPUs, one NVSwitch island, two GPUs per root complex
#: what the container prints (then it stays running: a claim made from a template is deleted with its pod
#: as soon as the pod ends, and the devices stay allocated while it runs)
SHOW = (
    'echo "NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES"; echo "RDMA=$NODETOPO_TEST_RDMA_DEVICES"; '
    "ls /dev; echo END; exec sleep 3600"
)


def driver_logs(node: LocalNode) -> str:
    out = ""
    for driver in (GPU_DRIVER, NIC_DRIVER):
        log = node.log(f"dradriver-{driver}")
        if log.exists():
            out += f"\n--- {log} ---\n" + log.read_text(errors="replace")[-4000:]
    return out


def start(
    node: LocalNode, inventory: dict[str, Any], order: str = "as-given", **kwargs: Any
) -> dict[str, Any]:
    try:
        return node.start_dra_driver(inventory, order=order, **kwargs)
    except NodeError as e:
        pytest.fail(f"the test DRA driver did not publish: {e}", pytrace=False)


@pytest.fixture(scope="module")
def classes(node: LocalNode) -> Iterator[LocalNode]:
    """deploy/examples/dra's DeviceClasses and claim templates applied; the drivers stopped after."""
    cluster = node.cluster
    for name in ("deviceclasses.yaml", "claim-templates.yaml"):
        cluster.kubectl("apply", "-n", NAMESPACE, "-f", str(dra.EXAMPLES / name))
    try:
        yield node
    finally:
        for driver in (GPU_DRIVER, NIC_DRIVER):
            node.stop_dra_driver(driver)


@pytest.fixture
def objects(classes: LocalNode) -> Iterator[list[tuple[str, str]]]:
    """(kind, name) of what a test creates in NAMESPACE; deleted after it, pods first, and waited for
    (a claim is gone only once its pod is: then its devices are free for the next test)."""
    created: list[tuple[str, str]] = []
    try:
        yield created
    finally:
        cluster = classes.cluster
        for kind in ("pod", "resourceclaim"):
            names = [n for k, n in created if k == kind]
            if names:
                cluster.kubectl(
                    "delete",
                    kind,
                    "-n",
                    NAMESPACE,
                    *names,
                    "--ignore-not-found",
                    "--grace-period=1",
                    "--timeout=90s",
                    check=False,
                )
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            left = json.loads(cluster.kubectl("get", "resourceclaims", "-n", NAMESPACE, "-o", "json").stdout)
            if not left["items"]:
                break
            time.sleep(0.5)


def create(cluster: LocalCluster, created: list[tuple[str, str]], body: dict[str, Any]) -> None:
    created.append((body["kind"].lower(), body["metadata"]["name"]))
    cluster.kubectl("create", "-f", "-", input=json.dumps(body))


def get(cluster: LocalCluster, kind: str, name: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(cluster.kubectl("get", kind, "-n", NAMESPACE, name, "-o", "json").stdout)
    return out


def wait_phase(node: LocalNode, name: str, phases: tuple[str, ...], timeout: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    pod: dict[str, Any] = {}
    while time.monotonic() < deadline:
        pod = get(node.cluster, "pod", name)
        if pod.get("status", {}).get("phase") in phases:
            return pod
        time.sleep(0.5)
    status = pod.get("status", {})
    containers = json.dumps(status.get("containerStatuses"))[:2000]
    raise AssertionError(
        f"pod {name} not {'/'.join(phases)} after {timeout}s: {status.get('phase')}, "
        f"containers {containers}, "
        f"conditions {json.dumps(status.get('conditions'))[:1500]}" + driver_logs(node)
    )


def pod_claims(node: LocalNode, pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The pod's ResourceClaims by their name in the pod (templates' claims by status)."""
    out = {}
    for status in pod.get("status", {}).get("resourceClaimStatuses", []):
        out[status["name"]] = get(node.cluster, "resourceclaim", status["resourceClaimName"])
    for ref in pod["spec"].get("resourceClaims", []):
        if ref.get("resourceClaimName"):
            out[ref["name"]] = get(node.cluster, "resourceclaim", ref["resourceClaimName"])
    return out


def run(
    node: LocalNode, image: str, created: list[tuple[str, str]], claims: dict[str, dict[str, str]]
) -> tuple[dict[str, Any], dict[str, dict[str, Any]], str]:
    """A pod using ``claims`` that prints what its container sees, running: (pod, its claims, its output)."""
    name = f"dra-{uuid.uuid4().hex[:6]}"
    create(node.cluster, created, dra.claim_pod(name, NAMESPACE, image, node.name, claims, command=SHOW))
    pod = wait_phase(node, name, ("Running", "Succeeded", "Failed"))
    assert pod["status"]["phase"] == "Running", json.dumps(pod["status"])[:2000] + driver_logs(node)
    deadline = time.monotonic() + 30
    out = ""
    while "END" not in out.splitlines() and time.monotonic() < deadline:
        time.sleep(0.3)
        out = node.cluster.kubectl("logs", "-n", NAMESPACE, name, check=False).stdout
    assert "END" in out.splitlines(), out
    return pod, pod_claims(node, pod), out.split("\nEND", 1)[0]


def seen(out: str) -> tuple[list[str], list[str], list[str]]:
    """(NVIDIA_VISIBLE_DEVICES, RDMA devices, /dev/nvidiaN names) a container printed with SHOW."""
    lines = out.splitlines()
    gpus = [g for g in lines[0].removeprefix("NVIDIA_VISIBLE_DEVICES=").split(",") if g]
    rdma = [r for r in lines[1].removeprefix("RDMA=").split(",") if r]
    nodes = sorted(n for n in lines[2:] if n.startswith("nvidia") and n[6:].isdigit())
    return gpus, rdma, nodes


def devices_of(claim: dict[str, Any], driver: str) -> list[str]:
    return [r["device"] for r in dra.allocated(claim) if r["driver"] == driver]


@pytest.fixture(scope="module")
def two_islands() -> dict[str, Any]:
    return dra.discover(TWO_ISLANDS)


def test_the_control_plane_serves_resource_k8s_io_v1_without_feature_gates(node: LocalNode) -> None:
    """Kubernetes 1.34: DRA is GA and on by default (DynamicResourceAllocation), resource.k8s.io/v1 is
    served by default, the kube-scheduler's DynamicResources plugin and the kubelet's DRA manager are
    on: the harness sets no feature gate and no --runtime-config for DRA."""
    versions = node.cluster.kubectl("api-versions").stdout.split()
    served = sorted(v for v in versions if v.startswith("resource.k8s.io/"))
    print(f"resource.k8s.io versions served: {served}")
    assert "resource.k8s.io/v1" in served, served
    resources = node.cluster.kubectl(
        "api-resources", "--api-group=resource.k8s.io", "-o", "name"
    ).stdout.split()
    assert {
        "deviceclasses.resource.k8s.io",
        "resourceclaims.resource.k8s.io",
        "resourceclaimtemplates.resource.k8s.io",
        "resourceslices.resource.k8s.io",
    } <= set(resources), resources
    kubelet = node.log("kubelet").read_text(errors="replace")
    assert "--feature-gates" not in kubelet.split("\n", 1)[0]


def test_the_drivers_publish_the_fixtures_gpus_and_nics_as_resourceslices(
    classes: LocalNode, two_islands: dict[str, Any]
) -> None:
    node = classes
    gpu_slice = start(node, dra.gpu_inventory(two_islands))
    nic_slice = start(node, dra.nic_inventory(two_islands))
    print(node.cluster.kubectl("get", "resourceslices", "-o", "wide").stdout)
    for item, driver in ((gpu_slice, GPU_DRIVER), (nic_slice, NIC_DRIVER)):
        spec = item["spec"]
        assert spec["driver"] == driver and spec["nodeName"] == node.name, spec
        assert spec["pool"]["name"] == node.name and spec["pool"]["resourceSliceCount"] == 1, spec
        owner = item["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"]) == ("Node", node.name), owner
    by_name = {d["name"]: d for d in gpu_slice["spec"]["devices"]}
    for gpu in two_islands["gpus"]:
        device = by_name[f"gpu-{gpu['index']}"]
        # unqualified names are in the driver's domain, as NVIDIA's driver publishes them
        assert dra.attribute(device, "uuid") == gpu["uuid"]
        assert dra.attribute(device, "productName") == gpu["model"]
        assert dra.attribute(device, "type") == "gpu"
        assert dra.attribute(device, dra.PCI_BUS_ID) == gpu["pciBusID"]
        assert dra.attribute(device, PCIE_ROOT) == gpu["pcieRoot"]
        assert device["capacity"]["memory"]["value"] == "40Gi", device
    nics = {dra.attribute(d, "dra.net/rdmaDevice"): d for d in nic_slice["spec"]["devices"]}
    assert sorted(nics) == sorted(n["name"] for n in two_islands["nics"] if n["rdma"])
    for nic in two_islands["nics"]:
        device = nics[nic["name"]]
        assert device["name"] == nic["netdev"]
        assert dra.attribute(device, "dra.net/ifName") == nic["netdev"]
        assert dra.attribute(device, "dra.net/pciAddress") == nic["pciBusID"]
        assert dra.attribute(device, "dra.net/numaNode") == nic["numaNode"]
        assert dra.attribute(device, "dra.net/rdma") is True
        assert dra.attribute(device, PCIE_ROOT) == nic["pcieRoot"]


def test_a_claim_based_two_gpu_pod_sees_the_devices_its_claim_was_allocated(
    classes: LocalNode,
    objects: list[tuple[str, str]],
    node_image: dict[str, Any],
    two_islands: dict[str, Any],
) -> None:
    node = classes
    start(node, dra.gpu_inventory(two_islands))
    pod, claims, out = run(
        node, node_image["name"], objects, {"gpus": {"resourceClaimTemplateName": "two-gpus-one-pcie-root"}}
    )
    claim = claims["gpus"]
    print(json.dumps({"status": claim["status"]}, indent=1))
    results = dra.allocated(claim)
    assert [(r["driver"], r["pool"], r["request"]) for r in results] == [(GPU_DRIVER, node.name, "gpus")] * 2
    reserved = claim["status"]["reservedFor"]
    assert [(r["resource"], r["name"]) for r in reserved] == [("pods", pod["metadata"]["name"])], reserved
    by_name = {f"gpu-{g['index']}": g for g in two_islands["gpus"]}
    allocated = [by_name[r["device"]] for r in results]
    visible, _, dev_nodes = seen(out)
    assert visible == [g["uuid"] for g in allocated], (visible, results, driver_logs(node))
    assert dev_nodes == sorted(f"nvidia{g['index']}" for g in allocated), (dev_nodes, results)
    assert len({g["pcieRoot"] for g in allocated}) == 1, allocated


# ---- which claim shapes the real scheduler places right (pcie-4x-nvbridge unless named) --------------


def island_count(status: dict[str, Any], devices: list[str]) -> int:
    """How many NVLink islands the GPU devices (``gpu-<index>``) span (a GPU in none counts alone)."""
    by_name = {f"gpu-{g['index']}": g for g in status["gpus"]}
    return len({by_name[d]["island"] if by_name[d]["island"] is not None else d for d in devices})


def nic_class(status: dict[str, Any], gpu_device: str, nic_device: str, inventory: dict[str, Any]) -> str:
    """The NodeTopology's PCIe class between a GPU device and a NIC device (PIX, PXB, ... SYS)."""
    rdma = {d["device"]["name"]: d["env"][dra.RDMA_ENV] for d in inventory["devices"]}[nic_device]
    gpu = next(g for g in status["gpus"] if f"gpu-{g['index']}" == gpu_device)
    # nicDistances: the GPU's row of the GPU x NIC matrix, in status.nics order
    column = [n["name"] for n in status["nics"]].index(rdma)
    return str(gpu["nicDistances"][column])


def allocate(
    node: LocalNode, image: str, created: list[tuple[str, str]], body: dict[str, Any]
) -> tuple[dict[str, Any], str]:
    """Create the claim ``body``, run a pod using it; the allocated claim and the container's output.
    Then the pod and the claim are deleted and gone, so that the next claim finds every device free."""
    create(node.cluster, created, body)
    pod, claims, out = run(node, image, created, {"c": {"resourceClaimName": body["metadata"]["name"]}})
    release(node, pod["metadata"]["name"], body["metadata"]["name"])
    return claims["c"], out


def release(node: LocalNode, pod: str, claim: str, timeout: float = 90) -> None:
    cluster = node.cluster
    cluster.kubectl("delete", "pod", "-n", NAMESPACE, pod, "--grace-period=1", "--timeout=60s", check=False)
    cluster.kubectl("delete", "resourceclaim", "-n", NAMESPACE, claim, "--wait=false", check=False)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = cluster.kubectl(
            "get", "resourceclaim", "-n", NAMESPACE, claim, "--ignore-not-found", "-o", "name"
        )
        if not done.stdout.strip():
            return
        time.sleep(0.5)
    raise AssertionError(f"claim {claim} not gone {timeout}s after its pod was deleted" + driver_logs(node))


def test_an_unconstrained_two_gpu_claim_gets_the_first_devices_of_the_slice(
    classes: LocalNode,
    objects: list[tuple[str, str]],
    node_image: dict[str, Any],
    two_islands: dict[str, Any],
) -> None:
    """Measured: a claim for 2 GPUs with no constraint is given the first free devices in the slice's
    order. In index order that is one NVLink island by luck; published across islands (the test
    switch), the real scheduler hands the claim two islands: DRA itself knows no island."""
    node, image = classes, node_image["name"]
    inventory = dra.gpu_inventory(two_islands)
    start(node, inventory)
    claim, _ = allocate(
        node, image, objects, dra.claim(f"any-{uuid.uuid4().hex[:6]}", NAMESPACE, [dra.gpus(2)])
    )
    assert devices_of(claim, GPU_DRIVER) == ["gpu-0", "gpu-1"], dra.allocated(claim)
    assert island_count(two_islands, devices_of(claim, GPU_DRIVER)) == 1
    start(node, inventory, order="across-groups")
    claim, out = allocate(
        node, image, objects, dra.claim(f"any-{uuid.uuid4().hex[:6]}", NAMESPACE, [dra.gpus(2)])
    )
    assert devices_of(claim, GPU_DRIVER) == ["gpu-0", "gpu-2"], dra.allocated(claim)
    assert island_count(two_islands, devices_of(claim, GPU_DRIVER)) == 2
    visible, _, _ = seen(out)
    assert visible == [two_islands["gpus"][0]["uuid"], two_islands["gpus"][2]["uuid"]], (
        visible,
        driver_logs(node),
    )


def test_match_attribute_pcie_root_keeps_two_gpus_in_one_island_where_islands_follow_root_complexes(
    classes: LocalNode,
    objects: list[tuple[str, str]],
    node_image: dict[str, Any],
    two_islands: dict[str, Any],
) -> None:
    """Measured: with ``matchAttribute: resource.kubernetes.io/pcieRoot`` the scheduler backtracks past
    the misleading order and gives the claim two GPUs of one root complex, which on this machine (NVLink
    bridges pairing the GPUs of each root) is one island."""
    node, image = classes, node_image["name"]
    start(node, dra.gpu_inventory(two_islands), order="across-groups")
    template = dra.example_object("claim-templates.yaml", "ResourceClaimTemplate", "two-gpus-one-pcie-root")
    body = dra.claim(f"root-{uuid.uuid4().hex[:6]}", NAMESPACE, **_devices(template))
    claim, _ = allocate(node, image, objects, body)
    devices = devices_of(claim, GPU_DRIVER)
    assert devices == ["gpu-0", "gpu-1"], dra.allocated(claim)
    assert island_count(two_islands, devices) == 1


def _devices(template: dict[str, Any]) -> dict[str, Any]:
    devices = template["spec"]["spec"]["devices"]
    return {"requests": devices["requests"], "constraints": devices.get("constraints")}


def test_gpu_and_nic_share_a_root_complex_only_with_a_constraint_across_both_requests(
    classes: LocalNode,
    objects: list[tuple[str, str]],
    node_image: dict[str, Any],
    two_islands: dict[str, Any],
) -> None:
    """Measured: one GPU and one RDMA NIC from two drivers are allocated independently. With the NICs
    published last root first, a claim without a constraint gets the GPU of pci0000:40 and the NIC of
    pci0000:c0 (class NODE); deploy/examples' gpu-and-nic-one-pcie-root (one matchAttribute over both
    requests) gets the NIC of the GPU's root (PIX here)."""
    node, image = classes, node_image["name"]
    gpu_inventory, nic_inventory = dra.gpu_inventory(two_islands), dra.nic_inventory(two_islands)
    start(node, gpu_inventory)
    start(node, nic_inventory, order="reversed")
    body = dra.claim(
        f"gpu-nic-{uuid.uuid4().hex[:6]}", NAMESPACE, [dra.gpus(1, name="gpu"), dra.nics(1, name="nic")]
    )
    claim, out = allocate(node, image, objects, body)
    (gpu,), (nic,) = devices_of(claim, GPU_DRIVER), devices_of(claim, NIC_DRIVER)
    assert nic_class(two_islands, gpu, nic, nic_inventory) == "NODE", dra.allocated(claim)
    _, rdma, _ = seen(out)
    assert rdma == ["mlx5_1"], (rdma, driver_logs(node))

    template = dra.example_object(
        "claim-templates.yaml", "ResourceClaimTemplate", "gpu-and-nic-one-pcie-root"
    )
    claim, out = allocate(
        node, image, objects, dra.claim(f"aligned-{uuid.uuid4().hex[:6]}", NAMESPACE, **_devices(template))
    )
    (gpu,), (nic,) = devices_of(claim, GPU_DRIVER), devices_of(claim, NIC_DRIVER)
    assert nic_class(two_islands, gpu, nic, nic_inventory) == "PIX", dra.allocated(claim)
    visible, rdma, _ = seen(out)
    by_name = {f"gpu-{g['index']}": g for g in two_islands["gpus"]}
    assert visible == [by_name[gpu]["uuid"]] and rdma == by_name[gpu]["nearestNICs"], (visible, rdma)


def pending_reason(node: LocalNode, name: str, timeout: float = 30) -> str:
    """The scheduler's FailedScheduling message for a pod that stays Pending."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pod = get(node.cluster, "pod", name)
        assert not pod["spec"].get("nodeName"), pod["spec"]
        for c in pod.get("status", {}).get("conditions", []):
            if c["type"] == "PodScheduled" and c["status"] == "False" and c.get("message"):
                return str(c["message"])
        time.sleep(0.5)
    raise AssertionError(f"pod {name} has no PodScheduled=False message after {timeout}s")


def test_on_nvswitch_machines_a_pcie_root_constraint_refuses_what_one_island_holds(
    classes: LocalNode, objects: list[tuple[str, str]], node_image: dict[str, Any]
) -> None:
    """Measured on the DGX H100 fixture (one NVSwitch island of 8 GPUs, two GPUs per root complex):
    4 GPUs with matchAttribute pcieRoot never schedule although one island holds all 8; and a GPU+NIC
    pcieRoot constraint with the NICs published last first gives GPU 0 the other NIC of its root
    (PXB), not its PIX one: pcieRoot is neither "one island" nor "the nearest NIC"."""
    node, image = classes, node_image["name"]
    status = dra.discover(DGX_H100)
    assert [len(i["gpus"]) for i in status["nvlinkIslands"]] == [8]
    gpu_inventory, nic_inventory = dra.gpu_inventory(status), dra.nic_inventory(status)
    start(node, gpu_inventory)
    start(node, nic_inventory, order="reversed")
    name = f"four-{uuid.uuid4().hex[:6]}"
    create(node.cluster, objects, dra.claim(name, NAMESPACE, [dra.gpus(4)], [dra.same(PCIE_ROOT)]))
    pod = f"dra-{uuid.uuid4().hex[:6]}"
    create(
        node.cluster,
        objects,
        dra.claim_pod(pod, NAMESPACE, image, node.name, {"c": {"resourceClaimName": name}}, command=SHOW),
    )
    reason = pending_reason(node, pod)
    print(f"4 GPUs, one pcieRoot, DGX H100: {reason}")
    assert "cannot allocate all claims" in reason, reason
    assert not dra.allocated(get(node.cluster, "resourceclaim", name))

    template = dra.example_object(
        "claim-templates.yaml", "ResourceClaimTemplate", "gpu-and-nic-one-pcie-root"
    )
    claim, _ = allocate(
        node, image, objects, dra.claim(f"aligned-{uuid.uuid4().hex[:6]}", NAMESPACE, **_devices(template))
    )
    (gpu,), (nic,) = devices_of(claim, GPU_DRIVER), devices_of(claim, NIC_DRIVER)
    assert gpu == "gpu-0", dra.allocated(claim)
    assert nic_class(status, gpu, nic, nic_inventory) == "PXB", dra.allocated(claim)


# ---- the probe on claim-based pods ------------------------------------------------------------------


def probe_claim_pod(
    name: str, image: str, node: LocalNode, sa: str, claim_name: str, *, declared: bool = True
) -> dict[str, Any]:
    """test_probe_node's probe pod declaring ``nodetopo.io/gpus-in-one-island`` (``declared``; else
    nothing), its init container (the probe) and main container both using the ResourceClaim
    ``claim_name`` (one allocation, the same devices for both). Scheduled, not bound: the scheduler
    allocates the claim."""
    from .test_probe_node import probe_pod

    pod = probe_pod(name, image, node, sa, {"nodetopo.io/gpus-in-one-island": "true"} if declared else {})
    spec = pod["spec"]
    del spec["nodeName"]
    spec["nodeSelector"] = {"kubernetes.io/hostname": node.name}
    spec["resourceClaims"] = [{"name": "gpus", "resourceClaimName": claim_name}]
    for container in [*spec["initContainers"], *spec["containers"]]:
        container["resources"] = {"claims": [{"name": "gpus"}]}
    # /dev/shm big enough for NCCL (the probe's shm check), as a multi-GPU pod should have it
    spec["volumes"].append({"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}})
    spec["initContainers"][0]["volumeMounts"].append({"name": "dshm", "mountPath": "/dev/shm"})
    return pod


ACROSS = "PlacedWrong: gpus-in-one-island: GPUs span 2 NVLink islands: GPU 0 in island 0; GPU 2 in island 1"


@pytest.mark.parametrize(
    ("order", "need_on", "verdict"),
    [("as-given", "pod", "passed"), ("across-groups", "pod", ACROSS), ("across-groups", "claim", ACROSS)],
    ids=["as-given", "across-groups", "across-groups-need-on-claim"],
)
def test_the_probe_judges_a_claim_based_pods_gpus_by_island(
    classes: LocalNode,
    objects: list[tuple[str, str]],
    node_image: dict[str, Any],
    two_islands: dict[str, Any],
    order: str,
    need_on: str,
    verdict: str,
) -> None:
    """``nodetopo probe`` as the init container of a pod whose 2 GPUs come from a ResourceClaim (no
    constraint) and which declares one island: the container sees the claim's GPUs (CDI), the probe
    places them on the published NodeTopology, and passes when the driver's order gave one island,
    fails the pod ``PlacedWrong`` when the driver was told to publish across islands (GPUs 0 and 2, as
    test_an_unconstrained_two_gpu_claim_gets_the_first_devices_of_the_slice measured; the claim itself is
    deallocated once the pod is done, so the probe's own words name the GPUs). ``need_on`` "claim": the
    pod declares nothing and the one-island need is only the claim's annotation, which the probe reads
    through the API with the pod's service account."""
    from .test_probe_node import bundle_published, create_reader, delete_reader, init_terminated, wait_done

    node, image = classes, node_image["name"]
    start(node, dra.gpu_inventory(two_islands), order=order)
    claim_name = f"probe-gpus-{uuid.uuid4().hex[:6]}"
    claim = dra.claim(claim_name, NAMESPACE, [dra.gpus(2)])
    if need_on == "claim":
        claim["metadata"]["annotations"] = {"nodetopo.io/gpus-in-one-island": "true"}
    create(node.cluster, objects, claim)
    sa = create_reader(node.cluster)
    try:
        with bundle_published(node.cluster, node, TWO_ISLANDS):
            name = f"probe-dra-{uuid.uuid4().hex[:6]}"
            pod_object = probe_claim_pod(name, image, node, sa, claim_name, declared=need_on == "pod")
            create(node.cluster, objects, pod_object)
            pod = wait_done(node.cluster, name)
            term = init_terminated(pod)
            report = node.cluster.kubectl(
                "logs", "-n", NAMESPACE, name, "-c", "topology-probe", check=False
            ).stdout
            why = f"{term}\n{report[-3000:]}{driver_logs(node)}"
            print(f"{order}: probe: {term.get('message', '').strip()}")
            assert term.get("message", "").startswith(verdict), why
            if verdict == "passed":
                assert pod["status"]["phase"] == "Succeeded" and term.get("exitCode") == 0, why
                island = {c["name"]: c for c in json.loads(report)["checks"]}["gpus-in-one-island"]
                assert island["status"] == "pass" and "all in island 0" in island["reason"], island
            else:
                assert pod["status"]["phase"] == "Failed" and term.get("exitCode") == 1, why
            if need_on == "claim":
                declared = {c["name"]: c for c in json.loads(report)["checks"]}["declared"]
                assert (
                    declared["status"] == "pass" and f"with ResourceClaim {claim_name}" in declared["reason"]
                )
    finally:
        delete_reader(node.cluster, sa)


# ---- what the kubelet and nodetopo see of claim-based pods ---------------------------------------------


def _wire(data: bytes) -> list[tuple[int, bytes | int]]:
    """(field, value) of one protobuf message: varints as int, length-delimited as bytes."""
    out: list[tuple[int, bytes | int]] = []
    pos = 0

    def varint() -> int:
        nonlocal pos
        value = shift = 0
        while True:
            byte = data[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    while pos < len(data):
        key = varint()
        number, kind = key >> 3, key & 7
        if kind == 0:
            out.append((number, varint()))
        elif kind == 2:
            length = varint()
            out.append((number, data[pos : pos + length]))
            pos += length
        elif kind in (1, 5):
            pos += 8 if kind == 1 else 4
        else:
            raise AssertionError(f"wire type {kind}")
    return out


def _strings(message: bytes, number: int) -> list[str]:
    return [v.decode() for n, v in _wire(message) if n == number and isinstance(v, bytes)]


def _messages(message: bytes, number: int) -> list[bytes]:
    return [v for n, v in _wire(message) if n == number and isinstance(v, bytes)]


def dynamic_resources(list_response: bytes, namespace: str, pod: str) -> dict[str, Any]:
    """podresources v1 ``List`` for one pod: per container, its device-plugin devices (field 2) and its
    dynamic resources (field 5: claim name, namespace, and per device driver, pool, device, CDI ids)."""
    for pod_message in _messages(list_response, 1):
        if _strings(pod_message, 1) != [pod] or _strings(pod_message, 2) != [namespace]:
            continue
        containers = {}
        for container in _messages(pod_message, 3):
            claims = []
            for dynamic in _messages(container, 5):
                devices = [
                    {
                        "driver": _strings(c, 2)[0],
                        "pool": _strings(c, 3)[0],
                        "device": _strings(c, 4)[0],
                        "cdi": [_strings(d, 1)[0] for d in _messages(c, 1)],
                    }
                    for c in _messages(dynamic, 4)
                ]
                claims.append(
                    {
                        "claim": _strings(dynamic, 2)[0],
                        "namespace": _strings(dynamic, 3)[0],
                        "devices": devices,
                    }
                )
            containers[_strings(container, 1)[0]] = {"devices": _messages(container, 2), "claims": claims}
        return containers
    raise AssertionError(f"pod {namespace}/{pod} is not in the kubelet's List")


def test_in_dra_mode_the_kubelet_lists_claims_and_nodetopo_still_discovers_every_gpu(
    classes: LocalNode,
    objects: list[tuple[str, str]],
    node_image: dict[str, Any],
    two_islands: dict[str, Any],
) -> None:
    """Measured on the real kubelet (1.34, KubeletPodResourcesDynamicResources on by default): its
    PodResources ``List`` gives a claim-based container no device-plugin devices, and names each claim
    with the driver, pool and device of every allocated device and the CDI ids the driver returned.
    With no device plugin (the Node has no nvidia.com/gpu), ``nodetopo publish`` (the agent's discovery
    and its PodResources reader) still publishes every GPU, island and label of the bundle, and the GPU
    the claim holds makes the holders unknown (the join of a driver's device name to a GPU is not made),
    never free."""
    from nodetopo.kubelet.podresources import LIST_METHOD, call_unary

    from .test_probe_node import bundle_published

    node, image = classes, node_image["name"]
    node.stop_device_plugin()
    start(node, dra.gpu_inventory(two_islands))
    start(node, dra.nic_inventory(two_islands))
    # No device plugin: the Node offers no nvidia.com/gpu. A plugin an earlier test of the session ran
    # leaves the resource listed, at 0 once the kubelet has seen the plugin go (its node status update)
    deadline = time.monotonic() + 90
    while True:
        status, body = node.cluster.request("GET", f"/api/v1/nodes/{node.name}")
        assert status == 200, body
        offered = body["status"]["allocatable"].get("nvidia.com/gpu", "0")
        if offered == "0" or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert offered == "0", body["status"]
    pod_name = f"dra-{uuid.uuid4().hex[:6]}"
    claims = {"c": {"resourceClaimTemplateName": "gpu-and-nic-one-pcie-root"}}
    create(
        node.cluster,
        objects,
        dra.claim_pod(pod_name, NAMESPACE, image, node.name, claims, command="sleep 300"),
    )
    pod = wait_phase(node, pod_name, ("Running",))
    claim = pod_claims(node, pod)["c"]
    socket = node.kubelet_root / "pod-resources" / "kubelet.sock"
    listed = dynamic_resources(call_unary(str(socket), LIST_METHOD, timeout_s=10), NAMESPACE, pod_name)
    print(json.dumps({"List": listed, "claim": claim["status"]["allocation"]["devices"]}, indent=1))
    main = listed["main"]
    assert main["devices"] == [], main
    (entry,) = main["claims"]
    assert (entry["claim"], entry["namespace"]) == (claim["metadata"]["name"], NAMESPACE), entry
    uid = claim["metadata"]["uid"]
    expected = [
        {
            "driver": r["driver"],
            "pool": r["pool"],
            "device": r["device"],
            # a GPU has device nodes (its own CDI device), a NIC only the environment; the environment of
            # a request comes with its first device
            "cdi": [f"k8s.{r['driver']}/claim={uid}-{r['device']}"] * (r["driver"] == GPU_DRIVER)
            + [f"k8s.{r['driver']}/claim={uid}-{r['request']}-env"],
        }
        for r in dra.allocated(claim)
    ]
    assert sorted(entry["devices"], key=lambda d: d["driver"]) == sorted(expected, key=lambda d: d["driver"])

    with bundle_published(node.cluster, node, TWO_ISLANDS, "--pod-resources-socket", str(socket)):
        published = json.loads(node.cluster.kubectl("get", "nodetopology", node.name, "-o", "json").stdout)
        status, body = node.cluster.request("GET", f"/api/v1/nodes/{node.name}")
        labels = body["metadata"]["labels"]
        got = published["status"]
        assert [g["uuid"] for g in got["gpus"]] == [g["uuid"] for g in two_islands["gpus"]]
        assert [i["gpus"] for i in got["nvlinkIslands"]] == [[0, 1], [2, 3]]
        assert labels["nodetopo.io/gpu.count"] == "4" and labels["nodetopo.io/nvlink.island-size"] == "2", (
            labels
        )
        # the claim's GPU is held by its pod: the kubelet's claim device joined to the GPU through the
        # driver's ResourceSlice (its uuid attribute), the other GPUs free
        print("allocation in DRA mode:", got["allocation"])
        claimed = {
            int(r["device"].removeprefix("gpu-")) for r in dra.allocated(claim) if r["driver"] == GPU_DRIVER
        }
        assert len(claimed) == 1, dra.allocated(claim)
        held = {g["index"]: [h["name"] for h in g.get("heldBy") or []] for g in got["gpus"]}
        assert held == {i: [pod_name] if i in claimed else [] for i in held}, got["gpus"]
        assert got["allocation"]["state"] != "Unknown", got["allocation"]
