"""Every value of the chart (charts/nodetopo/values.yaml) is in values.schema.json and rendered by a
test here: each case sets values with the real ``helm template`` and checks where they land; a value
that no case covers fails ``test_every_value_is_rendered_by_a_case``. The five components (agent,
extender, second scheduler, summary controller, export controller) take the same pod values, checked
for each."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from kube.chart_support import CHART, by_identity, render_tests, template

pytestmark = pytest.mark.k8s

RELEASE, NAMESPACE = "gpu", "topo"
FULL = f"{RELEASE}-nodetopo"
DIGEST = "sha256:" + "ab" * 32
Docs = dict[tuple[str, str, str], dict[str, Any]]

# Values whose content is one Kubernetes field (a map or a list): a leaf, not walked into.
OPAQUE = {
    "nodeSelector", "tolerations", "affinity", "resources", "podAnnotations", "podLabels",
    "podSecurityContext", "securityContext", "extraArgs", "extraEnv", "labels", "annotations",
    "extraFrom", "serviceAccounts", "imagePullSecrets",
}  # fmt: skip


def leaves(values: dict[str, Any], prefix: str = "") -> Iterator[str]:
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and key not in OPAQUE:
            yield from leaves(value, f"{path}.")
        else:
            yield path


VALUES = yaml.safe_load((CHART / "values.yaml").read_text())
SCHEMA = json.loads((CHART / "values.schema.json").read_text())


@dataclasses.dataclass(frozen=True)
class Case:
    covers: tuple[str, ...]  # the value paths this case renders
    args: tuple[str, ...]  # helm --set ... arguments
    check: Callable[[Docs], object]  # raises (asserts) unless the values landed where they should
    needs: tuple[str, ...] = ()  # --set values the case builds on (its baseline)
    namespace: str = NAMESPACE
    changes: bool = True  # the rendered output differs from the baseline's (False: a default's case)

    @property
    def id(self) -> str:
        return "+".join(self.covers)


def that(ok: object, *what: object) -> None:
    assert ok, what


def s(*pairs: str) -> tuple[str, ...]:
    return tuple(a for p in pairs for a in ("--set", p))


def sj(path: str, value: Any) -> tuple[str, ...]:
    return ("--set-json", f"{path}={json.dumps(value)}")


# ---- the components and their common pod values -------------------------------------------------

COMPONENTS = {
    # values prefix: (kind, name suffix, container, values it needs)
    "agent": ("DaemonSet", "agent", "agent", ()),
    "extender": ("Deployment", "extender", "extender", ("extender.enabled=true",)),
    "scheduler": (
        "Deployment", "scheduler", "kube-scheduler", ("extender.enabled=true", "scheduler.enabled=true"),
    ),
    "admission.summaryController": (
        "Deployment", "summary-controller", "summary-controller", ("admission.enabled=true",),
    ),
    "exportController": (
        "Deployment", "export-controller", "export-controller", ("exportController.enabled=true",),
    ),
}  # fmt: skip


def workload(docs: Docs, component: str) -> dict[str, Any]:
    kind, suffix, _, _ = COMPONENTS[component]
    return docs[(kind, NAMESPACE, f"{FULL}-{suffix}")]


def pod_spec(docs: Docs, component: str) -> dict[str, Any]:
    return dict(workload(docs, component)["spec"]["template"]["spec"])


def container(docs: Docs, component: str) -> dict[str, Any]:
    (mine,) = [c for c in pod_spec(docs, component)["containers"] if c["name"] == COMPONENTS[component][2]]
    return dict(mine)


def argv(docs: Docs, component: str) -> list[str]:
    c = container(docs, component)
    return [*c.get("command", []), *c.get("args", [])]


def account_subjects(docs: Docs) -> set[str]:
    return {
        sub["name"] for d in docs.values() for sub in d.get("subjects", []) if sub["kind"] == "ServiceAccount"
    }


def common_cases(component: str) -> list[Case]:
    c = component
    default_account = f"{FULL}-{COMPONENTS[c][1]}"
    needs = COMPONENTS[c][3]
    tag = "v1.99.0" if c == "scheduler" else "9.9.9-test"

    def image(docs: Docs) -> str:
        return str(container(docs, c)["image"])

    def no_account(docs: Docs) -> None:
        assert ("ServiceAccount", NAMESPACE, default_account) not in docs
        assert pod_spec(docs, c)["serviceAccountName"] == default_account
        assert default_account in account_subjects(docs)  # still bound: an account you made

    def own_account(docs: Docs) -> None:
        assert ("ServiceAccount", NAMESPACE, "own-account") in docs
        assert ("ServiceAccount", NAMESPACE, default_account) not in docs
        assert pod_spec(docs, c)["serviceAccountName"] == "own-account"
        assert "own-account" in account_subjects(docs) and default_account not in account_subjects(docs)

    def sa_annotations(docs: Docs) -> None:
        sa = docs[("ServiceAccount", NAMESPACE, default_account)]
        assert sa["metadata"]["annotations"] == {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/x"}

    def pod_meta(docs: Docs) -> dict[str, Any]:
        return dict(workload(docs, c)["spec"]["template"]["metadata"])

    def pod_labels(docs: Docs) -> None:
        assert pod_meta(docs)["labels"]["team"] == "ml"
        assert "team" not in workload(docs, c)["spec"]["selector"]["matchLabels"]

    def pod_security(docs: Docs) -> None:
        context = pod_spec(docs, c)["securityContext"]
        assert context["fsGroup"] == 2000
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}  # merged with the defaults

    def security(docs: Docs) -> None:
        context = container(docs, c)["securityContext"]
        assert context["runAsGroup"] == 3000
        assert context["capabilities"] == {"drop": ["ALL"]}  # merged with the defaults

    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a"]}]}
                ]
            }
        }
    }
    env = {"name": "HTTPS_PROXY", "value": "http://proxy.example:3128"}
    arg = "--v=4" if c == "scheduler" else "--log-level=debug"
    cases = [
        Case((f"{c}.image.repository",), s(f"{c}.image.repository=registry.example/own"),
             lambda d: that(image(d).startswith("registry.example/own:"), image(d))),
        Case((f"{c}.image.tag",), s(f"{c}.image.tag={tag}"),
             lambda d: that(image(d).endswith(f":{tag}"), image(d))),
        Case((f"{c}.image.digest",), s(f"{c}.image.digest={DIGEST}"),
             lambda d: that(image(d).endswith(f"@{DIGEST}"), image(d))),
        Case((f"{c}.image.pullPolicy",), s(f"{c}.image.pullPolicy=Always"),
             lambda d: that(container(d, c)["imagePullPolicy"] == "Always", str(container(d, c)))),
        Case((f"{c}.serviceAccount.create",), s(f"{c}.serviceAccount.create=false"), no_account),
        Case((f"{c}.serviceAccount.name",), s(f"{c}.serviceAccount.name=own-account"), own_account),
        Case((f"{c}.serviceAccount.annotations",),
             sj(f"{c}.serviceAccount.annotations", {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/x"}),
             sa_annotations),
        Case((f"{c}.nodeSelector",), sj(f"{c}.nodeSelector", {"pool": "gpu"}),
             lambda d: that(pod_spec(d, c)["nodeSelector"]["pool"] == "gpu", d)),
        Case((f"{c}.tolerations",), sj(f"{c}.tolerations", [{"key": "dedicated", "operator": "Exists"}]),
             lambda d: that(pod_spec(d, c)["tolerations"] == [{"key": "dedicated", "operator": "Exists"}],
                            pod_spec(d, c).get("tolerations"))),
        Case((f"{c}.affinity",), sj(f"{c}.affinity", affinity),
             lambda d: that(pod_spec(d, c)["affinity"] == affinity, str(pod_spec(d, c).get("affinity")))),
        Case((f"{c}.priorityClassName",), s(f"{c}.priorityClassName=gpu-infra"),
             lambda d: that(pod_spec(d, c)["priorityClassName"] == "gpu-infra", d)),
        Case((f"{c}.resources",), sj(f"{c}.resources", {"limits": {"memory": "1Gi"}}),
             lambda d: that(container(d, c)["resources"]["limits"] == {"memory": "1Gi"}, d)),
        Case((f"{c}.extraArgs",), sj(f"{c}.extraArgs", [arg]),
             lambda d: that(argv(d, c)[-1] == arg, str(argv(d, c)))),
        Case((f"{c}.extraEnv",), sj(f"{c}.extraEnv", [env]),
             lambda d: that(env in container(d, c)["env"], str(container(d, c).get("env")))),
        Case((f"{c}.podAnnotations",), sj(f"{c}.podAnnotations", {"example.com/a": "b"}),
             lambda d: that(pod_meta(d)["annotations"] == {"example.com/a": "b"}, d)),
        Case((f"{c}.podLabels",), sj(f"{c}.podLabels", {"team": "ml"}), pod_labels),
        Case((f"{c}.podSecurityContext",), sj(f"{c}.podSecurityContext", {"fsGroup": 2000}), pod_security),
        Case((f"{c}.securityContext",), sj(f"{c}.securityContext", {"runAsGroup": 3000}), security),
    ]  # fmt: skip
    return [dataclasses.replace(case, needs=needs) for case in cases]


# ---- the values of one component or of the release ----------------------------------------------


def agent_pod(docs: Docs) -> dict[str, Any]:
    return pod_spec(docs, "agent")


def agent_args(docs: Docs) -> list[str]:
    return argv(docs, "agent")


def strategy(docs: Docs) -> dict[str, Any]:
    return dict(workload(docs, "agent")["spec"]["updateStrategy"]["rollingUpdate"])


def helm_expected_ready(rolling: dict[str, Any], desired: int) -> int:
    """The agents ``helm --wait`` waits for (helm's daemonSetReady: desired minus maxUnavailable,
    a percentage rounded up)."""
    value = rolling["maxUnavailable"]
    unavailable = math.ceil(int(value[:-1]) * desired / 100) if isinstance(value, str) else int(value)
    return desired - unavailable


def wait_for_every_node(docs: Docs) -> None:
    rolling = strategy(docs)
    assert [helm_expected_ready(rolling, n) for n in range(1, 51)] == list(range(1, 51)), rolling
    assert rolling["maxSurge"] == "10%"  # the update goes on 10% of the nodes at a time


def pod_resources_off(docs: Docs) -> None:
    pod = agent_pod(docs)
    assert pod["securityContext"]["runAsUser"] == 65532 and pod["securityContext"]["runAsNonRoot"] is True
    assert "pod-resources" not in {v["name"] for v in pod["volumes"]}
    assert "--pod-resources-socket=" in agent_args(docs)


def pod_resources_path(docs: Docs) -> None:
    volumes = {v["name"]: v for v in agent_pod(docs)["volumes"]}
    assert volumes["pod-resources"]["hostPath"]["path"] == "/data/kubelet/pod-resources"
    assert agent_pod(docs)["securityContext"]["runAsUser"] == 0


def port(docs: Docs) -> None:
    agent = container(docs, "agent")
    assert agent["ports"] == [{"name": "metrics", "containerPort": 9090, "protocol": "TCP"}]
    assert "--listen=:9090" in agent["args"]
    policy = docs[("NetworkPolicy", NAMESPACE, f"{FULL}-agent")]
    assert policy["spec"]["ingress"][0]["ports"] == [{"protocol": "TCP", "port": 9090}]


def no_policy(name: str) -> Callable[[Docs], None]:
    def check(docs: Docs) -> None:
        assert ("NetworkPolicy", NAMESPACE, name) not in docs

    return check


def extra_peer(name: str) -> Callable[[Docs], None]:
    def check(docs: Docs) -> None:
        peers = docs[("NetworkPolicy", NAMESPACE, name)]["spec"]["ingress"][0]["from"]
        assert peers[-1] == {"ipBlock": {"cidr": "10.0.0.10/32"}}, peers
        assert len(peers) >= 2  # the defaults stay

    return check


def image_of(component: str, image: str) -> Callable[[Docs], None]:
    def check(docs: Docs) -> None:
        assert container(docs, component)["image"] == image

    return check


def hook_pod(docs: Docs) -> dict[str, Any]:
    return docs[("Pod", NAMESPACE, f"{FULL}-test")]


def every_nodetopo_image(expected: Callable[[str], bool]) -> Callable[[Docs], None]:
    def check(docs: Docs) -> None:
        images = [
            container(docs, c)["image"]
            for c in ("agent", "extender", "admission.summaryController", "exportController")
        ]
        images.append(hook_pod(docs)["spec"]["containers"][0]["image"])
        assert all(expected(i) for i in images), images
        assert container(docs, "scheduler")["image"].startswith("registry.k8s.io/kube-scheduler:")

    return check


def pull_secrets(docs: Docs) -> None:
    for c in COMPONENTS:
        assert pod_spec(docs, c)["imagePullSecrets"] == [{"name": "registry"}], c
    assert hook_pod(docs)["spec"]["imagePullSecrets"] == [{"name": "registry"}]


def names(prefix: str) -> Callable[[Docs], None]:
    def check(docs: Docs) -> None:
        named = {k[2] for k in docs if k[0] not in ("CustomResourceDefinition", "Namespace")}
        assert named and all(n.startswith(prefix) for n in named), sorted(named)

    return check


def namespace_object(docs: Docs) -> None:
    labels = docs[("Namespace", "", NAMESPACE)]["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"


def no_crds(docs: Docs) -> None:
    assert not [k for k in docs if k[0] == "CustomResourceDefinition"]


def crds_not_kept(docs: Docs) -> None:
    crds = [d for k, d in docs.items() if k[0] == "CustomResourceDefinition"]
    assert len(crds) == 2 and all("helm.sh/resource-policy" not in (d["metadata"].get("annotations") or {})
                                  for d in crds)  # fmt: skip


def nfd(docs: Docs) -> None:
    agent = docs[("DaemonSet", "nodetopo", f"{FULL}-agent")]
    assert "--nfd" in agent["spec"]["template"]["spec"]["containers"][0]["args"]
    assert ("Role", "nodetopo", f"{FULL}-agent-nfd") in docs
    assert ("ValidatingAdmissionPolicy", "", f"{FULL}-agent-own-nodefeature") in docs


def noderesourcetopology(docs: Docs) -> None:
    args = agent_args(docs)
    assert "--noderesourcetopology" in args, args
    assert "--topology-manager-policy=single-numa-node" in args and "--topology-manager-scope=pod" in args
    role = docs[("ClusterRole", "", f"{FULL}-agent-noderesourcetopology")]
    assert role["rules"][0]["resources"] == ["noderesourcetopologies"]
    assert ("ValidatingAdmissionPolicy", "", f"{FULL}-agent-own-noderesourcetopology") in docs


def export_rules(docs: Docs) -> None:
    """Each export enabled is granted its own kind, and no other export's."""
    role = docs[("ClusterRole", "", f"{FULL}-export-controller")]
    groups = [(r["apiGroups"], r["resources"]) for r in role["rules"]]
    assert groups == [
        (["nodetopo.io"], ["nodetopologies"]),
        (["kueue.x-k8s.io"], ["topologies"]),
        (["kai.scheduler"], ["topologies"]),
    ], groups
    args = argv(docs, "exportController")
    assert args[:5] == ["export-controller", "--export=kueue", "--export=kai", "--topology-name=nodetopo",
                        "--levels-from=nodetopo"], args  # fmt: skip


