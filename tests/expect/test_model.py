"""The bandwidth model: capacities from facts, the binding cut from flows, bands from efficiencies."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from nodetopo.expect import Algorithm, ExpectError, LinkKind, ObservedLink, Placement, algorithms_for, expect
from nodetopo.expect import constants as c
from nodetopo.expect.copies import expect_copy
from nodetopo.model import LinkClass
from tests.expect.machines import gb300_tray, hgx, machine

H100 = "NVIDIA H100 80GB HBM3"


def _one(topology: object, node: str = "a", **kw: object) -> list[Placement]:
    return [Placement(node=node, topology=topology, **kw)]  # type: ignore[arg-type]


def test_one_hgx_h100_node_is_bound_by_each_gpus_nvswitch_ports() -> None:
    e = expect(_one(hgx(H100)))
    ring, nvls = e.bound(Algorithm.RING), e.bound(Algorithm.NVLS)
    assert ring is not None and nvls is not None
    assert ring.bound == 18 * 25.0  # 18 NVLink4 links into the switch, 25 GB/s each per direction
    assert {x.kind for x in ring.limiting} == {LinkKind.NVSWITCH}
    assert nvls.bound == pytest.approx(2 * 7 / 8 * 450)  # algbw ≤ the GPU's NVLink; busbw = algbw × 2(n-1)/n
    assert e.algorithm is Algorithm.NVLS and e.limiting_class == "NVLink SHARP"
    assert e.band.low == pytest.approx(450 * c.RING_NVLINK.low)
    assert e.band.high == pytest.approx(787.5 * c.NVLS_HOPPER.high)
    assert e.fabric_span == "one node" and e.units == ("a",)


def test_four_of_eight_gpus_and_two_gpus() -> None:
    four = expect(_one(hgx(H100), gpus=(0, 1, 2, 3)))
    two = expect(_one(hgx(H100), gpus=(0, 5)))
    assert four.ranks == 4 and two.ranks == 2
    assert four.bound(Algorithm.NVLS).bound == pytest.approx(2 * 3 / 4 * 450)  # type: ignore[union-attr]
    assert two.bound(Algorithm.RING).bound == 450  # type: ignore[union-attr]


def test_an_observed_degraded_nvlink_lowers_the_band_and_becomes_the_limiting_link() -> None:
    nominal = expect(_one(hgx(H100)))
    seen = ObservedLink(node="a", device="gpu:3", nvlinks=6, source="nvidia-smi nvlink -s")
    degraded = expect(_one(hgx(H100)), observed=[seen])
    ring = degraded.bound(Algorithm.RING)
    assert ring is not None and ring.bound == 6 * 25.0
    assert [(x.a, x.observed) for x in ring.limiting] == [("gpu:a:3", True)]
    assert "6 of 18 active" in ring.limiting[0].basis
    assert degraded.band.high < nominal.band.high and degraded.observed[0].capacity == 150.0
    assert nominal.observed == ()


def test_an_observed_narrow_pcie_link_or_a_down_nic_lowers_the_network_stage() -> None:
    nodes = [Placement(node="a", topology=hgx(H100)), Placement(node="b", topology=hgx(H100))]
    base = expect(nodes).bound(Algorithm.RING)
    assert base is not None and base.bound == 400.0  # 8 × 400 Gb/s
    narrow = expect(
        nodes, observed=[ObservedLink(node="b", device="nic:mlx5_3", pcie_width=4, pcie_gts=32.0)]
    )
    ring = narrow.bound(Algorithm.RING)
    assert ring is not None and ring.bound == pytest.approx(350 + 4 * c.PCIE_GBS_PER_LANE[5])
    assert any(x.kind is LinkKind.PCIE and x.observed and x.node == "b" for x in ring.limiting)
    down = expect(nodes, observed=[ObservedLink(node="a", device="nic:mlx5_0", state="DOWN")])
    assert down.bound(Algorithm.RING).bound == 350.0  # type: ignore[union-attr]


def test_shapes_are_shared_but_a_degraded_node_is_its_own() -> None:
    """Many nodes of one shape are computed once; the one with an observed fault still binds."""
    nodes = [Placement(node=f"n{i}", topology=hgx(H100)) for i in range(6)]
    e = expect(nodes, observed=[ObservedLink(node="n4", device="nic:mlx5_2", rate_gbps=100)])
    ring = e.bound(Algorithm.RING)
    assert ring is not None and ring.bound == 7 * 50 + 12.5
    assert {x.node for x in ring.limiting} == {"n4"}


def test_a_topology_that_equals_another_but_is_a_different_object_gives_the_same_answer() -> None:
    t = hgx(H100)
    other = dataclasses.replace(t, gpus=tuple(dataclasses.replace(g, uuid=f"GPU-x{g.index}") for g in t.gpus))
    a = expect([Placement(node="a", topology=t), Placement(node="b", topology=t)])
    b = expect([Placement(node="a", topology=t), Placement(node="b", topology=other)])
    assert a.band == b.band and a.algorithm == b.algorithm


def test_a_multi_node_nvlink_domain_is_one_unit_and_its_boundary_is_the_network() -> None:
    one_rack = [Placement(node=f"h{i}", topology=gb300_tray("rack.0")) for i in range(4)]
    e = expect(one_rack)
    assert e.units == ("NVLink domain rack.0",) and e.domains == ("rack.0",)
    assert e.bound(Algorithm.RING).bound == 900.0  # type: ignore[union-attr]
    assert e.bound(Algorithm.NVLS) is not None and e.bound(Algorithm.TREE) is None
    two_racks = [Placement(node=f"h{i}", topology=gb300_tray(f"rack.{i // 2}")) for i in range(4)]
    e = expect(two_racks)
    assert len(e.units) == 2 and len(e.domains) == 2
    ring = e.bound(Algorithm.RING)
    assert ring is not None and ring.bound == 400.0 and ring.stage == "network"  # one host's 8 × 400 Gb/s
    assert {x.kind for x in ring.limiting} == {LinkKind.NIC}
    assert any("one host's NICs" in a for a in e.assumptions)
    assert e.bound(Algorithm.NVLS_TREE) is not None


def test_a_tray_without_its_fabric_up_is_a_host_of_its_own() -> None:
    t = gb300_tray("rack.0")
    assert t.fabric is not None
    down = dataclasses.replace(t, fabric=dataclasses.replace(t.fabric, state="IN_PROGRESS"))
    e = expect([Placement(node="h0", topology=t), Placement(node="h1", topology=down)])
    assert len(e.units) == 2 and e.domains == ("rack.0",)


def test_gpudirect_rdma_only_where_the_nic_is_pix_or_pxb() -> None:
    gdr = hgx("NVIDIA A800-SXM4-80GB", links=8, nics=1, rate=200, gpus_per_nic=1)
    host = hgx("NVIDIA A800-SXM4-80GB", links=8, nics=1, rate=200, gpus_per_nic=1, nic_class=LinkClass.NODE)
    two = lambda t: [Placement(node="a", topology=t), Placement(node="b", topology=t)]  # noqa: E731
    ring_gdr, ring_host = expect(two(gdr)).bound(Algorithm.RING), expect(two(host)).bound(Algorithm.RING)
    assert ring_gdr is not None and ring_host is not None
    assert ring_gdr.bound == ring_host.bound == 25.0
    assert ring_gdr.efficiency is c.NET_GDR and ring_host.efficiency is c.NET_HOST
    assert "no GPUDirect RDMA" in ring_host.limiting[0].basis


def test_nics_across_the_cpu_interconnect_bind_at_its_assumed_rate() -> None:
    # 4 GPUs on NUMA 0; the two NICs on NUMA 1, SYS to every GPU
    t = machine(H100, 4, nics=2, rate=400, numa=1, nic_class=LinkClass.SYS, nic_numa=1)
    t = dataclasses.replace(
        t,
        numa_nodes=(*t.numa_nodes, dataclasses.replace(t.numa_nodes[0], id=1, distances=((0, 21), (1, 10)))),
    )
    e = expect([Placement(node="a", topology=t), Placement(node="b", topology=t)])
    ring = e.bound(Algorithm.RING)
    assert ring is not None and ring.bound == c.SMP_GBS
    assert [x.kind for x in ring.limiting] == [LinkKind.SMP]
    assert any("CPU interconnect" in a for a in e.assumptions)


def test_a_pcie_only_box_pairs_on_switches_and_crosses_sockets() -> None:
    # 4 × RTX 6000 Ada: 0-1 and 2-3 share PCIe switches (PIX), the pairs sit on two sockets
    t = machine(
        "NVIDIA RTX 6000 Ada Generation",
        4,
        nvswitch=False,
        links=None,
        numa=2,
        pcie={(0, 1): LinkClass.PIX, (2, 3): LinkClass.PIX},
    )
    e = expect(_one(t))
    ring = e.bound(Algorithm.RING)
    assert ring is not None and ring.bound == c.SMP_GBS and e.limiting_class == "host memory"
    pair = expect(_one(t, gpus=(0, 1))).bound(Algorithm.RING)
    assert (
        pair is not None
        and pair.bound == pytest.approx(16 * c.PCIE_GBS_PER_LANE[4])
        and pair.efficiency is c.PCIE_P2P
    )
    assert e.bound(Algorithm.NVLS) is None


def test_geforce_boards_exchange_through_host_memory() -> None:
    t = machine(
        "NVIDIA GeForce RTX 4090", 2, nvswitch=False, links=None, numa=1, pcie={(0, 1): LinkClass.PIX}
    )
    e = expect(_one(t))
    ring = e.bound(Algorithm.RING)
    assert ring is not None and ring.efficiency is c.PCIE_HOST
    assert any("GeForce" in a for a in e.assumptions)


def test_direct_nvlink_bundles_from_a_real_hybrid_cube_mesh(corpus: Path, tmp_path: Path) -> None:
    """The DGX-1 V100 matrix of the corpus, read by nodetopo itself: 6 links per GPU, and the cut between
    the two quads is also 6 links (0-4 NV2, 1-5 NV2, 2-6 NV1, 3-7 NV1)."""
    from nodetopo.topology.discover import bundle_context, scan

    (tmp_path / "cmd").mkdir()
    source = corpus / "topo-m" / "v100-sxm2-8x-hybridcube-1nic-gpunumaid-vast.txt"
    (tmp_path / "cmd" / "nvidia-smi-topo-m.txt").write_bytes(source.read_bytes())
    topology = scan(bundle_context(str(tmp_path))).topology
    e = expect(_one(topology))
    ring = e.bound(Algorithm.RING)
    assert ring is not None and ring.bound == 6 * c.NVLINK_GBS_PER_LINK[3]
    assert {x.kind for x in ring.limiting} == {LinkKind.NVLINK}
    assert any("not in the model's table" in a for a in e.assumptions)  # topo -m carries no model name
    quad = expect(_one(topology, gpus=(0, 1, 2, 3))).bound(Algorithm.RING)
    # inside the quad GPU0 and GPU1 have the fewest links (GPU0: NV1 to 1, NV1 to 2, NV2 to 3)
    assert quad is not None and quad.bound == 4 * 25.0 and sum(x.capacity for x in quad.limiting) == 100.0


def test_an_oversubscribed_fabric_binds_between_leaves() -> None:
    a = hgx(H100, tiers=("leaf-1", "spine"))
    b = hgx(H100, tiers=("leaf-2", "spine"))
    nodes = [Placement(node="a", topology=a), Placement(node="b", topology=b)]
    flat = expect(nodes)
    assert flat.bound(Algorithm.RING).bound == 400.0 and flat.fabric_span == "one tier-1 group"  # type: ignore[union-attr]
    tight = expect(nodes, oversubscription=4)
    ring = tight.bound(Algorithm.RING)
    assert ring is not None and ring.bound == 100.0 and [x.kind for x in ring.limiting] == [LinkKind.FABRIC]
    same_leaf = expect([Placement(node="a", topology=a), Placement(node="c", topology=a)], oversubscription=4)
    assert same_leaf.bound(Algorithm.RING).bound == 400.0 and same_leaf.fabric_span == "one leaf"  # type: ignore[union-attr]


def test_all_to_all_weighs_a_cut_by_the_ranks_on_each_side() -> None:
    nodes = [Placement(node="a", topology=hgx(H100)), Placement(node="b", topology=hgx(H100))]
    e = expect(nodes, "alltoall")
    ring = e.bound(Algorithm.RING)
    assert ring is not None and ring.bound == pytest.approx(400 * 15 / (8 * 8))
    assert not ring.efficiency.calibrated


def test_other_collectives_run_a_ring() -> None:
    for name in ("all_gather", "reduce_scatter", "broadcast", "reduce", "sendrecv"):
        e = expect(_one(hgx(H100)), name)
        assert [b.algorithm for b in e.bounds] == [Algorithm.RING]
        assert e.bound(Algorithm.RING).bound == 450  # type: ignore[union-attr]


def test_naming_the_algorithm_narrows_the_band() -> None:
    both = expect(_one(hgx(H100)))
    ring = expect(_one(hgx(H100)), algorithms=algorithms_for("all_reduce", "Ring"))
    assert [b.algorithm for b in ring.bounds] == [Algorithm.RING] and ring.band.high < both.band.high
    assert algorithms_for("all_reduce", "^NVLS") == (Algorithm.RING, Algorithm.TREE, Algorithm.NVLS_TREE)
    assert algorithms_for("all_reduce", "nvls,ring") == (Algorithm.RING, Algorithm.NVLS)
    assert algorithms_for("all_reduce", "CollNet") is None and algorithms_for("all_reduce", None) is None
    with pytest.raises(ExpectError):
        expect(_one(hgx(H100)), "all_gather", algorithms=(Algorithm.NVLS,))


def test_point_to_point_copies() -> None:
    t = hgx(H100)
    nv = expect_copy(Placement(node="a", topology=t), 0, 5)
    assert nv.bound == 450 and nv.efficiency is c.P2P_NVLINK
    host = expect_copy(Placement(node="a", topology=t), None, 2)
    assert host.bound == pytest.approx(16 * c.PCIE_GBS_PER_LANE[5]) and host.efficiency is c.P2P_PCIE
    box = machine(
        "NVIDIA RTX 6000 Ada Generation", 4, nvswitch=False, links=None, numa=2, pcie={(0, 1): LinkClass.PIX}
    )
    across = expect_copy(Placement(node="a", topology=box), 0, 3)
    assert across.bound == c.SMP_GBS and [x.kind for x in across.limiting] == [LinkKind.SMP]
    degraded = expect_copy(
        Placement(node="a", topology=t), 1, 3, observed=[ObservedLink(node="a", device="gpu:3", nvlinks=9)]
    )
    assert degraded.bound == 225.0 and degraded.limiting[0].observed


@pytest.mark.parametrize(
    ("placements", "message"),
    [
        (lambda: _one(hgx(H100), gpus=(0, 9)), "no GPU 9"),
        (lambda: _one(hgx(H100), gpus=(1, 1)), "listed twice"),
        (lambda: _one(hgx(H100), gpus=(3,)), "1 rank"),
        (lambda: _one(hgx(H100), nics=("mlx5_99",)), "no RDMA NIC mlx5_99"),
        (lambda: [], "no placement"),
        (lambda: [*_one(hgx(H100)), *_one(hgx(H100))], "listed twice"),
    ],
)
def test_placements_the_model_cannot_judge(placements: object, message: str) -> None:
    with pytest.raises(ExpectError, match=message):
        expect(placements())  # type: ignore[operator]


def test_facts_the_model_refuses_to_guess() -> None:
    t = hgx(H100)
    no_rate = dataclasses.replace(t, nics=tuple(dataclasses.replace(n, rate_gbps=None) for n in t.nics))
    with pytest.raises(ExpectError, match="no rate"):
        expect([Placement(node="a", topology=no_rate), Placement(node="b", topology=t)])
    mig = dataclasses.replace(t, gpus=tuple(dataclasses.replace(g, mig_enabled=True) for g in t.gpus))
    with pytest.raises(ExpectError, match="MIG"):
        expect(_one(mig))
    no_nics = machine(H100, 8, nics=0)
    with pytest.raises(ExpectError, match="TCP sockets"):
        expect([Placement(node="a", topology=no_nics), Placement(node="b", topology=no_nics)])
    down = [ObservedLink(node=n, device=f"nic:mlx5_{k}", state="DOWN") for n in "ab" for k in range(8)]
    with pytest.raises(ExpectError, match="carries nothing"):
        expect([Placement(node="a", topology=t), Placement(node="b", topology=t)], observed=down)
    with pytest.raises(ExpectError, match="collective"):
        expect(_one(t), "gather")
    with pytest.raises(ExpectError, match="oversubscription"):
        expect(_one(t), oversubscription=0.5)


def test_assumptions_name_what_the_model_cannot_know() -> None:
    e = expect([Placement(node="a", topology=hgx(H100)), Placement(node="b", topology=hgx(H100))])
    text = "\n".join(e.assumptions)
    for needle in (
        "NCCL_ALGO not given",
        "NCCL version",
        "virtualisation",
        "non-blocking",
        "CollNet",
        "NVLS: needs",
    ):
        assert needle in text


def test_an_assumption_about_many_nodes_is_said_once() -> None:
    odd = machine("NVIDIA Imaginary 9000", 8, nics=8)
    e = expect([Placement(node=f"n{i}", topology=odd) for i in range(3)])
    said = [a for a in e.assumptions if "Imaginary 9000" in a]
    assert said == [said[0]] and said[0].startswith("3 nodes (n0 … n2): GPU model NVIDIA Imaginary 9000")
    one = expect([Placement(node="solo", topology=odd)])
    assert any(a.startswith("solo: GPU model NVIDIA Imaginary 9000") for a in one.assumptions)
