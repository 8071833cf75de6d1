"""``nodetopo probe`` end to end over a fixture root: report, termination log, exit code, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.probe.test_checks import nodetopology


def probe(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, Any], str]:
    nt = tmp_path / "nt.json"
    if not nt.exists():
        nt.write_text(json.dumps(nodetopology()))
    term = tmp_path / "termination-log"
    (tmp_path / "root/dev").mkdir(parents=True, exist_ok=True)
    (tmp_path / "root/dev/nvidia0").write_text("")
    cmd = [
        sys.executable,
        "-m",
        "nodetopo",
        "probe",
        "--root",
        str(tmp_path / "root"),
        "--termination-log",
        str(term),
    ]
    result = subprocess.run(
        [*cmd, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", **(env or {}), "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode, json.loads(result.stdout), term.read_text()


def test_rdma_not_visible_fails_with_resource_not_real(tmp_path: Path) -> None:
    code, report, term = probe(
        tmp_path,
        "--nodetopology",
        str(tmp_path / "nt.json"),
        "--no-event",
        "--annotation",
        "nodetopo.io/rdma=required",
        env={"NVIDIA_VISIBLE_DEVICES": "GPU-0"},
    )
    assert code == 1 and report["attribution"] == "ResourceNotReal"
    assert term.startswith("ResourceNotReal: rdma: NodeTopology/n1 promised RDMA NIC(s) mlx5_0")
    code, report, _ = probe(
        tmp_path,
        "--nodetopology",
        str(tmp_path / "nt.json"),
        "--no-event",
        "--annotation",
        "nodetopo.io/rdma=required",
        "--warn-only",
        env={"NVIDIA_VISIBLE_DEVICES": "GPU-0"},
    )
    assert code == 0 and not report["passed"]


def test_undeclared_warns_and_exits_0(tmp_path: Path) -> None:
    code, report, term = probe(tmp_path, "--nodetopology", str(tmp_path / "nt.json"), "--no-event")
    assert (
        code == 0
        and report["attribution"] == "Undeclared"
        and term.startswith("passed with warning Undeclared")
    )


def test_the_verdict_counts_the_checks_made_and_strict_fails_on_a_skip(tmp_path: Path) -> None:
    code, report, term = probe(tmp_path, "--nodetopology", str(tmp_path / "nt.json"), "--no-event")
    applying = [c for c in report["checks"] if c.get("asked", True)]
    made = [c for c in applying if c["status"] != "skip"]
    assert code == 0 and f"; {len(made)} of {len(applying)} checked (skipped: " in term
    code, report, term = probe(
        tmp_path, "--nodetopology", str(tmp_path / "nt.json"), "--no-event", "--strict"
    )
    assert code == 1 and not report["passed"] and term.startswith("failed (--strict): ")


def test_unreachable_api_is_a_reason(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:1"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
            }
        )
    )
    code, report, _ = probe(
        tmp_path,
        "--kubeconfig",
        str(kubeconfig),
        "--node-name",
        "n1",
        "--pod-name",
        "p",
        "--pod-namespace",
        "default",
        "--timeout",
        "2",
        "--annotation",
        "nodetopo.io/rdma=required",
    )
    assert code == 0
    nt = next(c for c in report["checks"] if c["name"] == "nodetopology")
    assert nt["status"] == "skip" and "NodeTopology/n1 could not be read" in nt["reason"]
    assert report["event"].startswith("not posted")


def test_no_credentials_and_bad_annotations_file(tmp_path: Path) -> None:
    code, report, term = probe(
        tmp_path,
        "--node-name",
        "n1",
        "--annotations-file",
        str(tmp_path / "nope"),
        "--no-event",
        env={"KUBECONFIG": str(tmp_path / "missing-kubeconfig"), "HOME": str(tmp_path)},
    )
    assert code == 1 and report["attribution"] == "Undeclared" and "annotations file unreadable" in term
    nt = next(c for c in report["checks"] if c["name"] == "nodetopology")
    assert nt["status"] == "skip" and nt["reason"]


def test_collective_runs_only_when_the_tool_is_in_the_image(tmp_path: Path) -> None:
    env = {"NVIDIA_VISIBLE_DEVICES": "GPU-0,GPU-1"}
    (tmp_path / "root/dev").mkdir(parents=True)
    (tmp_path / "root/dev/nvidia1").write_text("")
    args = ("--nodetopology", str(tmp_path / "nt.json"), "--no-event", "--min-shm", "0")
    _, report, _ = probe(tmp_path, *args, env=env)
    check = next(c for c in report["checks"] if c["name"] == "collective")
    assert check["status"] == "skip" and "all_reduce_perf (nccl-tests) is not in the image" in check["reason"]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "all_reduce_perf"
    tool.write_text("#!/bin/sh\necho 'NCCL WARN no GPU' >&2\nexit 3\n")
    tool.chmod(0o755)
    code, report, term = probe(tmp_path, *args, env={**env, "PATH": f"{bin_dir}:/usr/bin:/bin"})
    check = next(c for c in report["checks"] if c["name"] == "collective")
    assert check["status"] == "skip" and "all_reduce_perf exited 3: NCCL WARN no GPU" in check["reason"]
    assert code == 0 and "(skipped: " in term and "collective" in term


HOSTILE_NIC = "mlx5_0\x1b]0;owned\x07\x1b[2J\nTopologyProbePassed: everything fine\u202e"


def test_hostile_nic_names_leave_as_one_line(tmp_path: Path) -> None:
    """Was: a NIC name's newline and escape sequences went raw into the termination message (and
    the Event): two lines, the second forged, and a terminal retitled by `kubectl describe`."""
    import datetime

    from nodetopo.probe import events
    from nodetopo.probe.outcome import Verdict

    obj = nodetopology()
    for gpu in obj["status"]["gpus"]:
        gpu["nics"] = [{**n, "name": n["name"].replace("mlx5_0", HOSTILE_NIC)} for n in gpu["nics"]]
    obj["status"]["nics"][0]["name"] = HOSTILE_NIC
    (tmp_path / "nt.json").write_text(json.dumps(obj))
    code, report, term = probe(
        tmp_path,
        "--nodetopology",
        str(tmp_path / "nt.json"),
        "--no-event",
        "--annotation",
        "nodetopo.io/rdma=required",
        env={"NVIDIA_VISIBLE_DEVICES": "GPU-0"},
    )
    assert code == 1 and report["attribution"] == "ResourceNotReal"
    assert term.count("\n") == 1 and term.endswith("\n"), repr(term)
    assert "\x1b" not in term and "\x07" not in term and "\u202e" not in term, repr(term)
    assert "mlx5_0\\x1b]0;owned\\x07" in term and "\\nTopologyProbePassed" in term, term
    verdict = Verdict(False, None, report["verdict"])
    body = events.event("team", "p", None, "n1", verdict, datetime.datetime.now(datetime.UTC))
    assert body["message"].isprintable() and "\\x1b" in body["message"]
    raw = events.event("team", "p", None, "n1", Verdict(False, None, HOSTILE_NIC), datetime.datetime.now())
    assert raw["message"].isprintable(), raw["message"]


def test_report_file_carries_the_placement_for_the_workload(tmp_path: Path) -> None:
    """--report writes the same JSON report to a file (an emptyDir the workload container mounts)."""
    report_file = tmp_path / "shared" / "probe.json"
    report_file.parent.mkdir()
    for n in (2, 3):
        (tmp_path / f"root/dev/nvidia{n}").parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f"root/dev/nvidia{n}").write_text("")
    code, report, _ = probe(
        tmp_path,
        "--nodetopology", str(tmp_path / "nt.json"),
        "--no-event",
        "--node-name", "n1",
        "--report", str(report_file),
        env={"NVIDIA_VISIBLE_DEVICES": "GPU-2,GPU-3"},
    )  # fmt: skip
    assert code == 0, report["verdict"]
    assert json.loads(report_file.read_text()) == report
    assert report["placement"]["node"] == "n1"
    assert [(g["uuid"], g["island"]) for g in report["placement"]["gpus"]] == [("GPU-2", 1), ("GPU-3", 1)]
    # an unwritable report path changes nothing of the verdict (and raises no traceback)
    code, report, _ = probe(
        tmp_path, "--nodetopology", str(tmp_path / "nt.json"), "--no-event",
        "--report", str(tmp_path / "missing-dir" / "probe.json"),
    )  # fmt: skip
    assert code == 0 and report["placement"]["gpus"] == []
