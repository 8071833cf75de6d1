"""The NodeTopology body: ``Topology`` → the object ``crds/nodetopology.yaml`` describes.

The body is the contract of ``crds/nodetopology.yaml``: ``nodetopo discover -o json`` prints exactly
this object, the agent applies it, and the consumers read it back (``nodetopo.resource.reader``);
``topology_from_nodetopology`` is the inverse, for the views that render a ``Topology``.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from typing import Any

from nodetopo import __version__
from nodetopo.model import (
    Condition,
    ConditionReason,
    EdgeHealth,
    EdgeKind,
    Gpu,
    GpuAllocation,
    GpuLink,
    GpuNicDistance,
    LinkClass,
    LinkState,
    Nic,
    NumaNode,
    PodRef,
    SourceStatus,
    Topology,
    format_cpulist,
)
from nodetopo.resource.conditions import NOT_READY_REASONS, condition_type, conditions, unique_sources
from nodetopo.resource.identity import API_VERSION, KIND
from nodetopo.resource.limits import (
    MAX_EDGES,
    MAX_GPU_LINKS,
    MAX_HOLDERS,
    MAX_MESSAGE,
    MAX_NEIGHBOURS,
    MAX_RATES,
    MAX_REASONS,
    MAX_RESOURCES,
    MAX_SOURCE_MESSAGE,
    MAX_STATE,
    MAX_TEXT,
    MAX_TIER_MEMBERS,
    MAX_TIERS,
)
from nodetopo.resource.published import ALL, PublishedCondition, ResourceError
from nodetopo.resource.reader import read_nodetopology
from nodetopo.topology.network import nvlink_domain


def to_nodetopology(
    topology: Topology, node_name: str, allocation: GpuAllocation | None = None
) -> dict[str, Any]:
    """The complete NodeTopology object for ``node_name`` (no ownerReferences: the publisher adds them).

    With ``allocation`` (the agent on a node whose kubelet it can ask), ``status.allocation`` says
    whether the holders are known, and, when they are, every GPU and MIG device has ``heldBy`` (an
    empty list: free). Without it neither field is written: who holds what is not a fact of
    discovery (``nodetopo discover``, bundles).
    """
    status: dict[str, Any] = {
        "nodeName": node_name,
        "agentVersion": __version__,
        "summary": summary(topology),
        "gpus": _gpus(topology),
        "nics": [_nic(n) for n in topology.nics],
        "nvlinkIslands": [
            {
                "id": i.id,
                "gpus": list(i.gpus),
                "linksPerPair": i.links_per_pair,
                "fullyConnected": i.fully_connected,
                "nvswitch": i.nvswitch,
            }
            for i in topology.nvlink_islands
        ],
        **_gpu_links(topology.gpu_links),
        "numaNodes": [_numa(n) for n in topology.numa_nodes],
        "migDevices": [
            {
                "uuid": m.uuid,
                "parentUUID": m.parent_uuid,
                "parentIndex": m.parent_index,
                "profile": m.profile,
                "gpuInstance": m.gpu_instance,
                "computeInstance": m.compute_instance,
            }
            for m in topology.mig_devices
        ],
        "preferredGPUSets": [
            {"size": p.size, "sets": [list(s) for s in p.sets]} for p in topology.preferred_gpu_sets
        ],
        "fabric": (
            {
                "clusterUUID": topology.fabric.cluster_uuid,
                "cliqueID": topology.fabric.clique_id,
                "state": topology.fabric.state,
                "health": topology.fabric.health,
            }
            if topology.fabric is not None
            else None
        ),
        "network": network(topology),
        **_health(topology),
        "sources": [_source(s) for s in unique_sources(topology.sources)],
        "conditions": conditions(topology),
    }
    if allocation is not None:
        status["allocation"] = _allocation(allocation, status)
    status["contentHash"] = content_hash(status)
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": node_name, "labels": {"app.kubernetes.io/managed-by": "nodetopo"}},
        "status": status,
    }


def _gpu_links(links: tuple[GpuLink, ...] | None) -> dict[str, Any]:
    """``{"gpuLinks": [...]}``, or nothing when the links are unknown or more than the schema holds."""
    if links is None or len(links) > MAX_GPU_LINKS:
        return {}
    return {
        "gpuLinks": [
            {
                "a": link.a,
                "b": link.b,
                **({"nvlinks": link.nvlinks} if link.nvlinks else {}),
                **({"pcie": link.pcie.name} if link.pcie is not None else {}),
            }
            for link in links
        ]
    }


def _holders(holders: tuple[PodRef, ...]) -> list[dict[str, str]]:
    return [
        {"namespace": h.namespace, "name": h.name, "container": h.container} for h in holders[:MAX_HOLDERS]
    ]


def _allocation(allocation: GpuAllocation, status: dict[str, Any]) -> dict[str, Any]:
    """``status.allocation``, and ``heldBy`` on every GPU and MIG device of ``status`` when known."""
    message = allocation.message
    if allocation.known:
        gpus = dict(allocation.gpu_holders)
        migs = dict(allocation.mig_holders)
        for gpu in status["gpus"]:
            gpu["heldBy"] = _holders(gpus.get(gpu["index"], ()))
        for mig in status["migDevices"]:
            mig["heldBy"] = _holders(migs.get(mig["uuid"], ()))
        crowded = [i for i, h in allocation.gpu_holders if len(h) > MAX_HOLDERS]
        if crowded:
            cut = (
                f"GPU(s) {', '.join(map(str, crowded))} have more than {MAX_HOLDERS} holders; the list is cut"
            )
            message = f"{message}; {cut}" if message else cut
    return {
        "state": "Known" if allocation.known else "Unknown",
        "source": "kubelet-podresources",
        "message": _bounded(message) or "",
        "resources": [
            {"name": r.name, "allocatable": r.allocatable, "allocated": r.allocated}
            for r in allocation.resources[:MAX_RESOURCES]
        ],
    }


def _health(topology: Topology) -> dict[str, Any]:
    """``{"health": ...}``: the edges judged, the degraded ones, the counter baseline; nothing when the
    links were not judged. Compact on a healthy node: a count, an empty list, the baseline's non-zero
    counters only."""
    report = topology.health
    if not report.judged:
        return {}
    placed: dict[tuple[str, int | str], str] = {
        ("gpu", g.index): str(g.address) for g in topology.gpus if g.address is not None
    }
    placed.update({("nic", n.name): str(n.address) for n in topology.nics if n.address is not None})
    health: dict[str, Any] = {
        "checked": report.checked,
        "degraded": [edge_json(e, placed) for e in report.degraded[:MAX_EDGES]],
    }
    if report.baseline is not None:
        health["baseline"] = {
            "at": report.baseline.at,
            "edges": report.baseline.edges,
            "counters": {edge: dict(values) for edge, values in report.baseline.counters[:MAX_EDGES]},
        }
        if report.baseline.boot:
            health["baseline"]["boot"] = report.baseline.boot
    return {"health": health}


def _state(state: LinkState) -> dict[str, Any]:
    pairs = (
        ("width", state.width),
        ("speedGTs", state.gts),
        ("links", state.links),
        ("rateGbps", state.rate_gbps),
        ("state", state.state[:MAX_STATE] if state.state is not None else None),
    )
    return {key: value for key, value in pairs if value is not None}


def edge_json(e: EdgeHealth, placed: Mapping[tuple[str, int | str], str] | None = None) -> dict[str, Any]:
    """One degraded edge as ``status.health.degraded[]`` holds it (absent keys: not known, or said
    once elsewhere). Each fact once: ``device`` is left out when it is the edge's own (``GPU3`` of
    ``GPU3/pcie``), ``gpu`` when the device is ``GPU<gpu>``, a port's ``nic`` when it is the device,
    ``port`` when the edge is ``<device>/port<port>``, ``pciBusID`` when it is the ``pciBusID`` the
    edge's GPU (else its NIC) has in ``status.gpus`` (``status.nics``; ``placed``: by ``("gpu", index)``
    and ``("nic", name)``). The reader gives each back."""
    device = e.edge.partition("/")[0]
    out: dict[str, Any] = {"edge": _bounded(e.edge), "kind": e.kind.value}
    if e.device != device:
        out["device"] = _bounded(e.device)
    address = str(e.address) if e.address is not None else None
    owner = ("gpu", e.gpu) if e.gpu is not None else ("nic", e.nic) if e.nic is not None else None
    if address is not None and owner is not None and (placed or {}).get(owner) == address:
        address = None
    optional = (
        ("gpu", e.gpu if e.device != f"GPU{e.gpu}" else None),
        ("nic", e.nic if not (e.kind is EdgeKind.PORT and e.nic == e.device) else None),
        ("pciBusID", address),
        ("port", e.port if e.edge != f"{e.device}/port{e.port}" else None),
        ("peer", _bounded(e.peer)),
    )
    out.update({key: value for key, value in optional if value is not None})
    out["reasons"] = list(e.reasons[:MAX_REASONS])
    out["message"] = e.message if len(e.message) <= MAX_MESSAGE else e.message[: MAX_MESSAGE - 3] + "..."
    out["observed"] = _state(e.observed)
    out["capability"] = _state(e.capability)
    if e.since is not None:
        out["since"] = e.since
    if e.rates:
        out["rates"] = [{"counter": r.counter, "perHour": r.per_hour} for r in e.rates[:MAX_RATES]]
    return out


def network(topology: Topology) -> dict[str, Any]:
    """``status.network``: the NVLink domain, the tiers above the node (nearest first), per-NIC neighbours."""
    domain, healthy = nvlink_domain(topology.fabric)
    position = topology.network
    return {
        "nvlinkDomain": {"id": domain, "healthy": healthy} if domain is not None else None,
        "tierSource": position.tier_source,
        "tiers": [
            {
                "level": t.level,
                "id": _bounded(t.id),
                "name": _bounded(t.name),
                "members": [_bounded(m) for m in t.members[:MAX_TIER_MEMBERS]],
            }
            for t in position.tiers[:MAX_TIERS]
        ],
        "neighbours": [
            {
                "nic": n.nic,
                "port": n.port,
                "source": n.source,
                "state": n.state,
                "switchID": _bounded(n.switch_id),
                "switchName": _bounded(n.switch_name),
                "switchPort": _bounded(n.switch_port),
                "peerIsSwitch": n.peer_is_switch,
            }
            for n in position.neighbours[:MAX_NEIGHBOURS]
        ],
    }


def _bounded(text: str | None) -> str | None:
    """A free-text fact (LLDP names come from the network) cut to the schema's maxLength."""
    if text is None or len(text) <= MAX_TEXT:
        return text
    return text[: MAX_TEXT - 3] + "..."


