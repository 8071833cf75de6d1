"""Parsing is linear in its input: big outputs built here, each parsed under a generous time limit.

Before: ``topo -m`` looked up a column's index inside the cell loop (cubic: 24 s for 1,000 GPUs),
``-L`` and ``nvlink -s`` checked duplicates by scanning and rebuilt a GPU's tuple per MIG device or
link (quadratic: > 60 s for 10,000 GPUs), ibstat checked duplicate adapters by scanning (quadratic).
The limits below are several times what the linear parsers need on a loaded 2-core machine, and a
fraction of what the old ones took (ibstat's 30,000 adapters: minutes before); the others bound CPU
time, which the load of other processes does not inflate.
"""

from __future__ import annotations

import gc
import time

import pytest

from nodetopo.errors import ParseError
from nodetopo.sources import ibstat, nvidia_smi


def topo_matrix(gpus: int, nics: int = 0) -> str:
    columns = [f"GPU{i}" for i in range(gpus)] + [f"NIC{i}" for i in range(nics)]
    lines = ["\t" + "\t".join(columns) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"]
    for row, label in enumerate(columns):
        cells = [
            "X" if column == row else ("NV18" if row < gpus and column < gpus else "SYS")
            for column in range(len(columns))
        ]
        affinity = ["0-55", "0", "N/A"] if row < gpus else []
        lines.append(label + "\t" + "\t".join(cells + affinity))
    lines += ["", "Legend:", "", "  X    = Self", "", "NIC Legend:", ""]
    lines += [f"  NIC{i}: mlx5_{i}" for i in range(nics)]
    return "\n".join(lines) + "\n"


def smi_list(gpus: int, migs: int = 0) -> str:
    lines = []
    for i in range(gpus):
        lines.append(f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i:08x}-1111-2222-3333-444455556666)")
        lines += [
            f"  MIG 1g.10gb     Device {m:>2}: (UUID: MIG-{i:04x}{m:04x}-1111-2222-3333-444455556666)"
            for m in range(migs)
        ]
    return "\n".join(lines) + "\n"


def nvlink_status(gpus: int, links: int) -> str:
    lines = []
    for i in range(gpus):
        lines.append(f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i:08x}-1111-2222-3333-444455556666)")
        lines += [f"\t Link {n}: 26.562 GB/s" for n in range(links)]
    return "\n".join(lines) + "\n"


def ibstat_output(adapters: int, ports: int = 1) -> str:
    lines = []
    for i in range(adapters):
        lines += [f"CA 'mlx5_{i}'", "\tCA type: MT4129", f"\tNumber of ports: {ports}"]
        for port in range(1, ports + 1):
            lines += [f"\tPort {port}:", "\t\tState: Active", "\t\tRate: 400", "\t\tLink layer: InfiniBand"]
    return "\n".join(lines) + "\n"


def devinfo_output(adapters: int) -> str:
    lines = []
    for i in range(adapters):
        lines += [
            f"hca_id:\tmlx5_{i}",
            "\tfw_ver:\t\t\t28.39.1002",
            "\t\tport:\t1",
            "\t\t\tstate:\t\t\tPORT_ACTIVE (4)",
        ]
    return "\n".join(lines) + "\n"


def cpu_seconds(parse: object, text: str) -> float:
    start = time.process_time()
    parse(text)  # type: ignore[operator]
    return time.process_time() - start


