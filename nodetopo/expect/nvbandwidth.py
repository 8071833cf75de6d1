"""The verdict on an nvbandwidth output: every copy against the band of its pair's path. Pure.

A device-to-device testcase gives one figure per GPU pair; each is judged against ``expect_copy``
for that pair (its NVLink, or its PCIe path). A host-device testcase is judged per GPU against its
host link (PCIe or NVLink-C2C). The figures of a testcase are copies run one at a time
(unidirectional) or against a copy the other way (bidirectional): both load one direction of a link.
Latency testcases (ns) are not judged.
"""

from __future__ import annotations

from nodetopo.expect.copies import expect_copy
from nodetopo.expect.links import ExpectError, Link
from nodetopo.expect.model import Placement
from nodetopo.expect.verdict import Judgement, Verdict
from nodetopo.model import PciAddress
from nodetopo.perf.nvbandwidth import NvbOutput, NvbTestcase


def _ordinals(output: NvbOutput, placement: Placement) -> tuple[dict[str, int], list[str]]:
    """nvbandwidth's device ordinals -> GPU indices: by PCI bus id where the node publishes addresses,
    else the placement's GPUs in order."""
    notes: list[str] = []
    gpus = (
        sorted(placement.gpus)
        if placement.gpus is not None
        else sorted(g.index for g in placement.topology.gpus)
    )
    by_address = {g.address: g.index for g in placement.topology.gpus if g.address is not None}
    mapping: dict[str, int] = {}
    for d in output.devices:
        try:
            address = PciAddress.parse(d.bus_id + ".0")
        except ValueError:
            address = None
        if address is not None and address in by_address:
            mapping[str(d.index)] = by_address[address]
    if len(mapping) != len(output.devices) or not output.devices:
        mapping = {str(k): index for k, index in enumerate(gpus)}
        notes.append("device ordinals taken as the placement's GPUs in index order (no bus id matched)")
    return mapping, notes


def judge_nvbandwidth(output: NvbOutput, placement: Placement) -> Judgement:
    src = output.source
    mapping, notes = _ordinals(output, placement)
    held = set(mapping.values())
    judged = 0
    low: list[tuple[float, str, tuple[Link, ...]]] = []
    problems: list[str] = []
    for t in output.testcases:
        if t.status != "Passed":
            problems.append(f"{t.name}: {t.status}{': ' + t.message if t.message else ''}")
            continue
        if t.matrix is None or (t.matrix.unit or "").lower() != "gb/s":
            continue
        judged += _judge_testcase(t, placement, mapping, held, low, notes)
    if problems and not judged:
        return Judgement(
            verdict=Verdict.HARNESS_ERROR, reason="; ".join(problems), source=src, notes=tuple(notes)
        )
    if problems:
        notes.extend(problems)
    if not judged:
        return Judgement(
            verdict=Verdict.HARNESS_ERROR,
            reason="no bandwidth testcase with a GPU matrix this placement can judge",
            source=src,
            notes=tuple(notes),
        )
    if low:
        low.sort(key=lambda x: x[0])
        worst_fraction, what, links = low[0]
        more = f" ({len(low)} copies below their band)" if len(low) > 1 else ""
        return Judgement(
            verdict=Verdict.RESOURCE_NOT_REAL,
            reason=f"{what}: {worst_fraction:.2f} of its band's low edge{more}",
            source=src,
            suspects=links,
            notes=tuple(notes + [w for _, w, _ in low[1:6]]),
        )
    return Judgement(
        verdict=Verdict.PASSED,
        reason=f"{judged} copies within the bands of their paths",
        source=src,
        notes=tuple(notes),
    )


def _judge_testcase(
    t: NvbTestcase,
    placement: Placement,
    mapping: dict[str, int],
    held: set[int],
    low: list[tuple[float, str, tuple[Link, ...]]],
    notes: list[str],
) -> int:
    m = t.matrix
    assert m is not None
    host_rows = "CPU(row)" in m.description
    host_columns = "CPU(column)" in m.description
    judged = 0
    for r, row in enumerate(m.rows):
        for k, column in enumerate(m.columns):
            value = m.values[r][k]
            if value is None:
                continue
            source = None if host_rows else mapping.get(row)
            target = None if host_columns else mapping.get(column)
            if (not host_rows and source is None) or (not host_columns and target is None):
                continue
            if source is not None and source == target:
                continue
            if (source is not None and source not in held) or (target is not None and target not in held):
                continue
            try:
                bound = expect_copy(placement, source, target)
            except ExpectError as e:
                notes.append(f"{t.name} [{row}][{column}]: {e}")
                continue
            judged += 1
            if value < bound.band.low:
                ends = f"GPU{source}" if source is not None else "CPU"
                ends += f" -> GPU{target}" if target is not None else " -> CPU"
                what = f"{t.name} {ends}: {value:g} GB/s, band {bound.band.low:.0f}-{bound.band.high:.0f}"
                low.append((value / bound.band.low, what, bound.limiting))
    return judged
