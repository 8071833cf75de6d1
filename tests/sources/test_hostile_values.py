"""Numbers from a source are range-checked against what hardware can have: a hostile value costs that
one fact (with a condition), never gigabytes, never a traceback, never the whole source.

Every test runs under a short timeout and builds its input in memory or under ``tmp_path``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sysfs_trees import write_tree

from nodetopo.model import MAX_CPU_ID, ConditionReason, parse_cpulist
from nodetopo.sources import numa

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
