"""What ``nodetopo accept`` judges, one benchmark result at a time: an nccl-tests output against
the band its placement should deliver, an nvbandwidth output against its node, and how a judgement
is written (JSON, text, the one line of an Event)."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from nodetopo.command.terminal import strip_control
from nodetopo.delivery.inputs import placements_for
from nodetopo.delivery.report import band_json, expectation_json, grouped_links, link_json
from nodetopo.expect import (
    COLLECTIVE_ALGORITHMS,
    Algorithm,
    Expectation,
    ExpectError,
    ObservedLink,
    algorithms_for,
    expect,
)
from nodetopo.model import Topology


def nccl_algorithms(
    args: argparse.Namespace, collective: str, from_output: str | None = None
) -> tuple[Algorithm, ...] | None:
    text = args.nccl_algo or from_output
    if not text:
        return None
    picked = algorithms_for(collective, text)
    if picked is None:
        raise ExpectError(
            f"NCCL_ALGO={text}: none of the model's algorithms for {collective} "
            f"({', '.join(map(str, COLLECTIVE_ALGORITHMS[collective]))})"
        )
    return picked


def inferred_gpus(
    ranks: Iterable[Any], topologies: Mapping[str, Topology]
) -> dict[str, tuple[int, ...]] | None:
    """The placement the rank list shows, when every rank's host names a known node: GPUs by PCI bus id
    where printed in full (domain:bus:device), else by device index."""
    from nodetopo.model import PciAddress

    held: dict[str, set[int]] = {}
    for r in ranks:
        topology = topologies.get(r.host)
        if topology is None:
            return None
        index = r.device
        if r.bus_id and r.bus_id.count(":") == 2:
            try:
                address = PciAddress.parse(r.bus_id + ".0")
            except ValueError:
                address = None
            match = [g.index for g in topology.gpus if g.address is not None and g.address == address]
            if match:
                index = match[0]
        held.setdefault(r.host, set()).add(index)
    return {node: tuple(sorted(v)) for node, v in held.items()} or None


def event_line(judgements: Sequence[Any], verdict: Any) -> str:
    """One line for the Event: the worst result's, with how many results there were."""
    j = next(x for x in judgements if x.verdict == verdict)
    line = f"{j.source}: {j.reason}"
    if j.suspects:
        line += "; suspect: " + "; ".join(grouped_links(j.suspects)[:3])
    if len(judgements) > 1:
        line = f"{len(judgements)} results, the worst: {line}"
    return line


def _harness_error(measured: Any, reason: str) -> tuple[Any, None]:
    """The ``HARNESS_ERROR`` judgement of ``measured`` (no expectation to judge it by), and no expectation."""
    from nodetopo.expect.verdict import Judgement, Verdict

    return Judgement(
        verdict=Verdict.HARNESS_ERROR, reason=reason, source=measured.source, measured=measured
    ), None


def judge_nccl(
    output: Any,
    args: argparse.Namespace,
    topologies: Mapping[str, Topology],
    fixed: Mapping[str, tuple[int, ...] | None] | None = None,
    need: float | None = None,
    need_from: str = "--min-busbw",
) -> tuple[Any, Expectation | None]:
    from nodetopo.expect.verdict import Measurement, judge, measure

    measured = measure(output, args.collective)
    if not isinstance(measured, Measurement):
        return measured, None
    collective = measured.collective
    notes: list[str] = []
    if collective is None:
        collective = "all_reduce"
        notes.append("the output does not name its benchmark: all_reduce assumed (give --collective)")
    if collective not in COLLECTIVE_ALGORITHMS:
        return _harness_error(measured, f"{collective}: the model has no expectation for it")
    inferred = (
        inferred_gpus(output.ranks, topologies)
        if fixed is None and not args.gpus and output.ranks and not output.ranks_elided
        else None
    )
    placements = placements_for(args, topologies, inferred, fixed)
    observed: tuple[ObservedLink, ...] = ()
    try:
        algos = nccl_algorithms(args, collective, measured.nccl_algo)
        expected = expect(
            placements,
            collective,
            algorithms=algos,
            observed=observed,
            oversubscription=args.oversubscription,
        )
    except ExpectError as e:
        return _harness_error(measured, f"no expectation: {e}")
    if need is not None and need_from != "--min-busbw":
        notes.append(f"the need, {need:g} GB/s: {need_from}")
    if notes:
        measured = dataclasses.replace(measured, notes=(*measured.notes, *notes))
    return judge(output, measured, expected, min_busbw=need), expected


def judge_nvbandwidth_output(
    output: Any,
    args: argparse.Namespace,
    topologies: Mapping[str, Topology],
    fixed: Mapping[str, tuple[int, ...] | None] | None = None,
) -> Any:
    from nodetopo.expect.nvbandwidth import judge_nvbandwidth

    placements = placements_for(args, topologies, None, fixed)
    if len(placements) != 1:
        from nodetopo.expect.verdict import Judgement, Verdict

        return Judgement(
            verdict=Verdict.HARNESS_ERROR,
            reason=f"nvbandwidth measures one node; {len(placements)} are given (name one with --gpus "
            "NODE=...)",
            source=output.source,
        )
    return judge_nvbandwidth(output, placements[0])


def judgement_json(j: Any, e: Expectation | None) -> dict[str, Any]:
    out: dict[str, Any] = {"source": j.source, "verdict": str(j.verdict), "reason": j.reason}
    if j.measured is not None:
        m = j.measured
        out["measured"] = {
            "collective": m.collective,
            "ranks": m.ranks,
            "sizeBytes": m.size,
            "busbwGBps": m.busbw,
            "algbwGBps": m.algbw,
            "peakBusbwGBps": m.peak_busbw,
            "avgBusBandwidth": m.avg_busbw,
            "ncclVersion": m.nccl_version,
            "ncclAlgo": m.nccl_algo,
            "hosts": list(m.hosts),
        }
    if j.expected is not None:
        out["expected"] = band_json(j.expected.low, j.expected.high, j.expected.expected)
    if e is not None:
        out["expectation"] = expectation_json(e)
    out["suspects"] = [link_json(x) for x in j.suspects]
    out["notes"] = list(j.notes)
    return out


def judgement_text(j: Any) -> str:
    lines = [f"{j.source}: {j.verdict}: {j.reason}"]
    if j.suspects:
        lines.append("  suspect:")
        lines += [f"    {x}" for x in grouped_links(j.suspects)]
    lines += [f"  note: {n}" for n in j.notes]
    return "".join(strip_control(line) + "\n" for line in lines)
