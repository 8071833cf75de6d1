"""A real Kubernetes node for the test suite: containerd + kubelet joined to a ``LocalCluster``.

``LocalNode`` starts, all under one work directory:

* containerd and its runc shim built from the Go module pinned by ``tests/node/containerd`` (Debian
  12's containerd 1.6 predates CDI, through which DRA drivers hand containers their devices), with
  its own root, state, socket and config (CRI plugin: the sandbox image is a pause binary built here
  from ``tests/cluster/pause``, ``restrict_oom_score_adj``, no AppArmor, no hugetlb, stream server on
  127.0.0.1, runc's state under the work directory, CDI specs read from ``cdi_dir``); Debian's runc;
* a CNI bridge (``BRIDGE``, ``SUBNET``) with host-local IPAM whose state is in the work directory;
* a TCP forwarder on the bridge's gateway address to the API server on 127.0.0.1 (pods have no
  kube-proxy; they reach the API at ``api_host:api_port``);
* kubelet (built by tests/cluster/build.sh) with a client certificate for ``system:node:<name>``,
  a serving certificate for its name and 127.0.0.1, webhook authentication and authorization,
  listening on 127.0.0.1 only;
* and on the cluster: kube-controller-manager with every controller and kube-scheduler.

On request (``start_device_plugin``): the test device plugin of ``tests/node/deviceplugin`` registered
with this kubelet, advertising given device IDs (a fixture bundle's GPU UUIDs) as ``nvidia.com/gpu``;
(``start_dra_driver``): the test DRA driver of ``tests/node/dradriver`` registered with this kubelet,
publishing a ResourceSlice of given devices and preparing claims through CDI specs in ``cdi_dir``.

Every process runs in its own process group and is stopped by its PID. ``stop()`` also removes
what kubelet and containerd leave outside the work directory: mounts, network namespaces, the
bridge, ``kubepods`` cgroups, ``/var/log/containers`` links, shim sockets in ``/run/containerd/s``;
and it puts back what the first run on a fresh machine creates (``OUTSIDE_DIRECTORIES``: /run/netns
and any self bind mount made on it meanwhile, libcni's cache, the kubelet's directories, /run/mount;
IPv4 forwarding): removed when this run created it, kept when the machine had it. ``leftovers()``
judges by the same rule (tests/hoststate.py).

``missing_prerequisites()`` says what this machine lacks to host a node (tests FAIL with it).
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import hoststate
import yaml
from agent.kube_support import Proxy
from kube.cluster import ClusterError, LocalCluster, free_port, issue_certificate

REPO = Path(__file__).resolve().parents[2]
PAUSE_SOURCE = REPO / "tests" / "cluster"
DEVICE_PLUGIN_BUILD = REPO / "tests" / "node" / "deviceplugin" / "build.sh"
DRA_DRIVER_BUILD = REPO / "tests" / "node" / "dradriver" / "build.sh"
CONTAINERD_BUILD = REPO / "tests" / "node" / "containerd" / "build.sh"
#: The kubelet's device-plugin directory: fixed by the kubelet, whatever its --root-dir.
DEVICE_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")
#: The kubelet's device manager checkpoint (devices registered and handed out), in that fixed directory.
DEVICE_CHECKPOINT = DEVICE_PLUGIN_DIR / "kubelet_internal_checkpoint"
CNI_BIN = Path("/usr/lib/cni")
BRIDGE = "ntopo0"
SUBNET_PREFIX = "10.88.77"
GATEWAY = f"{SUBNET_PREFIX}.1"
PAUSE_IMAGE = "nodetopo.test/pause:1"
CONTAINERD_NAMESPACE = "k8s.io"
SHIM_SOCKETS = Path("/run/containerd/s")
CONTAINER_LOG_LINKS = Path("/var/log/containers")
NETNS_DIR = Path("/run/netns")
#: containerd names the network namespaces of pod sandboxes cni-<uuid>; other names are not ours
NETNS_PREFIX = "cni-"
CGROUP_ROOT = Path("/sys/fs/cgroup")
#: util-linux's mount/umount (the kubelet runs them for volumes) keep their utab lock here
LIBMOUNT_DIR = Path("/run/mount")
#: Machine-wide directories the node creates when a machine has none (children first), and whether
#: what is inside goes with them (else each is removed only when empty). libcni's result cache;
#: /run/netns, which containerd creates for its first sandbox (and which an ``ip netns add`` while
#: the node is up, the live LLDP test's, bind-mounts onto itself: rmdir alone cannot remove a mount
#: point; this fixture is torn down at the very end of the session); containerd's shim sockets; the
#: kubelet's log links, its fixed device-plugin directory, and libmount's /run/mount. Each is put back
#: as it was (tests/hoststate.py): a first run on a fresh machine leaves none of them, a machine that
#: had them keeps them.
OUTSIDE_DIRECTORIES: tuple[tuple[Path, bool], ...] = (
    (Path("/var/lib/cni/results"), False),
    (Path("/var/lib/cni"), False),
    (NETNS_DIR, False),
    (SHIM_SOCKETS, False),
    (SHIM_SOCKETS.parent, False),
    (CONTAINER_LOG_LINKS, False),
    (DEVICE_PLUGIN_DIR, True),
    (DEVICE_PLUGIN_DIR.parent, True),
    (LIBMOUNT_DIR, True),
)


#: Settings the node changes: the CNI bridge plugin turns IPv4 forwarding on for a gateway bridge
#: (isGateway), and a machine that had it off gets it off again.
SYSCTLS = (Path("/proc/sys/net/ipv4/ip_forward"),)


def _sysctl(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _foreign_entry(directory: Path) -> Callable[[str], bool]:
    """Entries of ``directory`` that another user made (never ours to remove): in /run/netns, every
    network namespace not named as containerd names a sandbox's (the live LLDP test's, an admin's)."""
    if directory == NETNS_DIR:
        return lambda name: not name.startswith(NETNS_PREFIX)
    return lambda name: False


