"""sources.pci: parsers on text, the reader on real hwloc trees and on hand-made bad trees."""

from __future__ import annotations

from pathlib import Path

import pytest
from sysfs_trees import HWLOC_TREES, Dir, Entry, HwlocTree, Link, hwloc_tree, pci_function, write_tree

from nodetopo.errors import ParseError
from nodetopo.host import HostRoot, ReplayRunner
from nodetopo.model import ConditionReason, PciAddress
from nodetopo.sources import pci
from nodetopo.sources.base import Context


def addr(text: str) -> PciAddress:
    return PciAddress.parse(text)


# --------------------------------------------------------------------------------------------
# Parsers
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "bits", "value"),
    [("0x15b3\n", 16, 0x15B3), ("0x030200\n", 24, 0x030200), ("15b3", 16, 0x15B3), ("0x0\x00", 16, 0)],
)
def test_parse_hex_id(text: str, bits: int, value: int) -> None:
    assert pci.parse_hex_id(text, "/sys/x/vendor", bits=bits) == value


@pytest.mark.parametrize("text", ["", "\n", "0xZZZZ", "vendor", "0x", "-0x1", "0x1 0x2"])
def test_parse_hex_id_rejects_garbage(text: str) -> None:
    with pytest.raises(ParseError) as caught:
        pci.parse_hex_id(text, "/sys/bus/pci/devices/0000:00:00.0/vendor", bits=16)
    assert caught.value.path.endswith("/vendor") and caught.value.source == pci.NAME


def test_parse_hex_id_rejects_values_wider_than_the_register() -> None:
    with pytest.raises(ParseError, match="16 bits"):
        pci.parse_hex_id("0x12345", "v", bits=16)


@pytest.mark.parametrize(("text", "node"), [("-1\n", None), ("0\n", 0), ("3", 3), ("-2", None)])
def test_parse_numa_node(text: str, node: int | None) -> None:
    assert pci.parse_numa_node(text, "n") == node


@pytest.mark.parametrize("text", ["", "one", "1.0", "0x1"])
def test_parse_numa_node_rejects_garbage(text: str) -> None:
    with pytest.raises(ParseError):
        pci.parse_numa_node(text, "n")


@pytest.mark.parametrize(
    ("text", "cpus"),
    [
        ("0000,00000000,0000ffff\n", set(range(16))),
        ("1\n", {0}),
        ("0000000f,00000001", {0, 32, 33, 34, 35}),
        ("00000000,00000000", set()),
        ("80000000\n\x00", {31}),
    ],
)
def test_parse_cpumask(text: str, cpus: set[int]) -> None:
    assert pci.parse_cpumask(text, "m") == frozenset(cpus)


@pytest.mark.parametrize("text", ["", "zz", "0,,1", "123456789", "0-3"])
def test_parse_cpumask_rejects_garbage(text: str) -> None:
    with pytest.raises(ParseError):
        pci.parse_cpumask(text, "m")


@pytest.mark.parametrize(
    ("parts", "root", "upstream"),
    [
        (("sys", "devices", "pci0000:80", "0000:80:02.2", "0000:82:00.0"), "pci0000:80", ("0000:80:02.2",)),
        (("devices", "pci0000:00", "0000:00:00.0"), "pci0000:00", ()),
        (("devices", "pci10000:00", "10000:00:04.0"), "pci10000:00", ()),
        # Intel VMD: a second root below the VMD endpoint; the outermost root is the root complex
        (
            ("devices", "pci0000:00", "0000:00:0e.0", "pci10000:e0", "10000:e0:06.0", "10000:e1:00.0"),
            "pci0000:00",
            ("0000:00:0e.0", "10000:e0:06.0"),
        ),
        (("bus", "pci", "devices", "0004:05:00.0"), None, ()),
    ],
)
def test_parse_device_location(parts: tuple[str, ...], root: str | None, upstream: tuple[str, ...]) -> None:
    assert pci.parse_device_location(parts) == (root, tuple(addr(a) for a in upstream))


# --------------------------------------------------------------------------------------------
# Real trees
# --------------------------------------------------------------------------------------------


