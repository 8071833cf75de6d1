"""Numbers from a source are range-checked against what hardware can have: a hostile value costs that
one fact (with a condition), never gigabytes, never a traceback, never the whole source.

Every test runs under a short timeout and builds its input in memory or under ``tmp_path``.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest
from sysfs_trees import pci_function, write_tree

from nodetopo.errors import ParseError
from nodetopo.host import ReplayRunner
from nodetopo.model import MAX_CPU_ID, ConditionReason, parse_cpulist
from nodetopo.sources import numa, pci, rdma
from nodetopo.sources.base import Context
from nodetopo.sources.nvml import RecordedNvml

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize(
    "text",
    ["0-4000000000", "4000000000", f"0-{MAX_CPU_ID + 1}", "0-" + "9" * 5000, "1" * 5000, "0-3,x", "3-1"],
)
def test_parse_cpulist_refuses_ids_no_machine_has(text: str) -> None:
    with pytest.raises(ValueError) as refused:
        parse_cpulist(text)
    assert len(str(refused.value)) < 200


def test_parse_cpulist_still_reads_the_largest_real_lists() -> None:
    assert parse_cpulist(f"0-{MAX_CPU_ID}") == frozenset(range(MAX_CPU_ID + 1))
    assert parse_cpulist("0-55,112-167\x00\n") == frozenset([*range(56), *range(112, 168)])


def test_a_13_byte_cpulist_costs_one_node_not_gigabytes(tmp_path: Path) -> None:
    root = write_tree(
        tmp_path,
        {
            "sys/devices/system/node/node0/cpulist": "0-4000000000",
            "sys/devices/system/node/node1/cpulist": "4-7\n",
        },
    )
    nodes, conditions = numa.read_numa_nodes(root)
    assert [node.id for node in nodes] == [1]
    assert [c.reason for c in conditions] == [ConditionReason.PARSE_ERROR]
    assert "node0/cpulist" in conditions[0].message


#: every pure parser of a sysfs value, with a good input, so that each hostile input is tried on all
SYSFS_PARSERS: dict[str, tuple[Callable[[str, str], object], str]] = {
    "pci hex id": (lambda t, p: pci.parse_hex_id(t, p, bits=16), "0x15b3"),
    "pci numa_node": (pci.parse_numa_node, "1"),
    "pci local_cpus": (pci.parse_cpumask, "0000ffff"),
    "pci local_cpulist": (numa.parse_cpulist_text, "0-15"),
    "numa distance": (numa.parse_distance, "10 21"),
    "numa meminfo": (lambda t, p: numa.parse_meminfo_total(t, p, 0), "Node 0 MemTotal: 1024 kB"),
    "rdma rate": (rdma.parse_rate, "400 Gb/sec (4X NDR)"),
    "rdma lid": (rdma.parse_lid, "0x3a4"),
    "rdma speed": (rdma.parse_speed, "100000"),
    "rdma dev_port": (rdma.parse_dev_port, "1"),
    "rdma state": (rdma.parse_port_state, "4: ACTIVE"),
    "rdma guid": (rdma.parse_guid, "0002:c903:00f9:bfa0"),
}

HOSTILE_VALUES = {
    "over-long integer": "9" * 5000,
    "over-long negative": "-" + "9" * 5000,
    "over-long hex": "0x" + "f" * 5000,
    "over-long rate": "9" * 5000 + " Gb/sec (4X NDR)",
    "over-long meminfo": "Node 0 MemTotal: " + "9" * 5000 + " kB",
    "over-long distance row": "10 " + "9" * 5000,
    "unicode digits": "\u0663\u0663",
    "superscript": "\u00b2",
    "underscored": "1_000",
    "mask above the largest CPU": "1" + ",00000000" * 2048,
    "binary garbage": "\x00\xff\x1b[31m" * 100,
}


@pytest.mark.parametrize("value", sorted(HOSTILE_VALUES))
@pytest.mark.parametrize("parser", sorted(SYSFS_PARSERS))
def test_every_sysfs_parser_raises_only_parse_error(parser: str, value: str) -> None:
    parse, good = SYSFS_PARSERS[parser]
    parse(good, "/sys/x")  # the good value reads
    try:
        parse(HOSTILE_VALUES[value], "/sys/x")
    except ParseError as e:
        assert len(str(e)) < 300
    # no other exception escapes (a ValueError from int() of 5000 digits was a traceback before)


@pytest.mark.parametrize(
    ("parse", "text"),
    [
        (pci.parse_numa_node, "99999"),  # above Linux's MAX_NUMNODES
        (pci.parse_cpumask, "1" + ",00000000" * 2048),  # CPU 65536
        (numa.parse_distance, "10 256"),  # SLIT distances are one byte
        (lambda t, p: numa.parse_meminfo_total(t, p, 0), "Node 0 MemTotal: 99999999999999999999 kB"),
        (rdma.parse_rate, "99999 Gb/sec (4X NDR)"),
        (rdma.parse_lid, "0x10000"),  # LIDs are 16 bits
        (rdma.parse_dev_port, "1000"),
    ],
)
def test_values_beyond_hardware_are_parse_errors(parse: Callable[[str, str], object], text: str) -> None:
    with pytest.raises(ParseError):
        parse(text, "/sys/x")


def test_one_over_long_value_costs_one_fact_not_the_source(tmp_path: Path) -> None:
    """meminfo with 5000 digits raised ValueError: the whole NUMA source was Degraded with no nodes."""
    root = write_tree(
        tmp_path,
        {
            "sys/devices/system/node/node0/cpulist": "0-3\n",
            "sys/devices/system/node/node0/meminfo": "Node 0 MemTotal: " + "9" * 5000 + " kB\n",
            "sys/devices/system/node/node0/distance": "10 " + "9" * 5000 + "\n",
            "sys/devices/system/node/node1/cpulist": "4-7\n",
            "sys/devices/system/node/node1/meminfo": "Node 1 MemTotal: 1024 kB\n",
        },
    )
    result = numa.collect(Context(root=root, runner=ReplayRunner({})))
    assert result.facts.sources[0].name == "sysfs.numa"  # the source ran and kept its nodes
    nodes = result.facts.numa_nodes
    assert [(n.id, n.memory_bytes) for n in nodes] == [(0, None), (1, 1024 * 1024)]
    assert {c.reason for c in result.facts.conditions} == {ConditionReason.PARSE_ERROR}


def test_node_directories_no_kernel_makes_are_left_out(tmp_path: Path) -> None:
    entries = {f"sys/devices/system/node/node{i}/cpulist": f"{i}\n" for i in (0, 1, 4000, 99999999)}
    nodes, conditions = numa.read_numa_nodes(write_tree(tmp_path, entries))
    assert [n.id for n in nodes] == [0, 1]
    assert any("2 node directories numbered above 1023" in c.message for c in conditions)


def test_pci_and_rdma_keep_the_device_when_one_value_is_absurd(tmp_path: Path) -> None:
    entries = pci_function("0000:3b:00.0", attributes={"numa_node": "9" * 5000 + "\n"})
    entries.update(
        {
            "sys/class/infiniband/mlx5_0/ports/1/state": "4: ACTIVE\n",
            "sys/class/infiniband/mlx5_0/ports/1/rate": "9" * 5000 + " Gb/sec\n",
            "sys/class/infiniband/mlx5_0/ports/1/lid": "0x" + "f" * 5000 + "\n",
        }
    )
    root = write_tree(tmp_path, entries)
    devices, conditions = pci.read_pci_devices(root)
    assert devices[0].numa_node is None and devices[0].vendor == 0x15B3
    assert len(conditions) == 1 and "numa_node" in conditions[0].message
    rdmas, rdma_conditions = rdma.read_rdma_devices(root)
    port = rdmas[0].ports[0]
    assert (port.state, port.rate_gbps, port.lid) == ("ACTIVE", None, None)
    assert len(rdma_conditions) == 2


# --- many large CPU lists: memory is bounded per read, equal lists are shared ----------------------


def _peak_mib(run: Callable[[], object]) -> float:
    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1] / (1 << 20)
    finally:
        tracemalloc.stop()


@pytest.mark.timeout(120)
def test_thousands_of_distinct_full_cpulists_do_not_build_gigabytes(tmp_path: Path) -> None:
    """400 PCI functions, each with its own list of ~65,000 CPUs: ~1 GB of sets before, a bounded
    budget now (the lists past it are ParseError conditions)."""
    entries: dict[str, object] = {}
    for i in range(400):
        address = f"0000:{i // 32:02x}:{i % 32:02x}.0"
        entries.update(
            pci_function(address, attributes={"local_cpulist": f"{i}-65535\n", "local_cpus": "1\n"})
        )
    root = write_tree(tmp_path, entries)  # type: ignore[arg-type]
    result: list[object] = []
    peak = _peak_mib(lambda: result.append(pci.read_pci_devices(root)))
    devices, conditions = result[0]  # type: ignore[misc]
    assert len(devices) == 400
    assert any("more distinct CPU sets than any machine has" in c.message for c in conditions)
    assert peak < 200, f"{peak:.0f} MiB"


def test_equal_cpulists_are_one_set(tmp_path: Path) -> None:
    entries: dict[str, object] = {}
    for i in range(50):
        entries.update(pci_function(f"0000:{i:02x}:00.0", attributes={"local_cpulist": "0-55,112-167\n"}))
    devices, _ = pci.read_pci_devices(write_tree(tmp_path, entries))  # type: ignore[arg-type]
    assert len({id(d.local_cpus) for d in devices}) == 1


def test_a_dump_of_256_gpus_with_distinct_full_cpulists_is_bounded() -> None:
    dump: dict[str, object] = {
        "format": "nodetopo-nvml-dump/v1",
        "devices": [{"index": i, "cpuAffinity": f"{i}-65535"} for i in range(256)],
    }
    holder: list[RecordedNvml] = []
    peak = _peak_mib(lambda: holder.append(RecordedNvml.from_dict(dump)))
    assert any("more distinct CPU sets" in p for p in holder[0].problems)
    assert peak < 200, f"{peak:.0f} MiB"
