"""All of ``deploy/`` applies to the real API server: server-side dry run, then for real."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from agent.kube_support import DEPLOY, NAMESPACE, apply_deploy, kustomize_root

pytestmark = pytest.mark.k8s


def test_kustomize_builds_every_part(cluster: Any, tmp_path: Path) -> None:
    root = kustomize_root(tmp_path)
    done = cluster.kubectl("kustomize", str(root))
    kinds = sorted({(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(done.stdout) if d})
    assert kinds == [
        ("ClusterRole", "nodetopo-agent"),
        ("ClusterRole", "nodetopo-probe-events"),
        ("ClusterRole", "nodetopo-reader"),
        ("ClusterRoleBinding", "nodetopo-agent"),
        ("CustomResourceDefinition", "nodetopologies.nodetopo.io"),
        ("CustomResourceDefinition", "nodetopologysummaries.nodetopo.io"),
        ("DaemonSet", "nodetopo-agent"),
        ("Namespace", NAMESPACE),
        ("NetworkPolicy", "nodetopo-agent"),
        ("ServiceAccount", "nodetopo-agent"),
        ("ValidatingAdmissionPolicy", "nodetopo-agent-own-events"),
        ("ValidatingAdmissionPolicy", "nodetopo-agent-own-node"),
        ("ValidatingAdmissionPolicyBinding", "nodetopo-agent-own-events"),
        ("ValidatingAdmissionPolicyBinding", "nodetopo-agent-own-node"),
    ]


def test_server_side_dry_run_then_real_apply(cluster: Any, tmp_path: Path) -> None:
    # a server-side dry run cannot create the namespace that the namespaced objects then need:
    # create the namespace for real first, then dry-run everything.
    cluster.kubectl("apply", "-f", str(DEPLOY / "namespace.yaml"))
    dry = apply_deploy(cluster, tmp_path, "--dry-run=server")
    assert "(server dry run)" in dry and "daemonset.apps/nodetopo-agent" in dry
    out = apply_deploy(cluster, tmp_path)
    assert "validatingadmissionpolicy.admissionregistration.k8s.io/nodetopo-agent-own-node" in out
    ds = json.loads(cluster.kubectl("get", "ds", "-n", NAMESPACE, "nodetopo-agent", "-o", "json").stdout)
    pod = ds["spec"]["template"]["spec"]
    container = pod["containers"][0]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True and security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert pod["priorityClassName"] == "system-node-critical"
    assert container["resources"]["requests"] == {"cpu": "10m", "memory": "64Mi"}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/host/sys"]["readOnly"] is True
    assert {p["name"] for p in container["ports"]} == {"metrics"}
    assert any(t.get("key") == "nvidia.com/gpu" for t in pod["tolerations"])
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"


@pytest.mark.parametrize("name", ["nodetopo-agent-own-node", "nodetopo-agent-own-events"])
def test_admission_policy_type_checks_cleanly(cluster: Any, tmp_path: Path, name: str) -> None:
    apply_deploy(cluster, tmp_path)
    warnings = cluster.policy_type_warnings(name)
    assert warnings == [], warnings


def _shipped_policies() -> list[tuple[str, dict[str, Any]]]:
    """Every ValidatingAdmissionPolicy under deploy/, with the file it is in."""
    found = []
    for path in sorted(DEPLOY.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "ValidatingAdmissionPolicy":
                found.append((str(path.relative_to(DEPLOY)), doc))
    return found


SHIPPED_POLICIES = _shipped_policies()


def test_deploy_ships_the_policies_type_checked_below() -> None:
    # the list below is read from the files: this says it found them (a moved folder must not
    # leave the type check with nothing to check)
    names = {doc["metadata"]["name"] for _, doc in SHIPPED_POLICIES}
    assert {"nodetopo-topology", "nodetopo-claim-topology", "nodetopo-workload-topology"} <= names
    assert len(names) == len(SHIPPED_POLICIES) >= 10


@pytest.mark.parametrize(
    "policy",
    [doc for _, doc in SHIPPED_POLICIES],
    ids=[f"{f}:{d['metadata']['name']}" for f, d in SHIPPED_POLICIES],
)
def test_every_shipped_policy_type_checks_cleanly(cluster: Any, policy: dict[str, Any]) -> None:
    """The API server's type checker (kube-controller-manager's status controller) finds nothing
    wrong in any policy deploy/ ships, against the CRDs it reads (crds/, applied at the session's
    start; the SIG's NodeResourceTopology for its confinement)."""
    from kube.noderesourcetopology import nrt_crd

    cluster.kubectl("apply", "--server-side", "-f", str(nrt_crd()))
    # under a name of its own: the deployed policies of the shared cluster belong to other tests,
    # and the type check does not read the name; without a binding it admits and refuses nothing
    name = f"tc-{uuid.uuid4().hex[:8]}-{policy['metadata']['name']}"
    copy = {**policy, "metadata": {"name": name}}
    cluster.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(copy))
    try:
        warnings = cluster.policy_type_warnings(name)
    finally:
        cluster.kubectl("delete", "validatingadmissionpolicy", name, "--ignore-not-found")
    assert warnings == [], warnings


