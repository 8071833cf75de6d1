"""nccl-tests output: real logs of the corpus (read in place), then our own fixtures for the formats the
corpus has no real sample of (``tests/fixtures/perf/SOURCES.md``: not measurements)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import FIXTURES

from nodetopo.errors import ParseError
from nodetopo.perf import bus_factor, collective_of, parse_benchmark, parse_nccl_json, parse_nccl_tests

OWN = FIXTURES / "perf" / "own"


def _log(corpus: Path, name: str) -> str:
    return (corpus / "perf" / name).read_text(encoding="utf-8")


# --------------------------------------------------------------------------------------------
# Real logs
# --------------------------------------------------------------------------------------------


@pytest.mark.corpus
@pytest.mark.parametrize(
    ("name", "ranks", "elided", "busbw_16g", "avg"),
    [
        ("oci-gb300-nvl72-1host-4gpu.txt", 4, False, (685.19, 685.27), 446.673),
        ("oci-gb300-nvl72-2hosts-1rack-8gpu.txt", 8, True, (841.63, 842.11), 474.234),
        ("oci-gb300-nvl72-16hosts-1rack-64gpu.txt", 64, True, (930.48, 930.60), 455.539),
        ("oci-gb300-nvl72-32hosts-2racks-128gpu.txt", 128, True, (738.39, 739.99), 300.755),
    ],
)
def test_the_oci_gb300_logs(
    corpus: Path, name: str, ranks: int, elided: bool, busbw_16g: tuple[float, float], avg: float
) -> None:
    out = parse_nccl_tests(_log(corpus, name), name)
    assert out.program == "all_reduce_perf" and out.collective == "all_reduce"
    assert out.nccl_version == "2.28.7+cuda13.0"
    assert out.rank_count == ranks and out.ranks_elided is elided
    assert out.ranks[0].model == "NVIDIA GB300" and out.ranks[0].bus_id == "0008:06:00"
    header = out.headers[0]
    assert (
        header.min_bytes,
        header.max_bytes,
        header.iterations,
        header.threads,
        header.gpus_per_thread,
    ) == (
        524288,
        17179869184,
        50,
        1,
        1,
    )
    assert len(out.rows) == 16 and out.tables == 1 and out.concluded == 1
    last = out.rows[-1]
    assert (
        last.size == 16 << 30
        and last.count == 4 << 30
        and (last.type, last.redop, last.root) == ("float", "sum", -1)
    )
    assert last.out_of_place is not None and last.in_place is not None
    assert (last.out_of_place.busbw, last.in_place.busbw) == busbw_16g
    assert last.wrong() == 0
    assert out.out_of_bounds == ((0, True),) and out.avg_busbw == (avg,)


@pytest.mark.corpus
def test_the_nebius_tails_one_with_no_in_place_wrong_column(corpus: Path) -> None:
    pods = parse_nccl_tests(_log(corpus, "nebius-h100-2x8-ib-k8s-tail.txt"))
    vms = parse_nccl_tests(_log(corpus, "nebius-h100-2x8-ib-vm-tail-nowrongcol.txt"))
    for out, best, avg in ((pods, 467.28, 450.404), (vms, 467.79, 450.146)):
        assert out.program is None and out.collective is None  # a tail: the table only
        assert out.ranks == () and out.rank_count is None
        assert [r.size for r in out.rows] == [512 << 20, 1 << 30, 2 << 30, 4 << 30, 8 << 30]
        assert out.rows[-1].best_busbw() == best and out.avg_busbw == (avg,)
    assert pods.rows[-1].in_place is not None and pods.rows[-1].in_place.wrong == 0
    # the VM paste lost the in-place #wrong column (header and rows): the half is read without it
    last = vms.rows[-1]
    assert last.out_of_place is not None and last.out_of_place.wrong == 0
    assert last.in_place is not None and last.in_place.wrong is None and last.in_place.busbw == 467.61


@pytest.mark.corpus
def test_every_corpus_log_is_read_by_the_dispatcher(corpus: Path) -> None:
    for path in sorted((corpus / "perf").glob("*.txt")):
        out = parse_benchmark(path.read_text(encoding="utf-8"), str(path))
        assert out.rows, path.name  # type: ignore[union-attr]


# --------------------------------------------------------------------------------------------
# Our own fixtures: formats without a real sample
# --------------------------------------------------------------------------------------------


def test_per_iteration_columns() -> None:
    out = parse_nccl_tests((OWN / "allreduce-per-iteration-I1.txt").read_text(), "own")
    assert out.per_iteration and out.tests_version == "2.19.6"
    row = out.rows[0]
    assert row.out_of_place is not None and row.in_place is not None
    oop, ip = row.out_of_place, row.in_place
    assert (oop.time_us, oop.algbw, oop.busbw, oop.wrong) == (3910.20, 274.60, 480.55, 0)
    assert (oop.i_min_us, oop.i_max_us, oop.i_p99_us, oop.i_cv_pct) == (3890.10, 3950.70, 3950.70, 0.41)
    assert (ip.i_min_us, ip.i_cv_pct, ip.busbw) == (3893.40, 0.45, 480.23)
    assert out.rows[-1].best_busbw() == 482.12 and out.rank_count == 8


def test_the_json_report() -> None:
    out = parse_nccl_json((OWN / "allreduce-ring-J.json").read_text(), "own.json")
    assert out.program == "all_reduce_perf" and out.collective == "all_reduce"
    assert out.nccl_version == "2.28.7" and out.setting("NCCL_ALGO") == "Ring"
    assert out.rank_count == 8 and out.ranks[3].bus_id == "0000:5d:00" and out.ranks[0].host == "node-a"
    assert out.headers[0].max_bytes == 8 << 30 and out.headers[0].gpus_per_thread == 8
    assert [r.size for r in out.rows] == [1 << 30, 2 << 30, 4 << 30, 8 << 30]
    assert out.rows[0].root == -1 and out.rows[0].wrong() == 0
    assert out.out_of_bounds == ((0, True),)
    assert out.avg_busbw[0] == pytest.approx(370.22, abs=0.01)
    assert parse_benchmark((OWN / "allreduce-ring-J.json").read_text()).rows == out.rows  # type: ignore[union-attr]


def test_older_layouts_with_an_error_column_and_no_root() -> None:
    # own text in the layout of nccl-tests before 2.10: `error` (max relative error) instead of #wrong
    text = """\
