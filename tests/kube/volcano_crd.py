"""Volcano's HyperNode CRD, generated from the Go types of its API module.

``volcano.sh/apis`` (the module Volcano's clients import; tests/cluster-kueue/go.mod requires it)
holds the HyperNode types with their kubebuilder markers but not the CRD YAML: the YAML lives in
``volcano.sh/volcano`` (config/crd/volcano/bases/), which the Go module proxy does not serve. So the
CRD is generated here the way Volcano generates it, with controller-gen over the module's
``pkg/apis/topology/v1alpha1`` types, both fetched through the Go module cache; nothing is committed.
The generated file is cached under ~/.cache/nodetopo/ by module and controller-gen version.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from helpers import GoModuleError, go_module_dir, required_version

from .cluster import LocalCluster
from .kueue import MODULE_DIR as KUEUE_MODULE_DIR

APIS = "volcano.sh/apis"
CONTROLLER_GEN = "sigs.k8s.io/controller-tools/cmd/controller-gen@v0.17.2"
CRD_NAME = "hypernodes.topology.volcano.sh"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "nodetopo"


def apis_version() -> str:
    version = required_version(KUEUE_MODULE_DIR / "go.mod", APIS)
    if version is None:
        raise AssertionError(f"tests/cluster-kueue/go.mod does not require {APIS}")
    return version


def hypernode_crd() -> Path:
    if shutil.which("go") is None:
        pytest.fail("Go is needed to download Volcano's API module and generate its CRD", pytrace=False)
    version = apis_version()
    cached = CACHE / f"volcano-hypernodes-{version}-{CONTROLLER_GEN.rsplit('@', 1)[1]}.yaml"
    if cached.is_file():
        return cached
    try:
        module = go_module_dir(APIS, version, KUEUE_MODULE_DIR)
    except GoModuleError as e:
        pytest.fail(str(e))
    with tempfile.TemporaryDirectory() as out:
        done = subprocess.run(
            [
                "go",
                "run",
                CONTROLLER_GEN,
                "crd",
                "paths=./pkg/apis/topology/v1alpha1/...",
                f"output:crd:dir={out}",
            ],
            capture_output=True,
            text=True,
            timeout=1200,
            check=False,
            cwd=module,
        )
        generated = Path(out) / "topology.volcano.sh_hypernodes.yaml"
        if done.returncode != 0 or not generated.is_file():
            pytest.fail(f"controller-gen over {APIS}@{version} failed: {done.stderr[-1000:]}", pytrace=False)
        CACHE.mkdir(parents=True, exist_ok=True)
        partial = cached.with_suffix(".part")
        shutil.copyfile(generated, partial)
        partial.replace(cached)
    return cached


def install_hypernode_crd(cluster: LocalCluster) -> None:
    """Volcano's HyperNode CRD served by ``cluster``, Established."""
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(hypernode_crd()))
    deadline = time.monotonic() + 60
    while True:
        done = cluster.kubectl("get", "crd", CRD_NAME, "-o", "json", check=False)
        conditions = json.loads(done.stdout).get("status", {}).get("conditions") or [] if done.stdout else []
        if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
            return
        if time.monotonic() > deadline:
            pytest.fail(f"CRD {CRD_NAME} not Established after 60s: {done.stdout[-500:]}")
        time.sleep(0.5)
