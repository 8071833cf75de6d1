"""The runtime-acceptance rules and dashboard (deploy/monitoring/) with a real promtool: the rule
file checks, its unit tests (tests/monitoring/rules_test.yaml: pods spanning two islands, a rail at
half rate, a NUMA-remote serving replica, a degraded NVLink) pass, and fail when a threshold of the
rules is wrong; every query of the dashboard returns series on the same input series; the
PrometheusRule wrapper holds the same groups; the dashboard JSON is a well-formed Grafana dashboard."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import BUNDLES

from monitoring.promtool import REPO, RULE_TESTS, RULES, expr_tests_file, input_series, run

MONITORING = REPO / "deploy" / "monitoring"
DASHBOARD = MONITORING / "dashboard.json"


def rule_groups() -> list[dict[str, Any]]:
    return list(yaml.safe_load(RULES.read_text())["groups"])


def alerts() -> list[dict[str, Any]]:
    return [r for g in rule_groups() for r in g["rules"] if "alert" in r]


def test_promtool_checks_the_rule_file() -> None:
    done = run("check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    count = sum(len(g["rules"]) for g in rule_groups())
    assert f"SUCCESS: {count} rules found" in done.stdout


def test_promtool_check_rejects_a_broken_rule(tmp_path: Path) -> None:
    """The check is real: a PromQL error and a bad template are refused."""
    broken = tmp_path / "broken.yaml"
    broken.write_text(
        RULES.read_text().replace(
            "max by (workload) (nodetopo:replica)", "max by (workload) (nodetopo:replica", 1
        )
    )
    done = run("check", "rules", str(broken))
    assert done.returncode != 0 and "nodetopo:workload" in done.stdout + done.stderr
    bad_template = tmp_path / "template.yaml"
    bad_template.write_text(RULES.read_text().replace("{{ $labels.edge }} of", "{{ $labels.edge of", 1))
    done = run("check", "rules", str(bad_template))
    assert done.returncode != 0, done.stdout


def test_rule_unit_tests_pass() -> None:
    done = run("test", "rules", str(RULE_TESTS))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


NVLINK_TX_LOWER = (
    'nodetopo_expected_nvlink_tx_bytes_per_second{scope="island", collective="all_reduce", bound="lower"}'
)
#: (what is changed in the rules, the alert whose unit test must then fail)
WRONG_THRESHOLDS = [
    ("nodetopo:workload_step_seconds:p99_over_p50_10m > 1.5", "> 1.5", "> 3", "NodetopoStepTimeJitter"),
    ("0.75 * nodetopo:node_gpu_rail_tx_avg_bytes_per_second", "0.75 *", "0.4 *", "NodetopoRailBelowPeers"),
    ("nodetopo:node_numa_remote_access:ratio_rate5m > 0.3", "> 0.3", "> 0.5", "NodetopoNumaRemoteAccessHigh"),
    # a replica counted NUMA-misplaced only with fewer than no local CPUs: chat-0 (none local) is
    # then judged as its workload (ResourceNotReal inside an island), a wrong verdict
    (
        "(nodetopo_workload_cpu_numa_local_ratio) < 0.5)\n",
        "< 0.5)",
        "< 0)",
        "NodetopoServingP99AboveObjective",
    ),
    ("nodetopo:gpu_pcie_replays:rate5m * 60 > 8", "> 8", "> 30", "NodetopoPcieReplays"),
    ("nodetopo:workload_gpu_nvlink_tx:cv > 0.25", "> 0.25", "> 0.7", "NodetopoGpuThroughputUneven"),
    # a band whose floor is too high: the upper bound, or the bus bandwidth band (which an NVLS job's
    # NVLink sends stay below while it runs well): solo-ok, healthy under NVLS, would be called slow
    (NVLINK_TX_LOWER, 'bound="lower"', 'bound="upper"', "NodetopoBandwidthBelowBand"),
    (NVLINK_TX_LOWER, "nvlink_tx", "busbw", "NodetopoBandwidthBelowBand"),
]


@pytest.mark.parametrize(
    ("where", "old", "new", "alert"), WRONG_THRESHOLDS, ids=[w[3] + ":" + w[2] for w in WRONG_THRESHOLDS]
)
def test_rule_unit_tests_fail_when_a_threshold_is_wrong(
    tmp_path: Path, where: str, old: str, new: str, alert: str
) -> None:
    """The unit tests pin the thresholds: each change below makes the test of `alert` fail."""
    text = RULES.read_text()
    assert text.count(where) == 1, where
    rules = tmp_path / "deploy" / "monitoring" / RULES.name
    rules.parent.mkdir(parents=True)
    rules.write_text(text.replace(where, where.replace(old, new, 1)))
    tests = tmp_path / "tests" / "monitoring" / RULE_TESTS.name
    tests.parent.mkdir(parents=True)
    shutil.copy(RULE_TESTS, tests)
    done = run("test", "rules", str(tests))
    assert done.returncode != 0, done.stdout
    failing = set(re.findall(r"alertname: (\w+), time:", done.stdout + done.stderr))
    assert alert in failing, done.stdout[-3000:]


def test_every_alert_names_the_boundary_and_the_attribution() -> None:
    for rule in alerts():
        labels = rule.get("labels", {})
        joined = "group_left(boundary, attribution)" in rule["expr"]
        assert (
            joined
            or {"boundary", "attribution"} <= set(labels)
            or ("attribution" in labels and '"boundary"' in rule["expr"])
        ), rule["alert"]
        assert (
            labels.get("severity") and rule["annotations"]["summary"] and rule["annotations"]["description"]
        )
        assert labels.get("attribution", "PlacedWrong") in ("PlacedWrong", "ResourceNotReal"), rule["alert"]


def test_every_alert_is_unit_tested_firing() -> None:
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    fired = {
        case["alertname"]
        for group in tests
        for case in group.get("alert_rule_test", ())
        if case.get("exp_alerts")
    }
    assert fired == {rule["alert"] for rule in alerts()}


def test_the_prometheusrule_wraps_the_same_groups() -> None:
    wrapper = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    assert wrapper["apiVersion"] == "monitoring.coreos.com/v1" and wrapper["kind"] == "PrometheusRule"
    assert wrapper["spec"] == yaml.safe_load(RULES.read_text())


# -- the dashboard ---------------------------------------------------------------------------------


def dashboard() -> dict[str, Any]:
    return dict(json.loads(DASHBOARD.read_text()))


def targets() -> list[tuple[str, str]]:
    """(panel title, expr) of every query of the dashboard."""
    return [(p["title"], t["expr"]) for p in dashboard()["panels"] for t in p.get("targets", ())]


def substituted(expr: str) -> str:
    """A panel query as Grafana sends it for every node (``$node`` is a regex matcher's value)."""
    return expr.replace("$node", ".*").replace("$__rate_interval", "5m")


def test_every_dashboard_query_returns_series_on_the_rule_test_inputs(tmp_path: Path) -> None:
    """Each query, with the rules loaded and every unit test's input series, returns something at
    the time the alerts fire (the alerts table reads ALERTS, which the rules write)."""
    cases = [
        (f"(count({substituted(expr)}) > bool 0) or vector(0)", [{"labels": "{}", "value": 1}])
        for _, expr in targets()
    ]
    path = expr_tests_file(tmp_path, input_series(), cases)
    done = run("test", "rules", str(path))
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]