#                                                     out-of-place                       in-place
#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
   134217728      33554432   float     sum   1024.5  131.01  229.27  5e-07   1021.9  131.34  229.85  5e-07
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 229.56
"""
    out = parse_nccl_tests(text)
    row = out.rows[0]
    assert row.root is None and row.redop == "sum" and row.best_busbw() == 229.85
    assert row.in_place is not None and row.in_place.error == 5e-07 and row.in_place.wrong is None


def test_unchecked_runs_print_na_and_a_trace_replay_leaves_out_of_place_blank() -> None:
    head = (
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   "
        "algbw   "
        "busbw #wrong\n"
    )
    checked_off = (
        head
        + "  1073741824     268435456     float     sum      -1  3910.20  274.60  480.55    N/A  3912.80  "
        "274.42  480.23    N/A\n"
    )
    row = parse_nccl_tests(checked_off).rows[0]
    assert row.wrong() is None and row.best_busbw() == 480.55
    replay = (
        head
        + "  1073741824     268435456     float     sum      -1                                  3912.80  "
        "274.42  480.23       0\n"
    )
    row = parse_nccl_tests(replay).rows[0]
    assert row.out_of_place is None and row.in_place is not None and row.in_place.busbw == 480.23


def test_timestamps_and_foreign_lines_are_read_past() -> None:
    text = (
        "node-a:41001:41001 [0] NCCL INFO NCCL_ALGO set by environment to NVLS\n"
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   "
        "algbw   "
        "busbw #wrong  timestamp\n"
        "  1073741824     268435456     float     sum      -1  3910.20  274.60  480.55       0  3912.80  "
        "274.42  "
        "480.23       0  2026-11-02 09:14:07\n"
        "node-a:41001:41020 [0] NCCL INFO comm 0x55 rank 0 nranks 8 - Destroy COMPLETE\n"
    )
    out = parse_nccl_tests(text)
    assert out.rows[0].best_busbw() == 480.55 and out.setting("NCCL_ALGO") == "NVLS"


def test_several_processes_in_one_log_are_kept_as_facts() -> None:
    out = parse_nccl_tests((OWN / "allreduce-no-mpi-under-mpirun.txt").read_text())
    assert len(out.headers) == 2 and out.tables == 2
    assert [r.rank for r in out.ranks] == [0, 0] and {r.host for r in out.ranks} == {"node-a", "node-b"}
    assert len(out.rows) == 10 and all(r.best_busbw() == 0 for r in out.rows)
    assert out.avg_busbw == (0.0, 0.0)
    assert out.rows[4].in_place is not None and out.rows[4].in_place.algbw == 2e6


@pytest.mark.parametrize(
    ("text", "line", "detail"),
    [
        (
            "#  size  count  type  redop  root  time  algbw  busbw  #wrong\n  1024  256  float  sum  -1  5.1 "
            " 0.2\n",
            2,
            "fields",
        ),
        (
            "#  size  count  type  redop  root  time  algbw  busbw  #wrong\n  1024  256  float  sum  -1  5.1 "
            " x  0.3  0\n",
            2,
            "algbw",
        ),
        (
            "#  size  count  type  redop  root  time  algbw  busbw  #wrong\n  1024  256  float  sum  -1  5.1 "
            " 0.2  0.3  1.5\n",
            2,
            "#wrong",
        ),
        ("#  size  count  type  redop  root  time  goodput  busbw\n", 1, "unknown column"),
        ("  1024  256  float  sum  -1  5.1  0.2  0.3  0\n", 1, "before any column header"),
        (
            "#  size  count  type  redop  root  time  algbw  busbw  #wrong  time  busbw  algbw  #wrong\n",
            1,
            "in-place",
        ),
    ],
)
def test_bad_input_names_the_line(text: str, line: int, detail: str) -> None:
    with pytest.raises(ParseError) as e:
        parse_nccl_tests(text, "run.log")
    assert e.value.source == "nccl-tests" and e.value.path == "run.log" and e.value.line == line
    assert detail in e.value.detail


def test_no_output_at_all() -> None:
    with pytest.raises(ParseError, match="no nccl-tests output"):
        parse_nccl_tests("bash: all_reduce_perf: command not found\n", "run.log")
    with pytest.raises(ParseError, match="neither nccl-tests nor nvbandwidth"):
        parse_benchmark("bash: all_reduce_perf: command not found\n", "run.log")


@pytest.mark.parametrize("text", ["[1, 2]", '{"results": 3}', '{"results": [{"size": "x"}]}', "{"])
def test_bad_json(text: str) -> None:
    with pytest.raises(ParseError):
        parse_nccl_json(text, "r.json")


def test_bus_factors_and_program_names() -> None:
    assert bus_factor("all_reduce", 8) == 1.75 and bus_factor("all_gather", 4) == 0.75
    assert bus_factor("sendrecv", 16) == 1.0 and bus_factor("all_reduce", 1) == 0.0
    assert collective_of("./build/all_reduce_perf_mpi") == "all_reduce"
    assert collective_of("alltoall_perf") == "alltoall" and collective_of("ib_write_bw") is None
    with pytest.raises(ValueError):
        bus_factor("all_reduce", 0)
