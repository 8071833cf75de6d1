"""nccl-tests output: the text every ``*_perf`` binary prints, and the ``-J FILE`` JSON report.

The text (nccl-tests ``src/util.cu`` and ``src/common.cu``)::

    # nccl-tests version 2.19.6 nccl-headers=22807 nccl-library=22807      (2.19 and later)
    # Collective test starting: all_reduce_perf
    # nThread 1 nGpus 1 minBytes 524288 maxBytes 17179869184 step: 2(factor) warmup iters: 1 iters: 50 ...
    #  Rank  0 Group  0 Pid 568399 on   GPU-5705 device  0 [0008:06:00] NVIDIA GB300
    NCCL version 2.28.7+cuda13.0
    #                     out-of-place                       in-place
    #  size  count  type  redop  root  time  algbw  busbw  #wrong  time  algbw  busbw  #wrong
    #   (B)  (elements)                (us)  (GB/s) (GB/s)         (us)  (GB/s) (GB/s)
      524288  131072  float  sum  -1   66.27  7.91  15.57  0  66.30  7.91  15.57  0
    # Out of bounds values : 0 OK
    # Avg bus bandwidth    : 455.539
    # Collective test concluded: all_reduce_perf

Variants read here, all from the tool's own printf formats: ``#wrong`` printed ``N/A`` when the run
did not check (``-c 0``); older versions with an ``error`` column (the maximum relative error, a float)
and without ``root`` or ``redop``; ``cputime`` for ``time`` (``-C 1``); the ``-I 1`` per-iteration
columns ``i_min i_max i_p99 i_cv%`` after each half; a trailing timestamp (``-S 1``); the out-of-place
half left blank (trace replay). Column positions come from the header line, not from a fixed layout.

Lines that are not the tool's (``NCCL INFO`` logs, mpirun noise, a shell prompt) are skipped; a line
that starts like a result row but does not fit the header is a ``ParseError``. Nothing is judged here:
several processes' outputs in one log (a build without MPI started by mpirun), zero bus bandwidths,
wrong elements are all kept as facts for the verdict.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from nodetopo.errors import ParseError, excerpt
from nodetopo.jsonread import load_json

SOURCE = "nccl-tests"

#: collective -> nccl-tests' bus-bandwidth factor as a function of the rank count n (``<name>.cu``,
#: ``*GetBw``): busbw = algbw × factor(n).
COLLECTIVES: Mapping[str, str] = {
    "all_reduce": "2(n-1)/n",
    "all_gather": "(n-1)/n",
    "reduce_scatter": "(n-1)/n",
    "alltoall": "(n-1)/n",
    "alltoallv": "(n-1)/n",
    "broadcast": "1",
    "reduce": "1",
    "sendrecv": "1",
    "gather": "(n-1)/n",
    "scatter": "(n-1)/n",
    "hypercube": "1",
}

#: at most this many lines are read (a 16 GiB sweep with every type and op is a few thousand)
MAX_LINES = 200_000

_NUMBER = r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?"
_HEADER_KV = re.compile(
    r"\b(nThread|nGpus|minBytes|maxBytes|iters|warmup iters|agg iters|validation|graph)\b:?\s+(\d+)"
)
_STEP = re.compile(r"\bstep:\s*(\d+)\((factor|bytes)\)")
_RANK = re.compile(
    r"^#?\s*Rank\s+(\d+)\s+(?:Group\s+(\d+)\s+)?Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)\s+\[([^\]]*)\]\s*(.*)$"
)
_NCCL_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+[^\s]*)")
_TESTS_VERSION = re.compile(r"^#\s*nccl-tests version (\S+)")
_STARTING = re.compile(r"^#\s*Collective test starting:\s*(\S+)")
_CONCLUDED = re.compile(r"^#\s*Collective test concluded:\s*(\S+)")
_OUT_OF_BOUNDS = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)\s*(OK|FAILED)?\s*$")
_AVG_BUSBW = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(" + _NUMBER + r"|nan|-?inf)\s*(OK|FAILED)?\s*$", re.I)
#: NCCL's own log line for a setting it read: ``NCCL INFO NCCL_ALGO set by environment to Ring``
_ENV_SET = re.compile(r"\b(NCCL_[A-Z0-9_]+) set by environment to (\S+)")
_ROW_START = re.compile(r"^\s*\d+\s+\d+\s")
_TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}$")

_PREAMBLE = ("size", "count", "type", "redop", "root")
_HALF_FIELDS = ("time", "algbw", "busbw", "wrong", "i_min", "i_max", "i_p99", "i_cv")
_COLUMN_NAMES = {
    "time": "time",
    "cputime": "time",
    "algbw": "algbw",
    "busbw": "busbw",
    "#wrong": "wrong",
    "error": "error",
    "i_min": "i_min",
    "i_max": "i_max",
    "i_p99": "i_p99",
    "i_cv%": "i_cv",
}


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class NcclHeader:
    """The ``# nThread ...`` line: the run's parameters. One per process that printed it."""

    line: int
    threads: int | None = None
    gpus_per_thread: int | None = None
    min_bytes: int | None = None
    max_bytes: int | None = None
    iterations: int | None = None
    warmup_iterations: int | None = None
    validation: bool | None = None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class NcclRank:
    """A ``#  Rank  N ...`` line (or a JSON ``devices`` entry): which GPU of which host runs rank N."""

    rank: int
    group: int | None
    pid: int | None
    host: str
    device: int
    bus_id: str | None  #: ``0008:06:00`` (domain:bus:device), ``0x0e`` (bus only, older versions)
    model: str | None
    line: int | None = None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class NcclHalf:
    """One half of a result row: out-of-place or in-place."""

    time_us: float | None
    algbw: float | None  #: GB/s
    busbw: float | None  #: GB/s
    wrong: int | None = None  #: ``#wrong``; None when printed ``N/A`` (no check) or not printed
    error: float | None = None  #: the ``error`` column of older versions (max relative error)
    i_min_us: float | None = None  #: ``-I 1``: per-iteration minimum, maximum, p99 (µs), CV (%)
    i_max_us: float | None = None
    i_p99_us: float | None = None
    i_cv_pct: float | None = None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class NcclRow:
    """One result row: a message size (and type/op) measured out of place and in place."""

    line: int | None
    size: int  #: bytes
    count: int
    type: str | None
    redop: str | None
    root: int | None
    out_of_place: NcclHalf | None  #: None when left blank (trace replay)
    in_place: NcclHalf | None
    table: int = 0  #: index of the column header the row was read under

    @property
    def halves(self) -> tuple[NcclHalf, ...]:
        return tuple(h for h in (self.out_of_place, self.in_place) if h is not None)

    def best_busbw(self) -> float | None:
        values = [h.busbw for h in self.halves if h.busbw is not None and math.isfinite(h.busbw)]
        return max(values) if values else None

    def best_algbw(self) -> float | None:
        values = [h.algbw for h in self.halves if h.algbw is not None and math.isfinite(h.algbw)]
        return max(values) if values else None

    def wrong(self) -> int | None:
        values = [h.wrong for h in self.halves if h.wrong is not None]
        return sum(values) if values else None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class NcclOutput:
    """Everything one nccl-tests output (text or JSON) says, in order."""

    source: str  #: the file (or ``-`` for stdin) it was read from
    program: str | None = None  #: ``all_reduce_perf`` (from ``Collective test starting``, or the JSON args)
    tests_version: str | None = None
    nccl_version: str | None = None
    headers: tuple[NcclHeader, ...] = ()
    ranks: tuple[NcclRank, ...] = ()
    ranks_elided: bool = False  #: the rank list has ``...`` lines (cut by whoever published it)
    tables: int = 0  #: column headers seen (one per process that printed its table)
    per_iteration: bool = False  #: ``-I 1`` columns present
    rows: tuple[NcclRow, ...] = ()
    out_of_bounds: tuple[tuple[int, bool | None], ...] = ()  #: per footer: (count, OK/FAILED or None)
    avg_busbw: tuple[float, ...] = ()  #: per footer; the mean over the sweep, never a judgement
    concluded: int = 0  #: ``Collective test concluded`` lines
    env: tuple[tuple[str, str], ...] = ()  #: NCCL_* settings the log or the JSON report shows

    @property
    def collective(self) -> str | None:
        return collective_of(self.program) if self.program else None

    def setting(self, name: str) -> str | None:
        for key, value in reversed(self.env):
            if key == name:
                return value
        return None

    @property
    def rank_count(self) -> int | None:
        """Ranks in the (first) communicator: the highest rank number listed + 1 (the list may be elided)."""
        return max(r.rank for r in self.ranks) + 1 if self.ranks else None


