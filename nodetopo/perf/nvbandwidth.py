"""nvbandwidth output: the text it prints, and the JSON it prints with ``-j``.

The text (nvbandwidth ``output.cpp`` and ``inline_common.h``, v0.6-v0.8)::

    nvbandwidth Version: v0.8
    Built from Git version: v0.8

    CUDA Runtime Version: 13000
    CUDA Driver Version: 13000
    Driver Version: 580.95.05

    gpu-node-1                                         (the host name; v0.7 and later)
    Device 0: NVIDIA A100-SXM4-80GB (00000000:34:00)

    Running device_to_device_memcpy_read_ce.
    memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)
               0         1
     0       N/A    271.82
     1    272.02       N/A

    SUM device_to_device_memcpy_read_ce 543.84

A testcase that cannot run on the machine prints ``Waived: <why>`` (or ``Error: <why>``) instead of its
matrix. Cells are ``N/A`` on the diagonal and where a pair has no path. Latency testcases print the
same matrix in ns; the unit is read from the description's last parenthesis.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping

from nodetopo.errors import ParseError, excerpt
from nodetopo.jsonread import load_json

SOURCE = "nvbandwidth"
MAX_LINES = 100_000
MAX_MATRIX = 1024  #: rows or columns (a 72-GPU NVL72 domain is 72)

_VERSION = re.compile(r"^nvbandwidth Version:\s*(\S+)")
_GIT = re.compile(r"^Built from Git version:\s*(\S*)")
_CUDA = re.compile(r"^CUDA Runtime Version:\s*(\d+)")
_DRIVER = re.compile(r"^Driver Version:\s*(\S+)")
_DEVICE = re.compile(r"^Device (\d+): (.*?) \(([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})\)\s*$")
_RUNNING = re.compile(r"^Running (\S+?)\.?$")
_STATUS = re.compile(r"^(Waived|Error|Not Found):\s*(.*)$")
#: a JSON ``GPU Device list`` entry: ``0: NVIDIA A100-SXM4-80GB (00000000:34:00): (host)``
_JSON_DEVICE = re.compile(
    r"^(\d+): (.*?) \(([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})\)(?::\s*\((.*)\))?\s*$"
)
_SUM = re.compile(r"^SUM (\S+) (\S+)$")
_UNIT = re.compile(r"\(([^()]*)\)\s*$")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class NvbDevice:
    index: int
    model: str
    bus_id: str  #: ``00000000:34:00`` as printed (domain:bus:device)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class NvbMatrix:
    """A testcase's matrix: ``values[row][column]``, None where printed ``N/A``."""

    description: str  #: ``memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)``
    unit: str | None  #: ``GB/s``, ``ns``
    rows: tuple[str, ...]  #: row labels (GPU or CPU indices as printed)
    columns: tuple[str, ...]
    values: tuple[tuple[float | None, ...], ...]
    total: float | None = None  #: the ``SUM`` line (or the JSON ``sum``)
    line: int | None = None

    def value(self, row: str, column: str) -> float | None:
        return self.values[self.rows.index(row)][self.columns.index(column)]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class NvbTestcase:
    name: str  #: ``device_to_device_memcpy_read_ce``
    status: str  #: ``Passed``, ``Waived``, ``Error``, ``Not Found``
    message: str = ""
    matrix: NvbMatrix | None = None
    line: int | None = None

    @property
    def gpu_to_gpu(self) -> bool:
        """A device-to-device testcase: its cells are GPU pairs."""
        return self.name.startswith("device_to_device")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class NvbOutput:
    source: str
    version: str | None = None
    cuda_runtime: int | None = None
    driver_version: str | None = None
    host: str | None = None
    devices: tuple[NvbDevice, ...] = ()
    testcases: tuple[NvbTestcase, ...] = ()

    def testcase(self, name: str) -> NvbTestcase | None:
        return next((t for t in self.testcases if t.name == name), None)


