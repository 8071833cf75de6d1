"""The extender protocol: JSON shapes, readiness, TCP_NODELAY, and the reflector's list/watch logic."""

from __future__ import annotations

import http.client
import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import synced_extender

from nodetopo.errors import ParseError
from nodetopo.extender.cache import ClusterState
from nodetopo.extender.server import (
    NO_TOPOLOGY,
    ExtenderHTTPServer,
    encode_priorities,
    filter_nodes,
    prioritize_nodes,
)
from nodetopo.kube.reflector import Handlers, Reflector


def gpu_pod(
    gpus: int, annotations: dict[str, str] | None = None, *, node: str | None = None, uid: str = "u1"
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"pod-{uid}",
            "namespace": "default",
            "uid": uid,
            "creationTimestamp": f"2025-01-01T00:00:0{uid[-1]}Z",
            "annotations": annotations or {},
        },
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
        },
        "status": {"phase": "Pending"},
    }


@pytest.fixture
def state(bodies: dict[str, dict[str, Any]]) -> ClusterState:
    return synced_extender(bodies.values())


def test_filter_answers_extender_filter_result(state: ClusterState) -> None:
    args = {
        "Pod": gpu_pod(4, {"nodetopo.io/gpus-in-one-island": "true"}),
        "NodeNames": ["dgx-h100", "pcie-4x-nvbridge", "unknown-node"],
    }
    result = filter_nodes(state, args)
    assert set(result) == {"NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
    assert result["NodeNames"] == ["dgx-h100"]
    assert result["FailedNodes"] == {"unknown-node": NO_TOPOLOGY}
    assert "NVLink island" in result["FailedAndUnresolvableNodes"]["pcie-4x-nvbridge"]
    assert result["Error"] == ""
    json.dumps(result)


def test_unconstrained_pods_pass_nodes_without_nodetopology(state: ClusterState) -> None:
    result = filter_nodes(state, {"Pod": gpu_pod(1), "NodeNames": ["unknown-node", "dgx-h100"]})
    assert result["NodeNames"] == ["unknown-node", "dgx-h100"]


def test_a_bad_annotation_rejects_every_node_with_its_text(state: ClusterState) -> None:
    args = {
        "Pod": gpu_pod(1, {"nodetopo.io/max-nic-distance": "near"}),
        "NodeNames": ["dgx-h100", "dgx-a100"],
    }
    result = filter_nodes(state, args)
    assert result["NodeNames"] == []
    assert all("nodetopo.io/max-nic-distance" in r for r in result["FailedAndUnresolvableNodes"].values())


def test_without_node_cache_the_node_objects_come_back(state: ClusterState) -> None:
    nodes = {"items": [{"metadata": {"name": "dgx-h100"}}, {"metadata": {"name": "pcie-8x-2socket"}}]}
    result = filter_nodes(state, {"Pod": gpu_pod(2, {"nodetopo.io/rdma": "required"}), "Nodes": nodes})
    assert result["Nodes"] == {"items": [{"metadata": {"name": "dgx-h100"}}]}
    assert result["NodeNames"] is None


def test_prioritize_answers_host_priority_list(state: ClusterState) -> None:
    args = {
        "Pod": gpu_pod(2, {"nodetopo.io/gpus-in-one-island": "true"}),
        "NodeNames": ["pcie-4x-nvbridge", "dgx-h100"],
    }
    result = prioritize_nodes(state, args)
    assert [set(p) for p in result] == [{"Host", "Score"}] * 2
    scores = {p["Host"]: p["Score"] for p in result}
    assert scores["pcie-4x-nvbridge"] > scores["dgx-h100"]


def test_encoded_priorities_are_what_json_makes_of_the_list() -> None:
    names = ["plain", 'quo"te\\back', "ünïcode-\u2603", "ctrl\x01\n\t", "", "\ud83d\ude00 pair"]
    scores = [0, 10, 7, 3, 10, 1]
    expected = [{"Host": n, "Score": s} for n, s in zip(names, scores, strict=True)]
    assert encode_priorities(names, scores) == json.dumps(expected, separators=(",", ":")).encode()
    assert encode_priorities([], []) == b"[]"


def test_prioritize_over_http_matches_prioritize_nodes(state: ClusterState) -> None:
    server = ExtenderHTTPServer(("127.0.0.1", 0), state)
    server.start_background()
    try:
        args = {
            "Pod": gpu_pod(2, {"nodetopo.io/gpus-in-one-island": "true"}),
            "NodeNames": ["pcie-4x-nvbridge", "dgx-h100", "no-such-node", "gh200-nvl"],
        }
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        conn.request(
            "POST", "/prioritize", body=json.dumps(args), headers={"Content-Type": "application/json"}
        )
        response = conn.getresponse()
        assert response.status == 200
        assert json.loads(response.read()) == prioritize_nodes(state, args)
        conn.close()
    finally:
        server.shutdown()
        server.server_close()


def test_bound_pods_use_capacity_until_they_finish(state: ClusterState) -> None:
    args = {"Pod": gpu_pod(2), "NodeNames": ["gh200-nvl"]}
    bound = gpu_pod(1, node="gh200-nvl", uid="b1")
    state.upsert_pod(bound)
    assert "1 GPU in use by bound pods" in filter_nodes(state, args)["FailedNodes"]["gh200-nvl"]
    bound["status"]["phase"] = "Succeeded"
    state.upsert_pod(bound)
    assert filter_nodes(state, args)["NodeNames"] == ["gh200-nvl"]
    state.upsert_pod(gpu_pod(1, node="gh200-nvl", uid="b2"))
    state.delete_pod(gpu_pod(1, node="gh200-nvl", uid="b2"))
    assert filter_nodes(state, args)["NodeNames"] == ["gh200-nvl"]


@pytest.fixture
def server(state: ClusterState) -> Iterator[ExtenderHTTPServer]:
    srv = ExtenderHTTPServer(("127.0.0.1", 0), state)
    srv.start_background()
    yield srv
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


def test_http_round_trip_and_503_until_synced(server: ExtenderHTTPServer, state: ClusterState) -> None:
    args = {"Pod": gpu_pod(1), "NodeNames": ["dgx-h100"]}
    status, body = post(server.port, "/filter", args)
    assert status == 200 and body["NodeNames"] == ["dgx-h100"]
    status, body = post(server.port, "/prioritize", args)
    assert status == 200 and body[0]["Host"] == "dgx-h100"
    state.pods_synced.clear()
    status, body = post(server.port, "/filter", args)
    assert status == 503 and "Pod cache has not synced" in body["Error"]
    status, _ = post(server.port, "/bind", args)
    assert status == 404


def test_accepted_sockets_have_tcp_nodelay(state: ClusterState) -> None:
    srv = ExtenderHTTPServer(("127.0.0.1", 0), state)
    try:
        client = socket.create_connection(("127.0.0.1", srv.port))
        conn, _ = srv.get_request()
        assert conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        conn.close()
        client.close()
    finally:
        srv.server_close()


class _Response:
    def __init__(self, payload: Any = None, lines: list[dict[str, Any]] | None = None) -> None:
        self.data = json.dumps(payload).encode() if payload is not None else b""
        self._lines = lines or []

    def stream(self, amt: int, decode_content: bool = True) -> Iterator[bytes]:
        text = "".join(json.dumps(line) + "\n" for line in self._lines).encode()
        yield text[:7]  # events split across chunks
        yield text[7:]

    def release_conn(self) -> None:
        pass


class _FakeApi:
    """Serves a scripted sequence of list pages and watch streams; records the queries."""

    def __init__(self, script: list[_Response], stop: threading.Event) -> None:
        self.script = script
        self.queries: list[dict[str, Any]] = []
        self.stop = stop

    def __call__(self, **kwargs: Any) -> _Response:
        assert kwargs.pop("_preload_content") is False
        kwargs.pop("_request_timeout")
        self.queries.append(kwargs)
        if not self.script:
            self.stop.set()
            return _Response(lines=[])
        return self.script.pop(0)


def _obj(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": rv}, "status": {}}


def test_a_list_page_or_a_watch_event_nested_too_deep_is_a_parse_error() -> None:
    """Was: ``RecursionError`` out of the reflector's list and watch (json.loads of the server's
    answer); now the bounded reader's ``ParseError``, which the run loop retries like any failure."""
    stop = threading.Event()

    def ignore(*args: Any) -> None:
        pass

    handlers = Handlers(replace=ignore, upsert=ignore, delete=ignore, synced=threading.Event())
    deep = "[" * 100_000 + "]" * 100_000
    page = _Response()
    page.data = ('{"items": ' + deep + "}").encode()
    reflector = Reflector(_FakeApi([page], stop), "things", handlers, stop=stop)
    with pytest.raises(
        ParseError, match=r"^kube: list things: JSON nested deeper than the decoder recurses$"
    ):
        reflector.list_all()
    event = _Response(lines=[{"type": "ADDED", "object": {}}])
    event.stream = lambda amt, decode_content=True: iter([('{"object": ' + deep + "}\n").encode()])
    reflector = Reflector(_FakeApi([event], stop), "things", handlers, stop=stop)
    reflector.resource_version = "1"
    with pytest.raises(ParseError, match=r"^kube: watch things: JSON nested deeper than"):
        reflector.watch_once()
    assert not handlers.synced.is_set()


def test_reflector_pages_watches_and_relists_on_410() -> None:
    stop = threading.Event()
    seen: dict[str, list[Any]] = {"replace": [], "upsert": [], "delete": []}
    handlers = Handlers(
        replace=lambda items: seen["replace"].append(sorted(o["metadata"]["name"] for o in items)),
        upsert=lambda o: seen["upsert"].append(o["metadata"]["name"]),
        delete=lambda o: seen["delete"].append(o["metadata"]["name"]),
        synced=threading.Event(),
    )
    api = _FakeApi(
        [
            _Response({"items": [_obj("a", "1")], "metadata": {"continue": "tok"}}),
            _Response({"items": [_obj("b", "2")], "metadata": {"resourceVersion": "10"}}),
            _Response(
                lines=[
                    {"type": "ADDED", "object": _obj("c", "11")},
                    {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}},
                    {"type": "DELETED", "object": _obj("a", "16")},
                    {"type": "ERROR", "object": {"code": 410, "message": "too old resource version"}},
                ]
            ),
            _Response({"items": [_obj("b", "2"), _obj("c", "11")], "metadata": {"resourceVersion": "20"}}),
        ],
        stop,
    )
    reflector = Reflector(api, "things", handlers, page_size=1, stop=stop, field_selector="f=1")
    reflector.run()
    assert seen["replace"] == [["a", "b"], ["b", "c"]]
    assert seen["upsert"] == ["c"] and seen["delete"] == ["a"]
    assert handlers.synced.is_set() and reflector.lists == 2
    assert api.queries[0] == {"limit": 1, "field_selector": "f=1"}
    assert api.queries[1]["_continue"] == "tok"
    assert api.queries[2]["watch"] is True and api.queries[2]["resource_version"] == "10"
    assert api.queries[2]["allow_watch_bookmarks"] is True
    assert "resource_version" not in api.queries[3] and "watch" not in api.queries[3]  # relisted after 410
    assert api.queries[4]["resource_version"] == "20"
