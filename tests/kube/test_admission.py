"""deploy/admission/ on the real API server: the policies, the summary they read, its controller.

The table of tests/admit/cases.py is replayed here: every case is created in a namespace labelled
nodetopo.io/admission=deny and must be admitted (HTTP 201) or refused with exactly the message
``nodetopo admit`` gives it offline. The summary of each case is written as the controller's service
account would write it (the policy lets nobody else). Warn mode, namespaces without the label, the
summary's write protection and the real ``nodetopo summary-controller`` following NodeTopology
changes are tested after the table.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from admit.cases import CASES, USER_WORKLOADS, Case, manifest, summary, topology_of
from admit.claim_cases import CLAIM_CASES, ClaimCase, claim_manifest

from nodetopo.admission.controller import FIELD_MANAGER
from nodetopo.admission.rules import check
from nodetopo.admission.summary import NAME, PLURAL
from nodetopo.kube.session import ApiSession
from nodetopo.kube.transport import connect
from nodetopo.resource.identity import GROUP, VERSION

from .cluster import REPO, LocalCluster
from .workload_crds import install_workload_crds

pytestmark = pytest.mark.k8s

RUN = uuid.uuid4().hex[:6]
SUMMARY_PATH = f"/apis/{GROUP}/{VERSION}/{PLURAL}"
ORDER = (
    "mixed",
    "gh200",
    "pcie",
    "unknown-layer",
    "poisoned",
    "degraded",
    "stale",
    "partial",
    "empty",
    "missing",
)
TABLE = sorted(CASES, key=lambda c: ORDER.index(c.summary))


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


#: Where each kind of the table is created (RayCluster, RayJob and JobSet from their CRDs).
PLURALS = {
    "Job": "jobs",
    "RayCluster": "rayclusters",
    "RayJob": "rayjobs",
    "JobSet": "jobsets",
    "ResourceClaim": "resourceclaims",
    "ResourceClaimTemplate": "resourceclaimtemplates",
}
POLICIES = (
    "nodetopo-annotations",
    "nodetopo-topology",
    "nodetopo-workload-annotations",
    "nodetopo-workload-topology",
    "nodetopo-claim-annotations",
    "nodetopo-claim-topology",
)
CLAIM_TABLE = sorted(CLAIM_CASES, key=lambda c: ORDER.index(c.summary))


def _path(obj: dict[str, Any], namespace: str) -> str:
    if obj["kind"] == "Pod":
        return f"/api/v1/namespaces/{namespace}/pods"
    return f"/apis/{obj['apiVersion']}/namespaces/{namespace}/{PLURALS[obj['kind']]}"


def _denied(policy: str, mode: str, message: str) -> str:
    return f"ValidatingAdmissionPolicy '{policy}' with binding '{policy}-{mode}' denied request: {message}"


class Admission:
    """deploy/admission/ applied; three namespaces; the controller's token; the current summary."""

    def __init__(self, cluster: LocalCluster, tmp: Path) -> None:
        self.cluster = cluster
        install_workload_crds(cluster)  # before the policies: they match rayclusters, rayjobs, jobsets
        cluster.kubectl("apply", "-f", str(REPO / "deploy" / "namespace.yaml"))
        cluster.kubectl("apply", "-k", str(REPO / "deploy" / "admission"))
        self.namespaces = {mode: f"adm-{mode}-{RUN}" for mode in ("deny", "warn", "off")}
        for mode, namespace in self.namespaces.items():
            labels = {} if mode == "off" else {"nodetopo.io/admission": mode}
            body = {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": namespace, "labels": labels},
            }
            assert cluster.request("POST", "/api/v1/namespaces", body=body)[0] == 201
            account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}}
            cluster.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", body=account)
        status, answer = cluster.request(
            "POST",
            "/api/v1/namespaces/nodetopo/serviceaccounts/nodetopo-summary-controller/token",
            body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
        )
        assert status == 201, answer
        self.kubeconfig = cluster.write_kubeconfig(
            tmp / "controller.kubeconfig", token=answer["status"]["token"]
        )
        self.session = ApiSession(connect(str(self.kubeconfig)), field_manager=FIELD_MANAGER)
        self.current: str | None = None
        self.created: list[str] = []
        # The API server loads new policies and bindings through an informer: wait until the
        # summary-writer policy refuses an admin (a dry run) before any test relies on it.
        probe = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "NodeTopologySummary",
            "metadata": {"name": "probe"},
        }
        deadline = time.monotonic() + 30
        while cluster.request("POST", f"{SUMMARY_PATH}?dryRun=All", body=probe)[0] != 403:
            assert time.monotonic() < deadline, "nodetopo-summary-writer never took effect"
            time.sleep(0.2)

    def set_summary(self, kind: str) -> None:
        """Write the summary of ``kind`` as the controller's service account (or delete it)."""
        if kind == self.current:
            return
        body = summary(kind, _now())
        if body is None:
            status, answer = self.cluster.request("DELETE", f"{SUMMARY_PATH}/{NAME}")
            assert status in (200, 404), answer
        else:
            self.session.apply_cluster_object(GROUP, VERSION, PLURAL, NAME, body, status=False)
        self.current = kind

    def create(self, obj: dict[str, Any], namespace: str, *, dry_run: bool = False) -> tuple[int, Any]:
        obj = copy.deepcopy(obj)
        obj["metadata"]["namespace"] = namespace
        path = _path(obj, namespace) + ("?dryRun=All" if dry_run else "")
        status, answer = self.cluster.request("POST", path, body=obj)
        if status == 201 and not dry_run:
            self.created.append(f"{_path(obj, namespace)}/{obj['metadata']['name']}")
        return status, answer

    def verdict(
        self, obj: dict[str, Any], namespace: str, *, dry_run: bool = False
    ) -> tuple[str, str] | None:
        status, answer = self.create(obj, namespace, dry_run=dry_run)
        if status == 201:
            return None
        message = str(answer.get("message", answer)) if isinstance(answer, dict) else str(answer)
        for policy in POLICIES:
            marker = f"ValidatingAdmissionPolicy '{policy}' with binding '{policy}-deny' denied request: "
            if marker in message:
                return policy, message.split(marker, 1)[1]
        raise AssertionError(f"HTTP {status}: {answer}")

    def settled(self, obj: dict[str, Any], expected: tuple[str, str] | None, timeout: float = 20) -> None:
        """Wait (dry runs) until the API server's policies and parameters give ``expected``: their
        informers pick up a new policy or summary within a second or two."""
        deadline = time.monotonic() + timeout
        while self.verdict(obj, self.namespaces["deny"], dry_run=True) != expected:
            if time.monotonic() > deadline:
                return  # the real request below reports the disagreement
            time.sleep(0.2)

    def close(self) -> None:
        for path in reversed(self.created):
            self.cluster.request("DELETE", f"{path}?propagationPolicy=Background&gracePeriodSeconds=0")
        self.session.close()


