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

from nodetopo.errors import ParseError, excerpt

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