def collective_of(program: str) -> str | None:
    """``all_reduce_perf``, ``./build/all_reduce_perf_mpi`` -> ``all_reduce``; None for another program."""
    name = program.rsplit("/", 1)[-1]
    for suffix in ("_perf_mpi", "_perf"):
        if suffix in name:
            base = name[: name.index(suffix)]
            return base if base in COLLECTIVES else None
    return None


def bus_factor(collective: str, ranks: int) -> float:
    """nccl-tests' busbw/algbw factor for ``collective`` over ``ranks`` ranks."""
    if ranks < 1:
        raise ValueError(f"rank count must be at least 1, not {ranks}")
    kind = COLLECTIVES.get(collective)
    if kind is None:
        raise ValueError(f"unknown collective {collective!r}")
    n = float(ranks)
    if kind == "2(n-1)/n":
        return 2 * (n - 1) / n
    if kind == "(n-1)/n":
        return (n - 1) / n
    return 1.0


# --------------------------------------------------------------------------------------------
# Text
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class _Layout:
    """Where each value sits in a result row, as the column header line says."""

    preamble: tuple[str, ...]  #: of ``_PREAMBLE``, in order
    first: tuple[str, ...]  #: the columns of the first half: time, algbw, busbw, wrong|error, i_* ...
    #: the columns of the second (in-place) half: the first's, or a prefix of them when a copy lost
    #: the trailing ``#wrong`` column; None when the header names one half only
    second: tuple[str, ...] | None
    timestamp: bool

    @property
    def width(self) -> int:
        return len(self.preamble) + len(self.first) + len(self.second or ())

    @property
    def half_width(self) -> int:
        return len(self.preamble) + len(self.second if self.second is not None else self.first)


