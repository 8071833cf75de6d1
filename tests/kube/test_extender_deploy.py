"""deploy/extender as kubectl builds and the real API server accepts it: the NetworkPolicy that keeps
everyone but kube-scheduler away from the extender, and the TLS component (issue 17, item 2).

No network plugin runs in the test control plane, so these tests prove what the API server and
kustomize can prove (the policy is valid and selects exactly the extender's pods and port; the TLS
variant serves HTTPS with the secret mounted and probes switched to HTTPS), not the enforcement.
The HTTPS serving and the client-certificate rule are tested on a real process in
tests/extender/test_http_hardening.py.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from .cluster import REPO, LocalCluster

pytestmark = pytest.mark.k8s

EXTENDER = REPO / "deploy" / "extender"


def build(cluster: LocalCluster, root: Path) -> list[dict[str, Any]]:
    done = cluster.kubectl("kustomize", str(root))
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def by_kind(documents: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [d for d in documents if d["kind"] == kind]
    return found


def tls_overlay(tmp_path: Path) -> Path:
    """An overlay of a copy of deploy/ using the TLS component (kustomize loads nothing outside its root)."""
    shutil.copytree(REPO / "deploy", tmp_path / "deploy")
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        "resources: [../deploy/extender]\ncomponents: [../deploy/extender/tls]\n"
    )
    return overlay


def test_the_network_policy_admits_only_kube_scheduler_to_the_extender_port(cluster: LocalCluster) -> None:
    documents = build(cluster, EXTENDER)
    policy = by_kind(documents, "NetworkPolicy")
    deployment = by_kind(documents, "Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert selector.items() <= pod_labels.items()
    assert policy["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = policy["spec"]["ingress"]
    container_ports = {
        p["containerPort"] for p in deployment["spec"]["template"]["spec"]["containers"][0]["ports"]
    }
    assert [p["port"] for p in rule["ports"]] == sorted(container_ports) == [8888]
    system, second = rule["from"]
    assert system["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "kube-system"}
    assert system["podSelector"]["matchLabels"] == {"component": "kube-scheduler"}
    # deploy/scheduler's pods, in the extender's own namespace (no namespaceSelector)
    assert second == {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "nodetopo-scheduler"}}}


def test_the_extender_manifests_and_the_tls_variant_are_accepted(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    cluster.kubectl("apply", "-f", str(REPO / "deploy" / "namespace.yaml"))
    for root in (EXTENDER, tls_overlay(tmp_path)):
        done = cluster.kubectl("apply", "--server-side", "--dry-run=server", "-k", str(root))
        assert "networkpolicy.networking.k8s.io/nodetopo-extender serverside-applied" in done.stdout, (
            done.stdout
        )


def test_the_tls_component_serves_https_from_the_secret(cluster: LocalCluster, tmp_path: Path) -> None:
    documents = build(cluster, tls_overlay(tmp_path))
    pod = by_kind(documents, "Deployment")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    args = container["args"]
    assert "--tls-cert-file=/etc/nodetopo/tls/tls.crt" in args
    assert "--tls-private-key-file=/etc/nodetopo/tls/tls.key" in args
    assert "--tls-client-ca-file=/etc/nodetopo/tls/ca.crt" in args
    assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert container["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert pod["volumes"] == [
        {"name": "tls", "secret": {"secretName": "nodetopo-extender-tls", "defaultMode": 0o440}}
    ]
    assert container["volumeMounts"][0]["mountPath"] == "/etc/nodetopo/tls"
    config = yaml.safe_load((EXTENDER / "tls" / "scheduler-config.yaml").read_text())
    (extender,) = config["extenders"]
    assert extender["urlPrefix"].startswith("https://nodetopo-extender.nodetopo.svc:")
    assert set(extender["tlsConfig"]) == {"caFile", "certFile", "keyFile"}
