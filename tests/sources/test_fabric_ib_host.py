"""One host's own uplink: ibstat + iblinkinfo (+ ibswitches), and the ``fabric.ib`` source end to end.

The source never sweeps the fabric: it reads the host's port GUIDs and LIDs from sysfs and asks the
one switch at the far end of each ACTIVE port (``iblinkinfo -D 0,1``), or reads a fabric map.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nodetopo import fabric as ib
from nodetopo.errors import ParseError
from nodetopo.host import HostRoot, Replay, ReplayRunner
from nodetopo.model import ConditionReason
from nodetopo.sources import ibstat
from nodetopo.sources.base import Context
from nodetopo.sources.fabric import infiniband
from tests.sources.ibdiags_extra import join_linkinfo, parse_ibswitches
from tests.sysfs_trees import write_tree

IBSTAT = "fabric/ib-host/ibstat-n01-cx4-edr-opensm-host-lenovo19a.txt"
GREP = "fabric/ib-host/iblinkinfo-grep-Up-n01-sb7700-lenovo19a.txt"
FULL = "fabric/ib-host/iblinkinfo-sb7700-edr-3hosts-truncated-at-port18-lenovo-edr76.txt"
SWITCHES = "fabric/ib-host/ibswitches-gsi-fdr-hdr-mixed-anonymized.txt"


@pytest.mark.corpus
def test_ibstat_n01(corpus: Path) -> None:
    (ca,) = ibstat.parse_ibstat((corpus / IBSTAT).read_text())
    (port,) = ca.ports
    assert (ca.name, ca.ca_type, ca.node_guid, ca.system_guid) == (
        "mlx5_0",
        "MT4115",
        "0xec0d9a03003d677a",
        "0xec0d9a03003d677a",
    )
    assert (
        port.number,
        port.state,
        port.phys_state,
        port.rate_gbps,
        port.lid,
        port.port_guid,
        port.link_layer,
    ) == (
        1,
        "ACTIVE",
        "LinkUp",
        100.0,
        1,
        "0xec0d9a03003d677a",
        "InfiniBand",
    )


@pytest.mark.corpus
def test_grep_up_lines_join_by_lid(corpus: Path) -> None:
    lines = ib.parse_iblinkinfo((corpus / GREP).read_text(), GREP)
    assert len(lines) == 6 and all(line.header is None for line in lines)
    cas = {(u.guid, u.lid, u.port): (u.switch_lid, u.switch_port) for u in join_linkinfo(lines)}
    assert cas == {
        (0xEC0D9A03003D62BE, 4, 1): (2, 17),
        (0x248A070300928186, 3, 1): (2, 36),
        (0xEC0D9A03003D677A, 1, 1): (2, 18),
    }
    switch = {(p.lid, p.port): (p.peer_lid, p.peer_port, p.peer_description) for p in lines if p.guid is None}
    assert switch == {
        (2, 17): (4, 1, "n02 HCA-1"),
        (2, 18): (1, 1, "n01 HCA-1"),
        (2, 36): (3, 1, "mgt mlx5_0"),
    }
    n01 = next(p for p in lines if p.guid == 0xEC0D9A03003D677A)
    assert (n01.state, n01.phys_state, n01.width) == ("Active", "LinkUp", "4X 25.78125 Gbps")
    assert ib.switch_name(n01.peer_description) == "SB7700"
    # names come only from the switch's own lines, joined by LID: LID 1 is "n01 HCA-1"
    names = {p.peer_lid: ib.ca_host(p.peer_description)[0] for p in lines if p.guid is None}
    assert names == {4: "n02", 1: "n01", 3: "mgt"}


@pytest.mark.corpus
def test_full_iblinkinfo_truncated(corpus: Path) -> None:
    lines = ib.parse_iblinkinfo((corpus / FULL).read_text(), FULL)
    headers = {p.header for p in lines}
    assert headers == {"n02 HCA-1", "mgt mlx5_0", "MF0;SB7700:MSB7700/U1"}
    switch = [p for p in lines if p.switch_guid is not None]
    assert {p.switch_guid for p in switch} == {0x506B4B0300820910} and {p.lid for p in switch} == {2}
    down = [p for p in switch if p.state == "Down"]
    assert [p.port for p in down] == list(range(1, 17))
    assert all(p.phys_state == "Polling" and p.peer_lid is None and p.peer_description == "" for p in down)
    up = {p.port: (p.peer_lid, p.peer_port, p.peer_description) for p in switch if p.state == "Active"}
    assert up == {17: (4, 1, "n02 HCA-1"), 18: (1, 1, "n01 HCA-1")}
    cas = {(u.guid, u.lid): (u.switch_guid, u.switch_lid, u.switch_port) for u in join_linkinfo(lines)}
    assert cas == {
        (0xEC0D9A03003D62BE, 4): (0x506B4B0300820910, 2, 17),
        (0x248A070300928186, 3): (0x506B4B0300820910, 2, 36),
    }
    assert max(p.port for p in switch) == 18  # the paste stops at port 18: no spine is visible


@pytest.mark.corpus
def test_ibswitches(corpus: Path) -> None:
    switches = parse_ibswitches((corpus / SWITCHES).read_text(), SWITCHES)
    assert [(hex(s.guid), s.ports, s.description, s.lid, s.name) for s in switches] == [
        ("0xf45214030095bdf0", 36, "MF0;fdrleaf-xx5a-66:SX0000/U1", 574, "fdrleaf-xx5a-66"),
        ("0xf45214030095b470", 36, "MF0;leaf-xx5a-60:SX0000/U1", 631, "leaf-xx5a-60"),
        ("0x1070fd0300370ea2", 41, "MF0;qm8700-5:MQM8700/U1", 774, "qm8700-5"),
        ("0x1070fd030003aeb8", 41, "hdrleaf-xx5a-60", 924, "hdrleaf-xx5a-60"),
        ("0x7cfe90030097cd70", 36, "SwitchX -  Mellanox Technologies", 203, None),
        ("0xf45214030095d610", 36, "MF0;leaf-xx5a-2c:SX0000/U1", 27, "leaf-xx5a-2c"),
        ("0x8c0eb0300a026b6", 81, "hdrleaf-xx6a-26", 13, "hdrleaf-xx6a-26"),
        ("0x1070fd03000f4b72", 41, "Quantum Mellanox Technologies", 770, None),
    ]
    with pytest.raises(ParseError, match=r"ibswitches:1: expected 'Switch : 0x<guid>"):
        parse_ibswitches("garbage\n")


def host(tmp_path: Path, ports: dict[tuple[str, int], tuple[str, int, str]]) -> HostRoot:
    """A host root with InfiniBand ports: (ca, port) -> (state, lid, port guid hex)."""
    entries: dict[str, str] = {}
    for (ca, number), (state, lid, guid) in ports.items():
        base = f"sys/class/infiniband/{ca}/ports/{number}"
        code = {"ACTIVE": "4: ACTIVE", "DOWN": "1: DOWN"}[state]
        entries[f"{base}/state"] = code + "\n"
        entries[f"{base}/link_layer"] = "InfiniBand\n"
        entries[f"{base}/lid"] = f"0x{lid:x}\n"
        g = guid.removeprefix("0x").rjust(16, "0")
        entries[f"{base}/gids/0"] = (
            "fe80:0000:0000:0000:" + ":".join(g[i : i + 4] for i in range(0, 16, 4)) + "\n"
        )
    return write_tree(tmp_path, entries)


@pytest.mark.corpus
def test_source_asks_only_the_neighbour_switch(corpus: Path, tmp_path: Path) -> None:
    """n01's mlx5_0 (sysfs: LID 1, GUID 0xec0d...677a) → SB7700 port 18, from a partial iblinkinfo."""
    root = host(tmp_path, {("mlx5_0", 1): ("ACTIVE", 1, "0xec0d9a03003d677a")})
    runner = ReplayRunner({infiniband.neighbour_query_argv("mlx5_0", 1): corpus / FULL})
    result = infiniband.collect(Context(root=root, runner=runner))
    assert runner.calls == [("iblinkinfo", "-C", "mlx5_0", "-P", "1", "-D", "0,1", "--switches-only")]
    assert not any(c[0] == "ibnetdiscover" for c in runner.calls)
    (observation,) = result.facts.network
    (n,) = observation.neighbours
    assert (n.nic, n.port, n.switch_id, n.switch_name, n.switch_port, n.state) == (
        "mlx5_0",
        1,
        "0x506b4b0300820910",
        "SB7700",
        "18",
        "ACTIVE",
    )
    assert [(t.level, t.id, t.name) for t in observation.tiers] == [(0, "S-506b4b0300820910", "SB7700")]
    assert result.facts.conditions == ()


