"""NUMA nodes from sysfs: ``devices/system/node/node*/{cpulist,distance,meminfo}``.

* Node ids are taken from the ``nodeN`` directory names, in numeric order (``node8`` before
  ``node250``, as on POWER9 with GPU memory nodes). The kernel prints each ``distance`` row in that
  same order (one value per online node), so the values are paired with the ids positionally; a row
  whose length does not match the number of nodes is a ParseError and that node gets no distances.
* ``memory_bytes`` is ``MemTotal`` of the node's ``meminfo`` (kB) times 1024.
* CPU-less nodes (GPU memory on GH200/POWER9, CXL memory, PMEM) have an empty ``cpulist`` and are
  reported like any other node.
* CPU sets of two nodes that overlap cannot come from a sane kernel (hwloc calls this "buggy NUMA"
  and drops the NUMA information); we report the nodes as the kernel describes them and add an
  ``Inconsistent`` condition, so that consumers know not to trust the CPU-to-node mapping.

**No ``devices/system/node``** (a kernel built without ``CONFIG_NUMA``, some containers and
captures): the machine is one memory domain, so we report **one implicit node 0** holding every CPU
in ``devices/system/cpu/online``, with unknown memory size and no distances, as hwloc does. When
``cpu/online`` is missing too, the source fails with ``Unavailable``.

A node whose ``cpulist`` is missing, unreadable or not a cpulist is left out with a condition (its
CPU set is the one thing a NumaNode must carry); a bad ``meminfo`` or ``distance`` only loses that
field.
"""

from __future__ import annotations

import logging
import os
import re

from nodetopo.errors import ParseError, excerpt
from nodetopo.host import HostRoot
from nodetopo.model import (
    MAX_NUMA_NODE_ID,
    Condition,
    ConditionReason,
    Facts,
    NumaNode,
    SourceStatus,
    format_cpulist,
    parse_cpulist,
)
from nodetopo.sources import _sysfs
from nodetopo.sources.base import Context, SourceResult, failed, guarded
from nodetopo.sources.commands import Command

log = logging.getLogger(__name__)

NAME = "sysfs.numa"
#: reads sysfs only: runs nothing
COMMANDS: tuple[Command, ...] = ()

#: where the nodes live, relative to ``<root>/sys``
NODE_DIR = "devices/system/node"
#: the online node list: the ids a distance row is printed for
NODE_ONLINE = "devices/system/node/online"
#: the fallback when there is no NODE_DIR
CPU_ONLINE = "devices/system/cpu/online"
#: the files read in each ``nodeN`` directory (``capture`` copies exactly these)
NODE_FILES = ("cpulist", "distance", "meminfo")

_MEMTOTAL = re.compile(r"^Node\s+(?P<node>[0-9]{1,5})\s+MemTotal:\s+(?P<kb>[0-9]{1,20})\s*kB\s*$")
#: the most memory one NUMA node can report (64 PiB: far above any machine, below absurd)
MAX_NODE_MEMORY_BYTES = 1 << 56
#: SLIT distances are one byte (10 = local, 255 = unreachable)
MAX_DISTANCE = 255
_DISTANCE = re.compile(r"[0-9]{1,3}")


def parse_cpulist_text(text: str, path: str, *, source: str = NAME) -> frozenset[int]:
    """A cpulist file (``0-3,8-11``; empty; a trailing NUL byte tolerated) as a set of CPU ids."""
    try:
        return parse_cpulist(text)
    except ValueError as e:
        raise ParseError(
            source, path, f"expected a cpulist like 0-3,8-11, got {excerpt(text.strip())}"
        ) from e


def parse_distance(text: str, path: str) -> tuple[int, ...]:
    """A node's ``distance`` row: whitespace-separated non-negative integers (``10 21``)."""
    fields = text.replace("\x00", " ").split()
    if not fields:
        raise ParseError(NAME, path, "expected a row of distances like '10 21', got an empty file")
    values: list[int] = []
    for field in fields:
        if _DISTANCE.fullmatch(field) is None or int(field) > MAX_DISTANCE:
            raise ParseError(
                NAME, path, f"expected a row of distances 0-{MAX_DISTANCE}, got {excerpt(text.strip())}"
            )
        values.append(int(field))
    return tuple(values)


def pair_distances(node_ids: tuple[int, ...], row: tuple[int, ...], path: str) -> tuple[tuple[int, int], ...]:
    """Pair a distance row with the node ids it is printed in the order of."""
    if len(row) != len(node_ids):
        raise ParseError(
            NAME, path, f"expected {len(node_ids)} distances (one per node {list(node_ids)}), got {len(row)}"
        )
    return tuple(zip(node_ids, row, strict=True))


