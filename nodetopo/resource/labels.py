"""Node labels: the coarse, public projection of a NodeTopology body (details live in the resource).

Every key is under ``nodetopo.io/`` and is a public API, documented in the label
reference (docs/labels.md). Names are a dotted hierarchy of kebab-case words; values are valid label values
(≤ 63 characters; longer ones are shortened deterministically with a hash suffix).

``node_labels`` (of the body the agent publishes) and ``to_labels`` (of a ``Topology``) return what
this round observed. ``uncertain_keys`` says which keys this round could
not observe reliably (their source failed): the publisher keeps their last good value instead of
removing them, because a missing observation is not evidence of absence.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from nodetopo.model import ConditionReason, FabricInfo, Gpu, Topology
from nodetopo.resource.body import to_nodetopology
from nodetopo.resource.conditions import essential_missing
from nodetopo.resource.identity import PREFIX, is_valid
from nodetopo.resource.published import PublishedStatus
from nodetopo.resource.reader import read_nodetopology
from nodetopo.topology.graph import GRAPH_SOURCE

log = logging.getLogger(__name__)


#: Every key nodetopo may write, with the sources whose failure makes it uncertain.
GPU_SOURCES = ("nvml", "nvidia-smi")
RDMA_SOURCES = ("sysfs.rdma", "ibstat", "nvidia-smi")
NUMA_SOURCES = ("sysfs.numa",)
#: the fabric sources, and ``fabric`` (their join: a disagreement between them)
FABRIC_SOURCES = ("fabric.ib", "fabric.lldp", "fabric.cloud", "fabric")
MAX_FABRIC_TIERS = 4
KEYS: dict[str, tuple[str, ...]] = {
    "gpu.count": (*GPU_SOURCES, "sysfs.pci"),
    "gpu.model": GPU_SOURCES,
    "nvlink.island-count": GPU_SOURCES,
    "nvlink.island-size": GPU_SOURCES,
    "nvlink.nvswitch": GPU_SOURCES,
    "nvlink.clique": ("nvml",),
    "rdma": RDMA_SOURCES,
    "rdma.nic-count": RDMA_SOURCES,
    "rdma.link-layer": RDMA_SOURCES,
    "rdma.rate-gbps": RDMA_SOURCES,
    "gpu-nic.distance": GPU_SOURCES + RDMA_SOURCES + ("sysfs.pci",),
    "numa.count": NUMA_SOURCES,
    "mig.enabled": GPU_SOURCES,
    "nvlink.domain": ("nvml",),
    "nvlink.domain-healthy": ("nvml",),
    "gpu-domain": GPU_SOURCES,
    **{f"fabric.tier-{level}": FABRIC_SOURCES for level in range(MAX_FABRIC_TIERS)},
}

#: Reasons that mean "the source is there but this round's answer cannot be trusted".
_UNRELIABLE = frozenset(
    {ConditionReason.PARSE_ERROR, ConditionReason.TIMEOUT, ConditionReason.DEGRADED, ConditionReason.STALE}
)


def label_value(text: str) -> str:
    """A valid label value for ``text``: unsafe characters become ``-``, long values get a hash."""
    value = re.sub(r"[^A-Za-z0-9_.-]+", "-", text.strip())
    value = re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", value)
    if len(value) > 63:
        digest = hashlib.sha256(text.encode()).hexdigest()[:10]
        value = value[:52].rstrip("-_.") + "-" + digest
    return value


def to_labels(topology: Topology, node_name: str | None = None) -> dict[str, str]:
    """The label set for a topology (keys with the prefix): ``node_labels`` of its NodeTopology body.

    For callers that have only the ``Topology``; the agent projects the labels from the body it
    publishes (``node_labels``), so the body is built once. ``node_name`` names the node-local
    island in ``gpu-domain`` (without it, a node outside a multi-node NVLink domain has no
    ``gpu-domain``).
    """
    return node_labels(to_nodetopology(topology, node_name or ""))


def node_labels(body: Mapping[str, Any]) -> dict[str, str]:
    """The Node's ``nodetopo.io/`` labels: the projection of a NodeTopology body (``labels_of``, all
    GPUs), read as every consumer reads one (``nodetopo.resource.reader``). Invalid pairs are
    logged and dropped.

    Empty when an essential source is ``Missing`` (``essential_missing``): such a round observed
    nothing a label may say (``gpu.count=0``, ``rdma=false`` would be confident wrong answers);
    ``uncertain_keys`` then names every key, so published labels keep their last good values.
    """
    if essential_missing(body):
        return {}
    return labels_of(read_nodetopology(body, sections=SECTIONS).facts)


#: What the labels read of a NodeTopology (``nodetopo.resource.reader`` sections).
SECTIONS = frozenset({"gpus", "nics", "nvlinkIslands", "numaNodes", "fabric", "network", "details"})


def labels_of(status: PublishedStatus, gpus: Collection[int] | None = None) -> dict[str, str]:
    """The ``nodetopo.io/`` labels of a NodeTopology ``status`` (what the API serves, read by
    ``nodetopo.resource.reader``), for the GPUs whose indices are in ``gpus`` (all when None): THE
    label function, used for the Node (all GPUs) and by the Ray bridge (the GPUs a Ray node owns).

    Per selected GPUs: ``gpu.*``, ``nvlink.island-*`` (islands cut to the selection),
    ``nvlink.nvswitch``, ``mig.enabled``, ``gpu-nic.distance``, ``rdma.link-layer``/``rate-gbps``
    (the selected GPUs' nearest RDMA NICs), ``gpu-domain``. Per node: ``rdma``, ``rdma.nic-count``,
    ``numa.count``, ``nvlink.clique``, ``nvlink.domain``, ``fabric.tier-N``.
    """
    every = [g.gpu for g in status.gpus]
    chosen = every if gpus is None else [g for g in every if g.index in gpus]
    indices = {g.index for g in chosen}
    labels: dict[str, str] = {"gpu.count": str(len(chosen))}
    models = Counter(g.model for g in chosen if g.model)
    if models:
        labels["gpu.model"] = label_value(sorted(models.items(), key=lambda kv: (-kv[1], kv[0]))[0][0])
    islands = [
        members
        for i in status.islands
        if (members := indices & set(i.gpus)) and (gpus is None or len(members) > 1)
    ]
    cut = [i for i in status.islands if len(indices & set(i.gpus)) > 1]
    if chosen:
        labels["nvlink.island-count"] = str(len(islands))
        labels["nvlink.island-size"] = str(max((len(m) for m in islands), default=1))
        labels["nvlink.nvswitch"] = _bool(any(i.nvswitch for i in cut))
        labels["mig.enabled"] = _bool(any(g.mig_enabled for g in chosen))
    clique = _clique(status.fabric)
    if clique is not None:
        labels["nvlink.clique"] = clique
    rdma = [n for n in status.nics if n.rdma]
    labels["rdma"] = _bool(bool(rdma))
    labels["rdma.nic-count"] = str(len(rdma))
    # Link layer and rate describe the GPU fabric: the RDMA NICs nearest to a GPU (a DGX's storage
    # RoCE ports do not make its InfiniBand compute fabric "mixed"); all RDMA NICs without GPUs.
    nearest = {name for g in chosen for name in g.nearest_nics}
    fabric = [n for n in rdma if n.name in nearest] or (rdma if not chosen or gpus is None else [])
    layers = sorted({n.link_layer for n in fabric if n.link_layer})
    if layers:
        labels["rdma.link-layer"] = layers[0] if len(layers) == 1 else "Mixed"
    rates = [n.rate_gbps for n in fabric if n.rate_gbps]
    if rates:
        labels["rdma.rate-gbps"] = _number(max(rates))
    classes = [g.nic_distance for g in chosen if g.nic_distance is not None]
    # a GPU whose every NIC path crosses a degraded edge has no class: the worst class of the others
    # would promise it a NIC it cannot use, so the label is left off (no class known for all)
    stranded = any(
        p.gpu.nic_distance is None and p.nics and {name for name, _ in p.nics} <= p.degraded_nics
        for p in status.gpus
        if p.gpu.index in indices
    )
    if classes and not stranded:
        labels["gpu-nic.distance"] = max(classes).name
    if status.numa_nodes:
        labels["numa.count"] = str(len(status.numa_nodes))
    domain, healthy = status.nvlink_domain or (None, None)
    if domain:
        labels["nvlink.domain"] = label_value(domain)
        if healthy is not None:
            labels["nvlink.domain-healthy"] = _bool(healthy)
    for tier in status.network.tiers[:MAX_FABRIC_TIERS]:
        labels[f"fabric.tier-{tier.level}"] = label_value(tier.id)
    gpu_domain = _gpu_domain(status.node_name, chosen, clique, labels.get("nvlink.domain"))
    if gpu_domain is not None:
        labels["gpu-domain"] = gpu_domain
    result: dict[str, str] = {}
    for name, value in labels.items():
        key = PREFIX + name
        if is_valid(key, value):
            result[key] = value
        else:
            log.warning("dropping invalid label %s=%r", key, value)
    return dict(sorted(result.items()))


def _clique(fabric: FabricInfo | None) -> str | None:
    """``<clusterUUID>.<cliqueID>`` of the GPUs' multi-node NVLink fabric; None outside one (NVML
    reports an all-zero cluster UUID for a GPU that is in no fabric)."""
    if fabric is None or not fabric.cluster_uuid.strip("0-"):
        return None
    return label_value(f"{fabric.cluster_uuid}.{fabric.clique_id}")


def _gpu_domain(
    node: str | None, chosen: Sequence[Gpu], clique: str | None, domain: str | None
) -> str | None:
    """``gpu-domain``: the NVLink domain the (selected) GPUs belong to, for keeping a gang inside
    one. The multi-node NVLink clique, else the NVLink domain, else ``<node>.nvl<island>`` when the
    GPUs share one node-local island; None when they span islands or have no NVLink peer."""
    if clique is not None or domain is not None:
        return clique or domain
    islands = {g.island for g in chosen}
    if not chosen or not node or len(islands) != 1 or None in islands:
        return None
    return label_value(f"{node}.nvl{islands.pop()}")


def uncertain_keys(topology: Topology) -> frozenset[str]:
    """Keys whose producing source could not be trusted this round (keep their last good value).

    Every key when an essential source is ``Missing`` (a wrong host root): facts joined on the PCI
    tree and NUMA nodes are unknown then, and ``gpu.count=0``/``rdma=false`` would be wrong.
    """
    if essential_missing(topology):
        return frozenset(PREFIX + name for name in KEYS)
    unreliable_sources = {c.source for c in topology.conditions if c.reason in _UNRELIABLE}
    gpus_hidden = any(
        c.source == GRAPH_SOURCE and c.reason in (ConditionReason.DEGRADED, ConditionReason.INCONSISTENT)
        for c in topology.conditions
    )
    uncertain: set[str] = set()
    for name, producers in KEYS.items():
        if any(
            s == p or s.startswith(p + " ") or s.startswith(p + ".")
            for s in unreliable_sources
            for p in producers
        ):
            uncertain.add(PREFIX + name)
        if name.startswith("fabric.") and any(
            c.source == "fabric" and c.reason is ConditionReason.INCONSISTENT for c in topology.conditions
        ):
            uncertain.add(PREFIX + name)
        if gpus_hidden and set(producers) & set(GPU_SOURCES) and name != "gpu.count":
            uncertain.add(PREFIX + name)
    return frozenset(uncertain)


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
