"""``nvidia-smi topo -m``: every real corpus matrix against the facts SOURCES.md lists for it, plus
small inline samples for each odd variant and each way the parser must refuse."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from nodetopo.errors import ParseError
from nodetopo.model import LinkClass, TopoMatrix, format_cpulist
from nodetopo.sources import nvidia_smi
from nodetopo.sources.nvidia_smi import topo

PIX, PXB, PHB, NODE, SYS = LinkClass.PIX, LinkClass.PXB, LinkClass.PHB, LinkClass.NODE, LinkClass.SYS

# --------------------------------------------------------------------------------------------
# Facts computed straight from the matrix (derive.py does this over the graph; these few lines
# only prove the matrix was read right)
# --------------------------------------------------------------------------------------------


def nv_islands(matrix: TopoMatrix) -> list[tuple[tuple[int, ...], frozenset[int]]]:
    """Connected components of the NV# edges: (GPUs, the NV counts seen), largest-first then by GPU."""
    parent = {gpu.index: gpu.index for gpu in matrix.gpus}

    def find(x: int) -> int:
        while parent[x] != x:
            x = parent[x]
        return x

    for (a, b), link in matrix.gpu_gpu:
        if link.nvlinks:
            parent[find(a)] = find(b)
    groups: dict[int, list[int]] = {}
    for gpu in parent:
        groups.setdefault(find(gpu), []).append(gpu)
    islands = []
    for members in groups.values():
        if len(members) < 2:
            continue
        counts = frozenset(
            link.nvlinks for (a, b), link in matrix.gpu_gpu if link.nvlinks and a in members and b in members
        )
        islands.append((tuple(sorted(members)), counts))
    return sorted(islands)


def nv_map(matrix: TopoMatrix) -> dict[int, dict[int, int]]:
    """GPU -> {peer: NV count} for every NVLink pair."""
    peers: dict[int, dict[int, int]] = {gpu.index: {} for gpu in matrix.gpus}
    for (a, b), link in matrix.gpu_gpu:
        if link.nvlinks:
            peers[a][b] = link.nvlinks
            peers[b][a] = link.nvlinks
    return peers


def nearest_nics(matrix: TopoMatrix, gpu: int) -> tuple[LinkClass, frozenset[str]] | None:
    """The NICs at the GPU's best PCIe class, whatever that class is."""
    names = {nic.index: nic.name for nic in matrix.nics}
    classes = [(link.pcie, names[nic]) for (g, nic), link in matrix.gpu_nic if g == gpu and link.pcie]
    if not classes:
        return None
    best = min(cls for cls, _ in classes)
    return best, frozenset(name for cls, name in classes if cls == best)


def nic_class(matrix: TopoMatrix, gpu: int, nic_name: str) -> LinkClass | None:
    index = next(nic.index for nic in matrix.nics if nic.name == nic_name)
    return dict(matrix.gpu_nic)[(gpu, index)].pcie


def gpu_pcie(matrix: TopoMatrix) -> dict[tuple[int, int], LinkClass | None]:
    return {pair: link.pcie for pair, link in matrix.gpu_gpu}


def affinity(matrix: TopoMatrix) -> dict[int, tuple[str | None, str | None, int | None]]:
    """GPU -> (CPU Affinity, NUMA Affinity, GPU NUMA ID) as cpulist strings."""
    return {
        gpu.index: (
            format_cpulist(gpu.cpu_affinity) if gpu.cpu_affinity is not None else None,
            format_cpulist(gpu.numa_affinity) if gpu.numa_affinity is not None else None,
            gpu.gpu_numa_id,
        )
        for gpu in matrix.gpus
    }


# --------------------------------------------------------------------------------------------
# The table of expectations, one row per corpus file (numbers are SOURCES.md's)
# --------------------------------------------------------------------------------------------


def mlx(*numbers: int) -> frozenset[str]:
    return frozenset(f"mlx5_{n}" for n in numbers)


