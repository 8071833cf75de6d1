"""infiniband-diags outputs nodetopo reads no more of: ``iblinkinfo`` lines joined per CA port, and
``ibswitches``. No production caller (the ``fabric.ib`` source asks each port's far-end switch and
``nodetopo fabric`` reads ``ibnetdiscover``); kept beside the tests that hold these parsers to the
corpus's captures."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from nodetopo.errors import ParseError
from nodetopo.fabric.ibdiags import NAME, IbNode, LinkInfoPort


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CaUplink:
    """A CA port's cable from ``iblinkinfo``: its switch by LID (and GUID/name when printed)."""

    guid: int
    lid: int
    port: int
    state: str | None
    switch_lid: int | None
    switch_port: int | None
    switch_description: str
    switch_guid: int | None = None


def join_linkinfo(ports: Sequence[LinkInfoPort]) -> tuple[CaUplink, ...]:
    """Each CA port's switch, joined by LID with the switch's own lines (for its GUID)."""
    switch_guid_by_lid = {p.lid: p.switch_guid for p in ports if p.guid is None and p.switch_guid is not None}
    return tuple(
        CaUplink(
            guid=p.guid,
            lid=p.lid,
            port=p.port,
            state=p.state,
            switch_lid=p.peer_lid,
            switch_port=p.peer_port,
            switch_description=p.peer_description,
            switch_guid=switch_guid_by_lid.get(p.peer_lid) if p.peer_lid is not None else None,
        )
        for p in ports
        if p.guid is not None
    )


# --------------------------------------------------------------------------------------------
# ibswitches
# --------------------------------------------------------------------------------------------

_IBSWITCHES = re.compile(
    r"Switch\s*:\s*0x(?P<guid>[0-9A-Fa-f]{1,16})\s+ports\s+(?P<ports>\d{1,4})\s+\"(?P<desc>.*)\"\s+"
    r"(?:enhanced|base)\s+port\s+0\s+lid\s+(?P<lid>\d{1,6})\s+lmc\s+\d+"
)


def parse_ibswitches(text: str, path: str = "ibswitches") -> tuple[IbNode, ...]:
    """Parse ``ibswitches``: one switch per line (GUID, port count, description, LID)."""
    switches: list[IbNode] = []
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.strip()
        if not line:
            continue
        match = _IBSWITCHES.fullmatch(line)
        if match is None:
            raise ParseError(
                NAME,
                path,
                f"expected 'Switch : 0x<guid> ports N \"desc\" ...', got {line[:80]!r}",
                line=number,
            )
        switches.append(
            IbNode(
                guid=int(match["guid"], 16),
                kind="switch",
                description=match["desc"],
                ports=int(match["ports"]),
                lid=int(match["lid"]),
            )
        )
    return tuple(switches)
