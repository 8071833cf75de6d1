"""``nodetopo probe``'s collective smoke test against the bandwidth model's band for the container's own
GPUs: recorded ``all_reduce_perf`` outputs (the real-machine corpus, our own fixtures) printed by a
fake ``all_reduce_perf`` on ``PATH``, the node's NodeTopology published from the machine's facts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nodetopo.expect.constants import JUDGED_MIN_BYTES
from nodetopo.model import Topology
from nodetopo.probe import observe
from nodetopo.probe.checks import check_collective
from nodetopo.probe.collective import parse_collective
from nodetopo.probe.inputs import Seen, Thresholds
from nodetopo.probe.outcome import Attribution, Status
from nodetopo.probe.promised import parse_nodetopology
from nodetopo.resource.body import to_nodetopology
from tests.expect.machines import gb300_tray, hgx

REPO = Path(__file__).resolve().parents[2]
OWN = REPO / "tests/fixtures/perf/own"
H100 = "NVIDIA H100 80GB HBM3"


def fake_all_reduce_perf(directory: Path, log: Path) -> Path:
    """An ``all_reduce_perf`` that prints ``log`` when called as the probe calls it (its sweep reaching
    the size the model's band is stated for), and fails otherwise."""
    directory.mkdir(parents=True, exist_ok=True)
    tool = directory / "all_reduce_perf"
    largest = f"{JUDGED_MIN_BYTES >> 20}M"
    tool.write_text(
        f'#!/bin/sh\n[ "$1 $2 $3 $4" = "-b 8M -e {largest}" ] || {{ echo "argv: $*" >&2; exit 9; }}\n'
        f'cat "{log}"\n'
    )
    tool.chmod(0o755)
    return directory


def probe(
    tmp_path: Path, topology: Topology, gpus: int, log: Path, *args: str
) -> tuple[int, dict[str, Any], dict[str, Any], str]:
    """The probe in a container holding GPUs 0..gpus-1 of ``topology`` (node ``n1``), with the fake tool."""
    nt = tmp_path / "nt.json"
    nt.write_text(json.dumps(to_nodetopology(topology, "n1")))
    root = tmp_path / "root"
    (root / "dev").mkdir(parents=True, exist_ok=True)
    for i in range(gpus):
        (root / f"dev/nvidia{i}").write_text("")
    bin_dir = fake_all_reduce_perf(tmp_path / "bin", log)
    term = tmp_path / "termination-log"
    result = subprocess.run(
        [
            sys.executable, "-m", "nodetopo", "probe",
            "--root", str(root), "--termination-log", str(term),
            "--nodetopology", str(nt), "--no-event", "--min-shm", "0",
            "--annotation", "nodetopo.io/gpus-in-one-island=true", *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={
            "PATH": f"{bin_dir}:/usr/bin:/bin",
            "NVIDIA_VISIBLE_DEVICES": ",".join(str(i) for i in range(gpus)),
            "PYTHONPATH": str(REPO),
        },
    )  # fmt: skip
    assert "Traceback" not in result.stderr, result.stderr
    report = json.loads(result.stdout)
    check = next(c for c in report["checks"] if c["name"] == "collective")
    return result.returncode, report, check, term.read_text()


@pytest.mark.corpus
def test_a_real_gb300_host_passes_inside_its_band(tmp_path: Path, corpus: Path) -> None:
    """OCI's 4 × GB300 run (685.27 GB/s at 16 GiB) on a GB300 NVL72 tray: Passed, the band stated."""
    log = corpus / "perf/oci-gb300-nvl72-1host-4gpu.txt"
    code, report, check, term = probe(tmp_path, gb300_tray("oci-gb300.0"), 4, log)
    assert check["status"] == "pass", check
    assert check["reason"].startswith("Passed: 685.27 GB/s busbw at 16 GiB is within the expected band ")
    assert code == 0 and report["passed"] and term.startswith("passed"), term


@pytest.mark.corpus
def test_a_real_run_below_the_workloads_need_is_placed_wrong(tmp_path: Path, corpus: Path) -> None:
    """The same run with the workload needing 900 GB/s: what this placement gives, below the need."""
    log = corpus / "perf/oci-gb300-nvl72-1host-4gpu.txt"
    code, _, check, term = probe(tmp_path, gb300_tray("oci-gb300.0"), 4, log, "--min-busbw", "900")
    assert (check["status"], check["attribution"]) == ("fail", "PlacedWrong"), check
    assert "the workload needs 900 GB/s" in check["reason"] and "limited by" in check["reason"]
    assert code == 1 and term.startswith("PlacedWrong: collective: 685.27 GB/s busbw at 16 GiB"), term


@pytest.mark.corpus
def test_a_run_over_other_gpus_than_the_pods_is_a_harness_error(tmp_path: Path, corpus: Path) -> None:
    """A 4-rank output in a container holding 2 GPUs did not run on the pod's GPUs: HarnessError, a
    warning (the pod's bandwidth was not judged)."""
    log = corpus / "perf/oci-gb300-nvl72-1host-4gpu.txt"
    code, _, check, term = probe(tmp_path, gb300_tray("oci-gb300.0"), 2, log)
    assert (check["status"], check["attribution"]) == ("warn", "HarnessError"), check
    assert "the output ran 4 ranks, the placement holds 2 GPUs" in check["reason"]
    assert code == 0 and term.startswith("passed with warning HarnessError: collective: "), term


def test_a_run_far_below_an_h100_nodes_band_is_resource_not_real(tmp_path: Path) -> None:
    """159 GB/s over 8 H100 on NVSwitch: above any fixed floor, a third of what the node promises."""
    code, report, check, term = probe(tmp_path, hgx(H100), 8, OWN / "allreduce-one-gpu-degraded.txt")
    assert (check["status"], check["attribution"]) == ("fail", "ResourceNotReal"), check
    assert check["reason"].startswith("159.49 GB/s busbw at 8 GiB is 0.")
    assert "limited by NVLink" in check["reason"] and "; suspect: " in check["reason"]
    assert code == 1 and report["attribution"] == "ResourceNotReal"
    assert term.startswith("ResourceNotReal: collective: 159.49 GB/s"), term


def test_a_build_without_mpi_under_mpirun_is_a_harness_error(tmp_path: Path) -> None:
    code, _, check, term = probe(tmp_path, hgx(H100), 2, OWN / "allreduce-no-mpi-under-mpirun.txt")
    assert (check["status"], check["attribution"]) == ("warn", "HarnessError"), check
    assert "separate runs in one output" in check["reason"]
    assert code == 0 and "HarnessError: collective: " in term


def test_output_that_is_no_result_is_a_harness_error_not_a_bandwidth(tmp_path: Path) -> None:
    """Only the footer's average (the figure the fixed thresholds judged), a table without a row at a
    large size: no bandwidth to judge."""
    log = tmp_path / "avg-only.txt"
    log.write_text("# Avg bus bandwidth    : 8.5\n")
    code, _, check, _ = probe(tmp_path, hgx(H100), 2, log)
    assert (check["status"], check["attribution"]) == ("warn", "HarnessError"), check
    assert check["reason"].startswith("not nccl-tests output: ") and code == 0
    log.write_text(
        "#       size         count      type   redop    root     time   algbw   busbw #wrong\n"
        "     8388608       2097152     float     sum      -1    95.12   88.19   88.19      0\n"
    )
    code, _, check, _ = probe(tmp_path, hgx(H100), 2, log)
    assert (check["status"], check["attribution"]) == ("warn", "HarnessError"), check
    assert "the sweep stops at 8 MiB" in check["reason"] and code == 0


def test_the_sweep_reaches_the_size_the_band_is_stated_for() -> None:
    argv = observe.collective_argv(8)
    assert argv[argv.index("-e") + 1] == "1024M" and JUDGED_MIN_BYTES == 1024 << 20
    assert argv[argv.index("-g") + 1] == "8"


def _seen(ids: tuple[str, ...], text: str) -> Seen:
    return Seen(
        gpu_ids=ids,
        gpu_ids_from="NVIDIA_VISIBLE_DEVICES",
        dev_nvidia=None,
        nvml=None,
        infiniband=None,
        shm_bytes=None,
        hugepages_bytes=None,
        cpus=None,
        cpus_from="",
        mems=None,
        collective=parse_collective(text, "all_reduce_perf"),
    )


def test_no_band_to_compare_with_is_a_skip_with_the_figure() -> None:
    """No NodeTopology, or a GPU it does not list: the figure is reported, nothing is judged."""
    text = (OWN / "allreduce-one-gpu-degraded.txt").read_text()
    ids = tuple(str(i) for i in range(8))
    c = check_collective(_seen(ids, text), None, Thresholds())
    assert c.status is Status.SKIP and c.reason.startswith("159.49 GB/s busbw at 8192 MiB; no band")
    promised = parse_nodetopology(to_nodetopology(hgx(H100), "n1"))
    c = check_collective(_seen((*ids[:7], "9"), text), promised, Thresholds())
    assert c.status is Status.SKIP and "NodeTopology/n1 does not list GPU(s) 9" in c.reason
    c = check_collective(_seen(ids, text), promised, Thresholds())
    assert (c.status, c.attribution) == (Status.FAIL, Attribution.RESOURCE_NOT_REAL)


@pytest.mark.corpus
def test_the_pods_declared_need_is_its_min_busbw_annotation(tmp_path: Path, corpus: Path) -> None:
    """The pod's ``nodetopo.io/min-busbw`` (the downward API's annotations file, or ``--annotation``) is
    the need the collective is judged by; ``--min-busbw`` says one over it."""
    log = corpus / "perf/oci-gb300-nvl72-1host-4gpu.txt"
    tray = gb300_tray("oci-gb300.0")
    code, report, check, term = probe(tmp_path, tray, 4, log, "--annotation", "nodetopo.io/min-busbw=900")
    assert (check["status"], check["attribution"]) == ("fail", "PlacedWrong"), check
    assert "the workload needs 900 GB/s" in check["reason"] and code == 1
    declared = next(c for c in report["checks"] if c["name"] == "declared")
    assert "min-busbw=900 GB/s" in declared["reason"], declared
    assert term.startswith("PlacedWrong: collective: 685.27 GB/s busbw at 16 GiB"), term
    annotations = tmp_path / "annotations"
    annotations.write_text('nodetopo.io/min-busbw="900"\n')
    code, _, check, _ = probe(tmp_path, tray, 4, log, "--annotations-file", str(annotations))
    assert (check["status"], check["attribution"]) == ("fail", "PlacedWrong") and code == 1
    code, _, check, _ = probe(
        tmp_path, tray, 4, log, "--annotations-file", str(annotations), "--min-busbw", "600"
    )
    assert check["status"] == "pass" and "Passed: 685.27 GB/s" in check["reason"] and code == 0
    code, _, check, _ = probe(tmp_path, tray, 4, log, "--annotation", "nodetopo.io/min-busbw=600")
    assert check["status"] == "pass" and code == 0


def test_a_min_busbw_that_is_no_number_is_a_bad_declaration() -> None:
    from tests.probe.test_checks import declared

    bad = declared(min_busbw="400GB/s")
    assert bad.request is None and bad.error is not None
    assert (
        'nodetopo.io/min-busbw: expected a positive number of GB/s (400, 372.5), got "400GB/s"' in bad.error
    )
    only = declared(min_busbw="372.5")
    assert only.annotated and only.min_busbw == 372.5 and only.error is None
