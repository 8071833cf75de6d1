"""``nodetopo expect`` and ``nodetopo accept``: files, flags, exit codes, the JSON report."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from helpers import BUNDLES, FIXTURES

from nodetopo.cli import main
from nodetopo.resource.body import to_nodetopology
from tests.expect.machines import gb300_tray, hgx

OWN = FIXTURES / "perf" / "own"
H100 = "NVIDIA H100 80GB HBM3"


def _write(path: Path, bodies: list[dict[str, object]]) -> str:
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": bodies}), encoding="utf-8")
    return str(path)


@pytest.fixture
def two_h100(tmp_path: Path) -> str:
    return _write(
        tmp_path / "nodes.json", [to_nodetopology(hgx(H100), "node-a"), to_nodetopology(hgx(H100), "node-b")]
    )


def run(
    argv: list[str],
    capsys: pytest.CaptureFixture[str],
    stdin: str | None = None,
    monkeypatch: pytest.MonkeyPatch | None = None,
) -> tuple[int, str, str]:
    if stdin is not None:
        assert monkeypatch is not None
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_expect_prints_the_band_the_limiting_link_and_the_assumptions(
    two_h100: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(["expect", "-f", two_h100], capsys)
    assert code == 0
    assert "all_reduce over 16 GPUs on 2 nodes" in out and "expected busbw at large sizes:" in out
    assert "NVLSTree" in out and "assumptions:" in out and "NCCL_ALGO not given" in out
    code, out, _ = run(
        ["expect", "-f", two_h100, "--gpus", "node-a=0-3", "--nccl-algo", "Ring", "-o", "json"], capsys
    )
    body = json.loads(out)
    assert code == 0 and body["kind"] == "BandwidthExpectation" and body["ranks"] == 4
    assert [b["algorithm"] for b in body["bounds"]] == ["Ring"] and body["busbw"]["lowGBps"] > 0
    assert body["limiting"][0]["kind"] == "NVSwitch" and body["limiting"][0]["capacityGBps"] == 450.0


def test_expect_from_stdin_and_from_a_bundle(
    two_h100: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, _ = run(
        ["expect", "-f", "-", "--collective", "all_gather"], capsys, Path(two_h100).read_text(), monkeypatch
    )
    assert code == 0 and out.startswith("all_gather over 16 GPUs")
    code, out, _ = run(["expect", "--from-bundle", str(BUNDLES / "dgx-h100")], capsys)
    assert code == 0 and "over 8 GPUs on 1 node" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--gpus", "node-z=0"], "node node-z: no NodeTopology"),
        (["--gpus", "node-a=zero"], "not an index"),
        (["--gpus", "node-a"], "expected NODE=LIST"),
        (["--gpus", "node-a=9"], "no GPU 9"),
        (["--nccl-algo", "CollNet"], "NCCL_ALGO=CollNet"),
    ],
)
def test_expect_refuses_what_it_cannot_use(
    two_h100: str, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, _, err = run(["expect", "-f", two_h100, *argv], capsys)
    assert code in (1, 2) and message in err


def test_expect_needs_a_node(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "e.yaml"
    empty.write_text("kind: List\nitems: []\n")
    code, _, err = run(["expect", "-f", str(empty)], capsys)
    assert code == 2 and "no NodeTopology object" in err
    code, _, err = run(["expect", "-f", str(tmp_path / "missing.json")], capsys)
    assert code == 2 and "missing.json" in err


@pytest.mark.corpus
def test_accept_a_corpus_log(two_h100: str, corpus: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = str(corpus / "perf" / "nebius-h100-2x8-ib-k8s-tail.txt")
    code, out, _ = run(["accept", log, "-f", two_h100], capsys)
    assert code == 0 and ": Passed: 467.28 GB/s busbw at 8 GiB" in out
    assert "all_reduce assumed" in out  # the tail does not name its benchmark
    code, out, _ = run(["accept", log, "-f", two_h100, "--min-busbw", "600", "-o", "json"], capsys)
    report = json.loads(out)
    assert code == 4 and report["kind"] == "AcceptanceReport" and report["verdict"] == "PlacedWrong"
    result = report["results"][0]
    assert result["measured"]["busbwGBps"] == 467.28 and result["measured"]["avgBusBandwidth"] == 450.404
    assert result["expectation"]["ranks"] == 16 and result["suspects"]
    code, out, _ = run(["accept", log, "-f", two_h100, "--gpus", "node-a=all"], capsys)
    assert code == 3 and "HarnessError" in out


@pytest.mark.corpus
def test_accept_the_two_rack_run_needing_one_rack(
    tmp_path: Path, corpus: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = _write(
        tmp_path / "racks.json", [to_nodetopology(gb300_tray(f"oci.{i // 16}"), f"h{i}") for i in range(32)]
    )
    log = str(corpus / "perf" / "oci-gb300-nvl72-32hosts-2racks-128gpu.txt")
    code, out, _ = run(["accept", log, "-f", nodes, "--min-busbw", "900"], capsys)
    assert code == 4 and "PlacedWrong" in out and "2 NVLink domains" in out and "suspect:" in out


def test_accept_several_results_exits_with_the_worst(
    two_h100: str, capsys: pytest.CaptureFixture[str]
) -> None:
    single = str(OWN / "allreduce-per-iteration-I1.txt")
    broken = str(OWN / "allreduce-no-mpi-under-mpirun.txt")
    degraded = str(OWN / "allreduce-one-gpu-degraded.txt")
    code, out, _ = run(["accept", single, "-f", two_h100, "--gpus", "node-a=all"], capsys)
    assert code == 0 and "Passed" in out
    code, out, _ = run(["accept", single, broken, "-f", two_h100, "--gpus", "node-a=all"], capsys)
    assert code == 3 and "separate runs" in out
    code, out, _ = run(["accept", single, broken, degraded, "-f", two_h100, "--gpus", "node-a=all"], capsys)
    assert code == 5 and "ResourceNotReal" in out


def test_accept_takes_the_placement_from_the_rank_list(
    two_h100: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The per-iteration run lists 8 ranks on host node-a: that is the placement, no --gpus needed."""
    code, out, _ = run(
        ["accept", str(OWN / "allreduce-per-iteration-I1.txt"), "-f", two_h100, "-o", "json"], capsys
    )
    report = json.loads(out)
    assert code == 0 and report["results"][0]["expectation"]["nodes"] == ["node-a"]


