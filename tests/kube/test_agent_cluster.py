"""The agent against the real API server, with a token bound to a Pod on its node.

* first run publishes the NodeTopology and the labels; a restarted agent on an unchanged node
  makes zero writes and removes nothing (counted in the audit log);
* a failing source (nvidia-smi exit 18) keeps every label on the Node and marks the CR Stale;
* the API server goes away mid-run (a proxy cut) and comes back: the agent backs off, stays alive
  and healthy, converges after recovery and removes nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml
from agent.kube_support import AGENT_USER, NAMESPACE, SERVICE_ACCOUNT, Proxy, apply_deploy
from agent.support import DGX_H100, DRIVER_MISMATCH, SwitchableScan, all_nvidia_smi, bundle_with, config

from nodetopo.agent.loop import Agent
from nodetopo.agent.publisher import ApiPublisher
from nodetopo.kube.pacing import TokenBucket
from nodetopo.kube.session import RateLimitedSession
from nodetopo.topology.discover import bundle_context

pytestmark = pytest.mark.k8s

WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}


def agent_labels(cluster: Any, node: str) -> dict[str, str]:
    status, obj = cluster.request("GET", f"/api/v1/nodes/{node}")
    assert status == 200
    return {k: v for k, v in obj["metadata"].get("labels", {}).items() if k.startswith("nodetopo.io/")}


def stored_topology(cluster: Any, node: str) -> dict[str, Any] | None:
    status, obj = cluster.request("GET", f"/apis/nodetopo.io/v1alpha1/nodetopologies/{node}")
    return obj if status == 200 else None


def make_session(kubeconfig: Path, *, qps: float = 50.0, burst: int = 50) -> RateLimitedSession:
    client = kubernetes.config.new_client_from_config(config_file=str(kubeconfig), persist_config=False)
    return RateLimitedSession(client, TokenBucket(qps, burst, clock=time.monotonic, sleep=time.sleep))


@pytest.fixture
def node_a(
    cluster: Any,
    tmp_path: Path,
    make_node: Callable[..., dict[str, Any]],
    node_bound_token: Callable[..., Any],
) -> tuple[str, Any]:
    apply_deploy(cluster, tmp_path)
    node = make_node(labels={"team": "ml"})
    name = node["metadata"]["name"]
    token = node_bound_token(name, namespace=NAMESPACE, service_account=SERVICE_ACCOUNT)
    return name, token


def test_publish_restart_without_writes_and_stale_source(cluster: Any, node_a: tuple[str, Any]) -> None:
    name, token = node_a
    first = Agent(
        config(node_name=name),
        scan=SwitchableScan(bundle_context(DGX_H100)),
        publisher=ApiPublisher(make_session(token.kubeconfig), name),
    )
    started = time.monotonic()
    outcome = first.run_cycle("start")
    took = time.monotonic() - started
    assert outcome.published and outcome.written == ("nodetopology", "labels"), outcome
    assert first.health.ready()[0]
    labels = agent_labels(cluster, name)
    assert labels["nodetopo.io/gpu.count"] == "8" and labels["nodetopo.io/nvlink.island-size"] == "8"
    cr = stored_topology(cluster, name)
    assert cr is not None and cr["metadata"]["ownerReferences"][0]["name"] == name
    print(f"first cycle (scan + 7 API requests): {took:.2f}s")

    # restart: a new process on an unchanged node writes nothing and removes nothing
    offset = cluster.audit_barrier()
    session = make_session(token.kubeconfig)
    second = Agent(
        config(node_name=name),
        scan=SwitchableScan(bundle_context(DGX_H100)),
        publisher=ApiPublisher(session, name),
    )
    again = second.run_cycle("start")
    assert again.published and again.written == () and again.removed_labels == ()
    events = cluster.audit_events(since=offset, user=AGENT_USER)
    assert [e["verb"] for e in events if e["verb"] in WRITE_VERBS] == []
    assert {e["verb"] for e in events} <= {"get"} and len(events) == session.requests
    assert agent_labels(cluster, name) == labels

    # nvidia-smi breaks (driver/library mismatch): labels stay, the CR says Stale, no crash
    scan = SwitchableScan(bundle_with(commands=all_nvidia_smi(DRIVER_MISMATCH)))
    third = Agent(config(node_name=name), scan=scan, publisher=second.publisher)
    third.keeper = second.keeper  # the same process: it remembers the last good round
    broken = third.run_cycle("interval")
    assert broken.published and broken.removed_labels == ()
    assert agent_labels(cluster, name) == labels
    cr = stored_topology(cluster, name)
    assert cr is not None
    reasons = {c["type"]: c["reason"] for c in cr["status"]["conditions"]}
    assert reasons["Ready"] != "Discovered" and "Stale" in reasons.values(), reasons


@pytest.mark.parametrize("outage", ["proxy-cut", "apiserver-restart"])
def test_apiserver_outage_backoff_and_convergence(
    cluster: Any, node_a: tuple[str, Any], tmp_path: Path, outage: str
) -> None:
    """The API server goes away mid-run and comes back: once as a cut connection (a proxy between
    agent and server), once for real (kube-apiserver stopped, then started again on its port)."""
    name, token = node_a
    port = int(cluster.server.rsplit(":", 1)[1])
    proxy = Proxy(("127.0.0.1", port)).start()
    kubeconfig = yaml.safe_load(token.kubeconfig.read_text())
    kubeconfig["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{proxy.port}"
    proxied = tmp_path / "kubeconfig-proxied.yaml"
    proxied.write_text(yaml.safe_dump(kubeconfig))
    go_down, come_back = (
        (proxy.stop, proxy.start)
        if outage == "proxy-cut"
        else (cluster.stop_apiserver, cluster.start_apiserver)
    )

    scan = SwitchableScan(bundle_context(DGX_H100))
    agent = Agent(
        config(
            node_name=name,
            interval_seconds=1.0,
            backoff_initial_seconds=0.2,
            backoff_max_seconds=1.0,
            debounce_seconds=0.1,
        ),
        scan=scan,
        publisher=ApiPublisher(make_session(proxied), name),
    )
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(agent.run()), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not agent.health.ready()[0]:
            assert time.monotonic() < deadline, agent.outcomes
            time.sleep(0.05)
        labels = agent_labels(cluster, name)

        go_down()  # the API server is gone
        scan.ctx = bundle_with(commands={("ibstat",): None})  # and the node changes meanwhile
        failures_before = len([o for o in agent.outcomes if o.retry_in is not None])
        time.sleep(4.0)
        failed = [o for o in agent.outcomes if o.retry_in is not None][failures_before:]
        assert len(failed) >= 3, agent.outcomes[-5:]
        assert all(0.1 <= (o.retry_in or 0) <= 1.0 for o in failed)
        assert thread.is_alive() and agent.health.alive()[0]
        assert agent.stats.snapshot().failures

        come_back()  # back (start_apiserver returns once /readyz answers)
        recovered_at = time.monotonic()
        deadline = recovered_at + 1.0 + 1.0 + 5.0  # one interval + one max backoff + slack
        while True:
            cr = stored_topology(cluster, name)
            types = {c["type"]: c["reason"] for c in (cr or {}).get("status", {}).get("conditions", [])}
            if types.get("SourceIbstat") == "Stale":  # ibstat vanished: its last good facts, Stale
                break
            assert time.monotonic() < deadline, types
            time.sleep(0.1)
        print(f"converged {time.monotonic() - recovered_at:.2f}s after the API server came back")
        assert agent_labels(cluster, name) == labels  # nothing removed, nothing changed
        assert all(o.removed_labels == () for o in agent.outcomes)
    finally:
        agent.stop()
        thread.join(timeout=30)
        proxy.stop()
    assert codes == [0]