def per_gpu(groups: dict[tuple[int, ...], object]) -> dict[int, object]:
    return {gpu: value for gpus, value in groups.items() for gpu in gpus}


@dataclasses.dataclass(frozen=True)
class Expect:
    gpus: int
    nics: tuple[str, ...]
    islands: list[tuple[tuple[int, ...], frozenset[int]]]
    nearest: dict[int, object]  #: gpu -> (class, names) or None
    affinity: dict[int, object]  #: gpu -> (cpu, numa, gnid)
    extra: Callable[[TopoMatrix], None] | None = None


def _dgx1_mp(m: TopoMatrix) -> None:
    assert all(link.nvlinks == 0 for _, link in m.gpu_gpu)
    pairs = gpu_pcie(m)
    for (a, b), cls in pairs.items():
        if a // 4 != b // 4:
            assert cls is SYS, (a, b)
        elif a // 2 == b // 2:
            assert cls is PIX, (a, b)
        else:
            assert cls is PHB, (a, b)


def _dgx_a100(m: TopoMatrix) -> None:
    for gpu in range(8):
        for nic in ("mlx5_4", "mlx5_5", "mlx5_10", "mlx5_11"):
            assert nic_class(m, gpu, nic) is SYS
    nic_pairs = dict(m.nic_nic)
    assert nic_pairs[(4, 5)].pcie is PIX and nic_pairs[(10, 11)].pcie is PIX


def _v100_hybrid(m: TopoMatrix) -> None:
    assert nv_map(m) == {
        0: {1: 1, 2: 1, 3: 2, 4: 2},
        1: {0: 1, 2: 2, 3: 1, 5: 2},
        2: {0: 1, 1: 2, 3: 2, 6: 1},
        3: {0: 2, 1: 1, 2: 2, 7: 1},
        4: {0: 2, 5: 1, 6: 1, 7: 2},
        5: {1: 2, 4: 1, 6: 2, 7: 1},
        6: {2: 1, 4: 1, 5: 2, 7: 2},
        7: {3: 1, 4: 2, 5: 1, 6: 2},
    }
    assert len(m.gpu_gpu) == 28 and sum(1 for _, link in m.gpu_gpu if link.nvlinks) == 16  # not a full mesh


def _power9(m: TopoMatrix) -> None:
    for (a, b), cls in gpu_pcie(m).items():
        if a // 2 != b // 2:
            assert cls is SYS


def _della(m: TopoMatrix) -> None:
    assert gpu_pcie(m) == {(0, 1): SYS}


def _h100_ib_eth(m: TopoMatrix) -> None:
    for gpu in range(8):
        partner = gpu ^ 1
        assert nic_class(m, gpu, f"mlx5_ib{partner}") is PXB
        for eth in range(5):
            assert nic_class(m, gpu, f"mlx5_eth{eth}") is (NODE if gpu >= 4 else SYS)


def _rtx6000_4x(m: TopoMatrix) -> None:
    assert gpu_pcie(m) == {(0, 1): NODE, (2, 3): NODE, (0, 2): SYS, (0, 3): SYS, (1, 2): SYS, (1, 3): SYS}


def _rtx4090(m: TopoMatrix) -> None:
    for (a, b), cls in gpu_pcie(m).items():
        if a // 2 == b // 2:
            assert cls is PHB, (a, b)
        elif a >= 6 or b >= 6:
            assert cls is SYS, (a, b)
        else:
            assert cls is NODE, (a, b)
    assert sum(1 for gpu in m.gpus if gpu.numa_affinity == {0}) == 6  # the unbalanced 6/2 split


