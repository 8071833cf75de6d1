"""Claim-based pods at the extender: the request is what the pod's ResourceClaims ask (their GPUs from
gpu.nvidia.com, their nodetopo.io/ annotations), read through a ``ClaimReader``; the HTTP server
answers /filter and /prioritize with it. (Real claims from a real API server, and the real
kube-scheduler: tests/kube/test_extender_claims.py.)"""

from __future__ import annotations

import dataclasses
import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import synced_extender

from nodetopo.errors import PublishError
from nodetopo.extender.cache import ClusterState
from nodetopo.extender.claims import ClaimReader, with_claims
from nodetopo.extender.server import ExtenderHTTPServer, filter_nodes, parse_extender_args
from nodetopo.model import LinkClass
from nodetopo.placement.claims import ClaimRef, merge, parse_claim_request, pod_claims
from nodetopo.placement.request import PodRequest

ISLAND = {"nodetopo.io/gpus-in-one-island": "true"}
NODES = ["dgx-h100", "pcie-4x-nvbridge", "pcie-8x-2socket"]


def claim(name: str, count: int, annotations: dict[str, str] | None = None, **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "team", "annotations": annotations or {}},
        "spec": {
            "devices": {
                "requests": [{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": count}}]
            }
        },
        "status": status,
    }


def claim_pod(
    *refs: dict[str, str], made: dict[str, str] | None = None, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    """A pod using ``refs`` (pod.spec.resourceClaims entries); ``made``: template claims' names."""
    return {
        "metadata": {"name": "p", "namespace": "team", "uid": "u1", "annotations": annotations or {}},
        "spec": {
            "resourceClaims": list(refs),
            "containers": [{"name": "c", "resources": {"claims": [{"name": r["name"]} for r in refs]}}],
        },
        "status": {
            "phase": "Pending",
            "resourceClaimStatuses": [{"name": k, "resourceClaimName": v} for k, v in (made or {}).items()],
        },
    }


class Claims:
    """A fake API server's ResourceClaims: a dict, with a count of GETs and an optional failure."""

    def __init__(self, *objects: dict[str, Any]) -> None:
        self.objects = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in objects}
        self.gets = 0
        self.fail: Exception | None = None

    def __call__(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.gets += 1
        if self.fail is not None:
            raise self.fail
        return self.objects.get((namespace, name))


@pytest.fixture
def state(bodies: dict[str, dict[str, Any]]) -> ClusterState:
    return synced_extender(bodies.values())


def test_a_pod_s_claims_by_name_and_by_template() -> None:
    pod = claim_pod(
        {"name": "a", "resourceClaimName": "shared"},
        {"name": "b", "resourceClaimTemplateName": "tpl"},
        {"name": "c", "resourceClaimTemplateName": "tpl"},
        made={"b": "p-b-x7k2"},
    )
    assert pod_claims(pod) == (ClaimRef("a", "shared"), ClaimRef("b", "p-b-x7k2"), ClaimRef("c", None))


def test_claims_merge_into_the_pod_s_request() -> None:
    one = parse_claim_request(claim("a", 2, {**ISLAND, "nodetopo.io/max-nic-distance": "PXB"}))
    two = parse_claim_request(
        claim("b", 2, {"nodetopo.io/max-nic-distance": "pix", "nodetopo.io/link-layer": "Ethernet"})
    )
    merged = merge(PodRequest(gpus=1, link_layer="InfiniBand"), [one, two])
    assert merged == PodRequest(
        gpus=5, one_island=True, max_nic_distance=LinkClass.PIX, link_layer="InfiniBand"
    )


def _filter(state: ClusterState, reader: ClaimReader, pod: dict[str, Any]) -> dict[str, Any]:
    args = parse_extender_args({"Pod": pod, "NodeNames": NODES})
    request = with_claims(reader, args.namespace, args.claims, args.request)
    return filter_nodes(state, dataclasses.replace(args, request=request))


def test_a_claim_asking_four_gpus_in_one_island_passes_only_the_nvswitch_node(state: ClusterState) -> None:
    """dgx-h100 has one island of 8; pcie-4x-nvbridge islands of 2; pcie-8x-2socket no NVLink."""
    reader = ClaimReader(Claims(claim("four", 4, ISLAND)))
    result = _filter(state, reader, claim_pod({"name": "gpus", "resourceClaimName": "four"}))
    assert result["NodeNames"] == ["dgx-h100"]
    assert set(result["FailedAndUnresolvableNodes"]) == {"pcie-4x-nvbridge", "pcie-8x-2socket"}
    assert result["FailedAndUnresolvableNodes"]["pcie-4x-nvbridge"] == (
        "nodetopo: at most 2 GPUs in one NVLink island, pod needs 4"
    )
    # without the annotation the claim asks only a count: every node with 4 GPUs passes
    reader = ClaimReader(Claims(claim("four", 4)))
    assert (
        _filter(state, reader, claim_pod({"name": "gpus", "resourceClaimName": "four"}))["NodeNames"] == NODES
    )
    # the need stated on the pod holds for its claim's GPUs too
    pod = claim_pod({"name": "gpus", "resourceClaimName": "four"}, annotations=ISLAND)
    assert _filter(state, reader, pod)["NodeNames"] == ["dgx-h100"]


def test_an_allocated_claim_asks_nothing_more(state: ClusterState) -> None:
    allocated = claim("nine", 9, ISLAND, allocation={"devices": {"results": []}})
    reader = ClaimReader(Claims(allocated))
    assert _filter(state, reader, claim_pod({"name": "g", "resourceClaimName": "nine"}))["NodeNames"] == NODES


def test_a_missing_claim_fails_every_node_resolvably(state: ClusterState) -> None:
    reader = ClaimReader(Claims())
    result = _filter(state, reader, claim_pod({"name": "g", "resourceClaimName": "gone"}))
    assert result["NodeNames"] == [] and result["FailedAndUnresolvableNodes"] == {}
    assert result["FailedNodes"]["dgx-h100"] == "nodetopo: ResourceClaim team/gone does not exist (yet)"
    result = _filter(state, reader, claim_pod({"name": "g", "resourceClaimTemplateName": "tpl"}))
    assert (
        "the pod's claim 'g' has not been created from its template yet" in result["FailedNodes"]["dgx-h100"]
    )


def test_a_claim_with_a_bad_annotation_is_unresolvable(state: ClusterState) -> None:
    reader = ClaimReader(Claims(claim("bad", 2, {"nodetopo.io/gpus-in-one-island": "maybe"})))
    result = _filter(state, reader, claim_pod({"name": "g", "resourceClaimName": "bad"}))
    assert result["FailedAndUnresolvableNodes"]["dgx-h100"] == (
        "nodetopo: ResourceClaim team/bad: "
        'nodetopo.io/gpus-in-one-island: expected true or false, got "maybe"'
    )


def test_each_claim_is_read_once_per_ttl() -> None:
    now = [0.0]
    claims = Claims(claim("four", 4, ISLAND))
    reader = ClaimReader(claims, ttl_s=10, clock=lambda: now[0])
    refs = (ClaimRef("g", "four"),)
    for _ in range(3):
        assert reader.request("team", refs, PodRequest()).gpus == 4  # type: ignore[union-attr]
    assert claims.gets == 1
    now[0] = 11
    reader.request("team", refs, PodRequest())
    assert claims.gets == 2


@pytest.fixture
def server(state: ClusterState) -> Iterator[tuple[ExtenderHTTPServer, Claims]]:
    claims = Claims(claim("four", 4, ISLAND))
    srv = ExtenderHTTPServer(("127.0.0.1", 0), state, claims=ClaimReader(claims))
    srv.start_background()
    yield srv, claims
    srv.shutdown()
    srv.server_close()


def post(port: int, path: str, payload: Any) -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("POST", path, body=json.dumps(payload), headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def test_over_http_filter_and_prioritize_read_the_claim_once(
    server: tuple[ExtenderHTTPServer, Claims],
) -> None:
    srv, claims = server
    args = {"Pod": claim_pod({"name": "gpus", "resourceClaimName": "four"}), "NodeNames": NODES}
    status, body = post(srv.port, "/filter", args)
    assert status == 200 and body["NodeNames"] == ["dgx-h100"]
    status, body = post(srv.port, "/prioritize", args)
    assert status == 200 and [h["Score"] > 0 for h in body] == [True, False, False]
    assert claims.gets == 1


def test_over_http_a_claim_the_api_server_will_not_give_is_503(
    server: tuple[ExtenderHTTPServer, Claims],
) -> None:
    srv, claims = server
    claims.fail = PublishError("read resourceclaims/team/four: forbidden (403)")
    status, body = post(
        srv.port,
        "/filter",
        {"Pod": claim_pod({"name": "g", "resourceClaimName": "other"}), "NodeNames": NODES},
    )
    assert status == 503
    assert body["Error"] == (
        "cannot read the pod's claims: "
        "ResourceClaim team/other: read resourceclaims/team/four: forbidden (403)"
    )
