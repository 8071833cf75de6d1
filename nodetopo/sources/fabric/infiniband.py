"""InfiniBand fabric: which switch each of this node's HCA ports is cabled to, and the tiers above.

Parsers (pure, text → frozen values) for the infiniband-diags outputs people and tools keep:

* ``ibnetdiscover`` (whole-fabric topology file) and ``ibnetdiscover -p`` (one line per port);
* ``iblinkinfo`` (full, partial ``-D`` scans, or lines cut out by ``grep``);
* ``ibswitches``.

Each parser yields an ``IbFabric``: nodes (switches, channel adapters) and link ends. A link is
printed from both of its ends in ``ibnetdiscover``; widths may differ between the two ends and are
kept per end. ``classify`` then assigns switch tiers: a *leaf* (tier 0) is a switch cabled to a
host channel adapter (SHARP aggregation nodes are not hosts), tier n+1 a switch cabled to tier n.
Loopback cables (a switch port cabled to another port of the same switch) are not tree edges.

How a node learns its own leaf without sweeping the fabric
-----------------------------------------------------------
A full ``ibnetdiscover`` walks every node of the subnet with SMPs; 4,000 agents doing that every
minute would load the subnet manager's fabric for nothing. The agent therefore never sweeps:

1. *Fabric map* (exact, all tiers): an operator runs ``nodetopo fabric`` once (a Job on one node,
   or on the UFM/SM host), which sweeps once and writes a map of every host port GUID → leaf →
   tier groups. Agents read it (a ConfigMap mounted at the path given by ``--fabric-map``) and join
   it with their own port GUIDs from sysfs.
2. *Neighbour query* (no map configured): for each ACTIVE InfiniBand port of its own, the agent runs
   ``iblinkinfo -C <hca> -P <port> -D 0,1 --switches-only``: a partial scan of the one switch at
   the other end of the cable (direct route ``0,1``), a few dozen SMPs. It gives the leaf (GUID,
   name, port) and the names of the switches one tier up, but not how those group across the
   fabric: in this mode only tier 0 is published.

Either way the host's own port GUIDs and LIDs come from sysfs (``class/infiniband``), the same
values ``ibstat`` prints.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import stat
from collections.abc import Iterable, Mapping, Sequence

from nodetopo.errors import ParseError
from nodetopo.host import CommandNotFound, CommandRunner, CommandTimeout, HostRoot
from nodetopo.model import (
    Condition,
    ConditionReason,
    FabricTier,
    Facts,
    NetworkObservation,
    SourceStatus,
    SwitchPort,
)
from nodetopo.sources import _sysfs
from nodetopo.sources.base import Context, SourceResult, failed, guarded
from nodetopo.sources.rdma import parse_lid, parse_port_guid, parse_port_state

NAME = "fabric.ib"

#: vendor words that end a default (unnamed) node description: ``SwitchIB Mellanox Technologies``,
#: ``MT4129 ConnectX7   Mellanox Technologies``, ``ISR9024 Voltaire``
_DEFAULT_DESC_VENDORS = ("Mellanox Technologies", "Voltaire", "NVIDIA Technologies", "Nvidia Technologies")
_AGGREGATION_NODE = "Aggregation Node"
_MF0 = re.compile(r"MF0;([^:]{1,128}):([^/]{0,64})(?:/.*)?")


def guid_text(guid: int) -> str:
    """``0x2c5eab0300c26040``: 16 hex digits, the form ibstat and sysfs print."""
    return f"0x{guid:016x}"


def parse_guid(text: str, source: str, path: str, line: int | None = None) -> int:
    """A GUID printed as ``0x...``, ``S-...``/``H-...`` or bare hex (leading zeros optional)."""
    raw = text.strip().strip('"')
    if raw[:2] in ("S-", "H-", "R-"):
        raw = raw[2:]
    if raw.lower().startswith("0x"):
        raw = raw[2:]
    if not raw or len(raw) > 16 or re.fullmatch(r"[0-9A-Fa-f]+", raw) is None:
        raise ParseError(source, path, f"{text!r} is not a GUID", line=line)
    return int(raw, 16)


def switch_name(description: str) -> str | None:
    """The switch's hostname from its node description, None for a vendor default.

    ``MF0;A09-P1-IBLEAF-04-04:MQM9701/U1`` → ``A09-P1-IBLEAF-04-04``; ``hdrleaf-xx6a-26`` → itself;
    ``SwitchX -  Mellanox Technologies`` / ``Quantum Mellanox Technologies`` → None.
    """
    desc = description.strip()
    match = _MF0.fullmatch(desc)
    if match is not None:
        return match[1].strip() or None
    if not desc or desc.endswith(_DEFAULT_DESC_VENDORS):
        return None
    return desc


def ca_host(description: str) -> tuple[str | None, str | None]:
    """``(hostname, hca)`` from a channel adapter's description ``"<host> <hca>"``.

    Vendor defaults (``MT4129 ConnectX7   Mellanox Technologies``) and SHARP aggregation nodes give
    ``(None, None)``: a default description names no host (never a host called ``MT4129``).
    """
    desc = description.strip()
    if not desc or desc.endswith(_DEFAULT_DESC_VENDORS) or _AGGREGATION_NODE in desc:
        return None, None
    host, _, hca = desc.partition(" ")
    return host, (hca.strip() or None)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class IbNode:
    """A switch or channel adapter (``kind``: ``switch``, ``ca``, ``router``)."""

    guid: int
    kind: str
    description: str = ""
    ports: int | None = None
    lid: int | None = None  #: the switch's LID (port 0); CAs have one LID per port (see IbLinkEnd)

    @property
    def aggregation_node(self) -> bool:
        return self.kind == "ca" and _AGGREGATION_NODE in self.description

    @property
    def name(self) -> str | None:
        return switch_name(self.description) if self.kind == "switch" else ca_host(self.description)[0]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class IbLinkEnd:
    """One end of a cable as printed from ``guid``'s side. ``peer_guid`` None: nothing connected."""

    guid: int
    port: int
    port_guid: int | None = None  #: this end's port GUID where printed (CA ports)
    lid: int | None = None  #: this end's LID (the CA port's, or the switch's)
    peer_guid: int | None = None
    peer_port: int | None = None
    peer_port_guid: int | None = None
    peer_lid: int | None = None
    peer_description: str | None = None
    width: str | None = None  #: ``4xNDR``, ``4X 25.78125 Gbps`` ... as printed at this end
    state: str | None = None  #: ``Active``, ``Down`` (iblinkinfo only)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class IbFabric:
    """What one infiniband-diags output showed. ``skipped``: lines that were not topology."""

    nodes: tuple[IbNode, ...] = ()
    links: tuple[IbLinkEnd, ...] = ()
    initiator: int | None = None
    skipped: tuple[tuple[int, str], ...] = ()

    def node(self, guid: int) -> IbNode | None:
        for n in self.nodes:
            if n.guid == guid:
                return n
        return None