ALL8 = tuple(range(8))
EXPECTATIONS: dict[str, Expect] = {
    "dgx1-v100-8x-topo-mp-pcionly-no-nv-legend.txt": Expect(
        gpus=8,
        nics=("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"),
        islands=[],
        nearest=per_gpu(
            {(0, 1): (PIX, mlx(0)), (2, 3): (PIX, mlx(1)), (4, 5): (PIX, mlx(2)), (6, 7): (PIX, mlx(3))}
        ),
        affinity=per_gpu({(0, 1, 2, 3): ("0-19,40-59", "0", None), (4, 5, 6, 7): ("20-39,60-79", "1", None)}),
        extra=_dgx1_mp,
    ),
    "dgx-a100-8x-nv12-12mlx5-colheaders-numa8.txt": Expect(
        gpus=8,
        nics=tuple(f"mlx5_{n}" for n in range(12)),
        islands=[(ALL8, frozenset({12}))],
        nearest=per_gpu(
            {
                (0, 1): (PXB, mlx(0, 1)),
                (2, 3): (PXB, mlx(2, 3)),
                (4, 5): (PXB, mlx(6, 7)),
                (6, 7): (PXB, mlx(8, 9)),
            }
        ),
        affinity=per_gpu(
            {
                (0, 1): ("48-63,176-191", "3", None),
                (2, 3): ("16-31,144-159", "1", None),
                (4, 5): ("112-127,240-255", "7", None),
                (6, 7): ("80-95,208-223", "5", None),
            }
        ),
        extra=_dgx_a100,
    ),
    "v100-sxm2-8x-hybridcube-1nic-gpunumaid-vast.txt": Expect(
        gpus=8,
        nics=("mlx5_2",),
        islands=[(ALL8, frozenset({1, 2}))],
        nearest=per_gpu(
            {(0, 1, 2, 3): (NODE, frozenset({"mlx5_2"})), (4, 5, 6, 7): (SYS, frozenset({"mlx5_2"}))}
        ),
        affinity=per_gpu({(0, 1, 2, 3): ("0-19,40-59", "0", None), (4, 5, 6, 7): ("20-39,60-79", "1", None)}),
        extra=_v100_hybrid,
    ),
    "power9-ac922-v100-4x-nv3-numa0-8-traverse.txt": Expect(
        gpus=4,
        nics=("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"),
        islands=[((0, 1), frozenset({3})), ((2, 3), frozenset({3}))],
        nearest=per_gpu({(0, 1): (NODE, mlx(0, 1)), (2, 3): (NODE, mlx(2, 3))}),
        affinity=per_gpu({(0, 1): ("0-63", "0", None), (2, 3): ("64-127", "8", None)}),
        extra=_power9,
    ),
    "a100-pcie-2x-dualsocket-2mlx5-della.txt": Expect(
        gpus=2,
        nics=("mlx5_0", "mlx5_1"),
        islands=[],
        nearest={0: (NODE, mlx(0)), 1: (NODE, mlx(1))},
        affinity={0: ("0-63", "0", None), 1: ("64-127", "1", None)},
        extra=_della,
    ),
    "polaris-a100-4x-nv4-2mlx5-numa-nps4-mangled-header.txt": Expect(
        gpus=4,
        nics=("mlx5_0", "mlx5_1"),
        islands=[((0, 1, 2, 3), frozenset({4}))],
        nearest={0: (SYS, mlx(0, 1)), 1: (PHB, mlx(1)), 2: (SYS, mlx(0, 1)), 3: (PHB, mlx(0))},
        affinity={
            0: ("24-31,56-63", "3", None),
            1: ("16-23,48-55", "2", None),
            2: ("8-15,40-47", "1", None),
            3: ("0-7,32-39", "0", None),
        },
    ),
    "h100-8x-nv18-8ib-5eth-mlx5_ib-mlx5_eth-spaces.txt": Expect(
        gpus=8,
        nics=(*(f"mlx5_ib{n}" for n in range(8)), *(f"mlx5_eth{n}" for n in range(5))),
        islands=[(ALL8, frozenset({18}))],
        nearest={gpu: (PIX, frozenset({f"mlx5_ib{gpu}"})) for gpu in range(8)},
        affinity=per_gpu(
            {(0, 1, 2, 3): ("0-55,112-167", "0", None), (4, 5, 6, 7): ("56-111,168-223", "1", None)}
        ),
        extra=_h100_ib_eth,
    ),
    "h100-8x-nv18-nonic-spaces-mlsys-tutorial.txt": Expect(
        gpus=8,
        nics=(),
        islands=[(ALL8, frozenset({18}))],
        nearest=dict.fromkeys(range(8)),
        affinity=per_gpu(
            {(0, 1, 2, 3): ("0-47,96-143", "0", None), (4, 5, 6, 7): ("48-95,144-191", "1", None)}
        ),
    ),
    "h20-8x-nv18-2nic-cx6lx-nolegend-spaces.txt": Expect(
        gpus=8,
        nics=("NIC0", "NIC1"),
        islands=[(ALL8, frozenset({18}))],
        nearest=per_gpu(
            {
                (0, 1, 2, 3): (SYS, frozenset({"NIC0", "NIC1"})),
                (4, 5, 7): (NODE, frozenset({"NIC0", "NIC1"})),
                (6,): (PHB, frozenset({"NIC0", "NIC1"})),
            }
        ),
        affinity=per_gpu(
            {(0, 1, 2, 3): ("0-95,192-287", "0", None), (4, 5, 6, 7): ("96-191,288-383", "1", None)}
        ),
    ),
    "gcp-a4-b200-8x-nv18-8cx7-gke-collapsed-numa-cols.txt": Expect(
        gpus=8,
        nics=tuple(f"mlx5_{n}" for n in range(8)),
        islands=[(ALL8, frozenset({18}))],
        nearest=per_gpu(
            {
                (0, 1): (PIX, mlx(0, 1)),
                (2, 3): (PIX, mlx(2, 3)),
                (4, 5): (PIX, mlx(4, 5)),
                (6, 7): (PIX, mlx(6, 7)),
            }
        ),
        affinity=per_gpu(
            {(0, 1, 2, 3): ("0-55,112-167", "0", None), (4, 5, 6, 7): ("56-111,168-223", "1", None)}
        ),
    ),
    "gh200-4x-cray-ex-nv6-gpunumaid-spaces.txt": Expect(
        gpus=4,
        nics=(),
        islands=[((0, 1, 2, 3), frozenset({6}))],
        nearest=dict.fromkeys(range(4)),
        affinity={
            0: ("0-71", "0,5-11", 4),
            1: ("72-143", "1,13-19", 12),
            2: ("144-215", "2,21-27", 20),
            3: ("216-287", "3,29-35", 28),
        },
    ),
    "rtx6000ada-4x-pcie-dualsocket-epyc-4cx7-nics.txt": Expect(
        gpus=4,
        nics=("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"),
        islands=[],
        nearest=per_gpu({(0, 1): (NODE, mlx(0, 1)), (2, 3): (NODE, mlx(2, 3))}),
        affinity=per_gpu({(0, 1): ("0-31", "0", None), (2, 3): ("32-63", "1", None)}),
        extra=_rtx6000_4x,
    ),
    "rtx6000ada-2x-threadripper-phb-2nics-puget.txt": Expect(
        gpus=2,
        nics=("mlx5_0", "mlx5_1"),
        islands=[],
        nearest={0: (NODE, mlx(0, 1)), 1: (NODE, mlx(0, 1))},
        affinity={0: ("0-23", "0", None), 1: ("0-23", "0", None)},
        extra=lambda m: _assert_equal(gpu_pcie(m), {(0, 1): PHB}),
    ),
    "rtx4090-8x-pcie-dualsocket-phb-pairs-vast.txt": Expect(
        gpus=8,
        nics=(),
        islands=[],
        nearest=dict.fromkeys(range(8)),
        affinity=per_gpu(
            {(0, 1, 2, 3, 4, 5): ("0-35,72-107", "0", None), (6, 7): ("36-71,108-143", "1", None)}
        ),
        extra=_rtx4090,
    ),
    "rtx5090-2x-threadripper-phb-club3090.txt": Expect(
        gpus=2,
        nics=(),
        islands=[],
        nearest={0: None, 1: None},
        affinity={0: ("0-63", "0", None), 1: ("0-63", "0", None)},
        extra=lambda m: _assert_equal(gpu_pcie(m), {(0, 1): PHB}),
    ),
}


