"""``ibstat`` and ``ibv_devinfo``: the real corpus outputs, and ``collect()`` through a ReplayRunner."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodetopo.errors import ParseError
from nodetopo.host import HostRoot, Replay, ReplayRunner
from nodetopo.model import ConditionReason, IbstatCa
from nodetopo.sources import ibstat
from nodetopo.sources.base import Context

PANIC = "ibstat/gpud-ibstat.39.0.a100.failed.ibpanic.exit-255.0.txt"


def ports(cas: tuple[IbstatCa, ...]) -> list[tuple[str, str | None, str | None, float | None, str | None]]:
    """(CA, State, Physical state, Rate, Link layer) of each CA's only port."""
    rows = []
    for ca in cas:
        (port,) = ca.ports
        assert port.number == 1
        rows.append((ca.name, port.state, port.phys_state, port.rate_gbps, port.link_layer))
    return rows


@pytest.mark.corpus
def test_ibpanic_keeps_the_adapters_read_before_it(corpus: Path) -> None:
    cas, problems = ibstat._read_ibstat((corpus / PANIC).read_text(), "ibstat")
    assert [ca.name for ca in cas] == [f"mlx5_{n}" for n in range(8)]
    assert {(ca.ca_type, ca.firmware, ca.hardware_version) for ca in cas} == {("MT4124", "20.41.1000", "0")}
    assert set(ports(cas)) == {(ca.name, "ACTIVE", "LinkUp", 200.0, "InfiniBand") for ca in cas}
    assert all(ca.ports[0].port_guid and ca.ports[0].port_guid.startswith("0x00155d") for ca in cas)
    assert cas[0].node_guid == "0x00155dfffe3411eb" and cas[0].system_guid == "0xb83fd203006e2704"
    assert cas[0].ports[0].lid == 13247
    assert problems == [
        "ibpanic: [1400444] main: stat of IB device 'mlx5_8' failed: No such file or directory"
    ]


@pytest.mark.corpus
def test_a100_mixed_ethernet_and_infiniband(corpus: Path) -> None:
    cas = ibstat.parse_ibstat((corpus / "ibstat/gpud-ibstat.47.0.a100.all.active.0.txt").read_text())
    assert len(cas) == 9 and {ca.ca_type for ca in cas} == {"MT4126"}
    assert ports(cas)[0] == ("mlx5_0", "ACTIVE", "LinkUp", 200.0, "Ethernet")
    assert cas[0].firmware == "22.35.2302"
    assert {row[1:] for row in ports(cas)[1:]} == {("ACTIVE", "LinkUp", 200.0, "InfiniBand")}
    assert {ca.firmware[:5] for ca in cas[1:] if ca.firmware} == {"28.37"}


@pytest.mark.corpus
def test_h100_with_a_bluefield_bond(corpus: Path) -> None:
    cas = ibstat.parse_ibstat((corpus / "ibstat/gpud-ibstat.47.0.h100.all.active.2.txt").read_text())
    assert [ca.name for ca in cas] == [*(f"mlx5_{n}" for n in (0, 1, 4, 5, 6, 7, 8, 9)), "mlx5_bond_0"]
    bond = cas[-1]
    assert (bond.ca_type, bond.firmware, bond.hardware_version) == ("MT41692", "32.38.3056", "1")
    assert ports((bond,)) == [("mlx5_bond_0", "ACTIVE", "LinkUp", 200.0, "Ethernet")]
    assert {row[1:] for row in ports(cas[:-1])} == {("ACTIVE", "LinkUp", 400.0, "InfiniBand")}


