"""The harness's node itself: a real kubelet on containerd registers a Ready Node."""

from __future__ import annotations

import pytest

from .node import LocalNode

pytestmark = [pytest.mark.k8s, pytest.mark.node]


def test_kubelet_registers_a_ready_node_on_containerd(node: LocalNode) -> None:
    status, body = node.cluster.request("GET", f"/api/v1/nodes/{node.name}")
    assert status == 200, body
    info = body["status"]["nodeInfo"]
    assert info["containerRuntimeVersion"].startswith("containerd://"), info
    assert info["kubeletVersion"] == "v1.34.4", info
    ready = {c["type"]: c["status"] for c in body["status"]["conditions"]}
    assert ready["Ready"] == "True", body["status"]["conditions"]
    assert "nodetopo.test/pause:1" in " ".join(node.images())
