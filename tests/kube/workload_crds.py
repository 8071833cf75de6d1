"""The CRDs of the workloads admission judges as a whole: RayCluster and RayJob from the KubeRay module
(``kuberay.apply_crds``, the version tests/cluster-kuberay builds), JobSet from its own module at the
version Kueue's module requires (tests/cluster-kueue/go.mod), fetched with ``go mod download`` into the
Go module cache like them: nothing of either is committed here, and no operator runs.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from helpers import GoModuleError, go_module_dir, required_version

from .cluster import LocalCluster
from .kuberay import KubeRayError, apply_crds
from .kueue import MODULE_DIR as KUEUE_MODULE_DIR

JOBSET = "sigs.k8s.io/jobset"


def jobset_version() -> str:
    version = required_version(KUEUE_MODULE_DIR / "go.mod", JOBSET)
    if version is None:
        raise AssertionError(f"tests/cluster-kueue/go.mod does not require {JOBSET}")
    return version


def jobset_crd() -> Path:
    if shutil.which("go") is None:
        pytest.fail("Go is needed to download the JobSet module (its CRD)", pytrace=False)
    version = jobset_version()
    try:
        module_dir = go_module_dir(JOBSET, version, KUEUE_MODULE_DIR)
    except GoModuleError as e:
        pytest.fail(str(e))
    return module_dir / "config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml"


def install_workload_crds(cluster: LocalCluster) -> None:
    """RayCluster, RayJob (and RayService) and JobSet served by ``cluster``, Established."""
    try:
        apply_crds(cluster)
    except KubeRayError as e:
        pytest.fail(str(e), pytrace=False)
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(jobset_crd()))
    deadline = time.monotonic() + 60
    while True:
        done = cluster.kubectl("get", "crd", "jobsets.jobset.x-k8s.io", "-o", "json", check=False)
        conditions = json.loads(done.stdout).get("status", {}).get("conditions") or [] if done.stdout else []
        if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
            return
        if time.monotonic() > deadline:
            pytest.fail(f"CRD jobsets.jobset.x-k8s.io not Established after 60s: {done.stdout[-500:]}")
        time.sleep(0.5)
