"""One Kubernetes client story (issue 16) and kubeconfig errors (issue 17), without an apiserver.

Every command that talks to the API accepts the same kubeconfig (one loader) and fails with one
clear line (one error translation): never a traceback, never a credential on stderr.
"""

from __future__ import annotations

import base64
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import BUNDLES

from nodetopo.kube.config import _environment_proxy, cluster_access, parse_kubeconfig
from nodetopo.kube.errors import ExecPluginError, KubeConfigError, translate_api_error
from nodetopo.kube.exec import parse_exec_credential

RUN = [sys.executable, "-m", "nodetopo"]
SECRET = "s3cr3t-t0ken-do-not-print-0123456789"
BUNDLE = BUNDLES / "dgx-h100"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def kubeconfig(
    tmp_path: Path, cluster: dict[str, Any] | None = None, user: dict[str, Any] | None = None
) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "c", "cluster": cluster or {"server": f"https://127.0.0.1:{closed_port()}"}},
        ],
        "users": [{"name": "u", "user": user if user is not None else {"token": SECRET}}],
        "contexts": [{"name": "main", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "main",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


#: every command that talks to the API, as a user runs it with a kubeconfig
COMMANDS = {
    "publish": ["publish", "--from", str(BUNDLE), "--node-name", "n1"],
    "ray": ["ray", "--node-name", "n1"],
    "export": ["export", "kueue"],
    "agent": ["agent", "--once", "--from", str(BUNDLE), "--node-name", "n1", "--listen", ""],
    "extender": ["extender", "--listen", "127.0.0.1:0"],
    "admit": ["admit", "@JOB"],
    "summary-controller": ["summary-controller"],
}

JOB = """\
apiVersion: batch/v1
kind: Job
metadata: {name: train}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
        - name: c
          image: busybox
          resources: {limits: {nvidia.com/gpu: "8"}}
"""


def run(argv: list[str], *, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "NODETOPO_ONCE_ATTEMPTS": "1"}
    import os
    import tempfile

    env["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")
    if "@JOB" in argv:
        job = Path(tempfile.mkdtemp(prefix="nodetopo-test-")) / "job.yaml"
        job.write_text(JOB)
        argv = [str(job) if a == "@JOB" else a for a in argv]
    return subprocess.run([*RUN, *argv], capture_output=True, text=True, timeout=timeout, env=env)


def one_clear_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode != 0, done.stdout
    assert "Traceback" not in done.stderr and "urllib3" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if "ERROR" in line or line.startswith("nodetopo:")]
    assert errors, done.stderr
    return done.stderr


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_api_command_takes_kubeconfig_and_context(command: str) -> None:
    out = subprocess.run([*RUN, command, "--help"], capture_output=True, text=True, check=True).stdout
    assert "--kubeconfig" in out and "--context" in out, command


@pytest.mark.parametrize("command", ["publish", "ray", "export", "agent", "admit"])
def test_unreachable_server_is_one_line(command: str, tmp_path: Path) -> None:
    """Was: a 97-line urllib3 traceback from `nodetopo ray`."""
    done = run([*COMMANDS[command], "--kubeconfig", str(kubeconfig(tmp_path))])
    err = one_clear_line(done)
    assert "cannot reach the API server" in err and "Connection refused" in err, err
    assert SECRET not in err


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_yaml_error_never_echoes_the_token(command: str, tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nusers:\n- name: u\n  user:\n    token: " + SECRET + ": {oops\ncurrent-context: x\n"
    )
    done = run([*COMMANDS[command], "--kubeconfig", str(path)])
    err = one_clear_line(done)
    assert SECRET not in err and SECRET[:12] not in err, err
    assert "not valid YAML at line 5" in err, err


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_non_utf8_kubeconfig_is_one_line(command: str, tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_bytes(b"apiVersion: v1\nclusters: []\n# caf\xe9\n")
    err = one_clear_line(run([*COMMANDS[command], "--kubeconfig", str(path)]))
    assert "not UTF-8" in err, err


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_ca_data_that_is_not_a_certificate_is_one_line(command: str, tmp_path: Path) -> None:
    cluster = {
        "server": f"https://127.0.0.1:{closed_port()}",
        "certificate-authority-data": base64.b64encode(b"-----BEGIN CERTIFICATE-----\nnope\n").decode(),
    }
    err = one_clear_line(run([*COMMANDS[command], "--kubeconfig", str(kubeconfig(tmp_path, cluster))]))
    assert "certificate-authority-data is not a PEM or DER CA certificate" in err, err


def test_context_flag_selects_the_context(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path)
    err = one_clear_line(run([*COMMANDS["publish"], "--kubeconfig", str(path), "--context", "nope"]))
    assert "no context named 'nope'" in err
    access = cluster_access(str(path), context="main")
    assert access.token == SECRET


def test_kubeconfig_list_is_merged_as_kubectl_does(tmp_path: Path) -> None:
    first = kubeconfig(tmp_path)
    second = tmp_path / "second"
    second.write_text(
        yaml.safe_dump(
            {
                "clusters": [{"name": "c2", "cluster": {"server": "https://10.0.0.2:6443"}}],
                "users": [{"name": "u2", "user": {"token": "t2"}}],
                "contexts": [{"name": "other", "context": {"cluster": "c2", "user": "u2"}}],
            }
        )
    )
    access = cluster_access(f"{first}:{second}", context="other")
    assert access.server == "https://10.0.0.2:6443" and access.token == "t2"


def test_exec_basic_impersonation_and_proxy_are_accepted(tmp_path: Path) -> None:
    user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": "aws",
            "args": ["eks", "get-token", "--cluster-name", "c"],
            "env": [{"name": "AWS_PROFILE", "value": "p"}],
            "installHint": "install the AWS CLI",
        },
        "as": "jane",
        "as-groups": ["devs", "ops"],
        "as-user-extra": {"scopes": ["a", "b"]},
    }
    config = yaml.safe_load(
        kubeconfig(tmp_path, {"server": "https://h:6443", "proxy-url": "http://p:3128"}, user).read_text()
    )
    access = parse_kubeconfig(config, source="k")
    assert access.exec_plugin is not None and access.exec_plugin.args[:2] == ("eks", "get-token")
    assert access.proxy_url == "http://p:3128"
    headers = access.headers()
    assert headers["Impersonate-User"] == "jane" and headers["Impersonate-Group"] == "devs,ops"
    assert headers["Impersonate-Extra-scopes"] == "a,b"
    basic = parse_kubeconfig(
        yaml.safe_load(kubeconfig(tmp_path, None, {"username": "admin", "password": "pw"}).read_text()),
        source="k",
    )
    assert basic.headers()["Authorization"] == "Basic " + base64.b64encode(b"admin:pw").decode()
    assert "pw" not in repr(basic)


def test_interactive_exec_plugins_are_refused_with_the_reason(tmp_path: Path) -> None:
    user = {
        "exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "x", "interactiveMode": "Always"}
    }
    with pytest.raises(KubeConfigError, match="interactiveMode: Always"):
        parse_kubeconfig(yaml.safe_load(kubeconfig(tmp_path, None, user).read_text()), source="k")


def test_exec_credential_output_is_checked_without_quoting_it() -> None:
    with pytest.raises(ExecPluginError) as info:
        parse_exec_credential(SECRET, source="plugin")
    assert SECRET not in str(info.value)
    with pytest.raises(ExecPluginError, match="neither a token nor a client certificate"):
        parse_exec_credential('{"kind": "ExecCredential", "status": {}}', source="plugin")
    credential = parse_exec_credential(
        '{"kind": "ExecCredential", "status": {"token": "t", "expirationTimestamp": "2030-01-01T00:00:00Z"}}',
        source="plugin",
    )
    assert credential.token == "t" and credential.expires_at == 1893456000.0


def test_environment_proxy_and_no_proxy() -> None:
    env = {"HTTPS_PROXY": "http://proxy:3128", "NO_PROXY": "localhost,.internal,10.0.0.0/8"}
    assert _environment_proxy("https", "api.example.com", env) == "http://proxy:3128"
    assert _environment_proxy("https", "k8s.internal", env) is None
    assert _environment_proxy("https", "10.1.2.3", env) is None
    assert _environment_proxy("https", "localhost", env) is None
    assert _environment_proxy("https", "api.example.com", {}) is None


def test_urllib3_failures_translate_to_one_line() -> None:
    """The official client's (the extender's) connection errors go through the same translation."""
    urllib3 = pytest.importorskip("urllib3")
    inner = urllib3.exceptions.NewConnectionError(
        None, "Failed to establish a new connection: [Errno 111] Connection refused"
    )
    error = urllib3.exceptions.MaxRetryError(None, "/apis/nodetopo.io/v1alpha1/nodetopologies", inner)
    message = str(translate_api_error(error, action="list NodeTopology", server="https://h:6443"))
    assert message.startswith("list NodeTopology: cannot reach the API server https://h:6443: ")
    assert "Connection refused" in message and "object at 0x" not in message and "\n" not in message