def no_probe_roles(docs: Docs) -> None:
    assert ("ClusterRole", "", f"{FULL}-reader") not in docs
    assert ("ClusterRole", "", f"{FULL}-probe-events") not in docs


def probe_bindings(docs: Docs) -> None:
    reader = docs[("ClusterRoleBinding", "", f"{FULL}-reader")]
    assert reader["roleRef"]["name"] == f"{FULL}-reader"
    assert reader["subjects"] == [
        {"kind": "ServiceAccount", "name": "trainer", "namespace": "ml"},
        {"kind": "ServiceAccount", "name": "ray-worker", "namespace": "ray"},
        {"kind": "ServiceAccount", "name": "eval", "namespace": "ml"},
    ]
    events = [d for k, d in docs.items() if k[0] == "RoleBinding" and k[2] == f"{FULL}-probe-events"]
    # Events only in each account's own namespace, and not for the account that posts none
    assert [(d["metadata"]["namespace"], d["roleRef"]["name"], [x["name"] for x in d["subjects"]])
            for d in events] == [("ml", f"{FULL}-probe-events", ["trainer", "eval"])]  # fmt: skip
    assert not [k for k in docs if k[0] == "ClusterRoleBinding" and "events" in k[2]]


def no_test_pod(docs: Docs) -> None:
    assert [k for k in docs if k[0] == "Pod"] == []


