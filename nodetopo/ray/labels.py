"""Ray node labels and custom resources from a NodeTopology object (the dict the API serves).

Labels (for ``ray start --labels-file``; Ray labels follow Kubernetes label syntax):

``ray.io/gpu-domain``
    the NVLink domain the node's GPUs belong to. On multi-node NVLink systems (GB200 NVL72, GH200 NVL32)
    it is the NVLink clique ``<clusterUUID>.<cliqueID>`` that NVML reports, the same on every node
    of the rack, so ``topology_strategy={"ray.io/gpu-domain": "STRICT_PACK"}`` or a
    ``bundle_label_selector`` keeps a placement group inside one NVLink fabric. Otherwise it is the
    node-local island the selected GPUs share, ``<node>.nvl<island id>``. Absent when the GPUs span
    several islands or have no NVLink peer (there is no NVLink domain to name).
``nodetopo.io/<key>``
    the node-label projection, recomputed for the selected GPUs: ``gpu.count``, ``gpu.model``,
    ``nvlink.island-count``, ``nvlink.island-size``, ``nvlink.nvswitch``, ``nvlink.clique``, ``rdma``,
    ``rdma.nic-count``, ``rdma.link-layer``, ``gpu-nic.distance``, ``numa.count``, ``mig.enabled``,
    plus ``node-name`` (the Kubernetes node).

Resources (for ``ray start --resources``): ``nodetopo.io/nvlink-island-<size>`` = how many whole
islands of that size the selected GPUs contain, and ``nodetopo.io/rdma-nic`` = usable RDMA NICs.
A bundle ``{"GPU": 8, "nodetopo.io/nvlink-island-8": 1}`` therefore only lands on a Ray node that
holds a complete 8-GPU island. They count node capacity; Ray does not tie them to GPU ids.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import yaml

from nodetopo.labels import PREFIX, is_valid, label_value

log = logging.getLogger(__name__)

GPU_DOMAIN = "ray.io/gpu-domain"
RESOURCE_PREFIX = "nodetopo.io/"
_CLASSES = ("PIX", "PXB", "PHB", "NODE", "SYS")


def select_gpus(status: Mapping[str, Any], wanted: Sequence[str] | None) -> list[dict[str, Any]]:
    """The GPU entries of ``status`` named by index or UUID in ``wanted`` (all when None or ``all``).

    Raises ``ValueError`` for a name that matches no GPU.
    """
    gpus = list(status.get("gpus") or [])
    if not wanted or [w.lower() for w in wanted] == ["all"]:
        return gpus
    chosen: list[dict[str, Any]] = []
    for item in wanted:
        match = [g for g in gpus if str(g.get("index")) == item or (g.get("uuid") or "") == item]
        if not match:
            raise ValueError(f"no GPU {item!r} in NodeTopology {status.get('nodeName')}")
        chosen.extend(m for m in match if m not in chosen)
    return chosen


def _usable_rdma(status: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [
        n for n in status.get("nics") or [] if n.get("rdma") and str(n.get("state") or "").upper() != "DOWN"
    ]


def _fabric_domain(status: Mapping[str, Any]) -> str | None:
    fabric = status.get("fabric") or None
    if not fabric or not fabric.get("clusterUUID"):
        return None
    if str(fabric["clusterUUID"]).strip("0-") == "":
        return None  # NVML reports an all-zero cluster UUID when the GPU is not in a fabric
    return label_value(f"{fabric['clusterUUID']}.{fabric.get('cliqueID', 0)}")


def gpu_domain(body: Mapping[str, Any], gpus: Collection[Mapping[str, Any]]) -> str | None:
    """``ray.io/gpu-domain`` for ``gpus`` of the node: the fabric clique, else the shared island."""
    status = body.get("status") or {}
    fabric = _fabric_domain(status)
    if fabric is not None:
        return fabric
    islands = {g.get("island") for g in gpus}
    if len(islands) != 1 or None in islands or not gpus:
        return None
    node = status.get("nodeName") or (body.get("metadata") or {}).get("name") or "node"
    return label_value(f"{node}.nvl{islands.pop()}")


def ray_labels(body: Mapping[str, Any], gpus: Sequence[str] | None = None) -> dict[str, str]:
    """The Ray node labels for the node of ``body`` (restricted to ``gpus`` when given)."""
    status = body.get("status") or {}
    chosen = select_gpus(status, gpus)
    indices = {g.get("index") for g in chosen}
    labels: dict[str, str] = {}
    node = status.get("nodeName") or (body.get("metadata") or {}).get("name")
    if node:
        labels["node-name"] = label_value(str(node))
    labels["gpu.count"] = str(len(chosen))
    models = Counter(str(g["model"]) for g in chosen if g.get("model"))
    if models:
        labels["gpu.model"] = label_value(sorted(models.items(), key=lambda kv: (-kv[1], kv[0]))[0][0])
    islands = [i for i in status.get("nvlinkIslands") or [] if indices & set(i.get("gpus") or [])]
    if chosen:
        sizes = [len(indices & set(i.get("gpus") or [])) for i in islands]
        labels["nvlink.island-count"] = str(len(islands))
        labels["nvlink.island-size"] = str(max(sizes, default=1))
        labels["nvlink.nvswitch"] = _bool(any(i.get("nvswitch") for i in islands))
        labels["mig.enabled"] = _bool(any(g.get("migEnabled") for g in chosen))
    fabric = _fabric_domain(status)
    if fabric is not None:
        labels["nvlink.clique"] = fabric
    rdma = _usable_rdma(status)
    labels["rdma"] = _bool(bool(rdma))
    labels["rdma.nic-count"] = str(len(rdma))
    layers = sorted({str(n["linkLayer"]) for n in rdma if n.get("linkLayer")})
    if layers:
        labels["rdma.link-layer"] = layers[0] if len(layers) == 1 else "Mixed"
    classes = [str(g["nicDistance"]) for g in chosen if g.get("nicDistance") in _CLASSES]
    if classes:
        labels["gpu-nic.distance"] = max(classes, key=_CLASSES.index)
    if status.get("numaNodes"):
        labels["numa.count"] = str(len(status["numaNodes"]))
    result = {}
    for name, value in labels.items():
        key = PREFIX + name
        if is_valid(key, value):
            result[key] = value
        else:
            log.warning("dropping invalid Ray label %s=%r", key, value)
    domain = gpu_domain(body, chosen)
    if domain:
        result[GPU_DOMAIN] = domain
    return dict(sorted(result.items()))


def ray_resources(body: Mapping[str, Any], gpus: Sequence[str] | None = None) -> dict[str, float]:
    """Custom Ray resources describing the topology of the selected GPUs (see the module docstring)."""
    status = body.get("status") or {}
    indices = {g.get("index") for g in select_gpus(status, gpus)}
    sizes = Counter(
        len(members)
        for i in status.get("nvlinkIslands") or []
        if (members := set(i.get("gpus") or [])) and members <= indices
    )
    resources: dict[str, float] = {
        f"{RESOURCE_PREFIX}nvlink-island-{size}": float(count) for size, count in sorted(sizes.items())
    }
    rdma = len(_usable_rdma(status))
    if rdma:
        resources[f"{RESOURCE_PREFIX}rdma-nic"] = float(rdma)
    return resources


def labels_file_text(labels: Mapping[str, str]) -> str:
    """The YAML mapping ``ray start --labels-file`` reads (every value quoted as a string)."""
    return yaml.safe_dump({k: str(v) for k, v in labels.items()}, default_flow_style=False, sort_keys=True)


def resources_json(resources: Mapping[str, float]) -> str:
    """The JSON ``ray start --resources`` takes."""
    return json.dumps(
        {k: (int(v) if float(v).is_integer() else v) for k, v in resources.items()}, sort_keys=True
    )


def _bool(value: bool) -> str:
    return "true" if value else "false"
