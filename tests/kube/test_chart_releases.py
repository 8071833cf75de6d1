"""Two releases of the chart side by side: every object name, selector and reference follows the
release (the agent's objects, and the optional extender and admission objects), so two installs in
two namespaces neither overwrite nor select each other's objects, rendered and applied to the real
API server."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from kube.chart_support import by_identity, render

pytestmark = pytest.mark.k8s

OPTIONAL = (
    "--set", "extender.enabled=true",
    "--set", "scheduler.enabled=true",
    "--set", "admission.enabled=true",
)  # fmt: skip
MONITORING = "monitoring.coreos.com"
CRDS = {
    ("CustomResourceDefinition", "", "nodetopologies.nodetopo.io"),
    ("CustomResourceDefinition", "", "nodetopologysummaries.nodetopo.io"),
}


def _selectors(doc: dict[str, Any]) -> list[dict[str, str]]:
    """The label selectors of ``doc`` that pick pods (Deployment/DaemonSet, Service, NetworkPolicy)."""
    spec = doc.get("spec") or {}
    if doc["kind"] in ("Deployment", "DaemonSet"):
        return [spec["selector"]["matchLabels"]]
    if doc["kind"] == "Service":
        return [spec["selector"]] if spec.get("selector") else []
    if doc["kind"] == "NetworkPolicy":
        peers = [
            p
            for rule in spec.get("ingress", [])
            for p in rule.get("from", [])
            if "namespaceSelector" not in p
        ]
        return [spec["podSelector"]["matchLabels"], *(p["podSelector"]["matchLabels"] for p in peers)]
    return []


def _pod_labels(docs: list[dict[str, Any]]) -> list[dict[str, str]]:
    return [
        d["spec"]["template"]["metadata"]["labels"] for d in docs if d["kind"] in ("Deployment", "DaemonSet")
    ]


def _references(doc: dict[str, Any]) -> set[str]:
    """Names of other objects ``doc`` points at (RBAC subjects and roles, policies, accounts)."""
    names: set[str] = set()
    if "roleRef" in doc:
        names.add(doc["roleRef"]["name"])
    names |= {s["name"] for s in doc.get("subjects", []) if s["kind"] == "ServiceAccount"}
    if doc["kind"] == "ValidatingAdmissionPolicyBinding":
        names.add(doc["spec"]["policyName"])
    if doc["kind"] in ("Deployment", "DaemonSet"):
        names.add(doc["spec"]["template"]["spec"]["serviceAccountName"])
    return names


@pytest.fixture
def two_releases() -> Iterator[dict[str, list[dict[str, Any]]]]:
    tag = uuid.uuid4().hex[:6]
    yield {
        f"a{tag}": render(f"a{tag}", f"chart-a{tag}", "--set", "namespace.create=true", *OPTIONAL),
        f"b{tag}": render(
            f"b{tag}",
            f"chart-b{tag}",
            "--set",
            "namespace.create=true",
            "--set",
            "crds.install=false",
            *OPTIONAL,
        ),
    }


def test_two_releases_render_no_shared_object_selector_or_reference(
    two_releases: dict[str, list[dict[str, Any]]],
) -> None:
    (a, a_docs), (b, b_docs) = two_releases.items()
    ours, theirs = by_identity(a_docs), by_identity(b_docs)
    # the optional parts are there (the check below checks them too)
    kinds = {k[0] for k in ours}
    assert {"ValidatingAdmissionPolicy", "Service", "NetworkPolicy", "Deployment", "DaemonSet"} <= kinds
    assert set(ours) & set(theirs) == set()
    # with its CRDs installed, the second release would share exactly the CRDs (crds.install=false)
    both = by_identity(render(b, f"chart-{b}", "--set", "namespace.create=true", *OPTIONAL))
    assert set(ours) & set(both) == CRDS
    for mine, other, release in ((a_docs, b_docs, a), (b_docs, a_docs, b)):
        names = {d["metadata"]["name"] for d in mine}
        for doc in mine:
            if doc["kind"] == "CustomResourceDefinition":
                continue
            if doc["kind"] == "Namespace":
                assert doc["metadata"]["name"] == f"chart-{release}"
                continue
            assert doc["metadata"]["name"].startswith(f"{release}-nodetopo"), doc["metadata"]["name"]
            assert doc["metadata"]["labels"]["app.kubernetes.io/instance"] == release
            # service accounts bound are the release's, in its namespace
            assert {s["namespace"] for s in doc.get("subjects", [])} <= {f"chart-{release}"}, doc
            # references point into the same release (or at built-in roles: system:kube-scheduler ...)
            refs = {r for r in _references(doc) if "nodetopo" in r}
            assert refs <= names, (doc["kind"], refs - names)
            # no selector of one release picks the pods of the other
            for selector in _selectors(doc):
                for labels in _pod_labels(other):
                    assert not selector.items() <= labels.items(), (doc["kind"], selector, labels)


def test_two_releases_apply_side_by_side(cluster: Any, two_releases: dict[str, list[dict[str, Any]]]) -> None:
    applied = {
        # the CRDs are the cluster's already (and shared by design); monitoring CRDs are not installed
        release: [
            d
            for d in docs
            if not d["apiVersion"].startswith(MONITORING) and d["kind"] != "CustomResourceDefinition"
        ]
        for release, docs in two_releases.items()
    }
    try:
        for release, docs in applied.items():
            cluster.kubectl(
                "apply", "--server-side", "--field-manager", release, "-f", "-",
                input=yaml.safe_dump_all([d for d in docs if d["kind"] == "Namespace"]),
            )  # fmt: skip
            # no --force-conflicts: a field another release's manager owns would be refused
            cluster.kubectl(
                "apply",
                "--server-side",
                "--field-manager",
                release,
                "-f",
                "-",
                input=yaml.safe_dump_all(docs),
            )
        for release, docs in applied.items():
            for doc in docs:
                meta = doc["metadata"]
                where = ("-n", meta["namespace"]) if "namespace" in meta else ()
                live = json.loads(
                    cluster.kubectl("get", doc["kind"], meta["name"], *where, "-o", "json").stdout
                )
                # still the object this release applied, not overwritten by the other one
                assert live["metadata"]["labels"]["app.kubernetes.io/instance"] == release, meta["name"]
    finally:
        for docs in applied.values():
            for doc in reversed(docs):
                if doc["kind"] == "Namespace":
                    continue
                meta = doc["metadata"]
                where = ("-n", meta["namespace"]) if "namespace" in meta else ()
                cluster.kubectl(
                    "delete", doc["kind"], meta["name"], *where, "--ignore-not-found", "--wait=false"
                )
            for doc in docs:
                if doc["kind"] == "Namespace":
                    cluster.kubectl("delete", "namespace", doc["metadata"]["name"], "--wait=false")
