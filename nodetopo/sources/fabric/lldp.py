"""LLDP neighbours (``lldpcli``, when lldpd runs on the host): the switch and port behind each NIC.

The source asks ``lldpcli -f json0``; ``parse_lldp_json`` reads both JSON forms into the same
``LldpNeighbour`` values:

* ``-f json0``: every value wrapped in a list of ``{"value": ...}`` objects (stable shape);
* ``-f json``: the compact form (one interface is an object, several a list of one-key objects; a
  named chassis is keyed by its name).

Switch or server? LLDP capabilities cannot tell (a Linux server running lldpd advertises Bridge and
Router enabled). What does: a switch announces its *port* by name (subtype ``ifname`` or ``local``,
e.g. ``Ethernet184``, ``swp46``, ``Gi1/0/29``) while lldpd on a server announces the port by its MAC
address (its default). A neighbour whose port id is a MAC, or that advertises only the Station
capability, is reported as a host and never becomes a tier.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nodetopo.errors import ParseError
from nodetopo.host import CommandRunner, HostRoot
from nodetopo.jsonread import load_json
from nodetopo.model import ConditionReason, FabricTier, Facts, NetworkObservation, SourceStatus, SwitchPort
from nodetopo.sources import commands
from nodetopo.sources.base import Context, SourceResult, condition, failed, guarded
from nodetopo.sources.commands import Command

NAME = "fabric.lldp"

_MAC = re.compile(r"[0-9A-Fa-f]{2}(?::[0-9A-Fa-f]{2}){5}")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class LldpNeighbour:
    """One neighbour seen on one local interface."""

    interface: str
    chassis_id: str | None = None
    chassis_id_type: str | None = None  #: ``mac``, ``local``, ``ip`` ...
    chassis_name: str | None = None
    chassis_descr: str | None = None
    mgmt_ips: tuple[str, ...] = ()
    capabilities: tuple[tuple[str, bool], ...] = ()
    port_id: str | None = None
    port_id_type: str | None = None  #: ``ifname``, ``local``, ``mac`` ...
    port_descr: str | None = None
    ttl: int | None = None
    age: str | None = None
    rid: int | None = None  #: lldpd's remote index (not in interface order)
    vlan_id: int | None = None
    #: (OUI, subtype, value) of TLVs lldpd does not decode, e.g. a vendor's chassis serial
    unknown_tlvs: tuple[tuple[str, str, str], ...] = ()

    @property
    def port_name(self) -> str | None:
        """The switch port people use: the ifname, else a non-numeric local id, else the description.

        Juniper announces ``local`` 512 (an index) with the usable name ``xe-0/0/1`` in the
        description; SONiC announces ``local`` ``Ethernet184``.
        """
        if self.port_id and self.port_id_type == "ifname":
            return self.port_id
        if self.port_id and self.port_id_type == "local" and not self.port_id.isdigit():
            return self.port_id
        return self.port_descr or self.port_id

    @property
    def is_switch(self) -> bool:
        """False when the neighbour is a server (port id is a MAC address, or a Station only)."""
        if self.port_id_type == "mac" or (
            self.port_id and _MAC.fullmatch(self.port_id) and self.port_id_type != "local"
        ):
            return False
        enabled = {name for name, on in self.capabilities if on}
        return enabled != {"Station"}

    @property
    def switch_id(self) -> str | None:
        return self.chassis_id

    def switch_port(self) -> SwitchPort:
        return SwitchPort(
            nic=self.interface,
            port=None,
            source=NAME,
            switch_id=self.chassis_id,
            switch_name=self.chassis_name,
            switch_port=self.port_name,
            peer_is_switch=self.is_switch,
        )


def _values(node: Any) -> list[Any]:
    """json0's ``[{"value": x}, ...]`` → ``[x, ...]``; json's plain value or list → a list."""
    if node is None:
        return []
    items = node if isinstance(node, list) else [node]
    return [i.get("value") if isinstance(i, dict) and "value" in i else i for i in items]


def _first(node: Any) -> Any:
    values = _values(node)
    return values[0] if values else None


def _typed(node: Any) -> tuple[str | None, str | None]:
    """An ``id`` entry: ``{"type": t, "value": v}`` (json) or ``[{"type": t, "value": v}]`` (json0)."""
    item = node[0] if isinstance(node, list) and node else node
    if isinstance(item, dict):
        value = item.get("value")
        return (str(value) if value is not None else None), (str(item["type"]) if "type" in item else None)
    return (str(item) if item is not None else None), None


def _interfaces(data: Any, path: str) -> list[tuple[str, dict[str, Any]]]:
    if not isinstance(data, dict) or "lldp" not in data:
        raise ParseError(NAME, path, "expected a JSON object with an 'lldp' key")
    lldp = data["lldp"]
    if isinstance(lldp, list):  # json0: [{"interface": [{"name": ..., ...}]}]
        lldp = lldp[0] if lldp else {}
    if not isinstance(lldp, dict):
        raise ParseError(NAME, path, "'lldp' is neither an object nor a list of one")
    raw = lldp.get("interface", [])
    result: list[tuple[str, dict[str, Any]]] = []
    items = raw if isinstance(raw, list) else [raw]
    for item in items:
        if not isinstance(item, dict):
            raise ParseError(NAME, path, f"an interface entry is a {type(item).__name__}, not an object")
        if "name" in item:  # json0
            result.append((str(item["name"]), item))
        else:  # json: {"eth0": {...}} (one or several keys)
            for name, body in item.items():
                if not isinstance(body, dict):
                    raise ParseError(NAME, path, f"interface {name!r} is not an object")
                result.append((str(name), body))
    return result


def _chassis(body: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    raw = body.get("chassis")
    item = raw[0] if isinstance(raw, list) and raw else raw
    if not isinstance(item, dict):
        return None, {}
    if "id" in item or "descr" in item or "name" in item:
        name = _first(item.get("name"))
        return (str(name) if name is not None else None), item
    if len(item) == 1:  # json: {"<system name>": {...}}
        ((name, inner),) = item.items()
        return str(name), inner if isinstance(inner, dict) else {}
    return None, item


def parse_lldp_json(text: str, path: str = "lldpcli -f json") -> tuple[LldpNeighbour, ...]:
    """Parse ``lldpcli -f json`` or ``-f json0`` ``show neighbors``: one neighbour per interface."""
    data = load_json(text, source=NAME, path=path)
    neighbours: list[LldpNeighbour] = []
    for name, body in _interfaces(data, path):
        chassis_name, chassis = _chassis(body)
        chassis_id, chassis_type = _typed(chassis.get("id"))
        port_raw = body.get("port")
        port = port_raw[0] if isinstance(port_raw, list) and port_raw else port_raw
        port = port if isinstance(port, dict) else {}
        port_id, port_type = _typed(port.get("id"))
        caps = chassis.get("capability", [])
        capabilities = tuple(
            (str(c.get("type")), bool(c.get("enabled")))
            for c in (caps if isinstance(caps, list) else [caps])
            if isinstance(c, dict)
        )
        ttl = _first(port.get("ttl")) or _first(chassis.get("ttl"))
        descr = _first(chassis.get("descr"))
        neighbours.append(
            LldpNeighbour(
                interface=name,
                chassis_id=chassis_id,
                chassis_id_type=chassis_type,
                chassis_name=chassis_name,
                chassis_descr=str(descr) if descr is not None else None,
                mgmt_ips=tuple(str(v) for v in _values(chassis.get("mgmt-ip"))),
                capabilities=capabilities,
                port_id=port_id,
                port_id_type=port_type,
                port_descr=_str(_first(port.get("descr"))),
                ttl=int(ttl) if isinstance(ttl, (int, str)) and str(ttl).isdigit() else None,
                age=_str(body.get("age")),
                rid=_int(body.get("rid")),
                vlan_id=_int(_vlan(body.get("vlan"))),
                unknown_tlvs=_json_tlvs(body.get("unknown-tlvs")),
            )
        )
    return tuple(sorted(neighbours, key=lambda n: n.interface))


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, str)) and str(value).isdigit() else None


def _vlan(node: Any) -> Any:
    item = node[0] if isinstance(node, list) and node else node
    return item.get("vlan-id") if isinstance(item, dict) else None


def _json_tlvs(node: Any) -> tuple[tuple[str, str, str], ...]:
    found: list[tuple[str, str, str]] = []
    for group in node if isinstance(node, list) else [node]:
        if not isinstance(group, dict):
            continue
        tlvs = group.get("unknown-tlv", [])
        for tlv in tlvs if isinstance(tlvs, list) else [tlvs]:
            if isinstance(tlv, dict):
                found.append((str(tlv.get("oui")), str(tlv.get("subtype")), str(tlv.get("value"))))
    return tuple(found)


def _str(value: Any) -> str | None:
    return str(value) if value is not None else None


def group_tier(switches: Sequence[tuple[str, str | None]]) -> FabricTier:
    """Tier 0 for (chassis id, name) pairs: the switch itself, or the hashed set of several."""
    ids = sorted({s[0] for s in switches})
    if len(ids) == 1:
        return FabricTier(
            level=0, id=ids[0], name=next((s[1] for s in switches if s[1]), None), members=tuple(ids)
        )
    digest = hashlib.sha256(",".join(ids).encode()).hexdigest()[:16]
    names = "+".join(sorted({s[1] or s[0] for s in switches}))
    return FabricTier(level=0, id=f"t0-{digest}", name=names, members=tuple(ids))


def lldp_tiers(neighbours: tuple[LldpNeighbour, ...]) -> tuple[FabricTier, ...]:
    """Tier 0 from the switches the node's NICs reach.

    One switch → that switch (by chassis id; named by its system name). Several (rails, or a
    dual-homed server) → the set, hashed, as for InfiniBand rails. LLDP sees one hop only: no
    tier 1.
    """
    switches = sorted({(n.chassis_id, n.chassis_name) for n in neighbours if n.is_switch and n.chassis_id})
    return (group_tier([(i, name) for i, name in switches if i]),) if switches else ()


_LOG_STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\s+\[[A-Z]+/[a-z]+\]\s*")

#: where lldpd listens for lldpcli, relative to the host root
SOCKETS = ("run/lldpd.socket", "var/run/lldpd.socket")

#: the one command: asked only when lldpd runs; capture marks the bundle when lldpd answered
#: (an empty ``run/lldpd.socket``: the socket itself cannot be copied), so the answer replays
LLDPCLI = Command(
    argv=("lldpcli", "-f", "json0", "show", "neighbors"),
    output="lldpcli-neighbors.json",
    timeout_s=5.0,
    answered_mark=SOCKETS[0],
    missing=" (lldpd is not used here)",
)
COMMANDS: tuple[Command, ...] = (LLDPCLI,)
LLDPCLI_ARGV = LLDPCLI.argv


def lldpd_socket(root: HostRoot) -> Path | None:
    """lldpd's control socket under the host root, or None when lldpd is not running there.

    A capture bundle holds an empty regular file at ``run/lldpd.socket`` when lldpd answered
    during the capture (the socket itself cannot be copied), so the captured answer replays.
    """
    for relative in SOCKETS:
        path = root.path / relative
        if path.exists():
            return path
    return None


def lldpcli_argv(socket: Path) -> tuple[str, ...]:
    """The command; ``-u`` only for a socket that is not where lldpcli looks by default (the
    DaemonSet sees the host's socket under /host)."""
    if not stat.S_ISSOCK(socket.stat().st_mode) or str(socket) in (
        "/run/lldpd.socket",
        "/var/run/lldpd.socket",
    ):
        return LLDPCLI_ARGV
    return ("lldpcli", "-u", str(socket), *LLDPCLI_ARGV[1:])


def read_lldp(root: HostRoot, runner: CommandRunner, *, timeout: float, bundle: bool = False) -> Facts:
    """``lldpcli -f json0 show neighbors`` when lldpd runs; otherwise Unavailable, without spawning
    anything (most nodes have no lldpd: asking lldpcli would cost a process per scan). ``bundle``:
    ``root`` is a capture bundle, whose messages speak of the capture, not of a running lldpd."""
    socket = lldpd_socket(root)
    if socket is None:
        if bundle:
            unanswered = f"lldpd did not answer the capture (no {SOCKETS[0]} in the bundle)"
            return failed(NAME, ConditionReason.UNAVAILABLE, unanswered)
        where = " or ".join("/" + s for s in SOCKETS)
        return failed(NAME, ConditionReason.UNAVAILABLE, f"lldpd is not running (no {where})")
    command = LLDPCLI.line
    # "not installed" on a host, "not in the bundle" in a replay: the runner knows which
    result = commands.run(runner, LLDPCLI, timeout=timeout, argv=lldpcli_argv(socket))
    if isinstance(result, commands.Failed):
        return failed(NAME, result.reason, result.text)
    if result.returncode != 0:
        # lldpcli stamps its log lines with the time: drop it, or every scan would differ
        lines = [_LOG_STAMP.sub("", line) for line in result.stderr.strip().splitlines()]
        why = lines[-1:] or [f"exited {result.returncode}"]
        return failed(NAME, ConditionReason.UNAVAILABLE, f"{command}: lldpd is not answering: {why[0][:200]}")
    neighbours = parse_lldp_json(result.stdout, command)
    servers = [n for n in neighbours if not n.is_switch]
    observation = NetworkObservation(
        source=NAME,
        neighbours=tuple(n.switch_port() for n in neighbours),
        tiers=lldp_tiers(neighbours),
    )
    message = f"{command}: {len(neighbours)} neighbour(s)"
    if not servers:
        return Facts(network=(observation,), sources=(SourceStatus(name=NAME, ok=True, message=message),))
    about = "; ".join(
        f"{n.interface}: neighbour {n.chassis_name or n.chassis_id} is a host, not a switch "
        f"(port id is {n.port_id_type} {n.port_id}): not a tier"
        for n in servers
    )
    return Facts(
        network=(observation,),
        sources=(SourceStatus(name=NAME, ok=True, message=message),),
        conditions=(condition(NAME, ConditionReason.UNAVAILABLE, about),),
    )


def collect(ctx: Context) -> SourceResult:
    """The LLDP source (lldpd's view of the neighbours of every interface)."""
    timeout = LLDPCLI.timeout(ctx.command_timeout_s)
    return guarded(NAME, lambda: read_lldp(ctx.root, ctx.runner, timeout=timeout, bundle=ctx.bundle))
