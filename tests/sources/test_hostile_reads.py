"""Hostile host trees and bundles: every read stays inside the root, is of a regular file, and is bounded.

Each tree is built under ``tmp_path``. The class, not only the example: every sysfs source (numa,
pci, rdma), every bundle command file, and the ways a file can be wrong (a link out of the root, a
FIFO, a character device, a sparse file of gigabytes). Every test runs under a short timeout: a
FIFO that blocks or a read of ``/dev/zero`` fails the test instead of hanging it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sysfs_trees import Link, pci_function, write_tree

from nodetopo.bundle import COMMANDS, bundle_runner
from nodetopo.errors import ParseError, excerpt
from nodetopo.host import (
    SYSFS_ATTRIBUTE_LIMIT,
    CommandOutputRefused,
    CommandTimeout,
    HostRoot,
    Refused,
    SubprocessRunner,
    kernel_sys_dir,
    sysfs_mount_points,
)
from nodetopo.model import ConditionReason
from nodetopo.resource.body import to_nodetopology
from nodetopo.sources import ibstat, numa, nvidia_smi, pci, rdma
from nodetopo.topology.discover import bundle_context, scan

pytestmark = pytest.mark.timeout(60)

#: what a leaked /etc/passwd would look like: no message may ever contain it
SECRET = "root:x:0:0:root:/root:/bin/bash\n" + "daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n" * 30


def outside_file(tmp_path: Path) -> Path:
    """A file with secret content next to (not inside) the root ``tmp_path / "root"``."""
    secret = tmp_path / "outside" / "passwd"
    secret.parent.mkdir()
    secret.write_text(SECRET)
    return secret


def make_fifo(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)


def make_sparse(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        f.truncate(size)


#: (how the hostile attribute is made, the reason its condition gives)
HOSTILE = {
    "relative link out of the root": "outside the root",
    "absolute link out of the root": "outside the root",
    "FIFO": "a FIFO",
    "link to /dev/zero": "a character device",
    "link to /dev/urandom": "a character device",
    "sparse 2 GiB file": f"larger than {SYSFS_ATTRIBUTE_LIMIT} bytes",
    "directory": "a directory",
}


def plant(kind: str, path: Path, secret: Path) -> None:
    """Put a hostile entry at ``path`` (an attribute file the sources read)."""
    if path.exists() or path.is_symlink():
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "relative link out of the root":
        path.symlink_to(os.path.relpath(secret, path.parent))
    elif kind == "absolute link out of the root":
        path.symlink_to(secret)
    elif kind == "FIFO":
        os.mkfifo(path)
    elif kind == "link to /dev/zero":
        path.symlink_to("/dev/zero")
    elif kind == "link to /dev/urandom":
        path.symlink_to("/dev/urandom")
    elif kind == "sparse 2 GiB file":
        make_sparse(path, 2 << 30)
    elif kind == "directory":
        path.mkdir()
    else:
        raise AssertionError(kind)


def assert_no_leak(messages: list[str]) -> None:
    for message in messages:
        assert "root:x:0" not in message and "nologin" not in message, message
        assert len(message) < 600, message


# --- HostRoot.read_bytes: the one bounded, confined read -------------------------------------------


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_read_bytes_refuses_each_hostile_kind(tmp_path: Path, kind: str) -> None:
    secret = outside_file(tmp_path)
    root = HostRoot(tmp_path / "root")
    attribute = tmp_path / "root" / "sys" / "devices" / "system" / "node" / "node0" / "cpulist"
    plant(kind, attribute, secret)
    with pytest.raises(Refused) as refused:
        root.read_bytes(attribute, limit=SYSFS_ATTRIBUTE_LIMIT)
    assert HOSTILE[kind] in refused.value.why
    assert str(refused.value).startswith("/sys/devices/system/node/node0/cpulist: refused: ")


def test_read_bytes_reads_links_that_stay_inside(tmp_path: Path) -> None:
    root = write_tree(
        tmp_path,
        {
            "sys/devices/pci0000:00/0000:00:01.0/class": "0x030000\n",
            "sys/bus/pci/devices/0000:00:01.0": Link("../../../devices/pci0000:00/0000:00:01.0"),
            "sys/abs": Link("/sys/devices/pci0000:00/0000:00:01.0/class"),  # absolute: outside the root
        },
    )
    assert root.read_bytes(root.sys("bus/pci/devices/0000:00:01.0/class"), limit=64) == b"0x030000\n"
    with pytest.raises(FileNotFoundError):
        root.read_bytes(root.sys("bus/pci/devices/0000:00:01.0/vendor"), limit=64)
    exactly = root.sys("exactly")
    exactly.write_bytes(b"x" * 64)
    assert root.read_bytes(exactly, limit=64) == b"x" * 64
    with pytest.raises(Refused, match="larger than 63 bytes"):
        root.read_bytes(exactly, limit=63)


def test_a_directory_link_out_of_the_root_is_not_listed(tmp_path: Path) -> None:
    (tmp_path / "outside" / "node7").mkdir(parents=True)
    root = write_tree(tmp_path / "root", {"sys/devices/system/node": Link("../../../../outside")})
    with pytest.raises(Refused, match="outside the root"):
        root.list_directory(root.sys("devices/system/node"))
    nodes, _ = numa.read_numa_nodes(root)
    assert [node.id for node in nodes if node.id == 7] == []


# --- every sysfs source: one hostile attribute costs that fact, never hangs, never leaks ----------


def numa_tree(base: Path) -> HostRoot:
    return write_tree(
        base,
        {
            "sys/devices/system/node/node0/cpulist": "0-3\n",
            "sys/devices/system/node/node0/distance": "10 21\n",
            "sys/devices/system/node/node0/meminfo": "Node 0 MemTotal:  1024 kB\n",
            "sys/devices/system/node/node1/cpulist": "4-7\n",
            "sys/devices/system/node/node1/distance": "21 10\n",
            "sys/devices/system/node/node1/meminfo": "Node 1 MemTotal:  1024 kB\n",
        },
    )


@pytest.mark.parametrize("kind", sorted(HOSTILE))
@pytest.mark.parametrize("attribute", ["cpulist", "distance", "meminfo"])
def test_numa_hostile_attribute(tmp_path: Path, kind: str, attribute: str) -> None:
    secret = outside_file(tmp_path)
    root = numa_tree(tmp_path / "root")
    plant(kind, root.sys(f"devices/system/node/node1/{attribute}"), secret)
    nodes, conditions = numa.read_numa_nodes(root)
    assert 0 in [node.id for node in nodes]  # the other node is intact
    assert len(conditions) == 1 and conditions[0].reason is ConditionReason.UNAVAILABLE
    assert f"/sys/devices/system/node/node1/{attribute}" in conditions[0].message
    assert HOSTILE[kind] in conditions[0].message
    assert_no_leak([c.message for c in conditions])


@pytest.mark.parametrize("kind", sorted(HOSTILE))
@pytest.mark.parametrize("attribute", ["class", "vendor", "numa_node", "local_cpulist"])
def test_pci_hostile_attribute(tmp_path: Path, kind: str, attribute: str) -> None:
    secret = outside_file(tmp_path)
    root = write_tree(tmp_path / "root", pci_function("0000:3b:00.0"))
    plant(kind, root.sys(f"devices/pci0000:00/0000:3b:00.0/{attribute}"), secret)
    devices, conditions = pci.read_pci_devices(root)
    assert [str(d.address) for d in devices] == ["0000:3b:00.0"]
    assert devices[0].vendor == (0 if attribute == "vendor" else 0x15B3)
    ours = [c for c in conditions if attribute in c.message]
    assert ours and HOSTILE[kind] in ours[0].message
    assert f"/sys/bus/pci/devices/0000:3b:00.0/{attribute}" in ours[0].message
    assert_no_leak([c.message for c in conditions])


def test_pci_absolute_device_link_is_read_inside_the_capture(tmp_path: Path) -> None:
    """An absolute link in a capture is re-rooted: its attributes come from the capture, never from
    this machine's own /sys."""
    entries = pci_function("0000:3b:00.0")
    entries["sys/bus/pci/devices/0000:3b:00.0"] = Link("/sys/devices/pci0000:00/0000:3b:00.0")
    root = write_tree(tmp_path, entries)
    devices, conditions = pci.read_pci_devices(root)
    assert conditions == ()
    assert (devices[0].vendor, devices[0].root) == (0x15B3, "pci0000:00")


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_rdma_hostile_attribute(tmp_path: Path, kind: str) -> None:
    secret = outside_file(tmp_path)
    root = write_tree(
        tmp_path / "root",
        {
            "sys/class/infiniband/mlx5_0/ports/1/state": "4: ACTIVE\n",
            "sys/class/infiniband/mlx5_0/ports/1/rate": "400 Gb/sec (4X NDR)\n",
            "sys/class/infiniband/mlx5_0/hca_type": "MT4129\n",
            "sys/class/net": Link("../outside-net-unused"),
        },
    )
    plant(kind, root.sys("class/infiniband/mlx5_0/ports/1/rate"), secret)
    devices, conditions = rdma.read_rdma_devices(root)
    port = devices[0].ports[0]
    assert (port.state, port.rate_gbps, devices[0].hca_type) == ("ACTIVE", None, "MT4129")
    assert len(conditions) == 1 and HOSTILE[kind] in conditions[0].message
    assert_no_leak([c.message for c in conditions])


