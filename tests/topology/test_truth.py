"""Never a confident wrong answer (issue 16): what discovery says about itself must be true."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import BUNDLES as BUNDLES_DIR
from helpers import bundle_dirs

from nodetopo.cli import main
from nodetopo.resource.body import to_nodetopology
from nodetopo.topology.discover import bundle_context, scan

BUNDLES = bundle_dirs()


def _wrong_root(tmp_path: Path, kind: str) -> Path:
    root = tmp_path / "host"
    if kind == "empty":
        root.mkdir()
    return root


@pytest.mark.parametrize("kind", ["nonexistent", "empty"])
def test_missing_sys_is_not_ready_and_strict_fails(
    tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _wrong_root(tmp_path, kind)
    args = ["discover", "--host-root", str(root), "--nvml", "off", "--node-name", "n"]
    assert main([*args, "--strict", "-o", "json"]) == 3
    body = json.loads(capsys.readouterr().out)
    ready = next(c for c in body["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "Missing")
    assert f"{root}/sys" in ready["message"]
    assert body["status"]["summary"]["numaNodes"] is None  # unknown, not 0
    assert main([*args, "--strict"]) == 3
    table = capsys.readouterr().out
    assert "sysfs.pci: Missing" in table and "NUMA nodes: unknown" in table


def test_non_essential_absences_leave_ready_true(capsys: pytest.CaptureFixture[str]) -> None:
    """A CPU node's bundle without nvidia-smi, NVML: those are absent, not failed."""
    bundle = BUNDLES_DIR / "cpu-only"
    assert main(["discover", "--from", str(bundle), "--strict", "-o", "json"]) == 0
    body = json.loads(capsys.readouterr().out)
    ready = next(c for c in body["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"


def test_strict_help_says_what_it_checks() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "nodetopo", "discover", "--help"], capture_output=True, text=True, check=True
    ).stdout
    strict = " ".join(out.split("--strict", 1)[1].split())
    for word in ("essential", "sysfs PCI", "NUMA", "Missing", "ParseError", "Inconsistent", "ibstat"):
        assert word in strict, word


@pytest.mark.parametrize("bundle", BUNDLES, ids=[b.name for b in BUNDLES])
def test_no_source_is_both_ok_and_a_condition(bundle: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["discover", "--from", str(bundle)]) == 0
    table = capsys.readouterr().out
    ok_line = next((line for line in table.splitlines() if line.startswith("Sources ok: ")), "")
    ok = set(ok_line.removeprefix("Sources ok: ").split(", ")) - {""}
    flagged = {m.group(1) for m in re.finditer(r"^  (\S+(?: \S+)*?): [A-Z][A-Za-z]+: ", table, re.M)}
    status = to_nodetopology(scan(bundle_context(bundle)).topology, "n")["status"]
    ok_status = {s["name"] for s in status["sources"] if s["ok"]}
    assert ok == ok_status
    for c in status["conditions"]:
        if c["type"].startswith("Source"):
            assert (c["status"] == "True") == (c["reason"] == "Discovered"), c
    assert not ok & flagged, f"listed as ok and under Conditions: {ok & flagged}"


def test_sysfs_rdma_unavailable_is_not_also_ok(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The reproduction: an empty root gave `sysfs.rdma: Unavailable` and `Sources ok: ..., sysfs.rdma`."""
    assert main(["discover", "--host-root", str(_wrong_root(tmp_path, "empty")), "--nvml", "off"]) == 0
    table = capsys.readouterr().out
    assert "sysfs.rdma: Unavailable" in table
    ok_line = next((line for line in table.splitlines() if line.startswith("Sources ok: ")), "")
    assert "sysfs.rdma" not in ok_line


def test_bundle_without_a_command_says_not_in_the_bundle(tmp_path: Path) -> None:
    bundle = tmp_path / "b"
    (bundle / "cmd").mkdir(parents=True)
    (bundle / "cmd" / "nvidia-smi-topo-m.txt").write_text("\tGPU0\tGPU1\nGPU0\t X \tNV4\nGPU1\tNV4\t X \n")
    status = to_nodetopology(scan(bundle_context(bundle)).topology, "n")["status"]
    messages = [s["message"] for s in status["sources"] if not s["ok"]]
    assert not [m for m in messages if "PATH" in m or "not installed" in m], messages
    by_name = {s["name"]: s["message"] for s in status["sources"]}
    assert "not in the bundle (no cmd/nvidia-smi-L.txt)" in by_name["nvidia-smi -L"]
    assert "ibstat is not in the bundle" in by_name["ibstat"]


def test_topo_m_only_bundle_does_not_claim_zero_numa_nodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = tmp_path / "b"
    (bundle / "cmd").mkdir(parents=True)
    (bundle / "cmd" / "nvidia-smi-topo-m.txt").write_text(
        "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tNV4\t0-15\t0\nGPU1\tNV4\t X \t16-31\t1\n"
    )
    assert main(["discover", "--from", str(bundle), "-o", "yaml"]) == 0
    body = yaml.safe_load(capsys.readouterr().out)
    assert [g["numaNode"] for g in body["status"]["gpus"]] == [0, 1]
    assert body["status"]["summary"]["numaNodes"] is None
    assert main(["discover", "--from", str(bundle)]) == 0
    table = capsys.readouterr().out
    assert "NUMA nodes: 0" not in table and "NUMA nodes: unknown" in table


@pytest.mark.parametrize("kind", ["nonexistent", "empty"])
def test_agent_once_dry_run_writes_no_zero_labels(
    tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _wrong_root(tmp_path, kind)
    main(["agent", "--once", "--dry-run", "--host-root", str(root), "--node-name", "n", "--nvml", "off"])
    out = capsys.readouterr().out
    docs = [d for d in yaml.safe_load_all(out) if d]
    node = [d for d in docs if d.get("kind") == "Node"]
    labels = node[0]["metadata"].get("labels", {}) if node else {}
    assert "nodetopo.io/gpu.count" not in labels and "nodetopo.io/rdma" not in labels, labels
    topology = next(d for d in docs if d.get("kind") == "NodeTopology")
    ready = next(c for c in topology["status"]["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "Missing"


def test_a_host_root_is_not_called_a_bundle(tmp_path: Path) -> None:
    """`--host-root DIR` said "no nvml.json in the bundle"; only a bundle may say that."""
    from nodetopo.topology.discover import host_context

    status = to_nodetopology(scan(host_context(tmp_path, nvml="auto")).topology, "n")["status"]
    nvml = next(s for s in status["sources"] if s["name"] == "nvml")
    assert "bundle" not in nvml["message"] and "--host-root" in nvml["message"]
