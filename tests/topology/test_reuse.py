"""Exact reuse of the last result (nodetopo.reuse): the parsers and ``derive_topology`` on an input
equal to the last scan's give back the very same object; any change, one byte deep inside the
input included, is read afresh and seen at the next scan."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest
from agent.support import FakeClock, FakePublisher, SwitchableScan, make_agent
from helpers import BUNDLES

from nodetopo.errors import ParseError
from nodetopo.host import Replay, ReplayRunner
from nodetopo.reuse import ScanCache, reuse_last
from nodetopo.sources import ibstat, nvidia_smi, nvml
from nodetopo.topology.discover import bundle_context, scan

DGX1 = BUNDLES / "dgx1-v100"
DGX_H100 = BUNDLES / "dgx-h100"


def copy(text: str) -> str:
    """An equal string that is another object: reuse must hold for equal input, not only the same one."""
    return "".join(list(text))


def changed_deep_inside(text: str, old: str, new: str) -> str:
    """``text`` with its LAST ``old`` replaced by ``new`` (a byte or so, well past the start)."""
    assert old != new
    at = text.rindex(old)
    assert at > len(text) // 3
    return text[:at] + new + text[at + len(old) :]


# ---- the helper -------------------------------------------------------------------------------------


def test_equal_input_gives_back_the_same_object_and_a_changed_byte_reads_afresh() -> None:
    calls: list[str] = []

    def parse(text: str) -> tuple[str, ...]:
        calls.append(text)
        return tuple(text.split())

    reused = reuse_last(parse)
    text = "alpha beta " * 1000 + "gamma"
    first = reused(text)
    assert reused(copy(text)) is first
    assert len(calls) == 1
    changed = changed_deep_inside(text, "beta", "bet4")
    second = reused(changed)
    assert second is not first and second == parse(changed) and second != first
    assert len(calls) == 3  # the changed text, plus the direct call just above


def test_only_the_last_pair_is_kept_and_an_exception_is_never_remembered() -> None:
    calls: list[str] = []

    def parse(text: str) -> int:
        calls.append(text)
        if text == "bad":
            raise ValueError(text)
        return len(text)

    reused = reuse_last(parse)
    assert reused("a") == 1 and reused("bb") == 2 and reused("a") == 1
    assert calls == ["a", "bb", "a"]
    for _ in range(2):
        with pytest.raises(ValueError):
            reused("bad")
    assert calls[-2:] == ["bad", "bad"]
    assert reused("a") == 1 and calls[-1] == "bad"  # a failure did not replace the last pair


def test_keyword_arguments_are_part_of_the_input() -> None:
    reused = reuse_last(lambda text, *, path: (text, path))
    first = reused("x", path="a")
    assert reused("x", path="a") is first
    assert reused("x", path="b") == ("x", "b")


# ---- the parsers, through their sources -------------------------------------------------------------


def bundle_answers(bundle: Path) -> dict[tuple[str, ...], Replay | str | Path]:
    runner = bundle_context(bundle).runner
    assert isinstance(runner, ReplayRunner)
    return dict(runner.answers)


def with_stdout(
    answers: dict[tuple[str, ...], Replay | str | Path], argv: tuple[str, ...], stdout: str
) -> ReplayRunner:
    return ReplayRunner({**answers, argv: Replay(stdout=stdout)})


def test_nvidia_smi_reuses_equal_outputs_and_reads_a_changed_cell() -> None:
    answers = bundle_answers(DGX1)
    topo = (DGX1 / "cmd" / "nvidia-smi-topo-m.txt").read_text()
    cache = ScanCache()
    first = nvidia_smi.read_facts(with_stdout(answers, nvidia_smi.TOPO_ARGV, topo), timeout=5, cache=cache)
    again = nvidia_smi.read_facts(
        with_stdout(answers, nvidia_smi.TOPO_ARGV, copy(topo)), timeout=5, cache=cache
    )
    assert first.topo_matrix is not None
    assert again.topo_matrix is first.topo_matrix
    assert again.listed_gpus is first.listed_gpus
    # -q -x is read afresh (a live driver's answer differs at every call): equal, not the same object
    assert again.queried_gpus == first.queried_gpus and again.queried_gpus is not first.queried_gpus
    assert again == first

    # GPU7's CPU affinity, one digit in the last GPU row
    changed = changed_deep_inside(topo, "20-39,60-79", "20-39,60-78")
    after = nvidia_smi.read_facts(with_stdout(answers, nvidia_smi.TOPO_ARGV, changed), timeout=5, cache=cache)
    assert after.topo_matrix is not None and after.topo_matrix != first.topo_matrix
    assert after.topo_matrix == nvidia_smi.parse_topo_matrix(changed)
    gpu7 = [g for g in after.topo_matrix.gpus if g.index == 7]
    assert gpu7 and gpu7[0].cpu_affinity == frozenset(range(20, 40)) | frozenset(range(60, 79))
    assert after.listed_gpus is first.listed_gpus  # the other commands printed the same


def test_nvidia_smi_logs_a_partly_readable_output_at_every_scan(caplog: pytest.LogCaptureFixture) -> None:
    answers = bundle_answers(DGX1)
    topo = (DGX1 / "cmd" / "nvidia-smi-topo-m.txt").read_text()
    damaged = changed_deep_inside(topo, "\tNV2\t X ", "\tERR!\t X ")
    caplog.set_level(logging.WARNING, logger="nodetopo.sources.nvidia_smi")
    cache = ScanCache()
    for _ in range(2):
        facts = nvidia_smi.read_facts(
            with_stdout(answers, nvidia_smi.TOPO_ARGV, copy(damaged)), timeout=5, cache=cache
        )
        assert any("ERR!" in c.message for c in facts.conditions)
    partly = [r for r in caplog.records if "partly readable" in r.getMessage()]
    assert len(partly) == 2


def test_ibstat_reuses_equal_output_and_reads_a_changed_rate() -> None:
    text = (DGX_H100 / "cmd" / "ibstat.txt").read_text()
    cache = ScanCache()
    first = ibstat.read_facts(ReplayRunner({ibstat.IBSTAT_ARGV: text}), timeout=5, cache=cache)
    again = ibstat.read_facts(ReplayRunner({ibstat.IBSTAT_ARGV: copy(text)}), timeout=5, cache=cache)
    assert first.ibstat and again.ibstat is first.ibstat
    changed = changed_deep_inside(text, "Rate: 400", "Rate: 200")
    after = ibstat.read_facts(ReplayRunner({ibstat.IBSTAT_ARGV: changed}), timeout=5, cache=cache)
    assert after.ibstat != first.ibstat
    assert [p.rate_gbps for ca in after.ibstat for p in ca.ports].count(200.0) == (
        [p.rate_gbps for ca in first.ibstat for p in ca.ports].count(200.0) + 1
    )


def test_nvml_replay_reuses_equal_bytes_and_reads_a_changed_byte(tmp_path: Path) -> None:
    bundle = tmp_path / "b"
    shutil.copytree(DGX_H100, bundle, symlinks=True)
    cache = ScanCache()
    first = nvml.collect(bundle_context(bundle, cache=cache)).facts
    again = nvml.collect(bundle_context(bundle, cache=cache)).facts
    assert first.nvml is not None and again.nvml is first.nvml and again is first

    dump = bundle / "nvml.json"
    dump.write_text(
        changed_deep_inside(dump.read_text(), '"memoryTotal": 85520809984', '"memoryTotal": 85520809985')
    )
    after = nvml.collect(bundle_context(bundle, cache=cache)).facts
    assert after.nvml is not None and after.nvml != first.nvml
    assert [g.memory_bytes for g in after.nvml.gpus][-1] == 85520809985
    assert [g.memory_bytes for g in after.nvml.gpus][:-1] == [g.memory_bytes for g in first.nvml.gpus][:-1]


def test_nvml_replay_never_remembers_a_dump_it_could_not_read(tmp_path: Path) -> None:
    bundle = tmp_path / "b"
    shutil.copytree(DGX_H100, bundle, symlinks=True)
    cache = ScanCache()
    good = nvml.collect(bundle_context(bundle, cache=cache)).facts
    (bundle / "nvml.json").write_text("{ not json")
    broken = nvml.collect(bundle_context(bundle, cache=cache)).facts
    assert broken.nvml is None and any("not JSON" in c.message for c in broken.conditions)
    shutil.copy(DGX_H100 / "nvml.json", bundle / "nvml.json")
    assert nvml.collect(bundle_context(bundle, cache=cache)).facts == good


def test_a_parse_error_is_read_again_every_time() -> None:
    broken = "GPU0\tGPU0\n"
    cache = ScanCache()
    for _ in range(2):
        with pytest.raises(ParseError):
            nvidia_smi.parse_topo_matrix(broken)
        facts = nvidia_smi.read_facts(ReplayRunner({nvidia_smi.TOPO_ARGV: broken}), timeout=5, cache=cache)
        assert facts.topo_matrix is None and facts.conditions


# ---- derive_topology, through scan ------------------------------------------------------------------


def test_scan_reuses_the_topology_only_for_equal_facts(tmp_path: Path) -> None:
    bundle = tmp_path / "b"
    shutil.copytree(DGX_H100, bundle, symlinks=True)
    cache = ScanCache()  # one scanner's, as an agent keeps one across its scans
    first = scan(bundle_context(bundle, cache=cache))
    again = scan(bundle_context(bundle, cache=cache))
    # the sysfs sources read afresh build equal, not identical, facts: equality is the key
    assert again.facts == first.facts and again.topology is first.topology

    dump = bundle / "nvml.json"
    text = dump.read_text()
    dump.write_text(changed_deep_inside(text, '"memoryTotal": 85520809984', '"memoryTotal": 85520809985'))
    changed = scan(bundle_context(bundle, cache=cache))
    assert changed.facts != first.facts
    assert changed.topology is not first.topology and changed.topology != first.topology
    assert changed.topology.gpus[-1].memory_bytes == 85520809985

    dump.write_text(text)
    back = scan(bundle_context(bundle, cache=cache))
    assert back.topology == first.topology and back.topology is not changed.topology


def test_the_agent_publishes_a_change_at_the_next_scan(tmp_path: Path) -> None:
    bundle = tmp_path / "b"
    shutil.copytree(DGX_H100, bundle, symlinks=True)
    clock, publisher = FakeClock(), FakePublisher()
    agent, _ = make_agent(clock, publisher, SwitchableScan(bundle_context(bundle)))
    assert agent.run_cycle("start").written == ("nodetopology", "labels")
    assert agent.run_cycle("interval").written == ()

    dump = bundle / "nvml.json"
    dump.write_text(
        changed_deep_inside(dump.read_text(), '"memoryTotal": 85520809984', '"memoryTotal": 85520809985')
    )
    assert agent.run_cycle("interval").written == ("nodetopology",)
    gpus = publisher.calls[-1]["body"]["status"]["gpus"]
    assert gpus[-1]["memoryBytes"] == 85520809985
    assert agent.run_cycle("interval").written == ()


# ---- whose results: one scan context's, never the process's ------------------------------------


def test_a_cache_keeps_one_wrapper_per_function_and_one_state_per_kind() -> None:
    cache, other = ScanCache(), ScanCache()
    assert cache.last(len) is cache.last(len) and cache.last(len) is not other.last(len)
    assert cache.last(len)("abc") == 3
    assert cache.state(dict) is cache.state(dict) and cache.state(dict) is not other.state(dict)


def test_two_scan_contexts_share_nothing() -> None:
    """Two agents (or two bundles read in one process) each keep their own last results."""
    first = scan(bundle_context(DGX_H100))
    other = scan(bundle_context(DGX_H100))
    assert other.topology == first.topology and other.topology is not first.topology
    assert other.facts.nvml == first.facts.nvml and other.facts.nvml is not first.facts.nvml
    assert other.facts.pci_devices[0] is not first.facts.pci_devices[0]
    # one context, as an agent holds one: its second scan reuses the first's results
    ctx = bundle_context(DGX_H100)
    once = scan(ctx)
    twice = scan(ctx)
    assert twice.topology is once.topology and twice.facts.pci_devices[0] is once.facts.pci_devices[0]