def test_an_empty_dashboard_query_is_caught(tmp_path: Path) -> None:
    """The check above is real: a misspelt series makes it fail."""
    expr = 'count(nodetopo:gpu_infos{node=~".*"})'
    path = expr_tests_file(
        tmp_path, input_series(), [(f"({expr} > bool 0) or vector(0)", [{"labels": "{}", "value": 1}])]
    )
    assert run("test", "rules", str(path)).returncode != 0


def test_dashboard_is_a_grafana_dashboard_with_a_sound_layout() -> None:
    d = dashboard()
    assert d["uid"] == "nodetopo-runtime" and d["title"] and isinstance(d["schemaVersion"], int)
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert (
        variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    )
    assert "nodetopo_agent_info" in variables["node"]["query"]["query"]
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    cells: dict[tuple[int, int], str] = {}
    for p in d["panels"]:
        assert p["type"] in {"stat", "timeseries", "table"}, p["title"]
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        g = p["gridPos"]
        assert g["x"] >= 0 and g["w"] > 0 and g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert refs and len(refs) == len(set(refs)), p["title"]
        for t in p["targets"]:
            for var in re.findall(r"\$(\w+)", t["expr"]):
                assert var in variables, f"{p['title']}: ${var} is not a variable"
    # the node at a glance first: the health tiles fill the top rows
    top = sorted((p["gridPos"]["y"], p["gridPos"]["x"], p["type"]) for p in d["panels"])[:8]
    assert {kind for _, _, kind in top} == {"stat"}


def test_dashboard_reads_only_recorded_or_exported_series() -> None:
    """A nodetopo: series the dashboard reads is recorded by the rules; other series are the agent's
    or ALERTS (the DCGM and node-exporter series are read through the rules)."""
    recorded = {r["record"] for g in rule_groups() for r in g["rules"] if "record" in r}
    agent_series = {
        "nodetopo_edge_degraded",
        "nodetopo_expected_busbw_bytes_per_second",
        "nodetopo_expected_nvlink_tx_bytes_per_second",
        "nodetopo_agent_info",
    }
    for title, expr in targets():
        names = set(re.findall(r"\b(nodetopo[:_][A-Za-z0-9_:]+|ALERTS|DCGM_\w+|node_\w+)\s*[{(\[]?", expr))
        names -= {"node"}
        for name in names:
            if name.startswith("nodetopo:"):
                assert name in recorded, f"{title}: {name} is not recorded by {RULES.name}"
            else:
                assert name in agent_series | {"ALERTS"}, f"{title}: reads {name} directly"


def test_the_rule_tests_bands_are_what_the_agent_exports_for_that_machine() -> None:
    """The degraded-NVLink group's nodes are 8 x H100 NVSwitch machines: their band series are the
    ones the agent computes from the dgx-h100 fixture (its bandwidth model), not numbers of our own."""
    from prometheus_client.exposition import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from nodetopo.agent.bands import expected_bands
    from nodetopo.agent.metrics import AgentStats, make_registry
    from nodetopo.topology.discover import bundle_context, scan

    stats = AgentStats("d1")
    stats.record_bands(expected_bands(scan(bundle_context(BUNDLES / "dgx-h100")).topology, "d1"))
    text = generate_latest(make_registry(stats, process=False)).decode()
    exported = {
        (s.name, tuple(sorted(s.labels.items())), s.value)
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name.startswith("nodetopo_expected_")
    }
    inputs = set()
    for group in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        if group["name"] != "a degraded NVLink":
            continue
        for series in group["input_series"]:
            name, _, rest = series["series"].partition("{")
            if not name.startswith("nodetopo_expected_"):
                continue
            labels = dict(re.findall(r'(\w+)="([^"]*)"', rest))
            if labels["node"] != "d1":
                continue
            del labels["instance"], labels["job"]
            value = float(series["values"].split("x")[0])
            inputs.add((name, tuple(sorted(labels.items())), value))
    assert exported and inputs == exported