# --- the published resource never carries host files -------------------------------------------


def test_a_passwd_link_never_reaches_status_conditions(tmp_path: Path) -> None:
    """The issue's example end to end: bundle -> scan -> the NodeTopology body `publish --from` sends."""
    secret = outside_file(tmp_path)
    bundle = tmp_path / "bundle"
    root = numa_tree(bundle)
    write_tree(bundle, pci_function("0000:3b:00.0"))
    for attribute in ("devices/system/node/node0/cpulist", "devices/pci0000:00/0000:3b:00.0/class"):
        plant("relative link out of the root", root.sys(attribute), secret)
    (bundle / "cmd").mkdir()
    (bundle / "cmd" / "ibstat.txt").symlink_to(secret)
    body = to_nodetopology(scan(bundle_context(bundle)).topology, "node-a")
    text = json.dumps(body)
    assert "root:x:0" not in text and "nologin" not in text
    messages = [c["message"] for c in body["status"]["conditions"]]
    assert any("outside the root" in m for m in messages), messages


def test_a_parse_error_quotes_a_short_sanitized_excerpt(tmp_path: Path) -> None:
    """Garbage inside the root is quoted, but at most a few dozen characters, control bytes escaped."""
    garbage = "\x1b]0;owned\x07" + SECRET
    root = write_tree(tmp_path, {"sys/devices/system/node/node0/cpulist": garbage})
    nodes, conditions = numa.read_numa_nodes(root)
    assert nodes == () or all(node.id != 0 for node in nodes)
    message = conditions[0].message
    assert len(message) < 200 and "\x1b" not in message and "\x07" not in message
    assert "nologin" not in message and "chars)" in message


