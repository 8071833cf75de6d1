"""One node's NodeTopology must not slow scheduling for the cluster (issue 17, security item 3).

0.1.0: a schema-valid object with 20,000 GPUs in two-GPU islands (1.1 MB) made one ``/filter`` take
12 s, partly under the cache's global lock. Now the cost per node is bounded whatever the object
says: over the schema's bounds the node is refused at once, within them placement is near-linear,
and the lock is never held while placing.
"""

from __future__ import annotations

import copy
import threading
import time
from typing import Any

import pytest
from helpers import synced_extender

from nodetopo.extender.cache import ClusterState
from nodetopo.extender.server import filter_nodes, prioritize_nodes
from nodetopo.placement.fit import evaluate, node_shape
from nodetopo.placement.request import PodRequest
from nodetopo.resource.limits import MAX_GPUS, MAX_NICS

ONE_ISLAND = {"nodetopo.io/gpus-in-one-island": "true", "nodetopo.io/max-nic-distance": "SYS"}


def islands_of_two(gpus: int, nics: int = 2) -> dict[str, Any]:
    """A schema-valid NodeTopology: ``gpus`` GPUs in two-GPU NVLink islands, each listing ``nics`` NICs."""
    nic_names = [f"mlx5_{i}" for i in range(nics)]
    return {
        "metadata": {"name": f"hostile-{gpus}"},
        "status": {
            "nodeName": f"hostile-{gpus}",
            "gpus": [
                {
                    "index": i,
                    "island": i // 2,
                    "numaNode": 0,
                    "nicDistance": "PIX",
                    "nearestNICs": nic_names[:1],
                    "nics": [{"name": n, "distance": "PIX"} for n in nic_names],
                }
                for i in range(gpus)
            ],
            "nics": [
                {"name": n, "rdma": True, "state": "ACTIVE", "linkLayer": "InfiniBand"} for n in nic_names
            ],
            "nvlinkIslands": [
                {
                    "id": i,
                    "gpus": [2 * i, 2 * i + 1],
                    "linksPerPair": 1,
                    "fullyConnected": True,
                    "nvswitch": False,
                }
                for i in range(gpus // 2)
            ],
        },
    }


def gpu_pod(gpus: int, annotations: dict[str, str] | None = None, **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "default", "annotations": annotations or {}, **meta},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
    }


def synced(*objects: dict[str, Any]) -> ClusterState:
    return synced_extender(objects)


def test_an_object_over_the_bounds_is_refused_at_once() -> None:
    hostile = islands_of_two(20_000)
    started = time.perf_counter()
    shape = node_shape(hostile["status"])
    assert shape.invalid and "20000 GPUs" in shape.invalid and not shape.gpus
    state = synced(hostile)
    args = {"Pod": gpu_pod(2, ONE_ISLAND), "NodeNames": ["hostile-20000"]}
    result = filter_nodes(state, args)
    elapsed = time.perf_counter() - started
    assert "over the schema's bounds" in result["FailedAndUnresolvableNodes"]["hostile-20000"]
    # an unconstrained pod passes, as on a node without a NodeTopology (the scheduler checks capacity)
    assert filter_nodes(state, {"Pod": gpu_pod(1), "NodeNames": ["hostile-20000"]})["NodeNames"] == [
        "hostile-20000"
    ]
    assert elapsed < 1.0, f"{elapsed:.2f}s"


@pytest.mark.parametrize(
    "mutate",
    [
        lambda s: s["gpus"][0]["nics"].extend({"name": f"x{i}", "distance": "SYS"} for i in range(MAX_NICS)),
        lambda s: s.__setitem__("nics", [{"name": f"n{i}", "rdma": False} for i in range(MAX_NICS + 1)]),
        lambda s: s["gpus"][0].__setitem__("index", "zero"),
        lambda s: s["gpus"][0].__setitem__("island", 2**40),
        lambda s: s.__setitem__("gpus", {"0": {}}),
        lambda s: s["gpus"].__setitem__(0, "a GPU"),
    ],
    ids=[
        "gpu-nics-over-bound",
        "nics-over-bound",
        "index-a-string",
        "island-huge",
        "gpus-a-map",
        "gpu-a-string",
    ],
)
def test_malformed_or_oversized_parts_make_the_node_invalid_not_the_extender(mutate: Any) -> None:
    body = islands_of_two(8)
    mutate(body["status"])
    shape = node_shape(body["status"])
    assert shape.invalid and not shape.gpus
    verdict = evaluate(shape, shape.whole_gpus, PodRequest(gpus=2, one_island=True))
    assert not verdict.fits and verdict.unresolvable and "NodeTopology" in verdict.reason


