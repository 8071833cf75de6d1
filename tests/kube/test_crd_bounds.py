"""The real kube-apiserver refuses NodeTopology objects over the schema's bounds (issue 17, item 3).

0.1.0 accepted a NodeTopology of 20,000 GPUs in two-GPU islands (1.1 MB) that made one extender
/filter take 12 s. Now the schema's maxItems/maxLength (tests/test_crd_bounds.py checks them against
nodetopo/crd.py) make the API server refuse it, while the largest object within the bounds is kept.
"""

from __future__ import annotations

import copy
import itertools
import uuid
from typing import Any

import pytest

from nodetopo.errors import InvalidError, PublishError
from nodetopo.kube.session import ApiSession
from nodetopo.model import MAX_LINKED_GPUS
from nodetopo.resource.identity import API_VERSION, GROUP, KIND, PLURAL, VERSION
from nodetopo.resource.limits import MAX_CPULIST, MAX_GPU_LINKS, MAX_GPUS, MAX_NICS, MAX_SOURCES

from . import bodies

pytestmark = pytest.mark.k8s


def _apply(session: ApiSession, body: dict[str, Any]) -> dict[str, Any]:
    name = body["metadata"]["name"]
    meta = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": name}}
    session.apply_cluster_object(GROUP, VERSION, PLURAL, name, meta, status=False)
    status = copy.deepcopy(body["status"])
    for condition in status.get("conditions", []):
        condition.setdefault("lastTransitionTime", "2026-01-02T03:04:05Z")
    patch = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": name}, "status": status}
    return session.apply_cluster_object(GROUP, VERSION, PLURAL, name, patch, status=True)


@pytest.fixture
def session(api_client: Any) -> ApiSession:
    return ApiSession(api_client, field_manager="crd-bounds-tests")