#: the layout of nccl-tests 2.10 and later without ``-I``, for rows pasted without their header
_DEFAULT_LAYOUT = _Layout(
    _PREAMBLE, ("time", "algbw", "busbw", "wrong"), ("time", "algbw", "busbw", "wrong"), False
)


def _layout(tokens: Sequence[str], path: str, line: int) -> _Layout:
    preamble: list[str] = []
    rest = list(tokens)
    while rest and rest[0] in _PREAMBLE:
        preamble.append(rest.pop(0))
    timestamp = bool(rest) and rest[-1] == "timestamp"
    if timestamp:
        rest.pop()
    names = []
    for t in rest:
        name = _COLUMN_NAMES.get(t)
        if name is None:
            raise ParseError(SOURCE, path, f"unknown column {excerpt(t)} in the result header", line=line)
        names.append(name)
    if not names or names[0] != "time" or preamble[:2] != ["size", "count"]:
        raise ParseError(SOURCE, path, "a result header must start with size, count and then time", line=line)
    split = names.index("time", 1) if "time" in names[1:] else len(names)
    first = tuple(names[:split])
    second = tuple(names[split:]) if split < len(names) else None
    if second is not None and first[: len(second)] != second:
        raise ParseError(SOURCE, path, "the in-place columns differ from the out-of-place ones", line=line)
    for needed in ("algbw", "busbw"):
        if needed not in first or (second is not None and needed not in second):
            raise ParseError(SOURCE, path, f"the result header has no {needed} column", line=line)
    return _Layout(tuple(preamble), first, second, timestamp)