@pytest.fixture(scope="module")
def admission(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Admission]:
    state = Admission(cluster, tmp_path_factory.mktemp("admission"))
    try:
        yield state
    finally:
        state.close()


@pytest.mark.parametrize("case", TABLE, ids=[f"{c.summary}-{c.id}" for c in TABLE])
def test_case_on_the_api_server(admission: Admission, case: Case) -> None:
    admission.set_summary(case.summary)
    obj = manifest(case, f"{case.id}-{uuid.uuid4().hex[:6]}", admission.namespaces["deny"])
    admission.settled(obj, case.expected)
    assert admission.verdict(obj, admission.namespaces["deny"]) == case.expected


@pytest.mark.parametrize("case", CLAIM_TABLE, ids=[f"{c.summary}-{c.id}" for c in CLAIM_TABLE])
def test_claim_case_on_the_api_server(admission: Admission, case: ClaimCase) -> None:
    """The API server serves resource.k8s.io/v1 (DRA is GA in 1.34) and its claim policies give each
    ResourceClaim and ResourceClaimTemplate of the table exactly the verdict of ``nodetopo admit``."""
    admission.set_summary(case.summary)
    obj = claim_manifest(case, f"{case.id}-{uuid.uuid4().hex[:6]}", admission.namespaces["deny"])
    admission.settled(obj, case.expected)
    assert admission.verdict(obj, admission.namespaces["deny"]) == case.expected


