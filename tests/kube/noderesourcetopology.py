"""The SIG's NodeResourceTopology for the tests: its CRD from the API's Go module, and kube-scheduler with
the scheduler-plugins NodeResourceTopologyMatch plugin built in tests/cluster-nrt.

Both modules come from the Go module cache (``go mod download``; nothing of them is committed here): the
CRD from ``github.com/k8stopologyawareschedwg/noderesourcetopology-api`` at the version
tests/cluster-nrt/go.mod requires (the one the plugin is built with), the scheduler from
``tests/cluster-nrt/build.sh`` into a cache outside the repository.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import GoModuleError, go_module_dir, required_version

HERE = Path(__file__).resolve().parent
MODULE_DIR = HERE.parent / "cluster-nrt"
API_MODULE = "github.com/k8stopologyawareschedwg/noderesourcetopology-api"


def _fail(message: str) -> None:
    # A missing plugin is a missing real part: fail, never skip, under CI.
    if os.environ.get("CI") == "true":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def nrt_crd() -> Path:
    """manifests/crd.yaml of the NodeResourceTopology API module (downloaded on first use)."""
    if shutil.which("go") is None:
        _fail("Go is needed to download the NodeResourceTopology API module (its CRD)")
    version = required_version(MODULE_DIR / "go.mod", API_MODULE)
    assert version is not None, f"tests/cluster-nrt/go.mod does not require {API_MODULE}"
    try:
        module_dir = go_module_dir(API_MODULE, version, MODULE_DIR)
    except GoModuleError as e:
        _fail(str(e))
    return module_dir / "manifests" / "crd.yaml"


def build_nrt_scheduler() -> Path:
    """kube-scheduler with NodeResourceTopologyMatch registered (built once, cached outside the repo)."""
    done = subprocess.run(
        [str(MODULE_DIR / "build.sh")], capture_output=True, text=True, timeout=3600, check=False
    )
    if done.returncode != 0:
        _fail(f"tests/cluster-nrt/build.sh failed: {done.stderr[-2000:]}")
    return Path(done.stdout.strip().splitlines()[-1]) / "kube-scheduler-nrt"
