"""Hostile inputs to the Kubernetes client and the files beside it (issue 23): a device, a FIFO or a
huge file where a kubeconfig, a token file, a CA file or the probe's annotations file should be; an
exec plugin that prints a gigabyte; a server URL carrying ``user:password@``. Each must end in one
clear line, within a few seconds and under 600 MB, and never print a credential.

Every command runs in a child process under ``RLIMIT_AS`` = 600 MB, so a read that would hold
a device's endless output fails the test with a MemoryError traceback instead of swapping; every
server is a closed port or a listener on loopback.
"""

from __future__ import annotations

import json
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
from nodetopo.errors import ForbiddenError, TransientError
from nodetopo.kube.config import ClusterAccess, cluster_access
from nodetopo.kube.errors import CredentialError, KubeConfigError, field_conflicts, redact_url, status_message
from nodetopo.kube.exec import EXEC_OUTPUT_LIMIT, ExecCredentials, parse_exec_plugin
from nodetopo.kube.session import ApiSession
from nodetopo.kube.transport import ApiResponse, KubeConnection

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


def test_the_probe_reads_a_deeply_nested_nodetopology_file_as_a_parse_error(tmp_path: Path) -> None:
    """Was: ``--nodetopology F: maximum recursion depth exceeded while decoding a JSON array``
    (json.loads' RecursionError in the report): now the bounded reader's typed refusal."""
    nested = tmp_path / "nt.json"
    nested.write_text('{"kind": "NodeTopology",\n"status": ' + "[" * 60_000 + "]" * 60_000 + "}")
    done = run(["probe", "--no-event", "--nodetopology", str(nested), "--root", "/"], timeout=60)
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    said = f"--nodetopology: {nested}:2: JSON nested deeper than 32 levels"
    assert said in done.stdout and "recursion" not in done.stdout, done.stdout[-3000:]


# ---- the API server's answers ------------------------------------------------------------------


class _Answers(KubeConnection):
    """A connection whose every request is answered ``status`` with ``data`` (nothing is sent)."""

    def __init__(self, status: int, data: bytes) -> None:
        super().__init__(ClusterAccess(server="https://127.0.0.1:1", source="test"))
        self.status, self.data = status, data

    def request(self, method: str, path: str, **kwargs: Any) -> ApiResponse:
        return ApiResponse(status=self.status, reason="", headers={}, data=self.data)


def test_an_api_answer_nested_too_deep_is_a_typed_error_not_a_recursion_error() -> None:
    """Was: ``RecursionError`` out of the session (json.loads of a 200 answer), past every
    ``except PublishError``; the probe's NodeTopology read and the agent's reads alike."""
    deep = ('{"kind": "Node",\n"metadata": ' + "[" * 100_000 + "]" * 100_000 + "}").encode()
    session = ApiSession(_Answers(200, deep))
    with pytest.raises(
        TransientError,
        match=r"^read Node n1: the answer is not JSON \(JSON nested deeper than the decoder recurses\): ",
    ):
        session.read_node("n1")
    with pytest.raises(TransientError, match=r"the answer is not JSON \(JSON nested deeper than"):
        session.read_cluster_object("nodetopo.io", "v1alpha1", "nodetopologies", "n1")


def test_an_error_body_nested_or_huge_is_clipped_not_decoded() -> None:
    """An Event the API server refuses (the probe's, the agent's): its ``metav1.Status`` body is
    read through the bounded reader. Was: a 32 MiB body decoded whole (the message it holds
    allocated again, then clipped to 300 characters)."""
    import tracemalloc

    deep = '{"message":\n' + "[" * 100_000 + "]" * 100_000 + "}"
    session = ApiSession(_Answers(403, deep.encode()))
    with pytest.raises(ForbiddenError) as refused:
        session.create_event("default", {"kind": "Event"})
    assert str(refused.value).startswith('create Event in default: HTTP 403: {"message":'), refused.value
    huge = '{"kind": "Status", "message": "' + "x" * (32 * 2**20) + '"}'
    tracemalloc.start()
    try:
        said = status_message(huge)
        assert field_conflicts(huge) == ()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert said == huge[:500]
    assert peak < 4 * 2**20, f"{peak / 2**20:.1f} MiB to read a 32 MiB error body"
    conflict = json.dumps(
        {
            "kind": "Status",
            "message": "Apply failed with 1 conflict",
            "details": {
                "causes": [
                    {
                        "reason": "FieldManagerConflict",
                        "message": 'conflict with "kubectl-label" using v1',
                        "field": ".metadata.labels.nodetopo.io/numa.count",
                    }
                ]
            },
        }
    )
    assert status_message(conflict) == "Apply failed with 1 conflict"
    assert field_conflicts(conflict) == ((".metadata.labels.nodetopo.io/numa.count", "kubectl-label"),)


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
