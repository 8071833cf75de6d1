"""Fixtures for tests against a real Kubernetes control plane (``tests/kube/``).

One etcd + kube-apiserver (v1.34, built by ``tests/cluster/build.sh``) runs for the whole pytest
session on free loopback ports; ``crds/`` is applied at start. If the binaries cannot be built or
the servers do not start, every test here FAILS (never skips). Mark test modules with
``pytestmark = pytest.mark.k8s``. Objects are shared by the session, so every test creates its own
uniquely named Nodes (``make_node``) and must not assume an empty cluster.

The apiserver runs with ``--authorization-mode=Node,RBAC``, token authentication from a static
token file, the default admission plugins plus ``NodeRestriction`` (ValidatingAdmissionPolicy is
GA and on), bound service-account tokens (issuer ``https://kubernetes.default.svc.cluster.local``)
and a Metadata-level audit log (JSON lines, stage ResponseComplete).

Session fixtures
----------------
``cluster`` (``LocalCluster``)
    ``.server``, ``.ca_file``, ``.kubeconfig`` (admin), ``.kubeconfig_for(user)``,
    ``.users[name]`` (``User(name, token, groups)``; names: ``admin``, ``publisher`` and ``other``
    are in ``system:masters``, ``nobody`` has no RBAC grant), ``.write_kubeconfig(path, token=)``,
    ``.request(method, path, user=, body=)`` (raw HTTP, returns ``(status, json)``),
    ``.audit_barrier()`` → offset and ``.audit_events(since=offset, user="publisher")`` → the
    audit events in between (count requests by ``event["verb"]``),
    ``.start_controller_manager()``, ``.kubectl(*args, user=, input=, check=)``.
``kubectl``
    ``kubectl("get", "ntopo", "-o", "wide", user="admin", input=None, check=True)`` runs the real
    kubectl and returns ``subprocess.CompletedProcess[str]``.
``api_client``
    An admin ``kubernetes.client.ApiClient``.
``api_client_for``
    ``api_client_for("publisher")`` or ``api_client_for(token=...)``: an ApiClient for a static
    user or any bearer token (closed at session end).
``controller_manager``
    Starts kube-controller-manager (garbage collector, namespace, service-account controllers) on
    first use; returns the ``cluster``.

Function fixtures
-----------------
``make_node(name=None, *, labels=None, annotations=None, taints=None) -> dict``
    Creates a Node through the API (a unique ``test-node-…`` name by default) and deletes it
    after the test (404 ignored, so a test may delete it itself).
``node_bound_token(node_name, *, namespace="default", service_account="nodetopo-agent",
expiration_seconds=3600) -> BoundToken``
    Creates the service account if missing and a Pod with ``spec.nodeName=node_name`` (it never
    runs: there is no kubelet), then requests a token bound to that Pod. The token's user is
    ``system:serviceaccount:<ns>:<sa>`` and its ``userInfo.extra`` carries
    ``authentication.kubernetes.io/node-name`` (and ``node-uid``): what a ValidatingAdmissionPolicy
    keys on. ``BoundToken.kubeconfig`` is a kubeconfig file for it; ``api_client_for(token=...)``
    gives a client. The Pod is force-deleted after the test (which invalidates the token).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from .cluster import ClusterError, LocalCluster, build_binaries


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    try:
        bin_dir = build_binaries()
    except ClusterError as e:
        pytest.fail(f"the test control plane could not be built: {e}", pytrace=False)
    local = LocalCluster(bin_dir, workdir=tmp_path_factory.mktemp("cluster"))
    try:
        local.start()
    except ClusterError as e:
        pytest.fail(f"the test control plane did not start: {e}", pytrace=False)
    try:
        yield local
    finally:
        local.stop()


@pytest.fixture(scope="session")
def kubectl(cluster: LocalCluster) -> Callable[..., Any]:
    return cluster.kubectl


@pytest.fixture(scope="session")
def api_client_for(
    cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., Any]]:
    clients: list[Any] = []
    directory = tmp_path_factory.mktemp("kubeconfigs")

    def make(user: str | None = None, *, token: str | None = None) -> Any:
        if token is None:
            if user is None:
                raise ValueError("api_client_for needs a user name or a token")
            path = cluster.kubeconfig_for(user)
        else:
            path = cluster.write_kubeconfig(directory / f"{uuid.uuid4().hex}.yaml", token=token)
        client = kubernetes.config.new_client_from_config(config_file=str(path), persist_config=False)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


@pytest.fixture(scope="session")
def api_client(api_client_for: Callable[..., Any]) -> Any:
    return api_client_for("admin")


@pytest.fixture(scope="session")
def controller_manager(cluster: LocalCluster) -> LocalCluster:
    try:
        cluster.start_controller_manager()
    except ClusterError as e:
        pytest.fail(f"kube-controller-manager did not start: {e}", pytrace=False)
    return cluster


@pytest.fixture
def make_node(cluster: LocalCluster) -> Iterator[Callable[..., dict[str, Any]]]:
    created: list[str] = []

    def make(
        name: str | None = None,
        *,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
        taints: list[dict[str, str]] | None = None,
    ) -> dict[str, Any]:
        name = name or f"test-node-{uuid.uuid4().hex[:10]}"
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
            "spec": {"taints": taints or []},
        }
        status, node = cluster.request("POST", "/api/v1/nodes", body=body)
        if status != 201:
            raise ClusterError(f"creating Node {name}: HTTP {status}: {node}")
        created.append(name)
        return dict(node)

    yield make
    for name in created:
        cluster.request("DELETE", f"/api/v1/nodes/{name}")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class BoundToken:
    """A service-account token bound to a Pod scheduled (by name) on ``node_name``."""

    token: str
    username: str
    namespace: str
    service_account: str
    pod_name: str
    pod_uid: str
    node_name: str
    kubeconfig: Path


@pytest.fixture
def node_bound_token(cluster: LocalCluster, tmp_path: Path) -> Iterator[Callable[..., BoundToken]]:
    pods: list[tuple[str, str]] = []

    def make(
        node_name: str,
        *,
        namespace: str = "default",
        service_account: str = "nodetopo-agent",
        expiration_seconds: int = 3600,
    ) -> BoundToken:
        status, _ = cluster.request("GET", f"/api/v1/namespaces/{namespace}")
        if status == 404:
            cluster.request(
                "POST",
                "/api/v1/namespaces",
                body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
            )
        sa_path = f"/api/v1/namespaces/{namespace}/serviceaccounts"
        status, _ = cluster.request("GET", f"{sa_path}/{service_account}")
        if status == 404:
            status, answer = cluster.request(
                "POST",
                sa_path,
                body={"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": service_account}},
            )
            if status not in (201, 409):
                raise ClusterError(f"creating ServiceAccount {service_account}: HTTP {status}: {answer}")
        pod_name = f"nodetopo-agent-{uuid.uuid4().hex[:10]}"
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": pod_name, "namespace": namespace},
            "spec": {
                "nodeName": node_name,
                "serviceAccountName": service_account,
                "automountServiceAccountToken": False,
                "containers": [{"name": "agent", "image": "registry.invalid/nodetopo:test"}],
            },
        }
        status, created = cluster.request("POST", f"/api/v1/namespaces/{namespace}/pods", body=pod)
        if status != 201:
            raise ClusterError(f"creating Pod {pod_name}: HTTP {status}: {created}")
        pods.append((namespace, pod_name))
        request = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "expirationSeconds": expiration_seconds,
                "boundObjectRef": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": pod_name,
                    "uid": created["metadata"]["uid"],
                },
            },
        }
        status, answer = cluster.request("POST", f"{sa_path}/{service_account}/token", body=request)
        if status != 201:
            raise ClusterError(f"TokenRequest for {service_account}: HTTP {status}: {answer}")
        token = answer["status"]["token"]
        return BoundToken(
            token=token,
            username=f"system:serviceaccount:{namespace}:{service_account}",
            namespace=namespace,
            service_account=service_account,
            pod_name=pod_name,
            pod_uid=created["metadata"]["uid"],
            node_name=node_name,
            kubeconfig=cluster.write_kubeconfig(tmp_path / f"kubeconfig-{pod_name}.yaml", token=token),
        )

    yield make
    for namespace, pod_name in pods:
        cluster.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{pod_name}?gracePeriodSeconds=0")
