"""Publishing the NodeTopology resource against the real kube-apiserver.

nodetopo's writes go through the ``publisher`` static user so the audit log can tell them apart.
"""

from __future__ import annotations

import base64
import datetime
import http.server
import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from nodetopo.errors import ConflictError, ForbiddenError, InvalidError, PublishError, TransientError
from nodetopo.kube.config import ClusterAccess, in_cluster_access, kubeconfig_access, parse_kubeconfig
from nodetopo.kube.errors import ApiStatusError, KubeConfigError, parse_retry_after, translate_api_error
from nodetopo.kube.session import ApiSession
from nodetopo.kube.transport import KubeConnection, connect
from nodetopo.publish import run_publish
from nodetopo.publish.nodetopology import NodeTopologyPublisher, status_content_hash, status_patch
from nodetopo.resource.identity import GROUP, PLURAL, VERSION

from . import bodies
from .cluster import LocalCluster, free_port

pytestmark = pytest.mark.k8s

PATH = f"/apis/{GROUP}/{VERSION}/{PLURAL}"


class Clock:
    """A settable UTC clock for ``lastTransitionTime``."""

    def __init__(self) -> None:
        self.now = datetime.datetime(2026, 3, 1, 12, 0, 0, tzinfo=datetime.UTC)

    def __call__(self) -> datetime.datetime:
        return self.now

    def advance(self, seconds: int) -> None:
        self.now += datetime.timedelta(seconds=seconds)


@pytest.fixture
def session(cluster: LocalCluster) -> Iterator[ApiSession]:
    with connect(str(cluster.kubeconfig_for("publisher"))) as connection:
        yield ApiSession(connection)


def _get(cluster: LocalCluster, name: str) -> dict[str, Any]:
    status, obj = cluster.request("GET", f"{PATH}/{name}")
    assert status == 200, obj
    return dict(obj)


def _conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in obj["status"]["conditions"]}


