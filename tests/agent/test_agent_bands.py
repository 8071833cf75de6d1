"""The bands the agent exports from its own topology (issue 26: "the expected bands of the bandwidth
model per island and per node"): computed by ``nodetopo.expect`` from the topology it publishes,
recomputed when that topology changes (not per scan, never per scrape); what the model cannot judge
from known facts has no series, never a zero or guessed band."""

from __future__ import annotations

import dataclasses
import io

import pytest
from helpers import topology_of
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from nodetopo.agent import bands as bands_module
from nodetopo.agent.bands import BandCache, expected_bands
from nodetopo.agent.loop import Agent
from nodetopo.agent.metrics import AgentStats, make_registry
from nodetopo.agent.publisher import DryRunPublisher
from nodetopo.expect import Algorithm, Placement, expect
from nodetopo.model import Topology
from nodetopo.topology.discover import bundle_context, scan

from .support import BUNDLES, config

BUSBW = "nodetopo_expected_busbw_bytes_per_second"
NVLINK_TX = "nodetopo_expected_nvlink_tx_bytes_per_second"


def exported(stats: AgentStats) -> list[tuple[str, dict[str, str], float]]:
    text = generate_latest(make_registry(stats, process=False)).decode()
    return sorted(
        ((s.name, s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples),
        key=lambda x: (x[0], sorted(x[1].items())),
    )


def band_series(stats: AgentStats) -> list[tuple[str, dict[str, str], float]]:
    return [x for x in exported(stats) if x[0] in (BUSBW, NVLINK_TX)]


def stats_with_bands(topology: Topology, node: str = "gpu-a") -> AgentStats:
    stats = AgentStats(node)
    stats.record_bands(expected_bands(topology, node))
    return stats


def test_an_nvswitch_node_has_its_islands_and_nodes_busbw_band_and_each_gpus_send_band() -> None:
    topology = topology_of("dgx-h100")
    e = expect([Placement(node="gpu-a", topology=topology)])
    ring, nvls = e.bound(Algorithm.RING), e.bound(Algorithm.NVLS)
    assert ring is not None and nvls is not None  # H100 on an NVSwitch: NCCL may pick either
    got = {
        (name, labels.get("scope"), labels.get("island"), labels["bound"]): value
        for name, labels, value in band_series(stats_with_bands(topology))
    }
    send = 8 / (2 * 7)  # an NVLS all-reduce: each GPU sends its buffer once, busbw = algbw x 2(n-1)/n
    assert got == {
        (BUSBW, "island", "0", "lower"): e.band.low * 1e9,
        (BUSBW, "island", "0", "upper"): e.band.high * 1e9,
        (BUSBW, "node", None, "lower"): e.band.low * 1e9,
        (BUSBW, "node", None, "upper"): e.band.high * 1e9,
        (NVLINK_TX, "island", "0", "lower"): min(ring.band.low, nvls.band.low * send) * 1e9,
        (NVLINK_TX, "island", "0", "upper"): max(ring.band.high, nvls.band.high * send) * 1e9,
    }
    # the point of the send band: a healthy NVLS job sends less per GPU than the Ring busbw floor
    assert (
        got[(NVLINK_TX, "island", "0", "lower")] < ring.band.low * 1e9 == got[(BUSBW, "island", "0", "lower")]
    )
    assert got[(NVLINK_TX, "island", "0", "lower")] == pytest.approx(220.5e9)
    labels = next(labels for name, labels, _ in band_series(stats_with_bands(topology)) if name == NVLINK_TX)
    assert labels == {
        "node": "gpu-a",
        "scope": "island",
        "island": "0",
        "collective": "all_reduce",
        "bound": labels["bound"],
    }


def test_islands_of_two_and_a_node_across_them() -> None:
    """Two NVLink-bridged pairs on PCIe: a band per island (Ring only, no NVSwitch), and a node band
    far below them (the pairs reach each other over PCIe)."""
    series = band_series(stats_with_bands(topology_of("pcie-4x-nvbridge")))
    assert len(series) == 10  # 4 per island, 2 for the node
    by = {(n, x.get("scope"), x.get("island"), x["bound"]): v for n, x, v in series}
    for island in ("0", "1"):
        assert by[(NVLINK_TX, "island", island, "lower")] == by[(BUSBW, "island", island, "lower")]
    assert by[(BUSBW, "node", None, "upper")] < by[(BUSBW, "island", "0", "lower")] / 5


@pytest.mark.parametrize(
    ("bundle", "why"),
    [
        ("gpu-no-driver", "no GPU model: its link rates are not known"),
        ("a100-mig", "MIG: NCCL runs no collective across MIG devices"),
        ("pcie-8x-2socket", "a cut through the CPU interconnect, whose rate is not published"),
        ("cpu-only", "no GPU"),
    ],
)
def test_what_the_model_cannot_judge_has_no_series(bundle: str, why: str) -> None:
    assert band_series(stats_with_bands(topology_of(bundle))) == [], why


def test_an_unknown_gpu_model_drops_its_bands_never_a_guessed_or_zero_one() -> None:
    topology = topology_of("dgx-h100")
    unknown = dataclasses.replace(
        topology,
        gpus=tuple(dataclasses.replace(g, model="NVIDIA X999") if g.index == 3 else g for g in topology.gpus),
    )
    # the model alone would assume a rate for it; the agent publishes nothing it would have to assume
    assert expect([Placement(node="n", topology=unknown)]).band.low > 0
    assert band_series(stats_with_bands(unknown)) == []
    for bundle in ("dgx-h100", "dgx-a100", "dgx1-v100", "gh200-nvl", "no-ibstat", "pcie-4x-nvbridge"):
        assert all(v > 0 for _, _, v in band_series(stats_with_bands(topology_of(bundle)))), bundle


def test_the_loop_recomputes_when_the_topology_changes_not_per_scan_or_scrape() -> None:
    bundles = iter(["dgx-h100", "dgx-h100", "pcie-4x-nvbridge", "pcie-4x-nvbridge"])
    agent = Agent(
        config(dry_run=True),
        scan=lambda: scan(bundle_context(BUNDLES / next(bundles))),
        publisher=DryRunPublisher("node-a", io.StringIO()),
    )
    agent.run_cycle("start")
    first = band_series(agent.stats)
    assert len(first) == 6 and {x["node"] for _, x, _ in first} == {"node-a"}
    agent.run_cycle("interval")  # the same machine scanned again: the bands are kept, not computed
    for _ in range(3):
        assert band_series(agent.stats) == first  # scrapes read what was recorded
    assert agent.bands.computed == 1
    agent.run_cycle("udev")  # another machine: replaced, no series of the old island left
    assert agent.bands.computed == 2
    assert len(band_series(agent.stats)) == 10 and {
        x.get("island") for _, x, _ in band_series(agent.stats)
    } == {
        "0",
        "1",
        None,
    }
    agent.run_cycle("interval")
    assert agent.bands.computed == 2


def test_a_failing_model_costs_the_bands_not_the_publish(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(topology: Topology, node: str) -> tuple[()]:
        raise RuntimeError("a bug in the model")

    monkeypatch.setattr(bands_module, "expected_bands", broken)
    agent = Agent(
        config(dry_run=True),
        scan=lambda: scan(bundle_context(BUNDLES / "dgx-h100")),
        publisher=DryRunPublisher("node-a", io.StringIO()),
    )
    outcome = agent.run_cycle("start")
    assert outcome.published and outcome.error is None
    assert band_series(agent.stats) == [] and agent.bands.computed == 1
    gpus = [x for x in exported(agent.stats) if x[0] == "nodetopo_gpu_info"]
    assert len(gpus) == 8


def test_the_cache_key_is_what_the_model_reads() -> None:
    """A change of a fact the model reads (a GPU's model) computes again; the same facts do not."""
    topology = topology_of("dgx-h100")
    cache = BandCache("n")
    assert len(cache.bands(topology)) == 3 and cache.computed == 1
    assert cache.bands(dataclasses.replace(topology, conditions=())) == cache.bands(topology)
    assert cache.computed == 1
    other = dataclasses.replace(
        topology, gpus=tuple(dataclasses.replace(g, model="NVIDIA A100-SXM4-80GB") for g in topology.gpus)
    )
    assert cache.bands(other) != cache.bands(topology) and cache.computed == 3
