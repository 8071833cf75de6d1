"""``ibstat`` (infiniband-diags) and ``ibv_devinfo`` (rdma-core): RDMA channel adapters and their ports.

sysfs (``class/infiniband``) is the primary RDMA source; ``ibstat`` enriches it and is what users paste
in bug reports. Nodes without InfiniBand usually have no ``ibstat`` at all: that is ``Unavailable``,
not an error. Some nodes have rdma-core without infiniband-diags, so when ``ibstat`` is missing the
source asks ``ibv_devinfo`` for the same facts.

``ibstat`` ends with an ``ibpanic: ...`` line (exit 255) when a device vanishes while it walks them;
the adapters printed before it are kept and the panic becomes a ``Degraded`` condition.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable, Sequence

from nodetopo import model
from nodetopo.errors import ParseError, clip, excerpt
from nodetopo.host import CommandRunner
from nodetopo.model import ConditionReason, Facts, SourceStatus
from nodetopo.reuse import ScanCache
from nodetopo.sources import commands
from nodetopo.sources.base import Context, SourceResult, condition, failure_level, guarded
from nodetopo.sources.commands import Command

log = logging.getLogger(__name__)

NAME = "ibstat"

IBSTAT = Command(argv=("ibstat",), output="ibstat.txt")
#: asked only where ``ibstat`` is not installed
IBV_DEVINFO = Command(argv=("ibv_devinfo",), output="ibv_devinfo.txt")
COMMANDS: tuple[Command, ...] = (IBSTAT, IBV_DEVINFO)
IBSTAT_ARGV = IBSTAT.argv
IBV_DEVINFO_ARGV = IBV_DEVINFO.argv

_CA_LINE = re.compile(r"CA '([^'\s]{1,64})'")
_PORT_LINE = re.compile(r"Port ([0-9]{1,3}):")
_KEY_VALUE = re.compile(r"([A-Za-z][A-Za-z ]{0,40}?):\s*(.*)")
#: ``ibpanic: [1400444] main: stat of IB device 'mlx5_8' failed: ...`` and ``ibwarn: ...``
_DIAG_MESSAGE = re.compile(r"ib(?:panic|warn|error): .*")
_NUMBER = re.compile(r"[0-9]{1,9}")
_RATE = re.compile(r"[0-9]{1,5}(?:\.[0-9]{1,3})?")


@dataclasses.dataclass(slots=True)
class _Adapter:
    """An adapter being read: its CA-level fields, then its ports."""

    name: str
    fields: dict[str, str] = dataclasses.field(default_factory=dict)
    ports: list[tuple[int, dict[str, str], int]] = dataclasses.field(
        default_factory=list
    )  # (n, fields, line)
    port_numbers: set[int] = dataclasses.field(default_factory=set)  #: for the duplicate check

    def add_port(self, number: int, line: int, path: str) -> None:
        if number in self.port_numbers:
            raise ParseError(NAME, path, f"{self.name}: port {number} is listed twice", line=line)
        self.port_numbers.add(number)
        self.ports.append((number, {}, line))


def _add_adapter(
    adapters: list[_Adapter], names: set[str], name: str, what: str, path: str, line: int
) -> None:
    """Start the next adapter; a name seen before is a ParseError (a set: linear in the adapters)."""
    if name in names:
        raise ParseError(NAME, path, f"{what} {excerpt(name)} is listed twice", line=line)
    names.add(name)
    adapters.append(_Adapter(name))


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _Listing:
    """How one command prints its adapters: a line naming an adapter, then its own ``key: value``
    lines, then per port a line naming the port and the port's ``key: value`` lines."""

    adapter: re.Pattern[str]  #: the line that starts an adapter; group 1 is its name
    adapter_word: str  #: what a duplicate adapter is called in the error
    adapter_expected: str  #: what the first line must look like, in the error
    port: re.Pattern[str]  #: the line that starts a port; group 1 is its number
    key_value: re.Pattern[str]
    key_value_expected: str
    adapter_at_margin: bool = False  #: an indented line is never an adapter line
    diagnostics: re.Pattern[str] | None = None  #: lines returned as problems
    ignored: frozenset[str] = frozenset()  #: whole lines skipped
    indented_extra: bool = False  #: indented lines of a port that are not ``key: value`` are skipped