def test_source_on_a_host_without_infiniband(tmp_path: Path) -> None:
    runner = ReplayRunner({})
    result = infiniband.collect(Context(root=HostRoot(tmp_path), runner=runner))
    assert runner.calls == []  # nothing runs on a node without IB ports
    assert [c.reason for c in result.facts.conditions] == [ConditionReason.UNAVAILABLE]
    assert result.facts.network == ()


@pytest.mark.corpus
def test_down_port_is_not_used_and_half_cabled_port_is_degraded(corpus: Path, tmp_path: Path) -> None:
    root = host(
        tmp_path,
        {
            ("mlx5_0", 1): ("ACTIVE", 7, "0x1111111111111111"),
            ("mlx5_1", 1): ("DOWN", 0, "0x2222222222222222"),
        },
    )
    # the switch shows no port cabled to LID 7: the cable is not where sysfs says it is
    runner = ReplayRunner({infiniband.neighbour_query_argv("mlx5_0", 1): corpus / FULL})
    result = infiniband.collect(Context(root=root, runner=runner))
    assert len(runner.calls) == 1  # the DOWN port is not queried
    (observation,) = result.facts.network
    assert observation.tiers == ()
    (condition,) = result.facts.conditions
    assert condition.reason is ConditionReason.DEGRADED and condition.source == "fabric.ib"
    assert "mlx5_0 port 1 (LID 7)" in condition.message
    assert "mlx5_1 port 1 is DOWN: not used" in result.facts.sources[0].message