@pytest.mark.timeout(120)
def test_topo_matrix_of_1000_gpus() -> None:
    """A million cells in about 1 s of CPU (19 s before, the cubic index lookup). CPU time, not wall
    time: the load of other processes does not count."""
    text = topo_matrix(1000, nics=8)
    gc.collect()
    start = time.process_time()
    matrix = nvidia_smi.parse_topo_matrix(text)
    seconds = time.process_time() - start
    assert len(matrix.gpus) == 1000 and len(matrix.nics) == 8
    assert len(matrix.gpu_gpu) == 1000 * 999 // 2 and len(matrix.gpu_nic) == 8000
    assert seconds < 8.0, seconds


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("gpus", "nics"), [(1025, 0), (2, 257)])
def test_a_matrix_wider_than_any_node_is_refused_at_its_header(gpus: int, nics: int) -> None:
    """Memory grows with the square of the columns: 2,000 GPUs took ~800 MB before the refusal."""
    with pytest.raises(
        ParseError, match=r"topo -m:1: the header names .* more than the 1024 GPUs and 256 NICs"
    ):
        nvidia_smi.parse_topo_matrix(topo_matrix(gpus, nics=nics))
    header_only = topo_matrix(2000).split("\n", 1)[0] + "\n"  # refused before any row is needed
    with pytest.raises(ParseError, match=r"topo -m:1: the header has 2007 words: more columns than"):
        nvidia_smi.parse_topo_matrix(header_only)


@pytest.mark.timeout(60)
def test_smi_list_of_10000_gpus() -> None:
    text = smi_list(10_000)
    assert cpu_seconds(nvidia_smi.parse_smi_list, text) < 0.5  # 0.03 s of CPU; 1.7 s before
    gpus = nvidia_smi.parse_smi_list(text)
    assert [gpu.index for gpu in gpus[:3]] == [0, 1, 2] and len(gpus) == 10_000


@pytest.mark.timeout(60)
def test_smi_list_with_thousands_of_mig_devices_per_gpu() -> None:
    text = smi_list(5, migs=9_999)
    assert cpu_seconds(nvidia_smi.parse_smi_list, text) < 5.0
    gpus = nvidia_smi.parse_smi_list(text)
    assert [len(gpu.migs) for gpu in gpus] == [9_999] * 5
    assert gpus[4].migs[-1].device_index == 9_998


@pytest.mark.timeout(60)
def test_nvlink_status_of_10000_gpus_and_a_gpu_of_999_links() -> None:
    text = nvlink_status(10_000, 18)
    assert cpu_seconds(nvidia_smi.parse_nvlink_status, text) < 1.5  # 0.4 s of CPU; 3.3 s before
    gpus = nvidia_smi.parse_nvlink_status(text)
    assert len(gpus) == 10_000 and gpus[-1].links[:2] == ((0, 26.562), (1, 26.562))
    (gpu,) = nvidia_smi.parse_nvlink_status(nvlink_status(1, 999) * 1)
    assert len(gpu.links) == 999


@pytest.mark.timeout(60)
def test_ibstat_of_30000_adapters() -> None:
    adapters = ibstat.parse_ibstat(ibstat_output(30_000))
    assert len(adapters) == 30_000
    (adapter,) = ibstat.parse_ibstat(ibstat_output(1, ports=999))
    assert len(adapter.ports) == 999


@pytest.mark.timeout(60)
def test_ibv_devinfo_of_30000_adapters() -> None:
    assert len(ibstat.parse_ibv_devinfo(devinfo_output(30_000))) == 30_000


def test_duplicates_are_still_refused() -> None:
    with pytest.raises(Exception, match="listed twice"):
        ibstat.parse_ibstat(ibstat_output(2) + ibstat_output(1))
    with pytest.raises(Exception, match="listed twice"):
        nvidia_smi.parse_smi_list(smi_list(2) + smi_list(1))
    with pytest.raises(Exception, match="MIG Device 0 twice"):
        nvidia_smi.parse_smi_list(smi_list(1, migs=1) + "  MIG 1g.10gb     Device  0: (UUID: MIG-ffff)\n")
    with pytest.raises(Exception, match="Link 0 twice"):
        nvidia_smi.parse_nvlink_status(nvlink_status(1, 1) + "\t Link 0: 26.562 GB/s\n")
    with pytest.raises(Exception, match="disagrees"):
        nvidia_smi.parse_topo_matrix(topo_matrix(3).replace("GPU1\tNV18", "GPU1\tSYS", 1))
