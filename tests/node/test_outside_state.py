"""The node's teardown puts the machine back as it found it, on a fresh machine too (issue 23).

On a machine that never ran the node, ``make test`` ended ``the test node left behind: ['directory
/run/netns']``. containerd creates /run/netns for the node's first sandbox (a plain directory: seen
on this project's CI machine); the live LLDP test (tests/sources), which runs while the session's
node is still up, makes its namespaces with ``ip netns add``, and iproute2 bind-mounts /run/netns
onto itself when it is not a mount point yet; the node's teardown at the end of the session could
not rmdir a mount point, and on every machine that had run the suite once the "before" already
held it. This test makes that fresh machine, whatever this one has been through: in a private
mount namespace (and network namespace, so the teardown's bridge removal touches nothing real)
/run, /var/lib and /var/log are empty tmpfs and /sys is that network namespace's own sysfs (no
cgroups: the teardown's reaping of kubepods cgroups cannot reach a test node another checkout runs
meanwhile). The first pod's traces are made as containerd makes them (a directory, a namespace
bound onto a file in it), iproute2 self-mounts /run/netns for real, and then the node's own
teardown (``LocalNode._clean_outside_state``) and leftover check (``LocalNode.leftovers``) run.
Seen failing before the fix: ``['netns cni-…', 'directory /run/netns']`` left behind (issue 23's
error, and the sandbox's namespace pinned by iproute2's recursive bind mount).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .node import REPO

pytestmark = [pytest.mark.k8s, pytest.mark.node]

SCRIPT = r"""
import ctypes, json, shutil, subprocess, sys, uuid
from pathlib import Path
sys.path[:0] = [sys.argv[1]]
workdir = Path(sys.argv[2])

def run(*argv):
    subprocess.run(argv, check=True, capture_output=True, text=True, timeout=30)

import hoststate

FRESH = ("/run", "/var/lib", "/var/log")
# a fresh machine, as this namespace sees it: each is an empty tmpfs (what this machine has mounted
# below them stays hidden under it, unreachable: hoststate counts only the mounts a path reaches).
# mount(2) itself: util-linux's mount would make /run/mount on the real /run first
libc = ctypes.CDLL(None, use_errno=True)
for directory in FRESH:
    assert libc.mount(b"tmpfs", directory.encode(), b"tmpfs", 0, None) == 0, (directory, ctypes.get_errno())
# and a sysfs of this network namespace: /sys/class/net shows its interfaces only, /sys/fs/cgroup
# is an empty directory (the teardown's kubepods reaping cannot reach another checkout's node)
assert libc.mount(b"sysfs", b"/sys", b"sysfs", 0, None) == 0, ctypes.get_errno()

from node.node import NETNS_DIR, LocalNode

PATHS = [
    "/run/netns", "/run/containerd", "/run/mount", "/var/lib/cni", "/var/lib/kubelet", "/var/log/containers"
]

def first_pod_traces():
    # what a node's first pod leaves on a machine that had none of it, made as containerd makes it:
    # /run/netns (a plain directory), a file there with the sandbox's namespace bound onto it;
    # libcni's cache, the kubelet's dirs, a shim socket dir
    sandbox = NETNS_DIR / f"cni-{uuid.uuid4()}"
    NETNS_DIR.mkdir(exist_ok=True)
    sandbox.touch()
    run("unshare", f"--net={sandbox}", "true")
    FORWARD.write_text("1\n")  # the CNI bridge plugin, for its gateway bridge (this netns's setting)
    Path("/var/lib/cni/results").mkdir(parents=True, exist_ok=True)
    (Path("/var/lib/kubelet/device-plugins")).mkdir(parents=True, exist_ok=True)
    (Path("/var/lib/kubelet/device-plugins") / "kubelet_internal_checkpoint").write_text("{}")
    Path("/var/log/containers").mkdir(parents=True, exist_ok=True)
    Path("/run/containerd/s").mkdir(parents=True, exist_ok=True)
    run("mount", "--bind", "/run/containerd", "/run/containerd")  # util-linux's mount, as the kubelet
    assert hoststate.unmount("/run/containerd")  # runs it: it makes /run/mount

FORWARD = Path("/proc/sys/net/ipv4/ip_forward")

def lldp_test_meanwhile():
    # the live LLDP test while the node is up: iproute2 self-mounts the existing /run/netns
    run("ip", "netns", "add", "lldp-test-h")
    run("ip", "netns", "del", "lldp-test-h")

