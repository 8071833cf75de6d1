"""The extender uses the kubelet's holders (``status.gpus[].heldBy``) instead of its estimate.

pcie-4x-nvbridge has two 2-GPU NVLink islands, {0,1} and {2,3}. Two 1-GPU pods are bound to it.
The extender's model places them tightest-first (GPUs 0 and 1), which leaves island {2,3} whole;
when the kubelet handed them GPUs 0 and 2, no island is whole, and a pod asking for two GPUs in one
island must be refused there, although the node has two free GPUs.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from nodetopo.extender.cache import ClusterState
from nodetopo.extender.server import filter_nodes
from nodetopo.placement.fit import node_holders

from .test_server import gpu_pod

NODE = "pcie-4x-nvbridge"
ONE_ISLAND = {"nodetopo.io/gpus-in-one-island": "true"}


def with_holders(
    body: dict[str, Any], holders: dict[int, list[str]] | None, state: str = "Known"
) -> dict[str, Any]:
    """``body`` as an agent that asked the kubelet publishes it (None: the allocation is unknown)."""
    out = copy.deepcopy(body)
    status = out["status"]
    status["allocation"] = {"state": state, "source": "kubelet-podresources", "message": "", "resources": []}
    if holders is not None:
        for gpu in status["gpus"]:
            gpu["heldBy"] = [
                {"namespace": "default", "name": name, "container": "c"}
                for name in holders.get(gpu["index"], [])
            ]
    return out


def cluster(body: dict[str, Any], *bound: dict[str, Any]) -> ClusterState:
    s = ClusterState()
    s.replace_topologies([body])
    s.replace_pods(list(bound))
    s.topologies_synced.set()
    s.pods_synced.set()
    return s


def two_bound_pods() -> list[dict[str, Any]]:
    return [gpu_pod(1, node=NODE, uid="u1"), gpu_pod(1, node=NODE, uid="u2")]


def verdict(state: ClusterState, gpus: int = 2) -> str:
    result = filter_nodes(state, {"Pod": gpu_pod(gpus, ONE_ISLAND, uid="u9"), "NodeNames": [NODE]})
    if result["NodeNames"] == [NODE]:
        return "fits"
    return "refused: " + (
        result["FailedNodes"].get(NODE) or result["FailedAndUnresolvableNodes"].get(NODE, "")
    )


def test_the_estimate_sees_a_whole_island(bodies: dict[str, dict[str, Any]]) -> None:
    assert verdict(cluster(bodies[NODE], *two_bound_pods())) == "fits"


def test_the_kubelets_holders_split_both_islands_and_the_pod_is_refused(
    bodies: dict[str, dict[str, Any]],
) -> None:
    body = with_holders(bodies[NODE], {0: ["pod-u1"], 2: ["pod-u2"]})
    got = verdict(cluster(body, *two_bound_pods()))
    assert got.startswith("refused: ") and "island" in got, got
    # the same holders, tightly placed: island {2,3} is whole and the pod fits
    tight = with_holders(bodies[NODE], {0: ["pod-u1"], 1: ["pod-u2"]})
    assert verdict(cluster(tight, *two_bound_pods())) == "fits"


def test_a_gpu_whose_holder_is_gone_is_free(bodies: dict[str, dict[str, Any]]) -> None:
    body = with_holders(bodies[NODE], {0: ["pod-u1"], 2: ["pod-u2"]})
    # pod-u2 finished (no longer bound): GPU 2 is free again, island {2,3} whole
    assert verdict(cluster(body, gpu_pod(1, node=NODE, uid="u1"))) == "fits"


def test_a_bound_pod_not_yet_listed_is_still_counted(bodies: dict[str, dict[str, Any]]) -> None:
    # the kubelet lists pod-u1 on GPU 0; pod-u2 was bound after the agent's last answer: the model
    # places it (tightest: GPU 1), so island {2,3} stays whole; a third unlisted pod takes GPU 2
    body = with_holders(bodies[NODE], {0: ["pod-u1"]})
    assert verdict(cluster(body, *two_bound_pods())) == "fits"
    third = gpu_pod(1, node=NODE, uid="u3")
    assert verdict(cluster(body, *two_bound_pods(), third)).startswith("refused: ")


@pytest.mark.parametrize(
    ("state", "holders"),
    [("Unknown", None), ("Known", None)],  # unknown; "Known" without heldBy lists is not believed
)
def test_an_unknown_allocation_falls_back_to_the_estimate(
    bodies: dict[str, dict[str, Any]], state: str, holders: dict[int, list[str]] | None
) -> None:
    body = with_holders(bodies[NODE], holders, state)
    assert node_holders(body["status"]) is None
    assert verdict(cluster(body, *two_bound_pods())) == "fits"


def test_an_update_of_the_holders_changes_the_answer(bodies: dict[str, dict[str, Any]]) -> None:
    s = cluster(with_holders(bodies[NODE], {0: ["pod-u1"], 1: ["pod-u2"]}), *two_bound_pods())
    assert verdict(s) == "fits"
    s.upsert_topology(with_holders(bodies[NODE], {0: ["pod-u1"], 3: ["pod-u2"]}))
    assert verdict(s).startswith("refused: ")
    s.upsert_topology(with_holders(bodies[NODE], None, "Unknown"))
    assert verdict(s) == "fits"


def test_oversized_or_malformed_holders_are_unknown(bodies: dict[str, dict[str, Any]]) -> None:
    body = with_holders(bodies[NODE], {0: ["pod-u1"]})
    body["status"]["gpus"][0]["heldBy"] = [{"namespace": "d", "name": "p", "container": "c"}] * 257
    assert node_holders(body["status"]) is None
    body["status"]["gpus"][0]["heldBy"] = [{"name": "no-namespace"}]
    assert node_holders(body["status"]) is None
    body["status"]["gpus"][0]["heldBy"] = "pod-u1"
    assert node_holders(body["status"]) is None
