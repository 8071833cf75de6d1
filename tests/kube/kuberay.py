"""KubeRay for the tests: its CRDs from its Go module, its operator built in tests/cluster-kuberay.

The module (``github.com/ray-project/kuberay/ray-operator``, the version tests/cluster-kuberay/go.mod
requires) is fetched with ``go mod download`` into the Go module cache: nothing of KubeRay is committed
here. ``tests/cluster-kuberay/build.sh`` builds the operator into a cache outside the repository, in its
own Go module so that the control plane's and Kueue's build caches are never invalidated.

``running_operator`` applies the RayCluster, RayJob and RayService CRDs (server-side: each is larger
than the 256 KiB a client-side apply may annotate) and runs the operator against the cluster like the
controller manager: a process of its own, with the admin kubeconfig, leader election off, its metrics
and health endpoints on 127.0.0.1, no webhooks. Its log is ``<workdir>/kuberay-operator.log``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import GoModuleError, go_module_dir, required_version

from .cluster import LocalCluster, free_port

REPO = Path(__file__).resolve().parents[2]

MODULE_DIR = REPO / "tests" / "cluster-kuberay"
MODULE = "github.com/ray-project/kuberay/ray-operator"
#: The CRDs the operator watches (it sets up the RayCluster, RayJob and RayService controllers).
CRDS = ("rayclusters", "rayjobs", "rayservices")


class KubeRayError(RuntimeError):
    """KubeRay could not be fetched, built or started: the tests fail on it, never skip."""


def kuberay_version() -> str:
    version = required_version(MODULE_DIR / "go.mod", MODULE)
    if version is None:
        raise KubeRayError(f"tests/cluster-kuberay/go.mod does not require {MODULE}")
    return version


def kuberay_source() -> Path:
    """The operator module's directory in the Go module cache (downloaded on first use)."""
    if shutil.which("go") is None:
        raise KubeRayError("Go is needed to download the KubeRay module (its CRDs)")
    version = kuberay_version()
    try:
        module_dir = go_module_dir(MODULE, version, MODULE_DIR)
    except GoModuleError as e:
        raise KubeRayError(str(e)) from e
    return module_dir


def kuberay_crds() -> list[Path]:
    bases = kuberay_source() / "config" / "crd" / "bases"
    return [bases / f"ray.io_{name}.yaml" for name in CRDS]


def build_kuberay() -> Path:
    """The operator binary (built once, cached outside the repository)."""
    done = subprocess.run(
        [str(MODULE_DIR / "build.sh")], capture_output=True, text=True, timeout=3600, check=False
    )
    if done.returncode != 0:
        raise KubeRayError(f"tests/cluster-kuberay/build.sh failed: {done.stderr[-2000:]}")
    return Path(done.stdout.strip().splitlines()[-1]) / "kuberay-operator"


def apply_crds(cluster: LocalCluster) -> None:
    for path in kuberay_crds():
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))
    # polled: `kubectl wait` fails at once on a CRD the API server has not given a status yet
    deadline = time.monotonic() + 60
    for name in CRDS:
        while True:
            done = cluster.kubectl("get", "crd", f"{name}.ray.io", "-o", "json", check=False)
            conditions = (
                json.loads(done.stdout).get("status", {}).get("conditions") or [] if done.stdout else []
            )
            if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                break
            if time.monotonic() > deadline:
                raise KubeRayError(f"CRD {name}.ray.io not Established after 60s: {done.stdout[-500:]}")
            time.sleep(0.5)


@contextlib.contextmanager
def running_operator(cluster: LocalCluster, workdir: Path, *, timeout: float = 120) -> Iterator[Path]:
    """The KubeRay operator running against ``cluster`` for the block; yields its log file."""
    try:
        binary = build_kuberay()
        apply_crds(cluster)
    except KubeRayError as e:
        pytest.fail(str(e), pytrace=False)
    log = workdir / "kuberay-operator.log"
    argv = [
        str(binary),
        f"--metrics-addr=127.0.0.1:{free_port()}",
        f"--health-probe-bind-address=127.0.0.1:{free_port()}",
        "--enable-leader-election=false",
        "--log-stdout-encoder=console",
    ]
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
    env.pop("ENABLE_WEBHOOKS", None)
    with log.open("ab") as handle:
        process = subprocess.Popen(
            argv,
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
        )
    try:
        deadline = time.monotonic() + timeout
        while True:
            text = log.read_text(errors="replace")
            if process.poll() is not None:
                pytest.fail(
                    f"the KubeRay operator exited {process.returncode}:\n{text[-4000:]}", pytrace=False
                )
            if any(
                "controllers.RayCluster" in line and "Starting workers" in line for line in text.splitlines()
            ):
                break
            if time.monotonic() > deadline:
                pytest.fail(
                    f"the KubeRay operator did not start in {timeout:.0f}s:\n{text[-4000:]}", pytrace=False
                )
            time.sleep(0.3)
        yield log
    finally:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
