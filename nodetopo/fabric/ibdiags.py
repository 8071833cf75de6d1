"""The infiniband-diags outputs people and tools keep, parsed (pure, text → frozen values).

* ``ibnetdiscover`` (whole-fabric topology file) and ``ibnetdiscover -p`` (one line per port);
* ``iblinkinfo`` (full, partial ``-D`` scans, or lines cut out by ``grep``).

Each of the first two yields an ``IbFabric``: nodes (switches, channel adapters) and link ends. A
link is printed from both of its ends in ``ibnetdiscover``; widths may differ between the two ends
and are kept per end. ``nodetopo.fabric.tree`` turns a fabric into switch tiers and the fabric map;
the ``fabric.ib`` source (``nodetopo.sources.fabric.infiniband``) reads a partial ``iblinkinfo`` of
each port's far end. A malformed topology line is a ``ParseError`` of the ``fabric.ib`` source.
"""

from __future__ import annotations

import dataclasses
import re

from nodetopo.errors import ParseError

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