def _assert_equal(actual: object, expected: object) -> None:
    assert actual == expected


def test_every_corpus_file_has_expectations(corpus: Path) -> None:
    assert sorted(p.name for p in (corpus / "topo-m").iterdir()) == sorted(EXPECTATIONS)


@pytest.mark.corpus
@pytest.mark.parametrize("name", sorted(EXPECTATIONS))
def test_corpus_matrix_facts(corpus: Path, name: str) -> None:
    expect = EXPECTATIONS[name]
    matrix = nvidia_smi.parse_topo_matrix((corpus / "topo-m" / name).read_text())

    assert [gpu.index for gpu in matrix.gpus] == list(range(expect.gpus))
    assert tuple(nic.name for nic in matrix.nics) == expect.nics
    assert [nic.index for nic in matrix.nics] == list(range(len(expect.nics)))
    n, k = expect.gpus, len(expect.nics)
    assert len(matrix.gpu_gpu) == n * (n - 1) // 2
    assert len(matrix.gpu_nic) == n * k
    assert nv_islands(matrix) == expect.islands
    assert {gpu.index: nearest_nics(matrix, gpu.index) for gpu in matrix.gpus} == expect.nearest
    assert affinity(matrix) == expect.affinity
    if expect.extra is not None:
        expect.extra(matrix)