def _float(text: str, path: str, line: int, what: str) -> float | None:
    if text in ("N/A", "-"):
        return None
    try:
        return float(text)
    except ValueError:
        raise ParseError(SOURCE, path, f"{what}: expected a number, got {excerpt(text)}", line=line) from None


def _int(text: str, path: str, line: int, what: str) -> int:
    if not re.fullmatch(r"-?[0-9]{1,20}", text):
        raise ParseError(SOURCE, path, f"{what}: expected an integer, got {excerpt(text)}", line=line)
    return int(text)


def _half(values: Sequence[str], names: Sequence[str], path: str, line: int) -> NcclHalf:
    got: dict[str, float | None] = {}
    wrong: int | None = None
    for name, text in zip(names, values, strict=True):
        if name == "wrong":
            number = _float(text, path, line, "#wrong")
            if number is not None:
                if not math.isfinite(number) or number < 0 or number != int(number):
                    raise ParseError(SOURCE, path, f"#wrong: {excerpt(text)} is not a count", line=line)
                wrong = int(number)
        else:
            got[name] = _float(text, path, line, name)
    return NcclHalf(
        time_us=got.get("time"),
        algbw=got.get("algbw"),
        busbw=got.get("busbw"),
        wrong=wrong,
        error=got.get("error"),
        i_min_us=got.get("i_min"),
        i_max_us=got.get("i_max"),
        i_p99_us=got.get("i_p99"),
        i_cv_pct=got.get("i_cv"),
    )


def _row(text: str, layout: _Layout, table: int, path: str, line: int) -> NcclRow:
    tokens = text.split()
    if layout.timestamp and len(tokens) >= 2 and _TIMESTAMP.match(tokens[-2]):
        tokens = tokens[:-2]
    if len(tokens) == layout.width and layout.second is not None:
        halves = 2
    elif len(tokens) == layout.half_width:
        halves = 1
    else:
        raise ParseError(
            SOURCE,
            path,
            f"a result row has {len(tokens)} fields, the header above it {layout.width}",
            line=line,
        )
    fields = dict(zip(layout.preamble, tokens, strict=False))
    rest = tokens[len(layout.preamble) :]
    if halves == 2:
        assert layout.second is not None
        n = len(layout.first)
        out_of_place: NcclHalf | None = _half(rest[:n], layout.first, path, line)
        in_place = _half(rest[n:], layout.second, path, line)
    else:
        # one half printed: the in-place one (the out-of-place columns are blank in a trace replay)
        out_of_place = None
        in_place = _half(rest, layout.second if layout.second is not None else layout.first, path, line)
    root_text = fields.get("root")
    return NcclRow(
        line=line,
        size=_int(fields["size"], path, line, "size"),
        count=_int(fields["count"], path, line, "count"),
        type=fields.get("type"),
        redop=fields.get("redop"),
        root=_int(root_text, path, line, "root") if root_text is not None else None,
        out_of_place=out_of_place,
        in_place=in_place,
        table=table,
    )


def _header(text: str, line: int) -> NcclHeader:
    values = {k: int(v) for k, v in _HEADER_KV.findall(text)}
    validation = values.get("validation")
    return NcclHeader(
        line=line,
        threads=values.get("nThread"),
        gpus_per_thread=values.get("nGpus"),
        min_bytes=values.get("minBytes"),
        max_bytes=values.get("maxBytes"),
        iterations=values.get("iters"),
        warmup_iterations=values.get("warmup iters"),
        validation=bool(validation) if validation is not None else None,
    )


