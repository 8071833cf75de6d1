"""CPU lists in a published NodeTopology are read as ranges, never expanded (issue 23, hostile objects).

0.1.0: a schema-valid 376 KB NodeTopology with 1,024 GPUs whose ``cpuAffinity`` and ``numaAffinity``
are distinct ``N-65535`` lists took ``nodetopo probe`` and ``kubectl ntopo get`` to MemoryError: the
reader expanded every list into a set of up to 65,536 ids, 2,048 of them. The reader now keeps a
list as its ranges (``CpuSet``), bounded by the CRD's length for the list, whatever the ids say.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from nodetopo.model import MAX_CPU_ID, CpuSet, format_cpulist, parse_cpulist
from nodetopo.resource.limits import MAX_GPUS

REPO = Path(__file__).resolve().parents[2]


def hostile(gpus: int = MAX_GPUS) -> dict[str, Any]:
    """Schema-valid: ``gpus`` GPUs, each with its own ``N-65535`` CPU and NUMA lists."""
    return {
        "apiVersion": "nodetopo.io/v1alpha1",
        "kind": "NodeTopology",
        "metadata": {"name": "hostile"},
        "status": {
            "nodeName": "hostile",
            "gpus": [
                {
                    "index": i,
                    "uuid": f"GPU-{i:08x}-0000-0000-0000-000000000000",
                    "model": "NVIDIA H100 80GB HBM3",
                    "pciBusID": f"0000:{i // 32:02x}:{i % 32:02x}.0",
                    "pcieRoot": f"pci0000:{i // 32:02x}",
                    "memoryBytes": 85520809984,
                    "cpuAffinity": f"{i}-{MAX_CPU_ID}",
                    "numaAffinity": f"{i}-{MAX_CPU_ID}",
                    "nicDistance": None,
                    "nearestNICs": [],
                    "migEnabled": False,
                }
                for i in range(gpus)
            ],
            "numaNodes": [{"id": i, "cpus": f"{i}-{MAX_CPU_ID}"} for i in range(64)],
        },
    }


#: Reads the hostile object every way a consumer does, under an address-space limit, and prints
#: the peak RSS (VmHWM). Before ranges: MemoryError (the lists alone want gigabytes).
READ_ALL = textwrap.dedent(
    """
    import json, resource, sys
    limit = 768 * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    obj = json.load(open(sys.argv[1]))
    from nodetopo.resource.reader import read_nodetopology
    from nodetopo.resource.body import topology_from_nodetopology
    from nodetopo.probe.promised import parse_nodetopology
    from nodetopo.views.render import render_table
    read = read_nodetopology(obj)
    assert read.problems == (), read.problems[:3]
    topology = topology_from_nodetopology(obj)
    text = render_table(topology, "hostile")
    promised = parse_nodetopology(obj)
    assert len(promised.gpus) == len(topology.gpus) == len(obj["status"]["gpus"])
    assert len(topology.gpus[5].cpu_affinity) == 65536 - 5
    # VmHWM, not ru_maxrss: exec keeps the parent's (pytest's) maxrss, and resets VmHWM
    hwm = next(l for l in open("/proc/self/status") if l.startswith("VmHWM:"))
    print(int(hwm.split()[1]) // 1024, len(text))
    """
)


def test_a_hostile_object_with_wide_cpu_lists_reads_in_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(hostile()))
    assert 300_000 < path.stat().st_size < 400_000  # the size of the object that was reported
    done = subprocess.run(
        [sys.executable, "-c", READ_ALL, str(path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    peak_mib = int(done.stdout.split()[0])
    assert peak_mib < 200, done.stdout


def test_a_cpu_set_is_its_ranges() -> None:
    wide = CpuSet.parse(f"0-{MAX_CPU_ID}")
    assert wide.ranges == ((0, MAX_CPU_ID),)
    assert len(wide) == MAX_CPU_ID + 1 and 40_000 in wide and MAX_CPU_ID + 1 not in wide
    assert CpuSet.parse("0-3,8,9-11,4").ranges == ((0, 4), (8, 11))
    assert CpuSet.parse("  \x00") == frozenset() and not CpuSet.parse("")
    assert str(CpuSet.parse("8,0-3,4")) == "0-4,8" == format_cpulist(CpuSet.parse("8,0-3,4"))


@pytest.mark.parametrize("text", ["0-3,8-11", "0", "", "5,1-2", "0-7,64-71,128", "3-3"])
def test_a_cpu_set_is_the_set_parse_cpulist_gives(text: str) -> None:
    ids = parse_cpulist(text)
    cpus = CpuSet.parse(text)
    assert cpus == ids and ids == cpus and hash(cpus) == hash(ids)
    assert sorted(cpus) == sorted(ids) and len(cpus) == len(ids)
    other = frozenset({1, 2, 9, 10, 64})
    assert cpus & other == ids & other and other & cpus == ids & other
    assert cpus - other == ids - other and cpus | other == ids | other
    assert (cpus <= other) == (ids <= other) and cpus.isdisjoint(other) == ids.isdisjoint(other)
    assert CpuSet.of(ids) == cpus and (min(cpus) == min(ids) if ids else True)


@pytest.mark.parametrize("text", ["0-", "3-1", "a", "1,,2", f"0-{MAX_CPU_ID + 1}", "1-2-3", "99999999"])
def test_a_cpu_set_refuses_what_parse_cpulist_refuses(text: str) -> None:
    with pytest.raises(ValueError) as expected:
        parse_cpulist(text)
    with pytest.raises(ValueError) as got:
        CpuSet.parse(text)
    assert str(got.value) == str(expected.value)


def test_set_operations_between_wide_sets_do_not_expand() -> None:
    a = CpuSet.parse(f"0-{MAX_CPU_ID}")
    b = CpuSet.parse(f"100-{MAX_CPU_ID}")
    assert (a & b).ranges == ((100, MAX_CPU_ID),)
    assert (a - b).ranges == ((0, 99),)
    assert (b | CpuSet.parse("0-99")) == a and b <= a and not a <= b