def _read_listing(text: str, path: str, listing: _Listing) -> tuple[list[_Adapter], list[str]]:
    """The adapters of ``text`` in the order printed, and its diagnostic lines."""
    adapters: list[_Adapter] = []
    names: set[str] = set()
    problems: list[str] = []
    for number, raw in enumerate(text.split("\n"), start=1):
        stripped = raw.strip()
        if not stripped:
            continue
        if listing.diagnostics is not None and listing.diagnostics.fullmatch(stripped):
            problems.append(stripped)
            continue
        if stripped in listing.ignored:
            continue
        start = listing.adapter.fullmatch(stripped)
        if start is not None and not (listing.adapter_at_margin and raw[0].isspace()):
            _add_adapter(adapters, names, start[1], listing.adapter_word, path, number)
            continue
        if not adapters:
            raise ParseError(
                NAME, path, f"expected {listing.adapter_expected}, got {excerpt(stripped)}", line=number
            )
        adapter = adapters[-1]
        port = listing.port.fullmatch(stripped)
        if port is not None:
            adapter.add_port(int(port[1]), number, path)
            continue
        pair = listing.key_value.fullmatch(stripped)
        if pair is None:
            if listing.indented_extra and adapter.ports and raw[:1].isspace():
                continue
            raise ParseError(
                NAME, path, f"expected {listing.key_value_expected}, got {excerpt(stripped)}", line=number
            )
        fields = adapter.ports[-1][1] if adapter.ports else adapter.fields
        fields.setdefault(pair[1], pair[2].strip())
    return adapters, problems


def _port_number(value: str, path: str, number: int, what: str) -> int | None:
    if value in ("", "N/A"):
        return None
    if _NUMBER.fullmatch(value) is None:
        raise ParseError(NAME, path, f"{what} {excerpt(value)} is not a number", line=number)
    return int(value)


def _ibstat_port(number: int, fields: dict[str, str], path: str, line: int) -> model.RdmaPort:
    rate_text = fields.get("Rate", "")
    if rate_text and _RATE.fullmatch(rate_text) is None:
        raise ParseError(
            NAME, path, f"port {number}: Rate {excerpt(rate_text)} is not a number (Gb/s)", line=line
        )
    return model.RdmaPort(
        number=number,
        state=fields["State"].upper() if fields.get("State") else None,
        phys_state=fields.get("Physical state") or None,
        rate_gbps=float(rate_text) if rate_text else None,
        link_layer=fields.get("Link layer") or None,
        lid=_port_number(fields.get("Base lid", ""), path, line, f"port {number}: Base lid"),
        port_guid=fields.get("Port GUID") or None,
    )


_IBSTAT = _Listing(
    adapter=_CA_LINE,
    adapter_word="CA",
    adapter_expected="\"CA '<name>'\"",
    port=_PORT_LINE,
    key_value=_KEY_VALUE,
    key_value_expected="'Key: value'",
    adapter_at_margin=True,
    diagnostics=_DIAG_MESSAGE,
)


def _read_ibstat(text: str, path: str) -> tuple[tuple[model.IbstatCa, ...], list[str]]:
    """Parse ``ibstat``; also return the diagnostics (``ibpanic: ...``) printed among the adapters."""
    adapters, problems = _read_listing(text, path, _IBSTAT)
    result = tuple(
        model.IbstatCa(
            name=adapter.name,
            ca_type=adapter.fields.get("CA type") or None,
            firmware=adapter.fields.get("Firmware version") or None,
            hardware_version=adapter.fields.get("Hardware version") or None,
            node_guid=adapter.fields.get("Node GUID") or None,
            system_guid=adapter.fields.get("System image GUID") or None,
            ports=tuple(
                sorted(
                    (_ibstat_port(n, fields, path, line) for n, fields, line in adapter.ports),
                    key=lambda port: port.number,
                )
            ),
        )
        for adapter in adapters
    )
    return tuple(sorted(result, key=lambda ca: ca.name)), problems


