"""The NodeTopology resource: ``Topology`` → the object body (and a reader for consumers).

The body is the contract of ``crds/nodetopology.yaml``: ``nodetopo discover -o json`` prints exactly
this object, the agent applies it, and the scheduler extender and the Ray bridge read it back.
Conditions carry no ``lastTransitionTime`` here: the publisher adds it (keeping the previous time
when a condition's status did not change), so that discovery output is deterministic.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Mapping
from typing import Any

from nodetopo import __version__
from nodetopo.model import (
    MAX_LINKED_GPUS,
    Condition,
    ConditionReason,
    FabricInfo,
    FabricTier,
    Gpu,
    GpuAllocation,
    GpuLink,
    GpuNicDistance,
    LinkClass,
    MigDevice,
    NetworkPosition,
    Nic,
    NumaNode,
    NvlinkIsland,
    PciAddress,
    PodRef,
    PreferredGpuSets,
    SourceStatus,
    SwitchPort,
    Topology,
    format_cpulist,
    parse_cpulist,
)
from nodetopo.topology.network import nvlink_domain

GROUP = "nodetopo.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "NodeTopology"
PLURAL = "nodetopologies"

# Upper bounds of the NodeTopology schema (crds/nodetopology.yaml `maxItems`), sized to real hardware
# with headroom; tests/kube/test_crd_bounds.py checks the CRD against these and the API server against
# both. Consumers (the scheduler extender) refuse an object over them whatever the CRD says.
#: GPUs per node. The largest single-OS machines have 16 (DGX-2/HGX-2); a GB200 NVL72 rack is 18 nodes
#: of 4. 1,024 leaves room for a whole 576-GPU NVLink domain behind one kernel.
MAX_GPUS = 1024
#: NICs per node (and per GPU's NIC list): RDMA devices include SR-IOV virtual functions, e.g. 12
#: ConnectX ports with 127 VFs each is 1,536.
MAX_NICS = 2048
#: NUMA nodes: the kernel's own limit (MAX_NUMNODES with NODES_SHIFT=10).
MAX_NUMA_NODES = 1024
#: MIG devices: at most 7 per GPU.
MAX_MIG_DEVICES = 7 * MAX_GPUS
#: containers holding one GPU (more than one only when the device plugin shares GPUs: time-slicing,
#: MPS). A kubelet runs at most a few hundred pods; more holders are cut and the cut is said.
MAX_HOLDERS = 256
#: resources listed in ``status.allocation.resources``
MAX_RESOURCES = 256
#: NVLink islands: two GPUs at least each.
MAX_ISLANDS = MAX_GPUS // 2
#: GPU pairs in ``status.gpuLinks``: every pair of a node of ``MAX_LINKED_GPUS`` (64) GPUs. A larger
#: node publishes no gpuLinks (the derivation makes none), so no object lists 500,000 pairs.
MAX_GPU_LINKS = MAX_LINKED_GPUS * (MAX_LINKED_GPUS - 1) // 2
#: Sources and conditions (one condition per source, plus Ready, Consistent and room to grow).
MAX_SOURCES = 64
MAX_SOURCE_MESSAGE = 4096
MAX_CONDITIONS = 128
#: A CPU list in cpulist form: 8,192 CPUs (the kernel's NR_CPUS maximum) written one by one.
MAX_CPULIST = 32768

#: Condition reasons that make the resource "not Ready": consumers should treat it as partial.
NOT_READY_REASONS = frozenset(
    {
        ConditionReason.PARSE_ERROR,
        ConditionReason.TIMEOUT,
        ConditionReason.DEGRADED,
        ConditionReason.STALE,
        ConditionReason.INCONSISTENT,
        ConditionReason.MISSING,
    }
)


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
        "gpus": [_gpu(g, topology) for g in topology.gpus],
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
        "sources": [_source(s) for s in _unique_sources(topology.sources)],
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


#: bounds of ``status.network`` (the CRD's maxItems/maxLength): a node has at most a few dozen NIC ports
MAX_NEIGHBOURS = 64
MAX_TIER_MEMBERS = 16
MAX_TIERS = 8
MAX_TEXT = 256


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


def _cpulist(ids: frozenset[int] | None) -> str | None:
    return format_cpulist(ids) if ids is not None else None


def _gpu(g: Gpu, topology: Topology) -> dict[str, Any]:
    return {
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
        "nics": [
            {"name": d.nic, "distance": d.distance.name}
            for d in topology.gpu_nic_distances
            if d.gpu == g.index
        ],
        "migEnabled": g.mig_enabled,
    }


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


def _unique_sources(sources: tuple[SourceStatus, ...]) -> list[SourceStatus]:
    seen: dict[str, SourceStatus] = {}
    for s in sources:
        previous = seen.get(s.name)
        if previous is None or (previous.ok and not s.ok):
            seen[s.name] = s
    return [seen[name] for name in sorted(seen)]


def _source(s: SourceStatus) -> dict[str, Any]:
    message = (
        s.message if len(s.message) <= MAX_SOURCE_MESSAGE else s.message[: MAX_SOURCE_MESSAGE - 3] + "..."
    )
    return {"name": s.name, "ok": s.ok, "message": message}


def condition_type(source: str) -> str:
    """``sysfs.pci`` → ``SourceSysfsPci``; ``nvidia-smi topo -m`` → ``SourceNvidiaSmiTopoM``."""
    words = [w for w in re.split(r"[^A-Za-z0-9]+", source) if w]
    return "Source" + "".join(w[:1].upper() + w[1:] for w in words)


def conditions(topology: Topology) -> list[dict[str, Any]]:
    """Kubernetes-style conditions: Ready, Consistent, and one per source."""
    by_source: dict[str, list[Condition]] = {}
    for c in topology.conditions:
        by_source.setdefault(c.source, []).append(c)
    result: list[dict[str, Any]] = []
    bad = [c for c in topology.conditions if c.reason in NOT_READY_REASONS]
    result.append(
        {
            "type": "Ready",
            "status": "False" if bad else "True",
            "reason": bad[0].reason.value if bad else "Discovered",
            "message": _join(f"{c.source}: {c.message}" for c in bad)
            if bad
            else f"{len(topology.gpus)} GPUs, {sum(1 for n in topology.nics if n.rdma)} RDMA NICs discovered",
        }
    )
    inconsistent = [c for c in topology.conditions if c.reason is ConditionReason.INCONSISTENT]
    result.append(
        {
            "type": "Consistent",
            "status": "False" if inconsistent else "True",
            "reason": "Inconsistent" if inconsistent else "SourcesAgree",
            "message": _join(c.message for c in inconsistent) if inconsistent else "sources agree",
        }
    )
    types = {"Ready", "Consistent"}
    for s in _unique_sources(topology.sources):
        if condition_type(s.name) in types:  # list-map key: two source names must not share a type
            continue
        types.add(condition_type(s.name))
        mine = by_source.get(s.name, [])
        result.append(
            {
                "type": condition_type(s.name),
                "status": "True" if s.ok else "False",
                "reason": mine[0].reason.value if mine and not s.ok else _status_reason(s),
                "message": _join(c.message for c in mine) if mine else (s.message or "ok"),
            }
        )
    return result


def _status_reason(s: SourceStatus) -> str:
    """The reason of a source status without a condition of the same name (``nvidia-smi topo -m``
    reports under ``nvidia-smi``): the ``Reason:`` its message starts with, else Unavailable."""
    if s.ok:
        return "Discovered"
    prefix = s.message.split(":", 1)[0]
    return prefix if prefix in {r.value for r in ConditionReason} else ConditionReason.UNAVAILABLE.value


def _join(messages: Any, limit: int = 1024) -> str:
    text = "; ".join(dict.fromkeys(messages))
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --------------------------------------------------------------------------------------------
# The reader: a published body back into a ``Topology`` (``kubectl ntopo`` renders it)
# --------------------------------------------------------------------------------------------


class ResourceError(ValueError):
    """A NodeTopology body that is not the shape ``to_nodetopology`` writes."""


def topology_from_nodetopology(body: Mapping[str, Any]) -> Topology:
    """The inverse of ``to_nodetopology``: what the object says, as the ``Topology`` every view renders.

    The object carries no PCIe tree (``pci_devices`` is empty); ``gpu_links`` is None when the object
    has no ``gpuLinks`` (a node of over 64 GPUs, an older agent). Everything else round-trips:
    ``to_nodetopology(topology_from_nodetopology(b), name)`` has ``b``'s status. A source condition
    whose status is False becomes that source's condition again (with its reason), so Ready and
    Consistent are recomputed from the same facts.
    Raises ``ResourceError`` naming the field when the body is not a NodeTopology status.
    """
    name = str((body.get("metadata") or {}).get("name") or "?")
    status = body.get("status")
    if not isinstance(status, Mapping):
        raise ResourceError(f"NodeTopology/{name}: no status (not published yet?)")
    field = "status"
    try:
        field = "status.gpus"
        gpus = tuple(_gpu_back(g) for g in status.get("gpus") or [])
        distances = tuple(
            GpuNicDistance(gpu=int(g["index"]), nic=str(d["name"]), distance=LinkClass[d["distance"]])
            for g in status.get("gpus") or []
            for d in g.get("nics") or []
        )
        field = "status.nics"
        nics = tuple(_nic_back(n) for n in status.get("nics") or [])
        field = "status.nvlinkIslands"
        islands = tuple(
            NvlinkIsland(
                id=int(i["id"]),
                gpus=tuple(int(x) for x in i["gpus"]),
                links_per_pair=int(i["linksPerPair"]),
                fully_connected=bool(i["fullyConnected"]),
                nvswitch=bool(i["nvswitch"]),
            )
            for i in status.get("nvlinkIslands") or []
        )
        field = "status.gpuLinks"
        links_body = status.get("gpuLinks")
        links = (
            tuple(
                GpuLink(
                    a=int(p["a"]),
                    b=int(p["b"]),
                    nvlinks=int(p["nvlinks"]) if p.get("nvlinks") else None,
                    pcie=LinkClass[p["pcie"]] if p.get("pcie") else None,
                )
                for p in links_body
            )
            if links_body is not None
            else None
        )
        field = "status.numaNodes"
        numa = tuple(
            NumaNode(
                id=int(n["id"]),
                cpus=parse_cpulist(n.get("cpus") or ""),
                memory_bytes=n.get("memoryBytes"),
                distances=tuple((int(d["node"]), int(d["distance"])) for d in n.get("distances") or []),
            )
            for n in status.get("numaNodes") or []
        )
        field = "status.migDevices"
        migs = tuple(
            MigDevice(
                uuid=str(m["uuid"]),
                parent_uuid=m.get("parentUUID"),
                parent_index=m.get("parentIndex"),
                profile=m.get("profile"),
                gpu_instance=m.get("gpuInstance"),
                compute_instance=m.get("computeInstance"),
            )
            for m in status.get("migDevices") or []
        )
        field = "status.preferredGPUSets"
        preferred = tuple(
            PreferredGpuSets(size=int(p["size"]), sets=tuple(tuple(int(x) for x in s) for s in p["sets"]))
            for p in status.get("preferredGPUSets") or []
        )
        field = "status.fabric"
        fabric_body = status.get("fabric")
        fabric = (
            FabricInfo(
                cluster_uuid=str(fabric_body["clusterUUID"]),
                clique_id=int(fabric_body["cliqueID"]),
                state=str(fabric_body["state"]),
                health=fabric_body.get("health"),
            )
            if fabric_body
            else None
        )
        field = "status.network"
        network_position = _network_back(status.get("network") or {})
        field = "status.sources"
        sources = tuple(
            SourceStatus(name=str(s["name"]), ok=bool(s["ok"]), message=str(s.get("message") or ""))
            for s in status.get("sources") or []
        )
        field = "status.conditions"
        conditions_back = _conditions_back(status.get("conditions") or [], sources)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        what = f"missing {e}" if isinstance(e, KeyError) else str(e)
        raise ResourceError(f"NodeTopology/{name}: {field}: {what}") from None
    return Topology(
        numa_nodes=numa,
        gpus=gpus,
        nics=nics,
        nvlink_islands=islands,
        mig_devices=migs,
        preferred_gpu_sets=preferred,
        gpu_nic_distances=distances,
        fabric=fabric,
        pci_devices=(),
        sources=sources,
        conditions=conditions_back,
        network=network_position,
        gpu_links=links,
    )


def _address(text: str | None) -> PciAddress | None:
    return PciAddress.parse(text) if text else None


def _cpus(text: str | None) -> frozenset[int] | None:
    return parse_cpulist(text) if text is not None else None


def _gpu_back(g: Mapping[str, Any]) -> Gpu:
    return Gpu(
        index=int(g["index"]),
        uuid=g.get("uuid"),
        model=g.get("model"),
        address=_address(g.get("pciBusID")),
        pcie_root=g.get("pcieRoot"),
        numa_node=g.get("numaNode"),
        numa_affinity=_cpus(g.get("numaAffinity")),
        gpu_numa_node=g.get("gpuNumaNode"),
        cpu_affinity=_cpus(g.get("cpuAffinity")),
        island=g.get("island"),
        nearest_nics=tuple(str(n) for n in g.get("nearestNICs") or []),
        nic_distance=LinkClass[g["nicDistance"]] if g.get("nicDistance") else None,
        mig_enabled=g.get("migEnabled"),
        memory_bytes=g.get("memoryBytes"),
    )


def _nic_back(n: Mapping[str, Any]) -> Nic:
    return Nic(
        name=str(n["name"]),
        netdev=n.get("netdev"),
        address=_address(n.get("pciBusID")),
        pcie_root=n.get("pcieRoot"),
        numa_node=n.get("numaNode"),
        link_layer=n.get("linkLayer"),
        state=n.get("state"),
        rate_gbps=n.get("rateGbps"),
        rdma=bool(n.get("rdma")),
    )


def _network_back(body: Mapping[str, Any]) -> NetworkPosition:
    return NetworkPosition(
        neighbours=tuple(
            SwitchPort(
                nic=str(n["nic"]),
                port=n.get("port"),
                source=str(n.get("source") or ""),
                state=n.get("state"),
                switch_id=n.get("switchID"),
                switch_name=n.get("switchName"),
                switch_port=n.get("switchPort"),
                peer_is_switch=n.get("peerIsSwitch"),
            )
            for n in body.get("neighbours") or []
        ),
        tiers=tuple(
            FabricTier(
                level=int(t["level"]),
                id=str(t["id"]),
                name=t.get("name"),
                members=tuple(str(m) for m in t.get("members") or []),
            )
            for t in body.get("tiers") or []
        ),
        tier_source=body.get("tierSource"),
    )


def _conditions_back(items: Any, sources: tuple[SourceStatus, ...]) -> tuple[Condition, ...]:
    """Each failing source condition as the ``Condition`` it was made from. A not-ready reason that
    no source condition carries (a join-level finding) comes back from Ready or Consistent."""
    by_type = {condition_type(s.name): s for s in sources}
    reasons = {r.value: r for r in ConditionReason}
    result: list[Condition] = []
    top: dict[str, Mapping[str, Any]] = {}
    for c in items:
        kind = str(c["type"])
        source = by_type.get(kind)
        message = str(c.get("message", ""))
        if kind in ("Ready", "Consistent"):
            top[kind] = c
        elif source is not None and message == source.message and not source.ok:
            continue  # the source's own status, not a condition of it (``conditions`` writes it again)
        elif c.get("status") == "False" and source is not None and c.get("reason") in reasons:
            result.append(Condition(source=source.name, reason=reasons[c["reason"]], message=message))
    consistent = top.get("Consistent")
    if (
        consistent is not None
        and consistent.get("status") == "False"
        and not any(c.reason is ConditionReason.INCONSISTENT for c in result)
    ):
        result.append(
            Condition(
                source="Consistent",
                reason=ConditionReason.INCONSISTENT,
                message=str(consistent.get("message")),
            )
        )
    ready = top.get("Ready")
    if (
        ready is not None
        and ready.get("status") == "False"
        and not any(c.reason in NOT_READY_REASONS for c in result)
        and ready.get("reason") in reasons
    ):
        who, _, said = str(ready.get("message")).partition(": ")  # Ready says "source: message"
        result.append(
            Condition(
                source=who if said else "Ready",
                reason=reasons[ready["reason"]],
                message=said or who,
            )
        )
    return tuple(result)
