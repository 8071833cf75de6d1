"""``nodetopo export``: the published NodeTopology objects → what gang schedulers read.

Pure functions over ``NodePlace`` values (node name, tier ids nearest first, NVLink domain), read from
NodeTopology objects (``status.network``). Outputs:

* Kueue: a ``Topology`` (``kueue.x-k8s.io/v1beta2``, levels coarsest first, ending in
  ``kubernetes.io/hostname``) and a ``ResourceFlavor`` naming it;
* Volcano: ``HyperNode`` objects (``topology.volcano.sh/v1alpha1``), tier 1 = the leaf groups;
* KAI: a ``Topology`` (``kai.scheduler/v1alpha1``) with the same levels as Kueue's;
* Slurm: ``topology.conf`` for the tree plugin (switches and their nodes) or the block plugin (one block per
  NVLink domain, else per leaf).

Label-based outputs (Kueue, KAI) rely on the ``nodetopo.io/fabric.tier-N`` node labels the agent
writes, or name the keys GFD and topograph write for the same levels (``nodetopo.export.keys``);
object-based ones (Volcano, Slurm) list nodes by name. A node that lacks a level the others have is
reported in ``Export.missing`` (and by the CLI on stderr), never silently dropped: in the tree outputs it
sits under no switch at that level.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from nodetopo.errors import clip
from nodetopo.export.keys import HOSTNAME_LABEL, NODETOPO, NVLINK_LABEL, KeySet, tier_label
from nodetopo.resource.identity import PREFIX as LABEL_PREFIX
from nodetopo.resource.reader import read_nodetopology

__all__ = ["HOSTNAME_LABEL", "NVLINK_LABEL", "KeySet", "tier_label"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class NodePlace:
    """Where one node sits: ``tiers[level]`` = group id (0 = leaf), its NVLink domain, if any."""

    name: str
    tiers: Mapping[int, str]
    tier_names: Mapping[int, str | None] = dataclasses.field(default_factory=dict)
    nvlink_domain: str | None = None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Export:
    """What an exporter produced: Kubernetes objects or a text file, plus the nodes it could not place."""

    objects: tuple[dict[str, Any], ...] = ()
    text: str = ""
    missing: tuple[str, ...] = ()  #: "<node>: no <level>" lines
    notes: tuple[str, ...] = ()  #: what the exporter decided and why (e.g. a level left out)


def places_from_nodetopologies(objects: Iterable[Mapping[str, Any]]) -> tuple[NodePlace, ...]:
    """``NodePlace`` per NodeTopology object (as ``kubectl get ntopo -o json`` gives them)."""
    places: list[NodePlace] = []
    for obj in objects:
        read = read_nodetopology(obj, sections={"network"})
        if not read.node:
            continue
        tiers = read.facts.network.tiers
        domain, _ = read.facts.nvlink_domain or (None, None)
        places.append(
            NodePlace(
                name=read.node,
                tiers={t.level: t.id for t in tiers},
                tier_names={t.level: t.name for t in tiers},
                nvlink_domain=domain,
            )
        )
    return tuple(sorted(places, key=lambda p: p.name))


def tier_groups(
    places: Sequence[NodePlace], level: int, name_of: Callable[[int, str], str]
) -> list[tuple[str, set[str]]]:
    """The groups of tier ``level``, sorted by id, each with its members: the nodes at tier 0, above
    it the groups of the tier below (named by ``name_of(level, id)``) that the group holds."""
    groups: dict[str, set[str]] = {}
    for p in places:
        if level not in p.tiers:
            continue
        if level == 0:
            groups.setdefault(p.tiers[0], set()).add(p.name)
        elif level - 1 in p.tiers:
            groups.setdefault(p.tiers[level], set()).add(name_of(level - 1, p.tiers[level - 1]))
    return sorted(groups.items())


def depth(places: Sequence[NodePlace]) -> int:
    """How many tiers the fleet shows (the deepest node's)."""
    return max((max(p.tiers) + 1 for p in places if p.tiers), default=0)


def missing_levels(places: Sequence[NodePlace], levels: int) -> tuple[str, ...]:
    return tuple(
        f"{p.name}: no {tier_label(level)}" for p in places for level in range(levels) if level not in p.tiers
    )


def nvlink_position(places: Sequence[NodePlace]) -> int | None:
    """Where the NVLink domain nests among the fabric tiers, from the data: the number of fabric
    tiers *above* it (its index among the coarsest-first levels), or None when it does not nest.

    A domain whose nodes all share one leaf (group) sits below tier 0; a leaf whose nodes all share
    one domain (domains span leaves, each domain within one tier-1 group) sits between tier 0 and
    tier 1; and so on up. Levels must nest for a gang scheduler's tree to mean what it says.
    """
    levels = depth(places)
    known = [p for p in places if p.nvlink_domain is not None]
    if not known:
        return None

    def within(child: Callable[[NodePlace], str | None], parent: Callable[[NodePlace], str | None]) -> bool:
        parents: dict[str, set[str | None]] = {}
        for p in known:
            c = child(p)
            if c is not None:
                parents.setdefault(c, set()).add(parent(p))
        return all(len(v) == 1 and None not in v for v in parents.values())

    def domain(p: NodePlace) -> str | None:
        return p.nvlink_domain

    def tier(level: int) -> Callable[[NodePlace], str | None]:
        return lambda p: p.tiers.get(level)

    for level in range(levels):  # below tier `level`: the domain is within one tier-`level` group
        if within(domain, tier(level)) and (level == 0 or within(tier(level - 1), domain)):
            return levels - level
    if within(tier(levels - 1), domain):
        return 0  # above every fabric tier
    return None


def label_levels(
    places: Sequence[NodePlace], *, nvlink: bool = False, keys: KeySet = NODETOPO
) -> tuple[list[str], tuple[str, ...]]:
    """Node label keys, coarsest first, ending with the hostname (Kueue's and KAI's ``levels``), named
    by ``keys``; and notes: the NVLink domain asked for but not nesting with the fabric tiers, a tier
    ``keys`` has no key for (left out: the levels above it are the coarser ones, never a gap), levels
    naming keys nodetopo does not write."""
    levels = depth(places)
    named: list[str | None] = [keys.tier(level) for level in reversed(range(levels))]
    notes: list[str] = []
    unnamed = [level for level in range(levels) if keys.tier(level) is None]
    if unnamed:
        notes.append(f"fabric tier(s) {', '.join(map(str, unnamed))} have no key in {keys.name}: not a level")
    if nvlink:
        position = nvlink_position(places)
        if position is None:
            notes.append(f"{NVLINK_LABEL} does not nest with the fabric tiers: not a level")
        else:
            named.insert(position, keys.nvlink)
    result = [key for key in named if key is not None]
    foreign = [key for key in result if not key.startswith(LABEL_PREFIX)]
    if foreign:
        notes.append(
            f"levels name keys nodetopo does not write ({', '.join(foreign)}): a node without them is "
            f"outside the Topology"
        )
    return [*result, HOSTNAME_LABEL], tuple(notes)


# --------------------------------------------------------------------------------------------
# Kueue and KAI
# --------------------------------------------------------------------------------------------


def _levels_topology(api_version: str, name: str, levels: Sequence[str]) -> dict[str, Any]:
    """A ``Topology`` of ``api_version`` (Kueue's, KAI's: the same shape) whose levels are node labels."""
    return {
        "apiVersion": api_version,
        "kind": "Topology",
        "metadata": {"name": name},
        "spec": {"levels": [{"nodeLabel": level} for level in levels]},
    }


def kueue(
    places: Sequence[NodePlace],
    *,
    name: str = "nodetopo",
    flavor: str = "nodetopo",
    flavor_node_labels: Mapping[str, str] | None = None,
    nvlink: bool = False,
    keys: KeySet = NODETOPO,
) -> Export:
    levels, notes = label_levels(places, nvlink=nvlink, keys=keys)
    topology = _levels_topology("kueue.x-k8s.io/v1beta2", name, levels)
    spec: dict[str, Any] = {"topologyName": name}
    if flavor_node_labels:
        spec["nodeLabels"] = dict(flavor_node_labels)
    resource_flavor = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": flavor},
        "spec": spec,
    }
    missing = missing_levels(places, depth(places))
    if nvlink and keys.nvlink in levels:
        missing += tuple(f"{p.name}: no {NVLINK_LABEL}" for p in places if p.nvlink_domain is None)
    return Export(objects=(topology, resource_flavor), missing=missing, notes=notes)


