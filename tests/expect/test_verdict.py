"""The verdicts on the corpus logs and on our own fixtures."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from helpers import FIXTURES

from nodetopo.expect import Algorithm, ObservedLink, Placement, algorithms_for, expect
from nodetopo.expect.nvbandwidth import judge_nvbandwidth
from nodetopo.expect.verdict import EXIT_CODES, Judgement, Measurement, Verdict, judge, measure, worst
from nodetopo.perf import NcclOutput, parse_benchmark, parse_nccl_json, parse_nccl_tests, parse_nvbandwidth
from tests.expect.calibration import POINTS
from tests.expect.machines import gb300_tray, hgx

OWN = FIXTURES / "perf" / "own"
H100 = "NVIDIA H100 80GB HBM3"


def _verdict(output: NcclOutput, placements: list[Placement], **kw: object) -> Judgement:
    m = measure(output)
    if not isinstance(m, Measurement):
        return m
    e = expect(placements, m.collective or "all_reduce", algorithms=algorithms_for("all_reduce", m.nccl_algo))
    return judge(output, m, e, **kw)  # type: ignore[arg-type]


def _log(corpus: Path, name: str) -> NcclOutput:
    return parse_nccl_tests((corpus / "perf" / name).read_text(encoding="utf-8"), name)


@pytest.mark.corpus
@pytest.mark.parametrize("point", [p for p in POINTS if p.log], ids=[p.name for p in POINTS if p.log])
def test_every_corpus_log_passes_on_its_own_machine(corpus: Path, point: object) -> None:
    assert point.log is not None  # type: ignore[attr-defined]
    j = _verdict(_log(corpus, point.log), point.placements())  # type: ignore[attr-defined]
    assert j.verdict is Verdict.PASSED, j.reason
    assert any("Avg bus bandwidth" in n for n in j.notes)  # reported, never judged


@pytest.mark.corpus
def test_a_log_judged_against_fewer_gpus_than_it_ran_on_is_a_harness_error(corpus: Path) -> None:
    j = _verdict(
        _log(corpus, "oci-gb300-nvl72-16hosts-1rack-64gpu.txt"),
        [Placement(node="h0", topology=gb300_tray("r.0"))],
    )
    assert j.verdict is Verdict.HARNESS_ERROR and "64 ranks" in j.reason and "4 GPUs" in j.reason
    # a tail without a rank list: busbw/algbw = 1.875 says 16 ranks, not 8
    j = _verdict(_log(corpus, "nebius-h100-2x8-ib-k8s-tail.txt"), [Placement(node="a", topology=hgx(H100))])
    assert j.verdict is Verdict.HARNESS_ERROR and "16-16 ranks" in j.reason and "8 GPUs" in j.reason


@pytest.mark.corpus
def test_crossing_the_rack_boundary_is_placed_wrong_for_a_workload_that_needs_one_rack(corpus: Path) -> None:
    two_racks = [Placement(node=f"h{i}", topology=gb300_tray(f"oci.{i // 16}")) for i in range(32)]
    j = _verdict(_log(corpus, "oci-gb300-nvl72-32hosts-2racks-128gpu.txt"), two_racks, min_busbw=900)
    assert j.verdict is Verdict.PLACED_WRONG, j.reason
    assert "2 NVLink domains" in j.reason and "needs 900" in j.reason
    assert j.suspects and all(x.kind == "NIC" for x in j.suspects)
    assert j.exit_code == 4
    # without a declared need the same run passes: it is what two racks give
    assert (
        _verdict(_log(corpus, "oci-gb300-nvl72-32hosts-2racks-128gpu.txt"), two_racks).verdict
        is Verdict.PASSED
    )


@pytest.mark.corpus
def test_the_same_run_inside_one_healthy_looking_domain_is_a_resource_that_is_not_real(corpus: Path) -> None:
    """If the 32 hosts' NodeTopologies claimed one NVLink domain, 740 GB/s would be far below it."""
    one_domain = [Placement(node=f"h{i}", topology=gb300_tray("oci.0")) for i in range(32)]
    out = _log(corpus, "oci-gb300-nvl72-32hosts-2racks-128gpu.txt")
    # not knowing the algorithm, a ring inside one domain could give 740: passed, with a note saying so
    j = _verdict(out, one_domain)
    assert j.verdict is Verdict.PASSED and any("below the band of NVLS" in n for n in j.notes), j.notes
    # the runs had NVLS on (NCCL_NVLS_ENABLE=1, SOURCES.md): against NVLS it is far short
    m = measure(out)
    assert isinstance(m, Measurement)
    j = judge(out, m, expect(one_domain, algorithms=algorithms_for("all_reduce", "NVLS")))
    assert j.verdict is Verdict.RESOURCE_NOT_REAL, j.reason
    assert j.suspects and j.suspects[0].kind == "NVSwitch"
    assert j.exit_code == 5


