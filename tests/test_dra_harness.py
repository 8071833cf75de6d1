"""The DRA parts of the real-node harness without a node: the test DRA driver is pinned at the control
plane's Kubernetes version, what it publishes for a fixture carries the attributes deploy/examples/dra
constrains on, and the harness expects the order the driver publishes in."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import BUNDLES
from node import dra
from node.node import NodeError, _published_order

REPO = Path(__file__).resolve().parent.parent


def _required(go_mod: Path, module: str) -> str:
    match = re.search(rf"^\s*(?:require\s+)?{re.escape(module)} (v\S+)", go_mod.read_text(), re.MULTILINE)
    assert match, f"{go_mod} requires no {module}"
    return match[1]


def test_the_dra_driver_is_built_at_the_control_planes_kubernetes_version() -> None:
    kubernetes = _required(REPO / "tests/cluster/go.mod", "k8s.io/kubernetes")
    staging = "v0." + kubernetes.removeprefix("v1.")
    driver = REPO / "tests/node/dradriver/go.mod"
    for module in ("k8s.io/dynamic-resource-allocation", "k8s.io/api", "k8s.io/client-go"):
        assert _required(driver, module) == staging, (module, kubernetes)


@pytest.fixture(scope="module")
def two_islands() -> dict[str, Any]:
    return dra.discover(BUNDLES / "pcie-4x-nvbridge")


def test_the_gpu_inventory_carries_nvidias_attributes_and_the_islands(two_islands: dict[str, Any]) -> None:
    inventory = dra.gpu_inventory(two_islands)
    assert inventory["driver"] == "gpu.nvidia.com"
    first = inventory["devices"][0]
    assert first["device"] == {
        "name": "gpu-0",
        "attributes": {
            "type": {"string": "gpu"},
            "uuid": {"string": "GPU-144443c9-55a7-f2f1-304d-87db79d68ec7"},
            "productName": {"string": "NVIDIA A100-PCIE-40GB"},
            "resource.kubernetes.io/pciBusID": {"string": "0000:43:00.0"},
            "resource.kubernetes.io/pcieRoot": {"string": "pci0000:40"},
        },
        "capacity": {"memory": {"value": "40Gi"}},
    }
    assert first["deviceNodes"] == [{"path": "/dev/nvidia0", "hostPath": "/dev/null"}]
    assert first["env"] == {"NVIDIA_VISIBLE_DEVICES": "GPU-144443c9-55a7-f2f1-304d-87db79d68ec7"}
    assert inventory["groups"] == [["gpu-0", "gpu-1"], ["gpu-2", "gpu-3"]]


def test_the_nic_inventory_is_dranets_rdma_nics() -> None:
    status = dra.discover(BUNDLES / "dgx-h100")
    inventory = dra.nic_inventory(status)
    assert inventory["driver"] == "dra.net"
    names = [d["device"]["name"] for d in inventory["devices"]]
    assert len(names) == 10 and names[0] == "ibp27s0", names
    attributes = inventory["devices"][0]["device"]["attributes"]
    assert attributes == {
        "dra.net/rdma": {"bool": True},
        "dra.net/rdmaDevice": {"string": "mlx5_0"},
        "dra.net/ifName": {"string": "ibp27s0"},
        "dra.net/pciAddress": {"string": "0000:1b:00.0"},
        "dra.net/numaNode": {"int": 0},
        "resource.kubernetes.io/pcieRoot": {"string": "pci0000:15"},
    }


def test_every_example_constraint_names_an_attribute_both_drivers_publish(
    two_islands: dict[str, Any],
) -> None:
    published = [
        set(d["device"]["attributes"])
        for inventory in (dra.gpu_inventory(two_islands), dra.nic_inventory(two_islands))
        for d in inventory["devices"]
    ]
    classes = {d["metadata"]["name"] for d in dra.example("deviceclasses.yaml")}
    templates = dra.example("claim-templates.yaml")
    assert templates and all(t["apiVersion"] == "resource.k8s.io/v1" for t in templates)
    for template in templates:
        devices = template["spec"]["spec"]["devices"]
        for request in devices["requests"]:
            assert request["exactly"]["deviceClassName"] in classes, request
        for constraint in devices["constraints"]:
            assert all(constraint["matchAttribute"] in p for p in published), constraint


def test_memory_is_written_as_a_binary_quantity() -> None:
    assert dra.binary_quantity(42949672960) == "40Gi"
    assert dra.binary_quantity(85899345920) == "80Gi"
    assert dra.binary_quantity(1536 << 20) == "1536Mi"
    assert dra.binary_quantity(1000) == "1000"


def test_the_harness_expects_the_order_the_driver_publishes() -> None:
    names = ["gpu-0", "gpu-1", "gpu-2", "gpu-3", "gpu-4"]
    inventory = {"groups": [["gpu-0", "gpu-1"], ["gpu-2", "gpu-3"]]}
    assert _published_order(names, inventory, "as-given") == names
    assert _published_order(names, inventory, "reversed") == names[::-1]
    # round robin over the groups, the largest first; a device in no group is a group of one
    assert _published_order(names, inventory, "across-groups") == [
        "gpu-0",
        "gpu-2",
        "gpu-4",
        "gpu-1",
        "gpu-3",
    ]
    with pytest.raises(NodeError):
        _published_order(names, inventory, "sideways")


def test_the_examples_are_plain_kubernetes_yaml() -> None:
    for path in sorted(dra.EXAMPLES.glob("*.yaml")):
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        assert docs, path
        for doc in docs:
            assert doc["apiVersion"] == "resource.k8s.io/v1" and doc["metadata"]["name"], (path, doc)