def test_created_with_owner_then_updated(
    cluster: LocalCluster, session: ApiSession, make_node: Callable[..., dict[str, Any]]
) -> None:
    node = make_node()
    name = node["metadata"]["name"]
    clock = Clock()
    publisher = NodeTopologyPublisher(session, clock=clock)
    body = bodies.hgx_h100(name)

    outcome = publisher.apply(body)

    assert outcome.written
    obj = _get(cluster, name)
    assert obj["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "name": name,
            "uid": node["metadata"]["uid"],
            "blockOwnerDeletion": False,
        }
    ]
    assert obj["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "nodetopo"}
    assert obj["status"]["summary"] == body["status"]["summary"]
    assert obj["status"]["contentHash"] == body["status"]["contentHash"]
    assert {c["lastTransitionTime"] for c in obj["status"]["conditions"]} == {"2026-03-01T12:00:00Z"}
    managers = {
        (m["manager"], m["operation"], m.get("subresource", "")) for m in obj["metadata"]["managedFields"]
    }
    assert managers == {("nodetopo-agent", "Apply", ""), ("nodetopo-agent", "Apply", "status")}

    # Update: one GPU lost; Ready flips to False; the other conditions keep their time.
    clock.advance(600)
    changed = bodies.variant(body, gpuCount=7)
    changed["status"]["gpus"] = changed["status"]["gpus"][:7]
    changed["status"]["conditions"][0].update(status="False", reason="Degraded", message="GPU 7 lost")
    changed = bodies.finish(changed)
    assert publisher.apply(changed).written

    obj = _get(cluster, name)
    assert obj["status"]["summary"]["gpuCount"] == 7
    assert [g["index"] for g in obj["status"]["gpus"]] == list(range(7))
    conditions = _conditions(obj)
    assert conditions["Ready"]["status"] == "False"
    assert conditions["Ready"]["lastTransitionTime"] == "2026-03-01T12:10:00Z"
    assert conditions["Consistent"]["lastTransitionTime"] == "2026-03-01T12:00:00Z"
    assert conditions["SourceNvml"]["lastTransitionTime"] == "2026-03-01T12:00:00Z"


def test_transition_times_survive_a_new_publisher(
    cluster: LocalCluster, session: ApiSession, make_node: Callable[..., dict[str, Any]]
) -> None:
    """A restarted agent reads the object once and keeps the times of unchanged conditions."""
    name = make_node()["metadata"]["name"]
    first = Clock()
    NodeTopologyPublisher(session, clock=first).apply(bodies.hgx_h100(name))
    later = Clock()
    later.advance(3600)
    changed = bodies.variant(bodies.hgx_h100(name), rdmaNICs=7)
    assert NodeTopologyPublisher(session, clock=later).apply(changed).written
    obj = _get(cluster, name)
    assert obj["status"]["summary"]["rdmaNICs"] == 7
    assert {c["lastTransitionTime"] for c in obj["status"]["conditions"]} == {"2026-03-01T12:00:00Z"}


def test_unchanged_topology_makes_zero_requests(
    cluster: LocalCluster, session: ApiSession, make_node: Callable[..., dict[str, Any]]
) -> None:
    name = make_node()["metadata"]["name"]
    publisher = NodeTopologyPublisher(session)
    body = bodies.hgx_h100(name)

    mark = cluster.audit_barrier()
    assert publisher.apply(body).written
    first = cluster.audit_events(since=mark, user="publisher")
    # Node read once (owner UID), object read once (previous conditions), two applies.
    assert sorted(
        (e["verb"], e["objectRef"]["resource"], e["objectRef"].get("subresource", "")) for e in first
    ) == [
        ("get", "nodes", ""),
        ("get", "nodetopologies", ""),
        ("patch", "nodetopologies", ""),
        ("patch", "nodetopologies", "status"),
    ]

    mark = cluster.audit_barrier()
    for _ in range(3):
        assert not publisher.apply(bodies.hgx_h100(name)).written  # an equal, freshly built body
    assert cluster.audit_events(since=mark, user="publisher") == []

    # A change of the facts is one write, the status apply: no re-read of the Node or the object,
    # no metadata apply while labels and owner are unchanged.
    mark = cluster.audit_barrier()
    assert publisher.apply(bodies.variant(body, migDevices=0, rdmaNICs=4)).written
    again = cluster.audit_events(since=mark, user="publisher")
    assert sorted((e["verb"], e["objectRef"].get("subresource", "")) for e in again) == [
        ("patch", "status"),
    ]
    assert _get(cluster, name)["status"]["summary"]["rdmaNICs"] == 4

    # A label change applies the metadata again, then the status.
    relabelled = bodies.variant(body, migDevices=0, rdmaNICs=4)
    relabelled["metadata"]["labels"]["example.com/extra"] = "x"
    mark = cluster.audit_barrier()
    assert publisher.apply(relabelled).written
    again = cluster.audit_events(since=mark, user="publisher")
    assert sorted((e["verb"], e["objectRef"].get("subresource", "")) for e in again) == [
        ("patch", ""),
        ("patch", "status"),
    ]
    assert _get(cluster, name)["metadata"]["labels"]["example.com/extra"] == "x"


def test_object_deleted_behind_the_publishers_back_is_created_again(
    cluster: LocalCluster, session: ApiSession, make_node: Callable[..., dict[str, Any]]
) -> None:
    node = make_node()
    name = node["metadata"]["name"]
    publisher = NodeTopologyPublisher(session)
    body = bodies.hgx_h100(name)
    assert publisher.apply(body).written
    status, _ = cluster.request("DELETE", f"{PATH}/{name}")
    assert status == 200
    assert publisher.apply(bodies.variant(body, rdmaNICs=6)).written
    obj = _get(cluster, name)
    assert obj["status"]["summary"]["rdmaNICs"] == 6
    assert obj["metadata"]["ownerReferences"][0]["uid"] == node["metadata"]["uid"]
    # and it is remembered: the next change is one write again
    mark = cluster.audit_barrier()
    assert publisher.apply(bodies.variant(body, rdmaNICs=5)).written
    again = cluster.audit_events(since=mark, user="publisher")
    assert [(e["verb"], e["objectRef"].get("subresource", "")) for e in again] == [("patch", "status")]


def test_node_deletion_garbage_collects_the_resource(
    controller_manager: LocalCluster, session: ApiSession, make_node: Callable[..., dict[str, Any]]
) -> None:
    cluster = controller_manager
    name = make_node()["metadata"]["name"]
    NodeTopologyPublisher(session).apply(bodies.hgx_h100(name))
    assert _get(cluster, name)["status"]["nodeName"] == name

    status, _ = cluster.request("DELETE", f"/api/v1/nodes/{name}")
    assert status == 200
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status, _ = cluster.request("GET", f"{PATH}/{name}")
        if status == 404:
            break
        time.sleep(0.5)
    assert status == 404, "the garbage collector did not delete the NodeTopology of a deleted Node"


def test_a_status_field_someone_else_took_is_taken_back_and_said_once(
    cluster: LocalCluster,
    session: ApiSession,
    kubectl: Callable[..., Any],
    make_node: Callable[..., dict[str, Any]],
) -> None:
    """Was: ``ConflictError`` (fatal: the agent exited, the kubelet restarted it, for ever)."""
    node = make_node()
    name = node["metadata"]["name"]
    publisher = NodeTopologyPublisher(session)
    publisher.apply(bodies.hgx_h100(name))
    # Someone else takes over the status with server-side apply (force, as kubectl would). The
    # status is atomic (one writer applies it whole), so taking it means applying all of it.
    taken = bodies.variant(bodies.hgx_h100(name), gpuCount=4)
    patch = status_patch(taken, previous_conditions=[], now="2026-01-01T00:00:00Z")
    kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",
        "--field-manager=someone-else",
        "--subresource=status",
        "-f",
        "-",
        user="other",
        input=json.dumps(patch),
    )
    assert _get(cluster, name)["status"]["summary"]["gpuCount"] == 4

    assert publisher.apply(bodies.variant(bodies.hgx_h100(name), gpuCount=3)).written
    assert _get(cluster, name)["status"]["summary"]["gpuCount"] == 3
    events = _events(cluster, "NodeTopology", name)
    assert len(events) == 1, events
    event = events[0]
    assert event["type"] == "Warning" and event["reason"] == "OwnedFieldReasserted"
    # the status is atomic: the field taken back is the status as a whole
    assert ".status" in event["message"] and "'someone-else'" in event["message"]
    assert event["involvedObject"]["uid"] == _get(cluster, name)["metadata"]["uid"]
    assert event["source"] == {"component": "nodetopo-agent", "host": name}
    # Ours again: the next change is one quiet write.
    assert publisher.apply(bodies.variant(bodies.hgx_h100(name), gpuCount=2)).written
    assert _get(cluster, name)["status"]["summary"]["gpuCount"] == 2
    assert len(_events(cluster, "NodeTopology", name)) == 1


