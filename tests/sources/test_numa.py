"""sources.numa: parsers on text, the reader on real hwloc trees and on hand-made bad trees."""

from __future__ import annotations

from pathlib import Path

import pytest
from sysfs_trees import Dir, HwlocTree, Link, hwloc_tree, write_tree

from nodetopo.errors import ParseError
from nodetopo.host import HostRoot, ReplayRunner
from nodetopo.model import ConditionReason, NumaNode
from nodetopo.sources import numa
from nodetopo.sources.base import Context

# --------------------------------------------------------------------------------------------
# Parsers
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "cpus"),
    [
        ("0-3,8-11\n", {0, 1, 2, 3, 8, 9, 10, 11}),
        ("0\n", {0}),
        ("\n", set()),
        ("", set()),
        ("0-1\n\x00", {0, 1}),  # trailing NUL byte, as in hwloc's 32em64t capture
        ("  5 ,7-8 \n", {5, 7, 8}),
    ],
)
def test_parse_cpulist_text_accepts_kernel_forms(text: str, cpus: set[int]) -> None:
    assert numa.parse_cpulist_text(text, "/sys/x/cpulist") == frozenset(cpus)


@pytest.mark.parametrize("text", ["a-b", "3-1", "0,,1", "0-", "-1", "0x3", "0 1"])
def test_parse_cpulist_text_rejects_garbage_naming_the_file(text: str) -> None:
    with pytest.raises(ParseError) as caught:
        numa.parse_cpulist_text(text, "/sys/devices/system/node/node0/cpulist")
    assert caught.value.source == numa.NAME
    assert caught.value.path == "/sys/devices/system/node/node0/cpulist"
    assert "cpulist" in caught.value.detail


def test_parse_distance_and_pairing() -> None:
    row = numa.parse_distance("10 21 31\n", "d")
    assert row == (10, 21, 31)
    assert numa.pair_distances((0, 8, 250), row, "d") == ((0, 10), (8, 21), (250, 31))


@pytest.mark.parametrize("text", ["", "\n", "10 x", "10 -1", "ten"])
def test_parse_distance_rejects_garbage(text: str) -> None:
    with pytest.raises(ParseError):
        numa.parse_distance(text, "d")


def test_pair_distances_rejects_a_row_of_the_wrong_length() -> None:
    with pytest.raises(ParseError, match="expected 3 distances"):
        numa.pair_distances((0, 1, 2), (10, 20), "d")


