"""``kubectl ntopo band``: the all-reduce bus-bandwidth band a node's NodeTopology promises inside the
node, from the bandwidth model (``nodetopo.expect``). Pure: the object in, rows out.

One row for every GPU of the node, and one per NVLink island when the node has several (a pod held
inside one island gets that island's band, not the node's); ``--gpus`` names a set instead.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from nodetopo.expect import Expectation, ExpectError, Placement, expect
from nodetopo.model import Topology, format_cpulist
from nodetopo.views.render import Col, render_rows

COLLECTIVE = "all_reduce"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class BandRow:
    scope: str  #: ``node``, ``island 0``, ``asked``
    gpus: tuple[int, ...]
    expectation: Expectation | None
    why: str = ""  #: why there is no band (fewer than two GPUs, a GPU the object does not list)


def band_rows(node: str, topology: Topology, gpus: Sequence[int] | None = None) -> list[BandRow]:
    """The rows for ``gpus`` (indices), or for the whole node and each of its NVLink islands."""
    everything = tuple(g.index for g in topology.gpus)
    if gpus is not None:
        sets = [("asked", tuple(sorted(set(gpus))))]
    else:
        sets = [("node", everything)]
        islands = [i for i in topology.nvlink_islands if len(i.gpus) >= 2]
        if len(islands) > 1 or (islands and len(islands[0].gpus) < len(everything)):
            sets += [(f"island {i.id}", tuple(sorted(i.gpus))) for i in islands]
    rows = []
    for scope, held in sets:
        try:
            e = expect([Placement(node=node, topology=topology, gpus=held)], COLLECTIVE)
            rows.append(BandRow(scope=scope, gpus=held, expectation=e))
        except ExpectError as err:
            rows.append(BandRow(scope=scope, gpus=held, expectation=None, why=str(err)))
    return rows


COLUMNS: Sequence[Col | str] = (
    "SCOPE",
    "GPUS",
    "BUSBW GB/S",
    "LIKELY",
    "ALGORITHM",
    Col("LIMITED BY", shrink=12),
)


def _limit(e: Expectation) -> str:
    if not e.limiting:
        return e.limiting_class
    first = e.limiting[0]
    alike = sum(1 for x in e.limiting if (x.kind, x.capacity) == (first.kind, first.capacity))
    count = f"{alike} × " if alike > 1 else ""
    return f"{e.limiting_class}: {count}{first.kind} {first.capacity:g} GB/s ({first.basis})"


def render_bands(origin: str, rows: Sequence[BandRow], width: int | None = None) -> str:
    """The rows as a table under ``origin``, then the assumptions of the first row that has a band."""
    table = render_rows(
        COLUMNS,
        [
            [
                r.scope,
                format_cpulist(frozenset(r.gpus)) or "-",
                f"{r.expectation.band.low:.0f}-{r.expectation.band.high:.0f}" if r.expectation else "-",
                f"{r.expectation.band.expected:.0f}" if r.expectation else "-",
                str(r.expectation.algorithm) if r.expectation else "-",
                _limit(r.expectation) if r.expectation else f"no band: {r.why}",
            ]
            for r in rows
        ],
        width,
    )
    lines = [
        origin,
        f"{COLLECTIVE} bus bandwidth at large sizes (1 GiB and up) the topology promises inside the node",
        "",
        *(line.removeprefix("  ") for line in table.splitlines()),
    ]
    first = next((r.expectation for r in rows if r.expectation is not None), None)
    if first is not None:
        lines += ["", f"assumptions ({first.ranks} GPUs):", *(f"  - {a}" for a in first.assumptions)]
    return "\n".join(lines) + "\n"


def bands_json(node: str, rows: Sequence[BandRow]) -> dict[str, Any]:
    def one(r: BandRow) -> Mapping[str, Any]:
        e = r.expectation
        out: dict[str, Any] = {"scope": r.scope, "gpus": list(r.gpus)}
        if e is None:
            return {**out, "busbw": None, "why": r.why}
        return {
            **out,
            "busbw": {
                "lowGBps": round(e.band.low, 1),
                "highGBps": round(e.band.high, 1),
                "expectedGBps": round(e.band.expected, 1),
            },
            "algorithm": str(e.algorithm),
            "limitingClass": e.limiting_class,
            "limiting": [x.label for x in e.limiting],
            "assumptions": list(e.assumptions),
        }

    return {"node": node, "collective": COLLECTIVE, "bands": [one(r) for r in rows]}
