"""The link files a rescanning context (the agent's) keeps open between scans (``sources.linkfiles``):
the same readings as a fresh read, every live attribute read every scan, the capabilities read once
per directory, and a directory that changed (hot-plug, a capture replaced) read afresh."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from helpers import BUNDLES

from nodetopo.host import HostRoot, ReplayRunner
from nodetopo.model import PciAddress, RdmaDevice, RdmaPort
from nodetopo.sources import links
from nodetopo.sources.base import Context
from nodetopo.sources.linkfiles import LinkFiles
from nodetopo.topology.discover import bundle_context, scan

GPU = PciAddress.parse("0000:01:00.0")
PORT = PciAddress.parse("0000:00:01.0")
AER = "BadTLP 0\nTOTAL_ERR_COR {n}\n"


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _function(directory: Path, *, width: int = 16, max_width: int = 16, cor: int = 0) -> None:
    _write(directory / "current_link_speed", "16.0 GT/s PCIe\n")
    _write(directory / "current_link_width", f"{width}\n")
    _write(directory / "max_link_speed", "16.0 GT/s PCIe\n")
    _write(directory / "max_link_width", f"{max_width}\n")
    _write(directory / "aer_dev_correctable", AER.format(n=cor))


def _tree(tmp_path: Path) -> Path:
    """A root port and a GPU below it; the GPU's directory is returned."""
    port = tmp_path / "sys/devices/pci0000:00/0000:00:01.0"
    gpu = port / "0000:01:00.0"
    _function(port)
    _function(gpu)
    devices = tmp_path / "sys/bus/pci/devices"
    devices.mkdir(parents=True)
    os.symlink("../../../devices/pci0000:00/0000:00:01.0", devices / "0000:00:01.0")
    os.symlink("../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0", devices / "0000:01:00.0")
    return gpu


def _read(root: HostRoot, files: LinkFiles | None, memo: links.LinkMemo | None = None) -> dict[str, object]:
    readings, conditions = links.read_pcie_links(root, [PORT, GPU], memo, None, files)
    if files is not None:
        files.sweep()
    assert conditions == ()
    return {str(r.address): r for r in readings}