def test_a_build_without_mpi_under_mpirun_is_a_harness_error() -> None:
    out = parse_nccl_tests((OWN / "allreduce-no-mpi-under-mpirun.txt").read_text(), "own")
    j = measure(out)
    assert isinstance(j, Judgement) and j.verdict is Verdict.HARNESS_ERROR and "2 separate runs" in j.reason
    # one process's share alone: rank list and a header, busbw 0 everywhere
    text = (OWN / "allreduce-no-mpi-under-mpirun.txt").read_text().splitlines()
    single = [line for k, line in enumerate(text) if k >= 3 and "node-b" not in line and line != text[1]]
    j = measure(parse_nccl_tests("\n".join(single)))
    assert isinstance(j, Judgement) and j.verdict is Verdict.HARNESS_ERROR and "busbw 0" in j.reason


def test_a_run_far_below_its_band_is_a_resource_that_is_not_real() -> None:
    out = parse_nccl_tests((OWN / "allreduce-one-gpu-degraded.txt").read_text(), "own")
    j = _verdict(out, [Placement(node="node-a", topology=hgx(H100))])
    assert j.verdict is Verdict.RESOURCE_NOT_REAL and "0.3" in j.reason
    assert j.suspects and j.suspects[0].kind == "NVSwitch"


def test_an_observed_degraded_link_that_explains_the_shortfall_is_the_suspect() -> None:
    out = parse_nccl_tests((OWN / "allreduce-one-gpu-degraded.txt").read_text(), "own")
    m = measure(out)
    assert isinstance(m, Measurement)
    placements = [Placement(node="node-a", topology=hgx(H100))]
    seen = [ObservedLink(node="node-a", device="gpu:5", nvlinks=7, source="nvidia-smi nvlink -s")]
    observed = expect(placements, observed=seen)
    nominal = expect(placements)
    assert observed.band.low <= m.busbw <= observed.band.high  # the degraded link explains the figure
    j = judge(out, m, observed, nominal=nominal)
    assert j.verdict is Verdict.RESOURCE_NOT_REAL and "as observed" in j.reason
    assert [x.a for x in j.suspects] == ["gpu:node-a:5"] and j.suspects[0].observed


def test_wrong_data_is_a_resource_that_is_not_real() -> None:
    text = (OWN / "allreduce-one-gpu-degraded.txt").read_text().replace("159.49       0", "159.49      12")
    j = _verdict(parse_nccl_tests(text), [Placement(node="node-a", topology=hgx(H100))])
    assert j.verdict is Verdict.RESOURCE_NOT_REAL and "12 wrong elements" in j.reason


def test_a_short_sweep_is_not_judged_below_the_band() -> None:
    text = (OWN / "allreduce-one-gpu-degraded.txt").read_text()
    short = "\n".join(
        line
        for line in text.splitlines()
        if not line.startswith(("  2147483648", "  4294967296", "  8589934592"))
    )
    j = _verdict(parse_nccl_tests(short), [Placement(node="node-a", topology=hgx(H100))])
    assert j.verdict is Verdict.RESOURCE_NOT_REAL  # 1 GiB is large enough to judge
    tiny = "\n".join(
        line.replace("  1073741824     268435456", "    33554432       8388608")
        for line in short.splitlines()
    )
    j = _verdict(parse_nccl_tests(tiny), [Placement(node="node-a", topology=hgx(H100))])
    assert j.verdict is Verdict.HARNESS_ERROR and "stops at 32 MiB" in j.reason
    mid = "\n".join(
        line.replace("  1073741824     268435456", "   268435456      67108864")
        for line in short.splitlines()
    )
    j = _verdict(parse_nccl_tests(mid), [Placement(node="node-a", topology=hgx(H100))])
    assert j.verdict is Verdict.HARNESS_ERROR and "before judging" in j.reason