def test_parse_error_caps_and_escapes_any_detail() -> None:
    error = ParseError("x", "p\x1bq", "bad " + "y" * 5000 + "\x00")
    assert len(error.detail) <= 300 and "\x1b" not in error.path
    assert excerpt("a\x1b[31mb") == repr("a\x1b[31mb")
    assert excerpt("z" * 100).endswith("… (100 chars)")


# --- command outputs: bounded from a real process and from a bundle ----------------------------


def test_subprocess_output_over_the_limit_is_refused_and_the_command_killed() -> None:
    runner = SubprocessRunner(output_limit=1 << 20)
    with pytest.raises(CommandOutputRefused, match="more than 1048576 bytes"):
        runner.run(["yes"], timeout=30)


def test_subprocess_stderr_flood_is_cut_not_fatal() -> None:
    code = "import sys; sys.stderr.write('e' * 10_000_000); print('ok')"
    result = SubprocessRunner().run([sys.executable, "-c", code], timeout=30)
    assert result.stdout == "ok\n" and len(result.stderr) == 64 * 1024


def test_subprocess_timeout_and_exit_code_still_work() -> None:
    with pytest.raises(CommandTimeout):
        SubprocessRunner().run(["sleep", "10"], timeout=0.5)
    result = SubprocessRunner().run(["sh", "-c", "echo out; echo err >&2; exit 3"], timeout=10)
    assert (result.returncode, result.stdout, result.stderr) == (3, "out\n", "err\n")