def hook_timeout(docs: Docs) -> None:
    assert "--wait=30" in hook_pod(docs)["spec"]["containers"][0]["args"]


def monitor(kind: str, key: str) -> Callable[[Docs], None]:
    def check(docs: Docs) -> None:
        obj = docs[(kind, NAMESPACE, f"{FULL}-agent")]
        assert obj["metadata"]["labels"]["release"] == "prom"
        endpoints = obj["spec"][key]
        assert endpoints[0]["interval"] == "15s"

    return check


def rule(docs: Docs) -> None:
    obj = docs[("PrometheusRule", NAMESPACE, f"{FULL}-agent")]
    assert obj["metadata"]["labels"]["release"] == "prom"
    rules = {r["alert"]: r for g in obj["spec"]["groups"] for r in g["rules"]}
    assert "> 600" in rules["NodetopoAgentNotPublishing"]["expr"]
    assert {r["for"] for r in rules.values()} == {"5m"}


REPO_MONITORING = CHART.parents[1] / "deploy" / "monitoring"


def runtime_rules(docs: Docs) -> None:
    obj = docs[("PrometheusRule", NAMESPACE, f"{FULL}-runtime")]
    assert obj["metadata"]["labels"]["release"] == "prom"
    shipped = yaml.safe_load((REPO_MONITORING / "nodetopo-rules.yaml").read_text())
    assert obj["spec"]["groups"] == shipped["groups"]