def parse_ibstat(text: str, path: str = "ibstat") -> tuple[model.IbstatCa, ...]:
    """Parse ``ibstat``: adapters sorted by name, ports by number; ``State`` upper-cased (``ACTIVE``).

    ``ibpanic``/``ibwarn`` lines are skipped here (``collect`` reports them); adapters without
    Firmware/GUID lines (older infiniband-diags) get None for those fields.
    """
    return _read_ibstat(text, path)[0]


_DEVINFO_HCA = re.compile(r"hca_id:\s*(\S{1,64})")
_DEVINFO_PORT = re.compile(r"port:\s*([0-9]{1,3})")
_DEVINFO_KEY = re.compile(r"([a-z_]{1,40}):\s*(.*)")
_DEVINFO_STATE = re.compile(r"PORT_([A-Z_]{1,20})(?: \([0-9]{1,2}\))?")
_DEVINFO_PHYS = re.compile(r"([A-Z_]{1,30})(?: \([0-9]{1,2}\))?")
_DEVINFO_GUID = re.compile(r"([0-9a-fA-F]{4}):([0-9a-fA-F]{4}):([0-9a-fA-F]{4}):([0-9a-fA-F]{4})")
#: the phys_state words of ``ibv_devinfo -v`` as ibstat (and sysfs) spell them
_PHYS_STATES = {
    "SLEEP": "Sleep",
    "POLLING": "Polling",
    "DISABLED": "Disabled",
    "PORT_CONFIGURATION_TRAINING": "PortConfigurationTraining",
    "LINK_UP": "LinkUp",
    "LINK_ERROR_RECOVERY": "LinkErrorRecovery",
    "PHY_TEST": "PhyTest",
}


_IBV_DEVINFO = _Listing(
    adapter=_DEVINFO_HCA,
    adapter_word="hca_id",
    adapter_expected="'hca_id: <name>'",
    port=_DEVINFO_PORT,
    key_value=_DEVINFO_KEY,
    key_value_expected="'key: value'",
    ignored=frozenset({"No IB devices found"}),
    indented_extra=True,  # continuation lines of `ibv_devinfo -v` (GID tables, capability flags)
)


def _devinfo_guid(value: str | None) -> str | None:
    """``b8e9:2403:004e:de81`` -> ``0xb8e92403004ede81``, the form ibstat and sysfs print."""
    if not value:
        return None
    match = _DEVINFO_GUID.fullmatch(value)
    return "0x" + "".join(match.groups()).lower() if match else value


def _read_ibv_devinfo(text: str, path: str) -> tuple[tuple[model.IbstatCa, ...], list[str]]:
    adapters, problems = _read_listing(text, path, _IBV_DEVINFO)

    def make_port(n: int, fields: dict[str, str], line: int) -> model.RdmaPort:
        state = fields.get("state", "")
        state_match = _DEVINFO_STATE.fullmatch(state)
        if state and state_match is None:
            raise ParseError(
                NAME, path, f"port {n}: state {excerpt(state)} is not PORT_<STATE> (<n>)", line=line
            )
        phys = _DEVINFO_PHYS.fullmatch(fields.get("phys_state", ""))
        return model.RdmaPort(
            number=n,
            state=state_match[1] if state_match else None,
            phys_state=_PHYS_STATES.get(phys[1], phys[1]) if phys else None,
            link_layer=fields.get("link_layer") or None,
            lid=_port_number(fields.get("port_lid", ""), path, line, f"port {n}: port_lid"),
        )

    result = []
    for adapter in adapters:
        part = adapter.fields.get("vendor_part_id", "")
        result.append(
            model.IbstatCa(
                name=adapter.name,
                ca_type=f"MT{part}" if _NUMBER.fullmatch(part) else (part or None),
                firmware=adapter.fields.get("fw_ver") or None,
                hardware_version=adapter.fields.get("hw_ver") or None,
                node_guid=_devinfo_guid(adapter.fields.get("node_guid")),
                system_guid=_devinfo_guid(adapter.fields.get("sys_image_guid")),
                ports=tuple(
                    sorted((make_port(n, f, line) for n, f, line in adapter.ports), key=lambda p: p.number)
                ),
            )
        )
    return tuple(sorted(result, key=lambda ca: ca.name)), problems


