"""What the test DRA driver (tests/node/dradriver) publishes for a fixture, and the objects DRA tests use.

The driver is generic (it publishes the resource.k8s.io/v1 Devices it is given); this module says what
a real driver would publish for a fixture's NodeTopology:

* ``gpu_inventory``: driver ``gpu.nvidia.com``, one device ``gpu-<index>`` per GPU with the attributes
  NVIDIA's GPU DRA driver publishes for a full GPU, where the NodeTopology knows them: ``type``
  (``gpu``), ``uuid``, ``productName``, the standard ``resource.kubernetes.io/pciBusID`` and
  ``resource.kubernetes.io/pcieRoot``, and capacity ``memory``. (The real driver also publishes
  ``brand``, ``architecture``, ``cudaComputeCapability``, ``driverVersion`` and
  ``cudaDriverVersion``, which a NodeTopology does not carry, and no NUMA attribute for a full GPU.)
  The container gets ``/dev/nvidia<index>`` (backed by /dev/null) per device, as NVIDIA's CDI spec
  gives device nodes, and ``NVIDIA_VISIBLE_DEVICES=<uuids>``, which the real driver does not set: it
  lets a probe without NVML name the GPUs, as with the test device plugin. The groups are the NVLink
  islands.
* ``nic_inventory``: driver ``dra.net`` (as the kubernetes-sigs NIC driver, dranet), one device per NIC
  named after its netdev, with dranet's attributes ``dra.net/ifName``, ``dra.net/pciAddress``,
  ``dra.net/rdma``, ``dra.net/rdmaDevice``, ``dra.net/numaNode`` and the standard
  ``resource.kubernetes.io/pcieRoot``. The container gets ``NODETOPO_TEST_RDMA_DEVICES=<names>`` (the
  test driver's own marker; dranet moves the netdev and RDMA device into the pod instead).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from .node import REPO

GPU_DRIVER = "gpu.nvidia.com"
NIC_DRIVER = "dra.net"
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
PCI_BUS_ID = "resource.kubernetes.io/pciBusID"
EXAMPLES = REPO / "deploy" / "examples" / "dra"
RDMA_ENV = "NODETOPO_TEST_RDMA_DEVICES"
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def discover(bundle: Path) -> dict[str, Any]:
    """The NodeTopology status ``nodetopo discover --from BUNDLE -o json`` derives."""
    done = subprocess.run(
        [sys.executable, "-m", "nodetopo", "discover", "--from", str(bundle), "-o", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    status: dict[str, Any] = json.loads(done.stdout)["status"]
    return status


def _string(value: str) -> dict[str, Any]:
    return {"string": value}


def binary_quantity(count: int) -> str:
    """A byte count as Kubernetes writes a BinarySI quantity (``42949672960`` -> ``40Gi``), as NVIDIA's
    driver publishes ``memory``."""
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        unit = 1 << (10 * ("KiMiGiTiPiEi".index(suffix) // 2 + 1))
        if count >= unit and count % unit == 0:
            return f"{count // unit}{suffix}"
    return str(count)


def gpu_inventory(status: dict[str, Any]) -> dict[str, Any]:
    """The GPU driver's config for a NodeTopology status (see the module doc)."""
    devices = []
    by_index = {}
    for gpu in sorted(status["gpus"], key=lambda g: g["index"]):
        name = f"gpu-{gpu['index']}"
        by_index[gpu["index"]] = name
        attributes: dict[str, Any] = {"type": _string("gpu"), "uuid": _string(gpu["uuid"])}
        if gpu.get("model"):
            attributes["productName"] = _string(gpu["model"])
        if gpu.get("pciBusID"):
            attributes[PCI_BUS_ID] = _string(gpu["pciBusID"])
        if gpu.get("pcieRoot"):
            attributes[PCIE_ROOT] = _string(gpu["pcieRoot"])
        device: dict[str, Any] = {"name": name, "attributes": attributes}
        if gpu.get("memoryBytes"):
            device["capacity"] = {"memory": {"value": binary_quantity(int(gpu["memoryBytes"]))}}
        devices.append(
            {
                "device": device,
                "deviceNodes": [{"path": f"/dev/nvidia{gpu['index']}", "hostPath": "/dev/null"}],
                "env": {"NVIDIA_VISIBLE_DEVICES": gpu["uuid"]},
            }
        )
    groups = [[by_index[i] for i in island["gpus"]] for island in status.get("nvlinkIslands", [])]
    return {"driver": GPU_DRIVER, "devices": devices, "groups": groups}


