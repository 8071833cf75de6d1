"""The real kube-apiserver keeps status.health whole and refuses it over its bounds (issue 24).

tests/kube/test_crd.py publishes every fixture bundle (the degraded ones included) as one scan
judges it; here is what only the agent's tracker writes: a degraded edge with its counter rates
and since, and the counter baseline (a map of maps).
"""

from __future__ import annotations

import copy
import datetime
import json
import uuid
from typing import Any

import pytest
from helpers import BUNDLES

from nodetopo.errors import InvalidError, PublishError
from nodetopo.health import DEFAULT_POLICY, HealthTracker
from nodetopo.kube.session import ApiSession
from nodetopo.resource.body import to_nodetopology
from nodetopo.resource.identity import API_VERSION, GROUP, KIND, PLURAL, VERSION
from nodetopo.resource.limits import MAX_REASONS
from nodetopo.resource.reader import read_nodetopology
from nodetopo.topology.discover import bundle_context, scan

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
    return ApiSession(api_client, field_manager="crd-health-tests")


def _at(bundle: str) -> float:
    text = json.loads((BUNDLES / bundle / "manifest.json").read_text())["capturedAt"]
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


@pytest.fixture(scope="module")
def flapping() -> dict[str, Any]:
    """The agent's body after the two captures of the flapping rail (one tracker)."""
    tracker = HealthTracker(DEFAULT_POLICY.one_shot())
    scan(bundle_context(BUNDLES / "dgx-h100-flap-1"), judge=tracker, now=_at("dgx-h100-flap-1"))
    topology = scan(
        bundle_context(BUNDLES / "dgx-h100-flap-2"), judge=tracker, now=_at("dgx-h100-flap-2")
    ).topology
    return to_nodetopology(topology, "placeholder")


def _named(body: dict[str, Any]) -> dict[str, Any]:
    body = copy.deepcopy(body)
    name = f"health-{uuid.uuid4().hex[:10]}"
    body["metadata"]["name"] = name
    body["status"]["nodeName"] = name
    return body


def test_a_flapping_rail_with_its_rates_and_baseline_is_kept_whole(
    session: ApiSession, flapping: dict[str, Any]
) -> None:
    body = _named(flapping)
    health = body["status"]["health"]
    (edge,) = health["degraded"]
    assert edge["edge"] == "mlx5_6/port1" and edge["since"] == "2026-03-02T10:10:00Z"
    assert {r["counter"] for r in edge["rates"]} == {"carrier_changes", "link_downed", "symbol_error"}
    assert health["baseline"]["counters"]["mlx5_6/port1"]["link_downed"] == 7
    stored = _apply(session, body)
    assert stored["status"]["health"] == health
    read = read_nodetopology(stored)
    assert read.problems == () and read.status is not None
    assert [e.edge for e in read.status.health.degraded] == ["mlx5_6/port1"]


def test_an_edge_listed_twice_is_stored_and_read_once(session: ApiSession, flapping: dict[str, Any]) -> None:
    """``health.degraded`` is atomic like every status list (one writer applies it whole), so the API
    server no longer refuses an edge listed twice; the reader keeps the first and says so."""
    body = _named(flapping)
    body["status"]["health"]["degraded"].append(copy.deepcopy(body["status"]["health"]["degraded"][0]))
    stored = _apply(session, body)
    assert len(stored["status"]["health"]["degraded"]) == 2
    read = read_nodetopology(stored)
    assert [e.edge for e in read.facts.health.degraded] == ["mlx5_6/port1"]
    assert [str(p) for p in read.problems] == ["status.health: edge 'mlx5_6/port1' listed twice"]


@pytest.mark.parametrize(
    ("where", "mutate", "expected"),
    [
        ("reasons", lambda h: h["degraded"][0].__setitem__("reasons", ["R"] * (MAX_REASONS + 1)), "16"),
        ("kind", lambda h: h["degraded"][0].__setitem__("kind", "telepathy"), "Unsupported value"),
        ("negative counter", lambda h: h["baseline"]["counters"]["mlx5_6/port1"].__setitem__("x", -1), "0"),
        # server-side apply refuses to build the typed patch of these two: kube-apiserver answers 500
        (
            "counter word",
            lambda h: h["baseline"]["counters"]["mlx5_6/port1"].__setitem__("x", "many"),
            "expected numeric",
        ),
        ("no checked", lambda h: h.pop("checked"), "checked"),
    ],
)
def test_a_wrong_health_is_refused(
    session: ApiSession, flapping: dict[str, Any], where: str, mutate: Any, expected: str
) -> None:
    body = _named(flapping)
    mutate(body["status"]["health"])
    with pytest.raises((InvalidError, PublishError)) as info:
        _apply(session, body)
    assert info.value.status in (422, 500), (where, info.value)
    assert expected in str(info.value), (where, str(info.value)[:2000])
