"""``nvidia-smi topo -m`` (or ``topo -mp``): the matrix of GPUs, NICs and the links between them.

The one output that carries, on its own, GPUs, RDMA NICs, NVLink bundles, GPU-NIC PCIe classes and
CPU/NUMA affinity (a bundle holding only that file must still yield a topology), so its parser is the
careful one. It reads the matrix by *whitespace tokens*, not by column positions: every cell
nvidia-smi prints is one token (``X``, ``NV12``, ``PIX``, ``0-55,112-167``, ``N/A``), so
tab-separated output, tabs expanded by a web page, tabs collapsed to single spaces and a header that
lost its leading TAB all read the same. What it does not know it refuses (``ParseError`` naming the
line and the cell), it never guesses.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

from nodetopo import model
from nodetopo.errors import ParseError, excerpt
from nodetopo.model import LinkClass
from nodetopo.sources.nvidia_smi._text import (
    _ERROR_VALUES,
    _SGR,
    NAME,
    _cpulist,
    _int,
    _lines,
    _normalise_errors,
)

TOPO_PATH = "nvidia-smi topo -m"

#: the affinity columns after the device columns, as header words
_AFFINITY_COLUMNS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("cpu", ("CPU", "Affinity")),
    ("numa", ("NUMA", "Affinity")),
    ("gpu_numa", ("GPU", "NUMA", "ID")),
)
_GPU_COLUMN = re.compile(r"GPU([0-9]{1,4})")
_NIC_COLUMN = re.compile(r"NIC([0-9]{1,4})")
#: a device column name: GPU3, NIC0, mlx5_0, mlx5_bond_0, mlx4_0, ib0, rdmap79s0, hfi1_0 ...
_DEVICE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.:-]{0,63}")
_NV_CELL = re.compile(r"NV([1-9][0-9]{0,3})")
_PCIE_CELLS = {cls.name: cls for cls in LinkClass} | {"SOC": LinkClass.SYS}  # SOC: drivers before ~375
_NIC_LEGEND_ENTRY = re.compile(r"NIC([0-9]{1,4}):\s*(\S+)")
#: the most GPU columns read (the NodeTopology schema's GPUs per node) and NIC columns (real nodes
#: list up to a few dozen RDMA devices): the matrix costs memory by the square of its columns
#: (1,024 GPUs: ~200 MB), so a header naming more is refused before any row is read
MAX_GPU_COLUMNS = 1024
MAX_NIC_COLUMNS = 256


def _topo_cell(token: str) -> model.TopoLink | None:
    """``NV#`` or a PCIe class as a link; None for anything else (``X`` is handled by the caller)."""
    nv = _NV_CELL.fullmatch(token)
    if nv is not None:
        return model.TopoLink(nvlinks=int(nv[1]))
    pcie = _PCIE_CELLS.get(token)
    return model.TopoLink(pcie=pcie) if pcie is not None else None


@dataclasses.dataclass(slots=True)
class _TopoRow:
    line: int
    label: str
    cells: list[str]
    affinity: list[str]