# --------------------------------------------------------------------------------------------
# ibnetdiscover (topology file form)
# --------------------------------------------------------------------------------------------

_NODE_LINE = re.compile(
    r"(?P<kind>Switch|Ca|Rt)\s+(?P<ports>\d{1,4})\s+\"(?P<id>[SHR]-[0-9A-Fa-f]{1,16})\"\s*"
    r"(?:#\s*\"(?P<desc>.*?)\"(?P<rest>.*))?"
)
#: a switch's port: ``[1]  "H-e09d..."[1](e09d...)  # "desc" lid 647 4xNDR``
_SWITCH_PORT = re.compile(
    r"\[(?P<port>\d{1,4})\](?:\([0-9A-Fa-f]{1,16}\))?\s+\"(?P<peer>[SHR]-[0-9A-Fa-f]{1,16})\""
    r"\[(?P<peer_port>\d{1,4})\](?:\((?P<peer_port_guid>[0-9A-Fa-f]{1,16})\))?\s*"
    r"#\s*\"(?P<desc>.*?)\"\s+lid\s+(?P<lid>\d{1,6})\s+(?P<width>\S+)"
)
#: a CA's port: ``[1](e09d...)  "S-2c5e..."[17]  # lid 657 lmc 0 "desc" lid 73 4xNDR``
_CA_PORT = re.compile(
    r"\[(?P<port>\d{1,4})\]\((?P<port_guid>[0-9A-Fa-f]{1,16})\)\s+\"(?P<peer>[SHR]-[0-9A-Fa-f]{1,16})\""
    r"\[(?P<peer_port>\d{1,4})\](?:\((?P<peer_port_guid>[0-9A-Fa-f]{1,16})\))?\s*"
    r"#\s*lid\s+(?P<own_lid>\d{1,6})\s+lmc\s+\d+\s+\"(?P<desc>.*?)\"\s+lid\s+(?P<lid>\d{1,6})\s+(?P<width>\S+)"
)
_SWITCH_LID = re.compile(r"\s*(?:enhanced|base)\s+port\s+0\s+lid\s+(\d{1,6})")
_INITIATOR = re.compile(r"#\s*Initiated from node ([0-9A-Fa-f]{1,16})")
_HEADER_KEYS = ("vendid=", "devid=", "sysimgguid=", "switchguid=", "caguid=", "rtguid=")


