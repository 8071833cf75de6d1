"""The verdict on a measured result: does the placement deliver what its topology promises? Pure.

* ``HarnessError``: the output cannot be a bandwidth result (no rows; several independent runs in
  one log, as a build without MPI started by mpirun prints; busbw 0 with algbw > 0: one rank per
  communicator; a communicator of another size than the placement; a sweep that stops too small;
  an nvbandwidth testcase waived or failed).
* ``ResourceNotReal``: the result is below the band the topology promises, or wrong data came back;
  the suspect is the link that binds the expectation (or the observed, degraded link that explains it).
* ``PlacedWrong``: the result is what this placement gives, but the placement caps below what the
  workload declared it needs (``min_busbw``): the limiting link says where.
* ``Passed``.

The judged figure is the bus bandwidth at the largest size of the sweep (out-of-place or in-place,
the better), never ``Avg bus bandwidth``: that is the mean over every size, so it moves with the
sweep's range.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Sequence

from nodetopo.expect import constants as c
from nodetopo.expect.links import Link
from nodetopo.expect.model import Band, Expectation
from nodetopo.perf.nccl import COLLECTIVES, NcclOutput, NcclRow, bus_factor


class Verdict(enum.StrEnum):
    PASSED = "Passed"
    RESOURCE_NOT_REAL = "ResourceNotReal"
    PLACED_WRONG = "PlacedWrong"
    HARNESS_ERROR = "HarnessError"


#: ``nodetopo accept`` exit codes; with several results the highest wins
EXIT_CODES = {
    Verdict.PASSED: 0,
    Verdict.HARNESS_ERROR: 3,
    Verdict.PLACED_WRONG: 4,
    Verdict.RESOURCE_NOT_REAL: 5,
}


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Measurement:
    """What an nccl-tests output measured, read for judging."""

    source: str
    collective: str | None
    ranks: int | None  #: from the rank list (highest rank + 1)
    size: int  #: the judged (largest) size, bytes
    busbw: float  #: GB/s at that size, the better half
    algbw: float
    peak_busbw: float  #: the highest busbw at any size
    avg_busbw: float | None  #: the footer's mean over the sweep (reported, never judged)
    nccl_version: str | None = None
    nccl_algo: str | None = None  #: NCCL_ALGO as the log or the JSON report shows it
    hosts: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()  #: what reading the output found worth saying


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Judgement:
    verdict: Verdict
    reason: str
    source: str
    measured: Measurement | None = None
    expected: Band | None = None
    suspects: tuple[Link, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]


def worst(judgements: Sequence[Judgement]) -> Verdict:
    return max((j.verdict for j in judgements), key=lambda v: EXIT_CODES[v], default=Verdict.PASSED)


def _harness(
    source: str, reason: str, measured: Measurement | None = None, notes: Sequence[str] = ()
) -> Judgement:
    return Judgement(
        verdict=Verdict.HARNESS_ERROR, reason=reason, source=source, measured=measured, notes=tuple(notes)
    )


def _gib(size: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift:
            return f"{size / (1 << shift):g} {unit}"
    return f"{size} B"


def _span(e: Expectation) -> str:
    if len(e.domains) > 1:
        return f"{len(e.domains)} NVLink domains, joined by the network"
    return e.fabric_span


def _narrowing(e: Expectation) -> str:
    """How to find which of the alike links is short: the run loads them all at once."""
    if e.limiting_class in ("NVLink", "NVLink SHARP"):
        how = (
            "nvbandwidth -t device_to_device_memcpy_read_ce on each node (or nvidia-smi nvlink -s) names "
            "the GPU"
        )
    elif e.limiting_class == "network":
        how = "ib_write_bw per NIC pair, or the run per node and per rail (NCCL_TESTS_SPLIT), names the NIC"
    else:
        how = "nvbandwidth's host and device copies name the PCIe link"
    return f"the suspect is the binding link class, not one link: every link like it carries the run; {how}"


def implied_ranks(collective: str, row: NcclRow) -> tuple[int, int] | None:
    """The communicator sizes busbw/algbw allows (nccl-tests prints both with two decimals): (low, high)."""
    kind = COLLECTIVES.get(collective)
    best = max(
        (h for h in row.halves if h.algbw and h.busbw and h.algbw >= 1 and math.isfinite(h.busbw)),
        key=lambda h: h.algbw or 0.0,
        default=None,
    )
    if best is None or kind not in ("2(n-1)/n", "(n-1)/n"):
        return None
    assert best.algbw is not None and best.busbw is not None
    lo_f = (best.busbw - 0.005) / (best.algbw + 0.005)
    hi_f = (best.busbw + 0.005) / (best.algbw - 0.005)
    top = 2.0 if kind == "2(n-1)/n" else 1.0

    def ranks(f: float) -> float:
        return math.inf if f >= top else top / (top - f) if kind == "2(n-1)/n" else 1 / (1 - f)

    low, high = ranks(lo_f), ranks(hi_f)
    if not math.isfinite(high):
        return max(1, math.ceil(low - 1e-9)), 1 << 30
    first, last = max(1, math.ceil(low - 1e-9)), math.floor(high + 1e-9)
    if first > last:  # no whole rank count fits the printed digits: the nearest one
        first = last = max(1, round((low + high) / 2))
    return first, last


def measure(output: NcclOutput, collective: str | None = None) -> Measurement | Judgement:
    """Read an nccl-tests output for judging; a ``HarnessError`` judgement when it cannot be a result."""
    src = output.source
    name = collective or output.collective
    notes: list[str] = []
    if not output.rows:
        return _harness(src, "no result rows: the run did not reach its table (it failed or was cut short)")
    programs = {output.program} if output.program else set()
    separate = len(output.headers) > 1 or sum(1 for r in output.ranks if r.rank == 0) > 1
    if separate:
        count = max(len(output.headers), sum(1 for r in output.ranks if r.rank == 0))
        return _harness(
            src,
            f"{count} separate runs in one output, each with its own rank 0: every process ran its own "
            "communicator (nccl-tests built without MPI=1, started by mpirun or srun?)",
        )
    if len(programs) > 1:
        return _harness(src, "outputs of several benchmarks in one file: give one per file")
    sizes = [r.size for r in output.rows]
    largest = max(sizes)
    top_rows = [r for r in output.rows if r.size == largest]
    row = max(top_rows, key=lambda r: r.best_busbw() or 0.0)
    busbw = row.best_busbw()
    algbw = row.best_algbw()
    if busbw is None or algbw is None:
        return _harness(src, f"no bus bandwidth at {_gib(largest)} (line {row.line})")
    if len(top_rows) > 1 and len({(r.type, r.redop) for r in top_rows}) < len(top_rows):
        notes.append(f"{len(top_rows)} rows at {_gib(largest)} (repeated cycles): the best is judged")
    large = [r for r in output.rows if r.size >= min(largest, c.HARNESS_MIN_BYTES)]
    if all((r.best_busbw() or 0.0) == 0.0 for r in large) and any((r.best_algbw() or 0.0) > 0 for r in large):
        return _harness(
            src,
            "busbw 0 with algbw above 0 at every large size: one rank per communicator (nccl-tests built "
            "without "
            "MPI=1 and started by mpirun: each process measured itself)",
        )
    avg = output.avg_busbw[-1] if output.avg_busbw else None
    if avg is not None:
        notes.append(
            f"'Avg bus bandwidth' {avg:g} GB/s is the mean over the sweep's sizes: reported, not judged"
        )
    env_algo = output.setting("NCCL_ALGO")
    if output.headers and output.headers[0].validation is False:
        notes.append("the run did not check its results (-c 0): wrong data would go unseen")
    peak = max((r.best_busbw() or 0.0) for r in output.rows)
    hosts = tuple(dict.fromkeys(r.host for r in output.ranks))
    measured = Measurement(
        source=src,
        collective=name,
        ranks=output.rank_count,
        size=largest,
        busbw=busbw,
        algbw=algbw,
        peak_busbw=peak,
        avg_busbw=avg,
        nccl_version=output.nccl_version,
        nccl_algo=env_algo,
        hosts=hosts,
    )
    if largest < c.HARNESS_MIN_BYTES:
        return _harness(
            src,
            f"the sweep stops at {_gib(largest)}: below {_gib(c.HARNESS_MIN_BYTES)} no run reaches its "
            "bandwidth; "
            "rerun with -e 8G (or more)",
            measured,
            notes,
        )
    if name is not None and name in COLLECTIVES and output.ranks:
        allowed = implied_ranks(name, row)
        listed = output.rank_count
        if allowed is not None and listed is not None and not allowed[0] <= listed <= allowed[1]:
            return _harness(
                src,
                f"busbw/algbw at {_gib(largest)} implies a communicator of {allowed[0]}-{allowed[1]} ranks, "
                "the rank "
                f"list {listed}: the ranks did not run one collective",
                measured,
                notes,
            )
    return dataclasses.replace(measured, notes=tuple(notes))


def wrong_data(output: NcclOutput) -> str | None:
    """Why the output's data is wrong (``#wrong`` or ``Out of bounds`` counts), or None."""
    wrong = sum(r.wrong() or 0 for r in output.rows)
    oob = sum(count for count, _ in output.out_of_bounds)
    if wrong or oob:
        parts = []
        if wrong:
            parts.append(f"{wrong} wrong elements")
        if oob:
            parts.append(f"{oob} out-of-bounds values")
        return " and ".join(parts)
    return None