def _events(cluster: LocalCluster, kind: str, name: str) -> list[dict[str, Any]]:
    selector = f"involvedObject.kind={kind},involvedObject.name={name}"
    status, body = cluster.request("GET", f"/api/v1/namespaces/default/events?fieldSelector={selector}")
    assert status == 200, body
    return list(body["items"])


def test_forbidden_is_translated(cluster: LocalCluster, make_node: Callable[..., dict[str, Any]]) -> None:
    name = make_node()["metadata"]["name"]
    with connect(str(cluster.kubeconfig_for("nobody"))) as connection:
        publisher = NodeTopologyPublisher(ApiSession(connection))
        with pytest.raises(ForbiddenError) as info:
            publisher.apply(bodies.hgx_h100(name))
    assert info.value.status == 403
    assert 'User "nodetopo-test-nobody" cannot get resource "nodes"' in str(info.value)
    assert isinstance(info.value.__cause__, ApiStatusError)


def test_unreachable_server_is_transient(cluster: LocalCluster, tmp_path: Any) -> None:
    access = ClusterAccess(server=f"https://127.0.0.1:{free_port()}", ca_file=str(cluster.ca_file))
    with KubeConnection(access) as connection, pytest.raises(TransientError) as info:
        NodeTopologyPublisher(ApiSession(connection)).apply(bodies.hgx_h100("unreachable"))
    assert info.value.retryable
    assert "read Node unreachable" in str(info.value)


