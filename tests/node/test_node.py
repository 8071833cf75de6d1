"""The harness's node itself: a real kubelet on containerd (built from the version tests/node/containerd
pins) registers a Ready Node."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .node import REPO, LocalNode, missing_prerequisites

pytestmark = [pytest.mark.k8s, pytest.mark.node]


def test_kubelet_registers_a_ready_node_on_containerd(node: LocalNode) -> None:
    status, body = node.cluster.request("GET", f"/api/v1/nodes/{node.name}")
    assert status == 200, body
    info = body["status"]["nodeInfo"]
    pinned = re.search(
        r"github.com/containerd/containerd v(\S+)", (REPO / "tests/node/containerd/go.mod").read_text()
    )
    assert pinned and info["containerRuntimeVersion"] == f"containerd://{pinned[1]}", info
    assert info["kubeletVersion"] == "v1.34.4", info
    ready = {c["type"]: c["status"] for c in body["status"]["conditions"]}
    assert ready["Ready"] == "True", body["status"]["conditions"]
    assert "nodetopo.test/pause:1" in " ".join(node.images())


def test_a_machine_without_the_node_packages_is_told_what_is_missing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """What the node fixture fails with (never a skip) where containerd & co. are not installed."""
    monkeypatch.setenv("PATH", str(tmp_path))  # no tool found
    monkeypatch.setattr("node.node.CNI_BIN", tmp_path / "cni")
    missing = missing_prerequisites()
    for expected in (
        "ctr (install containerd)",
        "runc (install runc)",
        "mmdebstrap (install mmdebstrap)",
        f"{tmp_path / 'cni' / 'bridge'} (install containernetworking-plugins)",
    ):
        assert expected in missing, missing
