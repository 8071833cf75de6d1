"""Writing a command's output to the path a user named: one rule for every command that writes a file.

``nodetopo ray --labels-file/--resources-file``, ``fabric -o``, ``export -o`` and ``capture --tar``
write through ``open_output``/``write_output``. What happens depends on what the path is (checked
with ``lstat``: the last component is never followed to decide):

* ``-``: standard output;
* nothing there: a new file, written atomically (a temporary file in the same directory, flushed,
  then renamed onto the path: a reader never sees half of it); missing parent directories are made;
* a regular file: replaced atomically the same way, keeping its permissions (and, as root, its
  owner), when its directory may be written; otherwise rewritten in place;
* ``/dev/stdout``, ``/dev/stderr``, ``/dev/fd/N`` or ``/proc/self/fd/N`` (or a link to one): the
  descriptor this process already has open, written at its offset (as bash does in a redirection:
  ``--resources-file /dev/stdout >> log`` appends to the log instead of truncating it);
* a symbolic link, a FIFO or a character device (``/dev/null``, a named pipe, a link to a file):
  written in place, through the link (a FIFO waits for its reader; a regular file is truncated first,
  as ``>`` does); never replaced, so the link, the pipe or the device stays what it was (issue 23:
  ``ray --resources-file /dev/stdout`` as root had turned the machine's ``/dev/stdout`` link into a
  regular file);
* anything else (a directory, a block device, a socket, a link to nothing or to one of those):
  refused with an ``OutputError`` naming the path, before anything is opened for writing.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from nodetopo.errors import NodetopoError

#: The ``--help`` text of an output path argument (``what``: what is written there).
OUTPUT_HELP = (
    "where to write {what}: '-' is standard output; a new or regular file is written atomically, a "
    "FIFO, character device or symbolic link in place; a directory or other special file is refused"
)


class OutputError(NodetopoError):
    """The output path is something nodetopo will not write over (one line, exit 1)."""


def output_help(what: str, *, default_stdout: bool = True) -> str:
    """``OUTPUT_HELP`` for ``what``, saying whether standard output is the default."""
    return OUTPUT_HELP.format(what=what) + ("; default: standard output" if default_stdout else "")


def is_stream(path: str | Path) -> bool:
    """Whether ``path`` is ``-``, an open descriptor (``/dev/stdout``), a FIFO or a character device,
    or a link to one: written as a stream (in place, in order), never replaced."""
    if str(path) == "-" or _descriptor_named(str(path)) is not None:
        return True
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)


def write_output(path: str | Path, data: str | bytes) -> None:
    """Write ``data`` (text as UTF-8) to ``path`` by the rules of the module doc."""
    if str(path) == "-" and isinstance(data, str):
        sys.stdout.write(data)  # text as text: sys.stdout may be replaced (no .buffer) by a caller
        sys.stdout.flush()
        return
    with open_output(path) as f:
        f.write(data.encode("utf-8") if isinstance(data, str) else data)


@contextlib.contextmanager
def open_output(path: str | Path) -> Iterator[IO[bytes]]:
    """A binary file object writing to ``path`` by the rules of the module doc. An atomic write
    takes effect when the ``with`` block ends without an exception (else its temporary file is
    removed and the path is left as it was)."""
    text = str(path)
    if text == "-":
        sys.stdout.flush()  # what was printed before comes first
        try:
            yield sys.stdout.buffer
        finally:
            sys.stdout.buffer.flush()
        return
    descriptor = _descriptor_named(text)
    if descriptor is not None:
        with _into_descriptor(descriptor, text) as f:
            yield f
        return
    target = Path(text)
    try:
        before: os.stat_result | None = target.lstat()
    except FileNotFoundError:
        before = None
    except OSError as e:
        raise OutputError(f"{text}: cannot be written: {e.strerror or e}") from None
    if before is not None and not stat.S_ISREG(before.st_mode):
        with _in_place(target, text) as f:
            yield f
        return
    if before is not None and not os.access(target, os.W_OK):
        raise OutputError(f"{text}: cannot be written: permission denied")  # as shell redirection says
    handle = _temporary_beside(target, text, before)
    if handle is None:  # a regular file in a directory this process may not write: in place
        with _in_place(target, text) as f:
            yield f
        return
    fd, temporary = handle
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        _check_unchanged(target, text, before)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


#: Paths that name a descriptor this process already has open (as bash treats them in a redirection)
_DESCRIPTOR_PATH = re.compile(r"/(?:dev/fd|proc/self/fd|proc/thread-self/fd)/(\d{1,9})")
_STANDARD = {"/dev/stdout": 1, "/dev/stderr": 2}


def _descriptor_named(path: str) -> int | None:
    """The descriptor ``path`` names, directly or through links: ``/dev/stdout``, ``/dev/stderr``,
    ``/dev/fd/N``, ``/proc/self/fd/N``. Writing there goes to that open descriptor, at its offset
    (appending where the shell opened it with ``>>``): reopening the path would start a new file
    position at 0 and truncate a redirected file."""
    current = os.path.normpath(os.path.abspath(path))
    for _ in range(40):  # the kernel's own limit on links followed
        if current in _STANDARD:
            return _STANDARD[current]
        match = _DESCRIPTOR_PATH.fullmatch(current)
        if match:
            return int(match.group(1))
        try:
            link = os.readlink(current)
        except OSError:
            return None  # not a link (or not there): an ordinary path
        current = os.path.normpath(os.path.join(os.path.dirname(current), link))
    return None


@contextlib.contextmanager
def _into_descriptor(descriptor: int, text: str) -> Iterator[IO[bytes]]:
    try:
        mode = os.fstat(descriptor).st_mode
    except OSError as e:
        raise OutputError(f"{text}: descriptor {descriptor} is not open: {e.strerror or e}") from None
    _check_writable_in_place(text, mode, through_link=False)
    if descriptor in (1, 2):  # what Python printed there before comes first
        (sys.stdout if descriptor == 1 else sys.stderr).flush()
    try:
        duplicate = os.dup(descriptor)
    except OSError as e:
        raise OutputError(f"{text}: cannot be written: {e.strerror or e}") from None
    with os.fdopen(duplicate, "wb") as f:
        yield f


def file_kind(mode: int) -> str:
    """What a file of ``st_mode`` ``mode`` that is not a regular file is, in words ("a directory"),
    for the messages that refuse it: an output path here, a host file in ``nodetopo.host``."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _check_writable_in_place(text: str, mode: int, through_link: bool) -> None:
    if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)):
        via = "a symbolic link to " if through_link else ""
        raise OutputError(
            f"{text}: is {via}{file_kind(mode)}; nodetopo writes only a new or regular file, a FIFO or a "
            "character device ('-' is standard output)"
        )


