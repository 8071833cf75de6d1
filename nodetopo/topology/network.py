"""The node's place in the network: joins what the fabric sources observed (pure).

Precedence for the tiers (the labels ``nodetopo.io/fabric.tier-N``): InfiniBand, then LLDP, then
cloud metadata — the nearer to the cable, the better. Only one source's tier chain is published,
so tier ids never mix namespaces. Per NIC, every source's neighbour is kept; two sources naming
different switches for the same NIC port is an ``Inconsistent`` condition (``Consistent=False``)
and no tier is published at all that round (the labels keep their last agreed values).

The NVLink domain (``<clusterUUID>.<cliqueID>``) comes from the GPUs' fabric info; it is healthy
only when the driver says the fabric is (``health`` HEALTHY), unknown when it says nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from nodetopo.model import (
    Condition,
    ConditionReason,
    FabricInfo,
    FabricTier,
    Facts,
    NetworkObservation,
    NetworkPosition,
    Nic,
)

SOURCE = "fabric"
PRECEDENCE = ("fabric.ib", "fabric.lldp", "fabric.cloud")


def network_position(
    facts: Facts, nics: Sequence[Nic] = (), gpu_nics: frozenset[str] = frozenset()
) -> tuple[NetworkPosition, tuple[Condition, ...]]:
    """Join the fabric observations. ``gpu_nics``: the NICs nearest to the GPUs (the GPU fabric)."""
    observations = facts.network
    neighbours = tuple(
        sorted(
            (n for o in observations for n in o.neighbours),
            key=lambda n: (n.nic, n.port or 0, n.source),
        )
    )
    conditions: list[Condition] = []
    by_nic: dict[str, dict[str, set[str]]] = {}
    netdev_of = {n.name: n.netdev for n in nics if n.netdev}
    for n in neighbours:
        if n.switch_id:
            by_nic.setdefault(netdev_of.get(n.nic) or n.nic, {}).setdefault(n.source, set()).add(n.switch_id)
    disputed: set[str] = set()
    for nic, seen in sorted(by_nic.items()):
        sources = sorted(seen)
        if any(not seen[a] & seen[b] for i, a in enumerate(sources) for b in sources[i + 1 :]):
            disputed.update(sources)
            said = ", ".join(f"{src} says {'/'.join(sorted(seen[src]))}" for src in sources)
            conditions.append(
                Condition(source=SOURCE, reason=ConditionReason.INCONSISTENT, message=f"{nic}: {said}")
            )
    tiers: tuple[FabricTier, ...] = ()
    tier_source: str | None = None
    for name in PRECEDENCE if not disputed else ():
        chosen = _tiers_of(observations, name, nics, gpu_nics)
        if chosen:
            tiers, tier_source = chosen, name
            break
    return NetworkPosition(neighbours=neighbours, tiers=tiers, tier_source=tier_source), tuple(conditions)


def _tiers_of(
    observations: Sequence[NetworkObservation], source: str, nics: Sequence[Nic], gpu_nics: frozenset[str]
) -> tuple[FabricTier, ...]:
    for o in observations:
        if o.source != source or not o.tiers:
            continue
        if source == "fabric.lldp" and gpu_nics:
            # Only the GPU fabric's NICs place a GPU node: a storage or management NIC's switch
            # would split nodes that share a compute leaf.
            netdevs = {n.netdev for n in nics if n.name in gpu_nics and n.netdev} | set(gpu_nics)
            switches = sorted(
                {
                    (n.switch_id, n.switch_name)
                    for n in o.neighbours
                    if n.nic in netdevs and n.peer_is_switch and n.switch_id
                }
            )
            if switches and len(switches) < len({n.switch_id for n in o.neighbours if n.peer_is_switch}):
                # here, not at the top: importing a source module runs nodetopo.sources, every source,
                # and nodetopo.resource (so the extender and Ray) imports this module
                from nodetopo.sources.fabric.lldp import group_tier

                return (group_tier(switches),)
        return o.tiers
    return ()


def nvlink_domain(fabric: FabricInfo | None) -> tuple[str | None, bool | None]:
    """``(<clusterUUID>.<cliqueID>, healthy)``; (None, None) outside a multi-node NVLink domain."""
    if fabric is None or fabric.state != "COMPLETED" or not fabric.cluster_uuid.strip("0-"):
        return None, None
    health = (fabric.health or "").upper()
    healthy = None if health in ("", "NOT_SUPPORTED") else health == "HEALTHY"
    return f"{fabric.cluster_uuid}.{fabric.clique_id}", healthy
