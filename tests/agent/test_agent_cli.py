"""``nodetopo agent`` end to end as a process: --once --dry-run output, SIGTERM, the HTTP port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from agent.support import DGX_H100
from nodetopo.cli import main

REPO = Path(__file__).resolve().parents[2]


def test_once_dry_run_prints_what_would_be_applied(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["agent", "--once", "--dry-run", "--from", str(DGX_H100), "--node-name", "gpu-7"])
    assert code == 0
    documents = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    kinds = [d["kind"] for d in documents]
    assert kinds == ["NodeTopology", "Node"]
    topology, node = documents
    assert topology["metadata"]["name"] == "gpu-7" and topology["status"]["summary"]["gpuCount"] == 8
    assert node["metadata"]["name"] == "gpu-7"
    assert all(k.startswith("nodetopo.io/") for k in node["metadata"]["labels"])


def test_bad_setting_exits_2(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    monkeypatch.delenv("NODETOPO_NODE_NAME", raising=False)
    assert main(["agent", "--once", "--from", str(DGX_H100)]) == 2
    assert "node_name is required" in capsys.readouterr().err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return 0


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


@pytest.mark.slow
def test_process_serves_health_and_exits_0_on_sigterm(tmp_path: Path) -> None:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("NODETOPO_")}
    env["NODE_NAME"] = "gpu-9"
    config = tmp_path / "agent.yaml"
    config.write_text(f"listen: 127.0.0.1:{port}\nstart_delay_max_seconds: 0\nudev: false\n")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "nodetopo",
            "agent",
            "--dry-run",
            "--from",
            str(DGX_H100),
            "--config",
            str(config),
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while _get(f"http://127.0.0.1:{port}/readyz") != 200:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "never ready"
            time.sleep(0.1)
        assert _get(f"http://127.0.0.1:{port}/healthz") == 200
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            assert b"nodetopo_gpus 8.0" in r.read()
        rss = _rss_kib(proc.pid)
        print(f"agent RSS after the first cycle (dry run): {rss / 1024:.1f} MiB")
        assert 0 < rss < 200 * 1024
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "SIGTERM" in err and "nothing removed" in err
    assert out.count("kind: NodeTopology") == 1
