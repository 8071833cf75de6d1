"""The ``fabric.ib`` source: which switch each of this node's HCA ports is cabled to, and the tiers above.

The parsers of the infiniband-diags outputs and the fabric as a tree (tiers, the fabric map, a
host's place in it) are pure and shared with ``nodetopo fabric``: ``nodetopo.fabric``. This module
is the reader that runs in a scan.

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
import os
import stat

from nodetopo.errors import ParseError
from nodetopo.fabric.ibdiags import NAME as NAME  # the source is named as its parsers name their errors
from nodetopo.fabric.ibdiags import parse_guid
from nodetopo.fabric.tree import (
    MAP_LIMIT,
    HostPort,
    leaf_tiers,
    neighbour,
    parse_fabric_map,
    position_from_linkinfo,
    position_from_map,
)
from nodetopo.host import CommandRunner, HostRoot
from nodetopo.model import Condition, ConditionReason, Facts, NetworkObservation, SourceStatus, SwitchPort
from nodetopo.sources import _sysfs, commands
from nodetopo.sources.base import Context, SourceResult, failed, guarded
from nodetopo.sources.commands import Command
from nodetopo.sources.rdma import parse_lid, parse_port_guid, parse_port_state

#: nothing a capture bundle holds: the neighbour query is asked per port (``neighbour_query``)
COMMANDS: tuple[Command, ...] = ()


def neighbour_query_argv(ca: str, port: int) -> tuple[str, ...]:
    """A partial scan of the one switch at the far end of ``ca``/``port`` (direct route 0,1)."""
    return ("iblinkinfo", "-C", ca, "-P", str(port), "-D", "0,1", "--switches-only")


def neighbour_query(ca: str, port: int) -> Command:
    """``neighbour_query_argv`` as the command the source runs."""
    return Command(argv=neighbour_query_argv(ca, port), missing=" (iblinkinfo: infiniband-diags)")


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
            query = neighbour_query(hp.ca, hp.port)
            command = query.line
            result = commands.run(runner, query, timeout=timeout)
            if isinstance(result, commands.Failed):
                return failed(NAME, result.reason, result.text)
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
