"""The collective smoke test's judgement: what ``all_reduce_perf`` measured over the container's GPUs
against the band the bandwidth model (``nodetopo.expect``) gives for those GPUs on this node's
NodeTopology, in the words ``nodetopo accept`` uses: ``Passed``, ``ResourceNotReal`` (with the
suspect link), ``PlacedWrong`` (the placement caps below ``--min-busbw``) or ``HarnessError`` (what
the tool printed cannot be a bandwidth result). Pure: the output is read by ``nodetopo.perf``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from nodetopo.errors import ParseError

if TYPE_CHECKING:
    from nodetopo.expect.verdict import Measurement, Verdict
    from nodetopo.model import Topology
    from nodetopo.perf import NcclOutput

COLLECTIVE = "all_reduce"
#: at most this many suspect links are named in a reason (the verdict line is one line)
MAX_SUSPECTS = 3


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CollectiveRun:
    """What the collective printed: its parsed output, or why that is not nccl-tests output."""

    output: NcclOutput | None
    unreadable: str | None = None  #: the ``ParseError``, when ``output`` is None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """``verdict`` None: the run could not be judged (``reason`` says why; the check is skipped)."""

    verdict: Verdict | None
    reason: str


def parse_collective(text: str, source: str) -> CollectiveRun:
    """The run's output as facts; never raises (unreadable output is a harness fact of its own).
    The parsers (``nodetopo.perf``, two dozen regexes) are imported here, when a collective ran,
    not at the probe's start."""
    from nodetopo.perf import parse_nccl_tests

    try:
        return CollectiveRun(output=parse_nccl_tests(text, source))
    except ParseError as e:
        return CollectiveRun(output=None, unreadable=str(e))


def judge_collective(
    run: CollectiveRun,
    node: str,
    topology: Topology | None,
    topology_why: str,
    gpus: Sequence[int],
    *,
    min_busbw: float | None = None,
) -> Outcome:
    """The verdict on ``run`` over ``gpus`` (indices of the node's GPUs, as its NodeTopology lists
    them). A harness error is judged before anything is compared: it needs no topology.
    The model (networkx's flows) is imported here, when a run is judged, never at the probe's start."""
    from nodetopo.expect import ExpectError, Placement, algorithms_for, expect
    from nodetopo.expect.verdict import Measurement, Verdict, judge, measure

    if run.output is None:
        return Outcome(
            verdict=Verdict.HARNESS_ERROR, reason=f"not nccl-tests output: {run.unreadable or 'empty'}"
        )
    measured = measure(run.output, COLLECTIVE)
    if not isinstance(measured, Measurement):
        return Outcome(verdict=measured.verdict, reason=measured.reason)
    if topology is None:
        return Outcome(verdict=None, reason=f"{_figure(measured)}; no band to compare with: {topology_why}")
    algorithms = algorithms_for(COLLECTIVE, measured.nccl_algo) if measured.nccl_algo else None
    try:
        expected = expect(
            [Placement(node=node, topology=topology, gpus=tuple(sorted(gpus)))],
            COLLECTIVE,
            algorithms=algorithms,
        )
    except ExpectError as e:
        return Outcome(verdict=None, reason=f"{_figure(measured)}; no band for GPU(s) {_list(gpus)}: {e}")
    j = judge(run.output, measured, expected, min_busbw=min_busbw)
    reason = j.reason
    if j.verdict is Verdict.PASSED:
        reason = f"Passed: {reason}"
    if j.suspects and j.verdict is Verdict.RESOURCE_NOT_REAL:
        named = "; ".join(x.label for x in j.suspects[:MAX_SUSPECTS])
        more = f" (+{len(j.suspects) - MAX_SUSPECTS} more)" if len(j.suspects) > MAX_SUSPECTS else ""
        reason = f"{reason}; suspect: {named}{more}"
    return Outcome(verdict=j.verdict, reason=reason)


def _figure(m: Measurement) -> str:
    return f"{m.busbw:g} GB/s busbw at {m.size >> 20} MiB"


def _list(items: Sequence[int]) -> str:
    return ",".join(str(i) for i in sorted(items))