@pytest.mark.corpus
@pytest.mark.parametrize("name", sorted(EXPECTATIONS))
def test_corpus_matrix_survives_whitespace_rewrites(corpus: Path, name: str) -> None:
    """Tabs expanded by a web page, or collapsed to single spaces, read the same matrix."""
    text = (corpus / "topo-m" / name).read_text()
    original = nvidia_smi.parse_topo_matrix(text)
    assert nvidia_smi.parse_topo_matrix(text.expandtabs(8)) == original
    assert nvidia_smi.parse_topo_matrix(re.sub(r"[ \t]+", " ", text)) == original
    assert nvidia_smi.parse_topo_matrix(text.replace("\n", "\r\n")) == original


@pytest.mark.corpus
def test_header_without_escapes_or_with_literal_ones_reads_the_same(corpus: Path) -> None:
    text = (corpus / "topo-m" / "v100-sxm2-8x-hybridcube-1nic-gpunumaid-vast.txt").read_text()
    assert "\x1b[4m" in text
    original = nvidia_smi.parse_topo_matrix(text)
    assert nvidia_smi.parse_topo_matrix(text.replace("\x1b", "")) == original  # GitHub issue paste
    assert nvidia_smi.parse_topo_matrix(text.replace("\x1b[4m", "").replace("\x1b[0m", "")) == original


@pytest.mark.corpus
def test_nic_nic_cells_are_read(corpus: Path) -> None:
    matrix = nvidia_smi.parse_topo_matrix(
        (corpus / "topo-m" / "h100-8x-nv18-8ib-5eth-mlx5_ib-mlx5_eth-spaces.txt").read_text()
    )
    cells = dict(matrix.nic_nic)
    assert len(cells) == 13 * 12 // 2
    assert cells[(0, 1)].pcie is PXB and cells[(8, 12)].pcie is PIX and cells[(0, 8)].pcie is SYS


# --------------------------------------------------------------------------------------------
# Inline samples: the odd variants
# --------------------------------------------------------------------------------------------


def parse(text: str) -> TopoMatrix:
    return nvidia_smi.parse_topo_matrix(text, "sample")


