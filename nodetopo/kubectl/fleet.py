"""The fleet view of ``kubectl ntopo nodes``: one row per NodeTopology object, and its filters. Pure."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from nodetopo.model import LinkClass
from nodetopo.resource.published import PublishedCondition, PublishedSummary
from nodetopo.resource.reader import read_nodetopology
from nodetopo.views.render import Col, natural_key, render_rows

UNKNOWN = "Unknown"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class FleetRow:
    node: str
    gpus: int | None  #: None: the object has no status yet
    model: str | None
    islands: str  #: ``1x8``, ``2x2``, ``""`` without NVLink
    island_sizes: tuple[int, ...]
    nic_distance: LinkClass | None  #: the worst, over GPUs, of each GPU's nearest NIC
    ready: str  #: True | False | Unknown
    ready_reason: str | None
    consistent: str  #: True | False | Unknown


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class FleetFilter:
    """Which rows to keep; every given criterion must hold. A node whose object does not say
    (no status, no NIC distance) does not match a criterion about it: unknown is not a yes."""

    island_size: int | None = None  #: has an NVLink island of at least this many GPUs
    nic_distance: LinkClass | None = None  #: every GPU has a NIC at this class or nearer
    inconsistent: bool = False  #: Consistent=False
    not_ready: bool = False  #: Ready is not True

    def matches(self, row: FleetRow) -> bool:
        if self.island_size is not None and not any(s >= self.island_size for s in row.island_sizes):
            return False
        if self.nic_distance is not None and (
            row.nic_distance is None or row.nic_distance > self.nic_distance
        ):
            return False
        if self.inconsistent and row.consistent != "False":
            return False
        return not (self.not_ready and row.ready == "True")


#: What a row reads of a NodeTopology (``nodetopo.resource.reader`` sections).
SECTIONS = frozenset({"summary", "nvlinkIslands", "conditions"})


def fleet_row(body: Mapping[str, Any]) -> FleetRow:
    """The row of one NodeTopology object (tolerant: an object without status is a row of unknowns)."""
    read = read_nodetopology(body, sections=SECTIONS)
    status = read.facts
    summary = status.summary or PublishedSummary()
    none = PublishedCondition(type="")
    ready, consistent = status.condition("Ready") or none, status.condition("Consistent") or none
    return FleetRow(
        node=read.name or "?",
        gpus=summary.gpu_count,
        model=summary.gpu_model or None,
        islands=summary.islands or "",
        island_sizes=tuple(len(i.gpus) for i in status.islands),
        nic_distance=summary.worst_nic_distance,
        ready=ready.status or UNKNOWN,
        ready_reason=ready.reason if ready.status != "True" else None,
        consistent=consistent.status or UNKNOWN,
    )


def fleet_rows(objects: Iterable[Mapping[str, Any]], keep: FleetFilter = FleetFilter()) -> list[FleetRow]:
    """The rows that ``keep`` matches, by node name (naturally: ``gpu-2`` before ``gpu-10``)."""
    rows = [fleet_row(o) for o in objects]
    return sorted((r for r in rows if keep.matches(r)), key=lambda r: natural_key(r.node))


COLUMNS: Sequence[Col | str] = (
    "NODE",
    "GPUS",
    Col("MODEL", shrink=10, drop=1),
    "ISLANDS",
    "NIC DISTANCE",
    Col("READY", shrink=5),
    "CONSISTENT",
)


def render_fleet(rows: Sequence[FleetRow], width: int | None = None) -> str:
    """The fleet table (the same layout as every table ``nodetopo discover`` prints)."""
    text = render_rows(
        COLUMNS,
        [
            [
                r.node,
                "-" if r.gpus is None else str(r.gpus),
                r.model or "-",
                r.islands or "-",
                r.nic_distance.name if r.nic_distance is not None else "-",
                r.ready if r.ready_reason is None else f"{r.ready} ({r.ready_reason})",
                r.consistent,
            ]
            for r in rows
        ],
        width,
    )
    return "\n".join(line.removeprefix("  ") for line in text.splitlines()) + "\n"