def parse_ibnetdiscover(text: str, path: str = "ibnetdiscover") -> IbFabric:
    """Parse an ``ibnetdiscover`` topology file.

    Lines that are not topology (stderr mixed into a capture, ``Non-Chassis Nodes``, chassis
    headers) are skipped and listed in ``skipped``, never fatal; a topology line that is malformed
    raises ``ParseError``.
    """
    nodes: dict[int, IbNode] = {}
    links: list[IbLinkEnd] = []
    skipped: list[tuple[int, str]] = []
    initiator: int | None = None
    current: IbNode | None = None
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.strip()
        if not line:
            current = None
            continue
        if line.startswith("#"):
            found = _INITIATOR.match(line)
            if found is not None:
                initiator = int(found[1], 16)
            continue
        if line.startswith(_HEADER_KEYS):
            continue
        node = _NODE_LINE.fullmatch(line)
        if node is not None:
            kind = {"Switch": "switch", "Ca": "ca", "Rt": "router"}[node["kind"]]
            lid = None
            if node["rest"]:
                lid_match = _SWITCH_LID.match(node["rest"])
                lid = int(lid_match[1]) if lid_match else None
            current = IbNode(
                guid=parse_guid(node["id"], NAME, path, number),
                kind=kind,
                description=(node["desc"] or "").strip(),
                ports=int(node["ports"]),
                lid=lid,
            )
            nodes[current.guid] = current
            continue
        if line.startswith("["):
            if current is None:
                raise ParseError(NAME, path, "a port line outside a Switch/Ca block", line=number)
            port = (_SWITCH_PORT if current.kind == "switch" else _CA_PORT).match(line)
            if port is None:
                raise ParseError(NAME, path, f"unreadable port line {line[:80]!r}", line=number)
            peer = parse_guid(port["peer"], NAME, path, number)
            groups = port.groupdict()
            peer_port_guid = groups.get("peer_port_guid")
            own_port_guid = groups.get("port_guid")
            links.append(
                IbLinkEnd(
                    guid=current.guid,
                    port=int(port["port"]),
                    port_guid=int(own_port_guid, 16) if own_port_guid else None,
                    lid=int(groups["own_lid"]) if groups.get("own_lid") else current.lid,
                    peer_guid=peer,
                    peer_port=int(port["peer_port"]),
                    peer_port_guid=int(peer_port_guid, 16) if peer_port_guid else None,
                    peer_lid=int(port["lid"]),
                    peer_description=port["desc"].strip(),
                    width=port["width"],
                )
            )
            continue
        skipped.append((number, line[:120]))
    return IbFabric(
        nodes=tuple(sorted(nodes.values(), key=lambda n: n.guid)),
        links=tuple(links),
        initiator=initiator,
        skipped=tuple(skipped),
    )


# --------------------------------------------------------------------------------------------
# ibnetdiscover -p / --ports
# --------------------------------------------------------------------------------------------

_PORTS_LINE = re.compile(
    r"(?P<type>CA|SW|RT)\s+(?P<lid>\d{1,6})\s+(?P<port>\d{1,4})\s+0x(?P<guid>[0-9A-Fa-f]{1,16})\s+"
    r"(?P<width>\d{1,2}x)\s+(?P<speed>\S+)\s*"
    r"(?:-\s+(?P<ptype>CA|SW|RT)\s+(?P<plid>\d{1,6})\s+(?P<pport>\d{1,4})\s+0x(?P<pguid>[0-9A-Fa-f]{1,16})\s*"
    r"\(\s*'(?P<desc>.*)'\s+-\s+'(?P<pdesc>.*)'\s*\)"
    r"|'(?P<lone>.*)')"
)
_PORTS_KIND = {"CA": "ca", "SW": "switch", "RT": "router"}


def parse_ibnetdiscover_ports(text: str, path: str = "ibnetdiscover -p") -> IbFabric:
    """Parse ``ibnetdiscover -p``: ``CA/SW LID PORT GUID WIDTH SPEED - PEERTYPE LID PORT GUID ( ... )``.

    The GUIDs on these lines are port GUIDs (a switch's is its node GUID). Node descriptions are
    trimmed (they are padded in the wild). Unconnected ports (no ``- PEER`` part) are kept as link
    ends without a peer.
    """
    nodes: dict[int, IbNode] = {}
    links: list[IbLinkEnd] = []
    skipped: list[tuple[int, str]] = []
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _PORTS_LINE.fullmatch(line)
        if match is None:
            if line[:3] in ("CA ", "SW ", "RT "):
                raise ParseError(NAME, path, f"unreadable port line {line[:80]!r}", line=number)
            skipped.append((number, line[:120]))
            continue
        guid = int(match["guid"], 16)
        kind = _PORTS_KIND[match["type"]]
        lid = int(match["lid"])
        desc = (match["desc"] if match["desc"] is not None else match["lone"] or "").strip()
        nodes.setdefault(
            guid, IbNode(guid=guid, kind=kind, description=desc, lid=lid if kind != "ca" else None)
        )
        width = f"{match['width']} {match['speed']}"
        if match["pguid"] is None:
            links.append(IbLinkEnd(guid=guid, port=int(match["port"]), lid=lid, width=width))
            continue
        peer = int(match["pguid"], 16)
        peer_kind = _PORTS_KIND[match["ptype"]]
        peer_lid = int(match["plid"])
        nodes.setdefault(
            peer,
            IbNode(
                guid=peer,
                kind=peer_kind,
                description=match["pdesc"].strip(),
                lid=peer_lid if peer_kind != "ca" else None,
            ),
        )
        links.append(
            IbLinkEnd(
                guid=guid,
                port=int(match["port"]),
                port_guid=guid if kind == "ca" else None,
                lid=lid,
                peer_guid=peer,
                peer_port=int(match["pport"]),
                peer_port_guid=peer if peer_kind == "ca" else None,
                peer_lid=peer_lid,
                peer_description=match["pdesc"].strip(),
                width=width,
            )
        )
    return IbFabric(
        nodes=tuple(sorted(nodes.values(), key=lambda n: n.guid)), links=tuple(links), skipped=tuple(skipped)
    )


