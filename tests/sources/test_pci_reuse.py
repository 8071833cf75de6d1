"""sysfs.pci reuses a device parsed in the last read when everything read for it is equal: every file
is still read every time, a change is seen at the next read, and each read's result equals what a
read without any reuse gives (the CPU-set budget of a read included)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from sysfs_trees import Link, pci_function, write_tree

from nodetopo.host import HostRoot
from nodetopo.model import PciDevice
from nodetopo.sources import _sysfs, pci

Result = tuple[tuple[PciDevice, ...], tuple[object, ...]]


def _fresh(root: HostRoot) -> Result:
    """A read with nothing to reuse (and nothing kept for later)."""
    return pci.read_pci_devices(root, pci._Memo())


def _read(root: HostRoot, memo: pci._Memo) -> Result:
    """A read that may reuse the last one's devices, checked against a read without reuse."""
    fresh = _fresh(root)
    result = pci.read_pci_devices(root, memo)
    assert result == fresh
    return result


@pytest.fixture
def memo() -> pci._Memo:
    """The devices of the last read of one test's reads (what a scan context keeps)."""
    return pci._Memo()


def test_an_unchanged_device_is_reused_and_a_changed_one_is_read_anew(
    tmp_path: Path, memo: pci._Memo
) -> None:
    entries = {**pci_function("0000:3b:00.0"), **pci_function("0000:3c:00.0", ("0000:00:01.0",))}
    root = write_tree(tmp_path, entries)
    first, _ = _read(root, memo)
    second, _ = _read(root, memo)
    assert all(a is b for a, b in zip(first, second, strict=True))  # reused: the very same values

    device_dir = tmp_path / "sys/devices/pci0000:00/0000:3b:00.0"
    (device_dir / "vendor").write_text("0x10de\n")
    third, _ = _read(root, memo)
    assert third[0].vendor == 0x10DE and third[1] is second[1]

    (device_dir / "driver").symlink_to("../../../bus/pci/drivers/nvidia")
    fourth, _ = _read(root, memo)
    assert fourth[0].driver == "nvidia" and fourth[1] is second[1]

    (device_dir / "class").unlink()
    fifth, conditions = _read(root, memo)
    assert fifth[0].class_code == 0
    assert [c.message for c in conditions] == [
        "/sys/bus/pci/devices/0000:3b:00.0/class: missing: reported as 0"
    ]

    (device_dir / "class").write_text("garbage\n")
    sixth, conditions = _read(root, memo)
    assert sixth[0].class_code == 0 and "expected a hex value" in conditions[0].message  # type: ignore[attr-defined]


def test_the_same_device_moved_in_the_tree_is_read_anew(tmp_path: Path, memo: pci._Memo) -> None:
    root = write_tree(tmp_path, pci_function("0000:3b:00.0", ("0000:00:01.0",)))
    first, _ = _read(root, memo)
    link = tmp_path / "sys/bus/pci/devices/0000:3b:00.0"
    link.unlink()
    write_tree(tmp_path, {**pci_function("0000:3b:00.0", ("0000:00:02.0",))})
    second, _ = _read(root, memo)
    assert [str(a) for a in first[0].upstream] == ["0000:00:01.0"]
    assert [str(a) for a in second[0].upstream] == ["0000:00:02.0"]


def _budget(monkeypatch: pytest.MonkeyPatch, budget: int) -> None:
    real = _sysfs.CpuSets
    monkeypatch.setattr(_sysfs, "CpuSets", lambda source: real(source, budget))


def test_a_reused_cpu_set_spends_the_budget_of_this_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, memo: pci._Memo
) -> None:
    """A device whose CPU list fitted the budget last read does not when a device listed before it now
    spends the budget: it is parsed anew, and refused, as a read without reuse does."""
    _budget(monkeypatch, 100)
    late = pci_function("0000:00:02.0", attributes={"local_cpulist": "0-63\n", "local_cpus": "1\n"})
    root = write_tree(tmp_path, late)
    devices, conditions = _read(root, memo)
    assert devices[0].local_cpus == frozenset(range(64))
    _read(root, memo)  # reused

    early = pci_function("0000:00:01.0", attributes={"local_cpulist": "64-163\n", "local_cpus": "1\n"})
    write_tree(tmp_path, early)
    devices, conditions = _read(root, memo)
    assert devices[0].local_cpus == frozenset(range(64, 164))
    assert devices[1].local_cpus is None  # local_cpus "1" is refused too: the budget is spent
    assert any("more distinct CPU sets" in c.message for c in conditions)  # type: ignore[attr-defined]

    # and back: the early device gone, the late one fits again
    (tmp_path / "sys/bus/pci/devices/0000:00:01.0").unlink()
    devices, conditions = _read(root, memo)
    assert devices[0].local_cpus == frozenset(range(64))
    assert not any("more distinct CPU sets" in c.message for c in conditions)  # type: ignore[attr-defined]


def test_reused_cpu_sets_are_still_shared_and_charged_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, memo: pci._Memo
) -> None:
    _budget(monkeypatch, 100)
    entries: dict[str, object] = {}
    for address, cpulist in (("0000:00:01.0", "0-63"), ("0000:00:02.0", "64-127"), ("0000:00:03.0", "0-63")):
        entries.update(
            pci_function(address, attributes={"local_cpulist": f"{cpulist}\n", "local_cpus": "1\n"})
        )
    entries.update(pci_function("0000:00:04.0", attributes={"local_cpulist": "128-130\n"}))
    root = write_tree(tmp_path, entries)  # type: ignore[arg-type]
    for _ in range(3):
        devices, conditions = _read(root, memo)
        assert devices[0].local_cpus is devices[2].local_cpus
        refused = [c.message for c in conditions if "more distinct CPU sets" in c.message]  # type: ignore[attr-defined]
        assert devices[3].local_cpus is None and len(refused) == 2  # 04.0's list and mask, nothing else
    (tmp_path / "sys/devices/pci0000:00/0000:00:01.0/local_cpulist").unlink()
    devices, conditions = _read(root, memo)
    assert devices[2].local_cpus == frozenset(range(64))


def test_a_dangling_driver_link_or_an_absolute_entry_link_is_reused_only_when_equal(
    tmp_path: Path, memo: pci._Memo
) -> None:
    entries = pci_function("0000:3b:00.0")
    entries["sys/bus/pci/devices/0000:3b:00.0"] = Link("/sys/devices/pci0000:00/0000:3b:00.0")
    entries["sys/devices/pci0000:00/0000:3b:00.0/driver"] = Link("../../../bus/pci/drivers/mlx5_core")
    root = write_tree(tmp_path, entries)
    for _ in range(2):
        _read(root, memo)


def test_what_is_kept_between_reads_is_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, memo: pci._Memo
) -> None:
    """Past the text budget of one read, devices are parsed every read (and still equal)."""
    entries: dict[str, object] = {}
    for i in range(12):
        entries.update(pci_function(f"0000:{i:02x}:00.0"))
    root = write_tree(tmp_path, entries)  # type: ignore[arg-type]
    real_dir = len(os.path.realpath(tmp_path / "sys/devices/pci0000:00/0000:00:00.0"))
    monkeypatch.setattr(pci, "_MEMO_TEXTS", 4 * real_dir)  # a few devices' paths, fewer than 4 devices
    for _ in range(2):
        _read(root, memo)
        assert 1 <= len(memo.last) < 4
    monkeypatch.setattr(pci, "_MEMO_TEXT_LIMIT", 10)  # no device is small enough
    _read(root, memo)
    assert memo.last == {}