def test_the_json_report_with_its_algorithm() -> None:
    out = parse_nccl_json((OWN / "allreduce-ring-J.json").read_text(), "own.json")
    m = measure(out)
    assert isinstance(m, Measurement) and m.nccl_algo == "Ring" and m.ranks == 8
    e = expect(
        [Placement(node="node-a", topology=hgx(H100))], algorithms=algorithms_for("all_reduce", m.nccl_algo)
    )
    assert [b.algorithm for b in e.bounds] == [Algorithm.RING]
    j = judge(out, m, e)
    assert j.verdict is Verdict.PASSED and m.busbw == pytest.approx(370.9, abs=0.1)


def test_the_per_iteration_run_passes_and_a_need_above_it_is_placed_wrong() -> None:
    out = parse_nccl_tests((OWN / "allreduce-per-iteration-I1.txt").read_text(), "own")
    placements = [Placement(node="node-a", topology=hgx(H100))]
    assert _verdict(out, placements).verdict is Verdict.PASSED
    j = _verdict(out, placements, min_busbw=520)
    assert j.verdict is Verdict.PLACED_WRONG and "top of its band" in j.reason
    j = _verdict(out, placements, min_busbw=900)
    assert j.verdict is Verdict.PLACED_WRONG and "caps" in j.reason


def test_nvbandwidth_copies_against_their_pairs() -> None:
    slow = parse_nvbandwidth((OWN / "nvbandwidth-4xh100-one-slow-pair.txt").read_text(), "own.txt")
    placement = Placement(node="node-a", topology=hgx(H100), gpus=(0, 1, 2, 3))
    j = judge_nvbandwidth(slow, placement)
    assert (
        j.verdict is Verdict.RESOURCE_NOT_REAL and "GPU1 -> GPU3" in j.reason
    ) or "GPU3 -> GPU1" in j.reason
    assert {x.a for x in j.suspects} <= {"gpu:node-a:1", "gpu:node-a:3"} and j.suspects
    assert any("Waived" in n for n in j.notes)
    ok = parse_benchmark((OWN / "nvbandwidth-4xh100.json").read_text(), "own.json")
    j = judge_nvbandwidth(ok, placement)  # type: ignore[arg-type]
    assert j.verdict is Verdict.PASSED and "12 copies" in j.reason


def test_an_nvbandwidth_run_that_only_waived_is_a_harness_error() -> None:
    out = parse_nvbandwidth(
        "nvbandwidth Version: v0.8\nRunning device_to_device_memcpy_read_ce.\nWaived: no peer access\n"
    )
    j = judge_nvbandwidth(out, Placement(node="a", topology=hgx(H100)))
    assert j.verdict is Verdict.HARNESS_ERROR and "Waived" in j.reason


def test_exit_codes_and_the_worst_verdict() -> None:
    assert EXIT_CODES == {
        Verdict.PASSED: 0,
        Verdict.HARNESS_ERROR: 3,
        Verdict.PLACED_WRONG: 4,
        Verdict.RESOURCE_NOT_REAL: 5,
    }
    js = [
        Judgement(verdict=v, reason="", source="-")
        for v in (Verdict.PASSED, Verdict.HARNESS_ERROR, Verdict.PLACED_WRONG)
    ]
    assert worst(js) is Verdict.PLACED_WRONG and worst([]) is Verdict.PASSED


def test_no_rows_is_a_harness_error() -> None:
    out = parse_nccl_tests(
        "# nThread 1 nGpus 8 minBytes 8 maxBytes 8589934592 step: 2(factor)\n#  Rank  0 Group  0 Pid 1 on a "
        "device 0 [0x0e] NVIDIA H100\n"
    )
    j = measure(out)
    assert isinstance(j, Judgement) and j.verdict is Verdict.HARNESS_ERROR and "no result rows" in j.reason
    assert dataclasses.replace(j, reason="x").exit_code == 3


def test_a_rank_list_that_busbw_over_algbw_contradicts_is_a_harness_error() -> None:
    """Four rank lines but busbw/algbw = 1.75 (8 ranks): the listed ranks did not run this collective."""
    text = (OWN / "allreduce-per-iteration-I1.txt").read_text()
    cut = "\n".join(
        line for line in text.splitlines() if not any(f"Rank  {k} " in line for k in (4, 5, 6, 7))
    )
    j = measure(parse_nccl_tests(cut))
    assert isinstance(j, Judgement) and j.verdict is Verdict.HARNESS_ERROR
    assert "8-8 ranks" in j.reason and "the rank list 4" in j.reason