def test_a_refused_claim_template_in_warn_mode(admission: Admission, cluster: LocalCluster) -> None:
    """``kubectl create`` of a claim template asking 16 GPUs in one island: warn mode admits it and
    kubectl prints the claim policy's message."""
    case = next(c for c in CLAIM_CASES if c.id == "template-island-16-too-big")
    assert case.expected is not None
    admission.set_summary(case.summary)
    namespace = admission.namespaces["warn"]
    obj = claim_manifest(case, f"warn-{uuid.uuid4().hex[:6]}", namespace)
    admission.settled(claim_manifest(case, obj["metadata"]["name"], namespace), case.expected)
    done = _kubectl_create(cluster, obj)
    assert done.returncode == 0, done.stderr
    admission.created.append(f"{_path(obj, namespace)}/{obj['metadata']['name']}")
    policy, message = case.expected
    print(done.stderr)
    assert (
        f"Warning: Validation failed for ValidatingAdmissionPolicy '{policy}' with binding "
        f"'{policy}-warn': {message}"
    ) in done.stderr


@pytest.mark.parametrize("index", range(3), ids=["raycluster", "rayjob-attached", "jobset"])
def test_workloads_as_users_write_them(admission: Admission, index: int) -> None:
    """The API server gives a RayCluster of three worker groups (GPU counts as numbers, as the CRD
    allows), a RayJob attached to an existing cluster and a JobSet exactly the verdict of
    ``nodetopo admit``, which refuses the first and the last."""
    admission.set_summary("mixed")
    obj = list(yaml.safe_load_all(USER_WORKLOADS))[index]
    obj["metadata"]["name"] += f"-{uuid.uuid4().hex[:6]}"
    offline = check(obj, summary("mixed", _now()))
    expected = (offline[0].policy, offline[0].message) if offline else None
    assert (expected is None) == (index == 1)
    admission.settled(obj, expected)
    assert admission.verdict(obj, admission.namespaces["deny"]) == expected


