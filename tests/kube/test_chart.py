"""The Helm chart with a real ``helm`` (tests/cluster-helm) against the real API server: lint, the
schema refusing bad values, equivalence with ``deploy/`` (kustomize), and several value sets applied
(server-side dry run, then for real)."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from kube.chart_support import (
    CHART,
    REPO,
    by_identity,
    documents,
    helm,
    render,
    render_tests,
    squeeze_whitespace,
    template,
    without_helm_metadata,
)
from kube.noderesourcetopology import nrt_crd

pytestmark = pytest.mark.k8s

ALL_OPTIONAL = (
    "--set", "extender.enabled=true",
    "--set", "scheduler.enabled=true",
    "--set", "admission.enabled=true",
    "--set", "metrics.serviceMonitor.enabled=true",
    "--set", "metrics.podMonitor.enabled=true",
    "--set", "metrics.prometheusRule.enabled=true",
    "--set", "exportController.enabled=true",
    "--set", "exportController.exports={volcano,kueue,kai}",
)  # fmt: skip
MONITORING = "monitoring.coreos.com"


def kustomize(cluster: Any, path: Path) -> list[dict[str, Any]]:
    return documents(cluster.kubectl("kustomize", str(path)).stdout)


def test_helm_lint_passes_for_every_value_set() -> None:
    for values in ((), ALL_OPTIONAL, ("--set", "nfd.enabled=true", "--namespace", "nodetopo")):
        done = helm("lint", "--strict", str(CHART), *values)
        assert "0 chart(s) failed" in done.stdout, done.stdout


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        (("--set", "agent.nvml=maybe"), "/agent/nvml"),
        (("--set", "agent.logFormat=xml"), "/agent/logFormat"),
        (("--set", "agent.tolerations[0].operator=Maybe"), "/agent/tolerations/0/operator"),
        (("--set", "image.digest=latest"), "/image/digest"),
        (("--set", "image.pullPolicy=Sometimes"), "/image/pullPolicy"),
        (("--set", "agent.port=70000"), "/agent/port"),
        (("--set", "agent.extraArgs[0]=oops"), "/agent/extraArgs/0"),
        (("--set", "agent.nodeselector.x=y"), "additional properties 'nodeselector' not allowed"),
        (("--set", "extender.replicas=0"), "/extender/replicas"),
        (("--set", "scheduler.replicas=0"), "/scheduler/replicas"),
        (("--set", "scheduler.image.tag=latest"), "/scheduler/image/tag"),
        (("--set", "scheduler.schedulerName=x"), "additional properties 'schedulerName' not allowed"),
        (("--set", "agent.runtimeClassName=Not_A_Name"), "/agent/runtimeClassName"),
        (("--set", "metrics.prometheusRule.for=soon"), "/metrics/prometheusRule/for"),
    ],
)
def test_schema_refuses_bad_values(values: tuple[str, ...], complaint: str) -> None:
    done = template(values=values, check=False)
    assert done.returncode != 0, done.stdout[:2000]
    assert "values don't meet the specifications of the schema" in done.stderr, done.stderr
    assert complaint in done.stderr, done.stderr


def test_nfd_mode_requires_the_namespace_the_agent_writes_to() -> None:
    done = template("rel", "elsewhere", values=("--set", "nfd.enabled=true"), check=False)
    assert done.returncode != 0 and 'namespace \\"nodetopo\\"' in done.stderr.replace('"', '\\"'), done.stderr


def test_chart_and_kustomize_produce_the_same_objects(cluster: Any) -> None:
    base = by_identity(kustomize(cluster, REPO / "deploy"))
    chart = by_identity(render("nodetopo", "nodetopo", "--set", "namespace.create=true"))
    assert sorted(chart) == sorted(base)
    for key, ours in chart.items():
        assert squeeze_whitespace(without_helm_metadata(ours)) == squeeze_whitespace(base[key]), key
    # With default values the chart leaves the namespace to `helm install --create-namespace`.
    default = by_identity(render())
    assert sorted(set(base) - set(default)) == [("Namespace", "", "nodetopo")]


@pytest.mark.parametrize(
    ("part", "flag"),
    [
        ("extender", "extender.enabled"),
        ("admission", "admission.enabled"),
        ("export", "exportController.enabled"),
        ("noderesourcetopology", "noderesourcetopology.enabled"),
    ],
)
def test_optional_parts_match_their_kustomizations(cluster: Any, part: str, flag: str) -> None:
    theirs = by_identity(kustomize(cluster, REPO / "deploy" / part))
    plain = by_identity(render())
    ours = {
        k: v
        for k, v in by_identity(render("nodetopo", "nodetopo", "--set", f"{flag}=true")).items()
        if k not in plain
    }
    assert sorted(ours) == sorted(theirs)
    part_of = frozenset({"app.kubernetes.io/part-of"})
    for key, obj in ours.items():
        mine = without_helm_metadata(obj, drop_labels=part_of)
        assert squeeze_whitespace(mine) == squeeze_whitespace(
            without_helm_metadata(theirs[key], drop_labels=part_of)
        ), key


HASHED = re.compile(r"-[a-z0-9]{10}$")  # a configMapGenerator's (and the chart's) content hash


def _unhashed(docs: dict[tuple[str, str, str], dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """``docs`` with the scheduler ConfigMap's content hash cut from its name and from the
    Deployment's reference to it (each checked to point at its own ConfigMap first)."""
    (config_map,) = [k for k in docs if k[0] == "ConfigMap"]
    out = {}
    for key, doc in docs.items():
        doc = yaml.safe_load(yaml.safe_dump(doc))
        if doc["kind"] == "ConfigMap":
            doc["metadata"]["name"] = HASHED.sub("", doc["metadata"]["name"])
            key = (key[0], key[1], doc["metadata"]["name"])
        if doc["kind"] == "Deployment":
            (volume,) = doc["spec"]["template"]["spec"]["volumes"]
            assert volume["configMap"]["name"] == config_map[2]
            volume["configMap"]["name"] = HASHED.sub("", config_map[2])
        out[key] = doc
    return out