def parse_nccl_tests(text: str, path: str = "-") -> NcclOutput:
    """Parse the text an nccl-tests ``*_perf`` binary printed (possibly inside a longer log).

    Raises ``ParseError`` when a result row does not fit its header or a number is not a number, and
    when the text holds no nccl-tests output at all.
    """
    lines = text.splitlines()
    if len(lines) > MAX_LINES:
        raise ParseError(SOURCE, path, f"{len(lines)} lines: more than the {MAX_LINES} read")
    program: str | None = None
    tests_version: str | None = None
    nccl_version: str | None = None
    headers: list[NcclHeader] = []
    ranks: list[NcclRank] = []
    elided = False
    rows: list[NcclRow] = []
    oob: list[tuple[int, bool | None]] = []
    avg: list[float] = []
    env: list[tuple[str, str]] = []
    layout: _Layout | None = None
    tables = 0
    per_iteration = False
    concluded = 0
    in_rank_list = False
    seen_any = False
    for number, raw in enumerate(lines, start=1):
        stripped = raw.strip()
        if not stripped:
            continue
        if (m := _NCCL_VERSION.search(stripped)) is not None and nccl_version is None:
            nccl_version = m[1]
            seen_any = True
        if (m := _ENV_SET.search(stripped)) is not None:
            env.append((m[1], m[2]))
        body = stripped.lstrip("#").strip()
        if (m := _RANK.match(stripped)) is not None:
            ranks.append(
                NcclRank(
                    rank=int(m[1]),
                    group=int(m[2]) if m[2] is not None else None,
                    pid=int(m[3]),
                    host=m[4],
                    device=int(m[5]),
                    bus_id=m[6].strip() or None,
                    model=m[7].strip() or None,
                    line=number,
                )
            )
            in_rank_list = seen_any = True
            continue
        if stripped == "..." or (in_rank_list and body == "..."):
            elided = elided or in_rank_list
            continue
        in_rank_list = in_rank_list and body.startswith("Using devices")
        if (m := _TESTS_VERSION.match(stripped)) is not None:
            tests_version = m[1]
            seen_any = True
        elif (m := _STARTING.match(stripped)) is not None:
            program = program or m[1]
            seen_any = True
        elif (m := _CONCLUDED.match(stripped)) is not None:
            program = program or m[1]
            concluded += 1
        elif body.startswith("nThread "):
            headers.append(_header(body, number))
            seen_any = True
        elif body.startswith("Using devices"):
            in_rank_list = True
        elif (m := _OUT_OF_BOUNDS.match(stripped)) is not None:
            oob.append((int(m[1]), None if m[2] is None else m[2] == "OK"))
        elif (m := _AVG_BUSBW.match(stripped)) is not None:
            avg.append(float(m[1]))
        elif stripped.startswith("#") and "size" in body.split() and "count" in body.split():
            tokens = body.split()
            layout = _layout(tokens, path, number)
            per_iteration = per_iteration or "i_min" in layout.first
            tables += 1
            seen_any = True
        elif _ROW_START.match(raw) and not stripped.startswith("#"):
            if layout is None:
                if len(stripped.split()) != _DEFAULT_LAYOUT.width:
                    raise ParseError(
                        SOURCE,
                        path,
                        "a result row before any column header (size count type ...)",
                        line=number,
                    )
                layout = _DEFAULT_LAYOUT
                tables = max(tables, 1)
            rows.append(_row(stripped, layout, max(tables - 1, 0), path, number))
            seen_any = True
    if not seen_any:
        raise ParseError(SOURCE, path, "no nccl-tests output (no header, rank list or result row)")
    return NcclOutput(
        source=path,
        program=program,
        tests_version=tests_version,
        nccl_version=nccl_version,
        headers=tuple(headers),
        ranks=tuple(ranks),
        ranks_elided=elided,
        tables=tables,
        per_iteration=per_iteration,
        rows=tuple(rows),
        out_of_bounds=tuple(oob),
        avg_busbw=tuple(avg),
        concluded=concluded,
        env=tuple(env),
    )


