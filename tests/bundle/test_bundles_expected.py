"""nodetopo's output on every fixture bundle against that bundle's hand-written ``expected.yaml``.

The expectations were written by a person reading the machine's layout (not generated), so these
tests hold nodetopo to what a correct tool must conclude: GPUs, islands, nearest NICs and their
class, NUMA placement, NIC facts, MIG parents; and on a degraded machine's bundle, the edges
published degraded and what the published facts become without them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import bundle_dirs

from nodetopo.model import format_cpulist
from nodetopo.resource.body import to_nodetopology
from nodetopo.resource.labels import to_labels
from nodetopo.resource.reader import read_nodetopology
from nodetopo.topology.discover import bundle_context, scan

BUNDLES = bundle_dirs()
#: a GPU's NIC facts, which follow the health of its paths (``health.gpus`` of a degraded bundle)
NIC_KEYS = ("nearestNICs", "nicDistance")


def _discover(bundle: Path) -> tuple[dict[str, Any], dict[str, str]]:
    topology = scan(bundle_context(bundle)).topology
    body = to_nodetopology(topology, bundle.name)
    # numaAffinity and cpuAffinity are left out where they repeat numaNode and status.numaNodes:
    # the expectations name every GPU's, so the ones left out are taken as the reader gives them back
    read = {g.gpu.index: g.gpu for g in read_nodetopology(body).facts.gpus}
    for gpu in body["status"]["gpus"]:
        for key, cpus in (("numaAffinity", "numa_affinity"), ("cpuAffinity", "cpu_affinity")):
            if key not in gpu:
                gpu[key] = format_cpulist(getattr(read[gpu["index"]], cpus))
    return body["status"], to_labels(topology)


def _subset(actual: dict[str, Any], expected: dict[str, Any], what: str) -> None:
    for key, value in expected.items():
        assert actual.get(key) == value, f"{what}: {key} is {actual.get(key)!r}, expected {value!r}"


@pytest.mark.parametrize("bundle", BUNDLES, ids=[b.name for b in BUNDLES])
def test_bundle_matches_expectations(bundle: Path) -> None:
    expected = yaml.safe_load((bundle / "expected.yaml").read_text())
    status, labels = _discover(bundle)

    sysfs_only = expected.get("sysfsOnlyGPUs", [])
    driver_gpus = [g for g in status["gpus"] if g["uuid"] is not None or not sysfs_only]
    assert len(driver_gpus) == len(expected["gpus"])
    by_index = {g["index"]: g for g in status["gpus"]}
    healthier = {g["index"] for g in (expected.get("health") or {}).get("gpus", [])}
    for gpu in expected["gpus"]:
        placed = {k: v for k, v in gpu.items() if gpu["index"] not in healthier or k not in NIC_KEYS}
        _subset(by_index[gpu["index"]], placed, f"GPU{gpu['index']}")

    # ``health``: a bundle of a degraded machine; the placement above is the machine's, what the
    # published facts become with the degraded edges taken out is here (absent: nothing degraded)
    health = expected.get("health") or {}
    degraded = [{"edge": e["edge"], "reasons": e["reasons"]} for e in status["health"]["degraded"]]
    assert degraded == health.get("degraded", [])
    for gpu in health.get("gpus", []):
        _subset(by_index[gpu["index"]], gpu, f"GPU{gpu['index']} (health)")
    for key, value in (health.get("labels") or {}).items():
        assert labels.get(key) == value, f"label {key} is {labels.get(key)!r}, expected {value!r}"

    islands = [{k: v for k, v in i.items() if k != "id"} for i in status["nvlinkIslands"]]
    assert islands == health.get("nvlinkIslands", expected["nvlinkIslands"])

    by_name = {n["name"]: n for n in status["nics"]}
    for nic in expected.get("nics") or []:
        assert nic["name"] in by_name, f"NIC {nic['name']} missing"
        _subset(by_name[nic["name"]], nic, nic["name"])

    migs = {m["uuid"]: m for m in status["migDevices"]}
    assert set(migs) == {m["uuid"] for m in expected["migDevices"]}
    for mig in expected["migDevices"]:
        _subset(migs[mig["uuid"]], mig, mig["uuid"])

    if sysfs_only:
        # GPUs the driver cannot see are still reported (by PCI address), never "0 GPUs".
        assert sorted(g["pciBusID"] for g in status["gpus"] if g["uuid"] is None) == sysfs_only
        assert labels["nodetopo.io/gpu.count"] == str(len(sysfs_only))
        ready = next(c for c in status["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "False"
    if "clique" in expected:
        assert labels["nodetopo.io/nvlink.clique"] == expected["clique"]
        assert status["fabric"]["cliqueID"] == int(expected["clique"].rsplit(".", 1)[1])

    # sysfs and nvidia-smi describe the same machine: their GPU–NIC classes agree.
    consistent = next(c for c in status["conditions"] if c["type"] == "Consistent")
    assert consistent["status"] == "True", consistent["message"]