# --------------------------------------------------------------------------------------------
# iblinkinfo
# --------------------------------------------------------------------------------------------

_LINKINFO_CA = re.compile(r"CA:\s*(?P<desc>.*?):?")
_LINKINFO_SWITCH = re.compile(r"Switch:\s*0x(?P<guid>[0-9A-Fa-f]{1,16})\s+(?P<desc>.*?):?")
_LINKINFO_PORT = re.compile(
    r"(?:0x(?P<guid>[0-9A-Fa-f]{1,16})\s+)?(?P<lid>\d{1,6})\s+(?P<port>\d{1,4})\[[^\]]*\]\s*"
    r"==\(\s*(?P<link>.*?)\s*\)==>\s*(?:(?P<plid>\d{1,6})\s+(?P<pport>\d{1,4}))?\s*\[[^\]]*\]\s*"
    r"\"(?P<pdesc>.*)\"\s*\(.*\)"
)
_LINK_STATE = re.compile(r"(?:(?P<width>.*?)\s+)?(?P<state>[A-Za-z]+)/\s*(?P<phys>[A-Za-z]+)")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class LinkInfoPort:
    """One port line of ``iblinkinfo``; ``guid`` only on CA lines, ``switch_guid`` under a header."""

    lid: int
    port: int
    guid: int | None = None
    switch_guid: int | None = None
    header: str | None = None  #: the ``CA:``/``Switch:`` description this line sits under
    state: str | None = None
    phys_state: str | None = None
    width: str | None = None
    peer_lid: int | None = None
    peer_port: int | None = None
    peer_description: str = ""


def parse_iblinkinfo(text: str, path: str = "iblinkinfo") -> tuple[LinkInfoPort, ...]:
    """Parse ``iblinkinfo`` (full, partial ``-D``, or lines cut out by ``grep``).

    Without headers (a ``grep``), a line with a GUID is a CA port and one without is a switch
    port; the LIDs join them (``join_linkinfo``). A down port has no peer.
    """
    ports: list[LinkInfoPort] = []
    header: str | None = None
    switch: int | None = None
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.strip()
        if not line:
            continue
        sw = _LINKINFO_SWITCH.fullmatch(line)
        if sw is not None:
            switch, header = int(sw["guid"], 16), sw["desc"].strip()
            continue
        ca = _LINKINFO_CA.fullmatch(line)
        if ca is not None:
            switch, header = None, ca["desc"].strip()
            continue
        match = _LINKINFO_PORT.fullmatch(line)
        if match is None:
            raise ParseError(NAME, path, f"unreadable iblinkinfo line {line[:80]!r}", line=number)
        link = _LINK_STATE.fullmatch(match["link"])
        ports.append(
            LinkInfoPort(
                lid=int(match["lid"]),
                port=int(match["port"]),
                guid=int(match["guid"], 16) if match["guid"] else None,
                switch_guid=switch if not match["guid"] else None,
                header=header,
                state=link["state"] if link else None,
                phys_state=link["phys"] if link else None,
                width=" ".join(link["width"].split()) if link and link["width"] else None,
                peer_lid=int(match["plid"]) if match["plid"] else None,
                peer_port=int(match["pport"]) if match["pport"] else None,
                peer_description=match["pdesc"].strip(),
            )
        )
    return tuple(ports)


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


# --------------------------------------------------------------------------------------------
# The fabric as a tree: tiers, and a host's place in it
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Classified:
    """Switch tiers of a fabric: ``tier[guid]`` (0 = leaf); ``edges`` between switches (no loops)."""

    tier: Mapping[int, int]
    edges: frozenset[tuple[int, int]]  #: (lower guid, higher guid), switch–switch, loopbacks dropped
    hosts: Mapping[int, str | None]  #: host CA guid → hostname (None for a default description)


def classify(fabric: IbFabric) -> Classified:
    """Leaves are switches cabled to a host CA; tier n+1 switches are cabled to tier n."""
    kinds = {n.guid: n for n in fabric.nodes}
    hosts = {n.guid: n.name for n in fabric.nodes if n.kind == "ca" and not n.aggregation_node}
    edges: set[tuple[int, int]] = set()
    tier: dict[int, int] = {}
    for end in fabric.links:
        if end.peer_guid is None or end.peer_guid == end.guid:
            continue  # unconnected, or a loopback cable to the same switch
        a, b = kinds.get(end.guid), kinds.get(end.peer_guid)
        if a is None or b is None:
            continue
        if a.kind == "switch" and b.kind == "switch":
            edges.add((min(a.guid, b.guid), max(a.guid, b.guid)))
        elif a.kind == "switch" and b.guid in hosts:
            tier[a.guid] = 0
        elif b.kind == "switch" and a.guid in hosts:
            tier[b.guid] = 0
    level = 0
    frontier = {g for g, t in tier.items() if t == 0}
    while frontier:
        nxt: set[int] = set()
        for low, high in edges:
            for here, there in ((low, high), (high, low)):
                if here in frontier and there not in tier:
                    nxt.add(there)
        level += 1
        for g in nxt:
            tier[g] = level
        frontier = nxt
    return Classified(tier=tier, edges=frozenset(edges), hosts=hosts)