def test_run_publish_one_shot(cluster: LocalCluster, make_node: Callable[..., dict[str, Any]]) -> None:
    name = make_node(labels={"kubernetes.io/hostname": "x"})["metadata"]["name"]
    outcome = run_publish(
        bodies.pcie_pair(name),
        {"nodetopo.io/gpu.count": "2", "nodetopo.io/rdma": "false"},
        node_name=name,
        kubeconfig=str(cluster.kubeconfig_for("publisher")),
        nfd=False,
    )
    assert outcome.topology.written and outcome.labels.written
    assert _get(cluster, name)["status"]["summary"]["gpuModel"] == "NVIDIA L40S"
    _, node = cluster.request("GET", f"/api/v1/nodes/{name}")
    assert node["metadata"]["labels"] == {
        "kubernetes.io/hostname": "x",
        "nodetopo.io/gpu.count": "2",
        "nodetopo.io/rdma": "false",
    }
    # A one-shot run is one clean, final scan: a key it lacks goes at once, an uncertain one stays.
    run_publish(
        bodies.pcie_pair(name),
        {"nodetopo.io/gpu.count": "2"},
        node_name=name,
        kubeconfig=str(cluster.kubeconfig_for("publisher")),
        nfd=False,
        uncertain_prefixes=("nodetopo.io/gpu.",),
    )
    _, node = cluster.request("GET", f"/api/v1/nodes/{name}")
    assert node["metadata"]["labels"] == {"kubernetes.io/hostname": "x", "nodetopo.io/gpu.count": "2"}


# --------------------------------------------------------------------------------------------
# Pure pieces (no request)
# --------------------------------------------------------------------------------------------


def test_content_hash_ignores_times_and_itself() -> None:
    status = bodies.hgx_h100("n")["status"]
    timed = dict(status, contentHash="0" * 64)
    timed["conditions"] = [dict(c, lastTransitionTime="2020-01-01T00:00:00Z") for c in status["conditions"]]
    assert status_content_hash(timed) == status_content_hash(status)
    flipped = dict(
        status, conditions=[dict(status["conditions"][0], status="False"), *status["conditions"][1:]]
    )
    assert status_content_hash(flipped) != status_content_hash(status)


@pytest.mark.parametrize(
    ("header", "seconds"),
    [("7", 7.0), (None, None), ("soon", None), ("Sun, 01 Mar 2026 12:00:30 GMT", 30.0)],
)
def test_retry_after(header: str | None, seconds: float | None) -> None:
    now = datetime.datetime(2026, 3, 1, 12, 0, 0, tzinfo=datetime.UTC).timestamp()
    assert parse_retry_after(header, now=now) == seconds


@pytest.mark.parametrize(
    ("status", "kind", "retryable"),
    [
        (409, ConflictError, True),  # never fatal: the publisher takes back what it owns
        (401, ForbiddenError, False),
        (403, ForbiddenError, False),
        (400, InvalidError, False),
        (422, InvalidError, False),
        (429, TransientError, True),
        (503, TransientError, True),
        (404, PublishError, True),
    ],
)
def test_status_codes_map_to_error_classes(status: int, kind: type[PublishError], retryable: bool) -> None:
    error = ApiStatusError(status, "x", headers={"Retry-After": "3"})
    translated = translate_api_error(error, action="apply")
    assert isinstance(translated, kind)
    assert translated.retryable is retryable
    assert translated.status == status
    if kind is TransientError:
        assert translated.retry_after == 3.0


