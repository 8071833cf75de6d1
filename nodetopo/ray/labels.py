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

import dataclasses
import json
import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from nodetopo.resource.identity import PREFIX, is_valid
from nodetopo.resource.labels import SECTIONS, label_value, labels_of
from nodetopo.resource.published import Published, PublishedGpu, PublishedStatus
from nodetopo.resource.reader import read_nodetopology

log = logging.getLogger(__name__)

GPU_DOMAIN = PREFIX + "gpu-domain"


def select_gpus(status: PublishedStatus, wanted: Sequence[str] | None) -> list[PublishedGpu]:
    """The GPUs of ``status`` named by index or UUID in ``wanted`` (all when None or ``all``).

    Raises ``ValueError`` for a name that matches no GPU.
    """
    gpus = list(status.gpus)
    if not wanted or [w.lower() for w in wanted] == ["all"]:
        return gpus
    chosen: list[PublishedGpu] = []
    for item in wanted:
        match = [g for g in gpus if str(g.gpu.index) == item or (g.gpu.uuid or "") == item]
        if not match:
            raise ValueError(f"no GPU {item!r} in NodeTopology {status.node_name}")
        chosen.extend(m for m in match if m not in chosen)
    return chosen


def _read(body: Mapping[str, Any]) -> Published:
    """``body`` read; a malformed one (the reader's rule) is a ``ValueError``: a Ray node is never
    labelled from part of an object (``gpu.count=0`` for a list that could not be read)."""
    read = read_nodetopology(body, sections=SECTIONS)
    if read.malformed is not None:
        raise ValueError(f"not a usable NodeTopology object ({read.malformed})")
    return read


def ray_labels(body: Mapping[str, Any], gpus: Sequence[str] | None = None) -> dict[str, str]:
    """The Ray node labels for the node of ``body`` (restricted to ``gpus`` when given)."""
    read = _read(body)
    status = read.facts
    chosen = select_gpus(status, gpus)
    every = len(chosen) == len(status.gpus)
    selection = None if every else {g.gpu.index for g in chosen}
    if not status.node_name and read.name:
        status = dataclasses.replace(status, node_name=read.name)
    labels = labels_of(status, selection)
    node = status.node_name
    if node and is_valid(PREFIX + "node-name", label_value(node)):
        labels[PREFIX + "node-name"] = label_value(node)
    return dict(sorted(labels.items()))


def ray_resources(body: Mapping[str, Any], gpus: Sequence[str] | None = None) -> dict[str, float]:
    """Custom Ray resources describing the topology of the selected GPUs (see the module docstring)."""
    status = _read(body).facts
    indices = {g.gpu.index for g in select_gpus(status, gpus)}
    sizes = Counter(len(members) for i in status.islands if (members := set(i.gpus)) and members <= indices)
    resources: dict[str, float] = {
        f"{PREFIX}nvlink-island-{size}": float(count) for size, count in sorted(sizes.items())
    }
    rdma = sum(1 for n in status.nics if n.rdma and (n.state or "").upper() != "DOWN")
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
