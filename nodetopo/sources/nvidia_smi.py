"""The ``nvidia-smi`` text outputs: ``topo -m``, ``-L``, ``-q -x`` (and ``-q`` text), ``nvlink -s``.

``nvidia-smi topo -m`` is the one output that carries, on its own, GPUs, RDMA NICs, NVLink bundles,
GPU-NIC PCIe classes and CPU/NUMA affinity (a bundle holding only that file must still
yield a topology), so its parser is the careful one. It reads the matrix by *whitespace tokens*, not
by column positions: every cell nvidia-smi prints is one token (``X``, ``NV12``, ``PIX``, ``0-55,112-167``,
``N/A``), so tab-separated output, tabs expanded by a web page, tabs collapsed to single spaces and a
header that lost its leading TAB all read the same. What it does not know it refuses (``ParseError``
naming the line and the cell), it never guesses.

Each pure ``parse_*`` raises ``ParseError``. Their ``_read_*`` twins also return the *problems* seen in
an otherwise valid output (``ERR!`` cells, ``[Unknown Error]`` values, a GPU whose handle could not be
read); ``collect()`` turns those into a ``Degraded`` condition and keeps the rest.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from nodetopo import model
from nodetopo.errors import ParseError, clip, excerpt
from nodetopo.host import CommandRunner
from nodetopo.model import Condition, ConditionReason, Facts, LinkClass, SourceStatus
from nodetopo.reuse import ScanCache
from nodetopo.sources import commands
from nodetopo.sources.base import Context, SourceResult, condition, failure_level, guarded
from nodetopo.sources.commands import Command

log = logging.getLogger(__name__)

NAME = "nvidia-smi"

_HUNG = " (a hung GPU or driver?)"
#: the commands this source runs, each on its own (a capture bundle keeps each output in its file)
TOPO_COMMAND = Command(argv=("nvidia-smi", "topo", "-m"), output="nvidia-smi-topo-m.txt", hung=_HUNG)
LIST_COMMAND = Command(argv=("nvidia-smi", "-L"), output="nvidia-smi-L.txt", hung=_HUNG)
QUERY_XML_COMMAND = Command(argv=("nvidia-smi", "-q", "-x"), output="nvidia-smi-q.xml", hung=_HUNG)
NVLINK_COMMAND = Command(argv=("nvidia-smi", "nvlink", "-s"), output="nvidia-smi-nvlink-s.txt", hung=_HUNG)
COMMANDS: tuple[Command, ...] = (TOPO_COMMAND, LIST_COMMAND, QUERY_XML_COMMAND, NVLINK_COMMAND)
TOPO_ARGV = TOPO_COMMAND.argv
LIST_ARGV = LIST_COMMAND.argv
QUERY_XML_ARGV = QUERY_XML_COMMAND.argv
NVLINK_ARGV = NVLINK_COMMAND.argv

_T = TypeVar("_T")

# --------------------------------------------------------------------------------------------
# Shared helpers
# --------------------------------------------------------------------------------------------

#: ``ESC[4m`` / ``ESC[0m`` around the header, or the ``[4m`` / ``[0m`` left when a paste lost the ESC
_SGR = re.compile(r"\x1b?\[[0-9;]{1,8}m")
#: values nvidia-smi prints where it could not read something; one token each after normalising
_ERROR_VALUES = frozenset({"ERR!", "[N/A]", "[Unknown_Error]", "Unknown_Error", "[GPU_requires_reset]"})
_MAX_CPU_ID = 65535  # far above any real machine; bounds the sets a hostile input could make us build
_CPULIST = re.compile(r"[0-9]{1,6}(?:-[0-9]{1,6})?(?:,[0-9]{1,6}(?:-[0-9]{1,6})?)*")


def _lines(text: str) -> list[str]:
    """Lines without line ends or trailing whitespace; index + 1 is the line number."""
    return [line.rstrip() for line in text.split("\n")]


def _normalise_errors(line: str) -> str:
    """Make the multi-word error values one token, so that whitespace splitting keeps columns."""
    return (
        line.replace("[Unknown Error]", "[Unknown_Error]")
        .replace("Unknown Error", "Unknown_Error")
        .replace("[GPU requires reset]", "[GPU_requires_reset]")
    )


def _cpulist(value: str) -> frozenset[int] | None:
    """A cpulist cell (``0-55,112-167``), or None when it is not one."""
    if _CPULIST.fullmatch(value) is None:
        return None
    try:
        ids = model.parse_cpulist(value)
    except ValueError:
        return None
    if any(cpu > _MAX_CPU_ID for cpu in ids):
        return None
    return ids


def _int(value: str) -> int | None:
    return int(value) if re.fullmatch(r"[0-9]{1,9}", value) else None


# --------------------------------------------------------------------------------------------
# nvidia-smi topo -m
# --------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------
# nvidia-smi -L
# --------------------------------------------------------------------------------------------

LIST_PATH = "nvidia-smi -L"

_GPU_LINE = re.compile(r"GPU ([0-9]{1,4}): (.*\S) \(UUID: (GPU-[0-9A-Za-z-]{1,80})\)")
#: ``  MIG 3g.40gb     Device  0: (UUID: MIG-<uuid>)``; drivers before R470 print ``MIG-GPU-<uuid>/<gi>/<ci>``
_MIG_LINE = re.compile(
    r"MIG (\S{1,40})\s+Device\s+([0-9]{1,4}): "
    r"\(UUID: (MIG-[0-9A-Za-z-]{1,80}(?:/([0-9]{1,4})/([0-9]{1,4}))?)\)"
)
#: a GPU nvidia-smi could not open; printed instead of its line (``collect`` reports it as Degraded)
_UNREADABLE_GPU = re.compile(r"Unable to determine the device handle for .*")


def _read_smi_list(text: str, path: str) -> tuple[tuple[model.ListedGpu, ...], list[str]]:
    gpus: list[model.ListedGpu] = []
    migs: list[list[model.MigDevice]] = []  #: the MIG devices of gpus[i], joined at the end (linear)
    seen: set[int] = set()  #: GPU indices
    seen_migs: set[tuple[int, int]] = set()  #: (GPU index, MIG device index)
    problems: list[str] = []
    for number, line in enumerate(_lines(text), start=1):
        stripped = line.strip()
        if not stripped:
            continue
        gpu = _GPU_LINE.fullmatch(stripped)
        if gpu is not None and not line[0].isspace():
            index = int(gpu[1])
            if index in seen:
                raise ParseError(NAME, path, f"GPU {index} is listed twice", line=number)
            seen.add(index)
            gpus.append(model.ListedGpu(index=index, model=gpu[2], uuid=gpu[3]))
            migs.append([])
            continue
        mig = _MIG_LINE.fullmatch(stripped)
        if mig is not None:
            if not gpus:
                raise ParseError(NAME, path, "a MIG device before any GPU line", line=number)
            parent = gpus[-1]
            device = model.MigDevice(
                uuid=mig[3],
                parent_uuid=parent.uuid,
                parent_index=parent.index,
                profile=mig[1],
                device_index=int(mig[2]),
                gpu_instance=int(mig[4]) if mig[4] is not None else None,
                compute_instance=int(mig[5]) if mig[5] is not None else None,
            )
            if (parent.index, int(mig[2])) in seen_migs:
                raise ParseError(
                    NAME, path, f"GPU {parent.index} lists MIG Device {mig[2]} twice", line=number
                )
            seen_migs.add((parent.index, int(mig[2])))
            migs[-1].append(device)
            continue
        if _UNREADABLE_GPU.fullmatch(stripped):
            problems.append(stripped)
            continue
        raise ParseError(
            NAME,
            path,
            f"expected 'GPU n: <model> (UUID: GPU-...)' or a MIG line, got {excerpt(stripped)}",
            line=number,
        )
    joined = (
        dataclasses.replace(gpu, migs=tuple(found)) if found else gpu
        for gpu, found in zip(gpus, migs, strict=True)
    )
    return tuple(sorted(joined, key=lambda gpu: gpu.index)), problems


def parse_smi_list(text: str, path: str = LIST_PATH) -> tuple[model.ListedGpu, ...]:
    """Parse ``nvidia-smi -L``: GPUs by index, each with the MIG devices listed under it.

    Inside a container or Slurm job the indices are the job's (re-indexed), not the host's; the UUIDs
    are the stable identity.
    """
    return _read_smi_list(text, path)[0]


# --------------------------------------------------------------------------------------------
# nvidia-smi nvlink -s
# --------------------------------------------------------------------------------------------

NVLINK_PATH = "nvidia-smi nvlink -s"

_NVLINK_GPU = re.compile(
    r"GPU ([0-9]{1,4}): (.*\S) \(UUID: (GPU-[0-9A-Za-z-]{1,80})\)|GPU ([0-9]{1,4}): (.*\S)"
)
_NVLINK_LINE = re.compile(r"Link ([0-9]{1,3}): (.*)")
_NVLINK_SPEED = re.compile(r"([0-9]{1,6}(?:\.[0-9]{1,6})?) GB/s")


def _read_nvlink_status(text: str, path: str) -> tuple[tuple[model.NvlinkStatus, ...], list[str]]:
    gpus: list[model.NvlinkStatus] = []
    links: list[dict[int, float | None]] = []  #: the links of gpus[i], joined at the end (linear)
    seen: set[int] = set()
    problems: list[str] = []
    for number, line in enumerate(_lines(text), start=1):
        stripped = line.strip()
        if not stripped:
            continue
        link = _NVLINK_LINE.fullmatch(stripped)
        if link is not None:
            if not gpus:
                raise ParseError(NAME, path, "a Link line before any GPU line", line=number)
            value = link[2].strip()
            speed: float | None
            if value.lower() == "<inactive>":
                speed = None
            elif (match := _NVLINK_SPEED.fullmatch(value)) is not None:
                speed = float(match[1])
            elif _normalise_errors(value) in _ERROR_VALUES or value == "N/A":
                problems.append(f"GPU {gpus[-1].index} link {link[1]} reads {value}")
                speed = None
            else:
                raise ParseError(
                    NAME,
                    path,
                    f"Link {link[1]}: expected '<n> GB/s' or '<inactive>', got {excerpt(value)}",
                    line=number,
                )
            if int(link[1]) in links[-1]:
                raise ParseError(NAME, path, f"GPU {gpus[-1].index} lists Link {link[1]} twice", line=number)
            links[-1][int(link[1])] = speed
            continue
        gpu = _NVLINK_GPU.fullmatch(stripped)
        if gpu is not None and not line[0].isspace():
            index = int(gpu[1] if gpu[1] is not None else gpu[4])
            if index in seen:
                raise ParseError(NAME, path, f"GPU {index} is listed twice", line=number)
            seen.add(index)
            gpus.append(model.NvlinkStatus(index=index, uuid=gpu[3], links=()))
            links.append({})
            continue
        raise ParseError(
            NAME, path, f"expected 'GPU n: ...' or 'Link n: ...', got {excerpt(stripped)}", line=number
        )
    result = tuple(
        sorted(
            (
                dataclasses.replace(gpu, links=tuple(sorted(found.items())))
                for gpu, found in zip(gpus, links, strict=True)
            ),
            key=lambda gpu: gpu.index,
        )
    )
    return result, problems


def parse_nvlink_status(text: str, path: str = NVLINK_PATH) -> tuple[model.NvlinkStatus, ...]:
    """Parse ``nvidia-smi nvlink -s`` (``--status``): per GPU, (link, GB/s) with None for ``<inactive>``."""
    return _read_nvlink_status(text, path)[0]


# --------------------------------------------------------------------------------------------
# nvidia-smi -q -x (and the -q text form)
# --------------------------------------------------------------------------------------------

QUERY_XML_PATH = "nvidia-smi -q -x"
QUERY_TEXT_PATH = "nvidia-smi -q"

_MEMORY = re.compile(r"([0-9]{1,12}) (KiB|MiB|GiB)")
_MEMORY_UNITS = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


@dataclasses.dataclass(slots=True)
class _GpuFields:
    """The raw strings of the fields nodetopo reads from one GPU of ``-q`` (XML or text)."""

    where: int | None
    uuid: str | None = None
    model: str | None = None
    bus_id: str | None = None
    minor_number: str | None = None
    mig_current: str | None = None
    mig_pending: str | None = None
    memory_total: str | None = None
    numa_node: str | None = None


def _queried_gpu(
    fields: _GpuFields, driver: str | None, path: str, problems: list[str]
) -> model.QueriedGpu | None:
    """The GPU of one ``-q`` block, or None (and a problem) when it has no readable UUID."""

    def fail(detail: str) -> ParseError:
        return ParseError(NAME, path, detail, line=fields.where)

    def value(raw: str | None, what: str) -> str | None:
        if raw is None:
            return None
        raw = raw.strip()
        if raw in ("N/A", "", "None"):
            return None
        if _normalise_errors(raw) in _ERROR_VALUES:
            problems.append(f"GPU {fields.bus_id or fields.uuid or '?'}: {what} reads {raw}")
            return None
        return raw

    uuid = value(fields.uuid, "uuid")
    if uuid is None:
        problems.append(f"GPU {fields.bus_id or '?'} has no readable UUID: left out")
        return None
    bus_id = value(fields.bus_id, "PCI bus id")
    address = None
    if bus_id is not None:
        try:
            address = model.PciAddress.parse(bus_id)
        except ValueError:
            raise fail(f"{uuid}: PCI bus id {excerpt(bus_id)} is not a PCI address") from None
    minor = value(fields.minor_number, "minor number")
    memory = value(fields.memory_total, "FB memory total")
    numa = value(fields.numa_node, "NUMA node")
    memory_match = _MEMORY.fullmatch(memory) if memory is not None else None
    if memory is not None and memory_match is None:
        raise fail(f"{uuid}: FB memory total {excerpt(memory)} is not '<n> MiB'")
    for raw, what in ((minor, "minor number"), (numa, "NUMA node")):
        if raw is not None and _int(raw) is None:
            raise fail(f"{uuid}: {what} {excerpt(raw)} is not a number")
    return model.QueriedGpu(
        uuid=uuid,
        model=value(fields.model, "product name") or "",
        address=address,
        minor_number=_int(minor) if minor is not None else None,
        mig_current=_mig_mode(value(fields.mig_current, "MIG mode"), fail),
        mig_pending=_mig_mode(value(fields.mig_pending, "pending MIG mode"), fail),
        numa_node=_int(numa) if numa is not None else None,
        memory_bytes=int(memory_match[1]) * _MEMORY_UNITS[memory_match[2]] if memory_match else None,
        driver_version=driver,
    )


def _mig_mode(raw: str | None, fail: Callable[[str], ParseError]) -> bool | None:
    if raw is None:
        return None
    if raw in ("Enabled", "Disabled"):
        return raw == "Enabled"
    raise fail(f"MIG mode {excerpt(raw)} is not Enabled, Disabled or N/A")


def _find_below(parents: list[ElementTree.Element], tag: str) -> ElementTree.Element | None:
    """``gpu.find("<parent>/<tag>")`` given ``gpu.findall("<parent>")``: the first ``<tag>`` child of
    the first ``<parent>`` that has one. A plain tag is found by ElementTree's C code; a path goes
    through ``ElementPath`` in Python, which cost more than parsing the whole answer."""
    for parent in parents:
        found = parent.find(tag)
        if found is not None:
            return found
    return None


def _read_smi_query_xml(
    text: str, path: str
) -> tuple[tuple[str | None, tuple[model.QueriedGpu, ...]], list[str]]:
    try:
        root = ElementTree.fromstring(text)
    except ElementTree.ParseError as e:
        raise ParseError(NAME, path, f"not well-formed XML: {e}", line=e.position[0]) from None
    if root.tag != "nvidia_smi_log":
        raise ParseError(NAME, path, f"expected <nvidia_smi_log>, got <{root.tag}>")

    def text_of(element: ElementTree.Element | None) -> str | None:
        return None if element is None else (element.text or "").strip()

    driver = text_of(root.find("driver_version")) or None
    problems: list[str] = []
    gpus = []
    for gpu in root.findall("gpu"):
        pci = gpu.findall("pci")
        mig_mode = gpu.findall("mig_mode")
        fields = _GpuFields(
            where=None,
            uuid=text_of(gpu.find("uuid")),
            model=text_of(gpu.find("product_name")),
            bus_id=text_of(_find_below(pci, "pci_bus_id")) or gpu.get("id"),
            minor_number=text_of(gpu.find("minor_number")),
            mig_current=text_of(_find_below(mig_mode, "current_mig")),
            mig_pending=text_of(_find_below(mig_mode, "pending_mig")),
            memory_total=text_of(_find_below(gpu.findall("fb_memory_usage"), "total")),
            numa_node=text_of(gpu.find("numa_node")) or text_of(_find_below(pci, "numa_node")),
        )
        queried = _queried_gpu(fields, driver, path, problems)
        if queried is not None:
            gpus.append(queried)
    return (driver, _sorted_queried(gpus, path)), problems


def _sorted_queried(gpus: list[model.QueriedGpu], path: str) -> tuple[model.QueriedGpu, ...]:
    uuids = [gpu.uuid for gpu in gpus]
    if len(set(uuids)) != len(uuids):
        raise ParseError(NAME, path, "two GPUs with the same UUID")
    # PCI bus order is nvidia-smi's default enumeration order; GPUs without an address go last.
    return tuple(
        sorted(gpus, key=lambda gpu: (gpu.address is None, gpu.address or model.PciAddress(0, 0, 0, 0)))
    )


def parse_smi_query_xml(
    text: str, path: str = QUERY_XML_PATH
) -> tuple[str | None, tuple[model.QueriedGpu, ...]]:
    """Parse ``nvidia-smi -q -x``: the driver version and the GPUs, in PCI bus order.

    ``numa_node`` is read from ``<numa_node>`` where a driver reports one (none of the captured drivers
    does; ``topo -m`` and sysfs are the NUMA sources).
    """
    return _read_smi_query_xml(text, path)[0]


_QUERY_TEXT_LINE = re.compile(r"(\S.*?)\s+: ?(.*)")
_QUERY_TEXT_GPU = re.compile(r"GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])")
_QUERY_TEXT_KEYS: dict[tuple[str, ...], str] = {
    ("Product Name",): "model",
    ("GPU UUID",): "uuid",
    ("Minor Number",): "minor_number",
    ("MIG Mode", "Current"): "mig_current",
    ("MIG Mode", "Pending"): "mig_pending",
    ("FB Memory Usage", "Total"): "memory_total",
    ("PCI", "Bus Id"): "bus_id",
}


def _read_smi_query_text(
    text: str, path: str
) -> tuple[tuple[str | None, tuple[model.QueriedGpu, ...]], list[str]]:
    driver: str | None = None
    blocks: list[_GpuFields] = []
    sections: list[tuple[int, str]] = []  # (indent, name) of the open sections inside a GPU block
    seen: set[str] = set()  # the fields already read in the current GPU block
    for number, raw in enumerate(_lines(text), start=1):
        line = raw.expandtabs(8)
        stripped = line.strip()
        if not stripped or stripped.startswith("=="):
            continue
        indent = len(line) - len(line.lstrip())
        if indent == 0:
            gpu = _QUERY_TEXT_GPU.fullmatch(stripped)
            if gpu is not None:
                blocks.append(_GpuFields(where=number, bus_id=gpu[1]))
                sections = []
                seen = set()
                continue
            top = _QUERY_TEXT_LINE.fullmatch(stripped)
            if top is None:
                raise ParseError(
                    NAME,
                    path,
                    f"expected 'Key : value' or 'GPU <bus id>', got {excerpt(stripped)}",
                    line=number,
                )
            if top[1] == "Driver Version":
                driver = top[2].strip() or None
            continue
        if not blocks:
            raise ParseError(NAME, path, "an indented line before the first GPU block", line=number)
        while sections and sections[-1][0] >= indent:
            sections.pop()
        pair = _QUERY_TEXT_LINE.fullmatch(stripped)
        if pair is None:
            sections.append((indent, stripped))
            continue
        key = (*(name for _, name in sections), pair[1])
        field = _QUERY_TEXT_KEYS.get(key)
        if field is not None and field not in seen:  # the first occurrence of a key wins
            seen.add(field)
            setattr(blocks[-1], field, pair[2])
    problems: list[str] = []
    gpus = [queried for fields in blocks if (queried := _queried_gpu(fields, driver, path, problems))]
    return (driver, _sorted_queried(gpus, path)), problems


def parse_smi_query_text(
    text: str, path: str = QUERY_TEXT_PATH
) -> tuple[str | None, tuple[model.QueriedGpu, ...]]:
    """Parse the text form of ``nvidia-smi -q`` (``-a``): the same fields as ``parse_smi_query_xml``."""
    return _read_smi_query_text(text, path)[0]


# --------------------------------------------------------------------------------------------
# collect(): run the commands, each on its own
# --------------------------------------------------------------------------------------------

#: output that means nvidia-smi cannot talk to any GPU; the message is kept as the reason's text
_NO_DEVICES = re.compile(r"No devices were found|No devices found", re.IGNORECASE)
_NO_DRIVER = re.compile(
    r"Failed to initialize NVML.*|NVIDIA-SMI has failed.*|.*couldn't communicate with the NVIDIA driver.*"
    r"|NVML Shared Library Not Found.*|.*Driver/library version mismatch.*",
    re.IGNORECASE,
)


#: text that each line ``_NO_DEVICES`` or ``_NO_DRIVER`` matches contains, in ASCII lower case
_FAILURE_WORDS = (
    "no devices",
    "failed to initialize nvml",
    "nvidia-smi has failed",
    "couldn't communicate with the nvidia driver",
    "nvml shared library not found",
    "driver/library version mismatch",
)


def _failure_candidates(text: str) -> list[str]:
    """The lines of ``text`` that ``_NO_DEVICES`` or ``_NO_DRIVER`` could match.

    An ASCII text that holds none of ``_FAILURE_WORDS`` (the usual answer) has none, which one
    pass over the text says; matching both patterns against each line of a 190 KB ``-q -x`` cost
    twice its parse. A text with any other character is scanned line by line: ``IGNORECASE``
    matches characters outside ASCII (the Kelvin sign as k) that lower-casing does not map.
    """
    if text.isascii():
        lowered = text.lower()
        if not any(word in lowered for word in _FAILURE_WORDS):
            return []
    return text.splitlines()


@dataclasses.dataclass(frozen=True, slots=True)
class _Outcome(Generic[_T]):
    """What one command gave: its value (None when it failed), its status and its conditions."""

    value: _T | None
    status: SourceStatus
    conditions: tuple[Condition, ...] = ()
    failure: tuple[ConditionReason, str] | None = None  #: (reason, message) when value is None
    partly: str | None = None  #: what was not readable in an output that was read (logged)


def _first_line(text: str) -> str:
    return clip(next((line.strip() for line in text.splitlines() if line.strip()), ""))


def _failure(command: str, reason: ConditionReason, message: str) -> _Outcome[_T]:
    return _Outcome(
        None,
        SourceStatus(name=command, ok=False, message=f"{reason.value}: {message}"),
        (condition(NAME, reason, f"{command}: {message}"),),
        (reason, message),
    )


def _logged(command: str, outcome: _Outcome[_T]) -> _Outcome[_T]:
    """``outcome``, with its failure or its partly readable output logged."""
    extra = {"source": NAME, "path": command}
    if outcome.failure is not None:
        reason, message = outcome.failure
        log.log(failure_level(reason), "%s: %s: %s", command, reason.value, message, extra=extra)
    elif outcome.partly is not None:
        log.warning("%s: partly readable: %s", command, outcome.partly, extra=extra)
    return outcome


def _outcome(
    command: str,
    stdout: str,
    stderr: str,
    returncode: int,
    read: Callable[[str, str], tuple[_T, Sequence[str]]],
) -> _Outcome[_T]:
    """What one command's output says (pure: logs nothing); every way it can be wrong is a condition."""
    for line in _failure_candidates(f"{stdout}\n{stderr}"):
        line = line.strip()
        if _NO_DEVICES.search(line):
            return _failure(
                command, ConditionReason.UNAVAILABLE, f"no GPUs visible to the driver ({clip(line)})"
            )
        if _NO_DRIVER.fullmatch(line):
            return _failure(command, ConditionReason.UNAVAILABLE, f"{clip(line)} (exit {returncode})")
    if returncode != 0 and not stdout.strip():
        detail = _first_line(stderr) or "no output"
        return _failure(command, ConditionReason.UNAVAILABLE, f"exited {returncode}: {detail}")

    try:
        value, problems = read(stdout, command)
    except ParseError as e:
        exit_note = f" (exit {returncode})" if returncode != 0 else ""
        return _failure(command, ConditionReason.PARSE_ERROR, f"{e}{exit_note}")

    notes = list(problems)
    if returncode != 0:
        notes.append(f"exited {returncode}: {_first_line(stderr) or 'no message'}")
    if not notes:
        return _Outcome(value, SourceStatus(name=command, ok=True))
    message = "; ".join(clip(note) for note in notes[:5])
    message += f"; and {len(notes) - 5} more" if len(notes) > 5 else ""
    return _Outcome(
        value,
        SourceStatus(name=command, ok=True, message=f"Degraded: {message}"),
        (condition(NAME, ConditionReason.DEGRADED, f"{command}: {message}"),),
        partly=message,
    )