# --------------------------------------------------------------------------------------------
# The standard-library transport: configuration sources, TLS, tokens, keep-alive
# --------------------------------------------------------------------------------------------


def _whoami(connection: KubeConnection) -> str:
    """The user the API server sees (SelfSubjectReview, allowed for every authenticated user)."""
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    response = connection.request(
        "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", body=json.dumps(review).encode()
    )
    assert response.status == 201, response.data
    return str(json.loads(response.data)["status"]["userInfo"]["username"])


def test_in_cluster_config_rereads_a_rotated_token(cluster: LocalCluster, tmp_path: Path) -> None:
    mounted = tmp_path / "serviceaccount"
    mounted.mkdir()
    (mounted / "ca.crt").write_bytes(cluster.ca_file.read_bytes())
    (mounted / "token").write_text(cluster.users["publisher"].token + "\n")
    host, port = cluster.server.removeprefix("https://").rsplit(":", 1)
    env = {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port}
    access = in_cluster_access(env, directory=mounted)
    assert access.server == cluster.server
    with KubeConnection(access) as connection:
        assert _whoami(connection) == "nodetopo-test-publisher"
        # the kubelet rotates a projected token by swapping the file
        rotated = mounted / "token.new"
        rotated.write_text(cluster.users["other"].token)
        rotated.replace(mounted / "token")
        assert _whoami(connection) == "nodetopo-test-other"

    with pytest.raises(KubeConfigError, match="not running in a pod"):
        in_cluster_access({}, directory=mounted)
    with pytest.raises(KubeConfigError, match="does not exist"):
        in_cluster_access(env, directory=tmp_path / "missing")