def parse_ibv_devinfo(text: str, path: str = "ibv_devinfo") -> tuple[model.IbstatCa, ...]:
    """Parse ``ibv_devinfo`` into the same values as ``parse_ibstat``.

    ``ca_type`` is ``MT<vendor_part_id>`` (what ibstat prints), GUIDs are rewritten to ibstat's
    ``0x...`` form, and ``PORT_ACTIVE (4)`` becomes ``ACTIVE``. ``ibv_devinfo`` prints no rate and,
    without ``-v``, no physical state: those stay None.
    """
    return _read_ibv_devinfo(text, path)[0]


def _run(
    runner: CommandRunner,
    declared: Command,
    timeout: float,
    read: Callable[[str, str], tuple[tuple[model.IbstatCa, ...], Sequence[str]]],
    absent: list[str],
) -> Facts | None:
    """Facts from one command, or None when the command is not there (said in ``absent``)."""
    command = declared.line

    def failed(reason: ConditionReason, message: str) -> Facts:
        log.log(
            failure_level(reason),
            "%s: %s: %s",
            command,
            reason.value,
            message,
            extra={"source": NAME, "path": command},
        )
        return Facts(
            sources=(SourceStatus(name=NAME, ok=False, message=f"{reason.value}: {message}"),),
            conditions=(condition(NAME, reason, f"{command}: {message}"),),
        )

    result = commands.run(runner, declared, timeout=timeout)
    if isinstance(result, commands.Failed):
        if result.not_found:
            absent.append(result.message)
            return None
        return failed(result.reason, result.message)
    try:
        adapters, found = read(result.stdout, command)
    except ParseError as e:
        return failed(ConditionReason.PARSE_ERROR, str(e))
    problems = [clip(problem) for problem in found[:5]] + (
        [f"and {len(found) - 5} more"] if len(found) > 5 else []
    )
    problems += [clip(line.strip()) for line in result.stderr.splitlines() if line.strip()][:3]
    if result.returncode != 0 and not problems:
        problems.append(f"exited {result.returncode}")
    if not adapters and (problems or result.returncode != 0):
        return failed(ConditionReason.UNAVAILABLE, "; ".join(problems) or f"exited {result.returncode}")
    if not problems:
        return Facts(ibstat=adapters, sources=(SourceStatus(name=NAME, ok=True, message=command),))
    message = f"{command}: {'; '.join(problems)}"
    log.warning("%s: partly readable: %s", command, message, extra={"source": NAME, "path": command})
    return Facts(
        ibstat=adapters,
        sources=(SourceStatus(name=NAME, ok=True, message=f"Degraded: {message}"),),
        conditions=(condition(NAME, ConditionReason.DEGRADED, message),),
    )


def read_facts(runner: CommandRunner, *, timeout: float, cache: ScanCache | None = None) -> Facts:
    """``ibstat``, or ``ibv_devinfo`` where only rdma-core is installed; neither -> Unavailable.

    Each reader gives back its last result through ``cache`` when the command printed the same
    text as last time (an unchanged node, every scan); any other text is read afresh (nodetopo.reuse).
    """
    cache = cache if cache is not None else ScanCache()
    absent: list[str] = []
    facts = _run(runner, IBSTAT, timeout, cache.last(_read_ibstat), absent)
    if facts is None:
        facts = _run(runner, IBV_DEVINFO, timeout, cache.last(_read_ibv_devinfo), absent)
    if facts is None:
        message = "; ".join(absent) + " (normal on nodes without InfiniBand/RDMA tools)"
        log.info("%s: %s", NAME, message, extra={"source": NAME})
        return Facts(
            sources=(SourceStatus(name=NAME, ok=False, message=f"Unavailable: {message}"),),
            conditions=(condition(NAME, ConditionReason.UNAVAILABLE, message),),
        )
    return facts


def collect(ctx: Context) -> SourceResult:
    """The ibstat source: channel adapters and ports, through ``ctx.runner``."""
    return guarded(NAME, lambda: read_facts(ctx.runner, timeout=ctx.command_timeout_s, cache=ctx.cache))
