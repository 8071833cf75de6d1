"""LLDP for real: two lldpd daemons in two network namespaces joined by a veth pair.

One namespace plays a switch (system name ``leaf-07``, port ids announced by interface name, as
SONiC and Cumulus do), the other a GPU node (lldpd's defaults: port id = MAC). Only those two
namespaces are touched; IPv6 is disabled on the veth ends, so no address exists at all (LLDP is
layer 2). The ``fabric.lldp`` source runs unchanged; its command runner only prefixes
``ip netns exec <ns>`` and the daemon's control socket.

Needs root and the Debian ``lldpd`` package: under ``CI=true`` their absence fails the test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import hoststate
import pytest

from nodetopo.host import CommandResult, HostRoot, SubprocessRunner
from nodetopo.sources.base import Context
from nodetopo.sources.fabric import lldp
from tests.sources.lldp_keyvalue import parse_lldp_keyvalue

pytestmark = pytest.mark.slow


def _require() -> None:
    missing = [tool for tool in ("lldpd", "lldpcli", "ip") if shutil.which(tool) is None]
    if os.geteuid() != 0:
        missing.append("root (network namespaces)")
    if missing:
        message = f"live LLDP test needs {', '.join(missing)} (Debian packages lldpd, iproute2)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


def run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=30)


def wait_configured(socket: Path) -> None:
    """Wait until the daemon answers on its socket with its -O file applied (tx-interval 1 s)."""
    deadline = time.monotonic() + 20
    while True:
        done = subprocess.run(
            ["lldpcli", "-u", str(socket), "-f", "keyvalue", "show", "configuration"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if done.returncode == 0 and "configuration.config.tx-delay=1\n" in done.stdout:
            return
        assert time.monotonic() < deadline, f"lldpd at {socket} not configured: {done.stdout}{done.stderr}"
        time.sleep(0.2)


def _lldpd_pids(marker: str = "") -> list[int]:
    """lldpd processes (with ``marker`` in their command line: this pair's socket directory)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if (proc / "comm").read_text().strip() == "lldpd" and marker.encode() in (
                proc / "cmdline"
            ).read_bytes():
                found.append(int(proc.name))
        except (OSError, ValueError):
            continue
    return found


class NetnsRunner:
    """Runs the source's command, unchanged, inside one network namespace."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.inner = SubprocessRunner()
        self.calls: list[tuple[str, ...]] = []

    def run(self, argv: Sequence[str], *, timeout: float) -> CommandResult:
        self.calls.append(tuple(argv))
        return self.inner.run(("ip", "netns", "exec", self.namespace, *argv), timeout=timeout)


def host_root(pair: Pair, side: str) -> HostRoot:
    """A host root whose run/lldpd.socket is that side's daemon socket (as /host/run in the DaemonSet)."""
    root = pair.tmp / f"{side}-root"
    (root / "run").mkdir(parents=True, exist_ok=True)
    link = root / "run" / "lldpd.socket"
    if not link.is_symlink():
        link.symlink_to(pair.socket(side))
    return HostRoot(root)


