"""Fixtures for tests on a real node (``tests/node/``): kubelet + containerd + the image built here.

This directory has its own control plane (etcd + kube-apiserver from tests/cluster/build.sh), so a
real kubelet, kube-controller-manager (every controller) and kube-scheduler never act on the
objects of ``tests/kube``. Mark test modules ``pytestmark = [pytest.mark.k8s, pytest.mark.node]`` (the unit
suite, ``-m "not k8s"``, leaves them out). When this machine
cannot host a node (not root, no containerd, ...) or a part does not start, the tests FAIL with
what is missing: never a skip.

Session fixtures
----------------
``node_cluster``  the ``LocalCluster`` (kubectl, request, audit log), its serving certificate also
                  valid for the pod network's gateway.
``node``          the ``LocalNode`` (containerd + kubelet registered as the host's name, Ready).
``image_archive`` the nodetopo image built by ``image/build_oci.py`` (the documented command): a
                  dict with ``name``, ``archive``, ``manifest_digest``, ``layers``,
                  ``compressed_bytes``, ``seconds``, ``archive_bytes``. Needs no node.
``node_image``    ``image_archive`` imported into the node's containerd (+ ``import_seconds``).
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kube.cluster import ClusterError, LocalCluster, build_binaries

from .node import GATEWAY, REPO, LocalNode, NodeError, reclaim_after_a_dead_run

TIMINGS: dict[str, float] = {}
RECLAIMED: list[str] = []

# One real node per machine: it registers under the host's name and owns the CNI bridge,
# /var/lib/kubelet and the pod cgroups. Test runs from two checkouts wait for each other on this lock,
# taken once collection is done and before the first test starts, so the wait never counts against a
# test's timeout; the process holds it until it exits.
MACHINE_LOCK = Path(os.environ.get("NODETOPO_NODE_LOCK", "/tmp/nodetopo-real-node.lock"))
_HELD: list[Any] = []


def _take_machine_lock() -> None:
    if _HELD:
        return
    handle = MACHINE_LOCK.open("a")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"\nwaiting for {MACHINE_LOCK}: another test run holds the real node", flush=True)
        started = time.monotonic()
        fcntl.flock(handle, fcntl.LOCK_EX)
        TIMINGS["waited for the machine's node"] = round(time.monotonic() - started, 2)
    _HELD.append(handle)


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.option.collectonly:
        return
    here = Path(__file__).resolve().parent
    if any(here in Path(str(item.path)).resolve().parents for item in session.items):
        _take_machine_lock()


@pytest.fixture(scope="session")
def machine_lock() -> None:
    """The machine's node lock (normally taken at the end of collection; here when it was not)."""
    _take_machine_lock()


@pytest.fixture(scope="session")
def node_cluster(machine_lock: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    try:
        bin_dir = build_binaries()
    except ClusterError as e:
        pytest.fail(f"the test control plane could not be built: {e}", pytrace=False)
    if not (bin_dir / "kubelet").is_file():
        pytest.fail(f"{bin_dir / 'kubelet'} is missing: tests/cluster/build.sh builds it", pytrace=False)
    local = LocalCluster(bin_dir, workdir=tmp_path_factory.mktemp("node-cluster"), extra_sans=(GATEWAY,))
    started = time.monotonic()
    try:
        local.start()
    except ClusterError as e:
        pytest.fail(f"the test control plane did not start: {e}", pytrace=False)
    TIMINGS["control plane"] = round(time.monotonic() - started, 2)
    try:
        yield local
    finally:
        local.stop()


@pytest.fixture(scope="session")
def node(node_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalNode]:
    # a short path: unix socket paths are limited to 108 bytes
    workdir = Path(tmp_path_factory.mktemp("node"))
    # the machine lock is held: anything of a node still here is a killed run's, not a live one's
    reclaimed = reclaim_after_a_dead_run(own=tmp_path_factory.getbasetemp())
    RECLAIMED.extend(reclaimed)  # said in the session's summary
    local = LocalNode(node_cluster, workdir)
    started = time.monotonic()
    try:
        local.start()
    except (NodeError, ClusterError) as e:
        pytest.fail(f"the test node did not start: {e}", pytrace=False)
    TIMINGS["node"] = round(time.monotonic() - started, 2)
    TIMINGS.update({f"node: {k}": v for k, v in local.timings.items()})
    try:
        yield local
    finally:
        stopped = time.monotonic()
        local.stop()
        TIMINGS["node teardown"] = round(time.monotonic() - stopped, 2)
        leftovers = local.leftovers()
        if leftovers:
            pytest.fail(f"the test node left behind: {leftovers}", pytrace=False)


@pytest.fixture(scope="session")
def image_archive(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The image, built exactly as docs/deploy.md documents (``python3 image/build_oci.py --out ...``):
    build_oci.py's summary plus ``archive_bytes``."""
    archive = Path(tmp_path_factory.mktemp("image")) / "nodetopo.oci.tar"
    done = subprocess.run(
        [sys.executable, str(REPO / "image" / "build_oci.py"), "--out", str(archive)],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"image/build_oci.py failed ({done.returncode}):\n{done.stderr[-4000:]}", pytrace=False)
    summary: dict[str, Any] = json.loads(done.stdout)
    summary["archive_bytes"] = archive.stat().st_size
    TIMINGS["image build"] = float(summary["seconds"])
    return summary


@pytest.fixture(scope="session")
def node_image(node: LocalNode, image_archive: dict[str, Any]) -> dict[str, Any]:
    """``image_archive`` imported into the node's containerd (``ctr -n k8s.io images import``)."""
    started = time.monotonic()
    try:
        node.import_image(Path(image_archive["archive"]))
    except NodeError as e:
        pytest.fail(f"ctr images import failed: {e}", pytrace=False)
    TIMINGS["image import"] = round(time.monotonic() - started, 2)
    return {**image_archive, "import_seconds": TIMINGS["image import"]}


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if RECLAIMED:
        terminalreporter.write_line("reclaimed from a killed run: " + ", ".join(RECLAIMED))
    if TIMINGS:
        terminalreporter.write_line(
            "real node timings (s): " + ", ".join(f"{k} {v}" for k, v in TIMINGS.items())
        )
