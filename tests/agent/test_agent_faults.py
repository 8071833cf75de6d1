"""Source faults: the agent keeps running, reports conditions, keeps the labels of healthy sources."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.support import (
    DGX_H100,
    DRIVER_MISMATCH,
    GARBAGE,
    HANG,
    FakeClock,
    FakePublisher,
    SwitchableScan,
    all_nvidia_smi,
    bundle_with,
    config,
    copy_bundle,
    make_unreadable,
)
from nodetopo.agent.loop import Agent
from nodetopo.host import Replay
from nodetopo.sources.base import Context
from nodetopo.topology.discover import bundle_context

HEALTHY_RDMA_AND_NUMA = ("nodetopo.io/numa.count", "nodetopo.io/rdma", "nodetopo.io/rdma.nic-count")


def agent_for(ctx: Context) -> tuple[Agent, FakePublisher, SwitchableScan]:
    clock, publisher, scan = FakeClock(), FakePublisher(), SwitchableScan(ctx)
    agent = Agent(
        config(), scan=scan, publisher=publisher, clock=clock, sleep=clock.sleep, random=lambda: 0.5
    )
    return agent, publisher, scan


def reasons(publisher: FakePublisher) -> set[tuple[str, str]]:
    body = publisher.calls[-1]["body"]
    return {(c["type"], c["reason"]) for c in body["status"]["conditions"]}


NVIDIA_FAULTS = {
    "hang": (HANG, "Timeout"),
    "driver-mismatch-exit-18": (DRIVER_MISMATCH, None),
    "garbage": (GARBAGE, None),
}


@pytest.mark.parametrize("fault", sorted(NVIDIA_FAULTS))
def test_nvidia_smi_fault_from_the_start(fault: str) -> None:
    answer, reason = NVIDIA_FAULTS[fault]
    agent, publisher, _ = agent_for(bundle_with(commands=all_nvidia_smi(answer)))
    outcome = agent.run_cycle("start")
    assert outcome.published and outcome.error is None
    found = reasons(publisher)
    smi = {r for t, r in found if t.startswith("SourceNvidiaSmi")}
    assert smi and "Discovered" not in smi, found
    if reason is not None:  # exit 18 is reported as Unavailable by the source, Ready stays True
        assert reason in smi
        assert ("Ready", "Discovered") not in found  # not Ready: consumers see a partial result
    labels = publisher.applied_labels
    for key in HEALTHY_RDMA_AND_NUMA:
        assert key in labels, (key, labels)
    # NVML still answers in this bundle, so the GPUs are still known
    assert labels["nodetopo.io/gpu.count"] == "8"


@pytest.mark.parametrize("fault", sorted(NVIDIA_FAULTS))
def test_nvidia_smi_fault_after_a_good_scan_keeps_every_label(fault: str) -> None:
    answer, _ = NVIDIA_FAULTS[fault]
    agent, publisher, scan = agent_for(bundle_context(DGX_H100))
    agent.run_cycle("start")
    before = publisher.applied_labels
    scan.ctx = bundle_with(commands=all_nvidia_smi(answer))
    for _ in range(3):  # several bad rounds: still nothing removed
        outcome = agent.run_cycle("interval")
        assert outcome.published and outcome.removed_labels == ()
    assert publisher.applied_labels == before
    found = reasons(publisher)
    assert any(t.startswith("SourceNvidiaSmi") and r == "Stale" for t, r in found), found
    assert ("Ready", "Discovered") not in found


def test_nvidia_smi_and_nvml_both_gone_keep_gpu_labels() -> None:
    agent, publisher, scan = agent_for(bundle_context(DGX_H100))
    agent.run_cycle("start")
    before = publisher.applied_labels
    broken = bundle_with(commands=all_nvidia_smi(DRIVER_MISMATCH))
    scan.ctx = Context(root=broken.root, runner=broken.runner, nvml=None)
    outcome = agent.run_cycle("interval")
    assert outcome.published and outcome.removed_labels == ()
    assert publisher.applied_labels == before
    assert set(agent.keeper.stale_sources) >= {"nvidia-smi"}


def test_ibstat_missing_is_unavailable_not_a_crash() -> None:
    agent, publisher, _ = agent_for(bundle_with(commands={("ibstat",): None}))
    outcome = agent.run_cycle("start")
    assert outcome.published
    assert ("SourceIbstat", "Unavailable") in reasons(publisher)
    labels = publisher.applied_labels
    assert labels["nodetopo.io/rdma.nic-count"] == "10"  # sysfs still sees the RDMA devices
    assert labels["nodetopo.io/gpu.count"] == "8"


def test_unreadable_sysfs_file_becomes_a_condition(tmp_path: Path) -> None:
    bundle = copy_bundle(tmp_path)
    make_unreadable(bundle / "sys/devices/system/node/node0/cpulist")
    agent, publisher, _ = agent_for(bundle_context(bundle))
    outcome = agent.run_cycle("start")
    assert outcome.published and outcome.error is None
    body = publisher.calls[-1]["body"]
    numa_messages = [c["message"] for c in body["status"]["conditions"] if c["type"] == "SourceSysfsNuma"]
    assert numa_messages and "node0/cpulist" in numa_messages[0], numa_messages
    labels = publisher.applied_labels
    assert labels["nodetopo.io/gpu.count"] == "8"
    assert labels["nodetopo.io/rdma.nic-count"] == "10"


def test_unreadable_sysfs_after_good_scan_is_stale(tmp_path: Path) -> None:
    bundle = copy_bundle(tmp_path)
    agent, publisher, scan = agent_for(bundle_context(bundle))
    agent.run_cycle("start")
    before = publisher.applied_labels
    make_unreadable(bundle / "sys/devices/system/node/node1/cpulist")
    scan.ctx = bundle_context(bundle)
    outcome = agent.run_cycle("interval")
    assert outcome.published and outcome.removed_labels == ()
    assert publisher.applied_labels == before
    assert "sysfs.numa" in agent.keeper.stale_sources


def test_exit_code_without_output_is_reported() -> None:
    answer = Replay(stdout="", stderr="NVIDIA-SMI has failed because it couldn't communicate", returncode=9)
    agent, publisher, _ = agent_for(bundle_with(commands=all_nvidia_smi(answer)))
    assert agent.run_cycle("start").published
    assert any(t.startswith("SourceNvidiaSmi") and r != "Discovered" for t, r in reasons(publisher))
