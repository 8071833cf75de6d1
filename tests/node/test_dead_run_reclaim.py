"""A test run killed before its node's teardown does not fail every later run on the machine.

Seen on this project's CI machine: a run killed mid-session (its session ended) left the CNI bridge
``ntopo0``, a pod's network namespace in /run/netns and the kubelet's mounts under its pytest base
temp; the next ``make test`` on the machine ended with 30 errors, every node test failing at setup
with "network interface ntopo0 already exists (another test node running?)". The machine's node
lock says no other run has a node, so the node fixture reclaims a dead run's leftovers first
(``reclaim_after_a_dead_run``). Here a dead run is made as it is left (a node program whose command
line names another run's base temp, a bind mount under that run's ``node0``, a CNI namespace no
process is in, a bridge), under names no real node uses, and the reclaim removes exactly those.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from .node import NETNS_DIR, _mount_points_under, reclaim_after_a_dead_run

pytestmark = [pytest.mark.k8s, pytest.mark.node]


def _spawn(name: str, *args: str) -> subprocess.Popen[bytes]:
    # argv[0] is the node program's name; the process itself sleeps
    sleeper = "import time; time.sleep(300)"
    script = f'exec -a {name} "{sys.executable}" -c "{sleeper}" "$@"'
    return subprocess.Popen(["bash", "-c", script, "x", *args])


def test_a_dead_runs_bridge_mounts_namespace_and_programs_are_reclaimed(
    tmp_path: Path, machine_lock: None
) -> None:
    temp_root = tmp_path / "pytest-of-root"
    dead = temp_root / "pytest-7" / "node0"
    own = temp_root / "pytest-9"
    kubelet_root = dead / "kubelet"
    kubelet_root.mkdir(parents=True)
    (own / "node0").mkdir(parents=True)
    bridge = f"ntd{uuid.uuid4().hex[:8]}"
    netns = f"cni-{uuid.uuid4()}"
    subprocess.run(["mount", "--bind", str(kubelet_root), str(kubelet_root)], check=True)
    subprocess.run(["ip", "link", "add", bridge, "type", "bridge"], check=True)
    # A namespace bound onto a file in /run/netns, as containerd binds a sandbox's, with no process
    # in it. Not `ip netns add`: iproute2 bind-mounts /run/netns onto itself first, and a sandbox of
    # the node that is up (bound before) could then never be unlinked again (EBUSY), its pod stuck
    # Terminating and its namespace undeletable for the rest of the session.
    made_netns_dir = not NETNS_DIR.exists()  # a machine without a node up has none: leave it so
    NETNS_DIR.mkdir(exist_ok=True)
    (NETNS_DIR / netns).touch()
    subprocess.run(["unshare", f"--net={NETNS_DIR / netns}", "true"], check=True)
    orphan = _spawn("kubelet", f"--root-dir={kubelet_root}")
    ours = _spawn("containerd", "--config", str(own / "node0" / "containerd.toml"))
    unrelated = _spawn("containerd", "--config", "/etc/containerd/config.toml")
    try:
        time.sleep(0.3)
        reclaimed = reclaim_after_a_dead_run(bridge=bridge, temp_root=temp_root, own=own)
        assert f"interface {bridge}" in reclaimed
        assert f"mount {kubelet_root}" in reclaimed
        assert f"netns {netns}" in reclaimed
        assert f"process {orphan.pid} (kubelet)" in reclaimed
        assert orphan.wait(timeout=10) == -9
        assert not Path(f"/sys/class/net/{bridge}").exists()
        assert _mount_points_under(dead) == []
        assert not (NETNS_DIR / netns).exists()
        # this run's own programs and a node program of no test run are left alone
        assert ours.poll() is None and unrelated.poll() is None
        assert not any(f"({ours.pid}" in r or f" {unrelated.pid} " in r for r in reclaimed)
        # nothing left: a second reclaim finds nothing of that run
        assert [
            r
            for r in reclaim_after_a_dead_run(bridge=bridge, temp_root=temp_root, own=own)
            if bridge in r or str(dead) in r or netns in r
        ] == []
    finally:
        for p in (orphan, ours, unrelated):
            if p.poll() is None:
                p.kill()
            p.wait()
        subprocess.run(["umount", "-l", str(kubelet_root)], capture_output=True, check=False)
        subprocess.run(["ip", "link", "del", bridge], capture_output=True, check=False)
        subprocess.run(["ip", "netns", "del", netns], capture_output=True, check=False)
        if made_netns_dir:
            with contextlib.suppress(OSError):
                NETNS_DIR.rmdir()