@pytest.fixture
def tree(request: pytest.FixtureRequest, corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> HwlocTree:
    return hwloc_tree(corpus, request.param, tmp_path_factory)


@pytest.mark.corpus
@pytest.mark.parametrize("tree", ["32em64t-2n8c+dax+nvme+mic+dimms"], indirect=True)
def test_mellanox_hca_behind_a_root_port_on_node_1(tree: HwlocTree) -> None:
    devices, conditions = pci.read_pci_devices(tree.root)
    assert conditions == ()
    assert len(devices) == len(list(tree.root.sys("bus/pci/devices").iterdir())) == 137
    hca = {d.address: d for d in devices}[addr("0000:82:00.0")]
    assert (hca.vendor, hca.device, hca.class_code) == (0x15B3, 0x1003, 0x028000)
    assert (hca.subsystem_vendor, hca.subsystem_device) == (0x15B3, 0x0059)
    assert hca.root == "pci0000:80"
    assert hca.upstream == (addr("0000:80:02.2"),)
    assert hca.numa_node == 1
    assert hca.local_cpus == frozenset(range(8, 16))
    assert hca.driver == "mlx4_core"


@pytest.mark.corpus
@pytest.mark.parametrize("tree", ["32intel64-2p8co2t+8ve"], indirect=True)
def test_vector_engines_sit_two_switch_levels_below_their_root_port(tree: HwlocTree) -> None:
    devices, conditions = pci.read_pci_devices(tree.root)
    assert conditions == ()
    engines = [d for d in devices if d.vendor == 0x1BCF]
    assert len(engines) == 8
    assert all(d.driver == "ve_drv" and d.numa_node == 0 for d in engines)
    first = {d.address: d for d in engines}[addr("0000:1b:00.0")]
    assert first.root == "pci0000:17"
    assert first.upstream == (addr("0000:17:00.0"), addr("0000:18:00.0"), addr("0000:19:08.0"))
    bridges = {d.address: d for d in devices if d.is_bridge}
    assert all(u in bridges for u in first.upstream)


@pytest.mark.corpus
@pytest.mark.parametrize("tree", ["2pa-pcidomain32bits"], indirect=True)
def test_32bit_pci_domains_and_disagreeing_locality_files(tree: HwlocTree) -> None:
    devices, conditions = pci.read_pci_devices(tree.root)
    wide = [d for d in devices if d.address.domain == 0x10000]
    assert [(d.address.bus, d.address.device, d.root) for d in wide] == [
        (0, 0, "pci10000:00"),
        (0, 4, "pci10000:00"),
    ]
    assert all(d.numa_node is None for d in devices)  # numa_node is -1 everywhere
    # local_cpulist says 0-1 and local_cpus says 0x1 (CPU 0): we keep the cpulist and say so
    assert all(d.local_cpus == {0, 1} for d in devices)
    assert {c.reason for c in conditions} == {ConditionReason.INCONSISTENT}
    assert len(conditions) == len(devices) == 9


@pytest.mark.corpus
@pytest.mark.parametrize("tree", ["nvidiagpunumanodes"], indirect=True)
def test_trimmed_capture_with_directories_instead_of_links(tree: HwlocTree) -> None:
    devices, conditions = pci.read_pci_devices(tree.root)
    assert [str(d.address) for d in devices] == [
        "0004:05:00.0", "0004:06:00.0", "0006:00:00.0", "0007:00:00.0", "0035:04:00.0", "0035:05:00.0",
    ]  # fmt: skip
    assert all(d.root is None and d.upstream == () for d in devices)
    assert all(d.class_code == 0x030000 and d.vendor == 0 and d.device == 0 for d in devices)
    by_address = {str(d.address): d for d in devices}
    assert by_address["0004:05:00.0"].local_cpus == frozenset(range(16))  # from the local_cpus mask
    assert by_address["0035:05:00.0"].local_cpus == frozenset(range(88, 104))
    # per device: no tree position, vendor missing, device missing
    assert len(conditions) == 3 * len(devices)
    assert all(c.reason is ConditionReason.UNAVAILABLE for c in conditions)


@pytest.mark.corpus
@pytest.mark.parametrize("tree", [t for t in HWLOC_TREES if t != "nvidiagpunumanodes"], indirect=True)
def test_every_function_in_a_full_tree_has_a_root_and_a_bridge_chain(tree: HwlocTree) -> None:
    devices, _ = pci.read_pci_devices(tree.root)
    listed = set(_sysfs_names(tree.root))
    assert {d.address for d in devices} == {addr(n) for n in listed}
    for device in devices:
        assert device.root is not None and device.root.startswith("pci")
        assert int(device.root.removeprefix("pci").split(":")[0], 16) == device.address.domain
        # every upstream function is on the path to the device: its bus number is not larger
        assert all(u.bus <= device.address.bus for u in device.upstream)


def _sysfs_names(root: HostRoot) -> list[str]:
    base = root.sys("bus/pci/devices")
    return [p.name for p in base.iterdir()] if base.is_dir() else []


# --------------------------------------------------------------------------------------------
# Hand-made trees: bad input
# --------------------------------------------------------------------------------------------


def _tree(tmp_path: Path, *devices: dict[str, Entry], extra: dict[str, Entry] | None = None) -> HostRoot:
    entries: dict[str, Entry] = {}
    for device in devices:
        entries.update(device)
    entries.update(extra or {})
    return write_tree(tmp_path, entries)


def test_a_good_device_behind_a_switch(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        pci_function("0000:00:01.0", attributes={"class": "0x060400\n"}),
        pci_function("0000:01:00.0", ("0000:00:01.0",), attributes={"class": "0x060400\n"}),
        pci_function(
            "0000:02:00.0",
            ("0000:00:01.0", "0000:01:00.0"),
            attributes={"driver": Link("../../../../../bus/pci/drivers/mlx5_core")},
        ),
    )
    devices, conditions = pci.read_pci_devices(root)
    assert conditions == ()
    nic = devices[-1]
    assert nic.address == addr("0000:02:00.0")
    assert nic.upstream == (addr("0000:00:01.0"), addr("0000:01:00.0"))
    assert (nic.root, nic.numa_node, nic.local_cpus, nic.driver) == (
        "pci0000:00",
        0,
        frozenset(range(4)),
        "mlx5_core",
    )
    assert nic.is_network and not nic.is_bridge
    assert devices[0].is_bridge and devices[0].driver is None


@pytest.mark.parametrize(
    ("attributes", "field", "value", "reason"),
    [
        ({"numa_node": "-1\n"}, "numa_node", None, None),
        ({"numa_node": "node one\n"}, "numa_node", None, ConditionReason.PARSE_ERROR),
        ({"numa_node": Dir()}, "numa_node", None, ConditionReason.UNAVAILABLE),
        ({"class": "garbage\n"}, "class_code", 0, ConditionReason.PARSE_ERROR),
        ({"vendor": "0xQQQQ\n"}, "vendor", 0, ConditionReason.PARSE_ERROR),
        ({"vendor": Dir()}, "vendor", 0, ConditionReason.UNAVAILABLE),
        ({"device": Link("nowhere")}, "device", 0, ConditionReason.UNAVAILABLE),
        ({"subsystem_vendor": "\x00"}, "subsystem_vendor", None, ConditionReason.PARSE_ERROR),
        (
            {"local_cpulist": "0-3,8-11\n"},
            "local_cpus",
            {0, 1, 2, 3, 8, 9, 10, 11},
            ConditionReason.INCONSISTENT,
        ),
        ({"local_cpulist": "\n", "local_cpus": "0\n"}, "local_cpus", set(), None),
        ({"local_cpulist": "zero\n"}, "local_cpus", {0, 1, 2, 3}, ConditionReason.PARSE_ERROR),
        ({"local_cpulist": Dir(), "local_cpus": "junk"}, "local_cpus", None, ConditionReason.UNAVAILABLE),
        ({"driver": Link("../../../../bus/pci/drivers/nvidia")}, "driver", "nvidia", None),
    ],
)
def test_one_bad_attribute_costs_only_that_field(
    tmp_path: Path,
    attributes: dict[str, Entry],
    field: str,
    value: object,
    reason: ConditionReason | None,
) -> None:
    root = _tree(
        tmp_path,
        pci_function("0000:3b:00.0", attributes=attributes),
        pci_function("0000:3c:00.0"),
    )
    devices, conditions = pci.read_pci_devices(root)
    assert [str(d.address) for d in devices] == ["0000:3b:00.0", "0000:3c:00.0"]
    observed = getattr(devices[0], field)
    assert observed == (frozenset(value) if isinstance(value, set) else value)
    if reason is None:
        assert conditions == ()
    else:
        assert conditions and conditions[0].reason is reason
        assert "/sys/bus/pci/devices/0000:3b:00.0" in conditions[0].message


def test_missing_optional_attributes_are_none_without_conditions(tmp_path: Path) -> None:
    device = pci_function("0000:3b:00.0")
    for name in ("numa_node", "local_cpulist", "local_cpus", "subsystem_vendor", "subsystem_device"):
        del device[f"sys/devices/pci0000:00/0000:3b:00.0/{name}"]
    devices, conditions = pci.read_pci_devices(_tree(tmp_path, device))
    assert conditions == ()
    assert (devices[0].numa_node, devices[0].local_cpus, devices[0].subsystem_vendor) == (None, None, None)


def test_missing_vendor_is_zero_with_a_condition(tmp_path: Path) -> None:
    device = pci_function("0000:3b:00.0")
    del device["sys/devices/pci0000:00/0000:3b:00.0/vendor"]
    devices, conditions = pci.read_pci_devices(_tree(tmp_path, device))
    assert devices[0].vendor == 0
    assert [c.message for c in conditions] == [
        "/sys/bus/pci/devices/0000:3b:00.0/vendor: missing: reported as 0"
    ]


def test_dangling_link_and_odd_names_are_left_out_and_the_rest_kept(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        pci_function("0000:3c:00.0"),
        extra={
            "sys/bus/pci/devices/0000:3b:00.0": Link("../../../devices/pci0000:00/0000:3b:00.0"),
            "sys/bus/pci/devices/not-a-bdf": Link("../../../devices/pci0000:00/0000:3c:00.0"),
            "sys/bus/pci/devices/0000:3d:00.0": "a file\n",
        },
    )
    devices, conditions = pci.read_pci_devices(root)
    assert [str(d.address) for d in devices] == ["0000:3c:00.0"]
    messages = sorted(c.message for c in conditions)
    assert "dangling symlink" in messages[0] and "0000:3b:00.0" in messages[0]
    assert "not a device directory" in messages[1]
    assert "not-a-bdf" in messages[2] and "PCI address" in messages[2]


def test_symlink_loop_is_left_out(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        pci_function("0000:3c:00.0"),
        extra={"sys/bus/pci/devices/0000:3b:00.0": Link("0000:3b:00.0")},
    )
    devices, conditions = pci.read_pci_devices(root)
    assert [str(d.address) for d in devices] == ["0000:3c:00.0"]
    assert [c.reason for c in conditions] == [ConditionReason.UNAVAILABLE]
    assert "0000:3b:00.0: cannot resolve" in conditions[0].message


def test_link_escaping_the_root_is_left_out(tmp_path: Path) -> None:
    (tmp_path / "outside" / "0000:3b:00.0").mkdir(parents=True)
    link = Link("../../../../../outside/0000:3b:00.0")  # from host/sys/bus/pci/devices: out of host/
    root = write_tree(tmp_path / "host", {"sys/bus/pci/devices/0000:3b:00.0": link})
    devices, conditions = pci.read_pci_devices(root)
    assert devices == ()
    assert [c.reason for c in conditions] == [ConditionReason.UNAVAILABLE]
    assert "outside the host root" in conditions[0].message


def _context(root: HostRoot) -> Context:
    return Context(root=root, runner=ReplayRunner({}))


def test_collect_without_a_pci_bus_fails_as_unavailable(tmp_path: Path) -> None:
    result = pci.collect(_context(write_tree(tmp_path, {"sys/devices": Dir()})))
    assert not result.ok
    assert [c.reason for c in result.facts.conditions] == [ConditionReason.UNAVAILABLE]
    assert "/sys/bus/pci/devices" in result.facts.conditions[0].message


def test_collect_keeps_devices_and_problems(tmp_path: Path) -> None:
    root = _tree(tmp_path, pci_function("0000:3b:00.0", attributes={"numa_node": "x"}))
    result = pci.collect(_context(root))
    assert not result.ok and [str(d.address) for d in result.facts.pci_devices] == ["0000:3b:00.0"]
    assert [c.reason for c in result.facts.conditions] == [ConditionReason.PARSE_ERROR]


# --------------------------------------------------------------------------------------------
# The live host (explicit: this test reads this machine's /sys)
# --------------------------------------------------------------------------------------------


def test_live_host_sys_every_pci_function_has_a_root() -> None:
    root = HostRoot("/")
    if not root.sys("bus/pci/devices").is_dir():
        pytest.skip("this machine has no /sys/bus/pci/devices")
    devices, _ = pci.read_pci_devices(root)
    assert len(devices) == len(_sysfs_names(root))
    assert all(d.root is not None and d.root.startswith("pci") for d in devices)
    known = {d.address for d in devices}
    assert all(u in known for d in devices for u in d.upstream)
