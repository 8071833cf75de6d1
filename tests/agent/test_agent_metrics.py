"""What an operator reads from a running agent: Ready/Consistent gauges, errors that are errors,
no writes counted under --dry-run, and JSON logs a pipeline can filter (issue 16, "Metrics")."""

from __future__ import annotations

import io
import json
import logging
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from nodetopo.agent.loop import Agent
from nodetopo.agent.metrics import AgentStats, make_registry
from nodetopo.agent.publisher import DryRunPublisher
from nodetopo.command.logs import configure_logging
from nodetopo.topology.discover import bundle_context, scan

from .support import BUNDLES, config

RFC3339_MS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def _samples(stats: AgentStats) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(make_registry(stats, process=False)).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _scan_into(stats: AgentStats, bundle: Path, times: int = 1) -> None:
    for _ in range(times):
        result = scan(bundle_context(bundle))
        stats.record_scan("interval", result.results, result.topology, ())


def _garbled(tmp_path: Path) -> Path:
    bundle = tmp_path / "garbled"
    shutil.copytree(BUNDLES / "pcie-4x-nvbridge", bundle, symlinks=True)
    (bundle / "cmd" / "nvidia-smi-topo-m.txt").write_text("\tGPU0\tGPU1\nGPU0\t X \tWAT\nGPU1\tWAT\t X \n")
    return bundle


def test_ready_and_consistent_gauges(tmp_path: Path) -> None:
    stats = AgentStats("n")
    assert ("nodetopo_ready", ()) not in _samples(stats)  # nothing known before the first scan
    _scan_into(stats, BUNDLES / "dgx-h100")
    samples = _samples(stats)
    assert samples[("nodetopo_ready", ())] == 1.0
    assert samples[("nodetopo_consistent", ())] == 1.0
    _scan_into(stats, _garbled(tmp_path))
    assert _samples(stats)[("nodetopo_ready", ())] == 0.0
    # a bundle whose topo -m disagrees with the sysfs tree about a GPU->NIC class
    bundle = tmp_path / "disagree"
    shutil.copytree(BUNDLES / "pcie-4x-nvbridge", bundle, symlinks=True)
    topo = bundle / "cmd" / "nvidia-smi-topo-m.txt"
    lines = topo.read_text().splitlines()
    lines[1] = lines[1].replace("PIX", "SYS", 1)  # GPU0 -> NIC0: PIX in sysfs, SYS here
    lines[5] = lines[5].replace("PIX", "SYS", 1)  # and its mirror cell, NIC0 -> GPU0
    topo.write_text("\n".join(lines) + "\n")
    _scan_into(stats, bundle)
    samples = _samples(stats)
    assert samples[("nodetopo_consistent", ())] == 0.0 and samples[("nodetopo_ready", ())] == 0.0


def test_an_expected_absence_is_not_an_error_each_cycle(tmp_path: Path) -> None:
    """cpu-only has no nvidia-smi, a dgx-h100 capture without `nvlink -s` output: Unavailable, the
    normal state of such nodes; counted as state (a gauge), not as errors piling up every scan."""
    stats = AgentStats("n")
    _scan_into(stats, BUNDLES / "cpu-only", times=3)
    no_status = tmp_path / "no-nvlink-s"
    shutil.copytree(BUNDLES / "dgx-h100", no_status, symlinks=True)
    (no_status / "cmd" / "nvidia-smi-nvlink-s.txt").unlink()
    _scan_into(stats, no_status, times=3)
    samples = _samples(stats)
    errors = {k: v for k, v in samples.items() if k[0] == "nodetopo_source_errors_total"}
    assert errors == {}
    assert samples[("nodetopo_source_unavailable", (("source", "nvidia-smi"),))] == 1.0  # nvlink -s
    assert samples[("nodetopo_source_unavailable", (("source", "sysfs.pci"),))] == 0.0
    # a real failure is counted, once per scan that sees it
    _scan_into(stats, _garbled(tmp_path), times=2)
    errors = {k: v for k, v in _samples(stats).items() if k[0] == "nodetopo_source_errors_total"}
    assert errors == {
        ("nodetopo_source_errors_total", (("reason", "ParseError"), ("source", "nvidia-smi"))): 2.0
    }


def test_dry_run_counts_no_writes(tmp_path: Path) -> None:
    out = io.StringIO()
    bundles = iter([BUNDLES / "dgx-h100", BUNDLES / "dgx-h100", BUNDLES / "dgx-a100"])
    agent = Agent(
        config(dry_run=True),
        scan=lambda: scan(bundle_context(next(bundles))),
        publisher=DryRunPublisher("node-a", out),
    )
    outcomes = [agent.run_cycle("interval") for _ in range(3)]
    assert all(o.published for o in outcomes)
    assert out.getvalue().count("kind: NodeTopology") == 2  # it printed what it would write...
    samples = _samples(agent.stats)
    writes = {k: v for k, v in samples.items() if k[0] == "nodetopo_publish_writes_total"}
    assert set(writes.values()) == {0.0}  # ...and counted no write
    assert ("nodetopo_last_successful_publish_timestamp_seconds", ()) not in samples
    assert samples[("nodetopo_gpus", ())] == 8.0  # the scan itself is still measured


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    configure_logging("info", "json")
    root = logging.getLogger()
    handler = root.handlers[0]
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(stream)
    yield stream
    configure_logging("warning", "text")


def test_json_logs_have_rfc3339_ms_timestamps_and_the_facts_as_fields(
    tmp_path: Path, json_log: io.StringIO
) -> None:
    bundle = _garbled(tmp_path)
    agent = Agent(
        config(dry_run=True),
        scan=lambda: scan(bundle_context(bundle)),
        publisher=DryRunPublisher("node-a", io.StringIO()),
    )
    agent.run_cycle("start")
    lines = [json.loads(line) for line in json_log.getvalue().splitlines()]
    assert lines and all(RFC3339_MS.fullmatch(line["ts"]) for line in lines)
    summary = next(line for line in lines if line["logger"] == "nodetopo.agent.loop")
    assert summary["level"] == "info"
    assert {k: summary[k] for k in ("node", "trigger", "gpus", "nvlink_islands", "rdma_nics", "ready")} == {
        "node": "node-a",
        "trigger": "start",
        "gpus": 4,
        "nvlink_islands": 2,
        "rdma_nics": 2,
        "ready": False,
    }
    assert summary["reason"] == "ParseError" and isinstance(summary["duration_s"], float)
    # a source failure is a WARNING naming its source; an expected absence stays below it
    failure = [line for line in lines if line["level"] == "warning" and line.get("source") == "nvidia-smi"]
    assert failure and "WAT" in failure[0]["msg"]
    absent = [line for line in lines if "Unavailable" in line["msg"]]
    assert absent and all(line["level"] == "info" for line in absent)


def test_json_fields_never_clobber_the_line_and_odd_values_still_serialise(json_log: io.StringIO) -> None:
    log = logging.getLogger("nodetopo.test")
    log.warning("hello %s", "x", extra={"source": "s", "path": Path("/p"), "msg_id": object.__name__})
    log.info("x", extra={"level_name": "kept"})
    first, second = (json.loads(line) for line in json_log.getvalue().splitlines())
    assert first["msg"] == "hello x" and first["level"] == "warning"
    assert first["source"] == "s" and first["path"] == "/p"
    assert second["level_name"] == "kept"
