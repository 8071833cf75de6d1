"""One Kubernetes client story (issue 16), against the real kube-apiserver.

A real exec credential plugin (a tiny script, as ``aws eks get-token`` or ``gke-gcloud-auth-plugin``
are), contexts, impersonation and an HTTP CONNECT proxy, through the stdlib client (publish, agent,
ray, export), the official client (extender) and the CLI: one loader for all of them.
"""

from __future__ import annotations

import os
import select
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import BUNDLES

from kube.cluster import LocalCluster
from kube.test_publish import _client_certificate, _whoami
from nodetopo.kube.official import load_api_client
from nodetopo.kube.transport import connect

pytestmark = pytest.mark.k8s

BUNDLE = BUNDLES / "dgx-h100"

PLUGIN = """\
#!{python}
import datetime, json, os, sys
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
assert info["spec"]["interactive"] is False and info["apiVersion"] == os.environ["WANT_VERSION"]
log = os.environ["PLUGIN_LOG"]
with open(log, "a") as f:
    f.write("run\\n")
runs = sum(1 for _ in open(log))
status = {{}}
mode = os.environ["PLUGIN_MODE"]
if mode == "cert":
    status["clientCertificateData"] = open(os.environ["PLUGIN_CERT"]).read()
    status["clientKeyData"] = open(os.environ["PLUGIN_KEY"]).read()
else:
    stale = mode == "stale-first" and runs == 1
    status["token"] = "not-a-valid-token" if stale else os.environ["PLUGIN_TOKEN"]
seconds = float(os.environ.get("PLUGIN_EXPIRES", "3600"))
expires = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=seconds)
status["expirationTimestamp"] = expires.strftime("%Y-%m-%dT%H:%M:%SZ")
print(json.dumps({{"apiVersion": os.environ["WANT_VERSION"], "kind": "ExecCredential", "status": status}}))
"""


@pytest.fixture
def plugin(tmp_path: Path) -> Path:
    path = tmp_path / "kube-plugin"
    path.write_text(PLUGIN.format(python=sys.executable))
    path.chmod(0o755)
    return path


def exec_kubeconfig(
    cluster: LocalCluster, path: Path, plugin: Path, *, version: str = "v1", **env: str
) -> Path:
    api_version = f"client.authentication.k8s.io/{version}"
    env = {"WANT_VERSION": api_version, **env}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "c",
                "cluster": {"server": cluster.server, "certificate-authority": str(cluster.ca_file)},
            }
        ],
        "users": [
            {
                "name": "exec-user",
                "user": {
                    "exec": {
                        "apiVersion": api_version,
                        "command": str(plugin),
                        "env": [{"name": k, "value": v} for k, v in env.items()],
                        "interactiveMode": "Never",
                        "provideClusterInfo": True,
                    }
                },
            },
            {"name": "nobody", "user": {"token": cluster.users["nobody"].token}},
            {
                "name": "impersonator",
                "user": {"token": cluster.users["admin"].token, "as": "nodetopo-test-nobody"},
            },
        ],
        "contexts": [
            {"name": "exec", "context": {"cluster": "c", "user": "exec-user"}},
            {"name": "nobody", "context": {"cluster": "c", "user": "nobody"}},
            {"name": "impersonate", "context": {"cluster": "c", "user": "impersonator"}},
        ],
        "current-context": "nobody",
    }
    path.write_text(yaml.safe_dump(config))
    return path


