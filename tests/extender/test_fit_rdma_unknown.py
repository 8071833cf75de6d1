"""``nodetopo.io/rdma: required`` vs an RDMA NIC whose link layer is unknown (issue 16).

A ``topo -m``-only source names RDMA NICs but not their link layer; a live node's sysfs may lack it
too. Such a node is labelled ``nodetopo.io/rdma=true`` and the label reference (docs/labels.md)
promises "an RDMA NIC that is not DOWN": the extender must accept it. Unknown is not negative.
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

from nodetopo.placement.fit import evaluate, node_shape
from nodetopo.placement.request import PodRequest
from nodetopo.resource.body import to_nodetopology
from nodetopo.resource.labels import to_labels
from nodetopo.topology.discover import bundle_context, scan


def _topo_m_only(tmp_path: Path, corpus: Path) -> tuple[dict[str, Any], dict[str, str]]:
    bundle = tmp_path / "b"
    (bundle / "cmd").mkdir(parents=True)
    source = corpus / "topo-m" / "dgx-a100-8x-nv12-12mlx5-colheaders-numa8.txt"
    shutil.copyfile(source, bundle / "cmd" / "nvidia-smi-topo-m.txt")
    topology = scan(bundle_context(bundle)).topology
    return to_nodetopology(topology, "n"), to_labels(topology)


def test_topo_m_only_node_with_rdma_label_passes_rdma_required(tmp_path: Path, corpus: Path) -> None:
    body, labels = _topo_m_only(tmp_path, corpus)
    nics = [n for n in body["status"]["nics"] if n["rdma"]]
    assert nics and all(n["linkLayer"] is None for n in nics)  # the fact this test is about
    # what the resource promises the scheduler (no label: without sysfs the scan is not Ready)
    assert body["status"]["summary"]["rdmaNICs"] == 12 and labels == {}
    shape = node_shape(body["status"])
    verdict = evaluate(shape, shape.whole_gpus, PodRequest(gpus=8, rdma=True))
    assert verdict.fits, verdict.reason
    close = evaluate(shape, shape.whole_gpus, PodRequest(gpus=2, rdma=True, max_nic_distance=None))
    assert close.fits, close.reason


def test_unknown_link_layer_on_a_sysfs_node_passes(bodies: dict[str, dict[str, Any]]) -> None:
    body = copy.deepcopy(bodies["dgx-h100"])
    for nic in body["status"]["nics"]:
        nic["linkLayer"] = None
    shape = node_shape(body["status"])
    assert shape.rdma_layers == ()
    verdict = evaluate(shape, shape.whole_gpus, PodRequest(gpus=4, rdma=True))
    assert verdict.fits, verdict.reason


def test_every_rdma_nic_down_is_rejected(bodies: dict[str, dict[str, Any]]) -> None:
    body = copy.deepcopy(bodies["dgx-h100"])
    for nic in body["status"]["nics"]:
        nic["state"] = "DOWN"
    shape = node_shape(body["status"])
    verdict = evaluate(shape, shape.whole_gpus, PodRequest(gpus=1, rdma=True))
    assert not verdict.fits and "no usable RDMA NIC" in verdict.reason
