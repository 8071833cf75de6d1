"""Kueue for the tests: its CRDs from its Go module, its controller built in tests/cluster-kueue.

The module is fetched with ``go mod download`` into the Go module cache (nothing of Kueue is
committed here); the controller is built by ``tests/cluster-kueue/build.sh`` into a cache outside the
repository, in its own Go module so that the control plane's build cache is never invalidated.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import GoModuleError, go_module_dir, required_version

HERE = Path(__file__).resolve().parent
MODULE_DIR = HERE.parent / "cluster-kueue"


def kueue_version() -> str:
    version = required_version(MODULE_DIR / "go.mod", "sigs.k8s.io/kueue")
    if version is None:
        raise AssertionError("tests/cluster-kueue/go.mod does not require sigs.k8s.io/kueue")
    return version


def _fail(message: str) -> None:
    # A missing Kueue is a missing real part: fail, never skip, under CI.
    if os.environ.get("CI") == "true":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def kueue_source() -> Path:
    """The Kueue module's directory in the Go module cache (downloaded on first use)."""
    if shutil.which("go") is None:
        _fail("Go is needed to download the Kueue module (its CRDs)")
    version = kueue_version()
    try:
        module_dir = go_module_dir("sigs.k8s.io/kueue", version, MODULE_DIR)
    except GoModuleError as e:
        _fail(str(e))
    return module_dir


def kueue_crds(names: tuple[str, ...]) -> list[Path]:
    bases = kueue_source() / "config" / "components" / "crd" / "bases"
    return [bases / f"kueue.x-k8s.io_{name}.yaml" for name in names]


def build_kueue() -> Path:
    """The ``kueue`` controller binary (built once, cached outside the repository)."""
    done = subprocess.run(
        [str(MODULE_DIR / "build.sh")], capture_output=True, text=True, timeout=3600, check=False
    )
    if done.returncode != 0:
        _fail(f"tests/cluster-kueue/build.sh failed: {done.stderr[-2000:]}")
    return Path(done.stdout.strip().splitlines()[-1]) / "kueue"
