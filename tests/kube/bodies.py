"""Hand-written NodeTopology bodies following the contract (design.md section 2, crds/).

They exercise the schema and the printer columns with chosen values; the bodies nodetopo itself
produces for every fixture machine are checked in ``test_crd.test_fixture_bodies_are_accepted``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from nodetopo.kube.session import ApiSession
from nodetopo.publish.nodetopology import (
    metadata_patch,
    status_content_hash,
    status_patch,
)
from nodetopo.resource.identity import GROUP, PLURAL, VERSION

H100 = "NVIDIA H100 80GB HBM3"
CLASSES = ("PIX", "PXB", "PHB", "NODE", "SYS")


def _condition(
    kind: str, status: str = "True", reason: str = "Discovered", message: str = ""
) -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": reason, "message": message}


def finish(body: dict[str, Any]) -> dict[str, Any]:
    """Fill the derived summary fields and set ``status.contentHash`` (the publisher's hash)."""
    status = body["status"]
    status["summary"].setdefault("nvswitch", any(i["nvswitch"] for i in status.get("nvlinkIslands", [])))
    status["summary"].setdefault("numaNodes", len(status.get("numaNodes", [])))
    body["status"].pop("contentHash", None)
    body["status"]["contentHash"] = status_content_hash(body["status"])
    return body


def hgx_h100(node_name: str) -> dict[str, Any]:
    """8 H100 on one NVSwitch domain, 8 InfiniBand NICs (one PIX per GPU), 2 NUMA nodes."""
    nics = [f"mlx5_{i}" for i in range(8)]
    gpus = []
    for index in range(8):
        numa = index // 4
        bus = 0x18 + 0x10 * index
        gpus.append(
            {
                "index": index,
                "uuid": f"GPU-0000000{index}-1111-2222-3333-444444444444",
                "model": H100,
                "pciBusID": f"0000:{bus:02x}:00.0",
                "pcieRoot": f"pci0000:{bus - 1:02x}",
                "numaNode": numa,
                "numaAffinity": str(numa),
                "gpuNumaNode": None,
                "cpuAffinity": "0-55,112-167" if numa == 0 else "56-111,168-223",
                "memoryBytes": 85520809984,
                "island": 0,
                "nearestNICs": [nics[index]],
                "nicDistance": "PIX",
                "nics": [{"name": nics[index], "distance": "PIX"}]
                + [
                    {"name": nic, "distance": "NODE" if (i // 4) == numa else "SYS"}
                    for i, nic in enumerate(nics)
                    if i != index
                ],
                "migEnabled": False,
            }
        )
    body = {
        "apiVersion": "nodetopo.io/v1alpha1",
        "kind": "NodeTopology",
        "metadata": {"name": node_name, "labels": {"app.kubernetes.io/managed-by": "nodetopo"}},
        "status": {
            "nodeName": node_name,
            "agentVersion": "0.1.0",
            "summary": {
                "gpuCount": 8,
                "gpuModel": H100,
                "islands": "1x8",
                "rdmaNICs": 8,
                "worstNICDistance": "PIX",
                "migDevices": 0,
            },
            "gpus": gpus,
            "nics": [
                {
                    "name": nic,
                    "netdev": f"ibp{i}s0",
                    "pciBusID": f"0000:{0x19 + 0x10 * i:02x}:00.0",
                    "pcieRoot": f"pci0000:{0x17 + 0x10 * i:02x}",
                    "numaNode": i // 4,
                    "linkLayer": "InfiniBand",
                    "state": "ACTIVE",
                    "rateGbps": 400,
                    "rdma": True,
                }
                for i, nic in enumerate(nics)
            ],
            "nvlinkIslands": [
                {
                    "id": 0,
                    "gpus": list(range(8)),
                    "linksPerPair": 18,
                    "fullyConnected": True,
                    "nvswitch": True,
                }
            ],
            "numaNodes": [
                {
                    "id": 0,
                    "cpus": "0-55,112-167",
                    "memoryBytes": 1081145016320,
                    "distances": [{"node": 0, "distance": 10}, {"node": 1, "distance": 21}],
                },
                {
                    "id": 1,
                    "cpus": "56-111,168-223",
                    "memoryBytes": 1082331254784,
                    "distances": [{"node": 0, "distance": 21}, {"node": 1, "distance": 10}],
                },
            ],
            "migDevices": [],
            "preferredGPUSets": [
                {"size": 1, "sets": [[i] for i in range(8)]},
                {"size": 2, "sets": [[0, 1], [2, 3], [4, 5], [6, 7]]},
                {"size": 4, "sets": [[0, 1, 2, 3], [4, 5, 6, 7]]},
                {"size": 8, "sets": [list(range(8))]},
            ],
            "fabric": None,
            "sources": [
                {"name": "sysfs", "ok": True, "message": ""},
                {"name": "nvml", "ok": True, "message": ""},
            ],
            "conditions": [
                _condition("Ready"),
                _condition("Consistent"),
                _condition("SourceSysfs"),
                _condition("SourceNvml"),
            ],
        },
    }
    return finish(body)


def pcie_pair(node_name: str) -> dict[str, Any]:
    """2 PCIe GPUs without NVLink, one Ethernet NIC without RDMA, a failed (Unavailable) source."""
    body = hgx_h100(node_name)
    status = body["status"]
    status["summary"] = {
        "gpuCount": 2,
        "gpuModel": "NVIDIA L40S",
        "islands": "",
        "rdmaNICs": 0,
        "worstNICDistance": "SYS",
        "migDevices": 0,
    }
    gpus = status["gpus"][:2]
    for gpu in gpus:
        gpu.update(
            model="NVIDIA L40S",
            island=None,
            nearestNICs=["eno1"],
            nicDistance="PHB" if gpu["index"] == 0 else "SYS",
            nics=[{"name": "eno1", "distance": "PHB" if gpu["index"] == 0 else "SYS"}],
            memoryBytes=None,
            numaAffinity=None,
        )
    status["gpus"] = gpus
    status["nics"] = [
        {
            "name": "eno1",
            "netdev": "eno1",
            "pciBusID": "0000:01:00.0",
            "pcieRoot": "pci0000:00",
            "numaNode": None,
            "linkLayer": "Ethernet",
            "state": None,
            "rateGbps": 25.0,
            "rdma": False,
        }
    ]
    status["nvlinkIslands"] = []
    status["preferredGPUSets"] = [{"size": 1, "sets": [[0], [1]]}, {"size": 2, "sets": [[0, 1]]}]
    status["sources"] = [
        {"name": "sysfs", "ok": True, "message": ""},
        {"name": "ibstat", "ok": False, "message": "ibstat: command not found"},
    ]
    status["conditions"] = [
        _condition("Ready"),
        _condition("Consistent"),
        _condition("SourceSysfs"),
        _condition("SourceIbstat", "False", "Unavailable", "ibstat: command not found"),
    ]
    return finish(body)


def a100_mig(node_name: str) -> dict[str, Any]:
    """One A100 with MIG on, two MIG devices, a multi-node NVLink fabric entry, GH200-style fields."""
    body = pcie_pair(node_name)
    status = body["status"]
    gpu = status["gpus"][0]
    gpu.update(model="NVIDIA A100-SXM4-40GB", migEnabled=True, gpuNumaNode=2, numaAffinity="0,2")
    status["gpus"] = [gpu]
    status["summary"].update(
        gpuCount=1, gpuModel="NVIDIA A100-SXM4-40GB", migDevices=2, worstNICDistance="PHB"
    )
    status["migDevices"] = [
        {
            "uuid": f"MIG-aaaaaaaa-bbbb-cccc-dddd-00000000000{n}",
            "parentUUID": gpu["uuid"],
            "parentIndex": 0,
            "profile": "3g.20gb",
            "gpuInstance": n + 1,
            "computeInstance": 0,
        }
        for n in range(2)
    ]
    status["preferredGPUSets"] = [{"size": 1, "sets": [[0]]}]
    status["numaNodes"].append({"id": 2, "cpus": "", "memoryBytes": None, "distances": []})
    status["fabric"] = {
        "clusterUUID": "c0ffee00-0000-0000-0000-000000000001",
        "cliqueID": 7,
        "state": "Completed",
        "health": None,
    }
    return finish(body)


def cpu_only(node_name: str) -> dict[str, Any]:
    """No GPU, no NIC: every nullable summary field null, every list empty."""
    body = hgx_h100(node_name)
    status = body["status"]
    status["summary"] = {
        "gpuCount": 0,
        "gpuModel": None,
        "islands": "",
        "rdmaNICs": 0,
        "worstNICDistance": None,
        "migDevices": 0,
    }
    for key in ("gpus", "nics", "nvlinkIslands", "migDevices", "preferredGPUSets"):
        status[key] = []
    status["numaNodes"] = status["numaNodes"][:1]
    status["numaNodes"][0]["distances"] = [{"node": 0, "distance": 10}]
    return finish(body)


ALL = {"hgx-h100": hgx_h100, "pcie-pair": pcie_pair, "a100-mig": a100_mig, "cpu-only": cpu_only}


def variant(body: dict[str, Any], **summary: Any) -> dict[str, Any]:
    """A copy of ``body`` with summary fields changed (and the hash recomputed)."""
    changed = copy.deepcopy(body)
    changed["status"]["summary"].update(summary)
    return finish(changed)


def apply_nodetopology(
    session: ApiSession,
    body: Mapping[str, Any],
    *,
    owner: Mapping[str, Any],
    previous_conditions: Sequence[Mapping[str, Any]],
    now: str,
) -> dict[str, Any]:
    """Apply ``body``'s metadata, then its status, as the agent's publisher writes them (no skip,
    no reads); the object the server stored."""
    name = str(body["metadata"]["name"])
    session.apply_cluster_object(
        GROUP, VERSION, PLURAL, name, metadata_patch(body, owner=owner), status=False
    )
    patch = status_patch(body, previous_conditions=previous_conditions, now=now)
    return session.apply_cluster_object(GROUP, VERSION, PLURAL, name, patch, status=True)
