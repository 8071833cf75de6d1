"""/healthz, /readyz and /metrics over real HTTP (port 0), with a fake clock for liveness."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agent.support import DGX_H100, FakeClock, FakePublisher, SwitchableScan, config
from nodetopo.agent.health import Health, HealthServer
from nodetopo.agent.loop import Agent
from nodetopo.agent.metrics import make_registry
from nodetopo.errors import TransientError
from nodetopo.topology.discover import bundle_context


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@pytest.fixture
def served() -> object:
    clock, publisher = FakeClock(), FakePublisher()
    agent = Agent(
        config(interval_seconds=60),
        scan=SwitchableScan(bundle_context(DGX_H100)),
        publisher=publisher,
        clock=clock,
        wall_clock=lambda: 1_800_000_000.0,
        sleep=clock.sleep,
    )
    server = HealthServer(("127.0.0.1", 0), agent.health, make_registry(agent.stats)).start()
    yield agent, clock, publisher, server.port
    server.stop()


def test_readyz_after_first_publish_and_healthz_until_stuck(served: object) -> None:
    agent, clock, publisher, port = served  # type: ignore[misc]
    assert get(port, "/readyz")[0] == 503
    assert get(port, "/healthz")[0] == 200
    publisher.errors = [TransientError("apiserver down")]
    agent.run_cycle("start")
    assert get(port, "/readyz")[0] == 503  # a failed publish is not ready
    agent.run_cycle("retry")
    assert get(port, "/readyz") == (200, "ok\n")
    agent.health.beat(60)  # going to sleep for one interval
    clock.now += 60 + 3 * 60 - 1
    assert get(port, "/healthz")[0] == 200
    clock.now += 2  # more than 3 intervals late: stuck
    status, text = get(port, "/healthz")
    assert status == 503 and "stuck" in text
    assert get(port, "/nope")[0] == 404


def test_metrics_names_and_values(served: object) -> None:
    agent, _clock, publisher, port = served  # type: ignore[misc]
    publisher.errors = [TransientError("down")]
    agent.run_cycle("start")
    agent.run_cycle("retry")
    agent.run_cycle("interval")
    status, text = get(port, "/metrics")
    assert status == 200
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name in (
        "nodetopo_agent_info",
        "nodetopo_discovery_duration_seconds",
        "nodetopo_discovery_cycles",
        "nodetopo_source_errors",
        "nodetopo_source_stale",
        "nodetopo_publish_writes",
        "nodetopo_publish_failures",
        "nodetopo_last_successful_publish_timestamp_seconds",
        "nodetopo_label_removals",
        "nodetopo_gpus",
        "nodetopo_nvlink_islands",
        "nodetopo_rdma_nics",
        "process_resident_memory_bytes",
    ):
        assert name in families, name

    def value(family: str, sample: str, **labels: str) -> float:
        for s in families[family].samples:
            if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
        raise AssertionError((family, sample, labels))

    assert value("nodetopo_gpus", "nodetopo_gpus") == 8
    assert value("nodetopo_nvlink_islands", "nodetopo_nvlink_islands") == 1
    assert value("nodetopo_rdma_nics", "nodetopo_rdma_nics") == 10
    assert value("nodetopo_publish_writes", "nodetopo_publish_writes_total", object="nodetopology") == 1
    assert value("nodetopo_publish_writes", "nodetopo_publish_writes_total", object="labels") == 1
    assert value("nodetopo_publish_failures", "nodetopo_publish_failures_total", error="TransientError") == 1
    assert value("nodetopo_discovery_cycles", "nodetopo_discovery_cycles_total", trigger="interval") == 1
    assert (
        value(
            "nodetopo_discovery_duration_seconds", "nodetopo_discovery_duration_seconds_count", source="nvml"
        )
        == 3
    )
    inf = value(
        "nodetopo_discovery_duration_seconds",
        "nodetopo_discovery_duration_seconds_bucket",
        source="sysfs.pci",
        le="+Inf",
    )
    assert inf == 3
    assert (
        value(
            "nodetopo_last_successful_publish_timestamp_seconds",
            "nodetopo_last_successful_publish_timestamp_seconds",
        )
        == 1_800_000_000.0
    )
    assert value("nodetopo_label_removals", "nodetopo_label_removals_total") == 0


def test_a_scan_within_its_command_timeouts_is_not_stuck_whatever_the_interval() -> None:
    """The flake of test_the_health_port_survives_careless_clients: at --interval-seconds=0.05 the
    grace was 0.15 s, and one scan on a loaded machine took longer, so /healthz answered 503 while
    the loop was working. The grace is never less than 3 command timeouts."""
    clock = FakeClock()
    agent = Agent(
        config(interval_seconds=0.05, command_timeout_seconds=20),
        scan=lambda: None,
        publisher=None,
        clock=clock,
    )  # type: ignore[arg-type]
    assert agent.health.grace_s == 60
    agent.health.beat()  # a scan starts
    clock.now += 59  # ... and waits on nvidia-smi, within its timeout, three times over
    assert agent.health.alive()[0]
    clock.now += 2
    assert not agent.health.alive()[0]
    assert (
        Agent(config(interval_seconds=60), scan=lambda: None, publisher=None, clock=clock).health.grace_s
        == 180
    )  # type: ignore[arg-type]


def test_health_without_server() -> None:
    clock = FakeClock()
    health = Health(clock=clock, interval_s=10)
    assert health.alive()[0] and not health.ready()[0]
    clock.now += 31
    assert not health.alive()[0]
    health.beat()
    assert health.alive()[0]
