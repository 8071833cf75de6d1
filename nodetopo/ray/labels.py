"""Ray node labels and custom resources from a NodeTopology object (the dict the API serves).

Labels (for ``ray start --labels-file``; Ray labels follow Kubernetes label syntax; the ``ray.io/``
prefix is Ray's own and nodetopo never writes it) are ``nodetopo.resource.labels.labels_of`` — the very
function that makes the Node's labels — for the GPUs the Ray node owns, plus
``nodetopo.io/node-name`` (the Kubernetes node). With every GPU selected, each key has the value
the Node's label has. Among them:

``nodetopo.io/gpu-domain``
    the NVLink domain the selected GPUs belong to. On multi-node NVLink systems (GB200 NVL72, GH200
    NVL32) the NVLink clique ``<clusterUUID>.<cliqueID>`` NVML reports, the same on every node of
    the rack, so ``topology_strategy={"nodetopo.io/gpu-domain": "STRICT_PACK"}`` or a
    ``bundle_label_selector`` keeps a placement group inside one NVLink fabric; else the NVLink
    domain; else the node-local island the selected GPUs share, ``<node>.nvl<island id>``. Absent
    when the GPUs span several islands or have no NVLink peer (there is no NVLink domain to name).

Resources (for ``ray start --resources``): ``nodetopo.io/nvlink-island-<size>`` = how many whole
islands of that size the selected GPUs contain, and ``nodetopo.io/rdma-nic`` = usable RDMA NICs
(not DOWN). A bundle ``{"GPU": 8, "nodetopo.io/nvlink-island-8": 1}`` therefore only lands on a Ray
node that holds a complete 8-GPU island. They count node capacity; Ray does not tie them to GPU ids.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from nodetopo.resource.identity import PREFIX, is_valid
from nodetopo.resource.labels import label_value, labels_of

log = logging.getLogger(__name__)

GPU_DOMAIN = PREFIX + "gpu-domain"


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


def ray_labels(body: Mapping[str, Any], gpus: Sequence[str] | None = None) -> dict[str, str]:
    """The Ray node labels for the node of ``body`` (restricted to ``gpus`` when given)."""
    status = body.get("status") or {}
    chosen = select_gpus(status, gpus)
    every = len(chosen) == len(status.get("gpus") or [])
    selection = None if every else {int(g["index"]) for g in chosen if g.get("index") is not None}
    if not status.get("nodeName") and (body.get("metadata") or {}).get("name"):
        status = {**status, "nodeName": body["metadata"]["name"]}
    labels = labels_of(status, selection)
    node = status.get("nodeName")
    if node and is_valid(PREFIX + "node-name", label_value(str(node))):
        labels[PREFIX + "node-name"] = label_value(str(node))
    return dict(sorted(labels.items()))


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
        f"{PREFIX}nvlink-island-{size}": float(count) for size, count in sorted(sizes.items())
    }
    rdma = len(_usable_rdma(status))
    if rdma:
        resources[f"{PREFIX}rdma-nic"] = float(rdma)
    return resources


def labels_file_text(labels: Mapping[str, str]) -> str:
    """The YAML mapping ``ray start --labels-file`` reads (every value quoted as a string)."""
    return yaml.safe_dump({k: str(v) for k, v in labels.items()}, default_flow_style=False, sort_keys=True)


def resources_json(resources: Mapping[str, float]) -> str:
    """The JSON ``ray start --resources`` takes."""
    return json.dumps(
        {k: (int(v) if float(v).is_integer() else v) for k, v in resources.items()}, sort_keys=True
    )