def test_old_driver_soc_cells_and_pcie_switch_legend() -> None:
    text = (
        "\tGPU0\tGPU1\tGPU2\tmlx4_0\tCPU Affinity\n"
        "GPU0\t X \tPIX\tSOC\tPIX\t0-11\n"
        "GPU1\tPIX\t X \tSOC\tPIX\t0-11\n"
        "GPU2\tSOC\tSOC\t X \tSOC\t12-23\n"
        "mlx4_0\tPIX\tPIX\tSOC\t X \t\n"
        "\n"
        "Legend:\n\n"
        "  X   = Self\n"
        "  SOC  = Connection traversing PCIe as well as the SMP link between CPU sockets(e.g. QPI)\n"
        "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)\n"
        "  PXB  = Connection traversing multiple PCIe switches (without traversing the PCIe Host Bridge)\n"
        "  PIX  = Connection traversing a single PCIe switch\n"
        "  NV#  = Connection traversing a bonded set of # NVLinks\n"
    )
    matrix = parse(text)
    assert gpu_pcie(matrix) == {(0, 1): PIX, (0, 2): SYS, (1, 2): SYS}
    assert [nic.name for nic in matrix.nics] == ["mlx4_0"]
    assert affinity(matrix) == {0: ("0-11", None, None), 1: ("0-11", None, None), 2: ("12-23", None, None)}


@pytest.mark.parametrize("nic", ["mlx5_bond_0", "mlx4_0", "ib0", "mlx5_ib0", "rdmap79s0", "hfi1_0"])
def test_nic_names_in_the_legend_and_in_the_header(nic: str) -> None:
    legend = (
        "\tGPU0\tNIC0\tCPU Affinity\tNUMA Affinity\n"
        "GPU0\t X \tNODE\t0-7\t0\n"
        "NIC0\tNODE\t X \t\t\n"
        "\nLegend:\n\n  X    = Self\n\nNIC Legend:\n\n"
        f"  NIC0: {nic}\n"
    )
    header = f"\tGPU0\t{nic}\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tNODE\t0-7\t0\n{nic}\tNODE\t X \t\t\n"
    for text in (legend, header):
        matrix = parse(text)
        assert [(n.index, n.name) for n in matrix.nics] == [(0, nic)]
        assert nearest_nics(matrix, 0) == (NODE, frozenset({nic}))


@pytest.mark.parametrize("count", [1, 2, 4, 6, 12, 18, 36])
def test_nv_cells_of_any_count(count: int) -> None:
    matrix = parse(f"\tGPU0\tGPU1\nGPU0\t X \tNV{count}\nGPU1\tNV{count}\t X \n")
    assert dict(matrix.gpu_gpu)[(0, 1)].nvlinks == count
    assert dict(matrix.gpu_gpu)[(0, 1)].pcie is None


def test_mangled_header_collapsed_cells_trailing_space_blank_lines_and_text_after_the_legend() -> None:
    text = (
        "\n\n"
        "GPU0 GPU1 NIC0 CPU Affinity NUMA Affinity GPU NUMA ID   \n"
        "GPU0  X   NV4  PIX  0-3,8  0 N/A   \n"
        "GPU1 NV4   X   SYS  4-7   1 N/A\n"
        "NIC0 PIX SYS  X  \n"
        "\n\n"
        "Legend:\n\n  X    = Self\n\n"
        "NIC Legend:\n\n  NIC0: mlx5_0\n\n"
        "$ echo done\ndone\n"
    )
    matrix = parse(text)
    assert affinity(matrix) == {0: ("0-3,8", "0", None), 1: ("4-7", "1", None)}
    assert [n.name for n in matrix.nics] == ["mlx5_0"]
    assert nv_islands(matrix) == [((0, 1), frozenset({4}))]


def test_na_affinity_and_no_affinity_columns() -> None:
    with_na = parse(
        "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tPHB\t0-11\tN/A\nGPU1\tPHB\t X \tN/A\tN/A\n"
    )
    assert affinity(with_na) == {0: ("0-11", None, None), 1: (None, None, None)}
    bare = parse("\tGPU0\tGPU1\nGPU0\t X \tPHB\nGPU1\tPHB\t X \n")
    assert affinity(bare) == {0: (None, None, None), 1: (None, None, None)}


def test_single_gpu() -> None:
    matrix = parse("\tGPU0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \t0-15\t0\n")
    assert matrix.gpu_gpu == () and affinity(matrix) == {0: ("0-15", "0", None)}