def test_the_type_checker_flags_a_field_that_does_not_exist(cluster: Any) -> None:
    # the negative control of the checks above: a clean answer is the checker's, not its absence
    name = f"typo-{uuid.uuid4().hex[:8]}"
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                    }
                ]
            },
            "validations": [{"expression": "object.spec.nodeSelectorr.size() < 100"}],
        },
    }
    cluster.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(policy))
    try:
        warnings = cluster.policy_type_warnings(name)
    finally:
        cluster.kubectl("delete", "validatingadmissionpolicy", name, "--ignore-not-found")
    assert len(warnings) == 1 and "nodeSelectorr" in warnings[0]["warning"], warnings


def test_rbac_grants_no_delete_and_one_list(cluster: Any, tmp_path: Path) -> None:
    rules = yaml.safe_load_all((DEPLOY / "rbac.yaml").read_text())
    role = next(d for d in rules if d["kind"] == "ClusterRole")
    verbs = {v for rule in role["rules"] for v in rule["verbs"]}
    # publish-own-node is no API operation: the marker admission-policy.yaml recognises the agent by
    assert verbs == {"get", "patch", "create", "list", "publish-own-node"}
    listed = [(r["apiGroups"], r["resources"]) for r in role["rules"] if "list" in r["verbs"]]
    assert listed == [(["resource.k8s.io"], ["resourceslices"])]
    apply_deploy(cluster, tmp_path)
    user = "system:serviceaccount:nodetopo:nodetopo-agent"
    for verb, resource, expected in [
        ("patch", "nodes", "yes"),
        ("get", "nodes", "yes"),
        ("list", "nodes", "no"),
        ("delete", "nodes", "no"),
        ("create", "nodes", "no"),
        ("patch", "nodetopologies.nodetopo.io", "yes"),
        ("delete", "nodetopologies.nodetopo.io", "no"),
        ("patch", "nodetopologies.nodetopo.io/status", "yes"),
        ("list", "secrets", "no"),
        ("list", "resourceslices.resource.k8s.io", "yes"),
        ("watch", "resourceslices.resource.k8s.io", "no"),
        ("get", "resourceslices.resource.k8s.io", "no"),
        ("list", "resourceclaims.resource.k8s.io", "no"),
        ("publish-own-node", "nodetopologies.nodetopo.io", "yes"),
    ]:
        done = cluster.kubectl("auth", "can-i", verb, resource, f"--as={user}", check=False)
        assert done.stdout.strip() == expected, (verb, resource, done.stdout, done.stderr)


def test_pod_security_warns_about_the_host_mounts_and_uid_0_and_nothing_else(cluster: Any) -> None:
    """namespace.yaml enforces privileged and warns at restricted (as its comment says): the
    DaemonSet's pod meets restricted except for its two read-only hostPath volumes (/sys and the
    kubelet's pod-resources directory) and uid 0 (the kubelet's socket is writable by root only)."""
    namespace = yaml.safe_load((DEPLOY / "namespace.yaml").read_text())
    labels = namespace["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
    assert (
        labels["pod-security.kubernetes.io/warn"]
        == labels["pod-security.kubernetes.io/audit"]
        == "restricted"
    )
    name = f"pss-{uuid.uuid4().hex[:8]}"
    namespace["metadata"]["name"] = name
    cluster.kubectl("apply", "-f", "-", input=json.dumps(namespace))
    daemonset = yaml.safe_load((DEPLOY / "daemonset.yaml").read_text())
    daemonset["metadata"]["namespace"] = name
    done = cluster.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(daemonset))
    warnings = [line for line in done.stderr.splitlines() if line.startswith("Warning:")]
    assert len(warnings) == 1, done.stderr
    assert 'violate PodSecurity "restricted:latest"' in warnings[0]
    assert warnings[0].split(": ", 2)[2] == (
        'restricted volume types (volumes "host-sys", "pod-resources" use restricted volume type '
        '"hostPath"), '
        "runAsNonRoot != true (pod must not set securityContext.runAsNonRoot=false), "
        "runAsUser=0 (pod must not set runAsUser=0)"
    ), warnings[0]
    cluster.kubectl("delete", "namespace", name, "--wait=false")
