"""This node's ResourceSlices read by the agent's reader (nodetopo.kube.resourceslices) from the real
API server (resource.k8s.io/v1, Kubernetes 1.34), as the agent's identity: deploy/rbac.yaml's
ClusterRole through a token bound to a pod on the node. Slices of two nodes exist; only this node's
are read. Without the grant the reader answers why, never an empty mapping.

The parser's refusals of malformed answers are unit tests at the end (no cluster)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from agent.kube_support import NAMESPACE, apply_deploy

from nodetopo.errors import ParseError
from nodetopo.kube import resourceslices
from nodetopo.kube.config import ClusterAccess
from nodetopo.kube.resourceslices import parse_resource_slice_page, read_resource_slices
from nodetopo.kube.session import ApiSession
from nodetopo.kube.transport import KubeConnection
from nodetopo.kubelet.allocation import GPU_DRA_DRIVERS
from nodetopo.model import SliceDevice

SLICES = "/apis/resource.k8s.io/v1/resourceslices"


def gpu(name: str, uuid_: str | None, bus: str) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "type": {"string": "gpu"},
        "resource.kubernetes.io/pciBusID": {"string": bus},
    }
    if uuid_ is not None:
        attributes["uuid"] = {"string": uuid_}
    return {"name": name, "attributes": attributes}


def slice_body(
    name: str, node: str, driver: str, devices: list[dict[str, Any]], **pool: int
) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": pool.get("generation", 1), "resourceSliceCount": 1},
            "devices": devices,
        },
    }


@pytest.fixture
def slices(cluster: Any, make_node: Callable[..., dict[str, Any]]) -> Iterator[tuple[str, str]]:
    """Two nodes' slices: this node's GPU driver pool in a stale generation 1 and a current 2 (gpu-1
    published with its pciBusID only), a NIC driver's slice of this node, and another node's GPUs."""
    mine = make_node()["metadata"]["name"]
    other = make_node()["metadata"]["name"]
    tag = uuid.uuid4().hex[:6]
    bodies = [
        slice_body(
            f"{mine}-gpu-old-{tag}", mine, "gpu.nvidia.com", [gpu("gpu-0", "GPU-stale", "0000:07:00.0")]
        ),
        slice_body(
            f"{mine}-gpu-{tag}",
            mine,
            "gpu.nvidia.com",
            [gpu("gpu-0", "GPU-mine-0", "0000:18:00.0"), gpu("gpu-1", None, "0000:2a:00.0")],
            generation=2,
        ),
        slice_body(f"{mine}-nic-{tag}", mine, "dra.net", [{"name": "ibp24s0", "attributes": {}}]),
        slice_body(
            f"{other}-gpu-{tag}", other, "gpu.nvidia.com", [gpu("gpu-0", "GPU-other-0", "0000:18:00.0")]
        ),
    ]
    created = []
    try:
        for body in bodies:
            status, answer = cluster.request("POST", SLICES, body=body)
            assert status == 201, answer
            created.append(body["metadata"]["name"])
        yield mine, other
    finally:
        for name in created:
            cluster.request("DELETE", f"{SLICES}/{name}")


@pytest.fixture
def agent_access(
    cluster: Any, tmp_path: Path, node_bound_token: Callable[..., Any]
) -> Callable[[str], ClusterAccess]:
    apply_deploy(cluster, tmp_path)

    def access(node: str) -> ClusterAccess:
        token = node_bound_token(node, namespace=NAMESPACE, service_account="nodetopo-agent")
        return ClusterAccess(server=cluster.server, ca_file=str(cluster.ca_file), token=token.token)

    return access


@pytest.mark.k8s
def test_the_agent_reads_only_its_own_nodes_gpu_slices_of_the_newest_generation(
    slices: tuple[str, str], agent_access: Callable[[str], ClusterAccess], monkeypatch: pytest.MonkeyPatch
) -> None:
    mine, _ = slices
    with KubeConnection(agent_access(mine)) as connection:
        got = read_resource_slices(ApiSession(connection), mine, drivers=GPU_DRA_DRIVERS)
        assert got == (
            SliceDevice(
                driver="gpu.nvidia.com",
                pool=mine,
                device="gpu-0",
                uuid="GPU-mine-0",
                pci_bus_id="0000:18:00.0",
            ),
            SliceDevice(
                driver="gpu.nvidia.com", pool=mine, device="gpu-1", uuid=None, pci_bus_id="0000:2a:00.0"
            ),
        )
        everything = read_resource_slices(ApiSession(connection), mine)
        assert isinstance(everything, tuple)
        assert sorted(d.device for d in everything) == ["gpu-0", "gpu-1", "ibp24s0"]
        assert connection.requests == 2  # one list each: never a get per slice
        # one slice a page: the continue token is followed, the answer is the same
        monkeypatch.setattr(resourceslices, "PAGE_SIZE", 1)
        assert read_resource_slices(ApiSession(connection), mine, drivers=GPU_DRA_DRIVERS) == got
        # more pages than the bound: the reader says so rather than answering a part
        monkeypatch.setattr(resourceslices, "MAX_PAGES", 1)
        cut = read_resource_slices(ApiSession(connection), mine)
        assert isinstance(cut, str) and "more than 1 slices" in cut, cut
        assert connection.requests >= 2 + 3 + 1  # a page per slice of this node, then one page only


@pytest.mark.k8s
def test_without_the_grant_the_reader_says_why_never_nothing(cluster: Any, slices: tuple[str, str]) -> None:
    mine, _ = slices
    access = ClusterAccess(
        server=cluster.server, ca_file=str(cluster.ca_file), token=cluster.users["nobody"].token
    )
    with KubeConnection(access) as connection:
        got = read_resource_slices(ApiSession(connection), mine, drivers=GPU_DRA_DRIVERS)
    assert isinstance(got, str), got
    assert got.startswith("list ResourceSlices (resource.k8s.io/v1): HTTP 403: "), got
    assert 'cannot list resource "resourceslices"' in got, got


# ---- the parser (no cluster) -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("page", "where"),
    [
        ({"items": {"a": 1}}, "list.items"),
        ({"items": [{"spec": {"nodeName": "n", "pool": {"name": "n"}}}]}, "items[0].spec.driver"),
        ({"items": [{"spec": {"nodeName": "n", "driver": "d", "pool": {}}}]}, "items[0].spec.pool.name"),
        (
            {"items": [{"spec": {"nodeName": "n", "driver": "d", "pool": {"name": "n"}, "devices": [{}]}}]},
            "items[0].spec.devices[0].name",
        ),
        (
            {"items": [{"spec": {"nodeName": "n", "driver": "d", "pool": {"name": "n", "generation": "2"}}}]},
            "items[0].spec.pool.generation",
        ),
    ],
)
def test_a_malformed_answer_is_a_parse_error_naming_where(page: dict[str, Any], where: str) -> None:
    with pytest.raises(ParseError, match=re.escape(f"resourceslices: {where}: ")):
        parse_resource_slice_page(page, node="n")


def test_a_slice_of_another_node_is_skipped_even_if_the_server_sent_it() -> None:
    page = {
        "items": [
            {"spec": {"nodeName": "b", "driver": "d", "pool": {"name": "b"}, "devices": [{"name": "x"}]}},
            {
                "spec": {
                    "nodeName": "a",
                    "driver": "gpu.nvidia.com",
                    "pool": {"name": "a"},
                    "devices": [
                        {"name": "gpu-0", "attributes": {"gpu.nvidia.com/uuid": {"string": "GPU-q"}}}
                    ],
                }
            },
        ],
        "metadata": {"continue": "t"},
    }
    found, token = parse_resource_slice_page(page, node="a")
    assert found == [(0, SliceDevice(driver="gpu.nvidia.com", pool="a", device="gpu-0", uuid="GPU-q"))]
    assert token == "t"
