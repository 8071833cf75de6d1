"""`nodetopo publish --from BUNDLE` as a user runs it, against the real API server.

It also produces the `kubectl get ntopo` example of docs/nodetopology.md: run with ``-s`` to see the
real output (`python -m pytest tests/kube/test_publish_cli.py -s`).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from typing import Any

import pytest
from helpers import BUNDLES

from .cluster import LocalCluster

pytestmark = pytest.mark.k8s


MACHINES = (
    "dgx-h100",
    "dgx-a100",
    "dgx1-v100",
    "pcie-4x-nvbridge",
    "pcie-8x-2socket",
    "a100-mig",
    "gh200-nvl",
)


def _publish(cluster: LocalCluster, bundle: str, node: str) -> subprocess.CompletedProcess[str]:
    return cluster.publish_bundle(BUNDLES / bundle, node)


def test_publish_fixture_machines(
    cluster: LocalCluster, kubectl: Callable[..., Any], make_node: Callable[..., dict[str, Any]]
) -> None:
    names = {}
    for machine in MACHINES:
        node = make_node(f"{machine}-01")["metadata"]["name"]
        names[machine] = node
        result = _publish(cluster, machine, node)
        assert result.returncode == 0, result.stderr
        assert f"published NodeTopology/{node}" in result.stdout

    output = kubectl("get", "ntopo", *names.values()).stdout
    print("\n$ kubectl get ntopo\n" + output)
    rows = {line.split()[0]: line.split() for line in output.splitlines()[1:]}
    # NAME GPUS MODEL(3-4 words) ... : check the columns that do not contain spaces from the right.
    assert rows[names["dgx-h100"]][1] == "8"
    assert rows[names["dgx-h100"]][-6:-1] == ["1x8", "10", "PIX", "0", "True"]
    assert rows[names["pcie-4x-nvbridge"]][-6:-1] == ["2x2", "2", "PIX", "0", "True"]
    assert rows[names["dgx1-v100"]][-6] == "1x8"
    assert rows[names["a100-mig"]][-3] == "11"  # MIG devices

    labels = kubectl("get", "node", names["gh200-nvl"], "-o", "jsonpath={.metadata.labels}").stdout
    assert '"nodetopo.io/nvlink.clique":"7d3f1c2a-5b6e-4f80-9a1d-2c4b6e8f0a13.32766"' in labels
    wide = kubectl("get", "ntopo", names["gh200-nvl"], "-o", "wide").stdout
    print("$ kubectl get ntopo -o wide\n" + wide)
    assert "32766" in wide.splitlines()[1].split()


def test_publish_refuses_unknown_node(cluster: LocalCluster) -> None:
    """The Node must exist (the resource is owned by it): a clear error, exit 1, no traceback."""
    result = _publish(cluster, "dgx-h100", "no-such-node")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "no-such-node" in result.stderr


def test_publish_takes_back_a_key_an_admin_set_by_hand(
    cluster: LocalCluster, kubectl: Callable[..., Any], make_node: Callable[..., dict[str, Any]]
) -> None:
    """Was: exit 1, ``HTTP 409 … conflict with "kubectl-label"``, until the label was removed."""
    node = make_node(labels={"team": "ml"})["metadata"]["name"]
    assert _publish(cluster, "dgx-h100", node).returncode == 0
    kubectl("label", "node", node, "--overwrite", "nodetopo.io/numa.count=7", "team=infra", user="other")
    result = _publish(cluster, "dgx-h100", node)
    assert result.returncode == 0, result.stderr
    assert "took back label nodetopo.io/numa.count (set to '7' by field manager 'kubectl-label'" in (
        result.stderr
    )
    labels = kubectl("get", "node", node, "-o", "jsonpath={.metadata.labels}").stdout
    assert '"nodetopo.io/numa.count":"2"' in labels and '"team":"infra"' in labels
    events = kubectl(
        "get", "events", "-n", "default", "--field-selector",
        f"involvedObject.kind=Node,involvedObject.name={node},reason=OwnedFieldReasserted", "-o", "name",
    ).stdout.split()  # fmt: skip
    assert len(events) == 1, events
    described = kubectl("describe", "node", node).stdout
    assert "OwnedFieldReasserted" in described


def test_publish_the_noderesourcetopology_option(
    cluster: LocalCluster, kubectl: Callable[..., Any], make_node: Callable[..., dict[str, Any]]
) -> None:
    """``--noderesourcetopology``: the object beside the NodeTopology, the stated policy as its attribute;
    published again unchanged, nothing is written."""
    from .noderesourcetopology import nrt_crd

    kubectl("apply", "--server-side", "-f", str(nrt_crd()))
    kubectl("wait", "--for=condition=Established", "crd/noderesourcetopologies.topology.node.k8s.io")
    node = make_node("nrt-cli-01")["metadata"]["name"]
    flags = ("--noderesourcetopology", "--topology-manager-policy", "single-numa-node")
    try:
        result = cluster.publish_bundle(BUNDLES / "dgx-a100", node, *flags)
        assert result.returncode == 0, result.stderr
        assert f"published NodeResourceTopology/{node}" in result.stdout, result.stdout
        zones = kubectl("get", "noderesourcetopology", node, "-o", "jsonpath={.zones[*].name}").stdout
        assert zones.split() == [f"node-{i}" for i in range(8)]
        policy = kubectl("get", "noderesourcetopology", node, "-o", "jsonpath={.attributes[0].value}").stdout
        assert policy == "single-numa-node"
        again = cluster.publish_bundle(BUNDLES / "dgx-a100", node, *flags)
        assert f"NodeResourceTopology/{node}: unchanged" in again.stdout, again.stdout
    finally:
        kubectl("delete", "noderesourcetopology", node, "--ignore-not-found")