def host_ports(fabric: IbFabric, port_guids: Iterable[int]) -> dict[int, IbLinkEnd]:
    """For each of the host's port GUIDs found in the fabric: the link end seen from the host."""
    wanted = set(port_guids)
    found: dict[int, IbLinkEnd] = {}
    for end in fabric.links:
        if end.port_guid in wanted and end.peer_guid is not None:
            found[end.port_guid] = end
    for end in fabric.links:  # a switch block names the CA port GUID it is cabled to
        if end.peer_port_guid in wanted and end.peer_port_guid not in found and end.peer_guid is not None:
            found[end.peer_port_guid] = IbLinkEnd(
                guid=end.peer_guid,
                port=end.peer_port or 0,
                port_guid=end.peer_port_guid,
                lid=end.peer_lid,
                peer_guid=end.guid,
                peer_port=end.port,
                peer_lid=end.lid,
                width=end.width,
            )
    return found


def group_id(level: int, members: Iterable[int]) -> str:
    """The id of a tier group: ``S-<guid>`` for one switch, else a hash of the sorted GUIDs.

    Deterministic: the same switches always give the same id, on every node.
    """
    ordered = sorted(set(members))
    if len(ordered) == 1:
        return f"S-{ordered[0]:016x}"
    digest = hashlib.sha256(",".join(f"{g:016x}" for g in ordered).encode()).hexdigest()[:16]
    return f"t{level}-{digest}"


def tier_groups(classified: Classified) -> dict[int, dict[int, frozenset[int]]]:
    """``groups[level][switch guid]`` = the switches of that level in the same group.

    Level 0: each leaf is its own group. Level n ≥ 1: switches of tier n joined by sharing a
    switch of tier n−1 below them (the connected components of the tier n−1/n bipartite graph,
    followed from the leaves up), so that a fat tree's spines — every leaf cabled to every spine, or
    nearly — form one group, and a tree's parent switch is its own group.
    """
    by_level: dict[int, set[int]] = {}
    for guid, level in classified.tier.items():
        by_level.setdefault(level, set()).add(guid)
    groups: dict[int, dict[int, frozenset[int]]] = {0: {g: frozenset({g}) for g in by_level.get(0, ())}}
    for level in sorted(by_level):
        if level == 0:
            continue
        parent: dict[int, int] = {g: g for g in by_level[level]}

        def find(x: int, parent: dict[int, int] = parent) -> int:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        below: dict[int, list[int]] = {}
        for a, b in classified.edges:
            for low, high in ((a, b), (b, a)):
                if classified.tier.get(low) == level - 1 and classified.tier.get(high) == level:
                    below.setdefault(low, []).append(high)
        for highs in below.values():
            for other in highs[1:]:
                ra, rb = find(highs[0]), find(other)
                if ra != rb:
                    parent[max(ra, rb)] = min(ra, rb)
        members: dict[int, set[int]] = {}
        for g in by_level[level]:
            members.setdefault(find(g), set()).add(g)
        groups[level] = {g: frozenset(members[find(g)]) for g in by_level[level]}
    return groups


def uplinks_of(classified: Classified, leaf: int) -> tuple[int, ...]:
    """The switches one tier above ``leaf`` it is cabled to, sorted."""
    level = classified.tier.get(leaf)
    if level is None:
        return ()
    return tuple(
        sorted(
            {b if a == leaf else a for a, b in classified.edges if leaf in (a, b)}
            & {g for g, t in classified.tier.items() if t == level + 1}
        )
    )


# --------------------------------------------------------------------------------------------
# The fabric map: what `nodetopo fabric` writes once and every agent reads
# --------------------------------------------------------------------------------------------

MAP_KIND = "nodetopo.io/fabric-map"
#: a ConfigMap holds at most 1 MiB; a map read from a file may be larger (a mounted volume), not unbounded
MAP_LIMIT = 64 << 20
MAP_VERSION = 1