def test_accept_reads_stdin_json_and_nvbandwidth(
    two_h100: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    text = (OWN / "allreduce-ring-J.json").read_text()
    code, out, _ = run(["accept", "-", "-f", two_h100, "--gpus", "node-a=all"], capsys, text, monkeypatch)
    assert code == 0 and "Ring" in out
    code, out, _ = run(
        ["accept", str(OWN / "nvbandwidth-4xh100-one-slow-pair.txt"), "-f", two_h100, "--gpus", "node-a=0-3"],
        capsys,
    )
    assert code == 5 and "ResourceNotReal" in out and "GPU" in out
    code, out, _ = run(["accept", str(OWN / "nvbandwidth-4xh100.json"), "-f", two_h100], capsys)
    assert code == 3 and "one node" in out


def test_accept_an_unreadable_result_is_a_harness_error(
    tmp_path: Path, two_h100: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = tmp_path / "bad.log"
    bad.write_text(
        "#       size         count      type   redop    root     time   algbw   busbw #wrong\n  1024  256  "
        "float  sum  -1  5.1\n"
    )
    code, out, _ = run(["accept", str(bad), "-f", two_h100], capsys)
    assert code == 3 and "unreadable" in out and "bad.log:2" in out
    code, _, err = run(["accept", "-", "-f", "-"], capsys, "", monkeypatch)
    assert code == 2 and "stdin can be read once" in err
