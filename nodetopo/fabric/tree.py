"""The InfiniBand fabric as a tree: switch tiers, the fabric map, and a host's place in it (pure).

``classify`` assigns switch tiers from the switch graph: a *leaf* (tier 0) is a switch cabled to a
host channel adapter (SHARP aggregation nodes are not hosts) that does not connect other such
switches to each other, tier n+1 a switch cabled to tier n. A spine or core switch with a storage
server, a login node or a UFM host on it is therefore not a leaf. Loopback cables (a switch port
cabled to another port of the same switch) are not tree edges. ``fabric_map`` is what
``nodetopo fabric`` writes once from a sweep (every host port GUID → its switch and port, each such switch's
tier groups above) and ``parse_fabric_map`` what every agent reads; ``position_from_map`` and
``position_from_linkinfo`` join a host's own ports with a map or with the answer of the switch at a
port's far end.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Mapping, Sequence

from nodetopo.errors import ParseError
from nodetopo.fabric.ibdiags import (
    NAME,
    IbFabric,
    guid_text,
    parse_guid,
    parse_iblinkinfo,
    switch_name,
)
from nodetopo.jsonread import load_json
from nodetopo.model import FabricTier, NetworkObservation, SwitchPort


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Classified:
    """Switch tiers of a fabric: ``tier[guid]`` (0 = leaf); ``edges`` between switches (no loops)."""

    tier: Mapping[int, int]
    edges: frozenset[tuple[int, int]]  #: (lower guid, higher guid), switch–switch, loopbacks dropped
    hosts: Mapping[int, str | None]  #: host CA guid → hostname (None for a default description)


def classify(fabric: IbFabric) -> Classified:
    """Leaves are the host switches that do not connect others; tier n+1 switches are cabled to tier n."""
    kinds = {n.guid: n for n in fabric.nodes}
    hosts = {n.guid: n.name for n in fabric.nodes if n.kind == "ca" and not n.aggregation_node}
    edges: set[tuple[int, int]] = set()
    cabled: set[int] = set()  # switches with a host CA on them
    for end in fabric.links:
        if end.peer_guid is None or end.peer_guid == end.guid:
            continue  # unconnected, or a loopback cable to the same switch
        a, b = kinds.get(end.guid), kinds.get(end.peer_guid)
        if a is None or b is None:
            continue
        if a.kind == "switch" and b.kind == "switch":
            edges.add((min(a.guid, b.guid), max(a.guid, b.guid)))
        elif a.kind == "switch" and b.guid in hosts:
            cabled.add(a.guid)
        elif b.kind == "switch" and a.guid in hosts:
            cabled.add(b.guid)
    adjacent: dict[int, set[int]] = {}
    for low, high in edges:
        adjacent.setdefault(low, set()).add(high)
        adjacent.setdefault(high, set()).add(low)
    tier = {g: 0 for g in _leaves(cabled, adjacent)}
    level = 0
    frontier = set(tier)
    while frontier:
        nxt = {there for here in frontier for there in adjacent.get(here, ()) if there not in tier}
        level += 1
        for g in nxt:
            tier[g] = level
        frontier = nxt
    return Classified(tier=tier, edges=frozenset(edges), hosts=hosts)


def _distances(start: int, adjacent: Mapping[int, set[int]]) -> dict[int, int]:
    """Switch hops from ``start`` to every switch it reaches (breadth-first)."""
    seen = {start: 0}
    frontier = [start]
    while frontier:
        nxt: list[int] = []
        for here in frontier:
            for there in adjacent.get(here, ()):
                if there not in seen:
                    seen[there] = seen[here] + 1
                    nxt.append(there)
        frontier = nxt
    return seen


def _leaves(cabled: set[int], adjacent: Mapping[int, set[int]]) -> set[int]:
    """The switches with hosts that are leaves: those that do not connect leaves to each other.

    A switch with hosts on it is a spine (or a core) when two other leaves, both at its nearest
    distance k, are 2k apart: it lies on a shortest path between them, as a spine lies between two
    leaves (k = 1) and a core between two pods' leaves (k = 2). A leaf's nearest leaves reach each
    other through the switches above, never only through it. Switches are judged most central first
    (smallest mean distance to the other switches with hosts), and one found to be a spine no longer
    counts as a leaf for those judged after it: two spines with storage on them do not make the leaf
    between them a spine. Two switches with hosts on both, cabled only to each other, stay leaves
    (neither connects two others).
    """
    far = {g: _distances(g, adjacent) for g in cabled}

    def centrality(g: int) -> tuple[float, int]:
        others = [d for o, d in far[g].items() if o in cabled and o != g]
        return (sum(others) / len(others) if others else float("inf"), g)

    leaves = set(cabled)
    for s in sorted(cabled, key=centrality):
        near = {o: d for o, d in far[s].items() if o in leaves and o != s}
        if len(near) < 2:
            continue
        k = min(near.values())
        nearest = sorted(o for o, d in near.items() if d == k)
        if any(far[a].get(b) == 2 * k for i, a in enumerate(nearest) for b in nearest[i + 1 :]):
            leaves.discard(s)
    return leaves


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


# --------------------------------------------------------------------------------------------
# The fabric map: what `nodetopo fabric` writes once and every agent reads
# --------------------------------------------------------------------------------------------

MAP_KIND = "nodetopo.io/fabric-map"
#: a ConfigMap holds at most 1 MiB; a map read from a file may be larger (a mounted volume), not unbounded
MAP_LIMIT = 64 << 20
MAP_VERSION = 1


def fabric_map(fabric: IbFabric) -> dict[str, object]:
    """A JSON-able map: every host port GUID → its switch (and port), and each such switch's tiers above.

    A host's switch is its leaf, or a spine or core when the host (a storage server, a UFM host) is
    cabled straight into one; ``leafTiers`` lists, for every switch with a host on it, the groups of
    the tiers above that switch (none above a top-tier switch).

    Size is linear in the number of host ports and switches, so a 4,000-node fabric fits in a
    ConfigMap (about 100 bytes per port).
    """
    classified = classify(fabric)
    groups = tier_groups(classified)
    nodes = {n.guid: n for n in fabric.nodes}
    ports: dict[str, list[object]] = {}
    below: set[int] = set()  # switches with a host on them: leaves, and spines or cores with servers
    for end in fabric.links:
        if end.peer_guid is None:
            continue
        for ca, ca_port_guid, switch, switch_port in (
            (end.guid, end.port_guid, end.peer_guid, end.peer_port),
            (end.peer_guid, end.peer_port_guid, end.guid, end.port),
        ):
            if ca in classified.hosts and ca_port_guid is not None and switch in classified.tier:
                ports[guid_text(ca_port_guid)] = [guid_text(switch), switch_port]
                below.add(switch)
    switches: dict[str, dict[str, object]] = {}
    for guid, level in sorted(classified.tier.items()):
        node = nodes.get(guid)
        entry: dict[str, object] = {"tier": level, "name": node.name if node else None}
        if level >= 1:
            entry["group"] = group_id(level, groups[level][guid])
        switches[guid_text(guid)] = entry
    leaves: dict[str, list[str]] = {}
    for guid in sorted(below):
        level = classified.tier[guid]
        chain: list[str] = []
        current = {guid}
        for above in range(level + 1, max(groups, default=0) + 1):
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
    ports: Mapping[int, tuple[int, int | None]]  #: host port GUID → (its switch's GUID, port)
    switch_names: Mapping[int, str | None]
    switch_tier: Mapping[int, int]
    leaf_tiers: Mapping[int, tuple[str, ...]]  #: host's switch GUID → group ids of the tiers above it


def parse_fabric_map(text: str, path: str = "fabric map") -> FabricMap:
    """Read a map written by ``fabric_map`` (``nodetopo fabric``); garbage is a ``ParseError``."""
    data = load_json(text, source=NAME, path=path, max_chars=MAP_LIMIT)
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
