"""Hostile inputs to the Kubernetes client and the files beside it (issue 23): a device, a FIFO or a
huge file where a kubeconfig, a token file, a CA file or the probe's annotations file should be; an
exec plugin that prints a gigabyte; a server URL carrying ``user:password@``. Each must end in one
clear line, within a few seconds and under 600 MB, and never print a credential.

Every command runs in a child process under ``RLIMIT_AS`` = 600 MB, so a read that would hold
a device's endless output fails the test with a MemoryError traceback instead of swapping; every
server is a closed port or a listener on loopback.
"""

from __future__ import annotations

import os
import resource
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubeclient.test_kubeconfig import SECRET, closed_port, kubeconfig
from nodetopo.kube.config import cluster_access
from nodetopo.kube.errors import CredentialError, KubeConfigError, redact_url
from nodetopo.kube.exec import EXEC_OUTPUT_LIMIT, ExecCredentials, parse_exec_plugin
from nodetopo.kube.transport import KubeConnection

RUN = [sys.executable, "-m", "nodetopo"]
MEMORY_LIMIT = 600 * 2**20
PASSWORD = "hunter2-do-not-print"


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def run(argv: list[str], *, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """``nodetopo ARGV`` under 600 MB of address space; a hang fails the test (TimeoutExpired)."""
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "NODETOPO_ONCE_ATTEMPTS": "1"}
    env["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")
    return subprocess.run(
        [*RUN, *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        preexec_fn=_limit_memory,
    )


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode != 0, done.stdout[-2000:]
    assert "Traceback" not in done.stderr and "MemoryError" not in done.stderr, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr[-3000:]
    return lines[0]


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


# ---- the kubeconfig -------------------------------------------------------------------------


@pytest.mark.parametrize("command", [["export", "kueue"], ["ray", "--node-name", "n1"]])
def test_a_device_as_kubeconfig_is_refused_in_one_line(command: list[str]) -> None:
    """Was: MemoryError after reading /dev/zero to the end."""
    line = one_line_error(run([*command, "--kubeconfig", "/dev/zero"]))
    assert "kubeconfig /dev/zero" in line and "a character device" in line, line


def test_a_fifo_as_kubeconfig_is_refused_without_waiting_for_a_writer(fifo: Path) -> None:
    """Was: the open blocked until something wrote to the FIFO (forever)."""
    line = one_line_error(run(["export", "kueue", "--kubeconfig", str(fifo)], timeout=20))
    assert "a FIFO" in line, line


def test_a_huge_kubeconfig_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    with path.open("wb") as f:
        f.truncate(200 * 2**20)  # sparse: 200 MiB of NULs that cost no disk
    line = one_line_error(run(["export", "kueue", "--kubeconfig", str(path)]))
    assert "larger than" in line, line


def test_deeply_nested_yaml_is_one_line(tmp_path: Path) -> None:
    """Was: RecursionError out of PyYAML's composer."""
    path = tmp_path / "kubeconfig"
    path.write_text("[" * 60_000)
    line = one_line_error(run(["export", "kueue", "--kubeconfig", str(path)]))
    assert "kubeconfig" in line and "nest" in line, line


@pytest.mark.parametrize("shape", ["- a\n", "[],"])
def test_millions_of_tiny_yaml_nodes_are_refused_before_they_are_built(tmp_path: Path, shape: str) -> None:
    """Was: 8 MiB of ``[],`` took PyYAML to 2.9 GB and 113 s (``- a`` lines: 1.4 GB, 61 s)."""
    path = tmp_path / "kubeconfig"
    body = shape * (8 * 2**20 // len(shape) - 8)
    path.write_text("clusters:\n" + body if shape.startswith("-") else "x: [" + body + "]\n")
    line = one_line_error(run(["export", "kueue", "--kubeconfig", str(path)], timeout=20))
    assert "more than 200000 YAML nodes" in line, line


def test_a_non_scalar_where_a_string_belongs_is_refused(tmp_path: Path) -> None:
    """An alias bomb in ``server``: str() of it would expand a billion items."""
    path = tmp_path / "kubeconfig"
    laughs = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for level in range(1, 9):
        previous = chr(ord("a") + level - 1)
        name = chr(ord("a") + level)
        laughs.append(f"{name}: &{name} [{', '.join(['*' + previous] * 10)}]")
    path.write_text(
        "\n".join(laughs)
        + textwrap.dedent(
            """
            clusters:
            - name: c
              cluster: {server: *i}
            contexts:
            - name: x
              context: {cluster: c, user: u}
            users:
            - name: u
              user: {token: t}
            current-context: x
            """
        )
    )
    line = one_line_error(run(["export", "kueue", "--kubeconfig", str(path)]))
    assert "server" in line and "must be a string" in line, line


# ---- credential files -------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["/dev/zero", "fifo"])
def test_a_device_or_fifo_as_token_file_is_one_line(tmp_path: Path, fifo: Path, where: str) -> None:
    """Was: MemoryError (tokenFile: /dev/zero); a hang (a FIFO)."""
    token_file = "/dev/zero" if where == "/dev/zero" else str(fifo)
    path = kubeconfig(tmp_path, None, {"tokenFile": token_file})
    line = one_line_error(run(["export", "kueue", "--kubeconfig", str(path)], timeout=20))
    assert f"token file {token_file}" in line and "refused" in line, line


BEARER = """
import os, sys
from nodetopo.kube.errors import CredentialError
from nodetopo.kube.transport import BearerToken
try:
    BearerToken(None, "/dev/zero")()
except CredentialError as e:
    print("refused:", e)
token = sys.argv[1]
with open(token, "w") as f:
    f.write("good\\n")
bearer = BearerToken(None, token)
print("first:", bearer())
os.unlink(token)
os.mkfifo(token)  # a rotation gone wrong: the last token read is kept
print("then:", bearer())
"""


def test_bearer_token_refuses_a_device_and_keeps_the_last_good_token(tmp_path: Path) -> None:
    """In a child under the memory limit: before the fix, the device was read to a MemoryError and
    the FIFO's open waited for a writer."""
    done = subprocess.run(
        [sys.executable, "-c", BEARER, str(tmp_path / "token")],
        capture_output=True,
        text=True,
        timeout=30,
        preexec_fn=_limit_memory,
    )
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("refused: token file /dev/zero") and "a character device" in lines[0], lines
    assert lines[1:] == ["first: Bearer good", "then: Bearer good"], lines


@pytest.mark.parametrize("field", ["certificate-authority", "client-certificate"])
def test_a_device_as_a_certificate_file_is_one_line(tmp_path: Path, fifo: Path, field: str) -> None:
    """Was: OpenSSL reading /dev/zero line by line for ever (a hang at 100% CPU)."""
    cluster: dict[str, Any] = {"server": f"https://127.0.0.1:{closed_port()}"}
    user: dict[str, Any] = {"token": SECRET}
    if field == "certificate-authority":
        cluster[field] = "/dev/zero"
    else:
        user.update({"client-certificate": str(fifo), "client-key": "/dev/zero"})
    path = kubeconfig(tmp_path, cluster, user)
    line = one_line_error(run(["export", "kueue", "--kubeconfig", str(path)], timeout=20))
    assert "refused" in line and ("a character device" in line or "a FIFO" in line), line


# ---- exec plugins -------------------------------------------------------------------------------


def _plugin(tmp_path: Path, script: str) -> Path:
    path = tmp_path / "plugin"
    path.write_text(f"#!{sys.executable}\n" + textwrap.dedent(script))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_an_exec_plugin_printing_a_gigabyte_is_stopped_at_the_limit(tmp_path: Path) -> None:
    """Was: the whole output held in memory (1 GB), then refused as not JSON."""
    plugin = _plugin(
        tmp_path,
        """
        import sys
        block = b"x" * (1 << 20)
        for _ in range(1024):
            sys.stdout.buffer.write(block)
        """,
    )
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin)}}
    path = kubeconfig(tmp_path, None, user)
    line = one_line_error(run(["export", "kueue", "--kubeconfig", str(path)], timeout=60))
    assert f"more than {EXEC_OUTPUT_LIMIT} bytes" in line, line