def test_scheduler_values_match_deploy_scheduler(cluster: Any) -> None:
    """``scheduler.enabled`` renders what ``kubectl kustomize deploy/scheduler`` builds (the same
    objects, the same KubeSchedulerConfiguration), with the ConfigMap named by a hash of its contents."""
    theirs = _unhashed(by_identity(kustomize(cluster, REPO / "deploy" / "scheduler")))
    extender = by_identity(render("nodetopo", "nodetopo", "--set", "extender.enabled=true"))
    rendered = by_identity(
        render("nodetopo", "nodetopo", "--set", "extender.enabled=true", "--set", "scheduler.enabled=true")
    )
    ours = _unhashed({k: v for k, v in rendered.items() if k not in extender})
    assert sorted(ours) == sorted(theirs)
    part_of = frozenset({"app.kubernetes.io/part-of"})
    for key, obj in ours.items():
        mine = without_helm_metadata(obj, drop_labels=part_of)
        assert squeeze_whitespace(mine) == squeeze_whitespace(
            without_helm_metadata(theirs[key], drop_labels=part_of)
        ), key
    # the content hash follows the contents: another namespace, another configuration, another name
    elsewhere = render(
        "nodetopo", "topo", "--set", "extender.enabled=true", "--set", "scheduler.enabled=true"
    )
    names = {d["metadata"]["name"] for d in [*rendered.values(), *elsewhere] if d["kind"] == "ConfigMap"}
    assert len(names) == 2, names
    config = yaml.safe_load(next(d for d in elsewhere if d["kind"] == "ConfigMap")["data"]["config.yaml"])
    assert config["leaderElection"]["resourceNamespace"] == "topo"
    assert config["extenders"][0]["urlPrefix"] == "http://nodetopo-extender.topo.svc:8888"


