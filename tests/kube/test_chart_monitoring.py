"""The chart's runtime-acceptance objects with a real helm: `metrics.rules.enabled` renders the rules of
deploy/monitoring/nodetopo-rules.yaml as a PrometheusRule (Prometheus templates intact: promtool
checks what helm rendered), `metrics.dashboard.enabled` the dashboard in a ConfigMap carrying the
Grafana sidecar's label; neither by default; the chart's copies are the repository's files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from monitoring.promtool import run as promtool

from kube.chart_support import CHART, REPO, by_identity, helm, render, template

pytestmark = pytest.mark.k8s

MONITORING = REPO / "deploy" / "monitoring"
BOTH = ("--set", "metrics.rules.enabled=true,metrics.dashboard.enabled=true")


def test_chart_copies_are_the_repository_files() -> None:
    for name in ("nodetopo-rules.yaml", "dashboard.json"):
        copy, original = CHART / "files" / "monitoring" / name, MONITORING / name
        assert copy.read_bytes() == original.read_bytes(), (
            f"cp {original.relative_to(REPO)} {copy.relative_to(REPO)}"
        )


def test_helm_lint_passes_with_both_enabled() -> None:
    done = helm("lint", "--strict", str(CHART), *BOTH)
    assert "0 chart(s) failed" in done.stdout, done.stdout


def test_off_by_default() -> None:
    kinds = {(d["kind"], d["metadata"]["name"]) for d in render()}
    assert ("PrometheusRule", "nodetopo-runtime") not in kinds
    assert ("ConfigMap", "nodetopo-dashboard") not in kinds


def test_rules_and_dashboard_render_from_the_shipped_files(tmp_path: Path) -> None:
    docs = by_identity(render("nodetopo", "nodetopo", *BOTH))
    rule = docs[("PrometheusRule", "nodetopo", "nodetopo-runtime")]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["app.kubernetes.io/component"] == "runtime-rules"
    assert rule["spec"] == yaml.safe_load((MONITORING / "nodetopo-rules.yaml").read_text())
    # what helm rendered is a rule file promtool accepts, its {{ $labels.* }} templates untouched
    rendered = tmp_path / "rendered-rules.yaml"
    rendered.write_text(yaml.safe_dump(rule["spec"]))
    done = promtool("check", "rules", str(rendered))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "{{ $labels.workload }}" in json.dumps(rule["spec"])
    dashboard = docs[("ConfigMap", "nodetopo", "nodetopo-dashboard")]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert list(dashboard["data"]) == ["nodetopo-runtime.json"]
    assert json.loads(dashboard["data"]["nodetopo-runtime.json"]) == json.loads(
        (MONITORING / "dashboard.json").read_text()
    )


def test_labels_annotations_and_namespace_reach_the_objects() -> None:
    docs = by_identity(
        render(
            "gpu", "topo", *BOTH,
            "--set", "metrics.rules.labels.release=kube-prometheus-stack",
            "--set-string", "metrics.dashboard.labels.grafana_dashboard=nodetopo",
            "--set", "metrics.dashboard.annotations.grafana_folder=GPU",
            "--set", "metrics.dashboard.namespace=monitoring",
        )
    )  # fmt: skip
    rule = docs[("PrometheusRule", "topo", "gpu-nodetopo-runtime")]
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    dashboard: dict[str, Any] = docs[("ConfigMap", "monitoring", "gpu-nodetopo-dashboard")]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "nodetopo"
    assert dashboard["metadata"]["annotations"] == {"grafana_folder": "GPU"}


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        (("--set", "metrics.rules.enabeld=true"), "additional properties 'enabeld' not allowed"),
        (
            ("--set", "metrics.dashboard.labels.grafana_dashboard=1"),
            "/metrics/dashboard/labels/grafana_dashboard",
        ),
        (("--set", "metrics.dashboard.namespace=Not_A_Namespace"), "/metrics/dashboard/namespace"),
    ],
)
def test_schema_refuses_bad_monitoring_values(values: tuple[str, ...], complaint: str) -> None:
    done = template(values=values, check=False)
    assert done.returncode != 0 and complaint in done.stderr, done.stderr


def test_the_dashboard_configmap_is_accepted_by_the_real_apiserver(cluster: Any) -> None:
    (dashboard,) = [d for d in render("nodetopo", "default", *BOTH) if d["kind"] == "ConfigMap"]
    done = cluster.kubectl(
        "apply", "--server-side", "--dry-run=server", "-f", "-", input=yaml.safe_dump(dashboard)
    )
    assert "(server dry run)" in done.stdout
