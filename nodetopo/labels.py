"""Node labels: the coarse, public projection of a ``Topology`` (details live in the resource).

Every key is under ``nodetopo.io/`` and is a public API, documented in the README's label
reference. Names are a dotted hierarchy of kebab-case words; values are valid label values
(≤ 63 characters; longer ones are shortened deterministically with a hash suffix).

``to_labels`` returns what this round observed. ``uncertain_keys`` says which keys this round could
not observe reliably (their source failed): the publisher keeps their last good value instead of
removing them, because a missing observation is not evidence of absence.
"""

from __future__ import annotations

import hashlib
import logging
import re

from nodetopo.crd import model_of, worst_nic_distance
from nodetopo.graph import GRAPH_SOURCE
from nodetopo.model import ConditionReason, Topology
from nodetopo.network import nvlink_domain

log = logging.getLogger(__name__)

PREFIX = "nodetopo.io/"

_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")

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


def is_valid(key: str, value: str) -> bool:
    if not key.startswith(PREFIX):
        return False
    name = key[len(PREFIX) :]
    return bool(_NAME.match(name)) and len(name) <= 63 and len(value) <= 63 and bool(_VALUE.match(value))


def to_labels(topology: Topology) -> dict[str, str]:
    """The label set for a topology (keys with the prefix). Invalid pairs are logged and dropped.

    Empty when an essential source is ``Missing``: such a round observed nothing a label may say
    (``gpu.count=0``, ``rdma=false`` would be confident wrong answers); ``uncertain_keys`` then
    names every key, so published labels keep their last good values.
    """
    if essential_missing(topology):
        return {}
    labels: dict[str, str] = {}
    gpus = topology.gpus
    labels["gpu.count"] = str(len(gpus))
    model = model_of(topology)
    if model:
        labels["gpu.model"] = label_value(model)
    if gpus:
        islands = topology.nvlink_islands
        labels["nvlink.island-count"] = str(len(islands))
        labels["nvlink.island-size"] = str(max((len(i.gpus) for i in islands), default=1))
        labels["nvlink.nvswitch"] = _bool(any(i.nvswitch for i in islands))
        labels["mig.enabled"] = _bool(any(g.mig_enabled for g in gpus))
    if topology.fabric is not None and topology.fabric.cluster_uuid:
        labels["nvlink.clique"] = label_value(f"{topology.fabric.cluster_uuid}.{topology.fabric.clique_id}")
    rdma = [n for n in topology.nics if n.rdma]
    labels["rdma"] = _bool(bool(rdma))
    labels["rdma.nic-count"] = str(len(rdma))
    # Link layer and rate describe the GPU fabric: the RDMA NICs nearest to a GPU (a DGX's storage
    # RoCE ports do not make its InfiniBand compute fabric "mixed"); all RDMA NICs without GPUs.
    nearest = {name for g in topology.gpus for name in g.nearest_nics}
    fabric = [n for n in rdma if n.name in nearest] or rdma
    layers = sorted({n.link_layer for n in fabric if n.link_layer})
    if layers:
        labels["rdma.link-layer"] = layers[0] if len(layers) == 1 else "Mixed"
    rates = [n.rate_gbps for n in fabric if n.rate_gbps]
    if rates:
        labels["rdma.rate-gbps"] = _number(max(rates))
    worst = worst_nic_distance(topology)
    if worst is not None:
        labels["gpu-nic.distance"] = worst.name
    if topology.numa_nodes:
        labels["numa.count"] = str(len(topology.numa_nodes))
    labels.update(fabric_labels(topology))
    result: dict[str, str] = {}
    for name, value in labels.items():
        key = PREFIX + name
        if is_valid(key, value):
            result[key] = value
        else:
            log.warning("dropping invalid label %s=%r", key, value)
    return dict(sorted(result.items()))


def fabric_labels(topology: Topology) -> dict[str, str]:
    """``nvlink.domain`` (+ ``-healthy`` when the driver says) and ``fabric.tier-N`` (0 = leaf).

    Tier ids longer than 63 characters (OCI OCIDs) are shortened by ``label_value``: the first 52
    characters, ``-``, and 10 hex digits of the id's sha256, so equal ids give equal labels.
    """
    labels: dict[str, str] = {}
    domain, healthy = nvlink_domain(topology.fabric)
    if domain is not None:
        labels["nvlink.domain"] = label_value(domain)
        if healthy is not None:
            labels["nvlink.domain-healthy"] = _bool(healthy)
    for tier in topology.network.tiers[:MAX_FABRIC_TIERS]:
        labels[f"fabric.tier-{tier.level}"] = label_value(tier.id)
    return labels


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


def essential_missing(topology: Topology) -> bool:
    """An essential source (sysfs PCI or NUMA) observed nothing this round (a wrong host root)."""
    return any(c.reason is ConditionReason.MISSING for c in topology.conditions)


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