def _kubectl_create(cluster: LocalCluster, obj: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return cluster.kubectl("create", "-f", "-", input=yaml.safe_dump(obj), check=False)


@pytest.mark.parametrize(
    "case_id",
    [
        "island-16-too-big",
        "several-errors",
        "job-gang-undeclared",
        "raycluster-rdma-device-undeclared",  # the seed case: a worker group that needs RDMA, undeclared
        "rayjob-gang-more-gpus-than-the-cluster",
        "jobset-bad-annotation",
    ],
)
def test_warn_mode_admits_with_a_warning(admission: Admission, cluster: LocalCluster, case_id: str) -> None:
    case = next(c for c in CASES if c.id == case_id)
    assert case.expected is not None
    admission.set_summary(case.summary)
    namespace = admission.namespaces["warn"]
    obj = manifest(case, f"warn-{uuid.uuid4().hex[:6]}", namespace)
    admission.settled(manifest(case, obj["metadata"]["name"], namespace), case.expected)
    done = _kubectl_create(cluster, obj)
    assert done.returncode == 0, done.stderr
    admission.created.append(f"{_path(obj, namespace)}/{obj['metadata']['name']}")
    policy, message = case.expected
    assert (
        f"Warning: Validation failed for ValidatingAdmissionPolicy '{policy}' with binding "
        f"'{policy}-warn': {message}"
    ) in done.stderr


def test_namespaces_without_the_label_are_untouched(admission: Admission, cluster: LocalCluster) -> None:
    admission.set_summary("mixed")
    for case in CASES:
        if case.expected is None or case.summary != "mixed":
            continue
        obj = manifest(case, f"off-{uuid.uuid4().hex[:6]}", admission.namespaces["off"])
        admission.settled(
            manifest(case, obj["metadata"]["name"], obj["metadata"]["namespace"]), case.expected
        )
        done = _kubectl_create(cluster, obj)
        assert done.returncode == 0 and "Warning" not in done.stderr, (case.id, done.stderr)
        admission.created.append(f"{_path(obj, admission.namespaces['off'])}/{obj['metadata']['name']}")


def test_only_the_controller_writes_the_summary(admission: Admission, cluster: LocalCluster) -> None:
    admission.set_summary("mixed")
    forged = summary("mixed", _now())
    assert forged is not None
    forged["status"]["total"]["largestIsland"] = 64
    patch = {"status": {"total": {"largestIsland": 64}}}
    for user in ("admin", "other"):  # cluster admins (system:masters) included
        status, answer = cluster.request(
            "PATCH",
            f"{SUMMARY_PATH}/{NAME}",
            user=user,
            body=patch,
            content_type="application/merge-patch+json",
        )
        assert status == 403, answer
        assert answer["message"].endswith(
            "denied request: NodeTopologySummary is written only by nodetopo summary-controller "
            "(the identity granted the verb write-summary on nodetopologysummaries), "
            f"not by {cluster.users[user].name}"
        )
    other = copy.deepcopy(forged)
    other["metadata"]["name"] = "other"
    # RBAC lets the controller create (create cannot be narrowed by name); the policy narrows it.
    response = admission.session.connection.request(
        "POST", SUMMARY_PATH, body=json.dumps(other).encode(), content_type="application/json"
    )
    assert response.status == 403
    assert json.loads(response.data)["message"].endswith(
        'denied request: nodetopo summary-controller writes only the NodeTopologySummary named "cluster"'
    )
    status, _ = cluster.request("PUT", f"{SUMMARY_PATH}/{NAME}", user="nobody", body=forged)
    assert status == 403  # RBAC: no grant at all
    stored = cluster.request("GET", f"{SUMMARY_PATH}/{NAME}")[1]
    assert stored["status"]["total"]["largestIsland"] == 8


def test_the_writer_follows_the_install_and_wildcards_are_refused(
    admission: Admission, cluster: LocalCluster, tmp_path: Path
) -> None:
    """The writer is whoever holds the controller's ClusterRole (its marker verb), in any namespace;
    an identity granted every verb on summaries (it holds the marker too) is still refused."""
    admission.set_summary("mixed")
    body = summary("mixed", _now())
    namespace = admission.namespaces["off"]
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "moved-controller"}}
    assert cluster.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", body=account)[0] == 201
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    moved = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": f"moved-controller-{RUN}"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "nodetopo-summary-controller",
        },
        "subjects": [{"kind": "ServiceAccount", "name": "moved-controller", "namespace": namespace}],
    }
    wildcard_role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": f"summary-everything-{RUN}"},
        "rules": [{"apiGroups": ["nodetopo.io"], "resources": ["nodetopologysummaries"], "verbs": ["*"]}],
    }
    wildcard = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": f"summary-everything-{RUN}"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": f"summary-everything-{RUN}",
        },
        "subjects": [
            {"kind": "User", "name": cluster.users["nobody"].name, "apiGroup": "rbac.authorization.k8s.io"}
        ],
    }
    created = [
        f"{rbac}/clusterrolebindings/{moved['metadata']['name']}",
        f"{rbac}/clusterroles/{wildcard_role['metadata']['name']}",
        f"{rbac}/clusterrolebindings/{wildcard['metadata']['name']}",
    ]
    try:
        assert cluster.request("POST", f"{rbac}/clusterrolebindings", body=moved)[0] == 201
        assert cluster.request("POST", f"{rbac}/clusterroles", body=wildcard_role)[0] == 201
        assert cluster.request("POST", f"{rbac}/clusterrolebindings", body=wildcard)[0] == 201
        status, answer = cluster.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts/moved-controller/token",
            body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
        )
        assert status == 201, answer
        kubeconfig = cluster.write_kubeconfig(tmp_path / "moved.kubeconfig", token=answer["status"]["token"])
        session = ApiSession(connect(str(kubeconfig)), field_manager=FIELD_MANAGER)
        try:
            stored = session.apply_cluster_object(GROUP, VERSION, PLURAL, NAME, body, status=False)
        finally:
            session.close()
        assert stored["status"]["total"]["largestIsland"] == 8
        patch = {"status": {"total": {"largestIsland": 64}}}
        status, answer = cluster.request(
            "PATCH",
            f"{SUMMARY_PATH}/{NAME}",
            user="nobody",
            body=patch,
            content_type="application/merge-patch+json",
        )
        assert status == 403 and answer["message"].endswith(f"not by {cluster.users['nobody'].name}"), answer
    finally:
        for path in created:
            cluster.request("DELETE", path)


# ---- the real controller -------------------------------------------------------------------