# --------------------------------------------------------------------------------------------
# JSON (``-J FILE``, nccl-tests 2.17 and later; layout of ``JSON_FILE_VERSION`` 3 in src/util.cu)
# --------------------------------------------------------------------------------------------

#: the JSON file nccl-tests writes is small (one record per size); refuse anything absurd
MAX_JSON_CHARS = 64 << 20


def _jfloat(value: Any, path: str, what: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise ParseError(SOURCE, path, f"{what}: expected a number, got a boolean")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str) and value in ("nan", "inf", "-inf"):
        return float(value)
    raise ParseError(SOURCE, path, f"{what}: expected a number, got {excerpt(repr(value))}")


def _jhalf(body: Any, path: str, what: str) -> NcclHalf | None:
    if body is None:
        return None
    if not isinstance(body, Mapping):
        raise ParseError(SOURCE, path, f"{what}: expected an object")
    wrong = _jfloat(body.get("nwrong"), path, f"{what}.nwrong")
    if wrong is not None and (not math.isfinite(wrong) or wrong < 0 or wrong != int(wrong)):
        raise ParseError(SOURCE, path, f"{what}.nwrong: {wrong} is not a count")
    time = body.get("time", body.get("cpu_time"))
    return NcclHalf(
        time_us=_jfloat(time, path, f"{what}.time"),
        algbw=_jfloat(body.get("alg_bw"), path, f"{what}.alg_bw"),
        busbw=_jfloat(body.get("bus_bw"), path, f"{what}.bus_bw"),
        wrong=int(wrong) if wrong is not None else None,
    )


def _with_iter(half: NcclHalf | None, body: Any, path: str, what: str) -> NcclHalf | None:
    if half is None or not isinstance(body, Mapping):
        return half
    return dataclasses.replace(
        half,
        i_min_us=_jfloat(body.get("min_us"), path, f"{what}.min_us"),
        i_max_us=_jfloat(body.get("max_us"), path, f"{what}.max_us"),
        i_p99_us=_jfloat(body.get("p99_us"), path, f"{what}.p99_us"),
        i_cv_pct=_jfloat(body.get("cv_pct"), path, f"{what}.cv_pct"),
    )


