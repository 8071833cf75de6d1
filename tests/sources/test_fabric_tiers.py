"""Switch tiers come from the switch graph, not from "has a host cabled to it".

Own fixtures (tests/fixtures/ibnetdiscover/): a 2-tier fat tree with a storage server on a spine and a
3-tier fabric with a UFM host on a core switch; plus the corpus sweeps (read in place).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nodetopo import fabric as ib

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ibnetdiscover"
GB200 = "fabric/ibnetdiscover/topograph-gb200-nvl72-superpod-2tier-ndr-rail-example.out"
KB = "fabric/ibnetdiscover/nvidia-kb-switchib-sx6012-stderr-prefix-loopback-cables.topo"
MANPAGE = "fabric/ibnetdiscover/manpage-voltaire-isr9024-sw6ib4-dualport-hca.topo"
OSC = "fabric/ibnetdiscover/ports-p-osc-edr-excerpt-infiniband-exporter.txt"


def load(name: str) -> ib.IbFabric:
    return ib.parse_ibnetdiscover((FIXTURES / name).read_text(), name)


def tiers_by_name(fabric: ib.IbFabric) -> dict[str, int]:
    tier = ib.classify(fabric).tier
    return {n.name or "": tier[n.guid] for n in fabric.nodes if n.kind == "switch"}


def guids(fabric: ib.IbFabric, prefix: str) -> list[int]:
    return [n.guid for n in fabric.nodes if n.kind == "switch" and (n.name or "").startswith(prefix)]


def place(fabric: ib.IbFabric, host: str) -> tuple[tuple[int, str, str | None], ...]:
    """(level, id, name) of each tier a host's ACTIVE ports see, through the written-and-read map."""
    fmap = ib.parse_fabric_map(json.dumps(ib.fabric_map(fabric)))
    nodes = {n.guid: n for n in fabric.nodes}
    ports = [
        ib.HostPort(ca="mlx5_0", port=e.port, port_guid=e.port_guid, lid=e.lid, state="ACTIVE")
        for e in fabric.links
        if nodes[e.guid].kind == "ca" and nodes[e.guid].name == host
    ]
    assert ports, host
    observation, problems, _ = ib.position_from_map(ports, fmap)
    assert problems == []
    return tuple((t.level, t.id, t.name) for t in observation.tiers)


def test_two_tier_storage_server_on_a_spine() -> None:
    fabric = load("fat-tree-2tier-storage-on-spine.topo")
    tiers = tiers_by_name(fabric)
    assert {n: t for n, t in tiers.items() if n.startswith("spine")} == {
        "spine-01": 1,
        "spine-02": 1,
        "spine-03": 1,
    }
    assert all(t == 0 for n, t in tiers.items() if n.startswith("leaf"))
    spines = ib.group_id(1, guids(fabric, "spine"))
    # every compute host sees all three spines (spine-01 included) as its tier 1
    for host in ("gpu001", "gpu004", "gpu008"):
        (t0, t1) = place(fabric, host)
        assert t0[0] == 0 and t0[2] is not None and t0[2].startswith("leaf-")
        assert t1 == (1, spines, None)
    # the storage server: its spine is its tier 0, nothing above it
    assert place(fabric, "storage01") == ((0, f"S-{guids(fabric, 'spine-01')[0]:016x}", "spine-01"),)
    written = ib.fabric_map(fabric)
    switches = written["switches"]
    assert isinstance(switches, dict)
    assert sum(1 for s in switches.values() if s["tier"] == 0) == 4


def test_three_tier_ufm_host_on_a_core_switch() -> None:
    fabric = load("three-tier-ufm-on-core.topo")
    tiers = tiers_by_name(fabric)
    assert tiers == {
        **{f"leaf-p{p}-{n}": 0 for p in (1, 2) for n in (1, 2)},
        **{f"agg-p{p}-{n}": 1 for p in (1, 2) for n in (1, 2)},
        "core-1": 2,
        "core-2": 2,
    }
    pod1, pod2 = ib.group_id(1, guids(fabric, "agg-p1")), ib.group_id(1, guids(fabric, "agg-p2"))
    cores = ib.group_id(2, guids(fabric, "core"))
    # node01/02 on leaf-p1-1, node07/08 on leaf-p2-2: each pod's aggregation pair, the cores above both
    assert place(fabric, "node01")[1:] == ((1, pod1, None), (2, cores, None))
    assert place(fabric, "node08")[1:] == ((1, pod2, None), (2, cores, None))
    assert place(fabric, "node01")[0][2] == "leaf-p1-1"
    assert place(fabric, "ufm01") == ((0, f"S-{guids(fabric, 'core-1')[0]:016x}", "core-1"),)


@pytest.mark.corpus
def test_corpus_sweeps_keep_their_tiers(corpus: Path) -> None:
    """GB200 (every host on a leaf, the UFM host too): 31 leaves, 9 spines in one group above each leaf.

    The KB and man-page sweeps are two switches with hosts on both, cabled to each other: neither
    connects two others, so both stay leaves with nothing above. OSC's excerpt: l1 switches are
    leaves, ib-i1l2s01 (no host) is above ib-i1l1s01.
    """
    gb200 = ib.parse_ibnetdiscover((corpus / GB200).read_text(), GB200)
    tiers = tiers_by_name(gb200)
    assert sorted(n for n, t in tiers.items() if t == 1) == sorted(n for n in tiers if "IBSPINE" in n)
    assert sum(1 for n, t in tiers.items() if t == 0 and "IBLEAF" in n) == 31 and len(tiers) == 40
    spines = ib.group_id(
        1, [n.guid for n in gb200.nodes if n.kind == "switch" and "IBSPINE" in (n.name or "")]
    )
    assert place(gb200, "B11-P1-CUFM-02")[1] == (1, spines, None)
    for name in (KB, MANPAGE):
        fabric = ib.parse_ibnetdiscover((corpus / name).read_text(), name)
        assert set(ib.classify(fabric).tier.values()) == {0}
    osc = ib.parse_ibnetdiscover_ports((corpus / OSC).read_text(), OSC)
    tier = ib.classify(osc).tier
    assert (tier[0x7CFE9003009CE5B0], tier[0x506B4B03005C2740], tier[0x7CFE900300B07320]) == (0, 0, 1)


def test_servers_on_two_spines_do_not_make_the_leaf_between_them_a_spine() -> None:
    """Judged most central first: spine-01 and spine-02 (servers on both) are spines, every leaf a leaf."""
    text = (FIXTURES / "fat-tree-2tier-storage-on-spine.topo").read_text()
    text += (
        "\nvendid=0x2c9\ndevid=0x1021\ncaguid=0xa088c20300d00020\n"
        'Ca\t1 "H-a088c20300d00020"\t\t# "login01 mlx5_0"\n'
        '[1](a088c20300d00020) \t"S-0c42a10300a00002"[61]\t\t'
        '# lid 40 lmc 0 "MF0;spine-02:MQM9700/U1" lid 2 4xNDR\n'
    )
    fabric = ib.parse_ibnetdiscover(text, "two servers")
    tiers = tiers_by_name(fabric)
    assert tiers == {
        **{f"spine-0{i}": 1 for i in (1, 2, 3)},
        **{f"leaf-0{j}": 0 for j in (1, 2, 3, 4)},
    }
    assert place(fabric, "login01") == ((0, f"S-{guids(fabric, 'spine-02')[0]:016x}", "spine-02"),)
    assert place(fabric, "gpu003")[1] == (1, ib.group_id(1, guids(fabric, "spine")), None)
