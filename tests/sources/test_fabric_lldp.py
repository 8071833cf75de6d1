"""LLDP neighbours: every fact fabric/SOURCES.md lists for the lldp/ corpus, and the source's conditions."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodetopo.errors import ParseError
from nodetopo.host import HostRoot, Replay, ReplayRunner
from nodetopo.model import ConditionReason
from nodetopo.sources.base import Context
from nodetopo.sources.fabric import lldp
from nodetopo.sources.fabric.lldp import LldpNeighbour
from tests.sources.lldp_keyvalue import parse_lldp_keyvalue

RAIL = "fabric/lldp/lldpcli-json0-gpu-node-4rail-sonic-leaf01-04-unifabric.json"
H3C = "fabric/lldp/lldpcli-json0-h3c-access-plus-host-to-host-unifabric.json"
CUMULUS = "fabric/lldp/lldpctl-keyvalue-netbox-agent-cumulus.txt"
DEDIBOX2 = "fabric/lldp/lldpctl-keyvalue-netbox-agent-dedibox2.txt"
QFX = "fabric/lldp/lldpctl-keyvalue-netbox-agent-qfx.txt"
DEDIBOX1 = "fabric/lldp/lldpctl-keyvalue-netbox-agent-dedibox1.txt"


def table(neighbours: tuple[LldpNeighbour, ...]) -> dict[str, tuple[object, ...]]:
    return {
        n.interface: (n.chassis_name, n.chassis_id, n.mgmt_ips[:1], n.port_name, n.is_switch)
        for n in neighbours
    }


@pytest.mark.corpus
def test_four_rails_to_four_sonic_leaves(corpus: Path) -> None:
    neighbours = lldp.parse_lldp_json((corpus / RAIL).read_text(), RAIL)
    assert table(neighbours) == {
        "ens108np0": ("LEAF01", "70:06:92:6e:33:18", ("10.193.77.201",), "Ethernet184", True),
        "ens110np0": ("LEAF02", "70:06:92:6e:34:80", ("10.193.77.202",), "Ethernet184", True),
        "ens841np0": ("LEAF03", "70:06:92:6e:32:1c", ("10.193.77.203",), "Ethernet184", True),
        "ens842np0": ("LEAF04", "70:06:92:6e:34:5c", ("10.193.77.204",), "Ethernet184", True),
        "ens1np0": ("StorageSW", "70:06:92:6e:32:64", ("10.193.77.211",), "Ethernet120", True),
    }
    assert {n.port_id_type for n in neighbours} == {"local"}
    assert all(
        (n.chassis_descr or "").startswith(
            "SONiC Software Version: SONiC.CuOS_4.0-0.R_X86_64_ztp - HwSku: ds730-32d"
        )
        for n in neighbours
    )
    # in file order the rids are 1 (ens1np0), 6, 7, 3, 2: not the interface order
    assert {n.interface: n.rid for n in neighbours} == {
        "ens1np0": 1,
        "ens108np0": 6,
        "ens110np0": 7,
        "ens841np0": 3,
        "ens842np0": 2,
    }
    (tier,) = lldp.lldp_tiers(neighbours)
    assert tier.level == 0 and len(tier.members) == 5 and tier.id.startswith("t0-")


@pytest.mark.corpus
def test_h3c_access_switch_and_a_server_neighbour(corpus: Path) -> None:
    neighbours = lldp.parse_lldp_json((corpus / H3C).read_text(), H3C)
    by = {n.interface: n for n in neighbours}
    h3c = by["enp129s0f0"]
    assert (h3c.chassis_name, h3c.chassis_id, h3c.mgmt_ips, h3c.port_id_type, h3c.port_name, h3c.ttl) == (
        "DaoCloud_ShangPu_H3C_D01_AccessSwitch",
        "58:c7:ac:5f:2d:2c",
        (),
        "ifname",
        "GigabitEthernet1/0/17",
        121,
    )
    assert h3c.port_descr == "GigabitEthernet1/0/17 Interface"
    assert "\r\n" in (h3c.chassis_descr or "") and h3c.is_switch
    assert h3c.unknown_tlvs == (("00,80,C2", "7", "01,00,00,00,00"),)
    assert {n.rid for n in neighbours if n.interface != "enp129s0f0"} == {2}
    for name, port_mac in (("enp5s0f0np0", "e8:eb:d3:93:ae:10"), ("enp11s0f0np0", "b8:3f:d2:9f:09:42")):
        server = by[name]
        assert (server.chassis_name, server.chassis_id, server.port_id_type, server.port_id) == (
            "10-20-1-50",
            "ac:1f:6b:25:86:64",
            "mac",
            port_mac,
        )
        assert server.mgmt_ips == ("10.20.1.50", "fe80::ae1f:6bff:fe25:8664")
        assert (server.chassis_descr or "").startswith("Ubuntu 24.04.2 LTS Linux 6.8.0-53-generic")
        # it advertises Bridge and Router enabled: capabilities alone would call it a switch
        assert ("Bridge", True) in server.capabilities and ("Router", True) in server.capabilities
        assert not server.is_switch
    (tier,) = lldp.lldp_tiers(neighbours)
    assert (tier.id, tier.name) == ("58:c7:ac:5f:2d:2c", "DaoCloud_ShangPu_H3C_D01_AccessSwitch")


@pytest.mark.corpus
def test_cumulus_keyvalue_missing_name_is_unknown(corpus: Path) -> None:
    neighbours = parse_lldp_keyvalue((corpus / CUMULUS).read_text(), CUMULUS)
    by = {n.interface: n for n in neighbours}
    assert (by["eno1"].chassis_name, by["eno1"].chassis_id, by["eno1"].port_name, by["eno1"].port_descr) == (
        "toto-chassis.dc42",
        "e4:f0:04:b6:47:32",
        "swp46",
        "BXVWNR2:lom2",
    )
    assert by["eno1"].mgmt_ips == ("10.160.20.18", "fe80::e6f0:4ff:feb6:4732")
    assert by["eno1"].chassis_descr == "Cumulus Linux version 3.7.3 running on Dell EMC S4100"
    eno2 = by["eno2d1"]
    assert eno2.chassis_name is None  # line 33 repeats eno1's name: it is not eno2d1's
    assert (eno2.chassis_id, eno2.mgmt_ips[0], eno2.port_name, eno2.port_descr) == (
        "e4:f0:04:b6:4e:32",
        "10.160.20.17",
        "swp46",
        "BXVWNR2:lom1",
    )
    assert eno2.chassis_descr == "Cumulus Linux version 3.7.5 running on Dell EMC S4100"
    assert all(n.is_switch for n in neighbours)


@pytest.mark.corpus
def test_dedibox2_multiline_description(corpus: Path) -> None:
    (n,) = parse_lldp_keyvalue((corpus / DEDIBOX2).read_text(), DEDIBOX2)
    assert (n.interface, n.chassis_name, n.chassis_id, n.mgmt_ips, n.port_name, n.port_descr) == (
        "eno1",
        "s35-b12.dc3",
        "38:20:56:67:90:80",
        ("10.43.31.35",),
        "Gi1/0/29",
        "GigabitEthernet1/0/29",
    )
    assert (n.chassis_descr or "").count("\n") == 3
    assert (n.chassis_descr or "").endswith("Compiled Mon 16-Feb-15 08:16 by prod_rel_team")
    assert n.vlan_id == 140


@pytest.mark.corpus
def test_qfx_local_port_index_uses_the_description(corpus: Path) -> None:
    neighbours = parse_lldp_keyvalue((corpus / QFX).read_text(), QFX)
    assert {
        n.interface: (n.chassis_name, n.chassis_id, n.mgmt_ips, n.port_id, n.port_name) for n in neighbours
    } == {
        "eth0": ("sw-filer-f06.dc42", "40:a6:77:7a:72:00", ("10.192.192.116",), "512", "xe-0/0/1"),
        "eth1": ("sw-filer-f05.dc42", "40:a6:77:7c:fb:20", ("10.192.192.115",), "512", "xe-0/0/1"),
    }
    assert "JUNOS 14.1X53-D43.7" in (neighbours[0].chassis_descr or "")
    assert "JUNOS 17.3R3-S3.3" in (neighbours[1].chassis_descr or "")
    assert {n.vlan_id for n in neighbours} == {296}
    serials = [bytes(int(x, 16) for x in n.unknown_tlvs[0][2].split(",")).decode() for n in neighbours]
    assert serials == ["VF3715030164", "VF3715030045"]
    assert {n.unknown_tlvs[0][:2] for n in neighbours} == {("00,90,69", "1")}


@pytest.mark.corpus
def test_dedibox1_older_lldpd(corpus: Path) -> None:
    (n,) = parse_lldp_keyvalue((corpus / DEDIBOX1).read_text(), DEDIBOX1)
    assert (n.interface, n.chassis_name, n.chassis_id, n.mgmt_ips, n.port_name, n.ttl, n.age) == (
        "enp1s0f0",
        "s120-f3-2.itx4",
        "00:07:cb:0b:6c:d7",
        ("10.48.16.15",),
        "RJ-9",
        120,
        "145 days, 00:00:39",
    )


def test_compact_json_form() -> None:
    """``lldpcli -f json``: one interface is an object; a named chassis is keyed by its name."""
    text = (
        '{"lldp": {"interface": {"veth-host": {"via": "LLDP", "rid": "1", "age": "0 day, 00:00:05",'
        ' "chassis": {"leaf-7": {"id": {"type": "mac", "value": "02:00:00:00:00:07"},'
        ' "capability": [{"type": "Bridge", "enabled": true}]}},'
        ' "port": {"id": {"type": "ifname", "value": "swp7"}, "descr": "to host", "ttl": "120"}}}}}'
    )
    (n,) = lldp.parse_lldp_json(text)
    assert (n.interface, n.chassis_name, n.chassis_id, n.port_name, n.is_switch) == (
        "veth-host",
        "leaf-7",
        "02:00:00:00:00:07",
        "swp7",
        True,
    )


def test_garbage_is_a_parse_error_naming_the_source() -> None:
    with pytest.raises(ParseError, match=r"fabric\.lldp"):
        lldp.parse_lldp_json("not json")
    with pytest.raises(ParseError, match=r"fabric.lldp: lldpcli -f keyvalue:1"):
        parse_lldp_keyvalue("chassis.name=x\n")


@pytest.mark.corpus
def test_source_reports_a_server_neighbour_as_a_condition(corpus: Path, lldpd_root: Path) -> None:
    runner = ReplayRunner({lldp.LLDPCLI_ARGV: corpus / H3C})
    result = lldp.collect(context(runner, lldpd_root))
    (observation,) = result.facts.network
    assert [t.id for t in observation.tiers] == ["58:c7:ac:5f:2d:2c"]
    (condition,) = result.facts.conditions
    assert condition.source == "fabric.lldp" and condition.reason is ConditionReason.UNAVAILABLE
    assert "enp5s0f0np0: neighbour 10-20-1-50 is a host, not a switch" in condition.message


STAMPED = (
    "2026-12-01T07:25:39 [WARN/control] unable to connect to socket /run/lldpd.socket: "
    "No such file or directory\n"
)


def context(runner: ReplayRunner, root: Path) -> Context:
    return Context(root=HostRoot(root), runner=runner)


@pytest.fixture
def lldpd_root(tmp_path: Path) -> Path:
    """A host root where lldpd runs: ``run/lldpd.socket`` exists (an empty file, as in a bundle)."""
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "lldpd.socket").write_text("")
    return tmp_path


def test_no_lldpd_socket_runs_nothing(tmp_path: Path) -> None:
    """Most nodes have no lldpd: the source then costs no process at all."""
    runner = ReplayRunner({lldp.LLDPCLI_ARGV: "{}"})
    result = lldp.collect(context(runner, tmp_path))
    assert runner.calls == []
    (condition,) = result.facts.conditions
    assert condition.reason is ConditionReason.UNAVAILABLE
    assert condition.message == "lldpd is not running (no /run/lldpd.socket or /var/run/lldpd.socket)"


def test_source_without_lldpcli_or_with_lldpd_stopped(lldpd_root: Path) -> None:
    missing = lldp.collect(context(ReplayRunner({}), lldpd_root))
    assert [c.reason for c in missing.facts.conditions] == [ConditionReason.UNAVAILABLE]
    assert "lldpcli is not installed" in missing.facts.conditions[0].message
    stopped = lldp.collect(
        context(ReplayRunner({lldp.LLDPCLI_ARGV: Replay(returncode=1, stderr=STAMPED)}), lldpd_root)
    )
    # the time lldpcli stamps on its message is dropped: two scans of a stopped lldpd are equal
    assert stopped.facts.conditions[0].message == (
        "lldpcli -f json0 show neighbors: lldpd is not answering: "
        "unable to connect to socket /run/lldpd.socket: No such file or directory"
    )
    hung = lldp.collect(context(ReplayRunner({lldp.LLDPCLI_ARGV: Replay(hang=True)}), lldpd_root))
    assert [c.reason for c in hung.facts.conditions] == [ConditionReason.TIMEOUT]


@pytest.mark.corpus
def test_a_captured_lldp_answer_replays(corpus: Path, tmp_path: Path) -> None:
    """capture leaves run/lldpd.socket (an empty file) when lldpd answered, so the bundle replays it."""
    from nodetopo.bundle.capture import capture_commands
    from nodetopo.topology.discover import bundle_context

    capture_commands(ReplayRunner({lldp.LLDPCLI_ARGV: corpus / RAIL}), tmp_path)
    assert (tmp_path / "run" / "lldpd.socket").read_text() == ""
    (observation,) = lldp.collect(bundle_context(tmp_path)).facts.network
    assert {n.switch_name for n in observation.neighbours} == {
        "LEAF01",
        "LEAF02",
        "LEAF03",
        "LEAF04",
        "StorageSW",
    }
    stopped = tmp_path / "stopped"
    capture_commands(ReplayRunner({lldp.LLDPCLI_ARGV: Replay(returncode=1, stderr=STAMPED)}), stopped)
    assert not (stopped / "run").exists()
