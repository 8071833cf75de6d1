"""Living with the labels a cluster already has: GPU feature discovery's ``nvidia.com/gpu.*`` (pure).

nodetopo never writes these keys (only ``nodetopo.io/``); it reads them from its own Node and

* reports where its facts and the labels disagree (``label_disagreements``): the GPU count against
  ``nvidia.com/gpu.count``, the GPU model against ``nvidia.com/gpu.product`` (spelled the way GFD
  spells it, ``gfd_product``), the NVLink domain against ``nvidia.com/gpu.clique``. A label that is
  absent, or that nodetopo has no fact to compare with, is no disagreement;
* takes ``nvidia.com/gpu.clique`` as the NVLink domain when NVML is not available to the agent, and
  only then (``align_with_labels``), saying so in the facts' sources.

docs/integrations.md maps each nodetopo key to GFD's and topograph's.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

from nodetopo.model import Condition, ConditionReason, FabricInfo, SourceStatus, Topology
from nodetopo.sources.nvml.protocol import NAME as NVML_SOURCE
from nodetopo.topology.network import nvlink_domain

#: the source of the conditions and of the provenance this module adds
SOURCE = "node-labels"
GFD_COUNT = "nvidia.com/gpu.count"
GFD_PRODUCT = "nvidia.com/gpu.product"
GFD_CLIQUE = "nvidia.com/gpu.clique"
GFD_MIG_STRATEGY = "nvidia.com/mig.strategy"

_NOT_IN_PRODUCT = re.compile(r"[^A-Za-z0-9\-_. ]")
#: ``<ClusterUUID>.<CliqueID>``, as GFD writes the clique label
_CLIQUE = re.compile(r"([0-9A-Fa-f-]{1,64})\.([0-9]{1,10})")


def gfd_product(model: str) -> str:
    """A GPU model as GFD writes it in ``nvidia.com/gpu.product``: characters other than letters,
    digits, ``-_.`` and space dropped, runs of blanks made one ``-`` (``NVIDIA H100 80GB HBM3`` →
    ``NVIDIA-H100-80GB-HBM3``)."""
    return "-".join(_NOT_IN_PRODUCT.sub("", model).split())


def parse_clique(value: str) -> FabricInfo | None:
    """``nvidia.com/gpu.clique``'s ``<ClusterUUID>.<CliqueID>`` as fabric info; None when the value
    does not have that form (or names the all-zero cluster of a single-node system)."""
    match = _CLIQUE.fullmatch(value.strip())
    if match is None or not match[1].strip("0-"):
        return None
    return FabricInfo(cluster_uuid=match[1], clique_id=int(match[2]), state="COMPLETED")


def _product_matches(label: str, product: str, mig_single: bool) -> bool:
    """GFD appends ``-SHARED`` to a time-sliced GPU's product, and ``-MIG-<profile>`` under the
    ``single`` MIG strategy."""
    if label in (product, product + "-SHARED"):
        return True
    return mig_single and label.startswith(product + "-MIG-")


def label_disagreements(labels: Mapping[str, str], topology: Topology) -> tuple[Condition, ...]:
    """``Inconsistent`` conditions, one per GFD label that says something else than nodetopo's facts;
    each message names the key and both values. Nothing is compared when an essential source observed
    nothing (nodetopo's own facts are unknown then)."""
    if any(c.reason is ConditionReason.MISSING for c in topology.conditions):
        return ()
    found: list[str] = []
    mig_single = labels.get(GFD_MIG_STRATEGY, "").strip() == "single"
    count = labels.get(GFD_COUNT, "").strip()
    if count.isdigit() and not mig_single and int(count) != len(topology.gpus):
        # under the single strategy GFD counts MIG devices, not GPUs
        found.append(f"{GFD_COUNT} is {count}, nodetopo found {len(topology.gpus)} GPUs")
    product = labels.get(GFD_PRODUCT, "").strip()
    models = sorted({g.model for g in topology.gpus if g.model})
    if product and models and not any(_product_matches(product, gfd_product(m), mig_single) for m in models):
        said = ", ".join(gfd_product(m) for m in models)
        found.append(f"{GFD_PRODUCT} is {product}, nodetopo's GPUs are {said}")
    clique = labels.get(GFD_CLIQUE, "").strip()
    domain, _ = nvlink_domain(topology.fabric)
    if clique and domain is not None and clique != domain:
        found.append(f"{GFD_CLIQUE} is {clique}, nodetopo's NVLink domain is {domain}")
    return tuple(Condition(source=SOURCE, reason=ConditionReason.INCONSISTENT, message=m) for m in found)


def nvml_available(topology: Topology) -> bool:
    return any(s.name == NVML_SOURCE and s.ok for s in topology.sources)


def align_with_labels(topology: Topology, labels: Mapping[str, str] | None) -> Topology:
    """``topology`` with the Node's ``labels`` taken in (None: they could not be read; nothing
    changes): the NVLink domain from ``nvidia.com/gpu.clique`` when NVML is not available and gave
    none (a ``node-labels`` source says so), then the disagreements as conditions."""
    if labels is None:
        return topology
    if topology.fabric is None and not nvml_available(topology):
        fabric = parse_clique(labels.get(GFD_CLIQUE, ""))
        if fabric is not None:
            provenance = SourceStatus(
                name=SOURCE,
                ok=True,
                message=f"NVLink domain from {GFD_CLIQUE} (NVML is not available to the agent)",
            )
            topology = dataclasses.replace(topology, fabric=fabric, sources=(*topology.sources, provenance))
    disagreements = label_disagreements(labels, topology)
    if not disagreements:
        return topology
    return dataclasses.replace(topology, conditions=(*topology.conditions, *disagreements))