def _read_topo_matrix(text: str, path: str) -> tuple[model.TopoMatrix, list[str]]:
    """Parse ``topo -m`` (or ``topo -mp``); also return the problems of a partly readable matrix."""

    def fail(detail: str, line: int | None = None) -> ParseError:
        return ParseError(NAME, path, detail, line=line)

    lines = [_normalise_errors(_SGR.sub("", line)) for line in _lines(text)]
    problems: list[str] = []

    # The header: the first line whose first word is a GPU column (a paste may carry text before it).
    header_at = next(
        (n for n, line in enumerate(lines) if line.split() and _GPU_COLUMN.fullmatch(line.split()[0])),
        None,
    )
    if header_at is None:
        raise fail("no matrix header (a line starting with GPU0 ...) found")
    devices, affinity_columns = _topo_header(lines[header_at].split(), fail, header_at + 1)
    position = {label: n for n, label in enumerate(devices)}  # every lookup below is O(1)

    # The rows, up to the first blank line or the legend.
    rows: dict[str, _TopoRow] = {}
    end = header_at + 1
    while end < len(lines) and lines[end].strip() and lines[end].split()[0] != "Legend:":
        number = end + 1
        tokens = lines[end].split()
        label = tokens[0]
        if label not in position:
            shown = ", ".join(devices[:8]) + (", ..." if len(devices) > 8 else "")
            raise fail(f"expected a row of one of the columns {shown}, got {excerpt(label)}", number)
        if label in rows:
            raise fail(f"a second row for {label}", number)
        if len(tokens) - 1 < len(devices):
            raise fail(f"row {label} has {len(tokens) - 1} cells, the header names {len(devices)}", number)
        cells, affinity = tokens[1 : 1 + len(devices)], tokens[1 + len(devices) :]
        is_gpu = _GPU_COLUMN.fullmatch(label) is not None
        if is_gpu and len(affinity) != len(affinity_columns):
            raise fail(
                f"row {label} has {len(tokens) - 1} cells, expected {len(devices)} links"
                f" + {len(affinity_columns)} affinity values",
                number,
            )
        if not is_gpu and len(affinity) not in (0, len(affinity_columns)):
            raise fail(f"NIC row {label} has {len(affinity)} values after its {len(devices)} links", number)
        rows[label] = _TopoRow(number, label, cells, affinity)
        end += 1

    links = _topo_links(devices, position, rows, fail, problems)
    nic_names = _nic_legend(lines[end:], end, position, fail)

    gpu_columns = {label: int(m[1]) for label in devices if (m := _GPU_COLUMN.fullmatch(label))}
    nic_columns = [label for label in devices if label not in gpu_columns]
    nic_index = {label: n for n, label in enumerate(nic_columns)}
    for label in gpu_columns:
        if label not in rows:
            raise fail(f"no row for {label}: the matrix is cut short")

    gpus = tuple(
        sorted(
            (
                _topo_gpu(rows[label], index, affinity_columns, fail, problems)
                for label, index in gpu_columns.items()
            ),
            key=lambda gpu: gpu.index,
        )
    )
    nics = tuple(
        model.TopoNic(index=nic_index[label], name=nic_names.get(label, label)) for label in nic_columns
    )

    # per column position: is it a GPU, and its GPU number or NIC index
    gpu_at = [label in gpu_columns for label in devices]
    number_at = [gpu_columns[label] if label in gpu_columns else nic_index[label] for label in devices]
    Pairs = list[tuple[tuple[int, int], model.TopoLink]]
    gpu_gpu: Pairs = []
    gpu_nic: Pairs = []
    nic_nic: Pairs = []
    width = len(devices)
    for key, link in links.items():
        a, b = divmod(key, width)  # column positions, a < b
        first, second = number_at[a], number_at[b]
        low, high = (first, second) if first <= second else (second, first)
        if gpu_at[a] and gpu_at[b]:
            gpu_gpu.append(((low, high), link))
        elif gpu_at[a]:
            gpu_nic.append(((first, second), link))
        elif gpu_at[b]:
            gpu_nic.append(((second, first), link))
        else:
            nic_nic.append(((low, high), link))
    matrix = model.TopoMatrix(
        gpus=gpus,
        nics=nics,
        gpu_gpu=tuple(sorted(gpu_gpu, key=lambda item: item[0])),
        gpu_nic=tuple(sorted(gpu_nic, key=lambda item: item[0])),
        nic_nic=tuple(sorted(nic_nic, key=lambda item: item[0])),
    )
    return matrix, problems


def _topo_header(
    tokens: list[str], fail: Callable[[str, int | None], ParseError], number: int
) -> tuple[list[str], list[str]]:
    """Split the header words into device columns and affinity columns (``CPU Affinity`` ...)."""
    if len(tokens) > MAX_GPU_COLUMNS + MAX_NIC_COLUMNS + 7:  # 7: the words of the affinity columns
        raise fail(
            f"the header has {len(tokens)} words: more columns than the {MAX_GPU_COLUMNS} GPUs and"
            f" {MAX_NIC_COLUMNS} NICs read",
            number,
        )
    devices: list[str] = []
    seen: set[str] = set()
    affinity: list[str] = []
    at = 0
    while at < len(tokens):
        for key, words in _AFFINITY_COLUMNS:
            if tuple(tokens[at : at + len(words)]) == words:
                if key in affinity:
                    raise fail(f"the header names {' '.join(words)!r} twice", number)
                affinity.append(key)
                at += len(words)
                break
        else:
            name = tokens[at]
            if affinity:
                raise fail(f"unexpected header word {excerpt(name)} after the affinity columns", number)
            if _DEVICE_NAME.fullmatch(name) is None or name == "X" or _topo_cell(name) is not None:
                raise fail(f"expected a device column name in the header, got {excerpt(name)}", number)
            if name in seen:
                raise fail(f"the header names the column {name} twice", number)
            seen.add(name)
            devices.append(name)
            at += 1
    gpu_numbers = [int(m[1]) for name in devices if (m := _GPU_COLUMN.fullmatch(name))]
    if len(gpu_numbers) > MAX_GPU_COLUMNS or len(devices) - len(gpu_numbers) > MAX_NIC_COLUMNS:
        raise fail(
            f"the header names {len(gpu_numbers)} GPUs and {len(devices) - len(gpu_numbers)} NICs:"
            f" more than the {MAX_GPU_COLUMNS} GPUs and {MAX_NIC_COLUMNS} NICs read",
            number,
        )
    if len(set(gpu_numbers)) != len(gpu_numbers):
        raise fail("the header names one GPU index twice", number)
    if tuple(affinity) not in {tuple(key for key, _ in _AFFINITY_COLUMNS[:n]) for n in range(4)}:
        raise fail(f"affinity columns in an unknown order: {affinity}", number)
    return devices, affinity


