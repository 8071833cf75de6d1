"""The SIG's ``NodeResourceTopology`` (``topology.node.k8s.io/v1alpha2``): a pure projection of the
NodeTopology body nodetopo publishes, for clusters whose scheduler runs the scheduler-plugins
``NodeResourceTopologyMatch`` plugin.

One object per node, named after the node, one zone per NUMA node (type ``Node``, named ``node-<id>``
as the SIG's exporters and the plugin's ``numanode.NameToID`` name them), costs from the SLIT row,
and per zone the resources nodetopo knows the NUMA node of:

* ``cpu``: the NUMA node's CPUs. nodetopo does not know the kubelet's reserved CPUs nor the CPU
  manager's exclusive assignments: capacity, allocatable and available are all the CPU count.
* ``memory``: the NUMA node's ``MemTotal`` (sysfs), only where nodetopo read it; no reservation and
  no memory-manager assignment is subtracted, for the same reason.
* ``nvidia.com/gpu``: the whole GPUs whose NUMA node is known (a GPU in MIG mode is not an
  ``nvidia.com/gpu``; a GPU of unknown NUMA node belongs to no zone), and only when the kubelet said
  who holds each GPU (``status.allocation`` Known): ``available`` is the GPUs no pod holds. When the
  holders are unknown, or the kubelet advertises another ``nvidia.com/gpu`` count than the GPUs
  nodetopo sees (time-slicing replicas), no zone carries the resource: the plugin then checks it at
  node level only (an extended resource in no zone is "host level" to it), never against a guess.

The plugin reads a zone's ``available`` only, and treats a native resource (cpu, memory, hugepages)
that no zone carries as unaligned: a zone without ``memory`` cannot host a Guaranteed pod. The
kubelet's topology manager policy and scope are ``attributes`` (``topologyManagerPolicy``,
``topologyManagerScope``) only when the user states them (the plugin filters only under
``single-numa-node``); nodetopo cannot read the kubelet's configuration, and an unknown policy is not
``none``.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping
from typing import Any

from nodetopo.resource.published import PublishedStatus
from nodetopo.resource.reader import read_nodetopology

GROUP = "topology.node.k8s.io"
VERSION = "v1alpha2"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "NodeResourceTopology"
PLURAL = "noderesourcetopologies"
GPU_RESOURCE = "nvidia.com/gpu"
ZONE_TYPE = "Node"

#: what the kubelet's ``--topology-manager-policy`` and ``--topology-manager-scope`` accept
POLICIES = ("none", "best-effort", "restricted", "single-numa-node")
SCOPES = ("container", "pod")
POLICY_ATTRIBUTE = "topologyManagerPolicy"
SCOPE_ATTRIBUTE = "topologyManagerScope"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class TopologyManager:
    """The kubelet's topology manager as the user states it (None: not stated, not published)."""

    policy: str | None = None
    scope: str | None = None

    def __post_init__(self) -> None:
        if self.policy is not None and self.policy not in POLICIES:
            raise ValueError(f"topology manager policy {self.policy!r}: one of {', '.join(POLICIES)}")
        if self.scope is not None and self.scope not in SCOPES:
            raise ValueError(f"topology manager scope {self.scope!r}: one of {', '.join(SCOPES)}")

    def attributes(self) -> list[dict[str, str]]:
        stated = ((POLICY_ATTRIBUTE, self.policy), (SCOPE_ATTRIBUTE, self.scope))
        return [{"name": name, "value": value} for name, value in stated if value is not None]


def zone_name(numa_node: int) -> str:
    return f"node-{numa_node}"


def _resource(name: str, capacity: int, available: int | None = None) -> dict[str, Any]:
    quantity = str(capacity)
    return {
        "name": name,
        "capacity": quantity,
        "allocatable": quantity,
        "available": quantity if available is None else str(available),
    }