def test_err_cells_are_left_out_and_reported() -> None:
    matrix, problems = topo._read_topo_matrix(
        "\tGPU0\tGPU1\tGPU2\nGPU0\t X \tERR!\tNV2\nGPU1\tERR!\t X \tPHB\nGPU2\tNV2\tPHB\t X \n", "sample"
    )
    assert dict(matrix.gpu_gpu).keys() == {(0, 2), (1, 2)}
    assert problems and "ERR!" in problems[0]


# --------------------------------------------------------------------------------------------
# Refusals: a ParseError naming the line (and the cell), never a guess
# --------------------------------------------------------------------------------------------

GOOD = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV4\t0-7\nGPU1\tNV4\t X \t0-7\n"


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        (GOOD.replace("NV4\t0-7\nGPU1", "NVX\t0-7\nGPU1"), 2, ["cell 3", "NVX"]),
        (GOOD.replace("NV4\t0-7\nGPU1", "FOO\t0-7\nGPU1"), 2, ["cell 3", "column GPU1", "FOO"]),
        (GOOD.replace("NV4\t0-7\nGPU1", "NV0\t0-7\nGPU1"), 2, ["NV0"]),
        (GOOD.replace("GPU1\tNV4", "GPU1\tNV2"), 3, ["disagrees"]),
        (GOOD.replace("GPU1\tNV4", "GPU1\tPIX"), 3, ["disagrees"]),
        (GOOD.replace("GPU0\t X ", "GPU0\tPIX"), 2, ["diagonal"]),
        (GOOD.replace("GPU1\tNV4\t X ", "GPU1\tX\tNV4"), 3, ["X off the diagonal"]),
        (GOOD.replace("\t0-7\nGPU1", "\t7-0\nGPU1"), 2, ["CPU Affinity", "7-0"]),
        (GOOD.replace("\t0-7\nGPU1", "\t0-7\t9\nGPU1"), 2, ["cells"]),
        (GOOD.replace("NV4\t0-7\nGPU1", "NV4\nGPU1"), 2, ["cells"]),
        (GOOD + "GPU0\t X \tNV4\t0-7\n", 4, ["second row"]),
        (GOOD.replace("GPU1\tNV4", "GPU7\tNV4"), 3, ["GPU7"]),
        (GOOD.replace("CPU Affinity", "CPU Affinity\tBogus"), 1, ["Bogus"]),
        (GOOD.replace("\tGPU1\t", "\tGPU0\t"), 1, ["twice"]),
    ],
)
def test_refusals_name_the_line(text: str, line: int, words: list[str]) -> None:
    with pytest.raises(ParseError) as caught:
        parse(text)
    assert caught.value.line == line
    assert caught.value.source == "nvidia-smi" and caught.value.path == "sample"
    for word in words:
        assert word in caught.value.detail


@pytest.mark.parametrize(
    "text",
    [
        "",
        "\n\n",
        "Failed to initialize NVML: Driver/library version mismatch\n",
        "GPU0\t X \tNV4\t0-7\nGPU1\tNV4\t X \t0-7\n",  # header lost: the first row is not a header
        GOOD.split("GPU1\tNV4")[0],  # cut short: GPU1 has no row
        GOOD + "\nNIC Legend:\n\n  NIC0: mlx5_0\n",  # the legend names a column that is not there
        "<html><body>502 Bad Gateway</body></html>",
    ],
)
def test_garbage_is_a_parse_error(text: str) -> None:
    with pytest.raises(ParseError):
        parse(text)


def test_a_gpu_with_a_nic_row_missing_is_still_read() -> None:
    """A NIC whose row was cut from a paste still has its GPU cells (from the GPU rows)."""
    matrix = parse("\tGPU0\tNIC0\tCPU Affinity\nGPU0\t X \tPIX\t0-7\n")
    assert dict(matrix.gpu_nic)[(0, 0)].pcie is PIX and matrix.nic_nic == ()