def parse_meminfo_total(text: str, path: str, node_id: int) -> int:
    """``MemTotal`` of a node's ``meminfo`` in bytes (the file says kB, meaning KiB)."""
    for number, line in enumerate(text.splitlines(), start=1):
        if "MemTotal:" not in line:
            continue
        match = _MEMTOTAL.match(line.strip())
        if match is None:
            raise ParseError(NAME, path, f"expected 'Node {node_id} MemTotal: <n> kB'", line=number)
        if int(match["node"]) != node_id:
            raise ParseError(NAME, path, f"MemTotal is for node {match['node']}, not {node_id}", line=number)
        memory = int(match["kb"]) * 1024
        if memory > MAX_NODE_MEMORY_BYTES:
            raise ParseError(
                NAME, path, f"MemTotal of {match['kb']} kB is more than any node has", line=number
            )
        return memory
    raise ParseError(NAME, path, "expected a line 'Node N MemTotal: <n> kB', found none")


def read_numa_nodes(root: HostRoot) -> tuple[tuple[NumaNode, ...], tuple[Condition, ...]]:
    """Every NUMA node under ``root``, sorted by id, plus per-file problems as conditions.

    Raises nothing for absent or bad files; returns no nodes (and a condition) only when neither
    ``devices/system/node`` nor ``devices/system/cpu/online`` can be read.
    """
    node_dir = root.sys(NODE_DIR)
    if not node_dir.is_dir():
        return _implicit_node(root)
    entries = _sysfs.numbered_entries(node_dir, "node", root=root)
    if not entries:
        implicit, problems = _implicit_node(root)
        note = _sysfs.unavailable(
            NAME, f"{root.relative(node_dir)}: no nodeN directories: assuming one node with the online CPUs"
        )
        return implicit, (note, *problems)
    conditions: list[Condition] = []
    beyond = [node_id for node_id, _ in entries if node_id > MAX_NUMA_NODE_ID]
    if beyond:
        entries = [(node_id, directory) for node_id, directory in entries if node_id <= MAX_NUMA_NODE_ID]
        message = (
            f"{root.relative(node_dir)}: {len(beyond)} node directories numbered above {MAX_NUMA_NODE_ID} "
            f"(e.g. node{beyond[0]}), more than Linux has: left out"
        )
        conditions.append(_sysfs.parse_error(NAME, message))
    distance_ids, problem = _distance_order(root, tuple(node_id for node_id, _ in entries))
    conditions += [problem] if problem is not None else []
    nodes: list[NumaNode] = []
    cpu_sets = _sysfs.CpuSets(NAME)
    for node_id, directory in entries:
        # the node's files through one descriptor of its directory, checked against the root once
        path = os.fspath(directory)
        fd = _sysfs.open_checked_directory(root, path)
        try:
            node = _read_node(root, node_id, path, fd, distance_ids, cpu_sets, conditions)
        finally:
            if fd is not None:
                os.close(fd)
        if node is not None:
            nodes.append(node)
    conditions.extend(_overlaps(nodes))
    return tuple(nodes), tuple(conditions)


def _read_node(
    root: HostRoot,
    node_id: int,
    node_dir: str,
    fd: int | None,
    distance_ids: tuple[int, ...],
    cpu_sets: _sysfs.CpuSets,
    conditions: list[Condition],
) -> NumaNode | None:
    """One ``nodeN`` directory (``fd``: its checked descriptor, None to read by path); None, with a
    condition, when its CPU list cannot be had."""
    cpulist_path = root.relative(f"{node_dir}/cpulist")
    try:
        cpulist_text = _sysfs.read_attribute_at(root, fd, "cpulist", f"{node_dir}/cpulist")
    except _sysfs.Unreadable as e:
        conditions.append(_sysfs.unavailable(NAME, f"{e}: node {node_id} left out"))
        return None
    if cpulist_text is None:
        conditions.append(_sysfs.unavailable(NAME, f"{cpulist_path}: missing: node {node_id} left out"))
        return None
    try:
        cpus = cpu_sets.parse(parse_cpulist_text, cpulist_text, cpulist_path)
    except ParseError as e:
        conditions.append(_sysfs.from_parse_error(e))
        return None
    texts: dict[str, str | None] = {}
    for name in ("meminfo", "distance"):
        try:
            texts[name] = _sysfs.read_attribute_at(root, fd, name, f"{node_dir}/{name}")
        except _sysfs.Unreadable as e:
            conditions.append(_sysfs.unavailable(NAME, str(e)))
            texts[name] = None
    memory_bytes: int | None = None
    if texts["meminfo"] is not None:
        try:
            memory_bytes = parse_meminfo_total(
                texts["meminfo"], root.relative(f"{node_dir}/meminfo"), node_id
            )
        except ParseError as e:
            conditions.append(_sysfs.from_parse_error(e))
    distances: tuple[tuple[int, int], ...] = ()
    if texts["distance"] is not None:
        distance_path = root.relative(f"{node_dir}/distance")
        try:
            distances = pair_distances(
                distance_ids, parse_distance(texts["distance"], distance_path), distance_path
            )
        except ParseError as e:
            conditions.append(_sysfs.from_parse_error(e))
    return NumaNode(id=node_id, cpus=cpus, memory_bytes=memory_bytes, distances=distances)


