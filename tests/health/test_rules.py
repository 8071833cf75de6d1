"""The rules of edge health (nodetopo.health.rules) on real outputs: what is a fault, what is only a
fact (an idle GPU's link speed), a counter at its ceiling, and an edge read as nothing (never judged).

The corpus is read in place (../shared/corpus)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodetopo.health import DEFAULT_POLICY, HealthTracker, edge_readings
from nodetopo.health.policy import HealthPolicy
from nodetopo.health.rules import EdgeReading
from nodetopo.model import EdgeKind, Facts, HealthReadings, RdmaDevice, RdmaPort
from nodetopo.sources import links, nvidia_smi
from nodetopo.topology.derive import derive_topology
from tests.sysfs_trees import GPUD_INFINIBAND, gpud_infiniband_root


def query_edges(text: str, policy: HealthPolicy = DEFAULT_POLICY) -> dict[str, EdgeReading]:
    """The PCIe edges of a machine known only by its ``nvidia-smi -q -x``."""
    _, queried = nvidia_smi.parse_smi_query_xml(text)
    topology = derive_topology(Facts(queried_gpus=queried))
    facts = Facts(
        queried_gpus=queried,
        health=HealthReadings(gpu_pcie=nvidia_smi.parse_smi_query_links(text)),
    )
    return {e.edge: e for e in edge_readings(facts, topology, policy)}


@pytest.mark.corpus
def test_a_rented_rtx4090_machine_runs_every_gpu_below_its_width(corpus: Path) -> None:
    """8x RTX 4090 (Vast.ai): every GPU at x8 (one x4) of the x16 the driver says the GPU and the
    system support; GPU3 trained Gen3 at most though both ends go to Gen4. The idle GPUs' Gen1/Gen2
    current speed is what an idle GPU does: never a finding."""
    edges = query_edges((corpus / "smi-q/rtx4090-vast-machine02-nvidia-smi-q.xml").read_text())
    assert sorted(edges) == [f"GPU{i}/pcie" for i in range(8)]
    reasons = {edge: [f.reason for f in e.findings] for edge, e in edges.items()}
    assert reasons == {
        **{f"GPU{i}/pcie": ["PcieWidthDegraded"] for i in range(8)},
        "GPU3/pcie": ["PcieWidthDegraded", "PcieGenerationLimited"],
    }
    assert [e.findings[0].message for e in edges.values()].count("x4 of x16") == 1
    assert {e.observed.gts for e in edges.values()} >= {2.5, 5.0}  # idle: reported, not judged
    assert edges["GPU3/pcie"].capability.gts == 8.0
    assert all(e.kind is EdgeKind.PCIE and e.counters == (("replays", 0),) for e in edges.values())


@pytest.mark.corpus
def test_the_v100_machine_is_healthy(corpus: Path) -> None:
    """8x V100-SXM2, every link x16 Gen3 of x16 Gen3: checked, nothing found."""
    edges = query_edges((corpus / "smi-q/v100-sxm2-8x-vast-machine03-nvidia-smi-q.xml").read_text())
    assert len(edges) == 8
    assert all(e.known and e.findings == () for e in edges.values())


@pytest.mark.corpus
def test_a_saturated_link_downed_is_unknown_never_a_flap(
    corpus: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """gpud's H100 capture: mlx5_1's 8-bit link_downed reads 255, its ceiling. It can no longer rise,
    so its rate is unknown: however many scans see it, the port is not published flapping (nor is
    the counter taken as clean: it is left out of the rates). Every port's 4-bit
    excessive_buffer_overrun_errors reads 15, its ceiling too."""
    root = gpud_infiniband_root(corpus, tmp_path_factory)
    names = sorted(p.name for p in (corpus / GPUD_INFINIBAND).iterdir())
    devices = tuple(RdmaDevice(name=n, ports=(RdmaPort(number=1, state="ACTIVE"),)) for n in names)
    readings, _ = links.read_port_counters(root, devices)
    facts = Facts(rdma_devices=devices, health=HealthReadings(ports=readings))
    edges = {e.edge: e for e in edge_readings(facts, derive_topology(facts), DEFAULT_POLICY)}
    assert edges["mlx5_1/port1"].saturated == ("excessive_buffer_overrun_errors", "link_downed")
    others = {e.saturated for edge, e in edges.items() if edge != "mlx5_1/port1"}
    assert others == {("excessive_buffer_overrun_errors",)}
    tracker = HealthTracker(DEFAULT_POLICY)
    for scan_no in range(6):
        report = tracker.judge(tuple(edges.values()), 1000.0 + 60 * scan_no)
        assert report.degraded == ()
        assert tracker.rates == {}
    judged = tracker._edges["mlx5_1/port1"].rates  # the rates this scan judged, zeros included
    assert set(judged) >= {"port_rcv_errors", "symbol_error"} and judged["port_rcv_errors"] == 0
    assert "link_downed" not in judged and "excessive_buffer_overrun_errors" not in judged
    assert report.checked == len(names)


def test_an_edge_read_as_nothing_is_neither_healthy_nor_degraded() -> None:
    """A port whose state, rate and counters are all unknown is not counted as checked; a node none of
    whose links could be read says Degraded Unknown, never False."""
    unknown = EdgeReading(edge="mlx5_0/port1", kind=EdgeKind.PORT, device="mlx5_0", nic="mlx5_0", port=1)
    assert not unknown.known
    report = HealthTracker(DEFAULT_POLICY.one_shot()).judge((unknown,), 0.0)
    assert report.judged and report.checked == 0 and report.degraded == ()
