"""Every command that writes a file writes it by one rule (``nodetopo.command.output``), never over a link,
a pipe or a device (issue 23: ``nodetopo ray --resources-file /dev/stdout`` as root replaced the
machine's /dev/stdout link with a regular file).

The commands run in process (``nodetopo.cli.main``) against paths under ``tmp_path`` only: a
character device is reached through a link to /dev/null made here, a block device is a node made
here for a device number nothing uses (opening it could only fail), so no test can damage the
machine even where the code under test is wrong.
"""

from __future__ import annotations

import contextlib
import io
import os
import select
import socket
import stat
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import BUNDLES, REPO, nodetopology_of

from nodetopo.cli import main
from nodetopo.command import output
from nodetopo.command.output import OutputError, open_output, write_output

FABRIC = "fabric/ibnetdiscover/manpage-voltaire-isr9024-sw6ib4-dualport-hca.topo"


# ---- the commands ---------------------------------------------------------------------------------


def ray_labels(tmp_path: Path, out: str) -> list[str]:
    return ["ray", "--from", str(BUNDLES / "dgx-h100"), "--node-name", "n1", "--labels-file", out]


def ray_resources(tmp_path: Path, out: str) -> list[str]:
    return [*ray_labels(tmp_path, str(tmp_path / "labels.yaml")), "--resources-file", out]


def export_kueue(tmp_path: Path, out: str) -> list[str]:
    listing = tmp_path / "ntopo.yaml"
    listing.write_text(
        yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [nodetopology_of("dgx-h100", "n1")]})
    )
    return ["export", "kueue", "-f", str(listing), "-o", out]


def fabric_map(tmp_path: Path, out: str) -> list[str]:
    corpus = Path(os.environ.get("NODETOPO_CORPUS", REPO.parent / "shared" / "corpus")) / "real"
    if not (corpus / FABRIC).is_file():
        pytest.fail(f"the corpus file {corpus / FABRIC} is missing (../shared/corpus beside the checkout)")
    return ["fabric", "--from", str(corpus / FABRIC), "-o", out]


def capture_tar(tmp_path: Path, out: str) -> list[str]:
    return ["capture", out, "--tar", "--no-nvml", "--host-root", str(BUNDLES / "dgx-h100")]


#: (command, what its output starts with)
COMMANDS: dict[str, tuple[Any, bytes]] = {
    "ray-labels": (ray_labels, b"nodetopo.io/"),
    "ray-resources": (ray_resources, b"{"),
    "export": (export_kueue, b"apiVersion: kueue.x-k8s.io/"),
    "fabric": (fabric_map, b'{"kind":"nodetopo.io/fabric-map"'),
    "capture": (capture_tar, b"\x1f\x8b"),  # a gzip stream
}
ALL = sorted(COMMANDS)
#: capture never writes over an existing file: a bundle is not replaced (its own, stricter rule)
REPLACES_FILES = [c for c in ALL if c != "capture"]


def run(
    command: str, tmp_path: Path, out: str, capsys: pytest.CaptureFixture[bytes]
) -> tuple[int, bytes, str]:
    make, _ = COMMANDS[command]
    argv = make(tmp_path, out)
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err.decode("utf-8", errors="replace")


# ---- what the path is -----------------------------------------------------------------------------