def test_scheduler_values_reach_the_deployment() -> None:
    docs = render(
        "gpu", "topo",
        "--set", "extender.enabled=true",
        "--set", "scheduler.enabled=true",
        "--set", "scheduler.image.tag=v1.33.2",
        "--set", "scheduler.replicas=3",
        "--set", "scheduler.priorityClassName=",
    )  # fmt: skip
    (deployment,) = [d for d in docs if d["kind"] == "Deployment" and "scheduler" in d["metadata"]["name"]]
    assert deployment["metadata"]["name"] == "gpu-nodetopo-scheduler"
    assert deployment["spec"]["replicas"] == 3
    pod = deployment["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == "registry.k8s.io/kube-scheduler:v1.33.2"
    assert pod["serviceAccountName"] == "gpu-nodetopo-scheduler"
    assert not pod.get("priorityClassName")
    (config_map,) = [d for d in docs if d["kind"] == "ConfigMap"]
    config = yaml.safe_load(config_map["data"]["config.yaml"])
    assert config["profiles"][0]["schedulerName"] == "gpu-nodetopo-scheduler"
    assert config["leaderElection"]["resourceName"] == "gpu-nodetopo-scheduler"
    assert config["extenders"][0]["urlPrefix"] == "http://gpu-nodetopo-extender.topo.svc:8888"
    (role,) = [d for d in docs if d["kind"] == "Role" and "scheduler" in d["metadata"]["name"]]
    assert role["rules"][0]["resourceNames"] == ["gpu-nodetopo-scheduler"]  # its own Lease only
    # the extender's NetworkPolicy admits this release's scheduler pods
    (policy,) = [d for d in docs if d["kind"] == "NetworkPolicy" and "extender" in d["metadata"]["name"]]
    peers = [p["podSelector"]["matchLabels"] for p in policy["spec"]["ingress"][0]["from"]]
    assert deployment["spec"]["template"]["metadata"]["labels"].items() >= peers[-1].items()


def test_the_scheduler_needs_the_extender() -> None:
    done = template(values=("--set", "scheduler.enabled=true"), check=False)
    assert done.returncode != 0
    assert "scheduler.enabled needs extender.enabled" in done.stderr, done.stderr


@pytest.mark.parametrize(("shipped", "source"), [("crds", "crds")])
def test_chart_files_are_the_repository_manifests(shipped: str, source: str) -> None:
    """The chart ships copies of the CRDs (a packaged chart holds nothing outside its directory):
    same bytes. Every other object is a template (test_chart_values.py)."""
    copies = sorted((CHART / "files" / shipped).glob("*.yaml"))
    assert copies
    for copy in copies:
        original = REPO / source / copy.name
        assert copy.read_text() == original.read_text(), (
            f"cp {original.relative_to(REPO)} {copy.relative_to(REPO)}"
        )


def test_custom_values_reach_the_daemonset() -> None:
    digest = "sha256:" + "ab" * 32
    docs = by_identity(
        render(
            "gpu", "topo",
            "--set", f"image.digest={digest}",
            "--set", "image.pullPolicy=Always",
            "--set", "agent.runtimeClassName=nvidia",
            "--set", "agent.priorityClassName=gpu-infra",
            "--set", "agent.logFormat=text",
            "--set", "agent.logLevel=debug",
            "--set-string", "agent.nodeSelector.nvidia\\.com/gpu\\.present=true",
            "--set", "agent.tolerations[0].key=dedicated",
            "--set", "agent.tolerations[0].operator=Exists",
            "--set", "agent.extraArgs[0]=--interval=300",
            "--set", "agent.resources.limits.memory=512Mi",
        )
    )  # fmt: skip
    ds = docs[("DaemonSet", "topo", "gpu-nodetopo-agent")]
    pod = ds["spec"]["template"]["spec"]
    agent = pod["containers"][0]
    assert agent["image"] == f"ghcr.io/nodetopo/nodetopo@{digest}" and agent["imagePullPolicy"] == "Always"
    assert pod["runtimeClassName"] == "nvidia" and pod["priorityClassName"] == "gpu-infra"
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux", "nvidia.com/gpu.present": "true"}  # merged
    assert pod["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]
    assert {"--log-format=text", "--log-level=debug", "--interval=300"} <= set(agent["args"])
    assert agent["resources"]["limits"] == {"memory": "512Mi"}
    assert pod["serviceAccountName"] == "gpu-nodetopo-agent"
    binding = docs[("ClusterRoleBinding", "", "gpu-nodetopo-agent")]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "gpu-nodetopo-agent", "namespace": "topo"}
    ]
    assert binding["roleRef"]["name"] == "gpu-nodetopo-agent"
    vap = docs[("ValidatingAdmissionPolicyBinding", "", "gpu-nodetopo-agent-own-node")]
    assert vap["spec"]["policyName"] == "gpu-nodetopo-agent-own-node"