BUNDLE_HOSTILE = {
    "relative link out of the root": "outside the root",
    "FIFO": "a FIFO",
    "link to /dev/zero": "a character device",
    "sparse 2 GiB file": "larger than",
}


@pytest.mark.parametrize("kind", sorted(BUNDLE_HOSTILE))
@pytest.mark.parametrize("filename", sorted(COMMANDS))
def test_every_bundle_command_file_is_read_bounded(tmp_path: Path, kind: str, filename: str) -> None:
    secret = outside_file(tmp_path)
    bundle = tmp_path / "bundle"
    plant(kind, bundle / "cmd" / filename, secret)
    runner = bundle_runner(bundle)
    with pytest.raises(CommandOutputRefused) as refused:
        runner.run(COMMANDS[filename], timeout=1)
    assert BUNDLE_HOSTILE[kind] in str(refused.value)
    assert_no_leak([str(refused.value)])


@pytest.mark.parametrize("source", [nvidia_smi, ibstat], ids=["nvidia-smi", "ibstat"])
def test_a_refused_command_output_is_a_condition_of_its_source(tmp_path: Path, source: object) -> None:
    bundle = tmp_path / "bundle"
    for filename in COMMANDS:
        make_fifo(bundle / "cmd" / filename)
    result = source.collect(bundle_context(bundle))  # type: ignore[attr-defined]
    assert not result.ok
    reasons = {c.reason for c in result.facts.conditions}
    assert reasons == {ConditionReason.PARSE_ERROR}
    assert all("a FIFO" in c.message for c in result.facts.conditions)


