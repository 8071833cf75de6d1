"""The reader of a published NodeTopology: the body back into a ``Topology`` (``kubectl ntopo``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodetopo.model import (
    Condition,
    ConditionReason,
    FabricInfo,
    FabricTier,
    Gpu,
    GpuLink,
    GpuNicDistance,
    LinkClass,
    MigDevice,
    NetworkPosition,
    Nic,
    NumaNode,
    NvlinkIsland,
    PciAddress,
    PreferredGpuSets,
    SourceStatus,
    SwitchPort,
    Topology,
    parse_cpulist,
)
from nodetopo.resource.conditions import NOT_READY_REASONS, condition_type


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