class Pair:
    def __init__(self, tmp: Path) -> None:
        tag = f"nt{os.getpid() % 100000}"
        self.host_ns, self.switch_ns = f"{tag}h", f"{tag}s"
        self.host_if, self.switch_if = f"{tag}vh", f"{tag}vs"
        self.tmp = tmp
        self.daemons: list[subprocess.Popen[bytes]] = []

    def socket(self, side: str) -> Path:
        return self.tmp / f"{side}.sock"

    def up(self) -> None:
        run("ip", "netns", "add", self.host_ns)
        run("ip", "netns", "add", self.switch_ns)
        run("ip", "link", "add", self.host_if, "type", "veth", "peer", "name", self.switch_if)
        for ns, iface in ((self.host_ns, self.host_if), (self.switch_ns, self.switch_if)):
            run("ip", "link", "set", iface, "netns", ns)
            run("ip", "netns", "exec", ns, "sysctl", "-qw", f"net.ipv6.conf.{iface}.disable_ipv6=1")
            run("ip", "-n", ns, "link", "set", iface, "up")
        # Each daemon starts paused and resumes after its -O file is read: a frame sent before a
        # `lldpcli configure` took effect would announce this machine's hostname and the MAC port id
        # (seen when two runs shared the machine).
        # The switch declares its capabilities: left to lldpd they follow this machine's
        # net.ipv4.ip_forward (a host with forwarding off would announce a Station only).
        settings = {
            "switch": (
                "system hostname leaf-07",
                "system capabilities enabled bridge,router",
                "lldp portidsubtype ifname",
                "lldp tx-interval 1",
            ),
            "host": ("lldp tx-interval 1",),
        }
        for side, ns, iface, extra in (
            (
                "switch",
                self.switch_ns,
                self.switch_if,
                ("-S", "SONiC Software Version: SONiC.test - HwSku: veth"),
            ),
            ("host", self.host_ns, self.host_if, ()),
        ):
            conf = self.tmp / f"{side}.conf"
            conf.write_text("".join(f"configure {line}\n" for line in settings[side]))
            log = (self.tmp / f"{side}.log").open("wb")
            self.daemons.append(
                subprocess.Popen(
                    [
                        "ip",
                        "netns",
                        "exec",
                        ns,
                        "lldpd",
                        "-d",
                        "-u",
                        str(self.socket(side)),
                        "-I",
                        iface,
                        "-O",
                        str(conf),
                        *extra,
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
        for side in ("switch", "host"):
            wait_configured(self.socket(side))

    def down(self) -> None:
        for daemon in self.daemons:
            daemon.terminate()
        for daemon in self.daemons:
            try:
                daemon.wait(timeout=10)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()
        # lldpd's privilege-separated half outlives the daemon a moment: wait for it too
        deadline = time.monotonic() + 10
        while _lldpd_pids(str(self.tmp)) and time.monotonic() < deadline:
            time.sleep(0.1)
        for ns in (self.host_ns, self.switch_ns):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30, check=False)


#: What the pair creates outside its directory when the machine has none: ``ip netns add`` makes
#: /run/netns (bind-mounted onto itself), lldpd its privilege-separation chroot /run/lldpd. Both are
#: put back as they were (tests/hoststate.py), so a fresh machine stays fresh.
NETNS_DIR = Path("/run/netns")
LLDPD_CHROOT = Path("/run/lldpd")


def _other_lldpd_running() -> bool:
    """An lldpd not started by this test (another run's, the host's) may be using /run/lldpd
    (called when this test's own daemons and their privilege-separated halves have ended)."""
    return bool(_lldpd_pids())


@pytest.fixture
def pair() -> Iterator[Pair]:
    _require()
    # lldpd's unprivileged half must reach its control socket: pytest's tmp_path (under a 0700
    # directory) is out of its reach, so the sockets live in a world-traversable directory.
    tmp = Path(tempfile.mkdtemp(prefix="nodetopo-lldp-"))
    tmp.chmod(0o755)
    p = Pair(tmp)
    netns, chroot = hoststate.remember(NETNS_DIR), hoststate.remember(LLDPD_CHROOT)
    try:
        p.up()
        yield p
    finally:
        p.down()
        shutil.rmtree(tmp, ignore_errors=True)
        ours = {p.host_ns, p.switch_ns}
        hoststate.restore(netns, foreign=lambda name: name not in ours)
        if not _other_lldpd_running():
            hoststate.restore(chroot, tree=True)
    left = hoststate.leftovers(netns, foreign=lambda name: name not in ours)
    if not _other_lldpd_running():
        left += hoststate.leftovers(chroot)
    assert not left, f"the live LLDP test left behind: {left}"


def collect_until_seen(root: HostRoot, runner: NetnsRunner, pair: Pair, peer: str) -> lldp.Facts:
    """Collect until the neighbour shows; meanwhile ask the peer's daemon to send a frame now.

    ``lldpcli update`` makes the peer transmit at once instead of at its next interval, so a frame
    sent before this side's daemon listened (seen once under a loaded CI run) is not waited for.
    """
    deadline = time.monotonic() + 30
    while True:
        facts = lldp.collect(Context(root=root, runner=runner)).facts
        if facts.network and facts.network[0].neighbours:
            return facts
        logs = {
            side: (pair.tmp / f"{side}.log").read_text(errors="replace")[-800:] for side in ("switch", "host")
        }
        assert time.monotonic() < deadline, (
            f"no LLDP neighbour after 30 s: {facts.conditions}; daemon logs: {logs}"
        )
        subprocess.run(["lldpcli", "-u", str(pair.socket(peer)), "update"], capture_output=True, timeout=10)
        time.sleep(0.5)


def test_a_node_learns_its_switch_and_port_from_real_lldpd(pair: Pair) -> None:
    runner = NetnsRunner(pair.host_ns)
    root = host_root(pair, "host")
    facts = collect_until_seen(root, runner, pair, "switch")
    # the socket is not at lldpcli's default place: the source names it
    assert runner.calls[0] == (
        "lldpcli",
        "-u",
        str(root.path / "run" / "lldpd.socket"),
        *lldp.LLDPCLI_ARGV[1:],
    )
    (observation,) = facts.network
    (n,) = observation.neighbours
    assert (n.nic, n.switch_name, n.switch_port, n.peer_is_switch, n.source) == (
        pair.host_if,
        "leaf-07",
        pair.switch_if,
        True,
        "fabric.lldp",
    )
    assert n.switch_id is not None and len(n.switch_id.split(":")) == 6
    assert [(t.level, t.id, t.name) for t in observation.tiers] == [(0, n.switch_id, "leaf-07")]
    assert facts.conditions == ()


def test_the_switch_side_sees_a_server_and_never_a_tier(pair: Pair) -> None:
    """lldpd's default on a host announces the port by MAC: the parser calls it a host, not a switch."""
    runner = NetnsRunner(pair.switch_ns)
    facts = collect_until_seen(host_root(pair, "switch"), runner, pair, "host")
    (observation,) = facts.network
    (n,) = observation.neighbours
    assert n.peer_is_switch is False and observation.tiers == ()
    (condition,) = facts.conditions
    assert (
        condition.source == "fabric.lldp" and "is a host, not a switch (port id is mac" in condition.message
    )
    # the same daemon's keyvalue form parses to the same neighbour
    text = subprocess.run(
        [
            "ip",
            "netns",
            "exec",
            pair.switch_ns,
            "lldpcli",
            "-u",
            str(pair.socket("switch")),
            "-f",
            "keyvalue",
            "show",
            "neighbors",
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout
    (kv,) = parse_lldp_keyvalue(text)
    assert (kv.interface, kv.port_id_type, kv.is_switch) == (pair.switch_if, "mac", False)