@pytest.mark.parametrize("command", REPLACES_FILES)
def test_a_link_to_a_file_is_written_through_and_stays_a_link(
    command: str, tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    real = tmp_path / "real.txt"
    real.write_text("old\n")
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    code, _, err = run(command, tmp_path, str(link), capsysbinary)
    assert code == 0, err
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_bytes().startswith(COMMANDS[command][1])


@pytest.mark.parametrize("command", ALL)
def test_a_link_to_a_character_device_stays_a_link(
    command: str, tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    link = tmp_path / "stdout"
    link.symlink_to("/dev/null")  # what /dev/stdout is: a link (to /proc/self/fd/1)
    code, _, err = run(command, tmp_path, str(link), capsysbinary)
    assert code == 0, err
    assert link.is_symlink() and os.readlink(link) == "/dev/null"
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temporary left


@pytest.mark.parametrize("command", ALL)
def test_a_link_to_an_open_descriptor_writes_at_its_offset_like_dev_stdout(
    command: str, tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    """/dev/stdout is a link to /proc/self/fd/1: a link made here to /proc/self/fd/N of a file this
    test opened for appending (as ``>> log`` does) gets the output after what the file held; the
    file is not truncated and the link stays a link."""
    log = tmp_path / "log"
    log.write_bytes(b"before\n")
    fd = os.open(log, os.O_WRONLY | os.O_APPEND)
    try:
        link = tmp_path / "stdout"
        link.symlink_to(f"/proc/self/fd/{fd}")
        code, _, err = run(command, tmp_path, str(link), capsysbinary)
        assert code == 0, err
        assert link.is_symlink()
        data = log.read_bytes()
        assert data.startswith(b"before\n" + COMMANDS[command][1]), data[:80]
        code, _, err = run(command, tmp_path, f"/dev/fd/{fd}", capsysbinary)
        assert code == 0, err
        assert log.read_bytes().startswith(data) and len(log.read_bytes()) > len(data)
    finally:
        os.close(fd)


class FifoReader:
    """Reads a FIFO until its writer closes it (opened first, non-blocking: the writer never waits)."""

    def __init__(self, path: Path) -> None:
        os.mkfifo(path)
        self.path = path
        self.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        self.data = b""
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        poller = select.poll()
        poller.register(self.fd, select.POLLIN)
        writer_seen = False
        for _ in range(150):  # 15 s at most
            if not poller.poll(100):
                continue
            chunk = os.read(self.fd, 65536)
            if chunk:
                writer_seen = True
                self.data += chunk
            elif writer_seen:
                break  # EOF after a writer: it closed
            else:
                threading.Event().wait(0.05)  # no writer yet (POLLHUP before the first open)
        self.done.set()

    def close(self) -> bytes:
        self.done.wait(20)
        if self.done.is_set():
            os.close(self.fd)
        return self.data


@pytest.mark.parametrize("command", ALL)
def test_a_fifo_is_written_into_and_stays_a_fifo(
    command: str, tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    fifo = tmp_path / "pipe"
    reader = FifoReader(fifo)
    try:
        code, _, err = run(command, tmp_path, str(fifo), capsysbinary)
    finally:
        data = reader.close()
    assert code == 0, err
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert data.startswith(COMMANDS[command][1]), data[:80]


@pytest.mark.parametrize("command", ALL)
def test_a_directory_is_refused_in_one_line_and_left_alone(
    command: str, tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    directory = tmp_path / "out.tar.gz"  # capture --tar makes DIR.tar.gz of a name without the suffix
    directory.mkdir()
    (directory / "keep").write_text("x")
    code, _, err = run(command, tmp_path, str(directory), capsysbinary)
    assert code in (1, 2), err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert str(directory) in err
    assert sorted(p.name for p in directory.iterdir()) == ["keep"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


@pytest.mark.parametrize("command", ALL)
def test_dash_is_standard_output(
    command: str, tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    code, out, err = run(command, tmp_path, "-", capsysbinary)
    assert code == 0, err
    assert out.startswith(COMMANDS[command][1]), out[:80]
    assert not (tmp_path / "-").exists()
    if command == "capture":  # the archive alone on stdout: a readable tar.gz; the summary on stderr
        archive = tmp_path / "from-stdout.tar.gz"
        archive.write_bytes(out)
        with tarfile.open(archive) as tar:
            assert any(name.endswith("/sys") for name in tar.getnames())
        assert "captured" in err


@pytest.mark.parametrize("command", ALL)
def test_help_says_dash_is_standard_output(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    name = {"ray-labels": "ray", "ray-resources": "ray"}.get(command, command)
    argv = [name, "kueue", "--help"] if name == "export" else [name, "--help"]
    with pytest.raises(SystemExit):
        main(argv)
    text = " ".join(capsys.readouterr().out.split())
    assert "'-' is standard output" in text, text


# ---- the writer's rule, case by case --------------------------------------------------------------


def test_a_new_path_is_created_atomically_with_the_umask_mode(tmp_path: Path) -> None:
    target = tmp_path / "new" / "deeper" / "out.json"
    umask = os.umask(0o027)
    try:
        write_output(target, "{}\n")
    finally:
        os.umask(umask)
    assert target.read_text() == "{}\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert [p.name for p in target.parent.iterdir()] == ["out.json"]


def test_a_regular_file_is_replaced_atomically_keeping_its_mode(tmp_path: Path) -> None:
    target = tmp_path / "out.yaml"
    target.write_text("old\n")
    target.chmod(0o604)
    seen = target.stat().st_ino
    with open_output(target) as f:
        f.write(b"new\n")
        assert target.read_text() == "old\n"  # a reader sees the old file until the new one is whole
    assert target.read_text() == "new\n"
    assert target.stat().st_ino != seen  # renamed over, not rewritten
    assert stat.S_IMODE(target.stat().st_mode) == 0o604


def test_a_failed_write_leaves_the_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "out.yaml"
    target.write_text("old\n")
    with pytest.raises(RuntimeError), open_output(target) as f:
        f.write(b"half")
        raise RuntimeError("interrupted")
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.yaml"]


def test_a_regular_file_whose_directory_refuses_a_temporary_is_rewritten_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "out.yaml"
    target.write_text("old content\n")
    seen = target.stat().st_ino

    def refused(**_: Any) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(output.tempfile, "mkstemp", refused)
    write_output(target, "new\n")
    assert target.read_text() == "new\n" and target.stat().st_ino == seen


def test_a_new_path_in_a_directory_that_refuses_it_is_one_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refused(**_: Any) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(output.tempfile, "mkstemp", refused)
    with pytest.raises(OutputError, match="cannot be written: Permission denied"):
        write_output(tmp_path / "new.yaml", "x")


def test_a_link_to_nothing_is_refused_and_not_created(tmp_path: Path) -> None:
    link = tmp_path / "dangling"
    link.symlink_to(tmp_path / "nowhere")
    with pytest.raises(OutputError, match="symbolic link to a path that does not exist"):
        write_output(link, "x")
    assert link.is_symlink() and not (tmp_path / "nowhere").exists()


@contextlib.contextmanager
def unix_socket(path: Path) -> Iterator[None]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
        yield
    finally:
        sock.close()


def test_a_socket_a_block_device_and_links_to_them_are_refused_unopened(tmp_path: Path) -> None:
    sock = tmp_path / "sock"
    block = tmp_path / "block"
    # a device number no driver registers (the experimental range): opening it could only fail
    os.mknod(block, stat.S_IFBLK | 0o600, os.makedev(241, 77))
    with unix_socket(sock):
        for path, kind in ((sock, "a socket"), (block, "a block device")):
            link = tmp_path / f"link-to-{path.name}"
            link.symlink_to(path)
            with pytest.raises(OutputError, match=f"is {kind}"):
                write_output(path, "x")
            with pytest.raises(OutputError, match=f"is a symbolic link to {kind}"):
                write_output(link, "x")
            assert link.is_symlink() and path.lstat().st_mode == path.lstat().st_mode


def test_a_regular_file_this_user_may_not_write_is_refused_like_a_redirection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Renaming over a read-only file needs only the directory: the file's own mode is asked first
    (as a non-root user sees it: root may write any file, so the answer is stood in for here)."""
    target = tmp_path / "ro.txt"
    target.write_text("keep\n")
    monkeypatch.setattr(
        output.os, "access", lambda path, mode: not (Path(path) == target and mode == os.W_OK)
    )
    with pytest.raises(OutputError, match="permission denied"):
        write_output(target, "x")
    assert target.read_text() == "keep\n"


def test_dash_writes_text_to_whatever_sys_stdout_is() -> None:
    """A caller that replaced sys.stdout (contextlib.redirect_stdout, an embedding) gets the text."""
    with contextlib.redirect_stdout(io.StringIO()) as out:
        write_output("-", "labels: 1\n")
    assert out.getvalue() == "labels: 1\n"
