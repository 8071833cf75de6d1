"""deploy/ read as files: each role has one definition that the other files reference, the agent's
NetworkPolicy covers the agent's port, and what the comments say about the agent's pod is true of
the pod the manifest describes (it runs as uid 0)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
ROLE_KINDS = ("ClusterRole", "Role")


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict) and "kind" in d]


def _manifests() -> dict[Path, list[dict[str, Any]]]:
    return {
        p: _docs(p)
        for p in sorted(DEPLOY.rglob("*.yaml"))
        if p.name != "kustomization.yaml" and p.parent.name != "tls"
    }


def test_every_role_is_defined_in_one_file() -> None:
    where: dict[tuple[str, str], list[str]] = {}
    for path, docs in _manifests().items():
        for d in docs:
            if d["kind"] in ROLE_KINDS:
                key = (d["kind"], d["metadata"]["name"])
                where.setdefault(key, []).append(str(path.relative_to(ROOT)))
    assert ("ClusterRole", "nodetopo-reader") in where
    twice = {f"{k[0]} {k[1]}": files for k, files in where.items() if len(files) > 1}
    assert not twice, f"defined more than once: {twice}"


def test_every_reference_to_a_nodetopo_role_resolves_to_its_one_definition() -> None:
    """A binding anywhere in deploy/ (the examples included) names a role deploy/ defines: the
    KubeRay example and the probe's example pod bind to deploy/probe/rbac.yaml's roles."""
    manifests = _manifests()
    defined = {
        (d["kind"], d["metadata"]["name"]): d
        for docs in manifests.values()
        for d in docs
        if d["kind"] in ROLE_KINDS
    }
    references = [
        (path, d)
        for path, docs in manifests.items()
        for d in docs
        if d["kind"] in ("ClusterRoleBinding", "RoleBinding") and d["roleRef"]["name"].startswith("nodetopo-")
    ]
    assert references
    for path, binding in references:
        ref = binding["roleRef"]
        assert (ref["kind"], ref["name"]) in defined, (str(path.relative_to(ROOT)), ref)
    kuberay = manifests[DEPLOY / "examples" / "kuberay.yaml"]
    assert [d["kind"] for d in kuberay if d["kind"] in ROLE_KINDS] == []
    (reader,) = [d for d in kuberay if d["kind"] == "ClusterRoleBinding"]
    assert reader["roleRef"]["name"] == "nodetopo-reader"


def test_the_probe_binds_events_in_its_own_namespace_only() -> None:
    """Events through a RoleBinding (its namespace), never a ClusterRoleBinding (every namespace)."""
    roles = {d["metadata"]["name"]: d for d in _docs(DEPLOY / "probe" / "rbac.yaml")}
    assert roles["nodetopo-reader"]["rules"] == [
        {"apiGroups": ["nodetopo.io"], "resources": ["nodetopologies"], "verbs": ["get"]}
    ]
    assert roles["nodetopo-probe-events"]["rules"] == [
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["get"]},
    ]
    bindings = [
        d
        for docs in _manifests().values()
        for d in docs
        if d["kind"] in ("ClusterRoleBinding", "RoleBinding")
    ]
    events = [b for b in bindings if b["roleRef"]["name"] == "nodetopo-probe-events"]
    assert events and all(b["kind"] == "RoleBinding" for b in events)
    for binding in events:
        assert {s["namespace"] for s in binding["subjects"]} == {binding["metadata"]["namespace"]}
    assert "nodetopo-reader" not in {b["roleRef"]["name"] for b in bindings if b["kind"] == "RoleBinding"}


def test_the_agents_network_policy_covers_its_port_and_admits_only_the_scrapers() -> None:
    (daemonset,) = _docs(DEPLOY / "daemonset.yaml")
    (policy,) = _docs(DEPLOY / "networkpolicy.yaml")
    pod = daemonset["spec"]["template"]
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert selector.items() <= pod["metadata"]["labels"].items()
    assert policy["metadata"]["namespace"] == daemonset["metadata"]["namespace"]
    assert policy["spec"]["policyTypes"] == ["Ingress"]  # the agent still reaches the API server
    (rule,) = policy["spec"]["ingress"]
    ports = [p["containerPort"] for c in pod["spec"]["containers"] for p in c.get("ports", [])]
    assert [p["port"] for p in rule["ports"]] == ports == [8080]
    assert rule["from"] == [{"namespaceSelector": {"matchLabels": {"nodetopo.io/metrics": "scrape"}}}]
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    assert "networkpolicy.yaml" in kustomization["resources"]
    assert "probe/rbac.yaml" in kustomization["resources"]


def test_a_rollout_waits_for_the_agent_on_every_node() -> None:
    """maxUnavailable 0 (and a surge instead): `kubectl rollout status` and `helm --wait` wait until
    every node's agent is Ready; 10% would let them stop with ceil(10% of N) nodes still waiting."""
    (daemonset,) = _docs(DEPLOY / "daemonset.yaml")
    rolling = daemonset["spec"]["updateStrategy"]["rollingUpdate"]
    assert rolling == {"maxUnavailable": 0, "maxSurge": "10%"}


def _comments(path: Path) -> list[str]:
    return [line.split("#", 1)[1] for line in path.read_text().splitlines() if "#" in line]


NON_ROOT = re.compile(r"\bnon-?root\b", re.IGNORECASE)


def test_comments_do_not_call_the_uid_0_agent_non_root() -> None:
    """The agent's pod runs as uid 0 (the kubelet's PodResources socket is root's): the comments of
    its manifests say so and never call it non-root."""
    (daemonset,) = _docs(DEPLOY / "daemonset.yaml")
    security = daemonset["spec"]["template"]["spec"]["securityContext"]
    assert security["runAsUser"] == 0 and security["runAsNonRoot"] is False
    chart = ROOT / "charts" / "nodetopo" / "templates"
    for path in (DEPLOY / "daemonset.yaml", DEPLOY / "namespace.yaml", chart / "daemonset.yaml",
                 chart / "namespace.yaml"):  # fmt: skip
        said = [c for c in _comments(path) if NON_ROOT.search(c)]
        assert not said, (str(path.relative_to(ROOT)), said)
        assert any("uid 0" in c for c in _comments(path)), str(path.relative_to(ROOT))