def _version_text(code: Any) -> str | None:
    """NCCL's version code (22807) as ``2.28.7``."""
    if not isinstance(code, int) or isinstance(code, bool) or code <= 0:
        return None
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def parse_nccl_json(text: str, path: str = "-") -> NcclOutput:
    """Parse the JSON report nccl-tests writes with ``-J FILE``."""
    doc = load_json(text, source=SOURCE, path=path, max_chars=MAX_JSON_CHARS)
    if not isinstance(doc, Mapping) or "results" not in doc:
        raise ParseError(SOURCE, path, "not an nccl-tests JSON report (no 'results')")
    args = doc.get("args") or []
    program = None
    if isinstance(args, list) and args and isinstance(args[0], str):
        program = args[0].rsplit("/", 1)[-1]
    env: list[tuple[str, str]] = []
    for item in doc.get("env") or []:
        if isinstance(item, str) and item.startswith("NCCL_") and "=" in item:
            key, _, value = item.partition("=")
            env.append((key, value))
    config = doc.get("config") if isinstance(doc.get("config"), Mapping) else {}
    assert isinstance(config, Mapping)
    ranks = []
    for i, d in enumerate(config.get("devices") or []):
        if not isinstance(d, Mapping):
            raise ParseError(SOURCE, path, f"config.devices[{i}]: expected an object")
        try:
            ranks.append(
                NcclRank(
                    rank=int(d["rank"]),
                    group=int(d["group"]) if d.get("group") is not None else None,
                    pid=int(d["pid"]) if d.get("pid") is not None else None,
                    host=str(d.get("hostname") or "?"),
                    device=int(d["device"]),
                    bus_id=str(d["device_hex"]) if d.get("device_hex") else None,
                    model=str(d["device_info"]) if d.get("device_info") else None,
                )
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ParseError(SOURCE, path, f"config.devices[{i}]: {e}") from None
    rows = []
    results = doc.get("results")
    if not isinstance(results, list):
        raise ParseError(SOURCE, path, "results: expected a list")
    for i, r in enumerate(results):
        what = f"results[{i}]"
        if not isinstance(r, Mapping):
            raise ParseError(SOURCE, path, f"{what}: expected an object")
        try:
            size, count = int(r["size"]), int(r["count"])
        except (KeyError, TypeError, ValueError):
            raise ParseError(SOURCE, path, f"{what}: no integer size and count") from None
        root_text = str(r.get("root", "")).strip()
        oop = _with_iter(
            _jhalf(r.get("out_of_place"), path, f"{what}.out_of_place"),
            r.get("out_of_place_per_iter"),
            path,
            f"{what}.out_of_place_per_iter",
        )
        ip = _with_iter(
            _jhalf(r.get("in_place"), path, f"{what}.in_place"),
            r.get("in_place_per_iter"),
            path,
            f"{what}.in_place_per_iter",
        )
        rows.append(
            NcclRow(
                line=None,
                size=size,
                count=count,
                type=str(r["type"]) if r.get("type") is not None else None,
                redop=str(r["redop"]) if r.get("redop") is not None else None,
                root=int(root_text) if re.fullmatch(r"-?\d{1,9}", root_text) else None,
                out_of_place=oop,
                in_place=ip,
            )
        )
    oob_body = doc.get("out_of_bounds")
    oob: tuple[tuple[int, bool | None], ...] = ()
    if isinstance(oob_body, Mapping) and isinstance(oob_body.get("count"), int):
        okay = oob_body.get("okay")  # written as the string "true"/"false" (jsonBool in src/util.cu)
        flag = okay if isinstance(okay, bool) else {"true": True, "false": False}.get(str(okay))
        oob = ((int(oob_body["count"]), flag),)
    avg_body = doc.get("average_bus_bandwidth")
    avg: tuple[float, ...] = ()
    if isinstance(avg_body, Mapping):
        mean = _jfloat(avg_body.get("bandwidth"), path, "average_bus_bandwidth.bandwidth")
        avg = (mean,) if mean is not None else ()
    header = NcclHeader(
        line=0,
        threads=config.get("nthreads") if isinstance(config.get("nthreads"), int) else None,
        gpus_per_thread=config.get("ngpus") if isinstance(config.get("ngpus"), int) else None,
        min_bytes=config.get("minimum_bytes") if isinstance(config.get("minimum_bytes"), int) else None,
        max_bytes=config.get("maximum_bytes") if isinstance(config.get("maximum_bytes"), int) else None,
        iterations=config.get("iterations") if isinstance(config.get("iterations"), int) else None,
        warmup_iterations=config.get("warmup_iters") if isinstance(config.get("warmup_iters"), int) else None,
        validation=bool(config["validation"]) if isinstance(config.get("validation"), int) else None,
    )
    per_iter = any(
        h is not None and h.i_min_us is not None for row in rows for h in (row.out_of_place, row.in_place)
    )
    return NcclOutput(
        source=path,
        program=program,
        nccl_version=_version_text(doc.get("nccl_version")),
        headers=(header,) if config else (),
        ranks=tuple(ranks),
        tables=1,
        per_iteration=per_iter,
        rows=tuple(rows),
        out_of_bounds=oob,
        avg_busbw=avg,
        concluded=1 if avg else 0,
        env=tuple(env),
    )