def test_a_real_bundle_still_replays_its_exit_codes(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    (bundle / "cmd").mkdir(parents=True)
    (bundle / "cmd" / "ibstat.txt").write_text("")
    (bundle / "cmd" / "ibstat.txt.rc").write_text("255\n")
    (bundle / "cmd" / "ibstat.txt.stderr").write_text("ibpanic: boom\n")
    make_sparse(bundle / "cmd" / "nvidia-smi-L.txt.stderr", 1 << 30)  # a huge side file is dropped
    (bundle / "cmd" / "nvidia-smi-L.txt").write_text("")
    runner = bundle_runner(bundle)
    result = runner.run(("ibstat",), timeout=1)
    assert (result.returncode, result.stderr) == (255, "ibpanic: boom\n")
    assert runner.run(("nvidia-smi", "-L"), timeout=1).stderr == ""


@pytest.mark.parametrize("rc", ["--5", "\u00b2", "-", "1e3", "0x1", "9999999999", "5 6", "\u0665"])
def test_an_exit_code_file_that_is_not_one_is_a_refused_output(tmp_path: Path, rc: str) -> None:
    """``str.isdigit`` takes ``²`` and ``--5`` stripped of its dashes; ``int`` refused both (a traceback)."""
    bundle = tmp_path / "bundle"
    (bundle / "cmd").mkdir(parents=True)
    (bundle / "cmd" / "ibstat.txt").write_text("")
    (bundle / "cmd" / "ibstat.txt.rc").write_text(rc + "\n")
    with pytest.raises(CommandOutputRefused) as refused:
        bundle_runner(bundle).run(("ibstat",), timeout=1)
    assert "cmd/ibstat.txt.rc: not an exit code" in str(refused.value)
    assert refused.value.args[0].isprintable()


@pytest.mark.parametrize("rc", ["", "  \n", "0\n", "-1\n", "timeout\n"])
def test_an_exit_code_file_capture_writes_still_replays(tmp_path: Path, rc: str) -> None:
    bundle = tmp_path / "bundle"
    (bundle / "cmd").mkdir(parents=True)
    (bundle / "cmd" / "ibstat.txt").write_text("out\n")
    (bundle / "cmd" / "ibstat.txt.rc").write_text(rc)
    answer = bundle_runner(bundle).answers[("ibstat",)]
    assert answer.refused is None
    assert (answer.returncode, answer.hang) == (-1 if rc == "-1\n" else 0, rc == "timeout\n")


def test_discover_with_an_exit_code_file_that_is_not_one(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    numa_tree(bundle)
    (bundle / "cmd").mkdir(parents=True, exist_ok=True)
    (bundle / "cmd" / "nvidia-smi-topo-m.txt").write_text("")
    (bundle / "cmd" / "nvidia-smi-topo-m.txt.rc").write_text("--5\n")
    done = subprocess.run(
        [sys.executable, "-m", "nodetopo", "discover", "--from", str(bundle), "-o", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    messages = [c["message"] for c in json.loads(done.stdout)["status"]["conditions"]]
    assert any("nvidia-smi-topo-m.txt.rc: not an exit code" in m for m in messages), messages


def test_discover_from_a_hostile_bundle_finishes(tmp_path: Path) -> None:
    """The CLI end to end on a bundle holding every kind of hostile file at once."""
    secret = outside_file(tmp_path)
    bundle = tmp_path / "bundle"
    root = numa_tree(bundle)
    plant("FIFO", root.sys("devices/system/node/node0/cpulist"), secret)
    plant("link to /dev/zero", root.sys("devices/system/node/node0/meminfo"), secret)
    plant("sparse 2 GiB file", root.sys("devices/system/node/node1/meminfo"), secret)
    plant("FIFO", bundle / "cmd" / "nvidia-smi-topo-m.txt", secret)
    plant("relative link out of the root", bundle / "cmd" / "ibstat.txt", secret)
    done = subprocess.run(
        [sys.executable, "-m", "nodetopo", "discover", "--from", str(bundle), "-o", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "root:x:0" not in done.stdout + done.stderr
    body = json.loads(done.stdout)
    assert [n["id"] for n in body["status"]["numaNodes"]] == [1]


# --- the kernel's own sysfs under another root (the DaemonSet's /host/sys) -----------------------


def test_sysfs_mount_points_are_read_from_mountinfo() -> None:
    mountinfo = (
        "22 1 0:21 / /sys rw,nosuid shared:7 - sysfs sysfs rw\n"
        "40 30 0:21 / /host/sys ro,relatime master:7 - sysfs sysfs ro\n"
        "41 30 0:50 / /host/with\\040space rw - sysfs sysfs rw\n"
        "42 30 0:51 / /proc rw - proc proc rw\n"
        "43 30 8:1 /bundle/sys /tmp/b/sys rw - ext4 /dev/sda1 rw\n"
    )
    assert sysfs_mount_points(mountinfo) == {"/sys", "/host/sys", "/host/with space"}
    assert kernel_sys_dir("/host", frozenset({"/host/sys"})) == "/host/sys"
    assert kernel_sys_dir("/tmp/b", frozenset({"/sys"})) is None  # a bundle's sys is no sysfs mount


def test_a_bundle_whose_sys_links_to_this_machines_sys_is_not_trusted(tmp_path: Path) -> None:
    """The sysfs fast path is for a sysfs mounted at <root>/sys, never for a link to /sys."""
    (tmp_path / "sys").symlink_to("/sys")
    root = HostRoot(tmp_path)
    with pytest.raises(Refused, match="outside the root"):
        root.read_bytes(root.sys("devices/system/cpu/online"), limit=SYSFS_ATTRIBUTE_LIMIT)
    nodes, conditions = numa.read_numa_nodes(root)
    assert nodes == () and conditions


def test_a_link_loop_and_an_absent_file_of_a_bundle(tmp_path: Path) -> None:
    """A link loop is refused naming the host path; an absent file is FileNotFoundError, as ever."""
    (tmp_path / "cmd").mkdir()
    (tmp_path / "cmd" / "ibstat.txt").symlink_to("ibstat.txt")
    root = HostRoot(tmp_path)
    with pytest.raises(Refused) as refused:
        root.read_bytes(tmp_path / "cmd" / "ibstat.txt", limit=100)
    assert str(refused.value) == "/cmd/ibstat.txt: refused: too many levels of symbolic links"
    with pytest.raises(FileNotFoundError):
        root.read_bytes(f"{tmp_path}/cmd/absent.txt", limit=100)
    answers = bundle_runner(tmp_path)
    with pytest.raises(CommandOutputRefused, match=r"/cmd/ibstat\.txt: refused: too many levels"):
        answers.run(COMMANDS["ibstat.txt"], timeout=1)