def runs(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def nodetopo(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nodetopo", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
    )


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_exec_token_plugin_for_the_stdlib_client_the_official_client_and_the_cli(
    cluster: LocalCluster,
    tmp_path: Path,
    plugin: Path,
    make_node: Callable[..., dict[str, Any]],
    version: str,
) -> None:
    log = tmp_path / "runs"
    config = exec_kubeconfig(
        cluster,
        tmp_path / "kubeconfig",
        plugin,
        version=version,
        PLUGIN_LOG=str(log),
        PLUGIN_MODE="token",
        PLUGIN_TOKEN=cluster.users["publisher"].token,
    )
    with connect(str(config), context="exec") as connection:
        for _ in range(3):
            assert _whoami(connection) == "nodetopo-test-publisher"
    assert runs(log) == 1  # cached until it expires

    import kubernetes

    api = kubernetes.client.CustomObjectsApi(load_api_client(str(config), context="exec"))
    listed: Any = api.list_cluster_custom_object("nodetopo.io", "v1alpha1", "nodetopologies", limit=1)
    assert "items" in listed
    assert runs(log) == 2

    node = make_node()["metadata"]["name"]
    done = nodetopo(
        "publish",
        "--from",
        str(BUNDLE),
        "--node-name",
        node,
        "--kubeconfig",
        str(config),
        "--context",
        "exec",
    )
    assert done.returncode == 0, done.stderr
    done = nodetopo("ray", "--node-name", node, "--kubeconfig", str(config), "--context", "exec")
    assert done.returncode == 0, done.stderr
    assert yaml.safe_load(done.stdout)["nodetopo.io/gpu.count"] == "8"
    done = nodetopo("export", "kueue", "--kubeconfig", str(config), "--context", "exec")
    assert done.returncode == 0, done.stderr
    # the kubeconfig's current context is "nobody": without --context the same call is refused
    done = nodetopo("ray", "--node-name", node, "--kubeconfig", str(config))
    assert done.returncode == 1 and "HTTP 403" in done.stderr and "Traceback" not in done.stderr


def test_exec_plugin_runs_again_when_the_credential_expires_or_is_rejected(
    cluster: LocalCluster, tmp_path: Path, plugin: Path
) -> None:
    log = tmp_path / "runs"
    token = cluster.users["publisher"].token
    config = exec_kubeconfig(
        cluster,
        tmp_path / "k1",
        plugin,
        PLUGIN_LOG=str(log),
        PLUGIN_MODE="token",
        PLUGIN_TOKEN=token,
        PLUGIN_EXPIRES="1",
    )
    with connect(str(config), context="exec") as connection:
        for _ in range(2):
            assert _whoami(connection) == "nodetopo-test-publisher"
    assert runs(log) == 2  # expires within the renewal margin: asked again for each request

    log2 = tmp_path / "runs2"
    config = exec_kubeconfig(
        cluster, tmp_path / "k2", plugin, PLUGIN_LOG=str(log2), PLUGIN_MODE="stale-first", PLUGIN_TOKEN=token
    )
    with connect(str(config), context="exec") as connection:
        assert _whoami(connection) == "nodetopo-test-publisher"  # 401 with the first token, then ok
    assert runs(log2) == 2


def test_exec_plugin_with_a_client_certificate(cluster: LocalCluster, tmp_path: Path, plugin: Path) -> None:
    user = f"nodetopo-test-exec-cert-{uuid.uuid4().hex[:6]}"
    cert, key = _client_certificate(cluster, user, "system:masters")
    (tmp_path / "c.pem").write_bytes(cert)
    (tmp_path / "k.pem").write_bytes(key)
    config = exec_kubeconfig(
        cluster,
        tmp_path / "kubeconfig",
        plugin,
        PLUGIN_LOG=str(tmp_path / "runs"),
        PLUGIN_MODE="cert",
        PLUGIN_CERT=str(tmp_path / "c.pem"),
        PLUGIN_KEY=str(tmp_path / "k.pem"),
    )
    with connect(str(config), context="exec") as connection:
        assert _whoami(connection) == user
    import kubernetes

    client = load_api_client(str(config), context="exec")
    review: Any = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    answer: Any = kubernetes.client.AuthenticationV1Api(client).create_self_subject_review(review)
    assert answer.status.user_info.username == user


def test_impersonation(cluster: LocalCluster, tmp_path: Path, plugin: Path) -> None:
    config = exec_kubeconfig(cluster, tmp_path / "kubeconfig", plugin)
    with connect(str(config), context="impersonate") as connection:
        assert _whoami(connection) == "nodetopo-test-nobody"


class ConnectProxy:
    """A minimal HTTP CONNECT proxy on loopback that counts the tunnels it opened."""

    def __init__(self) -> None:
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(16)
        self.port = int(self.server.getsockname()[1])
        self.tunnels: list[str] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._tunnel, args=(client,), daemon=True).start()

    def _tunnel(self, client: socket.socket) -> None:
        with client:
            request = b""
            while b"\r\n\r\n" not in request:
                chunk = client.recv(4096)
                if not chunk:
                    return
                request += chunk
            method, target = request.split(b" ")[:2]
            if method != b"CONNECT":
                client.sendall(b"HTTP/1.1 405 Method Not Allowed\r\n\r\n")
                return
            host, port = target.decode().rsplit(":", 1)
            self.tunnels.append(target.decode())
            with socket.create_connection((host, int(port))) as upstream:
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                peers = [client, upstream]
                while True:
                    readable, _, _ = select.select(peers, [], [], 10)
                    if not readable:
                        return
                    for sock in readable:
                        data = sock.recv(65536)
                        if not data:
                            return
                        (upstream if sock is client else client).sendall(data)

    def close(self) -> None:
        self.server.close()


@pytest.fixture
def proxy() -> Iterator[ConnectProxy]:
    p = ConnectProxy()
    yield p
    p.close()


def test_proxy_url_for_both_clients(cluster: LocalCluster, tmp_path: Path, proxy: ConnectProxy) -> None:
    config = yaml.safe_load(cluster.kubeconfig_for("publisher").read_text())
    for entry in config["clusters"]:
        entry["cluster"]["proxy-url"] = f"http://127.0.0.1:{proxy.port}"
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    with connect(str(path)) as connection:
        assert _whoami(connection) == "nodetopo-test-publisher"
    assert len(proxy.tunnels) == 1 and proxy.tunnels[0].endswith(str(cluster.server.rsplit(":", 1)[1]))
    import kubernetes

    api = kubernetes.client.CustomObjectsApi(load_api_client(str(path)))
    api.list_cluster_custom_object("nodetopo.io", "v1alpha1", "nodetopologies", limit=1)
    assert len(proxy.tunnels) == 2