def nic_device_name(nic: dict[str, Any]) -> str:
    """dranet's device name: the netdev when it is a DNS label, else the RDMA device's name made one."""
    netdev = str(nic.get("netdev") or "")
    if _DNS_LABEL.match(netdev) and len(netdev) <= 63:
        return netdev
    return re.sub(r"[^a-z0-9-]", "-", str(nic["name"]).lower()).strip("-")


def nic_inventory(status: dict[str, Any]) -> dict[str, Any]:
    """The NIC driver's config for a NodeTopology status: its RDMA NICs (see the module doc)."""
    devices = []
    for nic in sorted(status["nics"], key=lambda n: n["pciBusID"] or n["name"]):
        if not nic.get("rdma"):
            continue
        attributes: dict[str, Any] = {
            "dra.net/rdma": {"bool": True},
            "dra.net/rdmaDevice": _string(nic["name"]),
        }
        if nic.get("netdev"):
            attributes["dra.net/ifName"] = _string(nic["netdev"])
        if nic.get("pciBusID"):
            attributes["dra.net/pciAddress"] = _string(nic["pciBusID"])
        if nic.get("numaNode") is not None:
            attributes["dra.net/numaNode"] = {"int": nic["numaNode"]}
        if nic.get("pcieRoot"):
            attributes[PCIE_ROOT] = _string(nic["pcieRoot"])
        devices.append(
            {
                "device": {"name": nic_device_name(nic), "attributes": attributes},
                "env": {RDMA_ENV: nic["name"]},
            }
        )
    return {"driver": NIC_DRIVER, "devices": devices}


def example(name: str) -> list[dict[str, Any]]:
    """The objects of ``deploy/examples/dra/<name>``."""
    return [d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d]


def example_object(name: str, kind: str, object_name: str) -> dict[str, Any]:
    for doc in example(name):
        if doc["kind"] == kind and doc["metadata"]["name"] == object_name:
            return doc
    raise AssertionError(f"deploy/examples/dra/{name} has no {kind} {object_name}")


def claim(
    name: str, namespace: str, requests: list[dict[str, Any]], constraints: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """A ResourceClaim (resource.k8s.io/v1) with ``requests`` (``{"name", "exactly": {...}}``)."""
    devices: dict[str, Any] = {"requests": requests}
    if constraints:
        devices["constraints"] = constraints
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": devices},
    }


def gpus(count: int, *, name: str = "gpus") -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": GPU_DRIVER, "count": count}}


def nics(count: int, *, name: str = "nics", device_class: str = "rdma.dra.net") -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": device_class, "count": count}}


def same(attribute: str, requests: list[str] | None = None) -> dict[str, Any]:
    constraint: dict[str, Any] = {"matchAttribute": attribute}
    if requests:
        constraint["requests"] = requests
    return constraint


def claim_pod(
    name: str, namespace: str, image: str, node: str, claims: dict[str, dict[str, str]], *, command: str
) -> dict[str, Any]:
    """A pod whose one container uses ``claims`` (pod claim name -> ``{"resourceClaimName": ...}`` or
    ``{"resourceClaimTemplateName": ...}``) and runs ``command`` (sh). Not bound to the node: the
    scheduler (its DRA plugin) must allocate the claims; ``nodeSelector`` keeps it on ``node``."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"kubernetes.io/hostname": node},
            "resourceClaims": [{"name": k, **v} for k, v in claims.items()],
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": ["sh", "-c", command],
                    "resources": {"claims": [{"name": k} for k in claims]},
                }
            ],
            "terminationGracePeriodSeconds": 1,
        },
    }


def allocated(claim_object: dict[str, Any]) -> list[dict[str, str]]:
    """The allocation results of a claim's status (``driver``, ``pool``, ``device``, ``request``)."""
    allocation = claim_object.get("status", {}).get("allocation") or {}
    return list(allocation.get("devices", {}).get("results", []))


def attribute(device: dict[str, Any], name: str) -> Any:
    """An attribute's value of a published device (``{"string": "x"}`` -> ``"x"``)."""
    value = device.get("attributes", {}).get(name)
    if value is None:
        return None
    (only,) = value.values()
    return only