def kai(
    places: Sequence[NodePlace], *, name: str = "nodetopo", nvlink: bool = False, keys: KeySet = NODETOPO
) -> Export:
    levels, notes = label_levels(places, nvlink=nvlink, keys=keys)
    topology = _levels_topology("kai.scheduler/v1alpha1", name, levels)
    return Export(objects=(topology,), missing=missing_levels(places, depth(places)), notes=notes)


# --------------------------------------------------------------------------------------------
# Volcano HyperNodes
# --------------------------------------------------------------------------------------------

_DNS = re.compile(r"[^a-z0-9-]+")


def hypernode_name(level: int, group: str) -> str:
    """A DNS-1123 name for a tier group: ``t<level>-<id>``. When the id is not one already (upper
    case, other characters) or the name would be longer than 63, a hash of the id is appended:
    ``RackA`` and ``racka`` are two groups, and two HyperNodes (``t0-racka-<hash>``, ``t0-racka``)."""
    base = _DNS.sub("-", group.lower()).strip("-") or "group"
    name = base if base.startswith(f"t{level}-") else f"t{level}-{base}"
    if len(name) > 63 or base != group:
        name = f"t{level}-{base[:40].strip('-')}-{hashlib.sha256(group.encode()).hexdigest()[:12]}"
    return name