def _run(
    runner: CommandRunner,
    command: Command,
    timeout: float,
    outcome: Callable[[str, str, str, int], _Outcome[_T]],
) -> _Outcome[_T]:
    """Run one command and read its output with ``outcome`` (``_outcome`` with its reader)."""
    line = command.line
    result = commands.run(runner, command, timeout=timeout)
    if isinstance(result, commands.Failed):
        return _logged(line, _failure(line, result.reason, result.message))
    return _logged(line, outcome(line, result.stdout, result.stderr, result.returncode))


def _topo_outcome(command: str, stdout: str, stderr: str, returncode: int) -> _Outcome[model.TopoMatrix]:
    return _outcome(command, stdout, stderr, returncode, _read_topo_matrix)


def _list_outcome(
    command: str, stdout: str, stderr: str, returncode: int
) -> _Outcome[tuple[model.ListedGpu, ...]]:
    return _outcome(command, stdout, stderr, returncode, _read_smi_list)


def _nvlink_outcome(
    command: str, stdout: str, stderr: str, returncode: int
) -> _Outcome[tuple[model.NvlinkStatus, ...]]:
    return _outcome(command, stdout, stderr, returncode, _read_nvlink_status)


def _query_xml_outcome(
    command: str, stdout: str, stderr: str, returncode: int
) -> _Outcome[tuple[str | None, tuple[model.QueriedGpu, ...]]]:
    """``-q -x`` is read afresh every scan: a live driver's answer carries a timestamp and sensor
    readings (temperature, power, clocks) that differ at every call, so an equal output would only
    ever come from a capture, and remembering the last one would hold its text for nothing."""
    return _outcome(command, stdout, stderr, returncode, _read_smi_query_xml)