def dashboard(namespace: str) -> Callable[[Docs], None]:
    def check(docs: Docs) -> None:
        obj = docs[("ConfigMap", namespace, f"{FULL}-dashboard")]
        assert obj["metadata"]["labels"]["team"] == "gpu", obj["metadata"]
        assert obj["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert obj["metadata"]["annotations"] == {"grafana_folder": "GPU"}
        shipped = json.loads((REPO_MONITORING / "dashboard.json").read_text())
        assert json.loads(obj["data"]["nodetopo-runtime.json"]) == shipped

    return check


DASHBOARD = ("metrics.dashboard.enabled=true", "metrics.dashboard.labels.team=gpu",
             "metrics.dashboard.annotations.grafana_folder=GPU")  # fmt: skip


MONITORING = ("metrics.serviceMonitor.enabled=true", "metrics.podMonitor.enabled=true",
              "metrics.prometheusRule.enabled=true")  # fmt: skip
OPTIONAL = (
    "extender.enabled=true", "scheduler.enabled=true", "admission.enabled=true",
    "exportController.enabled=true",
)  # fmt: skip

CASES: list[Case] = [
    *(case for component in COMPONENTS for case in common_cases(component)),
    # the release
    Case(("nameOverride",), s("nameOverride=topo"), names(f"{RELEASE}-topo-"), OPTIONAL),
    Case(("fullnameOverride",), s("fullnameOverride=gputopo"), names("gputopo-"), OPTIONAL),
    Case(("image.repository", "image.tag"), s("image.repository=registry.example/nt", "image.tag=1.2.3"),
         every_nodetopo_image(lambda i: i == "registry.example/nt:1.2.3"), OPTIONAL),
    Case(("image.digest",), s(f"image.digest={DIGEST}"),
         every_nodetopo_image(lambda i: i == f"ghcr.io/nodetopo/nodetopo@{DIGEST}"), OPTIONAL),
    Case(("image.pullPolicy",), s("image.pullPolicy=Never"),
         lambda d: that([container(d, c)["imagePullPolicy"] for c in COMPONENTS if c != "scheduler"]
                        == ["Never"] * 4), OPTIONAL),
    Case(("imagePullSecrets",), sj("imagePullSecrets", [{"name": "registry"}]), pull_secrets, OPTIONAL),
    Case(("namespace.create",), s("namespace.create=true"), namespace_object),
    Case(("crds.install",), s("crds.install=false"), no_crds),
    Case(("crds.keep",), s("crds.keep=false"), crds_not_kept),
    Case(("nfd.enabled",), s("nfd.enabled=true"), nfd, namespace="nodetopo"),
    Case(("noderesourcetopology.enabled", "noderesourcetopology.topologyManagerPolicy",
          "noderesourcetopology.topologyManagerScope"),
         s("noderesourcetopology.enabled=true", "noderesourcetopology.topologyManagerPolicy=single-numa-node",
           "noderesourcetopology.topologyManagerScope=pod"), noderesourcetopology),
    # the agent
    Case(("agent.runtimeClassName",), s("agent.runtimeClassName=nvidia"),
         lambda d: that(agent_pod(d)["runtimeClassName"] == "nvidia")),
    Case(("agent.nvml",), s("agent.nvml=auto"), lambda d: that("--nvml=auto" in agent_args(d), d)),
    Case(("agent.logFormat",), s("agent.logFormat=text"),
         lambda d: that("--log-format=text" in agent_args(d), d)),
    Case(("agent.logLevel",), s("agent.logLevel=debug"),
         lambda d: that("--log-level=debug" in agent_args(d), d)),
    Case(("agent.port",), s("agent.port=9090"), port),
    Case(("agent.maxUnavailable", "agent.maxSurge"), (), wait_for_every_node, changes=False),
    Case(("agent.maxUnavailable",), s("agent.maxUnavailable=2", "agent.maxSurge=0"),
         lambda d: that(strategy(d) == {"maxUnavailable": 2, "maxSurge": 0}, str(strategy(d)))),
    Case(("agent.maxSurge",), s("agent.maxSurge=1"),
         lambda d: that(strategy(d) == {"maxUnavailable": 0, "maxSurge": 1}, str(strategy(d)))),
    Case(("agent.podResources.enabled",), s("agent.podResources.enabled=false"), pod_resources_off),
    Case(("agent.podResources.hostPath",), s("agent.podResources.hostPath=/data/kubelet/pod-resources"),
         pod_resources_path),
    Case(("agent.networkPolicy.enabled",), s("agent.networkPolicy.enabled=false"),
         no_policy(f"{FULL}-agent")),
    Case(("agent.networkPolicy.extraFrom",),
         sj("agent.networkPolicy.extraFrom", [{"ipBlock": {"cidr": "10.0.0.10/32"}}]),
         extra_peer(f"{FULL}-agent")),
    # the extender, the second scheduler, admission
    Case(("extender.enabled",), s("extender.enabled=true"),
         lambda d: that(("Service", NAMESPACE, f"{FULL}-extender") in d, d)),
    Case(("extender.replicas",), s("extender.replicas=3"),
         lambda d: that(workload(d, "extender")["spec"]["replicas"] == 3), ("extender.enabled=true",)),
    Case(("extender.networkPolicy.enabled",), s("extender.networkPolicy.enabled=false"),
         no_policy(f"{FULL}-extender"), ("extender.enabled=true",)),
    Case(("extender.networkPolicy.extraFrom",),
         sj("extender.networkPolicy.extraFrom", [{"ipBlock": {"cidr": "10.0.0.10/32"}}]),
         extra_peer(f"{FULL}-extender"), ("extender.enabled=true",)),
    Case(("scheduler.enabled",), s("scheduler.enabled=true"),
         lambda d: that(("Deployment", NAMESPACE, f"{FULL}-scheduler") in d), ("extender.enabled=true",)),
    Case(("scheduler.replicas",), s("scheduler.replicas=3"),
         lambda d: that(workload(d, "scheduler")["spec"]["replicas"] == 3), COMPONENTS["scheduler"][3]),
    Case(("admission.enabled",), s("admission.enabled=true"),
         lambda d: that(("ValidatingAdmissionPolicy", "", f"{FULL}-topology") in d)),
    # the export controller: which exports (each its own rule), how a Topology's levels are named
    Case(("exportController.enabled",), s("exportController.enabled=true"),
         lambda d: that(("Deployment", NAMESPACE, f"{FULL}-export-controller") in d, d)),
    Case(("exportController.exports",), s("exportController.exports={kueue,kai}"), export_rules,
         ("exportController.enabled=true",)),
    Case(("exportController.topologyName", "exportController.levelsFrom", "exportController.nvlinkLevel"),
         s("exportController.exports={kueue}", "exportController.topologyName=fabric",
           "exportController.levelsFrom=gfd-topograph", "exportController.nvlinkLevel=true"),
         lambda d: that(argv(d, "exportController")[1:5] == [
             "--export=kueue", "--topology-name=fabric", "--levels-from=gfd-topograph", "--nvlink-level"],
             argv(d, "exportController")),
         ("exportController.enabled=true",)),
    # the probe's roles, helm test
    Case(("probe.rbac.create",), s("probe.rbac.create=false"), no_probe_roles),
    Case(("probe.serviceAccounts",),
         sj("probe.serviceAccounts", [{"namespace": "ml", "name": "trainer"},
                                      {"namespace": "ray", "name": "ray-worker", "events": False},
                                      {"namespace": "ml", "name": "eval"}]),
         probe_bindings),
    Case(("tests.enabled",), s("tests.enabled=false"), no_test_pod),
    Case(("tests.timeoutSeconds",), s("tests.timeoutSeconds=30"), hook_timeout),
    # Prometheus Operator objects
    Case(("metrics.serviceMonitor.enabled", "metrics.serviceMonitor.interval",
          "metrics.serviceMonitor.labels"),
         s("metrics.serviceMonitor.enabled=true", "metrics.serviceMonitor.interval=15s",
           "metrics.serviceMonitor.labels.release=prom"), monitor("ServiceMonitor", "endpoints")),
    Case(("metrics.podMonitor.enabled", "metrics.podMonitor.interval", "metrics.podMonitor.labels"),
         s("metrics.podMonitor.enabled=true", "metrics.podMonitor.interval=15s",
           "metrics.podMonitor.labels.release=prom"), monitor("PodMonitor", "podMetricsEndpoints")),
    Case(("metrics.prometheusRule.enabled", "metrics.prometheusRule.labels",
          "metrics.prometheusRule.notPublishingSeconds", "metrics.prometheusRule.for"),
         s("metrics.prometheusRule.enabled=true", "metrics.prometheusRule.labels.release=prom",
           "metrics.prometheusRule.notPublishingSeconds=600", "metrics.prometheusRule.for=5m"), rule),
    Case(("metrics.rules.enabled", "metrics.rules.labels"),
         s("metrics.rules.enabled=true", "metrics.rules.labels.release=prom"), runtime_rules),
    Case(("metrics.dashboard.enabled", "metrics.dashboard.labels", "metrics.dashboard.annotations"),
         s(*DASHBOARD), dashboard(NAMESPACE)),
    Case(("metrics.dashboard.namespace",), s("metrics.dashboard.namespace=grafana"), dashboard("grafana"),
         DASHBOARD),
]  # fmt: skip


def test_every_value_is_rendered_by_a_case() -> None:
    covered = {path for case in CASES for path in case.covers}
    missing = sorted(set(leaves(VALUES)) - covered)
    assert not missing, f"values no case in {__name__} renders: {missing}"
    unknown = sorted(covered - set(leaves(VALUES)))
    assert not unknown, f"cases for values values.yaml does not have: {unknown}"


def _objects(schema: dict[str, Any], where: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    if "properties" in schema:
        yield where, schema
        for key, sub in schema["properties"].items():
            yield from _objects(sub, f"{where}/{key}")
    for key, sub in schema.get("definitions", {}).items():
        yield from _objects(sub, f"#/definitions/{key}")
    if isinstance(schema.get("items"), dict):
        yield from _objects(schema["items"], f"{where}[]")


def test_the_schema_refuses_unknown_keys_at_every_level() -> None:
    """With additionalProperties false on every object, a values.yaml key the schema lacks fails
    `helm lint` (test_chart.py), and a misspelt key fails the install."""
    objects = list(_objects(SCHEMA))
    assert len(objects) > 30
    assert [where for where, obj in objects if obj.get("additionalProperties") is not False] == []


_BASELINES: dict[tuple[str, tuple[str, ...]], str] = {}


def _rendered(namespace: str, args: tuple[str, ...]) -> str:
    """The chart rendered with ``args``, the ``helm test`` pod included."""
    if (namespace, args) not in _BASELINES:
        _BASELINES[namespace, args] = template(RELEASE, namespace, values=args, tests=True).stdout
    return _BASELINES[namespace, args]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_value_lands_where_it_should(case: Case) -> None:
    needs = s(*case.needs)
    text = _rendered(case.namespace, (*needs, *case.args))
    case.check(by_identity([d for d in yaml.safe_load_all(text) if d]))
    if case.changes:
        assert text != _rendered(case.namespace, needs), "the value changed nothing"


# ---- values refused, combinations refused -------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        (s("agent.maxUnavailable=0", "agent.maxSurge=0"), "cannot both be 0"),
        (s("agent.maxUnavailable=0%", "agent.maxSurge=0%"), "cannot both be 0"),
        (s("probe.rbac.create=false", "probe.serviceAccounts[0].namespace=ml",
           "probe.serviceAccounts[0].name=x"), "probe.serviceAccounts needs probe.rbac.create"),
    ],
)  # fmt: skip
def test_combinations_that_cannot_work_are_refused(values: tuple[str, ...], complaint: str) -> None:
    done = template(RELEASE, NAMESPACE, values=values, check=False)
    assert done.returncode != 0 and complaint in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        (s("agent.maxSurge=ten"), "/agent/maxSurge"),
        (s("agent.maxUnavailable=-1"), "/agent/maxUnavailable"),
        (s("agent.serviceAccount.name=Not_A_Name"), "/agent/serviceAccount/name"),
        (s("extender.serviceAccount.create=maybe"), "/extender/serviceAccount/create"),
        (s("extender.image.digest=latest"), "/extender/image/digest"),
        (s("scheduler.image.pullPolicy=Sometimes"), "/scheduler/image/pullPolicy"),
        (sj("admission.summaryController.podSecurityContext", {"runAsUsr": 1}),
         "/admission/summaryController/podSecurityContext"),
        (sj("agent.securityContext", {"capabilities": {"drop": "ALL"}}),
         "/agent/securityContext/capabilities/drop"),
        (sj("agent.networkPolicy.extraFrom", [{"cidr": "10.0.0.0/8"}]), "/agent/networkPolicy/extraFrom/0"),
        (sj("probe.serviceAccounts", [{"name": "x"}]), "/probe/serviceAccounts/0"),
        (s("tests.timeoutSeconds=0"), "/tests/timeoutSeconds"),
        (sj("extender.extraEnv", [{"value": "x"}]), "/extender/extraEnv/0"),
        (s("exportController.exports={slurm}"), "/exportController/exports/0"),
        (s("exportController.levelsFrom=topograph"), "/exportController/levelsFrom"),
        (s("exportController.topologyName=Not_A_Name"), "/exportController/topologyName"),
        (s("noderesourcetopology.topologyManagerPolicy=single-numa"),
         "/noderesourcetopology/topologyManagerPolicy"),
    ],
)  # fmt: skip
def test_schema_refuses_bad_component_values(values: tuple[str, ...], complaint: str) -> None:
    done = template(RELEASE, NAMESPACE, values=values, check=False)
    assert done.returncode != 0, done.stdout[:2000]
    assert "values don't meet the specifications of the schema" in done.stderr, done.stderr
    assert complaint in done.stderr, done.stderr


