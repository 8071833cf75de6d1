"""`nodetopo publish` with a wrong host root never overwrites published facts or labels (issue 16)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import BUNDLES

from kube.cluster import LocalCluster

pytestmark = pytest.mark.k8s

BUNDLE = BUNDLES / "dgx-h100"


def publish(cluster: LocalCluster, *argv: str) -> subprocess.CompletedProcess[str]:
    kubeconfig = str(cluster.kubeconfig_for("publisher"))
    return subprocess.run(
        [sys.executable, "-m", "nodetopo", "publish", "--kubeconfig", kubeconfig, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
    )


def test_publish_from_an_empty_root_keeps_facts_and_labels(
    cluster: LocalCluster, make_node: Callable[..., dict[str, Any]], tmp_path: Path
) -> None:
    node = make_node()["metadata"]["name"]
    done = publish(cluster, "--from", str(BUNDLE), "--node-name", node)
    assert done.returncode == 0, done.stderr
    (tmp_path / "host").mkdir()
    done = publish(cluster, "--host-root", str(tmp_path / "host"), "--nvml", "off", "--node-name", node)
    assert done.returncode == 0, done.stderr
    status, stored = cluster.request("GET", f"/apis/nodetopo.io/v1alpha1/nodetopologies/{node}")
    assert status == 200
    ready = next(c for c in stored["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "Missing")
    assert stored["status"]["summary"]["gpuCount"] == 8 and len(stored["status"]["gpus"]) == 8
    status, node_object = cluster.request("GET", f"/api/v1/nodes/{node}")
    labels = node_object["metadata"]["labels"]
    assert labels["nodetopo.io/gpu.count"] == "8" and labels["nodetopo.io/rdma"] == "true"