def volcano(places: Sequence[NodePlace]) -> Export:
    """HyperNodes: Volcano tier 1 = nodetopo tier 0 (members: Nodes); tier n+1 = tier n (HyperNodes)."""
    levels = depth(places)
    objects: list[dict[str, Any]] = []
    for level in range(levels):
        for group, members in tier_groups(places, level, hypernode_name):
            objects.append(
                {
                    "apiVersion": "topology.volcano.sh/v1alpha1",
                    "kind": "HyperNode",
                    "metadata": {
                        "name": hypernode_name(level, group),
                        "labels": {"app.kubernetes.io/managed-by": "nodetopo"},
                    },
                    "spec": {
                        "tier": level + 1,
                        "tierName": tier_label(level),
                        "members": [
                            {
                                "type": "Node" if level == 0 else "HyperNode",
                                "selector": {"exactMatch": {"name": m}},
                            }
                            for m in sorted(members)
                        ],
                    },
                }
            )
    return Export(objects=tuple(objects), missing=missing_levels(places, levels))


# --------------------------------------------------------------------------------------------
# Slurm topology.conf
# --------------------------------------------------------------------------------------------

_NUMBERED = re.compile(r"^(.*?)(\d+)$")
#: a node name Slurm's topology.conf can hold (a hostname: no space, comma, bracket or newline)
_SLURM_NODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")


def _slurm_nodes(places: Sequence[NodePlace]) -> tuple[list[NodePlace], list[str]]:
    """The places whose node name a ``topology.conf`` line can hold, and a ``missing`` line for
    each other one (its name escaped): a newline in a name would start a line of its own."""
    kept, refused = [], []
    for p in places:
        if _SLURM_NODE.fullmatch(p.name):
            kept.append(p)
        else:
            refused.append(f"{clip(p.name, 80)}: not a Slurm node name (letters, digits, '.', '_', '-')")
    return kept, refused


def hostlist(names: Iterable[str]) -> str:
    """Slurm's compressed hostlist: ``a-c01,a-c02,a-c03,a-c07`` → ``a-c[01-03,07]`` (zero padding kept)."""
    by_prefix: dict[tuple[str, int], list[int]] = {}
    plain: list[str] = []
    for name in sorted(set(names)):
        match = _NUMBERED.match(name)
        if match is None:
            plain.append(name)
            continue
        by_prefix.setdefault((match[1], len(match[2])), []).append(int(match[2]))
    parts = list(plain)
    for (prefix, width), numbers in sorted(by_prefix.items()):
        numbers.sort()
        if len(numbers) == 1:
            parts.append(f"{prefix}{numbers[0]:0{width}d}")
            continue
        ranges: list[str] = []
        start = prev = numbers[0]
        for n in [*numbers[1:], None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            ranges.append(f"{start:0{width}d}" if start == prev else f"{start:0{width}d}-{prev:0{width}d}")
            if n is not None:
                start = prev = n
        parts.append(f"{prefix}[{','.join(ranges)}]")
    return ",".join(sorted(parts))


def slurm_switch_name(level: int, group: str) -> str:
    """Slurm switch names: the id as is when Slurm-safe (``S-2c5e...``), else hashed."""
    if re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", group):
        return group
    return f"t{level}-{hashlib.sha256(group.encode()).hexdigest()[:16]}"


def slurm_tree(places: Sequence[NodePlace]) -> Export:
    """``topology/tree``: a ``SwitchName`` per group; leaves list ``Nodes=``, tiers above ``Switches=``."""
    places, refused = _slurm_nodes(places)
    levels = depth(places)
    lines: list[str] = []
    for level in reversed(range(levels)):
        for group, members in tier_groups(places, level, slurm_switch_name):
            key = "Nodes" if level == 0 else "Switches"
            value = hostlist(members) if level == 0 else ",".join(sorted(members))
            lines.append(f"SwitchName={slurm_switch_name(level, group)} {key}={value}")
    missing = (*refused, *missing_levels(places, levels))
    return Export(text="".join(line + "\n" for line in lines), missing=missing)


def slurm_block(places: Sequence[NodePlace], *, block_size: int | None = None) -> Export:
    """``topology/block``: one ``BlockName`` per NVLink domain, else per leaf (tier 0)."""
    blocks: dict[str, set[str]] = {}
    places, missing = _slurm_nodes(places)
    for p in places:
        key = p.nvlink_domain or p.tiers.get(0)
        if key is None:
            missing.append(f"{p.name}: no {NVLINK_LABEL} and no {tier_label(0)}")
            continue
        blocks.setdefault(key, set()).add(p.name)
    lines = [
        f"BlockName={slurm_switch_name(0, key)} Nodes={hostlist(nodes)}"
        for key, nodes in sorted(blocks.items())
    ]
    if block_size:
        lines.append(f"BlockSizes={block_size}")
    return Export(text="".join(line + "\n" for line in lines), missing=tuple(missing))
