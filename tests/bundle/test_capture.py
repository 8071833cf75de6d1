"""nodetopo.bundle.capture: a copy of the sysfs subset reads back as exactly the same facts."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from sysfs_trees import HWLOC_TREES, Dir, Link, gpud_infiniband_root, hwloc_tree, pci_function, write_tree

from nodetopo.bundle.capture import capture_bundle, capture_sysfs
from nodetopo.host import HostRoot
from nodetopo.model import Condition, Facts, NetDevice, NumaNode, PciDevice, RdmaDevice
from nodetopo.sources import links, numa, pci, rdma

SysfsFacts = tuple[
    tuple[tuple[NumaNode, ...], tuple[Condition, ...]],
    tuple[tuple[PciDevice, ...], tuple[Condition, ...]],
    tuple[tuple[RdmaDevice, ...], tuple[Condition, ...]],
    tuple[tuple[NetDevice, ...], tuple[Condition, ...]],
    Facts,
]


def read_all(root: HostRoot) -> SysfsFacts:
    """Everything the sysfs sources read, conditions included (they name host paths), and the link
    readings of the devices found."""
    devices = pci.read_pci_devices(root)
    rdma_devices = rdma.read_rdma_devices(root)
    found = Facts(pci_devices=devices[0], rdma_devices=rdma_devices[0])
    return (
        numa.read_numa_nodes(root),
        devices,
        rdma_devices,
        rdma.read_net_devices(root),
        links.read_links(root, found),
    )


@pytest.mark.corpus
@pytest.mark.parametrize("name", HWLOC_TREES)
def test_capture_of_each_hwloc_tree_reads_back_the_same_facts(
    name: str, corpus: Path, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    original = hwloc_tree(corpus, name, tmp_path_factory).root
    warnings = capture_sysfs(original, tmp_path)
    assert warnings == []
    copy = HostRoot(tmp_path)
    facts = read_all(original)
    assert read_all(copy) == facts
    assert any(part[0] for part in facts), "the tree must hold something for the comparison to mean anything"


@pytest.mark.corpus
def test_capture_of_the_gpud_infiniband_snapshot_reads_back_the_same_facts(
    corpus: Path, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    original = gpud_infiniband_root(corpus, tmp_path_factory)
    assert capture_sysfs(original, tmp_path) == []
    assert read_all(HostRoot(tmp_path)) == read_all(original)
    assert len(read_all(original)[2][0]) == 9
    assert len(read_all(original)[4].health.ports) == 9
    # only what the sources read is copied: the error counters, not the data counters beside them
    copied = {p.name for p in tmp_path.glob("sys/class/infiniband/*/ports/*/counters/*")}
    assert copied == set(links.PORT_COUNTERS)
    assert (original.path / "sys/class/infiniband/mlx5_0/ports/1/counters/port_rcv_data").is_file()


@pytest.mark.corpus
def test_capture_keeps_links_as_links_and_copies_only_what_is_read(
    corpus: Path, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    original = hwloc_tree(corpus, "32em64t-2n8c+dax+nvme+mic+dimms", tmp_path_factory).root
    capture_sysfs(original, tmp_path)
    for link in original.sys("bus/pci/devices").iterdir():
        copied = tmp_path / "sys" / "bus" / "pci" / "devices" / link.name
        assert copied.is_symlink() and os.readlink(copied) == os.readlink(link)
    hca = tmp_path / "sys/devices/pci0000:80/0000:80:02.2/0000:82:00.0"
    assert hca.is_dir() and not hca.is_symlink()
    assert (hca / "vendor").read_text() == "0x15b3\n"
    assert os.readlink(hca / "driver") == os.readlink(
        original.sys("devices/pci0000:80/0000:80:02.2/0000:82:00.0/driver")
    )
    assert not (hca / "config").exists() and not (hca / "resource").exists()
    # the dangling class/infiniband/scif0 link is kept as it is, dangling
    scif = tmp_path / "sys/class/infiniband/scif0"
    assert scif.is_symlink() and not scif.exists()
    copied_files = [p for p in tmp_path.rglob("*") if p.is_file() and not p.is_symlink()]
    original_files = [p for p in original.path.rglob("*") if p.is_file() and not p.is_symlink()]
    assert len(copied_files) < len(original_files) / 5


def test_unreadable_attributes_are_skipped_and_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # chmod 000 does not stop root (CI runs as root): fail the read itself instead
    source = write_tree(tmp_path / "host", pci_function("0000:3b:00.0"))
    real_read_bytes = HostRoot.read_bytes

    def read_bytes(self: HostRoot, path: str | os.PathLike[str], *, limit: int) -> bytes:
        if Path(path).name == "numa_node" and "host" in Path(path).parts:
            raise PermissionError(13, "Permission denied")
        return real_read_bytes(self, path, limit=limit)

    monkeypatch.setattr(HostRoot, "read_bytes", read_bytes)
    warnings = capture_sysfs(source, tmp_path / "copy")
    assert warnings == ["/sys/devices/pci0000:00/0000:3b:00.0/numa_node: not copied: Permission denied"]
    copied = tmp_path / "copy/sys/devices/pci0000:00/0000:3b:00.0"
    assert (copied / "vendor").read_text() == "0x15b3\n" and not (copied / "numa_node").exists()


def test_odd_trees_copy_their_oddities(tmp_path: Path) -> None:
    source = write_tree(
        tmp_path / "host",
        {
            **pci_function("0000:3b:00.0", attributes={"class": Dir(), "vendor": Link("missing")}),
            "sys/bus/pci/devices/0000:3c:00.0": Link("../../../devices/pci0000:00/0000:3c:00.0"),  # dangling
            "sys/devices/system/node/node0/cpulist": "0-1\n\x00",
            "sys/devices/system/node/node0/distance": "10\n",
            "sys/class/net/lo": Link("../../devices/virtual/net/lo"),
            "sys/class/infiniband": Dir(),
        },
    )
    assert capture_sysfs(source, tmp_path / "copy") == []
    copy = HostRoot(tmp_path / "copy")
    assert read_all(copy) == read_all(source)
    assert (tmp_path / "copy/sys/devices/system/node/node0/cpulist").read_bytes() == b"0-1\n\x00"


def test_capture_of_an_empty_root_is_empty(tmp_path: Path) -> None:
    (tmp_path / "host").mkdir()
    assert capture_sysfs(HostRoot(tmp_path / "host"), tmp_path / "copy") == []
    assert not any((tmp_path / "copy").rglob("*"))


def test_capture_bundle_runs_further_steps_and_keeps_going_when_one_fails(tmp_path: Path) -> None:
    source = write_tree(tmp_path / "host", {"sys/devices/system/cpu/online": "0-3\n"})

    def commands(bundle: Path) -> list[str]:
        (bundle / "cmd").mkdir()
        (bundle / "cmd" / "ibstat.txt").write_text("CA 'mlx5_0'\n")
        return ["nvidia-smi: not installed"]

    def broken(bundle: Path) -> list[str]:
        raise RuntimeError("NVML exploded")

    warnings = capture_bundle(source, tmp_path / "bundle", [broken, commands])
    assert warnings == ["broken: failed: RuntimeError: NVML exploded", "nvidia-smi: not installed"]
    assert (tmp_path / "bundle/sys/devices/system/cpu/online").read_text() == "0-3\n"
    assert (tmp_path / "bundle/cmd/ibstat.txt").is_file()


def test_live_host_sys_capture_reads_back_the_same_facts(tmp_path: Path) -> None:
    """Explicitly reads this machine's /sys (the one real, live tree the tests have)."""
    live = HostRoot("/")
    if not live.sys("devices/system/cpu/online").exists():
        pytest.skip("this machine has no sysfs")
    warnings = capture_sysfs(live, tmp_path)
    facts = read_all(live)
    assert read_all(HostRoot(tmp_path)) == facts, warnings


