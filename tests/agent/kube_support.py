"""Helpers for the agent's tests against the real control plane (``tests/kube/test_agent_*``,
``tests/kube/test_deploy_*``): install ``deploy/``, build an agent on a node-bound token, a TCP
proxy that can take the API server away and give it back."""

from __future__ import annotations

import contextlib
import shutil
import socket
import threading
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
NAMESPACE = "nodetopo"
SERVICE_ACCOUNT = "nodetopo-agent"
AGENT_USER = f"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}"


def kustomize_root(workdir: Path) -> Path:
    """``deploy/`` itself once ``crds/kustomization.yaml`` exists; until then a copy of ``deploy/``
    and ``crds/`` in ``workdir`` with that one file added (kustomize loads no file outside its
    root, so ``deploy/`` references the ``../crds`` directory)."""
    if (REPO / "crds" / "kustomization.yaml").is_file():
        return DEPLOY
    shutil.copytree(REPO / "crds", workdir / "crds", dirs_exist_ok=True)
    shutil.copytree(
        DEPLOY, workdir / "deploy", dirs_exist_ok=True, ignore=shutil.ignore_patterns("extender*")
    )
    (workdir / "crds" / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        "resources:\n  - nodetopology.yaml\n"
    )
    return workdir / "deploy"


def apply_deploy(cluster: Any, workdir: Path, *extra: str) -> str:
    """``kubectl apply -k`` of ``deploy/`` as admin; returns kubectl's stdout."""
    root = kustomize_root(workdir)
    done = cluster.kubectl("apply", "-k", str(root), *extra)
    return str(done.stdout)


class Proxy:
    """A TCP forwarder ``host``:port → the API server that can be switched off (connections
    refused, open ones cut) and on again, to play an API server outage. ``host`` is 127.0.0.1
    unless said (the test node, tests/node/node.py, listens on its bridge's gateway for its pods)."""

    def __init__(self, target: tuple[str, int], host: str = "127.0.0.1") -> None:
        self.host, self.target = host, target
        probe = socket.socket()
        probe.bind((host, 0))
        self.port = int(probe.getsockname()[1])
        probe.close()
        self._listener: socket.socket | None = None
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()

    def start(self) -> Proxy:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.host, self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return self

    def stop(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            sockets, self._open = self._open, []
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in accept()
            listener.close()
        for s in sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=10)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._open += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pipe, args=(a, b), daemon=True).start()


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)