def _cell(text: str, path: str, line: int) -> float | None:
    if text == "N/A":
        return None
    try:
        value = float(text)
    except ValueError:
        raise ParseError(
            SOURCE, path, f"matrix cell: expected a number or N/A, got {excerpt(text)}", line=line
        ) from None
    if not math.isfinite(value) or value < 0:
        raise ParseError(SOURCE, path, f"matrix cell: {excerpt(text)} is not a bandwidth", line=line)
    return value


def parse_nvbandwidth(text: str, path: str = "-") -> NvbOutput:
    """Parse nvbandwidth's text output (or, when the text is JSON, its ``-j`` output)."""
    if text.lstrip().startswith("{"):
        return _parse_json(text, path)
    lines = text.splitlines()
    if len(lines) > MAX_LINES:
        raise ParseError(SOURCE, path, f"{len(lines)} lines: more than the {MAX_LINES} read")
    version: str | None = None
    cuda: int | None = None
    driver: str | None = None
    host: str | None = None
    devices: list[NvbDevice] = []
    testcases: list[NvbTestcase] = []
    current: str | None = None
    current_line = 0
    i = 0
    seen = False
    while i < len(lines):
        number = i + 1
        line = lines[i].strip()
        i += 1
        if not line:
            continue
        if (m := _VERSION.match(line)) is not None:
            version, seen = m[1], True
        elif _GIT.match(line) or line.startswith("CUDA Driver Version:") or line.startswith("NOTE:"):
            continue
        elif (m := _CUDA.match(line)) is not None:
            cuda = int(m[1])
        elif (m := _DRIVER.match(line)) is not None:
            driver = m[1]
        elif (m := _DEVICE.match(line)) is not None:
            devices.append(NvbDevice(index=int(m[1]), model=m[2], bus_id=m[3]))
            seen = True
        elif (m := _RUNNING.match(line)) is not None:
            if current is not None:
                testcases.append(
                    NvbTestcase(name=current, status="Error", message="no result", line=current_line)
                )
            current, current_line, seen = m[1], number, True
        elif (m := _STATUS.match(line)) is not None:
            name = current or "?"
            testcases.append(NvbTestcase(name=name, status=m[1], message=m[2].strip(), line=number))
            current = None
        elif (
            current is not None
            and _UNIT.search(line)
            and ("(row)" in line or "bandwidth" in line or "latency" in line)
        ):
            matrix, i = _matrix(lines, i, line, number, path)
            total = None
            while i < len(lines) and not lines[i].strip():
                i += 1
            if i < len(lines) and (m := _SUM.match(lines[i].strip())) is not None:
                if m[1] != current:
                    raise ParseError(
                        SOURCE, path, f"SUM of {excerpt(m[1])} under testcase {excerpt(current)}", line=i + 1
                    )
                total = _cell(m[2], path, i + 1)
                i += 1
            testcases.append(
                NvbTestcase(
                    name=current,
                    status="Passed",
                    matrix=dataclasses.replace(matrix, total=total),
                    line=current_line,
                )
            )
            current = None
        elif host is None and not devices and version is not None and " " not in line and ":" not in line:
            host = line  # v0.7+: the host name on its own line before the device list
    if current is not None:
        testcases.append(
            NvbTestcase(
                name=current, status="Error", message="output ends before its result", line=current_line
            )
        )
    if not seen:
        raise ParseError(SOURCE, path, "no nvbandwidth output (no version, device or testcase line)")
    return NvbOutput(
        source=path,
        version=version,
        cuda_runtime=cuda,
        driver_version=driver,
        host=host,
        devices=tuple(devices),
        testcases=tuple(testcases),
    )