def fabric_map(fabric: IbFabric) -> dict[str, object]:
    """A JSON-able map: every host port GUID → its leaf (and port), and each leaf's tiers above.

    Size is linear in the number of host ports and switches, so a 4,000-node fabric fits in a
    ConfigMap (about 100 bytes per port).
    """
    classified = classify(fabric)
    groups = tier_groups(classified)
    nodes = {n.guid: n for n in fabric.nodes}
    ports: dict[str, list[object]] = {}
    for end in fabric.links:
        if end.peer_guid is None:
            continue
        for ca, ca_port_guid, switch, switch_port in (
            (end.guid, end.port_guid, end.peer_guid, end.peer_port),
            (end.peer_guid, end.peer_port_guid, end.guid, end.port),
        ):
            if ca in classified.hosts and ca_port_guid is not None and classified.tier.get(switch) == 0:
                ports[guid_text(ca_port_guid)] = [guid_text(switch), switch_port]
    switches: dict[str, dict[str, object]] = {}
    for guid, level in sorted(classified.tier.items()):
        node = nodes.get(guid)
        entry: dict[str, object] = {"tier": level, "name": node.name if node else None}
        if level >= 1:
            entry["group"] = group_id(level, groups[level][guid])
        switches[guid_text(guid)] = entry
    leaves: dict[str, list[str]] = {}
    for guid, level in sorted(classified.tier.items()):
        if level != 0:
            continue
        chain: list[str] = []
        current = {guid}
        for above in range(1, max(groups, default=0) + 1):
            ups = {u for c in current for u in _neighbours_at(classified, c, above)}
            if not ups:
                break
            members = set().union(*(groups[above][u] for u in ups))
            chain.append(group_id(above, members))
            current = members
        leaves[guid_text(guid)] = chain
    return {
        "kind": MAP_KIND,
        "version": MAP_VERSION,
        "ports": dict(sorted(ports.items())),
        "switches": switches,
        "leafTiers": leaves,
    }


def _neighbours_at(classified: Classified, guid: int, level: int) -> set[int]:
    return {
        (b if a == guid else a)
        for a, b in classified.edges
        if guid in (a, b) and classified.tier.get(b if a == guid else a) == level
    }


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class FabricMap:
    ports: Mapping[int, tuple[int, int | None]]  #: host port GUID → (leaf GUID, leaf port)
    switch_names: Mapping[int, str | None]
    switch_tier: Mapping[int, int]
    leaf_tiers: Mapping[int, tuple[str, ...]]  #: leaf GUID → group ids of tiers 1, 2, ...


def parse_fabric_map(text: str, path: str = "fabric map") -> FabricMap:
    """Read a map written by ``fabric_map`` (``nodetopo fabric``); garbage is a ``ParseError``."""
    try:
        data = json.loads(text)
    except ValueError as e:
        raise ParseError(NAME, path, f"not JSON: {e}") from e
    if not isinstance(data, dict) or data.get("kind") != MAP_KIND:
        raise ParseError(NAME, path, f"not a fabric map (kind is not {MAP_KIND!r})")
    if data.get("version") != MAP_VERSION:
        raise ParseError(NAME, path, f"fabric map version {data.get('version')!r}, expected {MAP_VERSION}")
    try:
        ports = {
            parse_guid(k, NAME, path): (parse_guid(v[0], NAME, path), int(v[1]) if v[1] is not None else None)
            for k, v in data["ports"].items()
        }
        switches = data["switches"]
        names = {parse_guid(k, NAME, path): (v.get("name") or None) for k, v in switches.items()}
        tiers = {parse_guid(k, NAME, path): int(v["tier"]) for k, v in switches.items()}
        leaf_tiers = {
            parse_guid(k, NAME, path): tuple(str(x) for x in v) for k, v in data["leafTiers"].items()
        }
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
        raise ParseError(NAME, path, f"fabric map is malformed: {type(e).__name__}: {e}") from e
    return FabricMap(ports=ports, switch_names=names, switch_tier=tiers, leaf_tiers=leaf_tiers)


# --------------------------------------------------------------------------------------------
# This host's answer
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class HostPort:
    """One of this host's InfiniBand ports (from sysfs ``class/infiniband`` or ``ibstat``)."""

    ca: str
    port: int
    port_guid: int | None
    lid: int | None
    state: str | None


def leaf_tiers(
    leaves: Sequence[int], names: Mapping[int, str | None], above: Sequence[tuple[str, ...]]
) -> tuple[FabricTier, ...]:
    """The node's tiers from the leaves its ACTIVE ports reach and each leaf's groups above.

    One leaf → tier 0 is that leaf. Several (a rail-optimised host: one HCA per rail, each on
    its rail's leaf) → tier 0 is the *set* of leaves, hashed (``group_id``): nodes under the same
    set of leaves are one hop apart on every rail, which is what a gang needs. A tier above is
    published only when every leaf agrees on it.
    """
    unique = sorted(set(leaves))
    if not unique:
        return ()
    name = (
        names.get(unique[0])
        if len(unique) == 1
        else "+".join(str(names.get(g) or guid_text(g)) for g in unique)
    )
    tiers = [
        FabricTier(level=0, id=group_id(0, unique), name=name, members=tuple(guid_text(g) for g in unique))
    ]
    chains = {tuple(a) for a in above}
    if len(chains) == 1:
        for level, gid in enumerate(next(iter(chains)), start=1):
            tiers.append(FabricTier(level=level, id=gid))
    return tuple(tiers)