def _distance_order(
    root: HostRoot, directory_ids: tuple[int, ...]
) -> tuple[tuple[int, ...], Condition | None]:
    """The node ids a ``distance`` row is printed for: the ``online`` node list, else the directories.

    The kernel prints one distance per online node; ``online`` normally lists exactly the ``nodeN``
    directories. When it cannot be read or says something else, the directories win.
    """
    path = root.sys(NODE_ONLINE)
    fd = _sysfs.open_checked_directory(root, os.fspath(path.parent))
    try:
        text = _sysfs.read_attribute_at(root, fd, path.name, os.fspath(path))
    except _sysfs.Unreadable as e:
        return directory_ids, _sysfs.unavailable(NAME, str(e))
    finally:
        if fd is not None:
            os.close(fd)
    if text is None:
        return directory_ids, None
    try:
        online = parse_cpulist_text(text, root.relative(path))
    except ParseError as e:
        return directory_ids, _sysfs.from_parse_error(e)
    if online != frozenset(directory_ids):
        message = (
            f"{root.relative(path)} lists nodes {format_cpulist(online)} but the node directories are "
            f"{format_cpulist(directory_ids)}: distances paired with the directories"
        )
        return directory_ids, Condition(source=NAME, reason=ConditionReason.INCONSISTENT, message=message)
    return tuple(sorted(online)), None


def _implicit_node(root: HostRoot) -> tuple[tuple[NumaNode, ...], tuple[Condition, ...]]:
    online_path = root.sys(CPU_ONLINE)
    host_path = root.relative(online_path)
    why = f"no {root.relative(root.sys(NODE_DIR))}"
    try:
        text = _sysfs.read_attribute(root, online_path)
    except _sysfs.Unreadable as e:
        return (), (_sysfs.unavailable(NAME, f"{why}, and {e}"),)
    if text is None:
        return (), (_sysfs.unavailable(NAME, f"{why} and no {host_path}: NUMA layout unknown"),)
    try:
        cpus = parse_cpulist_text(text, host_path)
    except ParseError as e:
        return (), (_sysfs.from_parse_error(e),)
    log.info("%s: one implicit NUMA node 0 with the online CPUs", why, extra={"source": NAME})
    return (NumaNode(id=0, cpus=cpus),), ()


def _overlaps(nodes: list[NumaNode]) -> list[Condition]:
    """One ``Inconsistent`` condition naming the node pairs whose CPU sets overlap (none if none)."""
    pairs = [
        f"{first.id}&{second.id}"
        for i, first in enumerate(nodes)
        for second in nodes[i + 1 :]
        if first.cpus & second.cpus
    ]
    if not pairs:
        return []
    shown = ", ".join(pairs[:6]) + (f" and {len(pairs) - 6} more" if len(pairs) > 6 else "")
    message = (
        f"NUMA nodes share CPUs ({shown}): the kernel's CPU-to-node mapping is not trustworthy "
        "(hwloc calls this buggy NUMA and ignores it)"
    )
    return [Condition(source=NAME, reason=ConditionReason.INCONSISTENT, message=message)]


def _collect(root: HostRoot) -> Facts:
    nodes, conditions = read_numa_nodes(root)
    if not nodes:
        message = "; ".join(c.message for c in conditions) or "no NUMA nodes"
        reason = conditions[0].reason if conditions else ConditionReason.UNAVAILABLE
        facts = failed(NAME, reason, message)
        return Facts(sources=facts.sources, conditions=conditions or facts.conditions)
    message = f"{len(nodes)} NUMA node(s)" + (f", {len(conditions)} problem(s)" if conditions else "")
    return Facts(
        numa_nodes=nodes,
        sources=(SourceStatus(name=NAME, ok=True, message=message),),
        conditions=conditions,
    )


def collect(ctx: Context) -> SourceResult:
    """The NUMA source: ``read_numa_nodes(ctx.root)`` behind the source boundary."""
    return guarded(NAME, lambda: _collect(ctx.root))
