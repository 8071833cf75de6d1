"""The cluster summary: what the NodeTopology objects offer, per GPU model label and in total.

Pure functions. ``node_facts`` reduces one NodeTopology ``status`` to the few facts admission needs
(through placement's own ``NodeShape``, so "the largest island" means what the extender will
place into: whole GPUs, MIG-enabled ones left out); ``summarize`` folds a multiset of those facts
into the ``NodeTopologySummary`` body. Identical machines have equal facts, so the controller keeps
a count per distinct ``NodeFacts`` and a summary costs O(distinct shapes), not O(nodes).

The summary holds what the admission policies read: ``total`` and ``models``, a map keyed by the
value of the ``nodetopo.io/gpu.model`` label (what a pod's ``nodeSelector`` names, so the policy's
lookup is one map index whatever the number of models). Every node whose model labels as that value
is in its entry, merged: two model texts that label alike (``!NVIDIA H100 80GB HBM3`` and
``NVIDIA H100 80GB HBM3``) are the same nodes to a selector, so one node cannot stand for the label.

Not-Ready NodeTopology objects (a source failed and the agent kept its last good facts, or sources
disagree) are *included*: their facts were observed and the extender places on them too; they are
counted in ``notReadyNodes`` so an operator sees how much of the summary rests on them. A
NodeTopology without a status yet contributes nothing.

Only healthy capacity counts (``status.health``): the islands are those the agent published without
the GPUs whose NVLinks are degraded, a GPU's NIC classes count only the NICs it reaches over a
healthy path, and a NIC no GPU reaches so (its port degraded) is neither an RDMA NIC nor a link layer.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from nodetopo.model import LinkClass
from nodetopo.placement.fit import SECTIONS as PLACEMENT
from nodetopo.placement.fit import shape_of
from nodetopo.resource.health import unreachable_nics
from nodetopo.resource.identity import API_VERSION
from nodetopo.resource.labels import label_value
from nodetopo.resource.published import Published, PublishedSummary
from nodetopo.resource.reader import read_nodetopology, read_status

KIND = "NodeTopologySummary"
PLURAL = "nodetopologysummaries"
#: The one summary object the controller writes and the policies read (``paramRef.name``).
NAME = "cluster"
UNKNOWN_MODEL = "unknown"
#: In ``rdmaLinkLayers``: some usable RDMA NIC's link layer is not reported (``topo -m`` names NICs only).
UNKNOWN_LAYER = "Unknown"
#: The CRD's bounds: past ``MAX_MODELS`` labels, those with the most nodes are kept (then by name) and
#: ``modelsOmitted`` says how many are not (the policies then do not refuse a label for being absent).
MAX_MODELS = 1024
#: model texts listed per label (``names``), the most common first
MAX_MODEL_NAMES = 8


@dataclasses.dataclass(frozen=True, slots=True)
class Thresholds:
    """Admission parameters the controller publishes in the summary's ``spec`` (its flags)."""

    stale_after_s: int = 600  #: older summaries are not used to refuse (feasibility fails open)
    declare_topology_min_gpus: int = 2  #: pods with this many GPUs must declare a topology
    rdma_resource_prefixes: tuple[str, ...] = ("rdma/",)  #: resources that are RDMA devices
    multi_pod_min_parallelism: int = 2  #: Jobs running this many pods at once are gangs

    def to_spec(self) -> dict[str, Any]:
        return {
            "staleAfterSeconds": self.stale_after_s,
            "declareTopologyMinGPUs": self.declare_topology_min_gpus,
            "rdmaResourcePrefixes": list(self.rdma_resource_prefixes),
            "multiPodMinParallelism": self.multi_pod_min_parallelism,
        }


@dataclasses.dataclass(frozen=True, slots=True)
class NodeFacts:
    """One node as admission sees it. Equal for identical machines."""

    model: str
    gpus: int  #: whole GPUs (not MIG-enabled)
    largest_island: int  #: most whole GPUs sharing one NVLink island (0: no island)
    largest_numa_group: int  #: most whole GPUs on one NUMA node (0: no GPU with a known node)
    best_nic: LinkClass | None  #: best GPU→NIC class over the whole GPUs
    best_rdma_nic: LinkClass | None  #: best GPU→usable RDMA NIC class
    rdma: bool  #: a usable RDMA NIC near a whole GPU (``rdma: required`` can be placed)
    rdma_layers: tuple[str, ...]  #: link layers of the usable RDMA NICs (UNKNOWN_LAYER: not reported)
    ready: bool


#: What the summary reads of a NodeTopology: what placement reads, and the summary's model.
SECTIONS = PLACEMENT | {"summary"}


def node_facts(status: Mapping[str, Any]) -> NodeFacts:
    """The ``NodeFacts`` of one NodeTopology ``status`` (tolerant of missing fields)."""
    return facts_of(read_status(status, sections=SECTIONS))