def _big_topology(bundle_body: dict[str, Any], name: str, gpus: int) -> dict[str, Any]:
    """A NodeTopology with one NVSwitch island of ``gpus`` GPUs (a DGX H100 grown)."""
    body = copy.deepcopy(bundle_body)
    body["metadata"]["name"] = name
    template = body["status"]["gpus"]
    body["status"]["gpus"] = [
        {**template[i % len(template)], "index": i, "uuid": f"GPU-{name}-{i}", "island": 0}
        for i in range(gpus)
    ]
    body["status"]["nvlinkIslands"] = [{**body["status"]["nvlinkIslands"][0], "gpus": list(range(gpus))}]
    body["status"]["summary"] = {**body["status"]["summary"], "gpuCount": gpus, "islands": f"1x{gpus}"}
    body["status"]["nodeName"] = name
    body["status"]["preferredGPUSets"] = []
    return body


def _put_topology(cluster: LocalCluster, body: dict[str, Any]) -> None:
    path = f"/apis/{GROUP}/{VERSION}/nodetopologies"
    name = body["metadata"]["name"]
    for condition in body["status"].get("conditions") or []:
        condition.setdefault("lastTransitionTime", "2026-01-01T00:00:00Z")
    status, answer = cluster.request("POST", path, body={k: v for k, v in body.items() if k != "status"})
    assert status == 201, answer
    status, answer = cluster.request(
        "PATCH",
        f"{path}/{name}/status",
        body={"status": body["status"]},
        content_type="application/merge-patch+json",
    )
    assert status == 200, answer


@contextlib.contextmanager
def _controller(admission: Admission, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    argv = [
        sys.executable,
        "-m",
        "nodetopo",
        "summary-controller",
        "--kubeconfig",
        str(admission.kubeconfig),
        "--debounce",
        "0.2",
        "--log-level",
        "info",
    ]
    with log.open("ab") as handle:
        process = subprocess.Popen(
            argv, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True, env=env
        )
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def _wait_summary(
    cluster: LocalCluster, ok: Callable[[dict[str, Any]], bool], log: Path, timeout: float = 60
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, body = cluster.request("GET", f"{SUMMARY_PATH}/{NAME}")
        if status == 200 and ok(body):
            return dict(body)
        time.sleep(0.1)
    raise AssertionError(
        f"summary never matched; last: {body}\n--- controller log ---\n{log.read_text()[-3000:]}"
    )


def test_summary_follows_nodetopology_changes(
    admission: Admission, cluster: LocalCluster, tmp_path: Path
) -> None:
    """A node with a bigger island appears: a pod refused a moment ago is admitted."""
    admission.set_summary("missing")  # the controller creates it
    admission.current = None
    log = tmp_path / "controller.log"
    small = topology_of("dgx1-v100", f"adm-small-{RUN}")
    _put_topology(cluster, small)
    created = [small["metadata"]["name"]]
    try:
        with _controller(admission, log):
            first = _wait_summary(cluster, lambda b: "total" in b.get("status", {}), log)
            assert first["metadata"]["managedFields"][0]["manager"] == FIELD_MANAGER
            largest = first["status"]["total"]["largestIsland"]
            wanted = largest + 8
            case = Case("grow", {"nodetopo.io/gpus-in-one-island": "true"}, None, gpus=wanted)
            obj = manifest(case, f"grow-{uuid.uuid4().hex[:6]}", admission.namespaces["deny"])
            message = (
                f"pod needs {wanted} GPUs in one NVLink island but the largest island in the cluster has "
            )
            refused = ("nodetopo-topology", f"{message}{largest}")
            admission.settled(obj, refused)
            assert admission.verdict(obj, admission.namespaces["deny"]) == refused

            big = _big_topology(topology_of("dgx-h100"), f"adm-big-{RUN}", wanted)
            _put_topology(cluster, big)
            created.append(big["metadata"]["name"])
            grown = _wait_summary(
                cluster, lambda b: b["status"].get("total", {}).get("largestIsland") == wanted, log
            )
            assert grown["status"]["observedNodeTopologies"] >= 2
            admission.settled(obj, None)
            assert admission.verdict(obj, admission.namespaces["deny"]) is None

            cluster.request("DELETE", f"/apis/{GROUP}/{VERSION}/nodetopologies/{big['metadata']['name']}")
            created.remove(big["metadata"]["name"])
            _wait_summary(
                cluster, lambda b: b["status"].get("total", {}).get("largestIsland") == largest, log
            )
    finally:
        for name in created:
            cluster.request("DELETE", f"/apis/{GROUP}/{VERSION}/nodetopologies/{name}")