def test_neighbour_query_timeout_and_garbage(tmp_path: Path) -> None:
    root = host(tmp_path, {("mlx5_0", 1): ("ACTIVE", 1, "0xec0d9a03003d677a")})
    argv = infiniband.neighbour_query_argv("mlx5_0", 1)
    hung = infiniband.collect(Context(root=root, runner=ReplayRunner({argv: Replay(hang=True)})))
    assert [c.reason for c in hung.facts.conditions] == [ConditionReason.TIMEOUT]
    garbage = infiniband.collect(Context(root=root, runner=ReplayRunner({argv: "<html>oops</html>\n"})))
    assert [c.reason for c in garbage.facts.conditions] == [ConditionReason.PARSE_ERROR]
    assert "fabric.ib" in garbage.facts.conditions[0].message


@pytest.mark.corpus
def test_source_reads_a_fabric_map(corpus: Path, tmp_path: Path) -> None:
    fabric = ib.parse_ibnetdiscover(
        (
            corpus / "fabric/ibnetdiscover/topograph-gb200-nvl72-superpod-2tier-ndr-rail-example.out"
        ).read_text()
    )
    path = tmp_path / "map.json"
    path.write_text(json.dumps(ib.fabric_map(fabric)))
    root = host(
        tmp_path / "host",
        {
            ("mlx5_0", 1): ("ACTIVE", 241, "0xe09d73030015701a"),
            ("mlx5_1", 1): ("ACTIVE", 242, "0xe09d73030015701e"),
            ("mlx5_4", 1): ("ACTIVE", 248, "0xe09d730300156ff2"),
            ("mlx5_5", 1): ("DOWN", 0, "0xe09d730300156ff6"),
        },
    )
    runner = ReplayRunner({})
    result = infiniband.collect(Context(root=root, runner=runner, fabric_map=str(path)))
    assert runner.calls == []
    (observation,) = result.facts.network
    tier0, tier1 = observation.tiers
    assert tier0.name == "B09-P1-IBLEAF-01-05+B09-P1-IBLEAF-02-05+B09-P1-IBLEAF-03-05"
    assert tier1.id.startswith("t1-")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    broken = infiniband.collect(Context(root=root, runner=runner, fabric_map=str(bad)))
    assert [c.reason for c in broken.facts.conditions] == [ConditionReason.PARSE_ERROR]


@pytest.mark.corpus
def test_an_unreadable_port_withholds_the_tiers(corpus: Path, tmp_path: Path) -> None:
    root = host(tmp_path, {("mlx5_0", 1): ("ACTIVE", 1, "0xec0d9a03003d677a")})
    broken = tmp_path / "sys/class/infiniband/mlx5_1/ports/1"
    (broken / "state").mkdir(parents=True)  # a directory where sysfs has a file
    (broken / "link_layer").write_text("InfiniBand\n")
    runner = ReplayRunner({infiniband.neighbour_query_argv("mlx5_0", 1): corpus / FULL})
    result = infiniband.collect(Context(root=root, runner=runner))
    (observation,) = result.facts.network
    assert observation.neighbours[0].switch_name == "SB7700" and observation.tiers == ()
    (condition,) = result.facts.conditions
    assert condition.reason is ConditionReason.DEGRADED and "mlx5_1/ports/1/state" in condition.message