def judge(
    output: NcclOutput,
    measured: Measurement,
    expected: Expectation,
    *,
    min_busbw: float | None = None,
    nominal: Expectation | None = None,
) -> Judgement:
    """The verdict on ``measured`` against ``expected`` (and, where observed links lowered it, against
    the ``nominal`` expectation the topology promised)."""
    src = measured.source
    notes = list(measured.notes)
    band = expected.band
    where = f"{measured.busbw:g} GB/s busbw at {_gib(measured.size)}"
    if measured.ranks is not None and measured.ranks != expected.ranks:
        return _harness(
            src,
            f"the output ran {measured.ranks} ranks, the placement holds {expected.ranks} GPUs: it did not "
            "run on this "
            "placement (or not on all of it)",
            measured,
            notes,
        )
    if measured.ranks is None:
        allowed = None
        name = measured.collective or expected.collective
        if name in COLLECTIVES:
            row = max(
                (r for r in output.rows if r.size == measured.size), key=lambda r: r.best_busbw() or 0.0
            )
            allowed = implied_ranks(name, row)
        if allowed is not None and not allowed[0] <= expected.ranks <= allowed[1]:
            return _harness(
                src,
                f"busbw/algbw implies a communicator of {allowed[0]}-{allowed[1]} ranks, the placement holds "
                f"{expected.ranks} GPUs",
                measured,
                notes,
            )
        if allowed is not None:
            factor = bus_factor(name, expected.ranks)
            notes.append(
                f"rank count from busbw/algbw ({factor:.4f}): {expected.ranks}, as the placement holds"
            )
    bad = wrong_data(output)
    if bad is not None:
        return Judgement(
            verdict=Verdict.RESOURCE_NOT_REAL,
            reason=f"{bad}: the collective returned wrong data (a GPU, its memory, a link or the NCCL build)",
            source=src,
            measured=measured,
            expected=band,
            notes=tuple(notes),
        )
    fraction = measured.busbw / band.expected if band.expected else math.inf
    degraded = tuple(x for x in expected.observed if x.capacity < x.nominal)
    if measured.size < c.JUDGED_MIN_BYTES and measured.busbw < band.low:
        return _harness(
            src,
            f"{where}, below the band {band.low:.0f}-{band.high:.0f} GB/s, but the sweep stops below the "
            f"{_gib(c.JUDGED_MIN_BYTES)} the band is stated for: rerun with -e 8G before judging",
            measured,
            notes,
        )
    if measured.busbw < band.low:
        suspects = degraded or expected.limiting
        if not degraded:
            notes.append(_narrowing(expected))
        return Judgement(
            verdict=Verdict.RESOURCE_NOT_REAL,
            reason=f"{where} is {fraction:.2f} of the expected {band.expected:.0f} GB/s, below the band "
            f"{band.low:.0f}-{band.high:.0f} this placement's topology promises ({expected.algorithm}, "
            "limited by "
            f"{expected.limiting_class})",
            source=src,
            measured=measured,
            expected=band,
            suspects=suspects,
            notes=tuple(notes),
        )
    if nominal is not None and degraded and measured.busbw < nominal.band.low:
        return Judgement(
            verdict=Verdict.RESOURCE_NOT_REAL,
            reason=f"{where} is within the band of the links as observed ({band.low:.0f}-{band.high:.0f} "
            "GB/s) but "
            f"below what the topology promises ({nominal.band.low:.0f}-{nominal.band.high:.0f}): "
            + "; ".join(x.label for x in degraded[:3]),
            source=src,
            measured=measured,
            expected=nominal.band,
            suspects=degraded,
            notes=tuple(notes),
        )
    if min_busbw is not None and measured.busbw < min_busbw:
        caps = "caps" if band.high < min_busbw else "reaches it only at the top of its band"
        return Judgement(
            verdict=Verdict.PLACED_WRONG,
            reason=f"{where}: the workload needs {min_busbw:g} GB/s; this placement {caps} "
            f"({band.low:.0f}-{band.high:.0f} GB/s, limited by {expected.limiting_class}"
            + (f": {expected.limiting[0].label}" if expected.limiting else "")
            + f"; it spans {_span(expected)})",
            source=src,
            measured=measured,
            expected=band,
            suspects=expected.limiting,
            notes=tuple(notes),
        )
    likely = expected.bound(expected.algorithm)
    if likely is not None and measured.busbw < likely.band.low:
        matches = [str(b.algorithm) for b in expected.bounds if b.band.contains(measured.busbw)]
        notes.append(
            f"{where} is below the band of {expected.algorithm} "
            f"({likely.band.low:.0f}-{likely.band.high:.0f}), the "
            f"fastest NCCL could run here, and matches {', '.join(matches) or 'another algorithm'}: "
            + (
                "NVLS may be off (NCCL_NVLS_ENABLE, the Fabric Manager or IMEX); "
                if "NVLS" in str(expected.algorithm)
                else ""
            )
            + "give --nccl-algo to judge against one algorithm"
        )
    if measured.busbw > band.high:
        notes.append(
            f"{where} is above the band's top {band.high:.0f}: an algorithm the model does not cover "
            "(CollNet/SHARP, "
            "NVLS all-gather) or a topology better than published"
        )
    if measured.size < c.JUDGED_MIN_BYTES:
        notes.append(
            f"the sweep stops at {_gib(measured.size)}: a shortfall there would not have been judged"
        )
    return Judgement(
        verdict=Verdict.PASSED,
        reason=f"{where} is within the expected band {band.low:.0f}-{band.high:.0f} GB/s ({fraction:.2f} of "
        f"{band.expected:.0f}, {expected.algorithm})"
        if measured.busbw <= band.high
        else f"{where}, above the expected band {band.low:.0f}-{band.high:.0f} GB/s",
        source=src,
        measured=measured,
        expected=band,
        notes=tuple(notes),
    )