# ---- the chart's own pieces: templates, helm test -----------------------------------------------


def test_templates_are_ordinary_helm_templates() -> None:
    """The objects are written in the templates, not made by rewriting the text of copies of
    deploy/'s manifests: no template edits text with a regular expression (a data file, such as a
    CRD, may be read and emitted as it is), and the chart ships no copy of the extender's, second
    scheduler's or admission manifests."""
    for path in sorted((CHART / "templates").rglob("*")):
        if path.is_file():
            text = path.read_text()
            assert not re.search(r"\bregex[A-Z]", text), path.name
    shipped = {p.name for p in (CHART / "files").iterdir()}
    assert "crds" in shipped and not shipped & {"admission", "extender", "scheduler"}, shipped


def test_helm_test_pod_waits_for_its_nodes_nodetopology_where_the_agent_runs() -> None:
    (pod,) = render_tests(
        RELEASE, NAMESPACE,
        *sj("agent.nodeSelector", {"nvidia.com/gpu.present": "true"}),
        *sj("agent.tolerations", [{"key": "dedicated", "operator": "Exists"}]),
        *sj("agent.extraEnv", [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}]),
    )  # fmt: skip
    assert pod["kind"] == "Pod" and pod["metadata"]["name"] == f"{FULL}-test"
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never"
    assert spec["nodeSelector"] == {"kubernetes.io/os": "linux", "nvidia.com/gpu.present": "true"}
    assert spec["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]
    assert spec["serviceAccountName"] == f"{FULL}-agent"
    assert spec["securityContext"]["runAsNonRoot"] is True
    (c,) = spec["containers"]
    assert c["args"] == ["ray", "--node-name=$(NODE_NAME)", "--wait=120", "--log-level=info"]
    env = {e["name"]: e for e in c["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["HTTPS_PROXY"]["value"] == "http://proxy:3128"


COMMON = {
    "image", "serviceAccount", "nodeSelector", "tolerations", "affinity", "priorityClassName", "resources",
    "podAnnotations", "podLabels", "podSecurityContext", "securityContext", "extraArgs", "extraEnv",
}  # fmt: skip


def test_every_value_is_in_the_install_docs() -> None:
    """docs/install.md's tables name every value: a component's pod values once, in the table of
    what every component takes; the rest by their full path."""
    text = (CHART.parents[1] / "docs" / "install.md").read_text()
    missing = []
    for path in leaves(VALUES):
        component = next((c for c in COMPONENTS if path.startswith(f"{c}.")), None)
        rest = path[len(component) + 1 :] if component else path
        if component and rest.split(".")[0] in COMMON:
            documented = f"`{rest}`" in text and f"(`{component}.`)" in text
        else:
            documented = f"`{path}`" in text
        if not documented:
            missing.append(path)
    assert not missing, f"docs/install.md does not mention {missing}"


class _StrictLoader(yaml.SafeLoader):
    """A YAML loader that refuses a mapping with a key twice (PyYAML and Helm keep the last)."""


def _no_duplicate_keys(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    keys = [loader.construct_object(k) for k, _ in node.value]
    twice = sorted({str(k) for k in keys if keys.count(k) > 1})
    assert not twice, f"{twice} twice at {node.start_mark}"
    return dict(loader.construct_mapping(node))


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicate_keys)


def test_no_rendered_object_has_a_key_twice() -> None:
    text = template(RELEASE, NAMESPACE, values=(*s(*OPTIONAL, *MONITORING), "--set", "nfd.enabled=false"),
                    tests=True).stdout  # fmt: skip
    docs = [d for d in yaml.load_all(text, Loader=_StrictLoader) if d]
    assert len(docs) > 30