def _client_certificate(cluster: LocalCluster, common_name: str, group: str) -> tuple[bytes, bytes]:
    """A client certificate signed by the test cluster's CA (``--client-ca-file``): PEM cert, key."""
    pki = cluster.workdir / "pki"
    ca_cert = x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes())
    ca_key = serialization.load_pem_private_key((pki / "ca.key").read_bytes(), password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(
            x509.Name(
                [
                    x509.NameAttribute(NameOID.ORGANIZATION_NAME, group),
                    x509.NameAttribute(NameOID.COMMON_NAME, common_name),
                ]
            )
        )
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def _kubeconfig(cluster_entry: dict[str, Any], user_entry: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster_entry}],
        "users": [{"name": "u", "user": user_entry}],
        "contexts": [
            {"name": "other", "context": {"cluster": "c", "user": "nobody"}},
            {"name": "main", "context": {"cluster": "c", "user": "u"}},
        ],
        "current-context": "main",
    }


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_kubeconfig_with_inline_client_certificate_and_tls_server_name(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    user = f"nodetopo-test-cert-{uuid.uuid4().hex[:6]}"
    cert, key = _client_certificate(cluster, user, "system:masters")
    config = _kubeconfig(
        {
            "server": cluster.server,
            "certificate-authority-data": _b64(cluster.ca_file.read_bytes()),
            "tls-server-name": "kubernetes.default.svc",
        },
        {"client-certificate-data": _b64(cert), "client-key-data": _b64(key)},
    )
    path = tmp_path / "kubeconfig.yaml"
    path.write_text(yaml.safe_dump(config))
    leftovers = set(Path("/tmp").glob("nodetopo-tls-*"))
    with connect(str(path)) as connection:
        assert _whoami(connection) == user
        assert ApiSession(connection).read_cluster_object(GROUP, VERSION, PLURAL, "no-such-thing") is None
    assert set(Path("/tmp").glob("nodetopo-tls-*")) == leftovers  # key material not left on disk

    # the certificate is checked for tls-server-name, not for the address connected to
    config["clusters"][0]["cluster"]["tls-server-name"] = "not-the-apiserver.example"
    path.write_text(yaml.safe_dump(config))
    with connect(str(path)) as connection, pytest.raises(TransientError, match="CERTIFICATE_VERIFY_FAILED"):
        ApiSession(connection).read_node("any")


def test_kubeconfig_files_relative_paths_token_file_and_context(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    (tmp_path / "ca.crt").write_bytes(cluster.ca_file.read_bytes())
    (tmp_path / "token").write_text(cluster.users["publisher"].token)
    config = _kubeconfig(
        {"server": cluster.server, "certificate-authority": "ca.crt"}, {"tokenFile": "token"}
    )
    config["users"].append({"name": "nobody", "user": {"token": cluster.users["nobody"].token}})
    path = tmp_path / "kubeconfig.yaml"
    path.write_text(yaml.safe_dump(config))
    with KubeConnection(kubeconfig_access(path)) as connection:
        assert _whoami(connection) == "nodetopo-test-publisher"
    with KubeConnection(kubeconfig_access(path, context="other")) as connection:
        assert _whoami(connection) == "nodetopo-test-nobody"


@pytest.mark.parametrize(
    ("user", "named"),
    [({"auth-provider": {"name": "oidc"}}, "auth-provider")],
)
def test_unsupported_kubeconfig_users_are_refused_clearly(user: dict[str, Any], named: str) -> None:
    config = _kubeconfig({"server": "https://127.0.0.1:6443"}, user)
    with pytest.raises(KubeConfigError) as info:
        parse_kubeconfig(config, source="kubeconfig k")
    message = str(info.value)
    assert f"user 'u' uses {named}" in message and "which nodetopo does not support" in message
    assert "client-certificate" in message and "tokenFile" in message and "exec" in message


def test_kubeconfig_errors_name_what_is_missing(tmp_path: Path) -> None:
    config = _kubeconfig({"server": "https://127.0.0.1:6443"}, {"token": "t"})
    with pytest.raises(KubeConfigError, match="no context named 'nope'"):
        parse_kubeconfig(config, context="nope", source="k")
    with pytest.raises(KubeConfigError, match="no user named 'nobody'"):
        parse_kubeconfig(config, context="other", source="k")
    with pytest.raises(KubeConfigError, match="http:// proxies"):
        parse_kubeconfig(_kubeconfig({"server": "https://x", "proxy-url": "socks5://p:1080"}, {}), source="k")
    with pytest.raises(KubeConfigError, match="not valid base64"):
        parse_kubeconfig(
            _kubeconfig({"server": "https://x", "certificate-authority-data": "%%"}, {}), source="k"
        )
    with pytest.raises(KubeConfigError, match=r"missing\.yaml"):
        kubeconfig_access(tmp_path / "missing.yaml")
    access = parse_kubeconfig(config, source="k")
    assert access.server == "https://127.0.0.1:6443" and access.token == "t"
    assert "'t'" not in repr(access)  # credentials stay out of logs


class _CountingHandler(http.server.BaseHTTPRequestHandler):
    """Answers ``{}``; records each request's client port; closes the connection after the
    answer (without saying so) when the server's ``drop_after_answer`` is set."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        server: Any = self.server
        server.ports.append(self.client_address[1])
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")
        if server.drop_after_answer:
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_connection_is_kept_alive_and_reopened_when_the_server_closed_it() -> None:
    server: Any = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _CountingHandler)
    server.ports = []
    server.drop_after_answer = False
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        access = ClusterAccess(server=f"http://127.0.0.1:{server.server_address[1]}", token="t")
        with KubeConnection(access, timeout=5) as connection:
            session = ApiSession(connection)
            for _ in range(3):
                assert session.read_node("n") == {}
            assert len(server.ports) == 3 and len(set(server.ports)) == 1  # one connection
            server.drop_after_answer = True
            assert session.read_node("n") == {}  # the server closes this one silently
            time.sleep(0.1)
            assert session.read_node("n") == {}  # stale connection: sent again on a new one
            assert len(set(server.ports)) >= 2
    finally:
        server.shutdown()
        server.server_close()


def test_importing_the_publishers_does_not_load_the_official_client() -> None:
    code = (
        "import sys, nodetopo.publish, nodetopo.agent.cli; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('kubernetes', 'urllib3')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