def neighbour(
    port: HostPort, switch: int | None, switch_port: int | None, name: str | None, uplinks: Sequence[int] = ()
) -> SwitchPort:
    return SwitchPort(
        nic=port.ca,
        port=port.port,
        source=NAME,
        state=port.state,
        switch_id=guid_text(switch) if switch is not None else None,
        switch_name=name,
        switch_port=str(switch_port) if switch_port is not None else None,
        peer_is_switch=True if switch is not None else None,
        uplinks=tuple(guid_text(u) for u in uplinks),
    )


# --------------------------------------------------------------------------------------------
# The source: the host's own ports (sysfs) joined with a fabric map or a neighbour query
# --------------------------------------------------------------------------------------------


def neighbour_query_argv(ca: str, port: int) -> tuple[str, ...]:
    """A partial scan of the one switch at the far end of ``ca``/``port`` (direct route 0,1)."""
    return ("iblinkinfo", "-C", ca, "-P", str(port), "-D", "0,1", "--switches-only")


def position_from_map(
    ports: Sequence[HostPort], fmap: FabricMap
) -> tuple[NetworkObservation, list[str], list[str]]:
    """Join the host's ports with a fabric map → (observation, problems, notes)."""
    problems: list[str] = []
    notes: list[str] = []
    neighbours: list[SwitchPort] = []
    leaves: list[int] = []
    chains: list[tuple[str, ...]] = []
    for hp in ports:
        if hp.state != "ACTIVE":
            neighbours.append(neighbour(hp, None, None, None))
            notes.append(f"{hp.ca} port {hp.port} is {hp.state or 'in an unknown state'}: not used")
            continue
        hit = fmap.ports.get(hp.port_guid) if hp.port_guid is not None else None
        if hit is None:
            neighbours.append(neighbour(hp, None, None, None))
            problems.append(
                f"{hp.ca} port {hp.port} (GUID {guid_text(hp.port_guid) if hp.port_guid else 'unknown'}) "
                "is ACTIVE "
                "but not in the fabric map (half-cabled, or the map is older than the cabling)"
            )
            continue
        leaf, leaf_port = hit
        leaves.append(leaf)
        chains.append(fmap.leaf_tiers.get(leaf, ()))
        name = fmap.switch_names.get(leaf)
        if name is None:
            notes.append(f"leaf {guid_text(leaf)} has no node description: named by its GUID")
        neighbours.append(neighbour(hp, leaf, leaf_port, name))
    if len(set(leaves)) > 1:
        notes.append(f"{len(set(leaves))} leaves (rail-optimised): tier 0 is the set of leaves")
    tiers = leaf_tiers(leaves, fmap.switch_names, chains) if not problems else ()
    return NetworkObservation(source=NAME, neighbours=tuple(neighbours), tiers=tiers), problems, notes


def position_from_linkinfo(hp: HostPort, text: str, path: str) -> tuple[SwitchPort, int | None, str | None]:
    """One port's neighbour from a partial ``iblinkinfo`` of the switch at its far end.

    Returns the neighbour, the leaf GUID (None when not found) and a problem (or None).
    """
    lines = parse_iblinkinfo(text, path)
    switch_lines = [p for p in lines if p.switch_guid is not None]
    if not switch_lines:
        cas = [p for p in lines if p.guid is not None]
        if cas:
            return (
                dataclasses.replace(neighbour(hp, None, None, None), peer_is_switch=False),
                None,
                f"{hp.ca} port {hp.port}: the far end is a channel adapter, not a switch "
                "(back-to-back cable)",
            )
        return neighbour(hp, None, None, None), None, f"{path}: no switch in the answer"
    mine = [p for p in switch_lines if p.peer_lid == hp.lid and p.peer_port == hp.port] if hp.lid else []
    guid = switch_lines[0].switch_guid
    header = switch_lines[0].header or ""
    if not mine:
        return (
            neighbour(hp, None, None, None),
            None,
            f"{hp.ca} port {hp.port} (LID {hp.lid}): switch {guid_text(guid or 0)} "
            "shows no port cabled to it",
        )
    return neighbour(hp, guid, mine[0].port, switch_name(header)), guid, None