def test_an_exec_plugin_printing_nested_json_is_one_error(tmp_path: Path) -> None:
    plugin = _plugin(tmp_path, "print('[' * 200000)\n")
    body = {"apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin)}
    exec_plugin = parse_exec_plugin(body, "k")
    assert exec_plugin is not None
    with pytest.raises(CredentialError, match="not JSON"):
        ExecCredentials(exec_plugin, server="https://127.0.0.1:1").get()


# ---- the probe's files ---------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["/dev/zero", "fifo"])
def test_the_probe_refuses_a_device_or_fifo_annotations_file(fifo: Path, where: str) -> None:
    """Was: a FIFO hung the probe (every GPU pod's init container) at its open."""
    path = "/dev/zero" if where == "/dev/zero" else str(fifo)
    done = run(
        ["probe", "--annotations-file", path, "--no-event", "--nodetopology", "/dev/null", "--root", "/"],
        timeout=60,
    )
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert ("a FIFO" if where == "fifo" else "a character device") in done.stdout, done.stdout[-3000:]


def test_the_probe_refuses_a_device_as_nodetopology_file() -> None:
    done = run(["probe", "--no-event", "--nodetopology", "/dev/zero", "--root", "/"], timeout=60)
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "--nodetopology /dev/zero" in done.stdout and "a character device" in done.stdout, done.stdout


# ---- credentials in the server URL --------------------------------------------------------------


def test_redact_url_hides_every_userinfo() -> None:
    assert redact_url("https://admin:pw@10.0.0.1:6443/p") == "https://***@10.0.0.1:6443/p"
    assert redact_url("admin:pw@10.0.0.1:6443") == "***@10.0.0.1:6443"
    assert redact_url("https://10.0.0.1:6443") == "https://10.0.0.1:6443"
    assert redact_url("https://a@b@host") == "https://***@host"


def test_userinfo_in_the_server_is_basic_auth_and_never_shown(tmp_path: Path) -> None:
    cluster = {"server": f"https://admin:{PASSWORD}@127.0.0.1:{closed_port()}"}
    path = kubeconfig(tmp_path, cluster, {})
    access = cluster_access(str(path))
    assert PASSWORD not in access.server and PASSWORD not in repr(access)
    assert access.username == "admin" and access.password == PASSWORD
    assert access.headers()["Authorization"].startswith("Basic ")
    assert PASSWORD not in str(KubeConnection(access).access)
    for command in (["export", "kueue"], ["ray", "--node-name", "n1"]):
        line = one_line_error(run([*command, "--kubeconfig", str(path)]))
        assert "cannot reach the API server" in line and PASSWORD not in line, line
    done = run(["probe", "--kubeconfig", str(path), "--node-name", "n1", "--no-event", "--root", "/"])
    assert "cannot reach the API server" in done.stdout, done.stdout
    assert PASSWORD not in done.stdout + done.stderr


def test_the_user_fields_win_over_userinfo(tmp_path: Path) -> None:
    cluster = {"server": f"https://admin:{PASSWORD}@h:6443"}
    path = kubeconfig(tmp_path, cluster, {"username": "jane", "password": "theirs"})
    access = cluster_access(str(path))
    assert (access.username, access.password, access.server) == ("jane", "theirs", "https://h:6443")


def test_a_proxy_url_with_a_password_is_not_shown(tmp_path: Path) -> None:
    cluster = {"server": "https://h:6443", "proxy-url": f"socks5://u:{PASSWORD}@p:1080"}
    with pytest.raises(KubeConfigError) as info:
        cluster_access(str(kubeconfig(tmp_path, cluster)))
    assert PASSWORD not in str(info.value)
    ok = cluster_access(str(kubeconfig(tmp_path, {**cluster, "proxy-url": f"http://u:{PASSWORD}@p:3128"})))
    assert PASSWORD not in repr(ok)


def test_kubeconfig_documents_written_by_yaml_stay_readable(tmp_path: Path) -> None:
    """The bounded read takes an ordinary kubeconfig as before (a regression guard)."""
    path = kubeconfig(tmp_path)
    assert yaml.safe_load(path.read_text())["current-context"] == "main"
    assert cluster_access(str(path)).token == SECRET
