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
    (device / "sub" / "value").write_text("7\n")
    (device / "sub" / "escape").symlink_to(outside)
    (device / "linked-sub").symlink_to("sub")
    (device / "escaping-sub").symlink_to(outside.parent)
    return HostRoot(root), str(device), outside


NAMES = [
    *("vendor", "empty", "big", "sub", "escape", "inside", "dangling", "absent"),
    # <subdirectory>/<file> (gids/0)
    *("sub/value", "sub/absent", "sub/escape", "absent/value", "vendor/value"),
    *("linked-sub/value", "escaping-sub/secret", "../0000:00:01.0/vendor", "./vendor", "sub/"),
]


@pytest.mark.parametrize("name", NAMES)
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
        if name in ("escape", "sub/escape", "escaping-sub/secret"):
            assert fast[0] == "error" and "outside the root" in str(fast[1])
    finally:
        os.close(fd)


def test_a_directory_outside_the_root_is_not_opened(tmp_path: Path) -> None:
    root, _, outside = _tree(tmp_path)
    assert _sysfs.open_checked_directory(root, str(outside.parent)) is None
    assert _sysfs.open_checked_directory(root, str(tmp_path / "root" / "no-such-dir")) is None


@pytest.mark.parametrize("size", [0, 1, 4095, 4096, 5000, 64 * 1024])
def test_a_file_that_answers_a_page_per_read_is_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: int
) -> None:
    """sysfs's binary attributes answer at most a page per read: a read that returns a whole page is
    not taken for the end of the file (one that returns less is: files answer up to their end)."""
    root, device, _ = _tree(tmp_path)
    content = bytes(ord("a") + i % 26 for i in range(size))
    (Path(device) / "binary").write_bytes(content)
    real_read = os.read

    def page_at_a_time(fd: int, count: int) -> bytes:
        return real_read(fd, min(count, 4096))

    monkeypatch.setattr(os, "read", page_at_a_time)
    fd = _sysfs.open_checked_directory(root, device)
    assert fd is not None
    try:
        assert _sysfs.read_attribute_at(root, fd, "binary", f"{device}/binary") == content.decode()
    finally:
        os.close(fd)


def test_many_attributes_in_one_call_give_what_one_call_each_gives(tmp_path: Path) -> None:
    root, device, _ = _tree(tmp_path)
    fd = _sysfs.open_checked_directory(root, device)
    assert fd is not None
    try:
        texts, problems = _sysfs.read_attributes_at(root, fd, device, NAMES, shown_dir="/shown")
        one_by_one: list[str | None] = []
        errors: list[str] = []
        for name in NAMES:
            try:
                one_by_one.append(_sysfs.read_attribute(root, f"{device}/{name}", shown_as=f"/shown/{name}"))
            except _sysfs.Unreadable as e:
                one_by_one.append(None)
                errors.append(str(e))
        assert texts == one_by_one and [str(e) for e in problems] == errors
        assert len(errors) >= 6 and all(e.startswith("/shown/") for e in errors)
        # without a descriptor: the same, by path
        texts, problems = _sysfs.read_attributes_at(root, None, device, NAMES, shown_dir="/shown")
        assert texts == one_by_one and [str(e) for e in problems] == errors
    finally:
        os.close(fd)