class NodeError(ClusterError):
    """The test node could not be started. Tests must fail on it, never skip."""


def load_image_builder() -> ModuleType:
    """``image/build_oci.py`` as a module (the registry-free image recipe users run too)."""
    spec = importlib.util.spec_from_file_location("nodetopo_build_oci", REPO / "image" / "build_oci.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def missing_prerequisites() -> list[str]:
    """What this machine lacks to run a kubelet + containerd node (empty: nothing)."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root (kubelet and containerd manage mounts, cgroups and network namespaces)")
    for tool, package in [
        ("ctr", "containerd"),
        ("runc", "runc"),
        ("mmdebstrap", "mmdebstrap"),
        ("ip", "iproute2"),
        ("go", "Go (builds containerd and the pause binary)"),
    ]:
        if shutil.which(tool) is None:
            missing.append(f"{tool} (install {package})")
    for plugin in ("bridge", "host-local", "loopback"):
        if not os.access(CNI_BIN / plugin, os.X_OK):
            missing.append(f"{CNI_BIN / plugin} (install containernetworking-plugins)")
    if not (CGROUP_ROOT / "memory").is_dir() and not (CGROUP_ROOT / "cgroup.controllers").is_file():
        missing.append(f"a memory cgroup controller under {CGROUP_ROOT}")
    try:
        address = socket.gethostbyname(socket.gethostname())
    except OSError as e:
        missing.append(f"the host name {socket.gethostname()!r} must resolve ({e})")
    else:
        if not address.startswith("127."):
            missing.append(
                f"the host name {socket.gethostname()!r} must resolve to loopback (the API server reaches "
                f"the kubelet by node name), it resolves to {address}"
            )
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        missing.append(f"network interface {BRIDGE} already exists (another test node running?)")
    return missing


#: The programs a node runs that outlive a test run killed before its teardown (SIGKILL, OOM, a CI
#: job cancelled): each started with a path under the run's pytest base temp on its command line.
NODE_PROGRAMS = (
    "kubelet",
    "containerd",
    "containerd-shim-runc-v2",
    "nodetopo-test-deviceplugin",
    "nodetopo-test-dradriver",
)


def reclaim_after_a_dead_run(
    *,
    bridge: str = BRIDGE,
    temp_root: Path | None = None,
    own: Path | None = None,
    netns_dir: Path = NETNS_DIR,
) -> list[str]:
    """Remove what a test node left when its run died before ``stop()``, and say what it removed.

    Only for the holder of the machine's node lock (tests/node/conftest.py): with the lock held no
    other run has a node, so a node program whose command line names a pytest base temp other than
    ``own`` (this run's), a mount under another run's ``node*`` work directory, a CNI network namespace
    no process is in and the bridge itself are all a dead run's. Without this, one killed run leaves
    ``BRIDGE`` behind and every later run on the machine fails with "already exists"."""
    temp_root = temp_root if temp_root is not None else Path(tempfile.gettempdir()) / f"pytest-of-{_user()}"
    prefix = str(temp_root) + "/"
    mine = str(own) + "/" if own is not None else None
    reclaimed: list[str] = []
    for pid in _pids():
        if pid == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if not cmdline or Path(cmdline[0]).name not in NODE_PROGRAMS:
            continue
        args = [a for a in cmdline[1:] if prefix in a]
        if args and not (mine and all(mine in a for a in args)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                reclaimed.append(f"process {pid} ({Path(cmdline[0]).name})")
    stale = [
        point
        for point in _mount_points_under(temp_root)
        if re.match(r"pytest-\d+/node\d*(/|$)", point[len(prefix) :])
        and not (mine and (point + "/").startswith(mine))
    ]
    for point in sorted(stale, key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)
        reclaimed.append(f"mount {point}")
    in_use = _network_namespaces_in_use()
    for name in sorted(_names(netns_dir)):
        path = netns_dir / name
        if not name.startswith("cni-"):
            continue
        with contextlib.suppress(OSError):
            if path.stat().st_ino in in_use:
                continue
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)
        with contextlib.suppress(OSError):
            path.unlink()
        if not path.exists():  # one bound under a self-mounted /run/netns stays busy: not claimed as gone
            reclaimed.append(f"netns {name}")
    if Path(f"/sys/class/net/{bridge}").exists():
        _run(["ip", "link", "del", bridge])
        reclaimed.append(f"interface {bridge}")
    return reclaimed


def _user() -> str:
    import getpass

    return getpass.getuser() or "unknown"


def _network_namespaces_in_use() -> set[int]:
    """The inodes of every network namespace a process is in now."""
    inodes = set()
    for pid in _pids():
        with contextlib.suppress(OSError):
            inodes.add(os.stat(f"/proc/{pid}/ns/net").st_ino)
    return inodes


@dataclasses.dataclass(slots=True)
class _Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path


def _run(argv: list[str], *, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise NodeError(f"{' '.join(argv)}: {e}") from e
    if check and done.returncode != 0:
        raise NodeError(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done


def _build_tool(script: Path) -> Path:
    """Run a cached Go build script (it prints its bin directory last) and return that directory."""
    try:
        done = subprocess.run([str(script)], capture_output=True, text=True, timeout=1800, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise NodeError(f"{script}: {e}") from e
    if done.returncode != 0:
        raise NodeError(f"{script} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


def _published_order(names: list[str], inventory: dict[str, Any], order: str) -> list[str]:
    """The order the test DRA driver publishes ``names`` in (its ``--order``; see its package doc)."""
    if order == "as-given":
        return list(names)
    if order == "reversed":
        return list(reversed(names))
    if order != "across-groups":
        raise NodeError(f"unknown DRA driver order {order!r}")
    groups = [list(g) for g in inventory.get("groups", [])]
    grouped = {n for g in groups for n in g}
    groups += [[n] for n in names if n not in grouped]
    groups.sort(key=len, reverse=True)  # stable, as the driver's sort.SliceStable
    out: list[str] = []
    for rank in range(max((len(g) for g in groups), default=0)):
        out += [g[rank] for g in groups if rank < len(g)]
    return out


def _terminate(popen: subprocess.Popen[bytes], *, grace: float = 10.0) -> None:
    if popen.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(popen.pid, signal.SIGTERM)
    try:
        popen.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(popen.pid, signal.SIGKILL)
        popen.wait(timeout=10)


class LocalNode:
    """containerd + kubelet registered as Node ``name`` with ``cluster`` (see the module doc)."""

    def __init__(self, cluster: LocalCluster, workdir: Path, *, name: str | None = None) -> None:
        self.cluster = cluster
        self.workdir = workdir
        self.name = name or socket.gethostname()
        self._processes: dict[str, _Process] = {}
        self.forwarder: Proxy | None = None
        self._stopped = False
        self._before: dict[str, set[str]] = {}
        self._directories: list[tuple[hoststate.DirectoryState, bool]] = []
        self._sysctls: dict[Path, str | None] = {}
        self.timings: dict[str, float] = {}
        self.kubelet_port = 0
        self.containerd_bin: Path | None = None

    # ---- paths ------------------------------------------------------------------------------

    @property
    def containerd_socket(self) -> Path:
        return self.workdir / "containerd" / "containerd.sock"

    @property
    def kubelet_root(self) -> Path:
        return self.workdir / "kubelet"

    @property
    def cdi_dir(self) -> Path:
        """Where containerd reads CDI specs (the test DRA driver writes them here)."""
        return self.workdir / "cdi"

    @property
    def plugins_registry(self) -> Path:
        """The kubelet's plugin registration directory (``<root-dir>/plugins_registry``)."""
        return self.kubelet_root / "plugins_registry"

    @property
    def pod_logs(self) -> Path:
        return self.workdir / "pod-logs"

    @property
    def api_host(self) -> str:
        return GATEWAY

    @property
    def api_port(self) -> int:
        assert self.forwarder is not None
        return self.forwarder.port

    def log(self, name: str) -> Path:
        return self.workdir / f"{name}.log"

    # ---- lifecycle --------------------------------------------------------------------------

    def start(self, *, timeout: float = 120.0) -> None:
        missing = missing_prerequisites()
        if missing:
            raise NodeError("this machine cannot host the test node; missing: " + "; ".join(missing))
        atexit.register(self.stop)
        self._remember_outside_state()
        # A run that was killed leaves its checkpoint behind: the next kubelet would restore that run's
        # nvidia.com/gpu (capacity, with no plugin serving it). One node per machine (the machine lock),
        # so any checkpoint here is a dead node's.
        DEVICE_CHECKPOINT.unlink(missing_ok=True)
        try:
            self._timed("controllers", self._start_controllers)
            self._timed("containerd build", self._build_containerd)
            self._timed("pause image", self._build_pause)
            self._timed("containerd", lambda: self.start_containerd(timeout=timeout))
            self._timed("pause import", lambda: self.import_image(self.workdir / "pause.oci.tar"))
            self._timed("network", self._start_network)
            self._timed("kubelet", lambda: self.start_kubelet(timeout=timeout))
        except BaseException:
            self.stop()
            raise

    def _timed(self, step: str, call: Callable[[], None]) -> None:
        started = time.monotonic()
        call()
        self.timings[step] = round(time.monotonic() - started, 2)

    def stop(self) -> None:
        """Stop every process by PID and remove what they left outside the work directory."""
        if self._stopped:
            return
        self._stopped = True
        with contextlib.suppress(Exception):
            self._drain_pods(timeout=20)
        if "kubelet" in self._processes:
            _terminate(self._processes.pop("kubelet").popen)
        with contextlib.suppress(Exception):
            self._remove_containers()
        if "containerd" in self._processes:
            _terminate(self._processes.pop("containerd").popen)
        self._kill_shims()
        if self.forwarder is not None:
            self.forwarder.stop()
        self._clean_outside_state()

    # ---- controllers --------------------------------------------------------------------------

    def _start_controllers(self) -> None:
        self.cluster.start_controller_manager(controllers="*")
        self.cluster.start_scheduler()

    # ---- builds -----------------------------------------------------------------------------

    def _build_containerd(self) -> None:
        """containerd and containerd-shim-runc-v2 (one directory), built once and cached."""
        self.containerd_bin = _build_tool(CONTAINERD_BUILD)

    # ---- images -----------------------------------------------------------------------------

    def _build_pause(self) -> None:
        binary = self.workdir / "pause"
        env = {**os.environ, "CGO_ENABLED": "0"}
        try:
            done = subprocess.run(
                ["go", "build", "-trimpath", "-ldflags=-s -w", "-o", str(binary), "./pause"],
                cwd=PAUSE_SOURCE,
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            raise NodeError(f"building the pause binary: {e}") from e
        if done.returncode != 0:
            raise NodeError(f"building the pause binary failed:\n{done.stderr[-3000:]}")
        builder = load_image_builder()
        scratch = self.workdir / "pause-layers"
        scratch.mkdir(exist_ok=True)
        layer = builder.files_layer(scratch, [("pause", binary.read_bytes(), 0o755)])
        builder.write_archive(
            self.workdir / "pause.oci.tar",
            name=PAUSE_IMAGE,
            layers=[layer],
            config={"Entrypoint": ["/pause"], "User": "65535:65535"},
        )

    def ctr(self, *args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Debian's ``ctr`` against this node's containerd, namespace k8s.io."""
        return _run(
            ["ctr", "--address", str(self.containerd_socket), "--namespace", CONTAINERD_NAMESPACE, *args],
            timeout=timeout,
            check=check,
        )

    def import_image(self, archive: Path) -> None:
        """``ctr -n k8s.io images import`` an OCI archive (unpacked for the overlayfs snapshotter)."""
        self.ctr("images", "import", "--no-unpack=false", str(archive))

    def images(self) -> list[str]:
        return self.ctr("images", "list", "--quiet").stdout.split()

    # ---- containerd -------------------------------------------------------------------------

    def _spawn(self, name: str, argv: list[str], *, env: dict[str, str] | None = None) -> _Process:
        log = self.log(name)
        with log.open("ab") as handle:
            popen = subprocess.Popen(
                argv,
                stdout=handle,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                cwd=self.workdir,
                env=env,
            )
        process = _Process(name=name, popen=popen, log=log)
        self._processes[name] = process
        return process

    def _fail(self, name: str, why: str) -> NodeError:
        log = self.log(name)
        tail = log.read_text(errors="replace")[-6000:] if log.exists() else ""
        return NodeError(f"{name}: {why}\n--- {log} (tail) ---\n{tail}")

    def containerd_config(self) -> dict[str, Any]:
        base = self.workdir / "containerd"
        return {
            "version": 2,
            "root": str(base / "root"),
            "state": str(base / "state"),
            "grpc": {"address": str(self.containerd_socket)},
            "ttrpc": {"address": str(base / "containerd.sock.ttrpc")},
            "debug": {"address": str(base / "debug.sock")},
            "plugins": {
                "io.containerd.grpc.v1.cri": {
                    "sandbox_image": PAUSE_IMAGE,
                    "restrict_oom_score_adj": True,  # no CAP_SYS_RESOURCE: oom_score_adj < 0 fails
                    "disable_apparmor": True,
                    "disable_hugetlb_controller": True,
                    "tolerate_missing_hugetlb_controller": True,
                    "stream_server_address": "127.0.0.1",
                    "stream_server_port": "0",
                    "containerd": {
                        "snapshotter": "overlayfs",
                        "default_runtime_name": "runc",
                        "runtimes": {
                            "runc": {
                                "runtime_type": "io.containerd.runc.v2",
                                "options": {"SystemdCgroup": False, "Root": str(base / "runc")},
                            }
                        },
                    },
                    "cni": {"bin_dir": str(CNI_BIN), "conf_dir": str(self.workdir / "cni")},
                    "enable_cdi": True,
                    "cdi_spec_dirs": [str(self.cdi_dir)],
                    "registry": {"config_path": ""},
                },
            },
        }

    def start_containerd(self, *, timeout: float = 60.0) -> None:
        """Start (or restart) containerd on this node's socket and wait until it answers."""
        config = self.workdir / "containerd.toml"
        config.write_text(_toml(self.containerd_config()))
        self._write_cni()
        self.cdi_dir.mkdir(exist_ok=True)
        if self.containerd_bin is None:
            self._build_containerd()
        assert self.containerd_bin is not None
        # The shim is looked up on PATH first: this build's, not a packaged one.
        env = {**os.environ, "PATH": f"{self.containerd_bin}{os.pathsep}{os.environ.get('PATH', '')}"}
        process = self._spawn(
            "containerd",
            [str(self.containerd_bin / "containerd"), "--config", str(config), "--log-level", "info"],
            env=env,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process.popen.poll() is not None:
                raise self._fail("containerd", f"exited with {process.popen.returncode}")
            if self.containerd_socket.exists() and self.ctr("version", check=False).returncode == 0:
                return
            time.sleep(0.2)
        raise self._fail("containerd", f"not answering on {self.containerd_socket} after {timeout:.0f}s")

    def stop_containerd(self) -> None:
        """Stop containerd (its shims and containers keep running, as on a real node)."""
        if "containerd" in self._processes:
            _terminate(self._processes.pop("containerd").popen)

    # ---- device plugin ----------------------------------------------------------------------

    def start_device_plugin(
        self,
        devices: list[str],
        islands: list[list[str]],
        *,
        across_islands: bool = False,
        misreport: bool = False,
        resource: str = "nvidia.com/gpu",
        timeout: float = 60.0,
    ) -> None:
        """(Re)start the test device plugin (tests/node/deviceplugin, built by its cached build.sh)
        advertising ``devices`` as ``resource``, preferring one of ``islands`` per request (or, with
        ``across_islands``, different islands) and giving each container NVIDIA_VISIBLE_DEVICES and
        a ``/dev/nvidia<index>`` per device (backed by /dev/null: there is no GPU); wait until the
        Node's allocatable shows them all. ``misreport``: the container is told other devices than
        the kubelet chose (a broken plugin).
        Its log is ``log("deviceplugin")``."""
        self.stop_device_plugin()
        binary = _build_tool(DEVICE_PLUGIN_BUILD) / "nodetopo-test-deviceplugin"
        config = self.workdir / "deviceplugin.json"
        config.write_text(json.dumps({"devices": devices, "islands": islands}))
        log = self.log("deviceplugin")
        offset = log.stat().st_size if log.exists() else 0
        argv = [
            str(binary),
            f"--config={config}",
            f"--resource={resource}",
            f"--plugin-dir={DEVICE_PLUGIN_DIR}",
            "--dev-nvidia-host-path=/dev/null",  # /dev/nvidia<index> in the container, as on a GPU node
        ]
        argv += ["--allocate-across-islands"] if across_islands else []
        argv += ["--misreport-devices"] if misreport else []
        process = self._spawn("deviceplugin", argv)
        deadline = time.monotonic() + timeout
        last = "not registered"
        while time.monotonic() < deadline:
            if process.popen.poll() is not None:
                raise self._fail("deviceplugin", f"exited with {process.popen.returncode}")
            with log.open("rb") as handle:
                handle.seek(offset)
                advertised = b"ListAndWatch: advertising" in handle.read()
            if advertised:
                status, node = self.cluster.request("GET", f"/api/v1/nodes/{self.name}")
                allocatable = node.get("status", {}).get("allocatable", {}) if status == 200 else {}
                if allocatable.get(resource) == str(len(devices)):
                    return
                last = f"allocatable {resource}: {allocatable.get(resource)}"
            time.sleep(0.5)
        raise self._fail(
            "deviceplugin", f"{len(devices)} {resource} not allocatable after {timeout:.0f}s ({last})"
        )

    def stop_device_plugin(self) -> None:
        if "deviceplugin" in self._processes:
            _terminate(self._processes.pop("deviceplugin").popen)

    # ---- DRA drivers ------------------------------------------------------------------------

    def start_dra_driver(
        self,
        inventory: dict[str, Any],
        *,
        order: str = "as-given",
        misreport: bool = False,
        timeout: float = 90.0,
    ) -> dict[str, Any]:
        """(Re)start the test DRA driver (tests/node/dradriver, built by its cached build.sh) for
        ``inventory`` (its config: ``driver``, ``devices``, ``groups``), registered with this kubelet
        and publishing the devices in ``order`` (``as-given``, ``across-groups``: the test switch,
        ``reversed``); ``misreport``: containers get the next device's edits. Waits until the Node's
        ResourceSlice of that driver lists every device in that order and returns it.
        Its log is ``log("dradriver-<driver>")``."""
        driver = str(inventory["driver"])
        self.stop_dra_driver(driver)
        binary = _build_tool(DRA_DRIVER_BUILD) / "nodetopo-test-dradriver"
        config = self.workdir / f"dradriver-{driver}.json"
        config.write_text(json.dumps(inventory, indent=1))
        plugin_dir = self.workdir / "dra" / driver
        argv = [
            str(binary),
            f"--config={config}",
            f"--kubeconfig={self.cluster.kubeconfig}",
            f"--node-name={self.name}",
            f"--registrar-dir={self.plugins_registry}",
            f"--plugin-dir={plugin_dir}",
            f"--cdi-dir={self.cdi_dir}",
            f"--order={order}",
        ]
        argv += ["--misreport-devices"] if misreport else []
        process = self._spawn(f"dradriver-{driver}", argv)
        expected = _published_order(
            [str(d["device"]["name"]) for d in inventory["devices"]], inventory, order
        )
        deadline = time.monotonic() + timeout
        last = "no ResourceSlice"
        while time.monotonic() < deadline:
            if process.popen.poll() is not None:
                raise self._fail(f"dradriver-{driver}", f"exited with {process.popen.returncode}")
            for item in self.resource_slices(driver):
                names = [d["name"] for d in item["spec"].get("devices", [])]
                if names == expected:
                    return item
                last = f"ResourceSlice {item['metadata']['name']} lists {names}, expected {expected}"
            time.sleep(0.5)
        raise self._fail(f"dradriver-{driver}", f"not published after {timeout:.0f}s ({last})")

    def stop_dra_driver(self, driver: str) -> None:
        name = f"dradriver-{driver}"
        if name in self._processes:
            _terminate(self._processes.pop(name).popen)

    def resource_slices(self, driver: str) -> list[dict[str, Any]]:
        """This node's ResourceSlices of ``driver`` (resource.k8s.io/v1)."""
        status, body = self.cluster.request(
            "GET", f"/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName%3D{self.name}"
        )
        if status != 200:
            raise NodeError(f"listing ResourceSlices: {status} {body}")
        return [i for i in body.get("items", []) if i["spec"]["driver"] == driver]

    # ---- network ----------------------------------------------------------------------------

    def _write_cni(self) -> None:
        directory = self.workdir / "cni"
        directory.mkdir(exist_ok=True)
        conflist = {
            "cniVersion": "1.0.0",
            "name": "nodetopo-test",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": BRIDGE,
                    "isGateway": True,
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "dataDir": str(self.workdir / "cni-ipam"),
                        "ranges": [[{"subnet": f"{SUBNET_PREFIX}.0/24", "gateway": GATEWAY}]],
                        "routes": [{"dst": f"{SUBNET_PREFIX}.0/24"}],
                    },
                }
            ],
        }
        (directory / "10-nodetopo-test.conflist").write_text(json.dumps(conflist, indent=2))

    def _start_network(self) -> None:
        """The bridge with the gateway address (before any pod, so the forwarder can listen on it)."""
        _run(["ip", "link", "add", BRIDGE, "type", "bridge"])
        _run(["ip", "addr", "add", f"{GATEWAY}/24", "dev", BRIDGE])
        _run(["ip", "link", "set", BRIDGE, "up"])
        self.forwarder = Proxy(("127.0.0.1", self.cluster.apiserver_port), GATEWAY)
        self.forwarder.start()

    # ---- kubelet ----------------------------------------------------------------------------

    def _write_kubelet_files(self) -> Path:
        pki = self.cluster.workdir / "pki"
        directory = self.workdir / "kubelet-config"
        directory.mkdir(exist_ok=True)
        client_crt, client_key = issue_certificate(
            pki,
            f"kubelet-client-{self.name}",
            common_name=f"system:node:{self.name}",
            organizations=("system:nodes",),
        )
        serving_crt, serving_key = issue_certificate(
            pki,
            f"kubelet-serving-{self.name}",
            common_name=self.name,
            dns_names=(self.name, "localhost"),
            ip_addresses=("127.0.0.1",),
            server=True,
        )
        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "test",
                    "cluster": {"server": self.cluster.server, "certificate-authority": str(pki / "ca.crt")},
                }
            ],
            "users": [
                {
                    "name": "kubelet",
                    "user": {"client-certificate": str(client_crt), "client-key": str(client_key)},
                }
            ],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "kubelet"}}],
            "current-context": "test",
        }
        (directory / "kubeconfig").write_text(yaml.safe_dump(kubeconfig))
        self.kubelet_port = self.kubelet_port or free_port()
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": "127.0.0.1",
            "port": self.kubelet_port,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": free_port(),
            "cgroupDriver": "cgroupfs",
            "failSwapOn": False,
            "failCgroupV1": False,
            "makeIPTablesUtilChains": False,
            "evictionHard": {},
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(pki / "ca.crt")},
            },
            "authorization": {"mode": "Webhook"},
            "tlsCertFile": str(serving_crt),
            "tlsPrivateKeyFile": str(serving_key),
            "podLogsDir": str(self.pod_logs),
            "clusterDomain": "cluster.local",
            "resolvConf": "",
            "serializeImagePulls": False,
            "nodeStatusUpdateFrequency": "2s",
            "syncFrequency": "10s",
        }
        (directory / "config.yaml").write_text(yaml.safe_dump(config))
        return directory

    def start_kubelet(self, *, timeout: float = 120.0) -> None:
        """Start (or restart) kubelet and wait until the Node is Ready."""
        directory = self._write_kubelet_files()
        self.pod_logs.mkdir(exist_ok=True)
        process = self._spawn(
            "kubelet",
            [
                str(self.cluster.binary("kubelet")),
                f"--config={directory / 'config.yaml'}",
                f"--kubeconfig={directory / 'kubeconfig'}",
                f"--root-dir={self.kubelet_root}",
                f"--hostname-override={self.name}",
                "--v=2",
            ],
        )
        deadline = time.monotonic() + timeout
        last = "not registered"
        started = time.monotonic()
        while time.monotonic() < deadline:
            if process.popen.poll() is not None:
                raise self._fail("kubelet", f"exited with {process.popen.returncode}")
            status, node = self.cluster.request("GET", f"/api/v1/nodes/{self.name}")
            if status == 200:
                conditions = {c["type"]: c for c in node.get("status", {}).get("conditions", [])}
                ready = conditions.get("Ready", {})
                if ready.get("status") == "True" and ready.get("lastHeartbeatTime"):
                    heartbeat = ready["lastHeartbeatTime"]
                    if process.popen.poll() is None and heartbeat:
                        self.timings["node ready after kubelet start"] = round(time.monotonic() - started, 2)
                        return
                last = f"Ready={ready.get('status')}: {ready.get('message', '')}"
            time.sleep(0.5)
        raise self._fail("kubelet", f"Node {self.name} not Ready after {timeout:.0f}s ({last})")

    def stop_kubelet(self) -> None:
        if "kubelet" in self._processes:
            _terminate(self._processes.pop("kubelet").popen)

    def restart_runtime(self, *, timeout: float = 120.0) -> None:
        """Stop kubelet and containerd, then start both again (containers keep running meanwhile)."""
        self.stop_kubelet()
        self.stop_containerd()
        self.start_containerd(timeout=timeout)
        self.start_kubelet(timeout=timeout)

    # ---- teardown ---------------------------------------------------------------------------

    def _drain_pods(self, *, timeout: float) -> None:
        """Delete every DaemonSet and pod so that kubelet tears the sandboxes (and their
        network namespaces) down itself, then wait for containerd to run no task."""
        if "kubelet" not in self._processes or self._processes["kubelet"].popen.poll() is not None:
            return
        self.cluster.kubectl("delete", "daemonsets", "--all", "--all-namespaces", "--wait=false", check=False)
        self.cluster.kubectl(
            "delete", "pods", "--all", "--all-namespaces", "--grace-period=1", "--wait=false", check=False
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            tasks = self.ctr("tasks", "list", "--quiet", check=False).stdout.split()
            running = [t for t in tasks if t]
            if not running:
                return
            time.sleep(0.5)

    def _remove_containers(self) -> None:
        for task in self.ctr("tasks", "list", "--quiet", check=False).stdout.split():
            self.ctr("tasks", "kill", "--signal", "SIGKILL", task, check=False, timeout=20)
        time.sleep(0.5)
        for task in self.ctr("tasks", "list", "--quiet", check=False).stdout.split():
            self.ctr("tasks", "delete", "--force", task, check=False, timeout=20)
        for container in self.ctr("containers", "list", "--quiet", check=False).stdout.split():
            self.ctr("containers", "delete", container, check=False, timeout=20)

    def _kill_shims(self) -> None:
        """containerd's shims outlive it (their own sessions): kill those of THIS containerd by
        PID (their command line names this node's socket), then their children's process groups."""
        address = str(self.containerd_socket)
        for pid in _pids():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"containerd-shim" in cmdline[0] and address.encode() in cmdline:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    def _remember_outside_state(self) -> None:
        self._before = {
            "shim sockets": _names(SHIM_SOCKETS),
            "container log links": _names(CONTAINER_LOG_LINKS),
            "netns": _names(NETNS_DIR),
        }
        self._directories = [(hoststate.remember(path), tree) for path, tree in OUTSIDE_DIRECTORIES]
        self._sysctls = {path: _sysctl(path) for path in SYSCTLS}

    def _new_netns(self) -> set[str]:
        """Network namespaces of this node's sandboxes that were not there when it started."""
        new = _names(NETNS_DIR) - self._before.get("netns", set())
        return {name for name in new if name.startswith(NETNS_PREFIX)}

    def _remove_sandbox_netns(self) -> None:
        """Unmount and remove the network namespaces of this node's sandboxes.

        An ``ip netns add`` while they existed (the live LLDP test) bind-mounted /run/netns onto
        itself, recursively: that mount holds a copy of each sandbox's namespace mount, and the
        file cannot be removed while the copy below is there. So the self bind mounts made since
        the node started go first, then every mount on each sandbox's file, then the file. While
        another user's namespace is in /run/netns, its self bind mount is left alone, and a sandbox
        made before it stays pinned below it (``leftovers`` reports it).
        """
        state = next((s for s, _ in self._directories if s.path == NETNS_DIR), None)
        if state is not None and not hoststate.in_use(state, _foreign_entry(NETNS_DIR)):
            for _ in range(16):
                if hoststate.mounts_at(NETNS_DIR) <= state.mounts or not hoststate.unmount(
                    NETNS_DIR, lazy=True
                ):
                    break
        for name in self._new_netns():
            path = NETNS_DIR / name
            for _ in range(16):
                if not hoststate.mounts_at(path) or not hoststate.unmount(path, lazy=True):
                    break
            with contextlib.suppress(OSError):
                path.unlink()

    def _clean_outside_state(self) -> None:
        for process in list(self._processes.values()):
            _terminate(process.popen)
        self._processes.clear()
        # Processes left in the pod cgroups (containers whose shim died first): kill by PID.
        for directory in _kubepods_cgroups():
            for procs in directory.rglob("cgroup.procs"):
                with contextlib.suppress(OSError):
                    for pid in procs.read_text().split():
                        with contextlib.suppress(ProcessLookupError, ValueError):
                            os.kill(int(pid), signal.SIGKILL)
        time.sleep(0.2)
        # Mounts: kubelet's root-dir bind mount, pod volumes, overlay snapshots, sandbox shm.
        # umount2 itself (hoststate.unmount): util-linux's umount would make /run/mount, a trace of its own
        for point in sorted(_mount_points_under(self.workdir), key=len, reverse=True):
            hoststate.unmount(point, lazy=True)
        self._remove_sandbox_netns()
        subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True, check=False)
        for directory in _kubepods_cgroups():
            for sub in sorted((p for p in directory.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
                with contextlib.suppress(OSError):
                    sub.rmdir()
            with contextlib.suppress(OSError):
                directory.rmdir()
        for name in _names(CONTAINER_LOG_LINKS) - self._before.get("container log links", set()):
            link = CONTAINER_LOG_LINKS / name
            with contextlib.suppress(OSError):
                if link.is_symlink() and str(os.readlink(link)).startswith(str(self.pod_logs)):
                    link.unlink()
        for name in _names(SHIM_SOCKETS) - self._before.get("shim sockets", set()):
            with contextlib.suppress(OSError):
                (SHIM_SOCKETS / name).unlink()
        # The machine-wide directories this node created (a self bind mount unmounted first).
        for state, tree in self._directories:
            hoststate.restore(state, foreign=_foreign_entry(state.path), tree=tree)
        for path, value in self._sysctls.items():
            if value is not None and _sysctl(path) != value:
                with contextlib.suppress(OSError):
                    path.write_text(value + "\n")

    def leftovers(self) -> list[str]:
        """What ``stop()`` should have removed and is still there (for the cleanup test)."""
        found = [f"mount {p}" for p in _mount_points_under(self.workdir)]
        found += [f"netns {n}" for n in sorted(self._new_netns())]
        if Path(f"/sys/class/net/{BRIDGE}").exists():
            found.append(f"interface {BRIDGE}")
        found += [f"cgroup {d}" for d in _kubepods_cgroups()]
        found += [f"shim socket {n}" for n in _names(SHIM_SOCKETS) - self._before.get("shim sockets", set())]
        for state, _ in self._directories:
            found += hoststate.leftovers(state, foreign=_foreign_entry(state.path))
        found += [
            f"sysctl {path}: {_sysctl(path)} (was {value})"
            for path, value in self._sysctls.items()
            if value is not None and _sysctl(path) != value
        ]
        address = str(self.containerd_socket).encode()
        for pid in _pids():
            with contextlib.suppress(OSError):
                if address in Path(f"/proc/{pid}/cmdline").read_bytes():
                    found.append(f"process {pid}")
        return found


def _names(directory: Path) -> set[str]:
    try:
        return {p.name for p in directory.iterdir()}
    except OSError:
        return set()


def _pids() -> Iterator[int]:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            yield int(entry.name)


def _mount_points_under(directory: Path) -> list[str]:
    prefix = str(directory.resolve())
    points = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split()[4].encode().decode("unicode_escape")
            if point == prefix or point.startswith(prefix + "/"):
                points.append(point)
    return points


def _kubepods_cgroups() -> list[Path]:
    found = []
    with contextlib.suppress(OSError):
        for controller in CGROUP_ROOT.iterdir():
            for name in ("kubepods", "kubepods.slice"):
                if (controller / name).is_dir():
                    found.append(controller / name)
            if controller.name == "unified" and (controller / "kubepods").is_dir():
                pass
    return found


def _toml(value: dict[str, Any], prefix: str = "") -> str:
    """A minimal TOML writer for containerd's config (tables, strings, ints, bools, lists of str)."""
    lines: list[str] = []
    tables: list[tuple[str, dict[str, Any]]] = []
    for key, item in value.items():
        name = f'"{key}"' if "." in key else key
        if isinstance(item, dict):
            tables.append((f"{prefix}.{name}" if prefix else name, item))
        elif isinstance(item, bool):
            lines.append(f"{name} = {'true' if item else 'false'}")
        elif isinstance(item, int):
            lines.append(f"{name} = {item}")
        elif isinstance(item, list):
            lines.append(f"{name} = [{', '.join(json.dumps(v) for v in item)}]")
        else:
            lines.append(f"{name} = {json.dumps(str(item))}")
    out = "\n".join(lines) + ("\n" if lines else "")
    for table, items in tables:
        out += f"\n[{table}]\n" + _toml(items, table)
    return out