def _matrix(lines: list[str], i: int, description: str, number: int, path: str) -> tuple[NvbMatrix, int]:
    unit_match = _UNIT.search(description)
    unit = unit_match[1] if unit_match else None
    if i >= len(lines):
        raise ParseError(SOURCE, path, "a matrix title without its matrix", line=number)
    columns = tuple(lines[i].split())
    if not columns or len(columns) > MAX_MATRIX:
        raise ParseError(SOURCE, path, "expected the matrix's column labels", line=i + 1)
    i += 1
    rows: list[str] = []
    values: list[tuple[float | None, ...]] = []
    while i < len(lines) and lines[i].strip():
        tokens = lines[i].split()
        if len(tokens) != len(columns) + 1:
            raise ParseError(
                SOURCE,
                path,
                f"a matrix row has {len(tokens) - 1} cells, the header {len(columns)}",
                line=i + 1,
            )
        if len(rows) >= MAX_MATRIX:
            raise ParseError(SOURCE, path, f"more than {MAX_MATRIX} matrix rows", line=i + 1)
        rows.append(tokens[0])
        values.append(tuple(_cell(t, path, i + 1) for t in tokens[1:]))
        i += 1
    if not rows:
        raise ParseError(SOURCE, path, "a matrix without rows", line=number)
    return (
        NvbMatrix(
            description=description,
            unit=unit,
            rows=tuple(rows),
            columns=columns,
            values=tuple(values),
            line=number,
        ),
        i,
    )


def _parse_json(text: str, path: str) -> NvbOutput:
    doc = load_json(text, source=SOURCE, path=path)
    body = doc.get("nvbandwidth") if isinstance(doc, Mapping) else None
    if not isinstance(body, Mapping):
        raise ParseError(SOURCE, path, "not nvbandwidth JSON (no 'nvbandwidth' object)")
    testcases = []
    for k, t in enumerate(body.get("testcases") or []):
        if not isinstance(t, Mapping) or not isinstance(t.get("name"), str):
            raise ParseError(SOURCE, path, f"testcases[{k}]: expected an object with a name")
        matrix = None
        cells = t.get("bandwidth_matrix")
        if isinstance(cells, list) and cells:
            values = []
            for r, row in enumerate(cells):
                if not isinstance(row, list) or len(row) > MAX_MATRIX:
                    raise ParseError(SOURCE, path, f"testcases[{k}].bandwidth_matrix[{r}]: expected a list")
                values.append(tuple(_cell(str(c), path, 0) for c in row))
            width = len(values[0])
            if any(len(v) != width for v in values):
                raise ParseError(SOURCE, path, f"testcases[{k}].bandwidth_matrix: rows of different lengths")
            description = str(t.get("bandwidth_description") or "")
            unit_match = _UNIT.search(description)
            total = t.get("sum")
            matrix = NvbMatrix(
                description=description,
                unit=unit_match[1] if unit_match else None,
                rows=tuple(str(r) for r in range(len(values))),
                columns=tuple(str(c) for c in range(width)),
                values=tuple(values),
                total=float(total)
                if isinstance(total, int | float) and not isinstance(total, bool)
                else None,
            )
        testcases.append(
            NvbTestcase(
                name=t["name"],
                status=str(t.get("status") or ("Passed" if matrix else "Error")),
                message=str(t.get("error") or ""),
                matrix=matrix,
            )
        )
    devices = []
    json_host = None
    for item in body.get("GPU Device list") or []:
        m = _JSON_DEVICE.match(item) if isinstance(item, str) else None
        if m is None:
            raise ParseError(
                SOURCE, path, f"GPU Device list: {excerpt(str(item))} is not '<n>: <model> (<bus id>)'"
            )
        devices.append(NvbDevice(index=int(m[1]), model=m[2], bus_id=m[3]))
        json_host = json_host or m[4]
    cuda = body.get("CUDA Runtime Version")
    return NvbOutput(
        source=path,
        version=str(body["version"]) if body.get("version") else None,
        cuda_runtime=cuda if isinstance(cuda, int) and not isinstance(cuda, bool) else None,
        driver_version=str(body["Driver Version"]) if body.get("Driver Version") else None,
        host=str(body["Hostname"]) if body.get("Hostname") else json_host,
        devices=tuple(devices),
        testcases=tuple(testcases),
    )
