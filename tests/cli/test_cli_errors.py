"""Bad input to the CLI is one clear line on stderr and an exit code, never a traceback (issue 17).

Each case runs the real ``nodetopo`` in a subprocess, bounded in time. (The agent's own cases, config
file and port, are in tests/agent/test_agent_robustness.py.)
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import BUNDLES, REPO

BUNDLE = BUNDLES / "dgx-h100"


def nodetopo(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nodetopo", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
        check=False,
    )


def one_line(result: subprocess.CompletedProcess[str], code: int, *words: str) -> None:
    err = result.stderr.strip()
    assert result.returncode == code, (result.returncode, err)
    assert "Traceback" not in err, err
    assert len(err.splitlines()) == 1, err
    for word in words:
        assert word in err, err


# ---- nodetopo ray --nodetopology ------------------------------------------------------------------


def test_ray_with_a_missing_file(tmp_path: Path) -> None:
    one_line(
        nodetopo("ray", "--nodetopology", str(tmp_path / "missing.json")), 2, "missing.json", "cannot read"
    )


@pytest.mark.parametrize(
    ("content", "word"),
    [
        (b"kind: NodeTopology\nstatus: [\n", "not JSON or YAML"),
        (b'{"kind": "NodeTopology", "status": {"gpus": "\xff\xfe"}}', "not UTF-8"),
        (b"[1, 2, 3]\n", "not a NodeTopology object"),
        (b"", "not a NodeTopology object"),
        (
            json.dumps({"kind": "NodeTopology", "metadata": {"name": "n"}, "status": {"gpus": "x"}}).encode(),
            "usable",
        ),
        (
            json.dumps(
                {"kind": "NodeTopology", "metadata": 5, "status": {"gpus": [{"index": "a"}]}}
            ).encode(),
            "usable",
        ),
    ],
    ids=["bad-yaml", "not-utf8", "a-list", "empty", "gpus-a-string", "gpu-index-a-string"],
)
def test_ray_with_a_malformed_file(tmp_path: Path, content: bytes, word: str) -> None:
    path = tmp_path / "ntopo.json"
    path.write_bytes(content)
    one_line(nodetopo("ray", "--nodetopology", str(path)), 2, word)


def test_ray_with_a_fifo_does_not_hang(tmp_path: Path) -> None:
    fifo = tmp_path / "ntopo.fifo"
    os.mkfifo(fifo)
    started = time.monotonic()
    one_line(nodetopo("ray", "--nodetopology", str(fifo), timeout=30), 2, "not a regular file")
    assert time.monotonic() - started < 25


def test_ray_writes_into_an_unwritable_place(tmp_path: Path) -> None:
    body = nodetopo("discover", "--from", str(BUNDLE), "-o", "json").stdout
    path = tmp_path / "ntopo.json"
    path.write_text(body)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    one_line(nodetopo("ray", "--nodetopology", str(path), "--labels-file", str(blocker / "labels.yaml")), 1)


# ---- nodetopo extender ------------------------------------------------------------------------------


@pytest.mark.parametrize("listen", ["localhost", "nohost.invalid:8888", "127.0.0.1:99999", "127.0.0.1:http"])
def test_extender_with_a_bad_listen_address(listen: str) -> None:
    one_line(nodetopo("extender", f"--listen={listen}"), 2, "--listen")


def test_extender_on_a_busy_port() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        one_line(nodetopo("extender", f"--listen=127.0.0.1:{port}"), 1, "cannot listen", str(port))


def test_extender_without_a_kubeconfig(tmp_path: Path) -> None:
    env = {"KUBECONFIG": str(tmp_path / "none"), "HOME": str(tmp_path), "KUBERNETES_SERVICE_HOST": ""}
    result = nodetopo("extender", "--listen=127.0.0.1:0", f"--kubeconfig={tmp_path / 'none'}", env=env)
    one_line(result, 1, "Kubernetes configuration")


@pytest.mark.parametrize(
    ("flags", "word"),
    [
        (("--tls-cert-file=/nonexistent.crt", "--tls-private-key-file=/nonexistent.key"), "TLS"),
        (("--tls-cert-file=/nonexistent.crt",), "go together"),
        (("--memory-budget-bytes=1000",), "memory_budget_bytes"),
        (("--request-timeout=nan",), "request_timeout_s"),
        (("--max-connections=0",), "max_connections"),
    ],
)
def test_extender_with_unusable_settings(flags: tuple[str, ...], word: str) -> None:
    one_line(nodetopo("extender", "--listen=127.0.0.1:0", *flags), 2, word)


# ---- the shared flags and commands ------------------------------------------------------------------


@pytest.mark.parametrize("command", [("discover", "--from", str(BUNDLE)), ("ray", "--from", str(BUNDLE))])
def test_an_invalid_log_level_from_the_environment(command: tuple[str, ...]) -> None:
    one_line(nodetopo(*command, env={"NODETOPO_LOG_LEVEL": "LOUD"}), 2, "NODETOPO_LOG_LEVEL", "LOUD")
    one_line(nodetopo(*command, env={"NODETOPO_LOG_FORMAT": "xml"}), 2, "NODETOPO_LOG_FORMAT")


def test_a_log_level_from_the_environment_is_case_insensitive() -> None:
    result = nodetopo("discover", "--from", str(BUNDLE), env={"NODETOPO_LOG_LEVEL": "ERROR"})
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("value", ["-1", "0", "nan", "inf", "soon"])
@pytest.mark.parametrize("command", ["discover", "capture", "publish"])
def test_a_bad_command_timeout_is_refused(command: str, value: str, tmp_path: Path) -> None:
    args = [command, f"--command-timeout={value}"]
    args += [str(tmp_path / "bundle")] if command == "capture" else []
    args += ["--node-name=n"] if command == "publish" else []
    result = nodetopo(*args)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "--command-timeout" in result.stderr


def test_ray_wait_must_be_a_finite_number() -> None:
    result = nodetopo("ray", "--node-name=n", "--wait=nan")
    assert result.returncode == 2 and "--wait" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("where", ["below-a-file", "proc", "tar-in-proc"])
def test_capture_into_an_unwritable_path(tmp_path: Path, where: str) -> None:
    tar = ["--tar"] if where.startswith("tar") else []
    if where == "below-a-file":
        blocker = tmp_path / "a-file"
        blocker.write_text("")
        dest = blocker / "bundle"
    else:
        dest = Path("/proc/nodetopo-bundle")  # not writable even for root
    result = nodetopo("capture", str(dest), *tar, "--no-nvml", "--command-timeout=5")
    one_line(result, 2, str(dest), "cannot write")
