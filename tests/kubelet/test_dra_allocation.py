"""The join of DRA claim devices to GPUs: the kubelet's (driver, pool, device) × this node's
ResourceSlice devices → GPU UUIDs (or PCI addresses) → ``heldBy``. Pure: the topology is a bundle's
scan, the slice devices are written here as the reader (nodetopo.kube.resourceslices) returns them."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from nodetopo.kubelet.allocation import gpu_allocation
from nodetopo.model import (
    ClaimDevice,
    DeviceAssignment,
    KubeletAllocation,
    MigDevice,
    PodRef,
    SliceDevice,
    Topology,
)
from nodetopo.resource.body import to_nodetopology
from nodetopo.topology.discover import bundle_context, scan

BUNDLES = Path(__file__).resolve().parents[1] / "fixtures" / "bundles"
A = PodRef(namespace="ml", name="a", container="main")
B = PodRef(namespace="ml", name="b", container="main")


@pytest.fixture(scope="module")
def h100() -> Topology:
    return scan(bundle_context(BUNDLES / "dgx-h100")).topology


def gpu_slices(topology: Topology, *, pool: str = "node-a", by: str = "uuid") -> tuple[SliceDevice, ...]:
    """A GPU driver's slice as NVIDIA's driver publishes it: ``gpu-<index>`` for every GPU."""
    return tuple(
        SliceDevice(
            driver="gpu.nvidia.com",
            pool=pool,
            device=f"gpu-{g.index}",
            uuid=g.uuid if by == "uuid" else None,
            pci_bus_id=str(g.address) if g.address is not None else None,
        )
        for g in topology.gpus
    )


def claimed(
    device: str, holder: PodRef = A, *, claim: str = "ml/a-gpus", pool: str = "node-a"
) -> ClaimDevice:
    return ClaimDevice(driver="gpu.nvidia.com", pool=pool, device=device, claim=claim, holder=holder)


def test_claim_devices_become_the_holders_of_the_gpus_their_slice_names(h100: Topology) -> None:
    # the slice's device names are not the GPU indices: gpu-0 is the GPU whose UUID the slice names
    slices = gpu_slices(h100)
    swapped = tuple(
        dataclasses.replace(d, uuid=h100.gpus[len(h100.gpus) - 1 - i].uuid) for i, d in enumerate(slices)
    )
    observed = KubeletAllocation(
        assignments=(),
        claim_devices=(claimed("gpu-0"), claimed("gpu-1"), claimed("gpu-5", B, claim="ml/b-gpus")),
        slice_devices=swapped,
    )
    got = gpu_allocation(h100, observed)
    last = len(h100.gpus) - 1
    assert got.known, got.message
    assert got.gpu_holders == ((last - 5, (B,)), (last - 1, (A,)), (last, (A,)))
    assert got.message == ""
    counts = {r.name: (r.allocatable, r.allocated) for r in got.resources}
    assert counts == {"gpu.nvidia.com": (len(h100.gpus), 3)}
    status = to_nodetopology(h100, "node-a", got)["status"]
    assert status["allocation"]["state"] == "Known"
    held = {g["index"]: g["heldBy"] for g in status["gpus"]}
    assert held[last] == [{"namespace": "ml", "name": "a", "container": "main"}]
    assert held[last - 5] == [{"namespace": "ml", "name": "b", "container": "main"}]
    assert held[0] == []  # known and free


def test_a_slice_without_uuid_is_joined_by_its_pci_bus_id(h100: Topology) -> None:
    observed = KubeletAllocation(
        assignments=(), claim_devices=(claimed("gpu-3"),), slice_devices=gpu_slices(h100, by="pci")
    )
    got = gpu_allocation(h100, observed)
    assert got.known and got.gpu_holders == ((3, (A,)),)


def test_device_plugin_and_claim_holders_are_merged(h100: Topology) -> None:
    plugin = DeviceAssignment(resource="nvidia.com/gpu", device_id=str(h100.gpus[0].uuid), holder=B)
    nic = ClaimDevice(driver="dra.net", pool="node-a", device="ib0", claim="ml/nic", holder=A)
    observed = KubeletAllocation(
        assignments=(plugin,), claim_devices=(claimed("gpu-0"), nic), slice_devices=gpu_slices(h100)
    )
    got = gpu_allocation(h100, observed)
    assert got.known and got.gpu_holders == ((0, (A, B)),)
    assert {r.name for r in got.resources} == {"gpu.nvidia.com", "nvidia.com/gpu"}


def test_a_mig_device_in_a_slice_is_held_as_that_mig_device(h100: Topology) -> None:
    mig = MigDevice(uuid="MIG-0c5a", parent_uuid=h100.gpus[0].uuid, parent_index=0, profile="3g.40gb")
    topology = dataclasses.replace(h100, mig_devices=(mig,))
    slices = (SliceDevice(driver="gpu.nvidia.com", pool="node-a", device="gpu-0-mig-3g", uuid="MIG-0c5a"),)
    observed = KubeletAllocation(
        assignments=(), claim_devices=(claimed("gpu-0-mig-3g"),), slice_devices=slices
    )
    got = gpu_allocation(topology, observed)
    assert got.known and got.gpu_holders == () and got.mig_holders == (("MIG-0c5a", (A,)),)


@pytest.mark.parametrize(
    ("slices", "expected"),
    [
        (None, "which is not read"),
        (
            "list ResourceSlices (resource.k8s.io/v1): HTTP 403: forbidden",
            "this node's ResourceSlices cannot be read: list ResourceSlices (resource.k8s.io/v1): HTTP 403",
        ),
        ((), "no ResourceSlice of this node lists gpu.nvidia.com/node-a/gpu-1, gpu.nvidia.com/node-a/gpu-2"),
        # the pool is part of the name: another pool's gpu-2 is not this one
        (
            "other-pool",
            "no ResourceSlice of this node lists gpu.nvidia.com/node-a/gpu-1, gpu.nvidia.com/node-a/gpu-2",
        ),
        (
            "foreign",
            "slice devices that match no GPU of this node: gpu.nvidia.com/node-a/gpu-2 (GPU-elsewhere",
        ),
    ],
)
def test_a_claim_device_that_cannot_be_tied_to_a_gpu_makes_the_holders_unknown_never_free(
    h100: Topology, slices: object, expected: str
) -> None:
    if slices == "other-pool":
        slices = gpu_slices(h100, pool="node-b")
    elif slices == "foreign":
        slices = tuple(
            dataclasses.replace(d, uuid="GPU-elsewhere") if d.device == "gpu-2" else d
            for d in gpu_slices(h100)
        )
    plugin = DeviceAssignment(resource="nvidia.com/gpu", device_id=str(h100.gpus[0].uuid), holder=B)
    observed = KubeletAllocation(
        assignments=(plugin,),
        claim_devices=(claimed("gpu-1"), claimed("gpu-2")),
        slice_devices=slices,  # type: ignore[arg-type]
    )
    got = gpu_allocation(h100, observed)
    assert not got.known and got.gpu_holders == ()
    assert "2 GPU device(s) of gpu.nvidia.com allocated through ResourceClaims (ml/a-gpus)" in got.message
    assert expected in got.message, got.message
    status = to_nodetopology(h100, "node-a", got)["status"]
    assert status["allocation"]["state"] == "Unknown"
    assert all("heldBy" not in g for g in status["gpus"])
