"""A real ``nodetopo extender`` process on loopback, fed by a minimal list/watch API server.

The API side serves fixed NodeTopology objects and no pods: a list answers at once, a watch stays
open without events until the test ends. It is enough for the extender's reflectors to sync, so
the tests exercise the real CLI, server and cache in their own process, with their own stderr and
their own memory (``peak_rss``), as a pod would run them.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


class FakeApi:
    """Serves ``GET`` lists and watches of NodeTopology objects (``topologies``) and of pods (none)."""

    def __init__(self, topologies: Sequence[dict[str, Any]]) -> None:
        self.topologies = list(topologies)
        self.stop = threading.Event()
        #: (status, message): every request is answered with that metav1.Status (an API in trouble)
        self.failing: tuple[int, str] | None = None
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def do_GET(self) -> None:
                if api.failing is not None:
                    code, message = api.failing
                    status = {"kind": "Status", "status": "Failure", "message": message, "code": code}
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.end_headers()
                    self.wfile.write(json.dumps(status).encode())
                    return
                items = self.topologies() if "nodetopologies" in self.path else []
                if "watch=true" in self.path or "watch=True" in self.path:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.end_headers()
                    self.wfile.flush()
                    while not api.stop.wait(0.2):
                        pass
                    return
                body = json.dumps({"items": items, "metadata": {"resourceVersion": "1"}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def topologies(self) -> list[dict[str, Any]]:
                return api.topologies

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def kubeconfig(self, path: Path) -> Path:
        port = self.server.server_address[1]
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                    "users": [{"name": "u", "user": {"token": "test"}}],
                    "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                    "current-context": "x",
                }
            )
        )
        return path

    def __enter__(self) -> FakeApi:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ExtenderProcess:
    """``python -m nodetopo extender`` on ``127.0.0.1:port``; ``stderr`` is collected to a file."""

    def __init__(
        self, proc: subprocess.Popen[bytes], port: int, stderr: Path, scheme: str, api: FakeApi
    ) -> None:
        self.api = api  #: the API it lists and watches
        self.proc = proc
        self.port = port
        self.stderr_path = stderr
        self.scheme = scheme

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def peak_rss(self) -> int:
        """The process's peak resident memory (VmHWM), in bytes."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmHWM")

    def rss(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS")

    def reset_peak(self) -> None:
        Path(f"/proc/{self.proc.pid}/clear_refs").write_text("5")


@contextlib.contextmanager
def run_extender(
    tmp_path: Path, topologies: Sequence[dict[str, Any]], *extra: str, wait_ready: bool = True
) -> Iterator[ExtenderProcess]:
    """Start the fake API and the extender; stop both (by PID) afterwards."""
    with FakeApi(topologies) as api:
        kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
        port = free_port()
        stderr = tmp_path / "extender.stderr"
        scheme = "https" if any(a.startswith("--tls-cert-file") for a in extra) else "http"
        with stderr.open("wb") as err:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "nodetopo",
                    "extender",
                    f"--listen=127.0.0.1:{port}",
                    f"--kubeconfig={kubeconfig}",
                    "--log-level=info",
                    *extra,
                ],
                stdout=subprocess.DEVNULL,
                stderr=err,
                env={**os.environ, "PYTHONPATH": str(REPO)},
                cwd=REPO,
            )
        process = ExtenderProcess(proc, port, stderr, scheme, api)
        try:
            if wait_ready:
                _wait_ready(process)
            yield process
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def _wait_ready(process: ExtenderProcess, timeout: float = 30.0) -> None:
    import ssl

    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.proc.poll() is None, f"extender exited {process.proc.returncode}: {process.stderr}"
        try:
            url = f"{process.scheme}://127.0.0.1:{process.port}/readyz"
            with urllib.request.urlopen(url, timeout=2, context=context) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)
    raise AssertionError(f"extender not ready after {timeout}s: {process.stderr}")