def test_the_largest_schema_valid_node_is_placed_in_milliseconds() -> None:
    """MAX_GPUS GPUs in two-GPU islands, with bound pods: was islands x GPUs per placement."""
    body = islands_of_two(MAX_GPUS, nics=8)
    state = synced(body)
    name = body["metadata"]["name"]
    for i in range(100):  # 100 bound pods to place before the new one
        bound = gpu_pod(
            2, ONE_ISLAND, uid=f"u{i}", creationTimestamp=f"2025-01-01T00:{i // 60:02d}:{i % 60:02d}Z"
        )
        bound["spec"]["nodeName"] = name
        bound["status"] = {"phase": "Running"}
        state.upsert_pod(bound)
    args = {"Pod": gpu_pod(2, ONE_ISLAND), "NodeNames": [name]}
    started = time.perf_counter()
    result = filter_nodes(state, args)
    scores = prioritize_nodes(state, args)
    elapsed = time.perf_counter() - started
    assert result["NodeNames"] == [name] and scores[0]["Score"] > 0
    assert elapsed < 2.0, f"{elapsed:.3f}s for one node of {MAX_GPUS} GPUs"  # 0.1.0: 4.4 s


def test_the_cache_lock_is_not_held_while_placing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A slow evaluation (a big node) must not block the reflectors' updates or other requests."""
    import nodetopo.extender.cache as cache

    body = islands_of_two(16)
    state = synced(body)
    blocked: list[bool] = []
    real_evaluate = cache.evaluate

    def evaluate_while_updating(*args: Any) -> Any:
        other = copy.deepcopy(body)
        other["metadata"]["name"] = "other"
        writer = threading.Thread(target=state.upsert_topology, args=(other,))
        writer.start()
        writer.join(2.0)
        blocked.append(writer.is_alive())
        return real_evaluate(*args)

    monkeypatch.setattr(cache, "evaluate", evaluate_while_updating)
    result = filter_nodes(state, {"Pod": gpu_pod(2, ONE_ISLAND), "NodeNames": ["hostile-16"]})
    assert result["NodeNames"] == ["hostile-16"]
    assert blocked == [False]


def test_a_change_while_placing_is_not_overwritten_by_the_stale_result() -> None:
    """The free-GPU model computed outside the lock is kept only if the node did not change meanwhile."""
    body = islands_of_two(4)
    state = synced(body)
    name = body["metadata"]["name"]
    args = {"Pod": gpu_pod(4), "NodeNames": [name]}
    assert filter_nodes(state, args)["NodeNames"] == [name]
    bound = gpu_pod(2, uid="b1", creationTimestamp="2025-01-01T00:00:00Z")
    bound["spec"]["nodeName"] = name
    bound["status"] = {"phase": "Running"}
    state.upsert_pod(bound)
    assert "2 GPUs in use by bound pods" in filter_nodes(state, args)["FailedNodes"][name]


def test_a_node_changing_its_shape_on_every_update_does_not_grow_the_extender() -> None:
    """issue 23: a compromised agent republishing a schema-valid NodeTopology with a new shape each
    time grew the extender ~220 KB per update (every shape kept by the fit's entry-bounded caches and
    the cache's interned shapes): past the Deployment's 512 MiB after ~1,900 updates. A shape no node
    has is dropped with its cached verdicts, and the caches are bounded in bytes."""
    import tracemalloc

    gpus = 256
    body = islands_of_two(gpus)
    name = body["metadata"]["name"]
    state = synced(body)
    requests = [
        gpu_pod(2, ONE_ISLAND),
        gpu_pod(1),
        gpu_pod(4),
        gpu_pod(2, {"nodetopo.io/numa-aligned": "true"}),
    ]

    def churn(updates: int, start: int) -> None:
        for i in range(start, start + updates):
            body["status"]["gpus"][i % gpus]["numaNode"] = 1 + i // gpus  # a new shape each time
            state.upsert_topology(body)
            for pod in requests:
                assert filter_nodes(state, {"Pod": pod, "NodeNames": [name]})["NodeNames"] == [name]
                prioritize_nodes(state, {"Pod": pod, "NodeNames": [name]})

    tracemalloc.start()
    try:
        churn(20, 0)
        before = tracemalloc.get_traced_memory()[0]
        churn(100, 20)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 2**20, f"{grown / 2**20:.1f} MiB more after 100 updates"
    assert state.counts()["shapes"] == 1


def test_the_fit_memo_is_bounded_in_bytes_not_entries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Shapes evaluated outside the extender's cache (no node to release them) still cost at most
    the memo's byte budget: the least recently used shapes' entries go first."""
    from nodetopo.placement import fit

    memo = fit.FitCache(max_bytes=512 * 1024)
    monkeypatch.setattr(fit, "CACHE", memo)
    body = islands_of_two(64)
    shapes = []
    for i in range(200):
        body["status"]["gpus"][i % 64]["numaNode"] = 1 + i
        shape = node_shape(body["status"])
        shapes.append(shape)
        for k in (1, 2, 4):
            assert fit.evaluate(shape, shape.whole_gpus, PodRequest(gpus=k, one_island=k == 2)).fits
        assert memo.bytes <= memo.max_bytes
    assert 0 < len(memo) < 200
    kept = fit.evaluate(shapes[-1], shapes[-1].whole_gpus, PodRequest(gpus=1))
    assert kept is fit.evaluate(shapes[-1], shapes[-1].whole_gpus, PodRequest(gpus=1))  # recent: memoized
    memo.forget(shapes[-1])
    assert memo.bytes <= memo.max_bytes and shapes[-1] not in memo._buckets