def _topo_links(
    devices: list[str],
    position: dict[str, int],
    rows: dict[str, _TopoRow],
    fail: Callable[[str, int | None], ParseError],
    problems: list[str],
) -> dict[int, model.TopoLink]:
    """Read every off-diagonal cell; both halves of the matrix must agree.

    Linear in the cells, with little work per cell: a matrix of 1,000 GPUs has a million of them.
    The few distinct cell values are read once each (``known``) and shared; a pair of column
    positions ``a < b`` is the key ``a * len(devices) + b``.
    """
    width = len(devices)
    seen: dict[int, tuple[str, int]] = {}
    links: dict[int, model.TopoLink] = {}
    known: dict[str, model.TopoLink | None] = {}

    def where(row: _TopoRow, column: int) -> str:
        return f"cell {column + 2} (row {row.label}, column {devices[column]})"

    for row in rows.values():
        at = position[row.label]
        for column, token in enumerate(row.cells):
            if column == at:
                if token != "X":
                    raise fail(
                        f"{where(row, column)}: expected X on the diagonal, got {excerpt(token)}", row.line
                    )
                continue
            link = known.get(token)
            if link is None:
                if token == "X":
                    raise fail(f"{where(row, column)}: X off the diagonal", row.line)
                if token in _ERROR_VALUES or token == "N/A":
                    problems.append(f"{row.label}-{devices[column]} reads {token}")
                    continue
                link = known[token] = _topo_cell(token)
                if link is None:
                    raise fail(
                        f"{where(row, column)}: unknown value {excerpt(token)}"
                        " (expected X, NV#, PIX, PXB, PHB, NODE, SYS)",
                        row.line,
                    )
            pair = at * width + column if at < column else column * width + at
            other = links.get(pair)
            if other is None:
                seen[pair] = (token, row.line)
                links[pair] = link
            elif other is not link and other != link:
                other_token, other_line = seen[pair]
                raise fail(
                    f"{where(row, column)}: {token} disagrees with {other_token} for the same pair"
                    f" on line {other_line}",
                    row.line,
                )
    return links


def _topo_gpu(
    row: _TopoRow,
    index: int,
    columns: list[str],
    fail: Callable[[str, int | None], ParseError],
    problems: list[str],
) -> model.TopoGpu:
    values = dict(zip(columns, row.affinity, strict=True))
    cpu = numa = None
    gpu_numa: int | None = None
    for key, value in values.items():
        if value == "N/A":
            continue
        if value in _ERROR_VALUES:
            problems.append(f"{row.label} {key} affinity reads {value}")
            continue
        if key == "gpu_numa":
            gpu_numa = _int(value)
            if gpu_numa is None:
                raise fail(f"{row.label}: GPU NUMA ID {excerpt(value)} is not a number or N/A", row.line)
            continue
        ids = _cpulist(value)
        if ids is None:
            what = "CPU Affinity" if key == "cpu" else "NUMA Affinity"
            raise fail(f"{row.label}: {what} {excerpt(value)} is not a cpulist or N/A", row.line)
        if key == "cpu":
            cpu = ids
        else:
            numa = ids
    return model.TopoGpu(index=index, cpu_affinity=cpu, numa_affinity=numa, gpu_numa_id=gpu_numa)


def _nic_legend(
    lines: list[str], offset: int, devices: dict[str, int], fail: Callable[[str, int | None], ParseError]
) -> dict[str, str]:
    """``NIC Legend:`` entries (``NIC0: mlx5_0``) as column label -> device name."""
    names: dict[str, str] = {}
    start = next((n for n, line in enumerate(lines) if line.strip() == "NIC Legend:"), None)
    if start is None:
        return names
    for n in range(start + 1, len(lines)):
        stripped = lines[n].strip()
        if not stripped:
            if names:
                break
            continue
        entry = _NIC_LEGEND_ENTRY.fullmatch(stripped)
        if entry is None:
            break  # text after the legend
        label = f"NIC{int(entry[1])}"
        if label not in devices:
            raise fail(f"the NIC Legend names {label}, which is not a column of the matrix", offset + n + 1)
        if label in names:
            raise fail(f"the NIC Legend names {label} twice", offset + n + 1)
        names[label] = entry[2]
    if len(set(names.values())) != len(names):
        raise fail("the NIC Legend gives two NICs the same name", offset + start + 1)
    return names


def parse_topo_matrix(text: str, path: str = TOPO_PATH) -> model.TopoMatrix:
    """Parse ``nvidia-smi topo -m`` (or ``topo -mp``) into a ``TopoMatrix``.

    NIC columns are named from the ``NIC Legend`` (``NIC0`` -> ``mlx5_0``); without a legend they keep
    their header names (``NIC0``, or ``mlx5_0`` on drivers that name the columns so). Cells that read
    ``ERR!``/``N/A`` are left out of the pair lists (``collect`` reports them as Degraded).
    """
    return _read_topo_matrix(text, path)[0]
