"""``_sysfs.read_attribute_at``: the per-directory fast path gives what ``read_attribute`` gives, and
never reads past the root."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nodetopo.host import HostRoot
from nodetopo.sources import _sysfs


def _tree(tmp_path: Path) -> tuple[HostRoot, str, Path]:
    root = tmp_path / "root"
    device = root / "sys" / "devices" / "pci0000:00" / "0000:00:01.0"
    device.mkdir(parents=True)
    (device / "vendor").write_text("0x10de\n")
    (device / "empty").write_text("")
    (device / "big").write_text("x" * (64 * 1024 + 1))
    (device / "sub").mkdir()
    outside = tmp_path / "secret"
    outside.write_text("host secret\n")
    (device / "escape").symlink_to(outside)
    (device / "inside").symlink_to("vendor")
    (device / "dangling").symlink_to("nowhere")
    return HostRoot(root), str(device), outside


@pytest.mark.parametrize("name", ["vendor", "empty", "big", "sub", "escape", "inside", "dangling", "absent"])
def test_same_answer_or_error_as_read_attribute(tmp_path: Path, name: str) -> None:
    root, device, _ = _tree(tmp_path)
    fd = _sysfs.open_checked_directory(root, device)
    assert fd is not None
    try:
        path = f"{device}/{name}"

        def outcome(read: object) -> object:
            try:
                return ("value", read())  # type: ignore[operator]
            except _sysfs.Unreadable as e:
                return ("error", str(e))

        fast = outcome(lambda: _sysfs.read_attribute_at(root, fd, name, path))
        slow = outcome(lambda: _sysfs.read_attribute(root, path))
        assert fast == slow
        if name == "escape":
            assert fast[0] == "error" and "outside the root" in str(fast[1])
    finally:
        os.close(fd)


def test_a_directory_outside_the_root_is_not_opened(tmp_path: Path) -> None:
    root, _, outside = _tree(tmp_path)
    assert _sysfs.open_checked_directory(root, str(outside.parent)) is None
    assert _sysfs.open_checked_directory(root, str(tmp_path / "root" / "no-such-dir")) is None
