"""One label, one meaning (issue 16): the Ray bridge's labels are the Node's labels.

Before, ``ray/labels.py`` had its own implementation and disagreed with ``labels.py`` (dgx-a100, 12
RDMA NICs: node ``rdma.nic-count=12``, ``link-layer=InfiniBand``; Ray ``10`` and ``Mixed``; a CPU
node 2 vs 1), and it wrote ``ray.io/gpu-domain`` into Ray's reserved prefix.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from helpers import BUNDLES as BUNDLES_DIR
from helpers import bundle_dirs

from nodetopo.ray.labels import GPU_DOMAIN, ray_labels
from nodetopo.resource.body import to_nodetopology
from nodetopo.resource.labels import to_labels
from nodetopo.topology.discover import bundle_context, scan

REPO = Path(__file__).resolve().parents[2]
BUNDLES = bundle_dirs()


@pytest.mark.parametrize("bundle", BUNDLES, ids=[b.name for b in BUNDLES])
def test_every_key_both_publish_has_the_same_value(bundle: Path) -> None:
    topology = scan(bundle_context(bundle)).topology
    node = to_labels(topology, f"{bundle.name}-01")
    ray = ray_labels(to_nodetopology(topology, f"{bundle.name}-01"))
    shared = set(node) & set(ray)
    assert set(node) <= shared, f"node labels Ray lacks: {sorted(set(node) - shared)}"
    assert set(ray) - shared == {"nodetopo.io/node-name"}
    differ = {k: (node[k], ray[k]) for k in shared if node[k] != ray[k]}
    assert not differ, differ
    assert not [k for k in ray if k.startswith("ray.io/")]


def test_the_reported_disagreements_are_gone() -> None:
    a100 = scan(bundle_context(BUNDLES_DIR / "dgx-a100")).topology
    ray = ray_labels(to_nodetopology(a100, "a"))
    assert ray["nodetopo.io/rdma.nic-count"] == to_labels(a100)["nodetopo.io/rdma.nic-count"] == "12"
    assert ray["nodetopo.io/rdma.link-layer"] == "InfiniBand"


def test_gpu_domain_is_a_node_label_too() -> None:
    """clique, else NVLink domain, else the node-local island: published on the Node as well."""
    gh200 = scan(bundle_context(BUNDLES_DIR / "gh200-nvl")).topology
    labels = to_labels(gh200, "g1")
    assert labels[GPU_DOMAIN] == labels["nodetopo.io/nvlink.clique"]
    h100 = scan(bundle_context(BUNDLES_DIR / "dgx-h100")).topology
    assert to_labels(h100, "h1")[GPU_DOMAIN] == "h1.nvl0"
    assert GPU_DOMAIN == "nodetopo.io/gpu-domain"


def test_kuberay_example_uses_no_ray_io_label_of_ours() -> None:
    text = (REPO / "deploy" / "examples" / "kuberay.yaml").read_text()
    assert "ray.io/gpu-domain" not in text
    docs = [d for d in yaml.safe_load_all(text) if d]
    cluster = next(d for d in docs if d.get("kind") == "RayCluster")
    for group in cluster["spec"]["workerGroupSpecs"]:
        labels = group.get("labels") or {}
        assert labels, "KubeRay >= 1.5: group labels go in workerGroupSpec.labels"
        assert not [k for k in labels if k.startswith("ray.io/")]


def test_kuberay_example_binds_the_probes_reader_role_without_redefining_it() -> None:
    """The workers' init containers run `nodetopo probe`, which reads its node's NodeTopology and posts
    an Event on its pod: the example binds deploy/probe's two ClusterRoles (one definition per role)
    instead of a copy, `nodetopo-reader` cluster-wide and `nodetopo-probe-events` in its namespace."""
    docs = [d for d in yaml.safe_load_all((REPO / "deploy" / "examples" / "kuberay.yaml").read_text()) if d]
    assert not [d for d in docs if d["kind"] in ("ClusterRole", "Role")]
    (binding,) = [d for d in docs if d["kind"] == "ClusterRoleBinding"]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "nodetopo-reader",
    }
    probe = [d for d in yaml.safe_load_all((REPO / "deploy" / "probe" / "rbac.yaml").read_text()) if d]
    assert [d["metadata"]["name"] for d in probe if d["kind"] == "ClusterRole"] == [
        "nodetopo-reader",
        "nodetopo-probe-events",
    ]
    (events,) = [d for d in docs if d["kind"] == "RoleBinding"]
    assert events["roleRef"]["name"] == "nodetopo-probe-events"
    cluster = next(d for d in docs if d["kind"] == "RayCluster")
    (group,) = cluster["spec"]["workerGroupSpecs"]
    spec = group["template"]["spec"]
    subject = {
        "kind": "ServiceAccount",
        "name": spec["serviceAccountName"],
        "namespace": cluster["metadata"]["namespace"],
    }
    assert binding["subjects"] == [subject]
    assert (events["metadata"]["namespace"], events["subjects"]) == (subject["namespace"], [subject])
    # both init containers hold the Ray container's GPUs (the kubelet hands theirs on to it)
    gpus = spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
    assert [c["resources"]["limits"]["nvidia.com/gpu"] for c in spec["initContainers"]] == [gpus, gpus]