def read_facts(runner: CommandRunner, *, timeout: float, cache: ScanCache | None = None) -> Facts:
    """Run the four nvidia-smi commands, each on its own: one failing keeps the others' facts.

    What ``topo -m``, ``-L`` and ``nvlink -s`` said is given back through ``cache`` when the command
    printed the same output as last time (an unchanged node, every scan); any other output is read
    afresh (nodetopo.reuse).
    """
    cache = cache if cache is not None else ScanCache()
    topo = _run(runner, TOPO_COMMAND, timeout, cache.last(_topo_outcome))
    listed = _run(runner, LIST_COMMAND, timeout, cache.last(_list_outcome))
    queried = _run(runner, QUERY_XML_COMMAND, timeout, _query_xml_outcome)
    nvlink = _run(runner, NVLINK_COMMAND, timeout, cache.last(_nvlink_outcome))
    statuses = (topo.status, listed.status, queried.status, nvlink.status)
    conditions = (*topo.conditions, *listed.conditions, *queried.conditions, *nvlink.conditions)

    # The same failure four times (not installed, driver mismatch, no GPUs) is one fact: say it once.
    failures = {topo.failure, listed.failure, queried.failure, nvlink.failure}
    if len(failures) == 1 and (failure := failures.pop()) is not None:
        reason, message = failure
        return Facts(
            sources=(SourceStatus(name=NAME, ok=False, message=f"{reason.value}: {message}"),),
            conditions=(condition(NAME, reason, message),),
        )
    return Facts(
        topo_matrix=topo.value,
        listed_gpus=listed.value or (),
        queried_gpus=queried.value[1] if queried.value is not None else (),
        nvlink_status=nvlink.value or (),
        sources=statuses,
        conditions=conditions,
    )


def collect(ctx: Context) -> SourceResult:
    """The nvidia-smi source: ``topo -m``, ``-L``, ``-q -x`` and ``nvlink -s`` through ``ctx.runner``."""
    return guarded(NAME, lambda: read_facts(ctx.runner, timeout=ctx.command_timeout_s, cache=ctx.cache))