def islands_of_two(name: str, gpus: int) -> dict[str, Any]:
    """A NodeTopology that is valid in every field but its size: ``gpus`` GPUs in two-GPU islands,
    each GPU with the required fields only (20,000 of them: ~1.8 MB, under the API server's 3 MiB)."""
    body = bodies.hgx_h100(name)
    status = body["status"]
    status["gpus"] = [{"index": i, "island": i // 2, "nearestNICs": [], "nics": []} for i in range(gpus)]
    status["nvlinkIslands"] = [
        {"id": i, "gpus": [2 * i, 2 * i + 1], "linksPerPair": 1, "fullyConnected": True, "nvswitch": False}
        for i in range(gpus // 2)
    ]
    status["preferredGPUSets"] = []
    status["migDevices"] = []
    status["summary"].update(gpuCount=gpus, islands=f"{gpus // 2}x2", nvswitch=False, migDevices=0)
    return bodies.finish(body)


def _name() -> str:
    return f"bounds-{uuid.uuid4().hex[:10]}"


def _refused(session: ApiSession, body: dict[str, Any]) -> str:
    with pytest.raises((InvalidError, PublishError)) as info:
        _apply(session, body)
    assert info.value.status in (413, 422), info.value
    return str(info.value)


def test_the_issue_object_is_refused(session: ApiSession) -> None:
    message = _refused(session, islands_of_two(_name(), 20_000))
    assert "status.gpus" in message and f"must have at most {MAX_GPUS} items" in message


def test_one_gpu_over_the_bound_is_refused_and_the_bound_itself_is_kept(session: ApiSession) -> None:
    message = _refused(session, islands_of_two(_name(), MAX_GPUS + 2))
    assert f"must have at most {MAX_GPUS} items" in message
    stored = _apply(session, islands_of_two(_name(), MAX_GPUS))
    assert len(stored["status"]["gpus"]) == MAX_GPUS
    assert len(stored["status"]["nvlinkIslands"]) == MAX_GPUS // 2


@pytest.mark.parametrize(
    ("where", "mutate", "expected"),
    [
        (
            "nics",
            lambda s: s.__setitem__(
                "nics", [{"name": f"mlx5_{i}", "rdma": True} for i in range(MAX_NICS + 1)]
            ),
            f"must have at most {MAX_NICS} items",
        ),
        (
            "gpu nics",
            lambda s: s["gpus"][0].__setitem__(
                "nics", [{"name": f"n{i}", "distance": "SYS"} for i in range(MAX_NICS + 1)]
            ),
            f"must have at most {MAX_NICS} items",
        ),
        (
            "sources",
            lambda s: s.__setitem__(
                "sources", [{"name": f"s{i}", "ok": True, "message": ""} for i in range(MAX_SOURCES + 1)]
            ),
            f"must have at most {MAX_SOURCES} items",
        ),
        ("model", lambda s: s["gpus"][0].__setitem__("model", "H" * 257), "may not be more than 256"),
        ("nic name", lambda s: s["nics"][0].__setitem__("name", "m" * 65), "may not be more than 64"),
        (
            "cpu list",
            lambda s: s["gpus"][0].__setitem__("cpuAffinity", ",".join(str(2 * i) for i in range(8000))),
            f"may not be more than {MAX_CPULIST}",
        ),
        ("source message", lambda s: s["sources"][0].__setitem__("message", "m" * 4097), "4096"),
    ],
)
def test_every_kind_of_overflow_is_refused(
    session: ApiSession, where: str, mutate: Any, expected: str
) -> None:
    body = bodies.hgx_h100(_name())
    mutate(body["status"])
    bodies.finish(body)
    message = _refused(session, body)
    assert expected in message, (where, message[:2000])


def _with_links(links: list[dict[str, Any]]) -> dict[str, Any]:
    body = bodies.hgx_h100(_name())
    body["status"]["gpuLinks"] = links
    return bodies.finish(body)


def _pairs(count: int) -> list[dict[str, Any]]:
    """``count`` distinct GPU pairs, lower index first (every pair of 64 GPUs, then pairs with a 65th)."""
    pairs = itertools.combinations(range(MAX_LINKED_GPUS + 2), 2)
    return [{"a": a, "b": b, "pcie": "SYS"} for a, b in itertools.islice(pairs, count)]


def test_gpu_links_one_over_the_bound_is_refused_and_the_bound_itself_is_kept(session: ApiSession) -> None:
    """The bound is every pair of a 64-GPU node (larger nodes publish none)."""
    message = _refused(session, _with_links(_pairs(MAX_GPU_LINKS + 1)))
    assert "status.gpuLinks" in message and f"must have at most {MAX_GPU_LINKS} items" in message
    stored = _apply(session, _with_links([{**p, "nvlinks": 18} for p in _pairs(MAX_GPU_LINKS)]))
    assert len(stored["status"]["gpuLinks"]) == MAX_GPU_LINKS == MAX_LINKED_GPUS * (MAX_LINKED_GPUS - 1) // 2


@pytest.mark.parametrize(
    ("links", "expected"),
    [
        ([{"a": 1, "b": 0, "pcie": "SYS"}], "a GPU pair is written once, lower index first"),
        ([{"a": 0, "b": 1, "pcie": "FAR"}], "Unsupported value"),
        ([{"a": 0, "b": 1, "nvlinks": 0}], "should be greater than or equal to 1"),
    ],
)
def test_a_gpu_link_is_one_pair_once(session: ApiSession, links: list[dict[str, Any]], expected: str) -> None:
    message = _refused(session, _with_links(links))
    assert expected in message, message[:2000]


def test_a_gpu_pair_listed_twice_is_stored_and_read_twice(session: ApiSession) -> None:
    """``gpuLinks`` is atomic (the agent writes each pair once; a map list made managedFields list
    every key of every entry): the API server stores a pair listed twice, and the reader gives both.
    Each entry's own rules (a < b, the class, the link count) are still the API server's."""
    from nodetopo.resource.reader import read_nodetopology

    body = _with_links([{"a": 0, "b": 1, "pcie": "SYS"}, {"a": 0, "b": 1, "nvlinks": 2}])
    links = read_nodetopology(_apply(session, body)).facts.gpu_links
    assert links is not None and [(x.a, x.b) for x in links] == [(0, 1), (0, 1)]
