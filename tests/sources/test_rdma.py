"""sources.rdma: parsers on text, the readers on real trees (hwloc, gpud) and on hand-made bad trees."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from sysfs_trees import Dir, Entry, HwlocTree, Link, gpud_infiniband_root, hwloc_tree, write_tree

from nodetopo.errors import ParseError
from nodetopo.host import HostRoot, ReplayRunner
from nodetopo.model import ConditionReason, NetDevice, PciAddress, RdmaDevice, RdmaPort
from nodetopo.sources import rdma
from nodetopo.sources.base import Context

# --------------------------------------------------------------------------------------------
# Parsers
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "state"),
    [
        ("4: ACTIVE\n", "ACTIVE"),
        ("1: DOWN", "DOWN"),
        ("5: ACTIVE_DEFER\n", "ACTIVE_DEFER"),
        ("active", "ACTIVE"),
    ],
)
def test_parse_port_state(text: str, state: str) -> None:
    assert rdma.parse_port_state(text, "s") == state


@pytest.mark.parametrize(
    ("text", "state"),
    [("5: LinkUp\n", "LinkUp"), ("3: Disabled", "Disabled"), ("2: Polling\n\x00", "Polling")],
)
def test_parse_phys_state(text: str, state: str) -> None:
    assert rdma.parse_phys_state(text, "p") == state


@pytest.mark.parametrize("text", ["", "4:", "4: 4", ": ACTIVE", "\x00"])
def test_parse_state_rejects_garbage(text: str) -> None:
    with pytest.raises(ParseError):
        rdma.parse_port_state(text, "/sys/class/infiniband/mlx5_0/ports/1/state")
    with pytest.raises(ParseError):
        rdma.parse_phys_state(text, "/sys/class/infiniband/mlx5_0/ports/1/phys_state")


@pytest.mark.parametrize(
    ("text", "gbps"),
    [
        ("400 Gb/sec (4X NDR)\n", 400.0),
        ("200 Gb/sec (2X NDR)", 200.0),
        ("2.5 Gb/sec (1X SDR)\n", 2.5),
        ("56 Gb/sec (4X FDR)\n", 56.0),
        ("10 Gb/sec (4X)\n", 10.0),
    ],
)
def test_parse_rate(text: str, gbps: float) -> None:
    assert rdma.parse_rate(text, "r") == gbps


@pytest.mark.parametrize("text", ["", "fast", "400 Mb/sec", "Gb/sec 400"])
def test_parse_rate_rejects_garbage(text: str) -> None:
    with pytest.raises(ParseError, match="Gb/sec"):
        rdma.parse_rate(text, "r")


def test_parse_guids_as_ibstat_prints_them() -> None:
    assert rdma.parse_guid("0002:c903:00f9:bfa0\n", "g") == "0x0002c90300f9bfa0"
    gid = "fe80:0000:0000:0000:0002:c903:00f9:bfa1\n"
    assert rdma.parse_port_guid(gid, "g") == "0x0002c90300f9bfa1"
    with pytest.raises(ParseError):
        rdma.parse_guid("0x0002c90300f9bfa0", "g")
    with pytest.raises(ParseError):
        rdma.parse_port_guid("fe80::1", "g")


def test_parse_lid_and_speed() -> None:
    assert rdma.parse_lid("0x3a4\n", "l") == 0x3A4
    with pytest.raises(ParseError):
        rdma.parse_lid("lid", "l")
    assert rdma.parse_speed("100000\n", "s") == 100000
    assert rdma.parse_speed("-1\n", "s") is None
    assert rdma.parse_speed("4294967295\n", "s") is None
    assert rdma.parse_speed("", "s") is None
    with pytest.raises(ParseError):
        rdma.parse_speed("10G", "s")


# --------------------------------------------------------------------------------------------
# Real trees
# --------------------------------------------------------------------------------------------


@pytest.fixture
def tree(request: pytest.FixtureRequest, corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> HwlocTree:
    return hwloc_tree(corpus, request.param, tmp_path_factory)


@pytest.mark.corpus
@pytest.mark.parametrize("tree", ["32em64t-2n8c+dax+nvme+mic+dimms"], indirect=True)
def test_connectx3_with_ipoib_and_a_dangling_scif_device(tree: HwlocTree) -> None:
    devices, conditions = rdma.read_rdma_devices(tree.root)
    assert devices == (
        RdmaDevice(
            name="mlx4_0",
            address=PciAddress.parse("0000:82:00.0"),
            hca_type="MT4099",
            firmware="2.11.500",
            board_id="DEL0A30000019",
            node_guid="0x0002c90300f9bfa0",
            ports=(
                RdmaPort(
                    number=1,
                    state="ACTIVE",
                    phys_state="LinkUp",
                    rate_gbps=56.0,
                    link_layer="InfiniBand",
                    netdevs=("ib0",),
                    lid=0x3A4,
                    port_guid="0x0002c90300f9bfa1",
                ),
            ),
        ),
    )
    # class/infiniband/scif0 points at devices/scif_dma_0, which the capture does not hold
    assert [(c.reason, c.message) for c in conditions] == [
        (ConditionReason.UNAVAILABLE, "/sys/class/infiniband/scif0: dangling symlink: left out")
    ]
    nets, net_conditions = rdma.read_net_devices(tree.root)
    assert net_conditions == ()
    # br0, eth0.1015, lo and mic0 are virtual (their targets are devices/virtual/...) and skipped
    assert [(n.name, str(n.address), n.operstate, n.speed_mbps) for n in nets] == [
        ("eth0", "0000:02:00.0", "up", 1000),
        ("eth1", "0000:02:00.3", "down", None),
        ("ib0", "0000:82:00.0", "up", None),  # IPoIB: empty speed file
    ]
    assert nets[0].mac == "84:8f:69:fe:cc:40"


@pytest.mark.corpus
@pytest.mark.parametrize("tree", ["40intel64-2g2n4c+pcilocality"], indirect=True)
def test_qlogic_hca_without_fw_ver(tree: HwlocTree) -> None:
    devices, conditions = rdma.read_rdma_devices(tree.root)
    assert conditions == ()
    (qib,) = devices
    assert (qib.name, str(qib.address), qib.hca_type, qib.firmware) == (
        "qib0",
        "0000:43:00.0",
        "InfiniPath_QLE7340",
        None,
    )
    assert [(p.number, p.state, p.rate_gbps, p.netdevs) for p in qib.ports] == [(1, "ACTIVE", 40.0, ("ib0",))]
    nets, _ = rdma.read_net_devices(tree.root)
    assert [n.name for n in nets] == ["eth0", "eth1", "eth2", "eth3", "ib0"]


@pytest.mark.corpus
@pytest.mark.parametrize("tree", ["2pa-pcidomain32bits"], indirect=True)
def test_virtio_net_is_placed_on_its_pci_function(tree: HwlocTree) -> None:
    nets, conditions = rdma.read_net_devices(tree.root)
    assert conditions == ()
    assert [(n.name, str(n.address)) for n in nets] == [("ens3", "0000:00:03.0")]  # device -> virtio0
    assert rdma.read_rdma_devices(tree.root) == ((), ())  # no class/infiniband: no RDMA, no problem


@pytest.mark.corpus
def test_gpud_h100_snapshot_reports_devices_without_pci_addresses(
    corpus: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    devices, conditions = rdma.read_rdma_devices(gpud_infiniband_root(corpus, tmp_path_factory))
    assert conditions == ()
    names = [d.name for d in devices]
    assert names == [
        "mlx5_0",
        "mlx5_1",
        "mlx5_4",
        "mlx5_5",
        "mlx5_6",
        "mlx5_7",
        "mlx5_8",
        "mlx5_9",
        "mlx5_bond_0",
    ]
    assert all(d.address is None and d.node_guid is None for d in devices)
    for device in devices[:-1]:
        assert (device.hca_type, device.firmware, device.board_id) == (
            "MT4129",
            "28.41.1000",
            "MT_0000000838",
        )
        assert [(p.number, p.state, p.phys_state, p.rate_gbps, p.link_layer) for p in device.ports] == [
            (1, "ACTIVE", "LinkUp", 400.0, "InfiniBand")
        ]
    bond = devices[-1]
    assert (bond.hca_type, bond.firmware) == ("MT41692", "32.38.3056")
    assert [(p.rate_gbps, p.link_layer, p.state) for p in bond.ports] == [(200.0, "Ethernet", "ACTIVE")]


# --------------------------------------------------------------------------------------------
# Hand-made trees
# --------------------------------------------------------------------------------------------

PCI_DEV = "sys/devices/pci0000:00/0000:00:01.0/0000:3b:00.0"


def _hca(ports: dict[int, dict[str, Entry]], netdevs: dict[str, dict[str, Entry]]) -> dict[str, Entry]:
    """An HCA ``mlx5_0`` on PCI function 0000:3b:00.0 with the given ports and netdevs."""
    dev = f"{PCI_DEV}/infiniband/mlx5_0"
    entries: dict[str, Entry] = {
        "sys/class/infiniband/mlx5_0": Link(
            "../../devices/pci0000:00/0000:00:01.0/0000:3b:00.0/infiniband/mlx5_0"
        ),
        f"{dev}/device": Link("../../../0000:3b:00.0"),
        f"{dev}/hca_type": "MT4129\n",
        f"{dev}/fw_ver": "28.39.1002\n",
        f"{dev}/board_id": "MT_0000000838\n",
        f"{dev}/node_guid": "a088:c203:0012:3456\n",
        f"{PCI_DEV}/vendor": "0x15b3\n",
    }
    for number, attributes in ports.items():
        base: dict[str, Entry] = {
            "state": "4: ACTIVE\n",
            "phys_state": "5: LinkUp\n",
            "rate": "400 Gb/sec (4X NDR)\n",
            "link_layer": "InfiniBand\n",
            "lid": "0x12\n",
        }
        base.update(attributes)
        entries.update({f"{dev}/ports/{number}/{name}": value for name, value in base.items()})
    for name, attributes in netdevs.items():
        entries.update({f"{PCI_DEV}/net/{name}/{key}": value for key, value in attributes.items()})
        entries[f"{PCI_DEV}/net/{name}/device"] = Link("../../../0000:3b:00.0")
        entries[f"sys/class/net/{name}"] = Link(
            f"../../devices/pci0000:00/0000:00:01.0/0000:3b:00.0/net/{name}"
        )
    return entries


def test_a_good_hca_with_its_netdev(tmp_path: Path) -> None:
    root = write_tree(tmp_path, _hca({1: {}}, {"ibp59s0": {"operstate": "up\n", "speed": "400000\n"}}))
    devices, conditions = rdma.read_rdma_devices(root)
    assert conditions == ()
    assert devices[0].address == PciAddress.parse("0000:3b:00.0")
    assert devices[0].node_guid == "0xa088c20300123456"
    assert devices[0].ports[0] == RdmaPort(
        number=1,
        state="ACTIVE",
        phys_state="LinkUp",
        rate_gbps=400.0,
        link_layer="InfiniBand",
        netdevs=("ibp59s0",),
        lid=0x12,
    )
    nets, _ = rdma.read_net_devices(root)
    assert nets == (
        NetDevice(
            name="ibp59s0", address=PciAddress.parse("0000:3b:00.0"), operstate="up", speed_mbps=400000
        ),
    )


def test_two_port_device_puts_netdevs_on_their_ports(tmp_path: Path) -> None:
    netdevs: dict[str, dict[str, Entry]] = {
        "ib0": {"dev_id": "0x0\n"},  # no dev_port (old kernel): dev_id
        "ib1": {"dev_port": "1\n", "dev_id": "0x0\n"},  # dev_port wins
        "ib2": {},  # neither: which port is unknown
    }
    root = write_tree(tmp_path, _hca({1: {}, 2: {}}, netdevs))
    devices, conditions = rdma.read_rdma_devices(root)
    assert [p.netdevs for p in devices[0].ports] == [("ib0",), ("ib1",)]
    assert [c.reason for c in conditions] == [ConditionReason.UNAVAILABLE]
    assert "net/ib2" in conditions[0].message


@pytest.mark.parametrize(
    ("attributes", "field", "reason"),
    [
        ({"rate": "lots\n"}, "rate_gbps", ConditionReason.PARSE_ERROR),
        ({"state": Dir()}, "state", ConditionReason.UNAVAILABLE),
        ({"phys_state": Link("gone")}, "phys_state", ConditionReason.UNAVAILABLE),
        ({"lid": "zz\n"}, "lid", ConditionReason.PARSE_ERROR),
        ({"link_layer": Dir()}, "link_layer", ConditionReason.UNAVAILABLE),
    ],
)
def test_one_bad_port_attribute_costs_only_that_field(
    tmp_path: Path, attributes: dict[str, Entry], field: str, reason: ConditionReason
) -> None:
    root = write_tree(tmp_path, _hca({1: attributes, 2: {}}, {}))
    devices, conditions = rdma.read_rdma_devices(root)
    assert getattr(devices[0].ports[0], field) is None
    assert devices[0].ports[1].state == "ACTIVE" and devices[0].ports[1].rate_gbps == 400.0
    assert [c.reason for c in conditions] == [reason]
    assert "/sys/class/infiniband/mlx5_0/ports/1/" in conditions[0].message


def test_missing_port_attributes_are_none_without_conditions(tmp_path: Path) -> None:
    entries = {k: v for k, v in _hca({1: {}}, {}).items() if not k.endswith(("/rate", "/lid", "/hca_type"))}
    devices, conditions = rdma.read_rdma_devices(write_tree(tmp_path, entries))
    assert conditions == ()
    assert (devices[0].hca_type, devices[0].ports[0].rate_gbps, devices[0].ports[0].lid) == (None, None, None)


def test_einval_from_a_down_link_is_no_value_not_a_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = write_tree(tmp_path, _hca({1: {}}, {"eth9": {"operstate": "down\n", "speed": "0\n"}}))
    real_read = os.read

    def read(fd: int, size: int) -> bytes:
        # as the kernel answers: the read itself fails, whichever way the file was opened
        if os.readlink(f"/proc/self/fd/{fd}").endswith(("/speed", "/rate")):
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_read(fd, size)

    monkeypatch.setattr(os, "read", read)
    devices, rdma_conditions = rdma.read_rdma_devices(root)
    nets, net_conditions = rdma.read_net_devices(root)
    assert rdma_conditions == net_conditions == ()
    assert devices[0].ports[0].rate_gbps is None
    assert nets[0].speed_mbps is None and nets[0].operstate == "down"


def test_virtual_and_non_pci_interfaces_are_skipped(tmp_path: Path) -> None:
    entries: dict[str, Entry] = {
        "sys/class/net/lo": Link("../../devices/virtual/net/lo"),  # dangling into devices/virtual
        "sys/devices/virtual/net/br0/operstate": "up\n",
        "sys/class/net/br0": Link("../../devices/virtual/net/br0"),  # resolves, no device link
        "sys/devices/platform/soc/eth7/net/end0/operstate": "up\n",
        "sys/devices/platform/soc/eth7/net/end0/device": Link("../../../eth7"),  # not PCI
        "sys/class/net/end0": Link("../../devices/platform/soc/eth7/net/end0"),
        "sys/class/net/gone0": Link("../../devices/pci0000:00/0000:00:09.0/net/gone0"),  # dangling real
    }
    nets, conditions = rdma.read_net_devices(write_tree(tmp_path, entries))
    assert nets == ()
    assert [c.message for c in conditions] == ["/sys/class/net/gone0: dangling symlink: left out"]


def test_dangling_device_link_keeps_the_rdma_device_without_address(tmp_path: Path) -> None:
    entries = _hca({1: {}}, {})
    entries[f"{PCI_DEV}/infiniband/mlx5_0/device"] = Link("../../../0000:99:00.0")
    devices, conditions = rdma.read_rdma_devices(write_tree(tmp_path, entries))
    assert devices[0].name == "mlx5_0" and devices[0].address is None
    assert [c.reason for c in conditions] == [ConditionReason.UNAVAILABLE]


def test_collect_reports_both_parts_and_stays_ok_without_infiniband(tmp_path: Path) -> None:
    root = write_tree(tmp_path, {"sys/class/net/lo": Link("../../devices/virtual/net/lo")})
    result = rdma.collect(Context(root=root, runner=ReplayRunner({})))
    assert result.ok
    assert (result.facts.rdma_devices, result.facts.net_devices, result.facts.conditions) == ((), (), ())
    assert "no /sys/class/infiniband" in result.facts.sources[0].message


def test_collect_without_class_net_says_so(tmp_path: Path) -> None:
    result = rdma.collect(Context(root=write_tree(tmp_path, {"sys": Dir()}), runner=ReplayRunner({})))
    assert [c.message for c in result.facts.conditions] == [
        "/sys/class/net: missing: network interfaces unknown"
    ]


# --------------------------------------------------------------------------------------------
# The live host (explicit: this test reads this machine's /sys)
# --------------------------------------------------------------------------------------------


def test_live_host_sys_net_devices_sit_on_listed_pci_functions() -> None:
    root = HostRoot("/")
    if not root.sys("class/net").is_dir():
        pytest.skip("this machine has no /sys/class/net")
    nets, _ = rdma.read_net_devices(root)
    devices, _ = rdma.read_rdma_devices(root)
    listed = {PciAddress.parse(p.name) for p in root.sys("bus/pci/devices").iterdir()}
    assert all(n.address in listed for n in nets)
    assert all(d.address is None or d.address in listed for d in devices)