def facts_of(read: Published) -> NodeFacts:
    """The ``NodeFacts`` of a read NodeTopology (``read_nodetopology(obj, sections=SECTIONS)``)."""
    shape = shape_of(read)
    status = read.facts
    whole = [g for g in shape.gpus if g.whole]
    islands: Counter[int] = Counter(g.island for g in whole if g.island is not None)
    numa: Counter[int] = Counter(g.numa for g in whole if g.numa is not None)
    # As the extender's filter: a node serves ``rdma: required`` with a usable (not DOWN) RDMA NIC
    # near a whole GPU, whatever its link layer; an unknown layer is listed as UNKNOWN_LAYER so the
    # link-layer check never reads it as "not InfiniBand" or "not Ethernet".
    rdma_usable = shape.has_rdma and any(g.rdma_nic is not None for g in whole)
    unreachable = unreachable_nics(status)  # no GPU reaches it over a healthy path: not usable
    unknown_layer = any(
        nic.rdma and (nic.state or "").upper() != "DOWN" and not nic.link_layer
        for nic in status.nics
        if nic.name not in unreachable
    )
    layers = tuple(sorted({*shape.rdma_layers, *((UNKNOWN_LAYER,) if unknown_layer else ())}))
    summary = status.summary or PublishedSummary()
    return NodeFacts(
        model=str(summary.gpu_model or UNKNOWN_MODEL),
        gpus=len(whole),
        largest_island=max(islands.values(), default=0),
        largest_numa_group=max(numa.values(), default=0),
        best_nic=min((g.nic for g in whole if g.nic is not None), default=None),
        best_rdma_nic=min((g.rdma_nic for g in whole if g.rdma_nic is not None), default=None),
        rdma=rdma_usable,
        rdma_layers=layers if rdma_usable else (),
        ready=shape.ready,
    )


#: The ``best*Distance`` value when no GPU has such a NIC (a fact; a missing field is "unknown").
NO_NIC = "none"


def _best(classes: Iterable[LinkClass | None]) -> str:
    present = [c for c in classes if c is not None]
    return min(present).name if present else NO_NIC


def _offer(facts: Mapping[NodeFacts, int]) -> dict[str, Any]:
    """What a set of nodes offers (the ``total`` and each ``models[]`` entry)."""
    gpu_nodes = {f: n for f, n in facts.items() if f.gpus > 0}
    return {
        "nodes": sum(facts.values()),
        "gpus": sum(f.gpus * n for f, n in facts.items()),
        "largestIsland": max((f.largest_island for f in gpu_nodes), default=0),
        "largestNUMAGroup": max((f.largest_numa_group for f in gpu_nodes), default=0),
        "bestNICDistance": _best(f.best_nic for f in gpu_nodes),
        "bestRDMANICDistance": _best(f.best_rdma_nic for f in gpu_nodes),
        "rdmaNodes": sum(n for f, n in gpu_nodes.items() if f.rdma),
        "rdmaLinkLayers": sorted({layer for f in gpu_nodes for layer in f.rdma_layers}),
    }


def summarize(
    facts: Mapping[NodeFacts, int], *, computed_at: str, thresholds: Thresholds, observed: int
) -> dict[str, Any]:
    """The ``NodeTopologySummary`` object for ``facts`` (distinct facts → how many nodes have them).

    ``observed`` is the number of NodeTopology objects seen (with or without a status yet).
    """
    counted = {f: n for f, n in facts.items() if n > 0}
    by_label: dict[str, dict[NodeFacts, int]] = defaultdict(dict)
    for f, n in counted.items():
        by_label[label_value(f.model)][f] = n
    status: dict[str, Any] = {
        "computedAt": computed_at,
        "observedNodeTopologies": observed,
        "notReadyNodes": sum(n for f, n in counted.items() if not f.ready),
    }
    if counted:  # no NodeTopology with facts yet: nothing is known, so no "total" (checks skip)
        status["total"] = _offer(counted)
        kept = sorted(by_label.items(), key=lambda item: (-sum(item[1].values()), item[0]))
        status["models"] = {label: _model(group) for label, group in sorted(kept[:MAX_MODELS])}
        if len(kept) > MAX_MODELS:
            status["modelsOmitted"] = len(kept) - MAX_MODELS
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": NAME, "labels": {"app.kubernetes.io/managed-by": "nodetopo-summary-controller"}},
        "spec": thresholds.to_spec(),
        "status": status,
    }


def _model(group: Mapping[NodeFacts, int]) -> dict[str, Any]:
    """One ``models`` entry: what the nodes of one label value offer, and their model texts."""
    names: Counter[str] = Counter()
    for f, n in group.items():
        names[f.model] += n
    ordered = sorted(names.items(), key=lambda kv: (-kv[1], kv[0]))
    return {"names": [name for name, _ in ordered[:MAX_MODEL_NAMES]], **_offer(group)}


def summarize_objects(
    objects: Iterable[Mapping[str, Any]], *, computed_at: str, thresholds: Thresholds | None = None
) -> dict[str, Any]:
    """The summary of a list of NodeTopology objects (``nodetopo admit --nodetopologies``, tests)."""
    facts: Counter[NodeFacts] = Counter()
    observed = 0
    for obj in objects:
        observed += 1
        read = read_nodetopology(obj, sections=SECTIONS)
        if read.status is not None:
            facts[facts_of(read)] += 1
    return summarize(facts, computed_at=computed_at, thresholds=thresholds or Thresholds(), observed=observed)