@pytest.mark.corpus
def test_h100_roce_some_down_in_lexical_order(corpus: Path) -> None:
    cas = ibstat.parse_ibstat((corpus / "ibstat/gpud-ibstat.47.0.h100.some.down.1.txt").read_text())
    names = [ca.name for ca in cas]
    assert names[:5] == ["mlx5_0", "mlx5_1", "mlx5_10", "mlx5_11", "mlx5_2"] and len(names) == 12
    down = {name for name, state, *_ in ports(cas) if state == "DOWN"}
    assert down == {"mlx5_5", "mlx5_11"}
    assert {(row[2], row[3]) for row in ports(cas) if row[0] in down} == {("Disabled", 40.0)}
    assert {row[4] for row in ports(cas)} == {"Ethernet"}
    assert {ca.ca_type: row[3] for ca, row in zip(cas, ports(cas), strict=True) if row[1] == "ACTIVE"} == {
        "MT4129": 400.0,
        "MT4125": 100.0,
    }


@pytest.mark.corpus
def test_adapters_without_firmware_or_guid_lines(corpus: Path) -> None:
    cas = ibstat.parse_ibstat((corpus / "ibstat/h20-cx6lx-2ca-ethernet-down-disabled.txt").read_text())
    assert [(ca.name, ca.ca_type, ca.firmware, ca.node_guid) for ca in cas] == [
        ("mlx5_0", "MT4127", None, None),
        ("mlx5_1", "MT4127", None, None),
    ]
    assert set(ports(cas)) == {(name, "DOWN", "Disabled", 40.0, "Ethernet") for name in ("mlx5_0", "mlx5_1")}
    assert all(ca.ports[0].port_guid is None for ca in cas)


@pytest.mark.corpus
def test_ibv_devinfo_four_ports_down(corpus: Path) -> None:
    cas = ibstat.parse_ibv_devinfo(
        (corpus / "ibstat/ibv_devinfo-cx7-4port-ethernet-portdown-asus.txt").read_text()
    )
    assert [(ca.name, ca.ca_type, ca.firmware) for ca in cas] == [
        ("mlx5_0", "MT4129", "28.41.1000"),
        ("mlx5_1", "MT4129", "28.41.1000"),
        ("mlx5_2", "MT4129", "28.43.2566"),
        ("mlx5_3", "MT4129", "28.43.2566"),
    ]
    assert set(ports(cas)) == {(ca.name, "DOWN", None, None, "Ethernet") for ca in cas}
    assert cas[1].node_guid == "0x9c63c00300d420f1" and cas[1].system_guid == "0x9c63c00300d420f0"


@pytest.mark.corpus
def test_ibv_devinfo_one_port_active(corpus: Path) -> None:
    text = (corpus / "ibstat/ibv_devinfo-cx7-1port-ethernet-port-active-stelline.txt").read_text()
    (ca,) = ibstat.parse_ibv_devinfo(text)
    assert (ca.name, ca.ca_type, ca.firmware, ca.node_guid) == (
        "mlx5_1",
        "MT4129",
        "28.43.2566",
        "0xb8e92403004ede81",
    )
    assert ports((ca,)) == [("mlx5_1", "ACTIVE", None, None, "Ethernet")]


def test_ibv_devinfo_verbose_phys_state() -> None:
    text = (
        "hca_id:\tmlx5_0\n\tfw_ver:\t\t\t\t28.39.1002\n\tvendor_part_id:\t\t\t4129\n\tphys_port_cnt:\t\t\t1\n"
        "\t\tport:\t1\n\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n\t\t\tphys_state:\t\tLINK_UP (5)\n"
        "\t\t\tGID[  0]:\t\tfe80:0000:0000:0000:a288:c2ff:feab:cdef, RoCE v1\n"
        "\t\t\t\t\tfe80::a288:c2ff:feab:cdef\n"
        "\t\t\tlink_layer:\t\tEthernet\n"
    )
    (ca,) = ibstat.parse_ibv_devinfo(text)
    assert ports((ca,)) == [("mlx5_0", "ACTIVE", "LinkUp", None, "Ethernet")]


