"""The Topology CRDs the export controller writes: Kueue's from its Go module (``kueue.kueue_crds``,
the version tests/cluster-kueue/go.mod requires), and KAI's.

KAI's Topology CRD (``topologies.kai.scheduler``, ``v1alpha1``; deployments/kai-scheduler/crds/ in
github.com/NVIDIA/KAI-Scheduler) is, as KAI publishes it, Kueue's Topology schema under KAI's group:
the same ``spec.levels`` (1 to 16 ``nodeLabel`` keys, unique, immutable, ``kubernetes.io/hostname``
only last) with ``spec`` required. KAI's Go module (github.com/NVIDIA/KAI-scheduler) is not served by
the Go module proxy this harness fetches through, so the test serves Kueue's stored-version schema
under KAI's group, version and names, with ``spec`` required, and says so here; nothing of either is
committed.
"""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest
import yaml

from .cluster import LocalCluster
from .kueue import kueue_crds

KUEUE_CRD = "topologies.kueue.x-k8s.io"
KAI_CRD = "topologies.kai.scheduler"


def kueue_topology_crd() -> dict[str, Any]:
    (path,) = kueue_crds(("topologies",))
    crd = yaml.safe_load(path.read_text())
    assert crd["metadata"]["name"] == KUEUE_CRD, crd["metadata"]
    return dict(crd)


def kai_topology_crd(kueue: dict[str, Any]) -> dict[str, Any]:
    """KAI's Topology CRD: Kueue's stored version's schema, KAI's group and names (see above)."""
    (stored,) = [v for v in kueue["spec"]["versions"] if v.get("storage")]
    version = copy.deepcopy(stored)
    version.update(name="v1alpha1", served=True, storage=True)
    version["schema"]["openAPIV3Schema"]["required"] = ["spec"]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": KAI_CRD},
        "spec": {
            "group": "kai.scheduler",
            "names": {
                "kind": "Topology",
                "listKind": "TopologyList",
                "plural": "topologies",
                "singular": "topology",
            },
            "scope": "Cluster",
            "versions": [version],
        },
    }


def install_topology_crds(cluster: LocalCluster) -> None:
    """Kueue's and KAI's Topology CRDs served by ``cluster``, Established."""
    kueue = kueue_topology_crd()
    stream = yaml.safe_dump_all([kueue, kai_topology_crd(kueue)])
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=stream)
    done = cluster.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s", "crd", KUEUE_CRD, KAI_CRD, check=False
    )
    if done.returncode != 0:
        pytest.fail(f"Topology CRDs not Established: {done.stderr[-500:]}", pytrace=False)
    time.sleep(0.5)  # discovery catches up with a newly Established group
