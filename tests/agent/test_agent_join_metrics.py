"""The agent's topology join series (nodetopo_gpu_info, nodetopo_nic_info) from real-machine bundles:
DCGM's join keys in DCGM's form, one series per GPU and NIC, an unknown fact an absent label; and the
band and edge families, absent until something records them (issue 26, "Join metrics"; the bands the
agent computes: test_agent_bands.py)."""

from __future__ import annotations

import dataclasses
import io

from helpers import topology_of
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from nodetopo.agent.loop import Agent
from nodetopo.agent.metrics import AgentStats, EdgeState, ExpectedBand, dcgm_bus_id, make_registry
from nodetopo.agent.publisher import DryRunPublisher
from nodetopo.model import FabricTier, NetworkPosition, PciAddress, SwitchPort, Topology
from nodetopo.topology.discover import bundle_context, scan

from .support import BUNDLES, config

JOIN = (
    "nodetopo_gpu_info",
    "nodetopo_nic_info",
    "nodetopo_expected_busbw_bytes_per_second",
    "nodetopo_edge_degraded",
)


def series(stats: AgentStats, name: str) -> list[dict[str, str]]:
    text = generate_latest(make_registry(stats, process=False)).decode()
    return [
        s.labels
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and s.value == 1.0
    ]


def stats_of(topology: Topology, node: str = "gpu-a") -> AgentStats:
    stats = AgentStats(node)
    result = scan(bundle_context(BUNDLES / "dgx-h100"))
    stats.record_scan("start", result.results, topology, ())
    return stats


def test_dcgm_bus_id_is_the_exporters_form() -> None:
    assert dcgm_bus_id(PciAddress.parse("0000:1a:00.0")) == "00000000:1A:00.0"
    assert dcgm_bus_id(PciAddress.parse("0009:01:00.1")) == "00000009:01:00.1"


def test_one_gpu_info_per_gpu_with_dcgms_join_keys() -> None:
    topology = topology_of("dgx-h100")
    gpus = series(stats_of(topology), "nodetopo_gpu_info")
    assert len(gpus) == 8
    first = topology.gpus[0]
    assert gpus[0] == {
        "node": "gpu-a",
        "gpu": "0",
        "UUID": first.uuid,
        "pci_bus_id": "00000000:1A:00.0",
        "island": "0",
        "numa_node": "0",
        "nearest_nic": "mlx5_0",
        "nic_class": "PIX",
        "nvlink_domain": "gpu-a.nvl0",
    }
    assert {g["UUID"] for g in gpus} == {g.uuid for g in topology.gpus}
    # no leaf: this bundle says nothing of the node's place in the network (absent, never "none")
    assert all("leaf" not in g for g in gpus)


def test_nic_info_per_nic_names_its_gpus_and_switch() -> None:
    topology = topology_of("pcie-4x-nvbridge")
    nics = series(stats_of(topology), "nodetopo_nic_info")
    assert [(n["device"], n["nearest_gpus"]) for n in nics] == [("mlx5_0", "0+1"), ("mlx5_1", "2+3")]
    assert nics[0]["pci_bus_id"] == "0000:45:00.0" and nics[0]["rdma"] == "true"
    gpus = series(stats_of(topology), "nodetopo_gpu_info")
    assert [g["island"] for g in gpus] == ["0", "0", "1", "1"]
    # the node's place in the network, when a fabric source saw it: leaf on every series, switch per NIC
    placed = dataclasses.replace(
        topology,
        network=NetworkPosition(
            neighbours=(
                SwitchPort(nic="mlx5_0", port=1, source="fabric.ib", switch_id="0xaaa1"),
                SwitchPort(nic="ibp197s0", port=None, source="fabric.lldp", switch_id="0xbbb2"),
                SwitchPort(
                    nic="mlx5_1", port=1, source="fabric.ib", switch_id="0xccc3", peer_is_switch=False
                ),
            ),
            tiers=(FabricTier(level=1, id="spine-9"), FabricTier(level=0, id="leaf-4")),
            tier_source="fabric.ib",
        ),
    )
    stats = stats_of(placed)
    nics = series(stats, "nodetopo_nic_info")
    assert [(n["device"], n.get("switch"), n["leaf"]) for n in nics] == [
        ("mlx5_0", "0xaaa1", "leaf-4"),
        ("mlx5_1", "0xbbb2", "leaf-4"),  # by its netdev (LLDP); the host peer is no switch
    ]
    assert {g["leaf"] for g in series(stats, "nodetopo_gpu_info")} == {"leaf-4"}