def content_hash(status: dict[str, Any]) -> str:
    """sha256 of the status, ignoring the hash itself and condition timestamps."""
    stripped = {k: v for k, v in status.items() if k != "contentHash"}
    stripped["conditions"] = [
        {k: v for k, v in c.items() if k not in ("lastTransitionTime", "observedGeneration")}
        for c in status.get("conditions", [])
    ]
    encoded = json.dumps(stripped, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(encoded).hexdigest()


def islands_text(topology: Topology) -> str:
    """``1x8``, ``4x2``, ``1x4,2x2`` (largest first), or ``""`` without NVLink."""
    sizes = Counter(len(i.gpus) for i in topology.nvlink_islands)
    return ",".join(f"{count}x{size}" for size, count in sorted(sizes.items(), reverse=True))


def worst_nic_distance(topology: Topology) -> LinkClass | None:
    """The worst, over GPUs, of each GPU's best NIC class (None without GPUs or NICs)."""
    classes = [g.nic_distance for g in topology.gpus if g.nic_distance is not None]
    return max(classes) if classes else None


def model_of(topology: Topology) -> str | None:
    models = Counter(g.model for g in topology.gpus if g.model)
    return sorted(models.items(), key=lambda kv: (-kv[1], kv[0]))[0][0] if models else None


def summary(topology: Topology) -> dict[str, Any]:
    worst = worst_nic_distance(topology)
    return {
        "gpuCount": len(topology.gpus),
        "gpuModel": model_of(topology),
        "islands": islands_text(topology),
        "nvswitch": any(i.nvswitch for i in topology.nvlink_islands),
        "rdmaNICs": sum(1 for n in topology.nics if n.rdma),
        "worstNICDistance": worst.name if worst is not None else None,
        "migDevices": len(topology.mig_devices),
        # every Linux host has a NUMA node: none means the NUMA layout is unknown (no sysfs), not 0
        "numaNodes": len(topology.numa_nodes) or None,
    }


def _cpulist(ids: AbstractSet[int] | None) -> str | None:
    return format_cpulist(ids) if ids is not None else None


def _gpus(topology: Topology) -> list[dict[str, Any]]:
    """``status.gpus``: each fact once. ``nicDistances`` is the GPU's row of the GPU×NIC matrix, one
    class per entry of ``status.nics`` in that order (null: not known); ``numaAffinity`` is left out
    when it is exactly ``numaNode``, ``cpuAffinity`` when it is exactly the CPUs of those NUMA nodes
    (the reader gives them back: written out, the two repeated ``numaNodes`` on every GPU).
    ``degradedNICs`` names, in ``status.nics`` order, the NICs whose path from the GPU crosses a
    degraded edge (``status.health``): their class says where they are, not a path to count on. It is
    written only when there is one (absent: none degraded, or the links not judged)."""
    column = {n.name: i for i, n in enumerate(topology.nics)}
    rows: dict[int, list[str | None]] = {g.index: [None] * len(column) for g in topology.gpus}
    degraded: dict[int, list[str]] = {g.index: [] for g in topology.gpus}
    for d in topology.gpu_nic_distances:
        row, at = rows.get(d.gpu), column.get(d.nic)
        if row is not None and at is not None:
            row[at] = d.distance.name
            if not d.healthy:
                degraded[d.gpu].append(d.nic)
    numa_cpus = {n.id: n.cpus for n in topology.numa_nodes}
    return [
        _gpu(g, rows[g.index], sorted(degraded[g.index], key=column.__getitem__), numa_cpus)
        for g in topology.gpus
    ]


def implied_cpus(
    numa: AbstractSet[int] | None, numa_cpus: Mapping[int, AbstractSet[int]]
) -> frozenset[int] | None:
    """The CPUs of the NUMA nodes ``numa`` (None: not every one of them is known)."""
    if not numa or any(n not in numa_cpus for n in numa):
        return None
    return frozenset().union(*(numa_cpus[n] for n in numa))


def _gpu(
    g: Gpu, nic_row: list[str | None], degraded: list[str], numa_cpus: Mapping[int, AbstractSet[int]]
) -> dict[str, Any]:
    out = {
        "index": g.index,
        "uuid": g.uuid,
        "model": g.model,
        "pciBusID": str(g.address) if g.address is not None else None,
        "pcieRoot": g.pcie_root,
        "numaNode": g.numa_node,
        "numaAffinity": _cpulist(g.numa_affinity),
        "gpuNumaNode": g.gpu_numa_node,
        "cpuAffinity": _cpulist(g.cpu_affinity),
        "memoryBytes": g.memory_bytes,
        "island": g.island,
        "nearestNICs": list(g.nearest_nics),
        "nicDistance": g.nic_distance.name if g.nic_distance is not None else None,
        "nicDistances": nic_row,
        **({"degradedNICs": degraded} if degraded else {}),
        "migEnabled": g.mig_enabled,
    }
    if g.numa_affinity is not None and g.numa_node is not None and g.numa_affinity == {g.numa_node}:
        del out["numaAffinity"]
    if g.cpu_affinity is not None and g.cpu_affinity == implied_cpus(g.numa_affinity, numa_cpus):
        del out["cpuAffinity"]
    return out


def _nic(n: Nic) -> dict[str, Any]:
    return {
        "name": n.name,
        "netdev": n.netdev,
        "pciBusID": str(n.address) if n.address is not None else None,
        "pcieRoot": n.pcie_root,
        "numaNode": n.numa_node,
        "linkLayer": n.link_layer if n.link_layer in ("InfiniBand", "Ethernet") else None,
        "state": n.state,
        "rateGbps": n.rate_gbps,
        "rdma": n.rdma,
    }


def _numa(n: NumaNode) -> dict[str, Any]:
    return {
        "id": n.id,
        "cpus": format_cpulist(n.cpus),
        "memoryBytes": n.memory_bytes,
        "distances": [{"node": other, "distance": d} for other, d in n.distances],
    }


def _source(s: SourceStatus) -> dict[str, Any]:
    message = (
        s.message if len(s.message) <= MAX_SOURCE_MESSAGE else s.message[: MAX_SOURCE_MESSAGE - 3] + "..."
    )
    return {"name": s.name, "ok": s.ok, "message": message}


# --------------------------------------------------------------------------------------------
# The inverse: a published body back into a ``Topology`` (``kubectl ntopo`` renders it)
# --------------------------------------------------------------------------------------------

#: What the round trip reads: every section but the allocation and the summary (not facts of a scan).
TOPOLOGY_SECTIONS = ALL - {"allocation", "summary"}


def topology_from_nodetopology(body: Mapping[str, Any]) -> Topology:
    """The inverse of ``to_nodetopology``: what the object says, as the ``Topology`` every view renders.

    The object carries no PCIe tree (``pci_devices`` is empty); ``gpu_links`` is None when the object
    has no ``gpuLinks`` (a node of over 64 GPUs, an older agent). Everything else round-trips:
    ``to_nodetopology(topology_from_nodetopology(b), name)`` has ``b``'s status. A source condition
    whose status is False becomes that source's condition again (with its reason), so Ready and
    Consistent are recomputed from the same facts.
    Raises ``ResourceError`` naming the field when the body is not a NodeTopology status: the first
    problem the reader found there (a round trip of part of an object would not be one).
    """
    read = read_nodetopology(body, sections=TOPOLOGY_SECTIONS)
    name = read.name or "?"
    if read.status is None:
        raise ResourceError(f"NodeTopology/{name}: no status (not published yet?)")
    problem = next((p for p in read.problems if p.section in TOPOLOGY_SECTIONS), None)
    if problem is not None:
        raise ResourceError(f"NodeTopology/{name}: {problem}")
    status = read.status
    return Topology(
        numa_nodes=status.numa_nodes,
        gpus=tuple(g.gpu for g in status.gpus),
        nics=status.nics,
        nvlink_islands=status.islands,
        mig_devices=status.mig_devices,
        preferred_gpu_sets=status.preferred_gpu_sets,
        gpu_nic_distances=tuple(
            GpuNicDistance(gpu=g.gpu.index, nic=name, distance=cls, healthy=name not in g.degraded_nics)
            for g in status.gpus
            for name, cls in g.nics
        ),
        fabric=status.fabric,
        pci_devices=(),
        sources=status.sources,
        conditions=_conditions_back(status.conditions, status.sources),
        network=status.network,
        gpu_links=status.gpu_links,
        health=status.health,
    )


def _conditions_back(
    items: tuple[PublishedCondition, ...], sources: tuple[SourceStatus, ...]
) -> tuple[Condition, ...]:
    """Each failing source condition as the ``Condition`` it was made from. A not-ready reason that
    no source condition carries (a join-level finding) comes back from Ready or Consistent."""
    by_type = {condition_type(s.name): s for s in sources}
    reasons = {r.value: r for r in ConditionReason}
    result: list[Condition] = []
    top: dict[str, PublishedCondition] = {}
    for c in items:
        source = by_type.get(c.type)
        message = c.message if c.message is not None else ""
        if c.type in ("Ready", "Consistent", "Degraded"):
            top[c.type] = c
        elif source is not None and message == source.message and not source.ok:
            continue  # the source's own status, not a condition of it (``conditions`` writes it again)
        elif c.status == "False" and source is not None and c.reason is not None and c.reason in reasons:
            result.append(Condition(source=source.name, reason=reasons[c.reason], message=message))
    consistent = top.get("Consistent")
    if (
        consistent is not None
        and consistent.status == "False"
        and not any(c.reason is ConditionReason.INCONSISTENT for c in result)
    ):
        result.append(
            Condition(
                source="Consistent", reason=ConditionReason.INCONSISTENT, message=str(consistent.message)
            )
        )
    ready = top.get("Ready")
    if (
        ready is not None
        and ready.status == "False"
        and not any(c.reason in NOT_READY_REASONS for c in result)
        and ready.reason is not None
        and ready.reason in reasons
    ):
        who, _, said = str(ready.message).partition(": ")  # Ready says "source: message"
        result.append(
            Condition(source=who if said else "Ready", reason=reasons[ready.reason], message=said or who)
        )
    return tuple(result)