def test_pod_resources_off_runs_the_agent_unprivileged_without_the_socket() -> None:
    """The one reason the agent runs as uid 0 is the kubelet's root-only socket: without it, 65532."""
    for enabled, user in (("true", 0), ("false", 65532)):
        docs = by_identity(
            render("gpu", "topo", "--set", f"agent.podResources.enabled={enabled}",
                   "--set", "agent.podResources.hostPath=/data/kubelet/pod-resources")
        )  # fmt: skip
        pod = docs[("DaemonSet", "topo", "gpu-nodetopo-agent")]["spec"]["template"]["spec"]
        agent = pod["containers"][0]
        assert pod["securityContext"]["runAsUser"] == user
        assert pod["securityContext"]["runAsNonRoot"] is (user != 0)
        assert agent["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        volumes = {v["name"]: v for v in pod["volumes"]}
        sockets = [a for a in agent["args"] if a.startswith("--pod-resources-socket=")]
        if user == 0:
            assert volumes["pod-resources"]["hostPath"]["path"] == "/data/kubelet/pod-resources"
            assert sockets == ["--pod-resources-socket=/var/lib/kubelet/pod-resources/kubelet.sock"]
        else:
            assert "pod-resources" not in volumes and sockets == ["--pod-resources-socket="]


def test_alert_rules_use_metrics_the_agent_exports() -> None:
    from prometheus_client.exposition import generate_latest

    from nodetopo.agent.metrics import AgentStats, make_registry

    stats = AgentStats("n1")
    stats.record_failure("nodetopology", "Forbidden")
    stats.record_success(time.time(), 0)
    exported = set(
        re.findall(
            r"^# TYPE (\S+) (\S+)", generate_latest(make_registry(stats, process=False)).decode(), re.M
        )
    )
    names = {name for name, _ in exported} | {f"{n}_total" for n, kind in exported if kind == "counter"}
    rule = by_identity(render("nodetopo", "nodetopo", "--set", "metrics.prometheusRule.enabled=true"))[
        ("PrometheusRule", "nodetopo", "nodetopo-agent")
    ]
    alerts = {r["alert"]: r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]}
    assert set(alerts) == {"NodetopoAgentNotPublishing", "NodetopoSourceFailing", "NodetopoInconsistent"}
    used = {m for expr in alerts.values() for m in re.findall(r"\bnodetopo_[a-z_]+", expr)}
    assert used and used <= names, used - names
    assert "nodetopo_consistent" in alerts["NodetopoInconsistent"]
    assert "nodetopo_source_errors_total" in alerts["NodetopoSourceFailing"]


def apply(cluster: Any, docs: list[dict[str, Any]], *extra: str) -> str:
    stream = yaml.safe_dump_all(docs)
    return str(
        cluster.kubectl("apply", "--server-side", "--force-conflicts", *extra, "-f", "-", input=stream).stdout
    )