def one_run(case, prepare=None, during=lldp_test_meanwhile, before_pods=None):
    FORWARD.write_text("0\n")  # a machine with forwarding off
    if prepare:
        prepare()
    node = LocalNode(None, workdir / case)
    node._remember_outside_state()
    if before_pods:
        before_pods()
    first_pod_traces()
    netns_mounts_by_containerd = hoststate.mounts_at(NETNS_DIR)
    if during:
        during()
    traced = {
        "netns mounts by containerd": netns_mounts_by_containerd,
        "netns mounts": hoststate.mounts_at(NETNS_DIR),
        "run/mount made": Path("/run/mount").is_dir(),
        "check before teardown": node.leftovers(),
    }
    node._clean_outside_state()
    return {
        **traced,
        "left behind": node.leftovers(),
        "exists": [p for p in PATHS if Path(p).exists()],
        "netns": sorted(p.name for p in NETNS_DIR.iterdir()) if NETNS_DIR.exists() else None,
        "netns mounts after": hoststate.mounts_at(NETNS_DIR),
        "ip_forward after": FORWARD.read_text().strip(),
    }

results = {"fresh": one_run("fresh")}
print(json.dumps(results))
results["node alone"] = one_run("alone", during=None)
print(json.dumps(results))

def leave_netns_mounted():  # as every earlier run left it: an empty self-mounted /run/netns
    run("ip", "netns", "add", "earlier-run")
    run("ip", "netns", "del", "earlier-run")

results["already there"] = one_run("already", prepare=leave_netns_mounted)
print(json.dumps(results))
while hoststate.mounts_at(NETNS_DIR):  # back to a fresh machine for the last case
    assert hoststate.unmount(NETNS_DIR, lazy=True)
shutil.rmtree(NETNS_DIR)
results["someone else's netns"] = one_run(
    "foreign", during=None, before_pods=lambda: run("ip", "netns", "add", "lldp-test-x")
)
print(json.dumps(results))
"""


def _run_in_a_fresh_namespace(tmp_path: Path) -> dict[str, Any]:
    missing = [tool for tool in ("unshare", "ip", "mount") if shutil.which(tool) is None]
    if os.geteuid() != 0 or missing:
        pytest.fail(f"needs root and {', '.join(missing) or 'util-linux, iproute2'}", pytrace=False)
    done = subprocess.run(
        [
            "unshare",
            "--mount",
            "--net",
            "--propagation",
            "private",
            sys.executable,
            "-c",
            SCRIPT,
            str(REPO / "tests"),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    results: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return results


def test_the_teardown_leaves_a_fresh_machine_fresh(tmp_path: Path) -> None:
    results = _run_in_a_fresh_namespace(tmp_path)
    print(json.dumps(results, indent=1))  # shown when an assertion fails

    fresh = results["fresh"]
    # the teardown undid all of it: nothing left, nothing mounted, no directory made ...
    assert fresh["left behind"] == []
    assert fresh["exists"] == [] and fresh["netns"] is None and fresh["netns mounts after"] == 0
    assert fresh["ip_forward after"] == "0"
    # ... of a state that broke it: containerd's plain /run/netns self-mounted by iproute2 meanwhile
    # (and the check sees it), /run/mount made
    assert fresh["netns mounts by containerd"] == 0 and fresh["netns mounts"] == 1 and fresh["run/mount made"]
    assert "mount /run/netns" in fresh["check before teardown"]
    assert any(x.startswith("directory /run/netns") for x in fresh["check before teardown"])

    # without iproute2 meanwhile, the node's own traces alone are undone too
    alone = results["node alone"]
    assert alone["netns mounts"] == 0 and alone["left behind"] == [] and alone["exists"] == []

    # a machine that already had an (empty, self-mounted) /run/netns keeps it, mounted as it was
    again = results["already there"]
    assert again["left behind"] == []
    assert "/run/netns" in again["exists"] and again["netns"] == [] and again["netns mounts after"] == 1
    assert "/var/lib/cni" not in again["exists"]

    # another user's network namespace (made after the node started) is not ours: it and /run/netns
    # stay; the node's own is gone
    foreign = results["someone else's netns"]
    assert foreign["left behind"] == []
    assert foreign["netns"] == ["lldp-test-x"] and foreign["netns mounts after"] >= 1
