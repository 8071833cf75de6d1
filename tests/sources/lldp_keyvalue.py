"""``lldpctl -f keyvalue`` (``lldp.<if>.<path>=<value>`` lines, values may continue on following lines)
into the ``LldpNeighbour`` values the LLDP source reads from ``-f json0``.

No production caller (the source asks for ``json0``); kept beside the tests that hold it to the
corpus's keyvalue captures and to a live lldpd's answer in both forms.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from nodetopo.errors import ParseError
from nodetopo.sources.fabric.lldp import NAME, LldpNeighbour, _int

_KEYVALUE = re.compile(r"lldp\.(?P<interface>[^.=\s]{1,64})\.(?P<key>[^=]{1,200})=(?P<value>.*)")
_PORT_ID_KEYS = ("ifname", "local", "mac", "ip", "ifalias", "agent-circuit-id")
_CHASSIS_ID_KEYS = ("mac", "local", "ip", "ifname", "ifalias")


def parse_lldp_keyvalue(text: str, path: str = "lldpcli -f keyvalue") -> tuple[LldpNeighbour, ...]:
    """Parse ``lldpctl -f keyvalue``. A line not starting ``lldp.`` continues the previous value.

    Keys repeat (``chassis.mgmt-ip`` once per address); the first of a single-valued key wins. A
    key written under another interface's prefix belongs to that interface, as written.
    """
    fields: dict[str, dict[str, list[str]]] = {}
    last: list[str] | None = None
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.rstrip("\r")
        if not line.strip():
            continue
        match = _KEYVALUE.fullmatch(line)
        if match is None:
            if last is None:
                raise ParseError(
                    NAME, path, f"expected 'lldp.<interface>.<key>=<value>', got {line[:80]!r}", line=number
                )
            last[-1] += "\n" + line
            continue
        values = fields.setdefault(match["interface"], {}).setdefault(match["key"], [])
        values.append(match["value"])
        last = values
    neighbours: list[LldpNeighbour] = []
    for interface, f in fields.items():

        def one(key: str, f: Mapping[str, list[str]] = f) -> str | None:
            v = f.get(key)
            return v[0] if v else None

        chassis_type = next((k for k in _CHASSIS_ID_KEYS if f"chassis.{k}" in f), None)
        port_type = next((k for k in _PORT_ID_KEYS if f"port.{k}" in f), None)
        capabilities = tuple(
            (key.split(".")[1], (one(key) or "").lower() == "on")
            for key in sorted(f)
            if key.startswith("chassis.") and key.endswith(".enabled") and key.count(".") == 2
        )
        ttl = one("chassis.ttl") or one("port.ttl")
        neighbours.append(
            LldpNeighbour(
                interface=interface,
                chassis_id=one(f"chassis.{chassis_type}") if chassis_type else None,
                chassis_id_type=chassis_type,
                chassis_name=one("chassis.name"),
                chassis_descr=one("chassis.descr"),
                mgmt_ips=tuple(f.get("chassis.mgmt-ip", ())),
                capabilities=capabilities,
                port_id=one(f"port.{port_type}") if port_type else None,
                port_id_type=port_type,
                port_descr=one("port.descr"),
                ttl=int(ttl) if ttl and ttl.isdigit() else None,
                age=one("age"),
                rid=_int(one("rid")),
                vlan_id=_int(one("vlan.vlan-id")),
                unknown_tlvs=tuple(
                    zip(
                        f.get("unknown-tlvs.unknown-tlv.oui", []),
                        f.get("unknown-tlvs.unknown-tlv.subtype", []),
                        f.get("unknown-tlvs.unknown-tlv", []),
                        strict=False,
                    )
                ),
            )
        )
    return tuple(sorted(neighbours, key=lambda n: n.interface))