def test_parse_meminfo_total_in_bytes() -> None:
    text = "\nNode 1 MemTotal:       16777216 kB\nNode 1 MemFree:        1 kB\n"
    assert numa.parse_meminfo_total(text, "m", 1) == 16777216 * 1024


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("Node 1 MemFree: 1 kB\n", "found none"),
        ("Node 2 MemTotal: 5 kB\n", "not 1"),
        ("Node 1 MemTotal: lots kB\n", "MemTotal"),
    ],
)
def test_parse_meminfo_total_rejects_garbage(text: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        numa.parse_meminfo_total(text, "m", 1)


# --------------------------------------------------------------------------------------------
# Real trees (hwloc's test captures)
# --------------------------------------------------------------------------------------------


@pytest.fixture
def tree(request: pytest.FixtureRequest, corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> HwlocTree:
    return hwloc_tree(corpus, request.param, tmp_path_factory)


@pytest.mark.corpus
@pytest.mark.parametrize("tree", ["16amd64-8n2c"], indirect=True)
def test_eight_node_amd_has_two_cpus_per_node_and_a_full_slit(tree: HwlocTree) -> None:
    nodes, conditions = numa.read_numa_nodes(tree.root)
    assert conditions == ()
    assert [n.id for n in nodes] == list(range(8))
    for node in nodes:
        assert node.cpus == {2 * node.id, 2 * node.id + 1}
        assert node.distances == tuple((other, 10 if other == node.id else 20) for other in range(8))
    assert nodes[0].memory_bytes == 8386704 * 1024  # node0/meminfo: "Node 0 MemTotal: 8386704 kB"


@pytest.mark.corpus
@pytest.mark.parametrize("tree", ["nvidiagpunumanodes"], indirect=True)
def test_power9_gpu_memory_nodes_are_cpuless_nodes_in_numeric_order(tree: HwlocTree) -> None:
    nodes, conditions = numa.read_numa_nodes(tree.root)
    assert conditions == ()
    by_id = {n.id: n for n in nodes}
    assert [n.id for n in nodes] == [0, 8, 250, 251, 252, 253, 254, 255]  # not lexical (node250 < node8)
    assert by_id[0].cpus == frozenset(range(88)) and by_id[8].cpus == frozenset(range(88, 176))
    for gpu_node in range(250, 256):
        assert by_id[gpu_node].cpus == frozenset()
        assert by_id[gpu_node].memory_bytes == 15728640 * 1024
    assert dict(by_id[8].distances) == {0: 40, 8: 10, 250: 80, 251: 80, 252: 80, 253: 80, 254: 80, 255: 80}
    assert dict(by_id[252].distances)[252] == 10


@pytest.mark.corpus
@pytest.mark.parametrize("tree", ["8em64t-2s2ca2c-buggynuma"], indirect=True)
def test_buggy_numa_is_reported_as_the_kernel_says_with_an_inconsistent_condition(tree: HwlocTree) -> None:
    nodes, conditions = numa.read_numa_nodes(tree.root)
    assert [n.id for n in nodes] == list(range(8))
    assert all(n.cpus == frozenset(range(8)) for n in nodes)
    assert [c.reason for c in conditions] == [ConditionReason.INCONSISTENT]
    assert "0&1" in conditions[0].message and "22 more" in conditions[0].message  # 28 pairs


@pytest.mark.corpus
@pytest.mark.parametrize("tree", ["32em64t-2n8c+dax+nvme+mic+dimms"], indirect=True)
def test_node_online_list_with_a_trailing_nul_byte_orders_the_distances(tree: HwlocTree) -> None:
    online = tree.root.sys(numa.NODE_ONLINE).read_bytes()
    assert online.endswith(b"\x00")  # the capture's quirk this test is about
    nodes, conditions = numa.read_numa_nodes(tree.root)
    assert conditions == ()
    assert [(n.id, n.distances) for n in nodes] == [(0, ((0, 10), (1, 21))), (1, ((0, 21), (1, 10)))]


# --------------------------------------------------------------------------------------------
# Hand-made trees: what a bad or unusual host looks like
# --------------------------------------------------------------------------------------------

NODE = "sys/devices/system/node"


def _two_nodes(**overrides: str | bytes | Link | Dir) -> dict[str, str | bytes | Link | Dir]:
    entries: dict[str, str | bytes | Link | Dir] = {
        f"{NODE}/online": "0-1\n",
        f"{NODE}/node0/cpulist": "0-3\n",
        f"{NODE}/node0/distance": "10 20\n",
        f"{NODE}/node0/meminfo": "Node 0 MemTotal: 1024 kB\n",
        f"{NODE}/node1/cpulist": "4-7\n",
        f"{NODE}/node1/distance": "20 10\n",
        f"{NODE}/node1/meminfo": "Node 1 MemTotal: 2048 kB\n",
    }
    entries.update({f"{NODE}/{key.replace('__', '/')}": value for key, value in overrides.items()})
    return entries


def test_two_good_nodes(tmp_path: Path) -> None:
    nodes, conditions = numa.read_numa_nodes(write_tree(tmp_path, _two_nodes()))
    assert conditions == ()
    assert nodes == (
        NumaNode(id=0, cpus=frozenset(range(4)), memory_bytes=1024 * 1024, distances=((0, 10), (1, 20))),
        NumaNode(id=1, cpus=frozenset(range(4, 8)), memory_bytes=2048 * 1024, distances=((0, 20), (1, 10))),
    )


@pytest.mark.parametrize(
    ("cpulist", "reason"),
    [
        (Dir(), ConditionReason.UNAVAILABLE),  # a directory where the file belongs
        (Link("../nowhere/cpulist"), ConditionReason.UNAVAILABLE),  # dangling symlink
        ("zero-three\n", ConditionReason.PARSE_ERROR),
        (b"\xff\xfe\n", ConditionReason.PARSE_ERROR),
    ],
)
def test_a_node_with_a_bad_cpulist_is_left_out_and_the_other_kept(
    tmp_path: Path, cpulist: str | bytes | Link | Dir, reason: ConditionReason
) -> None:
    entries = _two_nodes()
    del entries[f"{NODE}/node1/cpulist"]
    entries[f"{NODE}/node1/cpulist"] = cpulist
    nodes, conditions = numa.read_numa_nodes(write_tree(tmp_path, entries))
    assert [n.id for n in nodes] == [0]
    assert [c.reason for c in conditions] == [reason]
    assert "/sys/devices/system/node/node1/cpulist" in conditions[0].message


def test_a_node_without_cpulist_is_left_out(tmp_path: Path) -> None:
    entries = _two_nodes()
    del entries[f"{NODE}/node1/cpulist"]
    nodes, conditions = numa.read_numa_nodes(write_tree(tmp_path, entries))
    assert [n.id for n in nodes] == [0]
    assert "node1/cpulist: missing" in conditions[0].message


def test_empty_cpulist_is_a_cpuless_memory_node(tmp_path: Path) -> None:
    nodes, conditions = numa.read_numa_nodes(write_tree(tmp_path, _two_nodes(node1__cpulist="\n")))
    assert conditions == ()
    assert nodes[1].cpus == frozenset() and nodes[1].memory_bytes == 2048 * 1024


def test_bad_meminfo_and_distance_lose_only_that_field(tmp_path: Path) -> None:
    root = write_tree(
        tmp_path, _two_nodes(node0__meminfo="Node 0 MemTotal: many kB\n", node1__distance="20 10 30\n")
    )
    nodes, conditions = numa.read_numa_nodes(root)
    assert nodes[0].memory_bytes is None and nodes[0].distances == ((0, 10), (1, 20))
    assert nodes[1].memory_bytes == 2048 * 1024 and nodes[1].distances == ()
    assert [c.reason for c in conditions] == [ConditionReason.PARSE_ERROR] * 2
    assert "node0/meminfo:1" in conditions[0].message
    assert "node1/distance" in conditions[1].message


def test_missing_meminfo_and_distance_are_none_without_a_condition(tmp_path: Path) -> None:
    entries = {k: v for k, v in _two_nodes().items() if not k.endswith(("meminfo", "distance"))}
    nodes, conditions = numa.read_numa_nodes(write_tree(tmp_path, entries))
    assert conditions == ()
    assert all(n.memory_bytes is None and n.distances == () for n in nodes)


def test_online_list_disagreeing_with_the_directories_is_inconsistent(tmp_path: Path) -> None:
    nodes, conditions = numa.read_numa_nodes(write_tree(tmp_path, _two_nodes(online="0-2\n")))
    assert [c.reason for c in conditions] == [ConditionReason.INCONSISTENT]
    assert nodes[0].distances == ((0, 10), (1, 20))  # paired with the directories


def test_no_node_directory_means_one_implicit_node_with_the_online_cpus(tmp_path: Path) -> None:
    root = write_tree(tmp_path, {"sys/devices/system/cpu/online": "0-5,8\n"})
    nodes, conditions = numa.read_numa_nodes(root)
    assert conditions == ()
    assert nodes == (NumaNode(id=0, cpus=frozenset({0, 1, 2, 3, 4, 5, 8})),)


def test_empty_node_directory_falls_back_to_the_implicit_node_and_says_so(tmp_path: Path) -> None:
    root = write_tree(tmp_path, {f"{NODE}/online": "0\n", "sys/devices/system/cpu/online": "0-1\n"})
    nodes, conditions = numa.read_numa_nodes(root)
    assert nodes == (NumaNode(id=0, cpus=frozenset({0, 1})),)
    assert [c.reason for c in conditions] == [ConditionReason.UNAVAILABLE]


def _context(root: HostRoot) -> Context:
    return Context(root=root, runner=ReplayRunner({}))


def test_collect_without_any_cpu_information_fails_as_unavailable(tmp_path: Path) -> None:
    result = numa.collect(_context(write_tree(tmp_path, {"sys/devices/system": Dir()})))
    assert not result.ok
    assert result.facts.numa_nodes == ()
    assert [c.reason for c in result.facts.conditions] == [ConditionReason.UNAVAILABLE]
    assert "/sys/devices/system/cpu/online" in result.facts.conditions[0].message


def test_collect_keeps_nodes_and_problems(tmp_path: Path) -> None:
    result = numa.collect(_context(write_tree(tmp_path, _two_nodes(node1__meminfo="garbage\n"))))
    # the facts read are kept; the source is not "ok" while it reports a problem of its own
    assert not result.ok and result.name == numa.NAME
    assert [n.id for n in result.facts.numa_nodes] == [0, 1]
    assert [s.name for s in result.facts.sources] == [numa.NAME]
    assert [c.reason for c in result.facts.conditions] == [ConditionReason.PARSE_ERROR]


# --------------------------------------------------------------------------------------------
# The live host (explicit: this test reads this machine's /sys)
# --------------------------------------------------------------------------------------------


def test_live_host_sys_has_numa_nodes_with_cpus() -> None:
    root = HostRoot("/")
    if not root.sys("devices/system/cpu/online").exists():
        pytest.skip("this machine has no /sys/devices/system/cpu/online")
    nodes, _ = numa.read_numa_nodes(root)
    assert nodes, "a Linux host has at least one (possibly implicit) NUMA node"
    assert any(n.cpus for n in nodes)
    online = numa.parse_cpulist_text(root.sys("devices/system/cpu/online").read_text(), "online")
    assert frozenset().union(*(n.cpus for n in nodes)) >= online