@pytest.mark.parametrize(
    ("parse", "text", "line"),
    [
        (ibstat.parse_ibstat, "\tCA type: MT4129\n", 1),
        (ibstat.parse_ibstat, "CA 'mlx5_0'\n\tPort 1:\n\t\tRate: fast\n", 2),
        (ibstat.parse_ibstat, "CA 'mlx5_0'\nCA 'mlx5_0'\n", 2),
        (ibstat.parse_ibstat, "CA 'mlx5_0'\n\tPort 1:\n\tPort 1:\n", 3),
        (ibstat.parse_ibstat, "CA 'mlx5_0'\n\t!!!\n", 2),
        (ibstat.parse_ibv_devinfo, "\tfw_ver: 1\n", 1),
        (ibstat.parse_ibv_devinfo, "hca_id: mlx5_0\n\t\tport:\t1\n\t\t\tstate:\t\tweird\n", 2),
    ],
)
def test_refusals(parse: object, text: str, line: int) -> None:
    assert callable(parse)
    with pytest.raises(ParseError) as caught:
        parse(text, "sample")
    assert caught.value.line == line and caught.value.source == "ibstat"


# --------------------------------------------------------------------------------------------
# collect()
# --------------------------------------------------------------------------------------------


def context(answers: dict[tuple[str, ...], Replay | str | Path]) -> Context:
    return Context(root=HostRoot("/nonexistent-test-root"), runner=ReplayRunner(answers), command_timeout_s=5)


def test_collect_without_tools_is_unavailable() -> None:
    facts = ibstat.collect(context({})).facts
    (cond,) = facts.conditions
    assert cond.reason is ConditionReason.UNAVAILABLE and "not installed" in cond.message
    assert facts.ibstat == () and [s.ok for s in facts.sources] == [False]


@pytest.mark.corpus
def test_collect_ibpanic_exit_255_is_degraded_with_the_adapters_kept(corpus: Path) -> None:
    answer = Replay(stdout=(corpus / PANIC).read_text(), returncode=255)
    facts = ibstat.collect(context({ibstat.IBSTAT_ARGV: answer})).facts
    assert len(facts.ibstat) == 8
    (cond,) = facts.conditions
    assert cond.reason is ConditionReason.DEGRADED and "ibpanic" in cond.message
    assert [s.ok for s in facts.sources] == [False]  # adapters kept, but the source had a problem


def test_collect_ibpanic_alone_is_unavailable() -> None:
    answer = Replay(
        stdout="", stderr="ibpanic: [42] main: can't list IB device names: No such file\n", returncode=255
    )
    facts = ibstat.collect(context({ibstat.IBSTAT_ARGV: answer})).facts
    (cond,) = facts.conditions
    assert cond.reason is ConditionReason.UNAVAILABLE and "can't list IB device names" in cond.message


@pytest.mark.corpus
def test_collect_falls_back_to_ibv_devinfo(corpus: Path) -> None:
    devinfo = corpus / "ibstat/ibv_devinfo-cx7-4port-ethernet-portdown-asus.txt"
    ctx = context({ibstat.IBV_DEVINFO_ARGV: devinfo})
    facts = ibstat.collect(ctx).facts
    assert [ca.name for ca in facts.ibstat] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    assert facts.conditions == () and facts.sources[0].message == "ibv_devinfo"
    assert isinstance(ctx.runner, ReplayRunner) and ctx.runner.calls == [("ibstat",), ("ibv_devinfo",)]


def test_collect_timeout_and_garbage() -> None:
    hung = ibstat.collect(context({ibstat.IBSTAT_ARGV: Replay(hang=True)})).facts
    assert [c.reason for c in hung.conditions] == [ConditionReason.TIMEOUT]
    garbage = ibstat.collect(context({ibstat.IBSTAT_ARGV: "Segmentation fault\n"})).facts
    assert [c.reason for c in garbage.conditions] == [ConditionReason.PARSE_ERROR]
    assert "line 1" in garbage.conditions[0].message or ":1:" in garbage.conditions[0].message