PREFER_POOL = {
    "nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1, "preference": {"matchExpressions": [{"key": "pool", "operator": "Exists"}]}}
        ]
    }
}
VALUE_SETS = {
    "default": (),
    "optional-parts": ALL_OPTIONAL,
    "custom": (
        "--set", "agent.runtimeClassName=nvidia",
        "--set", "agent.logFormat=text",
        "--set", "agent.extraArgs[0]=--interval=300",
        "--set", "image.tag=0.1.0-test",
        "--set", "agent.priorityClassName=",
    ),
    # every component's pod values at once: the API server checks each field lands in a valid place
    "components": (
        *ALL_OPTIONAL,
        *(a for c in ("agent", "extender", "scheduler", "admission.summaryController", "exportController")
          for a in (
            "--set-json", f'{c}.nodeSelector={{"pool": "gpu"}}',
            "--set-json", f'{c}.tolerations=[{{"key": "dedicated", "operator": "Exists"}}]',
            "--set-json", f"{c}.affinity={json.dumps(PREFER_POOL)}",
            "--set-json", f'{c}.extraEnv=[{{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}}]',
            "--set-json", f'{c}.podAnnotations={{"example.com/owner": "ml"}}',
            "--set-json", f'{c}.podLabels={{"team": "ml"}}',
            "--set-json", f'{c}.podSecurityContext={{"fsGroup": 2000, "supplementalGroups": [3000]}}',
            "--set-json", f'{c}.securityContext={{"runAsGroup": 3000}}',
            "--set-json", f'{c}.serviceAccount.annotations={{"example.com/role": "r"}}',
        )),
        "--set", "extender.serviceAccount.name=own-extender",
        "--set", "admission.summaryController.serviceAccount.create=false",
        "--set-json", 'probe.serviceAccounts=[{"namespace": "{namespace}", "name": "trainer"}]',
        "--set-json", 'agent.networkPolicy.extraFrom=[{"ipBlock": {"cidr": "10.0.0.10/32"}}]',
        "--set-json", 'extender.networkPolicy.extraFrom=[{"ipBlock": {"cidr": "10.0.0.10/32"}}]',
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_value_set_applies_to_the_real_apiserver(cluster: Any, name: str) -> None:
    release = f"c{uuid.uuid4().hex[:8]}"
    namespace = f"chart-{release}"
    values = [v.replace("{namespace}", namespace) for v in VALUE_SETS[name]]
    docs = render(release, namespace, "--set", "namespace.create=true", *values)
    # The Prometheus Operator's CRDs are not in this cluster: its objects are checked by render
    # (test_alert_rules_use_metrics_the_agent_exports) and by `helm lint`, not applied.
    applied = [d for d in docs if not d["apiVersion"].startswith(MONITORING)]
    assert len(applied) < len(docs) or name not in ("optional-parts", "components")
    try:
        check_value_set(cluster, release, namespace, applied)
        # the `helm test` pod too (a dry run: no kubelet here runs it)
        hooks = render_tests(release, namespace, *values)
        assert [d["kind"] for d in hooks] == ["Pod"]
        assert "(server dry run)" in apply(cluster, hooks, "--dry-run=server")
    finally:
        uninstall(cluster, release, namespace, applied)


def uninstall(cluster: Any, release: str, namespace: str, docs: Sequence[dict[str, Any]] = ()) -> None:
    """Delete the release: its namespace, the agent's cluster-wide objects, and any other object of
    ``docs`` outside the namespace (cluster-wide RBAC and policies, the scheduler's RoleBinding in
    kube-system); never the CRDs, which the cluster's other tests share."""
    for doc in docs:
        meta = doc["metadata"]
        if doc["kind"] in ("CustomResourceDefinition", "Namespace") or meta.get("namespace") == namespace:
            continue
        where = ("-n", meta["namespace"]) if "namespace" in meta else ()
        cluster.kubectl("delete", doc["kind"], meta["name"], *where, "--ignore-not-found", "--wait=false")
    cluster.kubectl("delete", "namespace", namespace, "--wait=false", "--ignore-not-found")
    for kind, suffix in (
        ("validatingadmissionpolicybinding", "-own-node"),
        ("validatingadmissionpolicy", "-own-node"),
        ("clusterrolebinding", ""),
        ("clusterrole", ""),
    ):
        cluster.kubectl("delete", kind, f"{release}-nodetopo-agent{suffix}", "--ignore-not-found")


def check_value_set(cluster: Any, release: str, namespace: str, applied: list[dict[str, Any]]) -> None:
    namespace_doc = [d for d in applied if d["kind"] == "Namespace"]
    apply(cluster, namespace_doc)  # a server-side dry run cannot create the namespace the rest needs
    dry = apply(cluster, applied, "--dry-run=server")
    assert dry.count("(server dry run)") == len(applied), dry
    out = apply(cluster, applied)
    assert f"daemonset.apps/{release}-nodetopo-agent serverside-applied" in out, out
    ds = json.loads(
        cluster.kubectl("get", "ds", "-n", namespace, f"{release}-nodetopo-agent", "-o", "json").stdout
    )
    assert ds["spec"]["template"]["spec"]["serviceAccountName"] == f"{release}-nodetopo-agent"
    assert cluster.policy_type_warnings(f"{release}-nodetopo-agent-own-node") == []


def test_nfd_value_set_applies_and_confines_the_nodefeature(cluster: Any) -> None:
    release = f"n{uuid.uuid4().hex[:8]}"
    docs = [
        d
        for d in render(release, "nodetopo", "--set", "nfd.enabled=true")
        if d["kind"] != "CustomResourceDefinition"
    ]
    cluster.kubectl("create", "namespace", "nodetopo", check=False)
    dry = apply(cluster, docs, "--dry-run=server")
    assert dry.count("(server dry run)") == len(docs), dry
    apply(cluster, docs)
    assert cluster.policy_type_warnings(f"{release}-nodetopo-agent-own-nodefeature") == []
    role = next(d for d in docs if d["kind"] == "Role")
    assert role["rules"] == [
        {"apiGroups": ["nfd.k8s-sigs.io"], "resources": ["nodefeatures"], "verbs": ["get", "create", "patch"]}
    ]
    for d in reversed(docs):
        cluster.kubectl(
            "delete", d["kind"].lower(), d["metadata"]["name"], "-n", "nodetopo", "--ignore-not-found"
        )


def test_noderesourcetopology_value_set_applies_and_confines_the_object(cluster: Any) -> None:
    release = f"t{uuid.uuid4().hex[:8]}"
    docs = [
        d
        for d in render(release, "nodetopo", "--set", "noderesourcetopology.enabled=true")
        if d["kind"] != "CustomResourceDefinition"
    ]
    cluster.kubectl("create", "namespace", "nodetopo", check=False)
    dry = apply(cluster, docs, "--dry-run=server")
    assert dry.count("(server dry run)") == len(docs), dry
    ours = [d for d in docs if "noderesourcetopology" in d["metadata"]["name"]]
    cluster.kubectl("apply", "--server-side", "-f", str(nrt_crd()))  # the policy is type-checked against it
    assert sorted(d["kind"] for d in ours) == [
        "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"
    ]  # fmt: skip
    apply(cluster, ours)
    try:
        assert cluster.policy_type_warnings(f"{release}-nodetopo-agent-own-noderesourcetopology") == []
        role = next(d for d in ours if d["kind"] == "ClusterRole")
        assert role["rules"] == [
            {"apiGroups": ["topology.node.k8s.io"], "resources": ["noderesourcetopologies"],
             "verbs": ["get", "create", "patch"]}
        ]  # fmt: skip
    finally:
        for d in reversed(ours):
            cluster.kubectl("delete", d["kind"].lower(), d["metadata"]["name"], "--ignore-not-found")


def test_confinement_follows_the_release_namespace_and_names(
    cluster: Any, make_node: Callable[..., dict[str, Any]], node_bound_token: Callable[..., Any]
) -> None:
    release = f"r{uuid.uuid4().hex[:8]}"
    namespace = f"chart-{release}"
    docs = render(release, namespace, "--set", "namespace.create=true")
    apply(cluster, [d for d in docs if d["kind"] == "Namespace"])
    apply(cluster, docs)
    try:
        own, other = make_node(), make_node()
        token = node_bound_token(
            own["metadata"]["name"], namespace=namespace, service_account=f"{release}-nodetopo-agent"
        )
        patch = json.dumps({"metadata": {"labels": {"nodetopo.io/gpu.count": "8"}}})
        deadline = time.monotonic() + 30
        while True:  # the policy and the RBAC take effect within a second or so
            done = cluster.kubectl(
                "--kubeconfig",
                str(token.kubeconfig),
                "patch",
                "node",
                other["metadata"]["name"],
                "-p",
                patch,
                check=False,
            )
            # Every installed confinement policy keys on the marker verb, so another install's policy
            # (deploy/ applied earlier in the same test cluster) may be the one the API server names;
            # any of them denying with the confinement message is the release's agent confined.
            if "-own-node' with binding" in done.stderr and "own Node" in done.stderr:
                break
            assert time.monotonic() < deadline, done.stderr
            time.sleep(0.5)
        mine = cluster.kubectl(
            "--kubeconfig",
            str(token.kubeconfig),
            "patch",
            "node",
            own["metadata"]["name"],
            "-p",
            patch,
            check=False,
        )
        assert mine.returncode == 0, mine.stderr
    finally:
        uninstall(cluster, release, namespace)


def test_notes_say_what_to_run_next(cluster: Any) -> None:
    """NOTES.txt (what `helm install` prints) names the release's own objects: the rollout to wait
    for, `kubectl get ntopo`, `helm test`, and for each optional part its own next step.
    tests/node/test_chart_install.py runs the commands on a real node."""
    done = helm(
        "install", "gpu", str(CHART), "--namespace", "topo", "--dry-run=client",
        "--kubeconfig", str(cluster.kubeconfig_for("admin")), "--set", "crds.install=false",
        *ALL_OPTIONAL[:6],  # not the monitoring.coreos.com objects: their CRDs are not installed here
        *ALL_OPTIONAL[-4:],
    )  # fmt: skip
    notes = done.stdout.split("NOTES:", 1)[1]
    commands = [line.strip() for line in notes.splitlines() if line.startswith("  ")]
    assert commands[:4] == [
        "kubectl -n topo rollout status daemonset/gpu-nodetopo-agent",
        "kubectl get ntopo",
        "kubectl get nodes -L "
        "nodetopo.io/gpu.count,nodetopo.io/nvlink.island-size,nodetopo.io/gpu-nic.distance",
        "helm test gpu -n topo --logs",
    ]
    assert "The export controller (volcano, kueue, kai):" in notes
    for part in ("extender", "scheduler", "summary-controller", "export-controller"):
        assert f"kubectl -n topo rollout status deployment/gpu-nodetopo-{part}" in commands
    assert "http://gpu-nodetopo-extender.topo.svc:8888" in notes
    assert "schedulerName: gpu-nodetopo-scheduler" in notes
    events = "gpu-nodetopo-probe-events"
    assert (
        f"kubectl -n NS create rolebinding {events}-SA --clusterrole={events} --serviceaccount=NS:SA"
        in commands
    )
    plain = helm(
        "install", "plain", str(CHART), "--namespace", "nodetopo", "--dry-run=client",
        "--kubeconfig", str(cluster.kubeconfig_for("admin")), "--set", "tests.enabled=false",
        "--set", "crds.install=false",
    ).stdout.split("NOTES:", 1)[1]  # fmt: skip
    assert "kubectl -n nodetopo rollout status daemonset/plain-nodetopo-agent" in plain
    assert "helm test" not in plain and "extender" not in plain and "schedulerName" not in plain