def read_host_ports(root: HostRoot) -> tuple[tuple[HostPort, ...], list[str]]:
    """The host's InfiniBand ports straight from ``class/infiniband/*/ports/*`` (link layer, state,
    LID, GID 0): four small files a port, nothing else, so that a node without InfiniBand pays one
    directory listing. Unreadable ports are returned as problems."""
    base = root.sys("class", "infiniband")
    base_dir = os.fspath(base)
    ports: list[HostPort] = []
    problems: list[str] = []
    for device in _sysfs.list_directory(base, root=root):
        ports_dir = f"{base_dir}/{device}/ports"
        for number, name in _sysfs.numbered_names(ports_dir, "", root=root):
            # the port's files through one descriptor checked against the root (same answers as
            # read_attribute, fewer system calls; gids/0 through its subdirectory)
            path = f"{ports_dir}/{name}"
            fd = _sysfs.open_checked_directory(root, path)
            try:
                layer = _sysfs.read_attribute_at(root, fd, "link_layer", f"{path}/link_layer")
                if (layer or "").strip().lower() != "infiniband":
                    continue
                state = _sysfs.read_attribute_at(root, fd, "state", f"{path}/state")
                lid = _sysfs.read_attribute_at(root, fd, "lid", f"{path}/lid")
                gid = _sysfs.read_attribute_at(root, fd, "gids/0", f"{path}/gids/0")
                where = root.relative(path)
                guid_text_value = parse_port_guid(gid, where) if gid else None
                ports.append(
                    HostPort(
                        ca=device,
                        port=number,
                        port_guid=parse_guid(guid_text_value, NAME, where) if guid_text_value else None,
                        lid=parse_lid(lid, where) if lid else None,
                        state=parse_port_state(state, where) if state else None,
                    )
                )
            except _sysfs.Unreadable as e:
                problems.append(str(e))
            except ParseError as e:
                problems.append(str(e))
            finally:
                if fd is not None:
                    os.close(fd)
    return tuple(ports), problems


def read_position(root: HostRoot, runner: CommandRunner, *, timeout: float, map_path: str | None) -> Facts:
    ports, unreadable = read_host_ports(root)
    if not ports and unreadable:
        return failed(NAME, ConditionReason.UNAVAILABLE, "; ".join(unreadable[:3]))
    if not ports:
        return failed(NAME, ConditionReason.UNAVAILABLE, "no InfiniBand ports in sysfs class/infiniband")
    if map_path is not None:
        try:
            if not stat.S_ISREG(os.stat(map_path).st_mode):
                return failed(NAME, ConditionReason.UNAVAILABLE, f"fabric map {map_path}: not a regular file")
            with open(map_path, encoding="utf-8", errors="replace") as f:
                text = f.read(MAP_LIMIT + 1)
        except OSError as e:
            return failed(NAME, ConditionReason.UNAVAILABLE, f"fabric map {map_path}: {e.strerror or e}")
        if len(text) > MAP_LIMIT:
            too_big = f"fabric map {map_path}: larger than {MAP_LIMIT} bytes"
            return failed(NAME, ConditionReason.PARSE_ERROR, too_big)
        observation, problems, notes = position_from_map(ports, parse_fabric_map(text, map_path))
        how = f"fabric map {map_path}"
    else:
        neighbours: list[SwitchPort] = []
        problems, notes, leaves = [], [], []
        names: dict[int, str | None] = {}
        for hp in ports:
            if hp.state != "ACTIVE":
                neighbours.append(neighbour(hp, None, None, None))
                notes.append(f"{hp.ca} port {hp.port} is {hp.state or 'in an unknown state'}: not used")
                continue
            argv = neighbour_query_argv(hp.ca, hp.port)
            command = " ".join(argv)
            try:
                result = runner.run(argv, timeout=timeout)
            except CommandNotFound as e:
                return failed(NAME, ConditionReason.UNAVAILABLE, f"{e} (iblinkinfo: infiniband-diags)")
            except CommandTimeout:
                return failed(NAME, ConditionReason.TIMEOUT, f"{command}: no answer within {timeout:g}s")
            if result.returncode != 0 and not result.stdout.strip():
                problems.append(f"{command}: exited {result.returncode}: {result.stderr.strip()[:200]}")
                neighbours.append(neighbour(hp, None, None, None))
                continue
            found, leaf, problem = position_from_linkinfo(hp, result.stdout, command)
            neighbours.append(found)
            if problem:
                problems.append(problem)
            if leaf is not None:
                leaves.append(leaf)
                names[leaf] = found.switch_name
        tiers = leaf_tiers(leaves, names, [()] * len(leaves)) if not problems else ()
        observation = NetworkObservation(source=NAME, neighbours=tuple(neighbours), tiers=tiers)
        how = "neighbour query (iblinkinfo -D 0,1)"
    if unreadable:  # a port we could not read may be on another leaf: no tier this round
        problems = [*unreadable, *problems]
        observation = dataclasses.replace(observation, tiers=())
    active = sum(1 for hp in ports if hp.state == "ACTIVE")
    message = f"{how}: {active}/{len(ports)} InfiniBand port(s) active"
    if notes:
        message += "; " + "; ".join(dict.fromkeys(notes))
    if problems:
        text_problems = "; ".join(problems)
        return Facts(
            network=(observation,),
            sources=(SourceStatus(name=NAME, ok=True, message=f"Degraded: {message}"),),
            conditions=(Condition(source=NAME, reason=ConditionReason.DEGRADED, message=text_problems),),
        )
    return Facts(network=(observation,), sources=(SourceStatus(name=NAME, ok=True, message=message),))


def collect(ctx: Context) -> SourceResult:
    """The InfiniBand fabric source (``ctx.fabric_map`` or a per-port neighbour query)."""
    return guarded(
        NAME,
        lambda: read_position(ctx.root, ctx.runner, timeout=ctx.command_timeout_s, map_path=ctx.fabric_map),
    )
