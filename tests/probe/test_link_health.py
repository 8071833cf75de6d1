"""``nodetopo probe`` fails ``ResourceNotReal`` naming the edge when the pod's GPUs or NICs sit on one
the node publishes degraded (issue 24). The objects are what nodetopo publishes for the degraded
fixture bundles (tests/fixtures/bundles/dgx-h100-*)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import REPO, nodetopology_of

from nodetopo.probe import observe
from nodetopo.probe.inputs import Declared, Seen
from nodetopo.probe.links import check_link_health
from nodetopo.probe.outcome import Attribution, Status
from nodetopo.probe.promised import parse_nodetopology

NVLINK = "GPU5/nvlink (NVLinkDown: 12 of 18 NVLinks active (its peers have 18))"
PCIE = "GPU3/pcie (PcieWidthDegraded: x8 of x16 (both ends support x16))"
RAIL = "mlx5_3/port1 (PortRateBelowPeers: 200 Gb/s, its rails run at 400 Gb/s)"


def declared(**annotations: str) -> Declared:
    return observe.declared_from_annotations(
        {f"nodetopo.io/{k.replace('_', '-')}": v for k, v in annotations.items()}
    )


def seen(*gpus: int) -> Seen:
    return Seen(
        gpu_ids=tuple(str(g) for g in gpus),
        gpu_ids_from="NVIDIA_VISIBLE_DEVICES",
        dev_nvidia=tuple(gpus),
        nvml=None,
        infiniband=None,
        shm_bytes=None,
        hugepages_bytes=None,
        cpus=None,
        cpus_from="",
        mems=None,
    )


@pytest.mark.parametrize(
    ("bundle", "gpus", "annotations", "named"),
    [
        ("dgx-h100-nvlink-down", (4, 5), {"gpus_in_one_island": "true"}, NVLINK),
        ("dgx-h100-nvlink-down", (5, 6), {}, NVLINK),  # two GPUs use their NVLinks, declared or not
        ("dgx-h100-gpu-x8", (3,), {}, PCIE),  # the GPU's own link, whatever the pod declared
        ("dgx-h100-rail-half", (3,), {"max_nic_distance": "PIX"}, RAIL),
        ("dgx-h100-rail-half", (2, 3), {"rdma": "required", "max_nic_distance": "PIX"}, RAIL),
    ],
)
def test_a_pod_on_a_degraded_edge_is_resource_not_real(
    bundle: str, gpus: tuple[int, ...], annotations: dict[str, str], named: str
) -> None:
    promised = parse_nodetopology(nodetopology_of(bundle))
    check = check_link_health(declared(**annotations), seen(*gpus), promised)
    assert (check.status, check.attribution) == (Status.FAIL, Attribution.RESOURCE_NOT_REAL)
    assert check.reason.endswith(f"degraded edge(s) of NodeTopology/{bundle}: {named}"), check.reason


@pytest.mark.parametrize(
    ("bundle", "gpus", "annotations"),
    [
        ("dgx-h100-nvlink-down", (5,), {}),  # one GPU alone uses no NVLink
        ("dgx-h100-nvlink-down", (0, 1, 2, 3), {"gpus_in_one_island": "true"}),
        ("dgx-h100-gpu-x8", (2,), {"max_nic_distance": "PIX"}),
        ("dgx-h100-rail-half", (3,), {}),  # no NIC declared: GPU3 itself is healthy
        ("dgx-h100-rail-half", (3,), {"rdma": "required"}),  # it keeps healthy RDMA NICs (mlx5_2, PXB)
        ("dgx-h100-rail-half", (2,), {"max_nic_distance": "PIX"}),
        ("dgx-h100", (0, 1, 2, 3, 4, 5, 6, 7), {"rdma": "required", "max_nic_distance": "PIX"}),
    ],
)
def test_a_pod_on_healthy_edges_passes(
    bundle: str, gpus: tuple[int, ...], annotations: dict[str, str]
) -> None:
    promised = parse_nodetopology(nodetopology_of(bundle))
    check = check_link_health(declared(**annotations), seen(*gpus), promised)
    assert check.status is Status.PASS, check.reason
    assert "no degraded edge under GPU(s)" in check.reason


def test_links_not_judged_are_a_skip_never_a_pass() -> None:
    obj = nodetopology_of("dgx-h100-nvlink-down")
    del obj["status"]["health"]  # an agent that does not judge its links
    check = check_link_health(declared(), seen(4, 5), parse_nodetopology(obj))
    assert check.status is Status.SKIP and check.asked and "does not judge its links" in check.reason


def test_the_probe_names_the_edge_in_its_termination_log(tmp_path: Path) -> None:
    """The published object of the NVLink-down node, the pod's GPUs 4 and 5 by UUID, as the device
    plugin hands them: the verdict and the termination message name GPU5/nvlink and its reason."""
    obj: dict[str, Any] = nodetopology_of("dgx-h100-nvlink-down")
    uuids = {g["index"]: g["uuid"] for g in obj["status"]["gpus"]}
    (tmp_path / "nt.json").write_text(json.dumps(obj))
    (tmp_path / "root/dev").mkdir(parents=True)
    for i in (4, 5):
        (tmp_path / f"root/dev/nvidia{i}").write_text("")
    term = tmp_path / "termination-log"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "nodetopo",
            "probe",
            "--root",
            str(tmp_path / "root"),
            "--termination-log",
            str(term),
            "--nodetopology",
            str(tmp_path / "nt.json"),
            "--no-event",
            "--annotation",
            "nodetopo.io/gpus-in-one-island=true",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={
            "PATH": "/usr/bin:/bin",
            "NVIDIA_VISIBLE_DEVICES": f"{uuids[4]},{uuids[5]}",
            "PYTHONPATH": str(REPO),
        },
    )
    assert "Traceback" not in result.stderr, result.stderr
    report = json.loads(result.stdout)
    assert result.returncode == 1 and report["attribution"] == "ResourceNotReal"
    assert term.read_text().startswith(
        "ResourceNotReal: link-health: GPU(s) 4,5 sit on degraded edge(s) of "
        f"NodeTopology/dgx-h100-nvlink-down: {NVLINK}"
    )