def _advertised_gpus(body: Mapping[str, Any]) -> int | None:
    """The kubelet's allocatable ``nvidia.com/gpu`` count (``status.allocation.resources``), if said."""
    allocation = (body.get("status") or {}).get("allocation")
    resources = allocation.get("resources") if isinstance(allocation, Mapping) else None
    for r in resources if isinstance(resources, list) else ():
        if isinstance(r, Mapping) and r.get("name") == GPU_RESOURCE:
            count = r.get("allocatable")
            return count if isinstance(count, int) and not isinstance(count, bool) else None
    return None


def gpus_by_zone(status: PublishedStatus, advertised: int | None) -> dict[int, tuple[int, int]] | None:
    """(GPUs, free GPUs) per NUMA node; None when no zone may carry ``nvidia.com/gpu`` (the holders
    are unknown, or the kubelet's count is not the GPUs nodetopo sees)."""
    if not status.allocation_known:
        return None
    mig_parents = {m.parent_index for m in status.mig_devices}
    whole = [g for g in status.gpus if g.gpu.index not in mig_parents]
    if advertised is not None and advertised != len(whole):
        return None
    out: dict[int, tuple[int, int]] = {}
    for g in whole:
        if g.gpu.numa_node is None:
            continue
        total, free = out.get(g.gpu.numa_node, (0, 0))
        out[g.gpu.numa_node] = (total + 1, free + (0 if g.held_by else 1))
    return out


def to_noderesourcetopology(
    body: Mapping[str, Any], *, manager: TopologyManager | None = None
) -> dict[str, Any] | None:
    """The NodeResourceTopology of the node a NodeTopology ``body`` describes (no ownerReferences: the
    publisher adds them); None when the body has no NUMA node (nothing to align on)."""
    read = read_nodetopology(body, sections={"numaNodes", "gpus", "migDevices", "allocation"})
    status = read.status
    if read.name is None or status is None or not status.numa_nodes:
        return None
    gpus = gpus_by_zone(status, _advertised_gpus(body))
    zones = []
    for n in sorted(status.numa_nodes, key=lambda n: n.id):
        resources = [_resource("cpu", len(n.cpus))]
        if n.memory_bytes is not None:
            resources.append(_resource("memory", n.memory_bytes))
        if gpus is not None and n.id in gpus:
            total, free = gpus[n.id]
            resources.append(_resource(GPU_RESOURCE, total, free))
        zone: dict[str, Any] = {"name": zone_name(n.id), "type": ZONE_TYPE, "resources": resources}
        if n.distances:
            zone["costs"] = [{"name": zone_name(other), "value": d} for other, d in n.distances]
        zones.append(zone)
    out: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": read.name, "labels": {"app.kubernetes.io/managed-by": "nodetopo"}},
        "zones": zones,
    }
    attributes = manager.attributes() if manager is not None else []
    if attributes:
        out["attributes"] = attributes
    return out


def add_nrt_args(parser: argparse.ArgumentParser, *, default: bool | None = False) -> None:
    """The option's flags (``nodetopo agent`` and ``nodetopo publish``): ``--noderesourcetopology``
    and the topology manager as the kubelet runs it (the object's attributes; never guessed)."""
    parser.add_argument(
        "--noderesourcetopology",
        action="store_true",
        default=default,
        help=f"also publish the node's NodeResourceTopology ({GROUP}/{VERSION}) for the scheduler-plugins "
        "NodeResourceTopologyMatch plugin",
    )
    parser.add_argument(
        "--topology-manager-policy",
        choices=POLICIES,
        default=None,
        help="the kubelet's --topology-manager-policy, published as the attribute topologyManagerPolicy "
        "(default: not stated, not published; the plugin filters only under single-numa-node)",
    )
    parser.add_argument(
        "--topology-manager-scope",
        choices=SCOPES,
        default=None,
        help="the kubelet's --topology-manager-scope, published as the attribute topologyManagerScope "
        "(default: not stated, not published)",
    )
