"""``ibnetdiscover`` (both forms): every fact that fabric/SOURCES.md lists, read from the corpus in place."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from nodetopo import fabric as ib
from nodetopo.errors import ParseError

pytestmark = pytest.mark.corpus

GB200 = "fabric/ibnetdiscover/topograph-gb200-nvl72-superpod-2tier-ndr-rail-example.out"
LONE = "fabric/ibnetdiscover/topograph-gb200-lone-ca-no-links-example-bad.out"
KB = "fabric/ibnetdiscover/nvidia-kb-switchib-sx6012-stderr-prefix-loopback-cables.topo"
MANPAGE = "fabric/ibnetdiscover/manpage-voltaire-isr9024-sw6ib4-dualport-hca.topo"
OSC = "fabric/ibnetdiscover/ports-p-osc-edr-excerpt-infiniband-exporter.txt"
HDR = "fabric/ibnetdiscover/ports-p-hdr-sharp-padded-names-infiniband-exporter.txt"


@pytest.fixture(scope="module")
def gb200(corpus: Path) -> ib.IbFabric:
    return ib.parse_ibnetdiscover((corpus / GB200).read_text(), GB200)


def by_name(fabric: ib.IbFabric) -> dict[str, ib.IbNode]:
    return {n.name: n for n in fabric.nodes if n.kind == "switch" and n.name}


def cabled(fabric: ib.IbFabric, host: str, hca: str) -> tuple[str | None, int | None, int | None, int | None]:
    """(leaf name, leaf port, leaf LID, CA LID) of a host's HCA, from the CA's own block."""
    nodes = {n.guid: n for n in fabric.nodes}
    (end,) = [
        e
        for e in fabric.links
        if nodes[e.guid].kind == "ca" and ib.ca_host(nodes[e.guid].description) == (host, hca)
    ]
    assert end.peer_guid is not None
    return nodes[end.peer_guid].name, end.peer_port, end.peer_lid, end.lid


def test_gb200_header_initiator_and_blocks(gb200: ib.IbFabric) -> None:
    assert gb200.initiator == 0xE09D730300156FF6
    assert gb200.skipped == ()
    assert cabled(gb200, "b05-p1-dgx-05-c08", "HCA-6") == ("B09-P1-IBLEAF-04-05", 8, 119, 246)
    switches = [n for n in gb200.nodes if n.kind == "switch"]
    cas = [n for n in gb200.nodes if n.kind == "ca"]
    assert len(switches) == 40 and len(cas) == 582
    assert {n.ports for n in switches} == {65}
    assert all(re.fullmatch(r"MF0;[^:]+:MQM9701/U1", n.description) for n in switches)


def test_gb200_links_are_symmetric_and_counted(gb200: ib.IbFabric) -> None:
    kinds = {n.guid: n.kind for n in gb200.nodes}
    assert len(gb200.links) == 2228
    assert {e.width for e in gb200.links} == {"4xNDR"}
    ends = {(e.guid, e.port, e.peer_guid, e.peer_port) for e in gb200.links}
    assert all((b, bp, a, ap) in ends for a, ap, b, bp in ends)
    links = {frozenset({(a, ap), (b, bp)}) for a, ap, b, bp in ends if b is not None and bp is not None}
    assert len(links) == 1114
    pairs = Counter(tuple(sorted(kinds[g] for g, _ in link)) for link in links)
    assert pairs == {("switch", "switch"): 532, ("ca", "switch"): 582}


def test_gb200_spines_leaves_and_the_missing_leaf(gb200: ib.IbFabric) -> None:
    classified = ib.classify(gb200)
    names = by_name(gb200)
    spines = {n: names[n].lid for n in names if classified.tier[names[n].guid] == 1}
    assert spines == {
        "A10-P1-IBSPINE-01": 238,
        "A10-P1-IBSPINE-02": 236,
        "A10-P1-IBSPINE-03": 233,
        "A10-P1-IBSPINE-04": 156,
        "B10-P1-IBSPINE-05": 116,
        "B10-P1-IBSPINE-06": 64,
        "B10-P1-IBSPINE-07": 28,
        "B10-P1-IBSPINE-08": 154,
        "B10-P1-IBSPINE-09": 31,
    }
    leaves = {n for n in names if classified.tier[names[n].guid] == 0}
    expected = {
        f"{'A' if rack <= 4 else 'B'}09-P1-IBLEAF-{rail:02d}-{rack:02d}"
        for rack in range(1, 9)
        for rail in range(1, 5)
    }
    assert leaves == expected - {"A09-P1-IBLEAF-03-01"}
    assert len(leaves) == 31
    # spine ports 5-6 (leaf i = 3: rail 3 of rack 1) are unused on every spine
    used = {(e.guid, e.port) for e in gb200.links}
    assert all((names[s].guid, p) not in used for s in spines for p in (5, 6))


def test_gb200_cabling_rule_holds_for_every_inter_switch_link(gb200: ib.IbFabric) -> None:
    nodes = {n.guid: n for n in gb200.nodes}
    spine_number = {n.guid: int(n.name[-2:]) for n in gb200.nodes if n.name and "SPINE" in n.name}
    leaf_index = {}
    for n in gb200.nodes:
        if n.name and "IBLEAF" in n.name:
            rail, rack = int(n.name[-5:-3]), int(n.name[-2:])
            leaf_index[n.guid] = 4 * (rack - 1) + rail
    checked = 0
    for e in gb200.links:
        if e.guid in leaf_index and e.peer_guid in spine_number:
            s, i = spine_number[e.peer_guid], leaf_index[e.guid]
            assert e.port in (33 + 2 * (s - 1), 34 + 2 * (s - 1)), (nodes[e.guid].name, e.port)
            assert e.peer_port in (2 * i - 1, 2 * i)
            checked += 1
    assert checked == 532


def test_gb200_uplink_counts(gb200: ib.IbFabric) -> None:
    names = by_name(gb200)
    guid_name = {n.guid: n.name for n in gb200.nodes}
    uplinks: Counter[str] = Counter()
    per_spine: dict[str, Counter[str]] = {}
    for e in gb200.links:
        here, there = guid_name.get(e.guid), guid_name.get(e.peer_guid) if e.peer_guid else None
        if here and there and "IBLEAF" in here and "SPINE" in there:
            uplinks[here] += 1
            per_spine.setdefault(there, Counter())[here] += 1
    assert min(uplinks.values()) == 14 and max(uplinks.values()) == 18
    assert uplinks["A09-P1-IBLEAF-01-02"] == 14
    assert per_spine["A10-P1-IBSPINE-01"]["A09-P1-IBLEAF-01-02"] == 0
    assert per_spine["A10-P1-IBSPINE-04"]["A09-P1-IBLEAF-01-02"] == 0
    reach = {s: len(c) for s, c in per_spine.items()}
    assert min(reach.values()) == 27 and max(reach.values()) == 31
    # SOURCES.md names SPINE-02/03/09 as reaching 31 leaves with 62 links; SPINE-08 also reaches 31
    # leaves, with 61 links (one of its leaves has a single cable to it).
    full = {s for s, c in per_spine.items() if len(c) == 31 and sum(c.values()) == 62}
    assert full == {"A10-P1-IBSPINE-02", "A10-P1-IBSPINE-03", "B10-P1-IBSPINE-09"}
    assert (reach["B10-P1-IBSPINE-08"], sum(per_spine["B10-P1-IBSPINE-08"].values())) == (31, 61)
    leaf = names["B09-P1-IBLEAF-01-05"]
    counts = Counter(
        guid_name[e.peer_guid]
        for e in gb200.links
        if e.guid == leaf.guid
        and e.peer_guid
        and e.peer_guid in guid_name
        and "SPINE" in (guid_name[e.peer_guid] or "")
    )
    assert sum(counts.values()) == 16
    assert {int(s[-2:]): c for s, c in counts.items()} == {
        1: 2,
        2: 2,
        3: 2,
        4: 1,
        5: 2,
        6: 2,
        7: 2,
        8: 1,
        9: 2,
    }


def test_gb200_aggregation_nodes_are_not_hosts(gb200: ib.IbFabric) -> None:
    nodes = {n.guid: n for n in gb200.nodes}
    sharp = [n for n in gb200.nodes if n.aggregation_node]
    assert len(sharp) == 40
    port65 = {
        e.guid: nodes[e.peer_guid] for e in gb200.links if nodes[e.guid].kind == "switch" and e.port == 65
    }
    assert len(port65) == 40 and all(n.aggregation_node for n in port65.values() if n is not None)
    classified = ib.classify(gb200)
    assert not any(n.guid in classified.hosts for n in sharp)
    assert all(n.name is None for n in sharp)


def test_gb200_hosts(gb200: ib.IbFabric) -> None:
    cas = [n for n in gb200.nodes if n.kind == "ca" and not n.aggregation_node]
    hosts = Counter(n.name for n in cas if n.name)
    assert len(hosts) == 122
    assert sum(1 for n in cas if n.name is None) == 69
    assert all(n.description == "MT4129 ConnectX7   Mellanox Technologies" for n in cas if n.name is None)
    assert "MT4129" not in hosts
    assert Counter(hosts.values()) == {4: 109, 3: 11, 2: 2}
    trays = Counter(re.sub(r"-c\d\d$", "", h) for h in hosts if re.search(r"-dgx-0\d-c\d\d$", h))
    assert trays == {
        "a05-p1-dgx-01": 10,
        "a06-p1-dgx-02": 11,
        "a07-p1-dgx-03": 18,
        "a08-p1-dgx-04": 17,
        "b05-p1-dgx-05": 18,
        "b06-p1-dgx-06": 15,
        "b07-p1-dgx-07": 16,
        "b08-p1-dgx-08": 14,
    }
    assert set(hosts) - {h for h in hosts if re.search(r"-dgx-0\d-c\d\d$", h)} == {
        "localhost",
        "ubuntu",
        "B11-P1-CUFM-02",
    }
    assert hosts["localhost"] == 3
    ufm = cabled(gb200, "B11-P1-CUFM-02", "mlx5_0")
    assert ufm[3] == 1
    ports = {
        (name, port)
        for host in ("ubuntu", "B11-P1-CUFM-02")
        for n in cas
        if n.name == host
        for name, port, _, _ in [cabled(gb200, host, ib.ca_host(n.description)[1] or "")]
    }
    assert {p for _, p in ports} <= {21, 22}
    assert {n for n, _ in ports} == {"B09-P1-IBLEAF-03-08", "B09-P1-IBLEAF-04-08"}


def test_gb200_rails(gb200: ib.IbFabric) -> None:
    rails = {
        "HCA-1": 1,
        "HCA-2": 2,
        "HCA-5": 3,
        "HCA-6": 4,
        "mlx5_0": 1,
        "mlx5_1": 2,
        "mlx5_4": 3,
        "mlx5_5": 4,
    }
    nodes = {n.guid: n for n in gb200.nodes}
    crossed = []
    for e in gb200.links:
        n = nodes[e.guid]
        host, hca = ib.ca_host(n.description)
        if n.kind != "ca" or host is None or not re.search(r"-dgx-0\d-c\d\d$", host) or e.peer_guid is None:
            continue
        leaf = nodes[e.peer_guid].name or ""
        rack = int(host.split("-")[3])
        assert leaf.endswith(f"-{rack:02d}")
        if int(leaf[-5:-3]) != rails[hca or ""]:
            crossed.append((host, hca, leaf))
        assert (hca or "").startswith("mlx5_") == host.startswith("a08-")
    assert ("b08-p1-dgx-08-c01", "HCA-5", "B09-P1-IBLEAF-04-08") in crossed
    assert ("b08-p1-dgx-08-c01", "HCA-6", "B09-P1-IBLEAF-03-08") in crossed


def test_gb200_example_host_and_irregular_ports(gb200: ib.IbFabric) -> None:
    assert cabled(gb200, "b05-p1-dgx-05-c08", "HCA-1") == ("B09-P1-IBLEAF-01-05", 8, 65, 241)
    assert cabled(gb200, "b05-p1-dgx-05-c08", "HCA-2") == ("B09-P1-IBLEAF-02-05", 8, 118, 242)
    assert cabled(gb200, "b05-p1-dgx-05-c08", "HCA-5") == ("B09-P1-IBLEAF-03-05", 8, 33, 248)
    assert cabled(gb200, "b05-p1-dgx-05-c08", "HCA-6") == ("B09-P1-IBLEAF-04-05", 8, 119, 246)
    assert by_name(gb200)["B09-P1-IBLEAF-01-05"].guid == 0x2C5EAB0300C26040
    assert cabled(gb200, "b06-p1-dgx-06-c07", "HCA-2")[:2] == ("B09-P1-IBLEAF-02-06", 8)
    assert cabled(gb200, "b06-p1-dgx-06-c08", "HCA-2")[:2] == ("B09-P1-IBLEAF-02-06", 7)
    assert cabled(gb200, "b06-p1-dgx-06-c02", "HCA-1")[:2] == ("B09-P1-IBLEAF-01-06", 4)
    assert cabled(gb200, "a05-p1-dgx-01-c12", "HCA-2")[:2] == ("A09-P1-IBLEAF-02-01", 11)
    assert cabled(gb200, "a05-p1-dgx-01-c14", "HCA-6")[:2] == ("A09-P1-IBLEAF-04-01", 11)


def test_gb200_map_places_a_rail_optimised_host(gb200: ib.IbFabric) -> None:
    """b05-p1-dgx-05-c08: four HCAs on four leaves → tier 0 = that leaf set, tier 1 = the spine group."""
    fmap = ib.parse_fabric_map(__import__("json").dumps(ib.fabric_map(gb200)))
    guids = {
        "HCA-1": 0xE09D73030015701A,
        "HCA-2": 0xE09D73030015701E,
        "HCA-5": 0xE09D730300156FF2,
        "HCA-6": 0xE09D730300156FF6,
    }
    ports = [ib.HostPort(ca=ca, port=1, port_guid=g, lid=None, state="ACTIVE") for ca, g in guids.items()]
    observation, problems, notes = ib.position_from_map(ports, fmap)
    assert problems == []
    assert any("rail-optimised" in n for n in notes)
    leaves = {n.nic: (n.switch_name, n.switch_port) for n in observation.neighbours}
    assert leaves == {
        "HCA-1": ("B09-P1-IBLEAF-01-05", "8"),
        "HCA-2": ("B09-P1-IBLEAF-02-05", "8"),
        "HCA-5": ("B09-P1-IBLEAF-03-05", "8"),
        "HCA-6": ("B09-P1-IBLEAF-04-05", "8"),
    }
    tier0, tier1 = observation.tiers
    assert tier0.level == 0 and len(tier0.members) == 4 and tier0.id.startswith("t0-")
    # the other trays of rack 05 share the leaf set; a tray of rack 06 does not; all share the spines
    other = ib.position_from_map(
        [
            ib.HostPort(ca="x", port=1, port_guid=g, lid=None, state="ACTIVE")
            for g in _host_guids(gb200, "b05-p1-dgx-05-c01")
        ],
        fmap,
    )[0]
    rack6 = ib.position_from_map(
        [
            ib.HostPort(ca="x", port=1, port_guid=g, lid=None, state="ACTIVE")
            for g in _host_guids(gb200, "b06-p1-dgx-06-c01")
        ],
        fmap,
    )[0]
    assert other.tiers == observation.tiers
    assert rack6.tiers[0] != tier0 and rack6.tiers[1] == tier1


def _host_guids(fabric: ib.IbFabric, host: str) -> list[int]:
    nodes = {n.guid: n for n in fabric.nodes}
    return [e.port_guid for e in fabric.links if e.port_guid and nodes[e.guid].name == host]


def test_lone_ca_has_no_switch(corpus: Path) -> None:
    fabric = ib.parse_ibnetdiscover((corpus / LONE).read_text(), LONE)
    (ca,) = fabric.nodes
    assert (ca.kind, ca.name, ca.guid) == ("ca", "dgx-gb200-n01-c1", 0xB8E92403009CA838)
    assert fabric.links == ()
    fmap = ib.parse_fabric_map(__import__("json").dumps(ib.fabric_map(fabric)))
    port = ib.HostPort(ca="mlx5_0", port=1, port_guid=0xB8E92403009CA838, lid=None, state="ACTIVE")
    observation, problems, _ = ib.position_from_map([port], fmap)
    assert observation.tiers == () and observation.neighbours[0].switch_id is None
    assert "not in the fabric map" in problems[0]


def test_kb_stderr_line_loopbacks_and_hosts(corpus: Path) -> None:
    fabric = ib.parse_ibnetdiscover((corpus / KB).read_text(), KB)
    assert fabric.skipped[0][0] == 1 and fabric.skipped[0][1].startswith("src/query_smp.c:195;")
    assert fabric.initiator == 0x0002C9030004E938
    switches = {n.guid: n for n in fabric.nodes if n.kind == "switch"}
    assert {(hex(g), n.ports, n.name, n.lid) for g, n in switches.items()} == {
        ("0xe41d2d030003e470", 36, None, 268),
        ("0xf4521403005764b0", 12, "switch-de779e", 174),
    }
    classified = ib.classify(fabric)
    assert classified.edges == {(0xE41D2D030003E470, 0xF4521403005764B0)}
    loops = {(e.port, e.peer_port) for e in fabric.links if e.guid == e.peer_guid}
    assert loops == {(1, 2), (2, 1), (19, 21), (21, 19), (29, 30), (30, 29)}
    link = next(e for e in fabric.links if e.guid == 0xE41D2D030003E470 and e.port == 3)
    assert (link.peer_guid, link.peer_port, link.width) == (0xF4521403005764B0, 1, "4xFDR")
    nodes = {n.guid: n for n in fabric.nodes}
    hosts = {
        (ib.ca_host(nodes[e.guid].description), e.port, nodes[e.peer_guid].guid, e.peer_port, e.width)
        for e in fabric.links
        if nodes[e.guid].kind == "ca" and e.peer_guid
    }
    sib, sx = 0xE41D2D030003E470, 0xF4521403005764B0
    assert hosts == {
        (("r-ufm216", "HCA-2"), 1, sib, 34, "4xEDR"),
        (("r-ufm111", "HCA-1"), 2, sib, 35, "4xFDR"),
        (("r-ufm101", "HCA-1"), 1, sx, 2, "4xQDR"),
        (("r-ufm101", "HCA-2"), 1, sx, 3, "4xQDR"),
        (("r-ufm100", "HCA-2"), 1, sx, 6, "4xFDR"),
        (("r-ufm96", "HCA-1"), 1, sx, 8, "4xSDR"),
    }
    assert len({h[0][0] for h in hosts}) == 5
    port2 = next(e for e in fabric.links if e.guid == 0x0002C903003421B0)
    assert port2.port_guid == 0x2C903003421B2
    fmap = ib.parse_fabric_map(__import__("json").dumps(ib.fabric_map(fabric)))
    # one host, two HCAs, same switch: tier 0 is that switch (named by its MF0 hostname)
    ports = [
        ib.HostPort(ca="HCA-1", port=1, port_guid=0x2C9030004E939, lid=27, state="ACTIVE"),
        ib.HostPort(ca="HCA-2", port=1, port_guid=0x2C9030006BA5B, lid=30, state="ACTIVE"),
    ]
    observation, problems, _ = ib.position_from_map(ports, fmap)
    assert problems == []
    assert [(t.level, t.id, t.name) for t in observation.tiers] == [
        (0, "S-f4521403005764b0", "switch-de779e")
    ]
    # a switch with no node description: its GUID is the id, no name, and a note says so
    observation, problems, notes = ib.position_from_map(
        [ib.HostPort(ca="HCA-2", port=1, port_guid=0xE41D2D030061F957, lid=2, state="ACTIVE")], fmap
    )
    assert [(t.id, t.name) for t in observation.tiers] == [("S-e41d2d030003e470", None)]
    assert any("no node description" in n for n in notes)


def test_manpage_parallel_links_dual_port_and_per_end_widths(corpus: Path) -> None:
    fabric = ib.parse_ibnetdiscover((corpus / MANPAGE).read_text(), MANPAGE)
    assert fabric.skipped == ((7, "Non-Chassis Nodes"),)
    assert fabric.initiator == 0x0008F10403960558
    isr, sw6 = 0x005442BA00003080, 0x0008F10400410015
    nodes = {n.guid: n for n in fabric.nodes}
    assert (nodes[isr].ports, nodes[isr].description, nodes[isr].lid) == (24, "ISR9024 Voltaire", 6)
    assert (nodes[sw6].ports, nodes[sw6].description, nodes[sw6].lid) == (8, "SW-6IB4 Voltaire", 3)
    assert nodes[isr].name is None and nodes[sw6].name is None
    assert {(e.port, e.peer_port) for e in fabric.links if e.guid == isr and e.peer_guid == sw6} == {
        (10, 1),
        (6, 3),
    }
    assert [e.port for e in fabric.links if e.guid == isr] == [22, 10, 8, 6, 12]
    widths = {(e.guid, e.port): e.width for e in fabric.links}
    assert widths[(isr, 10)] == "4xSDR" and widths[(sw6, 1)] == "1xSDR"
    assert widths[(0x0008F10403960558, 1)] == "1xSDR" and widths[(isr, 12)] == "4xSDR"
    cas = [n for n in fabric.nodes if n.kind == "ca"]
    assert len(cas) == 4 and all(n.name is None for n in cas)
    assert all(n.description == "MT23108 InfiniHost Mellanox Technologies" for n in cas)
    cabling = {
        (e.guid, e.port): (e.peer_guid, e.peer_port) for e in fabric.links if nodes[e.guid].kind == "ca"
    }
    assert cabling == {
        (0x0008F10403960558, 1): (isr, 12),
        (0x0008F10403960558, 2): (isr, 8),
        (0x0008F10403961354, 1): (isr, 22),
        (0x0008F10403960984, 1): (sw6, 6),
        (0x005442B100004900, 1): (sw6, 4),
    }


def test_ports_form_osc(corpus: Path) -> None:
    fabric = ib.parse_ibnetdiscover_ports((corpus / OSC).read_text(), OSC)
    nodes = {n.guid: n for n in fabric.nodes}
    cas = {
        (nodes[e.guid].description, e.guid, e.lid, e.port): (
            nodes[e.peer_guid].description,
            e.peer_guid,
            e.peer_lid,
            e.peer_port,
            e.width,
        )
        for e in fabric.links
        if nodes[e.guid].kind == "ca" and e.peer_guid
    }
    assert cas == {
        ("o0001 HCA-1", 0x7CFE9003003B4BDE, 134, 1): ("ib-i1l1s01", 0x7CFE9003009CE5B0, 1719, 10, "4x EDR"),
        ("o0002 HCA-1", 0x7CFE9003003B4B96, 133, 1): ("ib-i1l1s01", 0x7CFE9003009CE5B0, 1719, 11, "4x EDR"),
        ("p0001 HCA-1", 0x506B4B0300CC02A6, 1432, 1): ("ib-i4l1s01", 0x506B4B03005C2740, 2052, 35, "4x EDR"),
    }
    up = next(e for e in fabric.links if e.guid == 0x7CFE9003009CE5B0 and e.port == 1)
    assert (up.peer_guid, up.peer_lid, up.peer_port, nodes[0x7CFE900300B07320].description) == (
        0x7CFE900300B07320,
        1516,
        1,
        "ib-i1l2s01",
    )
    unconnected = {(e.guid, e.lid, e.port, e.width) for e in fabric.links if e.peer_guid is None}
    assert unconnected == {(0x506B4B03005C2740, 2052, 37, "4x ???"), (0x08C0EB0300ADD20E, 1781, 80, "4x SDR")}
    classified = ib.classify(fabric)
    assert classified.tier[0x7CFE9003009CE5B0] == 0 and classified.tier[0x7CFE900300B07320] == 1


def test_ports_form_hdr_padded_names(corpus: Path) -> None:
    fabric = ib.parse_ibnetdiscover_ports((corpus / HDR).read_text(), HDR)
    nodes = {n.guid: n for n in fabric.nodes}
    worker = next(e for e in fabric.links if e.guid == 0xB83FD20300DA1138)
    assert (worker.lid, worker.peer_lid, worker.peer_guid, worker.peer_port) == (
        88,
        51,
        0x946DAE0300630BF6,
        79,
    )
    assert nodes[0xB83FD20300DA1138].name == "worker20"
    assert nodes[0x946DAE0300630BF6].description == "5FB0405-leaf-IB01"
    sharp = next(e for e in fabric.links if e.guid == 0x946DAE0300630BFE and e.peer_lid == 51)
    assert sharp.peer_port == 81 and nodes[0x946DAE0300630BFE].aggregation_node
    assert nodes[0x946DAE0300618C83].description == "5FB0406-spine-IB02"
    assert nodes[0x946DAE030053EC1A].description == "5FB0406-spine-IB03"
    unconnected = {(e.lid, e.port, e.width) for e in fabric.links if e.peer_guid is None}
    assert unconnected == {(24, 1, "4x SDR"), (25, 1, "4x SDR"), (478, 22, "4x QDR")}
    assert nodes[0x0002C9020040F160].description == "Infiniscale-IV Mellanox Technologies"
    assert nodes[0x0002C9020040F160].name is None


def test_malformed_topology_lines_name_the_line() -> None:
    text = 'Switch\t4 "S-0000000000000001"\t\t# "MF0;leaf:X/U1" enhanced port 0 lid 1 lmc 0\n[x] nonsense\n'
    with pytest.raises(ParseError, match=r"fabric.ib: ibnetdiscover:2: unreadable port line"):
        ib.parse_ibnetdiscover(text)
    with pytest.raises(ParseError, match=r":1: unreadable port line"):
        ib.parse_ibnetdiscover_ports("CA 1 1 0xZZ 4x EDR\n")
    with pytest.raises(ParseError, match="not a fabric map"):
        ib.parse_fabric_map('{"kind": "something else"}')
    with pytest.raises(ParseError, match="not JSON"):
        ib.parse_fabric_map("<html>")