def test_capture_reads_like_discovery_confined_regular_and_bounded(tmp_path: Path) -> None:
    # A FIFO (blocked the old copy forever) and an over-long attribute are reported, never
    # copied; a link out of the root is kept as a link and never read through.
    source = write_tree(
        tmp_path / "host",
        {
            **pci_function("0000:3b:00.0", attributes={"vendor": Link("/dev/zero")}),
            "sys/devices/system/node/node0/distance": "10\n" + "1" * (64 * 1024),
        },
    )
    os.mkfifo(tmp_path / "host/sys/devices/system/node/node0/cpulist")
    result: list[list[str]] = []
    worker = threading.Thread(
        target=lambda: result.append(capture_sysfs(source, tmp_path / "copy")), daemon=True
    )
    worker.start()
    worker.join(timeout=30)
    assert not worker.is_alive(), "capture blocked on a FIFO or an endless file"
    (warnings,) = result
    assert sorted(w.split(": not copied: ")[0] for w in warnings) == [
        "/sys/devices/system/node/node0/cpulist",
        "/sys/devices/system/node/node0/distance",
    ]
    assert all("refused" not in w or len(w) < 200 for w in warnings)
    copy = tmp_path / "copy/sys"
    assert not (copy / "devices/system/node/node0/cpulist").exists()
    assert not (copy / "devices/system/node/node0/distance").exists()
    assert (copy / "devices/pci0000:00/0000:3b:00.0/class").exists()
    vendor = copy / "devices/pci0000:00/0000:3b:00.0/vendor"  # the link is kept; /dev/zero is never read
    assert vendor.is_symlink() and os.readlink(vendor) == "/dev/zero"