@contextlib.contextmanager
def _in_place(target: Path, text: str) -> Iterator[IO[bytes]]:
    """Open a link, FIFO or device (or a regular file that cannot be replaced) and write into it."""
    through_link = target.is_symlink()
    try:
        mode = target.stat().st_mode  # through the link
    except FileNotFoundError:
        raise OutputError(f"{text}: is a symbolic link to a path that does not exist") from None
    except OSError as e:
        raise OutputError(f"{text}: cannot be written: {e.strerror or e}") from None
    _check_writable_in_place(text, mode, through_link)
    flags = os.O_WRONLY | os.O_NOCTTY | os.O_CLOEXEC
    if stat.S_ISREG(mode):
        flags |= os.O_TRUNC
    try:
        fd = os.open(target, flags)  # never O_CREAT: a link to nothing is refused above
    except OSError as e:
        raise OutputError(f"{text}: cannot be written: {e.strerror or e}") from None
    try:
        _check_writable_in_place(text, os.fstat(fd).st_mode, through_link)  # what was opened
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, "wb") as f:
        yield f


def _temporary_beside(target: Path, text: str, before: os.stat_result | None) -> tuple[int, str] | None:
    """A new temporary file in the target's directory, with the mode the target has (or would get);
    None when a regular file's directory may not be written (then it is rewritten in place)."""
    directory = target.parent
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"{directory}: cannot make the directory: {e.strerror or e}") from None
    try:
        fd, temporary = tempfile.mkstemp(prefix=f".{target.name[:200]}.", suffix=".tmp", dir=directory)
    except OSError as e:
        if before is not None and e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            return None
        raise OutputError(f"{text}: cannot be written: {e.strerror or e}") from None
    try:
        if before is not None:
            os.fchmod(fd, stat.S_IMODE(before.st_mode))
            if os.geteuid() == 0:
                with contextlib.suppress(OSError):
                    os.fchown(fd, before.st_uid, before.st_gid)
        else:
            umask = os.umask(0o022)
            os.umask(umask)
            os.fchmod(fd, 0o666 & ~umask)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return fd, temporary


def _check_unchanged(target: Path, text: str, before: os.stat_result | None) -> None:
    """Right before the rename: the path is still absent, or still the same regular file."""
    try:
        now: os.stat_result | None = target.lstat()
    except FileNotFoundError:
        now = None
    same = (
        now is None
        if before is None
        else now is not None
        and stat.S_ISREG(now.st_mode)
        and (now.st_dev, now.st_ino) == (before.st_dev, before.st_ino)
    )
    if not same:
        raise OutputError(f"{text}: changed while it was being written; nothing was replaced")