def test_unknown_facts_are_absent_labels() -> None:
    gh200 = series(stats_of(topology_of("gh200-nvl")), "nodetopo_gpu_info")
    # the multi-node NVLink clique is the domain; each GPU's NUMA affinity is several nodes: no numa_node
    assert {g["nvlink_domain"] for g in gh200} == {"7d3f1c2a-5b6e-4f80-9a1d-2c4b6e8f0a13.32766"}
    assert all("numa_node" not in g for g in gh200)
    # a GPU without NVLink peer, address or NIC: only what is known
    topology = topology_of("pcie-4x-nvbridge")
    bare = dataclasses.replace(
        topology,
        gpus=(
            dataclasses.replace(
                topology.gpus[0], island=None, address=None, nearest_nics=(), nic_distance=None, uuid=None
            ),
        ),
        nics=(),
    )
    stats = stats_of(bare, node="")
    assert series(stats, "nodetopo_gpu_info") == [{"gpu": "0", "numa_node": "0"}]
    assert series(stats, "nodetopo_nic_info") == []
    # a CPU node: NICs, no GPU series
    cpu = stats_of(topology_of("cpu-only"))
    assert series(cpu, "nodetopo_gpu_info") == [] and len(series(cpu, "nodetopo_nic_info")) == 2


def test_bands_and_edges_are_absent_until_recorded_then_per_island_and_edge() -> None:
    stats = stats_of(topology_of("dgx-h100"))
    text = generate_latest(make_registry(stats, process=False)).decode()
    samples = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    assert (
        "nodetopo_expected_busbw_bytes_per_second" not in samples and "nodetopo_edge_degraded" not in samples
    )
    stats.record_bands(
        [
            ExpectedBand(
                scope="island", island=0, lower_bytes_per_second=3.0e11, upper_bytes_per_second=4.0e11
            ),
            ExpectedBand(scope="network", lower_bytes_per_second=3.6e10, upper_bytes_per_second=4.6e10),
        ]
    )
    stats.record_edges(
        [
            EdgeState(
                edge="gpu:GPU-1~nvswitch:0000:05:00.0", kind="nvlink", degraded=True, reason="LinksDown"
            ),
            EdgeState(edge="pci:0000:19:00.0~gpu:GPU-1", kind="pcie", degraded=False),
        ]
    )
    text = generate_latest(make_registry(stats, process=False)).decode()
    got = sorted(
        (s.name, s.value, s.labels)
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name in JOIN[2:]
    )
    all_reduce = {"collective": "all_reduce"}
    node, busbw, edge = (
        {"node": "gpu-a"},
        "nodetopo_expected_busbw_bytes_per_second",
        "nodetopo_edge_degraded",
    )
    assert got == sorted(
        [
            (busbw, 3.0e11, {**node, **all_reduce, "scope": "island", "island": "0", "bound": "lower"}),
            (busbw, 4.0e11, {**node, **all_reduce, "scope": "island", "island": "0", "bound": "upper"}),
            (busbw, 3.6e10, {**node, **all_reduce, "scope": "network", "bound": "lower"}),
            (busbw, 4.6e10, {**node, **all_reduce, "scope": "network", "bound": "upper"}),
            (
                edge,
                1.0,
                {**node, "edge": "gpu:GPU-1~nvswitch:0000:05:00.0", "kind": "nvlink", "reason": "LinksDown"},
            ),
            (edge, 0.0, {**node, "edge": "pci:0000:19:00.0~gpu:GPU-1", "kind": "pcie"}),
        ]
    )


def test_the_running_agent_exports_the_join_series_of_its_latest_scan() -> None:
    """Through the loop: a rescan that finds another machine replaces the series (no stale GPU)."""
    bundles = iter([BUNDLES / "dgx-h100", BUNDLES / "pcie-4x-nvbridge"])
    agent = Agent(
        config(dry_run=True),
        scan=lambda: scan(bundle_context(next(bundles))),
        publisher=DryRunPublisher("node-a", io.StringIO()),
    )
    agent.run_cycle("start")
    assert len(series(agent.stats, "nodetopo_gpu_info")) == 8
    agent.run_cycle("interval")
    gpus = series(agent.stats, "nodetopo_gpu_info")
    assert len(gpus) == 4 and {g["node"] for g in gpus} == {"node-a"}
    # cardinality: one series per GPU and per NIC, whatever else the topology holds
    assert len(series(agent.stats, "nodetopo_nic_info")) == len(topology_of("pcie-4x-nvbridge").nics)