def test_a_kept_read_is_a_fresh_read_and_opens_no_attribute_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gpu = _tree(tmp_path)
    root, files = HostRoot(tmp_path), LinkFiles()
    first = _read(root, files)
    assert first == _read(root, None) and len(files) == 2 * 3  # 3 live attributes per function
    opened: list[str] = []
    real_open = os.open

    def counting(path: str, *args: object, **kwargs: object) -> int:
        opened.append(os.fspath(path))
        return real_open(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", counting)
    again = _read(root, files)
    # the two function directories are opened (to tell whether each is the same one), no attribute
    assert again == first and len(opened) == 2 and all("link_" not in p and "aer" not in p for p in opened)
    # a live attribute is read at every scan: a counter that rose, a width that dropped
    _write(gpu / "aer_dev_correctable", AER.format(n=7))
    _write(gpu / "current_link_width", "8\n")
    now = _read(root, files)[str(GPU)]
    assert (now.aer_correctable, now.current_width) == (7, 8)  # type: ignore[attr-defined]


def test_capabilities_are_read_once_per_directory_and_a_new_directory_is_read_afresh(tmp_path: Path) -> None:
    gpu = _tree(tmp_path)
    root, files = HostRoot(tmp_path), LinkFiles()
    assert _read(root, files)[str(GPU)].max_width == 16  # type: ignore[attr-defined]
    # what the link can do is fixed for the directory's lifetime: not read again while it is the same
    (gpu / "max_link_width").write_text("8\n")
    assert _read(root, files)[str(GPU)].max_width == 16  # type: ignore[attr-defined]
    # the device removed and added again (hot-plug): a new directory, read afresh
    shutil.rmtree(gpu)
    _function(gpu, width=4, max_width=8, cor=2)
    fresh = _read(root, files)[str(GPU)]
    assert (fresh.max_width, fresh.current_width, fresh.aer_correctable) == (8, 4, 2)  # type: ignore[attr-defined]
    assert fresh == _read(root, None)[str(GPU)]


def test_a_removed_device_is_dropped_and_its_descriptors_closed(tmp_path: Path) -> None:
    gpu = _tree(tmp_path)
    root, files = HostRoot(tmp_path), LinkFiles()
    _read(root, files)
    assert len(files) == 6
    shutil.rmtree(gpu)
    os.unlink(tmp_path / "sys/bus/pci/devices/0000:01:00.0")
    assert list(_read(root, files)) == [str(PORT)]
    assert len(files) == 3  # the GPU's three descriptors closed at the end of the scan
    files.close()
    assert len(files) == 0
    assert list(_read(root, files)) == [str(PORT)]  # read afresh after a close


def test_past_the_budget_directories_are_read_the_usual_way(tmp_path: Path) -> None:
    gpu = _tree(tmp_path)
    root, files = HostRoot(tmp_path), LinkFiles(budget=4)  # one function's three
    first = _read(root, files)
    assert len(files) == 3 and first == _read(root, None)
    _write(gpu / "current_link_width", "2\n")
    assert _read(root, files)[str(GPU)].current_width == 2  # type: ignore[attr-defined]


def test_port_counters_are_read_every_scan_and_a_replaced_directory_afresh(tmp_path: Path) -> None:
    counters = tmp_path / "sys/class/infiniband/mlx5_0/ports/1/counters"
    for name in links.PORT_COUNTERS:
        _write(counters / name, "0\n")
    _write(tmp_path / "sys/class/net/ib0/carrier_changes", "2\n")
    devices = [RdmaDevice(name="mlx5_0", ports=(RdmaPort(number=1, netdevs=("ib0",)),))]
    root, files, memo = HostRoot(tmp_path), LinkFiles(), links.PortMemo()
    (first,), _ = links.read_port_counters(root, devices, files, memo)
    assert len(files) == len(links.PORT_COUNTERS) + 1
    assert links.read_port_counters(root, devices, files, memo)[0] == (first,)
    (counters / "link_downed").write_text("3\n")
    (tmp_path / "sys/class/net/ib0/carrier_changes").write_text("5\n")
    (rose,), _ = links.read_port_counters(root, devices, files, memo)
    assert (dict(rose.counters)["link_downed"], rose.carrier_changes) == (3, 5)
    # another capture put in its place: a new directory, read afresh
    shutil.rmtree(counters)
    for name in links.PORT_COUNTERS:
        _write(counters / name, "9\n")
    (fresh,), _ = links.read_port_counters(root, devices, files, memo)
    assert dict(fresh.counters)["symbol_error"] == 9
    assert links.read_port_counters(root, devices)[0] == (fresh,)


@pytest.mark.parametrize(
    "bundle", ["dgx-h100", "dgx-h100-gpu-x8", "dgx-h100-nvlink-down", "dgx-h100-rail-half", "cpu-only"]
)
def test_a_rescanning_context_reads_what_a_one_off_scan_reads(bundle: str) -> None:
    """The agent's context (``rescans=True``) gives the facts and edges a one-off scan gives, at its
    first scan and at every rescan (the degraded edges included)."""
    once = scan(bundle_context(BUNDLES / bundle))
    ctx = bundle_context(BUNDLES / bundle, rescans=True)
    for _ in range(3):
        again = scan(ctx)
        assert again.facts == once.facts and again.edges == once.edges
        assert again.topology.health == once.topology.health
    assert len(ctx.cache.state(LinkFiles)) > 0
    # a one-off context keeps nothing open
    plain = bundle_context(BUNDLES / bundle)
    scan(plain)
    assert len(plain.cache.state(LinkFiles)) == 0


def test_the_pci_pass_reads_through_the_kept_files(tmp_path: Path) -> None:
    """``sysfs.pci`` offers the link texts through the rescanning context's kept files too."""
    gpu = _tree(tmp_path)
    for directory, cls in ((gpu.parent, "0x060400"), (gpu, "0x030200")):
        _write(directory / "class", cls + "\n")
        _write(directory / "vendor", "0x10de\n")
        _write(directory / "device", "0x2330\n")
    ctx = Context(root=HostRoot(tmp_path), runner=ReplayRunner({}), rescans=True)
    from nodetopo.sources import pci

    facts = pci.collect(ctx).facts
    first = links.collect(ctx, facts).facts.health.pcie
    files = ctx.cache.state(LinkFiles)
    assert len(files) == 6
    _write(gpu / "current_link_width", "8\n")
    facts = pci.collect(ctx).facts
    again = links.collect(ctx, facts).facts.health.pcie
    assert [r.current_width for r in first] == [16, 16] and [r.current_width for r in again] == [16, 8]
