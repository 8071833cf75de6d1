"""The two seams through which nodetopo touches the host: a filesystem root and a command runner.

Production passes ``HostRoot("/")`` (``/host`` in the DaemonSet) and ``SubprocessRunner()``; tests
pass a fixture directory and a ``ReplayRunner`` that serves captured command outputs. Nothing else
in nodetopo opens host paths or starts processes.

Everything read from the host is untrusted input of bounded size: ``HostRoot.read_bytes`` reads
only regular files that resolve inside the root (a FIFO, a device such as ``/dev/zero``, or a link
out of a capture bundle to ``/etc/passwd`` is refused without being opened), and at most a limit
per kind of file (``SYSFS_ATTRIBUTE_LIMIT``, ``COMMAND_OUTPUT_LIMIT``, ``NVML_DUMP_LIMIT``);
``SubprocessRunner`` keeps at most ``COMMAND_OUTPUT_LIMIT`` bytes of a command's output and kills a
command that prints more.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import re
import stat
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from nodetopo.command.output import file_kind

if TYPE_CHECKING:
    import subprocess

#: the most bytes read of one sysfs attribute: the kernel prints at most one page (4 KiB on x86,
#: 64 KiB on arm64/POWER with large pages)
SYSFS_ATTRIBUTE_LIMIT = 64 * 1024
#: the most bytes of one command's output (``nvidia-smi -q -x`` of a 16-GPU node is ~2 MiB)
COMMAND_OUTPUT_LIMIT = 16 * 1024 * 1024
#: the most bytes of a command's stderr kept (the rest is read and dropped)
COMMAND_STDERR_LIMIT = 64 * 1024
#: the most bytes of an NVML dump (``nvml.json`` of an 8-GPU node is ~25 KiB, 72 GPUs ~1 MiB)
NVML_DUMP_LIMIT = 16 * 1024 * 1024
#: small side files of a bundle (``cmd/*.rc``)
SMALL_FILE_LIMIT = 4 * 1024

_PROC_FD = "/proc/self/fd"
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
#: a directory that is not itself a link, opened for ``*at`` calls only (opens nothing)
PLAIN_DIRECTORY_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Refused(Exception):
    """A host file nodetopo will not read; ``why`` says why (``str()`` adds the host path).

    Outside the root, not a regular file (FIFO, socket, device, directory), or larger than the
    limit for its kind. Never raised for a file that is simply absent (``FileNotFoundError``).
    """

    def __init__(self, host_path: str, why: str) -> None:
        super().__init__(f"{host_path}: refused: {why}")
        self.host_path = host_path
        self.why = why


def _read_fd(fd: int, limit: int, host_path: str) -> bytes:
    """At most ``limit`` bytes from ``fd`` until EOF; ``Refused`` when there are more."""
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = os.read(fd, min(limit + 1 - size, 1 << 20))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            raise Refused(host_path, f"larger than {limit} bytes, the limit for this kind of file")


class HostRoot:
    """A root directory standing for the host's ``/`` (like hwloc's ``HWLOC_FSROOT``)."""

    def __init__(self, path: str | os.PathLike[str] = "/") -> None:
        self.path = Path(path)
        try:  # the kernel resolves the root in one open (realpath lstat-s each of its components)
            self._real = _real_path(os.fspath(self.path))
        except OSError:  # absent (a root that is not there yet reads as empty): resolved by name
            self._real = os.path.realpath(self.path)
        self._kernel_sys: str | None = None  #: "<root>/sys/" when that is a sysfs mount (see read_bytes)
        self._kernel_sys_known = False
        self._sys_prefix = os.path.join(os.fspath(self.path), "sys") + "/"  #: see _in_kernel_sys

    def __repr__(self) -> str:
        return f"HostRoot({str(self.path)!r})"

    @property
    def real_path(self) -> Path:
        """The root with its own symlinks resolved (what ``resolve`` results are relative to)."""
        return Path(self._real)

    @property
    def is_this_system(self) -> bool:
        """True when the root is the real ``/``: only then may live-only sources (NVML) run."""
        return self.path.resolve() == Path("/")

    def sys(self, *parts: str) -> Path:
        """A path under ``<root>/sys``."""
        return self.path.joinpath("sys", *parts)

    def resolve(self, path: Path) -> Path:
        """Resolve symlinks of a path under this root, interpreting absolute links inside the root.

        sysfs uses relative links (``../../../devices/pci0000:00/...``), which resolve naturally;
        absolute links (seen in some captures) are re-rooted. Raises ``ValueError`` when the result
        escapes the root and ``FileNotFoundError`` for a dangling link.
        """
        root = self._real
        current = os.fspath(path)
        for _ in range(40):
            if not os.path.islink(current):
                break
            target = os.readlink(current)
            if os.path.isabs(target):
                current = os.path.join(root, target.lstrip("/"))
            else:
                current = os.path.join(os.path.dirname(current), target)
        resolved = _real_path(current)
        if resolved != root and not resolved.startswith(root.rstrip("/") + "/"):
            raise ValueError(f"{path} resolves outside the host root {root}: {resolved}")
        return Path(resolved)

    def open_link_directory(self, link: str) -> tuple[int, str] | None:
        """An ``O_PATH`` descriptor and the real path of the directory the symlink ``link`` points
        to, when that is provably what ``resolve`` gives; None in every other case, and the caller
        then asks ``resolve`` for its answer or its error.

        The kernel resolves the link in one open when it is a sysfs-style link: a relative target
        (an absolute one is re-rooted by ``resolve``, never followed to this machine's own files)
        naming a directory that is not itself a link (``O_NOFOLLOW``: a chain of links, one of which
        may be absolute, goes to ``resolve``). ``resolve`` then does the same: one hop, and the
        kernel resolves the rest of the path. ``/proc`` names what was opened, and it must lie
        inside the root. A plain directory, a dangling link, a loop, a file: None. The descriptor
        serves ``*at`` calls for the directory's files; the caller closes it.
        """
        try:
            target = os.readlink(link)
        except OSError:  # absent, or not a link
            return None
        if target.startswith("/"):
            return None
        head, slash, _ = link.rpartition("/")  # os.path.dirname, give or take a doubled slash
        try:
            fd = os.open(f"{head}/{target}" if slash else target, PLAIN_DIRECTORY_FLAGS)
        except OSError:
            return None
        try:
            real = os.readlink(f"{_PROC_FD}/{fd}")
        except OSError:
            real = ""
        if not real.startswith("/") or not self.contains(real):
            os.close(fd)
            return None
        return fd, real

    def relative(self, path: str | os.PathLike[str]) -> str:
        """``path`` as the host would name it (``/sys/...``), for messages."""
        text, base = os.fspath(path), os.fspath(self.path).rstrip("/")
        if base and text.startswith(base + "/"):
            return text[len(base) :]
        return text

    def contains(self, real: str) -> bool:
        """Whether a resolved path lies inside the root."""
        root = self._real
        return root == "/" or real == root or real.startswith(root + "/")

    def read_bytes(self, path: str | os.PathLike[str], *, limit: int) -> bytes:
        """The bytes of one regular file under the root, at most ``limit`` of them.

        Raises ``FileNotFoundError`` when it is absent (a dangling link included), ``Refused`` when
        it resolves outside the root, is not a regular file or is larger than ``limit``, and
        ``OSError`` when reading fails (sysfs answers ``EINVAL``/``ENODATA`` for "no value now").

        Under the live root ``/``, and under ``<root>/sys`` when that is a sysfs mount (the
        DaemonSet's ``/host/sys``: the kernel's own files, whose links stay inside it), the file is
        opened and ``fstat``-ed once: ``O_NONBLOCK`` keeps a FIFO from blocking the open. Under any
        other root or path (a capture bundle) the path is first opened with ``O_PATH``, which opens
        no device, and only a regular file inside the root is then reopened for reading, through
        the same descriptor (no window in which a link could be swapped).
        """
        text = os.fspath(path)
        if self._real == "/" or self._in_kernel_sys(text):
            try:
                return _read_regular(text, limit, "")
            except Refused as e:
                raise Refused(self.relative(path), e.why) from None
        try:
            handle = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise Refused(self.relative(path), "too many levels of symbolic links") from None
            raise  # absent, mostly: no host path to name
        host_path = self.relative(path)
        try:
            mode = os.fstat(handle).st_mode
            if not stat.S_ISREG(mode):
                raise Refused(host_path, file_kind(mode))
            try:
                real = os.readlink(f"{_PROC_FD}/{handle}")
            except OSError:  # no /proc: resolve the path instead (slower, same answer)
                real = os.path.realpath(path)
                reopen: str | Path = real
            else:
                reopen = f"{_PROC_FD}/{handle}"
            if not self.contains(real):
                raise Refused(host_path, "a link to a file outside the root")
            return _read_regular(reopen, limit, host_path)
        finally:
            os.close(handle)

    def _in_kernel_sys(self, text: str) -> bool:
        """Whether ``text`` lies lexically under ``<root>/sys`` and that is a sysfs mount (the mount
        table is read only for a path under ``<root>/sys/``: a bundle's cmd/ files never need it)."""
        if not text.startswith(self._sys_prefix):
            return False
        if not self._kernel_sys_known:
            self._kernel_sys_known = True
            try:
                mountinfo = read_regular_file("/proc/self/mountinfo", limit=4 << 20)
            except (OSError, Refused):
                mountinfo = b""
            mounts = sysfs_mount_points(mountinfo.decode("utf-8", errors="replace"))
            if kernel_sys_dir(os.fspath(self.path), mounts) is not None:
                self._kernel_sys = os.path.join(os.fspath(self.path), "sys") + "/"
        return self._kernel_sys is not None and text.startswith(self._kernel_sys) and "/.." not in text

    def read_text(self, path: str | os.PathLike[str], *, limit: int) -> str:
        """``read_bytes`` decoded as UTF-8, undecodable bytes replaced."""
        return self.read_bytes(path, limit=limit).decode("utf-8", errors="replace")

    def list_directory(self, path: str | os.PathLike[str]) -> list[str]:
        """The entry names of a directory under the root; ``Refused`` when it resolves outside.

        Raises ``OSError`` as ``os.listdir`` does (absent, not a directory, no permission).
        """
        if self._real == "/":
            return os.listdir(path)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            try:
                real = os.readlink(f"{_PROC_FD}/{fd}")
            except OSError:
                real = os.path.realpath(path)
            if not self.contains(real):
                raise Refused(self.relative(path), "a link to a directory outside the root")
            return os.listdir(fd)
        finally:
            os.close(fd)

    def statvfs(self, path: str | os.PathLike[str]) -> os.statvfs_result:
        """``os.statvfs`` of a path under the root (the size of a mount such as ``/dev/shm``);
        ``Refused`` when it resolves outside the root, ``OSError`` as ``os.statvfs`` raises it."""
        real = _real_path(os.fspath(path))
        if not self.contains(real):
            raise Refused(self.relative(path), "a link to a place outside the root")
        return os.statvfs(real)

    def accessible(self, path: str | os.PathLike[str], mode: int) -> bool:
        """Whether the file at ``path`` (a device node such as ``/dev/infiniband/uverbs0`` too) lies
        inside the root and may be opened with ``mode`` (``os.access``); False when it is absent.
        Nothing is opened."""
        try:
            real = _real_path(os.fspath(path))
        except OSError:
            return False
        return self.contains(real) and os.access(real, mode)


def _real_path(path: str) -> str:
    """``os.path.realpath(path, strict=True)`` in three system calls: the kernel resolves the path
    once (``O_PATH`` opens nothing) and ``/proc`` names what it found. realpath ``lstat``-s every
    component of the path, and a bundle's device directories are a dozen components deep."""
    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        return os.readlink(f"{_PROC_FD}/{fd}")
    except OSError:  # no /proc
        return os.path.realpath(path, strict=True)
    finally:
        os.close(fd)


def sysfs_mount_points(mountinfo: str) -> frozenset[str]:
    """The mount points of sysfs in the text of ``/proc/self/mountinfo`` (``\\040`` escapes decoded)."""
    points: set[str] = set()
    for line in mountinfo.splitlines():
        left, separator, right = line.partition(" - ")
        fields, filesystem = left.split(), right.split()
        if separator and len(fields) >= 5 and filesystem[:1] == ["sysfs"]:
            points.add(_OCTAL_ESCAPE.sub(lambda m: chr(int(m[1], 8)), fields[4]))
    return frozenset(points)


def kernel_sys_dir(root: str, sysfs_mounts: frozenset[str]) -> str | None:
    """``<root>/sys`` when it is itself a sysfs mount point, reached without any symlink.

    A bundle cannot mount sysfs; a bundle whose ``sys`` is a link to ``/sys`` (this machine's own)
    is not trusted: its reads take the confined path, which refuses them as outside the root.
    """
    real_root = os.path.realpath(root)
    sys_dir = os.path.join(real_root, "sys")
    if real_root == "/" or sys_dir not in sysfs_mounts or os.path.realpath(sys_dir) != sys_dir:
        return None
    return sys_dir


_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")


def _read_regular(path: str | Path, limit: int, host_path: str) -> bytes:
    fd = os.open(path, _OPEN_FLAGS)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise Refused(host_path, file_kind(mode))
        return _read_fd(fd, limit, host_path)
    finally:
        os.close(fd)


def read_regular_file(path: str | os.PathLike[str], *, limit: int) -> bytes:
    """A regular file's bytes, at most ``limit`` (``Refused`` otherwise); for paths given by a user."""
    text = os.fspath(path)
    return _read_regular(text, limit, text)


@dataclasses.dataclass(frozen=True, slots=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    duration_s: float = 0.0


class CommandError(Exception):
    """A command that gave no output to read: ``CommandNotFound``, ``CommandTimeout`` or
    ``CommandOutputRefused`` (``nodetopo.sources.commands`` maps each to a condition)."""


class CommandNotFound(CommandError):
    """The program is not there: not installed (live host) or not in the bundle (a replay).

    ``detail`` completes "<program> is ..." for messages.
    """

    def __init__(self, program: str, detail: str = "not installed (not found on PATH)") -> None:
        super().__init__(program)
        self.program = program
        self.detail = detail

    def __str__(self) -> str:
        return f"{self.program} is {self.detail}"


class CommandTimeout(CommandError):
    """The program did not finish within its timeout (and was killed)."""


class CommandOutputRefused(CommandError):
    """The program's output was not read: larger than its limit (the program was killed), or, when
    replayed from a bundle, its file is not a regular file inside the bundle."""


class CommandRunner(Protocol):
    """Runs a command and returns its output.

    Raises ``CommandNotFound``, ``CommandTimeout`` or ``CommandOutputRefused``.
    """

    def run(self, argv: Sequence[str], *, timeout: float) -> CommandResult: ...


class SubprocessRunner:
    """Runs commands for real, with a timeout, no shell and no stdin, and bounded output.

    At most ``output_limit`` bytes of stdout are accepted (more kills the command and raises
    ``CommandOutputRefused``); stderr beyond ``COMMAND_STDERR_LIMIT`` is read and dropped.
    ``search_path``: the directories (``PATH`` form) a program named without a ``/`` is looked for
    in, when not the command's own ``PATH`` (the environment it runs with is unchanged).
    """

    def __init__(
        self,
        env: Mapping[str, str] | None = None,
        *,
        output_limit: int = COMMAND_OUTPUT_LIMIT,
        search_path: str | None = None,
    ) -> None:
        self.env = dict(env) if env is not None else None
        self.output_limit = output_limit
        self.search_path = search_path

    def run(self, argv: Sequence[str], *, timeout: float) -> CommandResult:
        import subprocess  # here: reading a bundle or a pod's files starts no process (~3 ms of imports)

        start = time.monotonic()
        command = " ".join(argv)
        program = argv[0]
        if self.search_path is not None and "/" not in program:
            import shutil

            found = shutil.which(program, path=self.search_path)
            if found is None:
                raise CommandNotFound(program)
            program = found
        try:
            proc = subprocess.Popen(
                [program, *argv[1:]],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=self.env,
            )
        except FileNotFoundError as e:
            raise CommandNotFound(argv[0]) from e
        with proc:
            try:
                stdout, stderr = self._collect(proc, command, start + timeout, timeout)
            except BaseException:
                proc.kill()
                raise
            remaining = max(start + timeout - time.monotonic(), 0.0)
            try:
                returncode = proc.wait(remaining)
            except subprocess.TimeoutExpired:
                proc.kill()
                raise CommandTimeout(f"{command} did not finish in {timeout:g}s") from None
        return CommandResult(
            argv=tuple(argv),
            returncode=returncode,
            stdout=stdout.decode("utf-8", errors="replace"),
            stderr=stderr.decode("utf-8", errors="replace"),
            duration_s=time.monotonic() - start,
        )

    def _collect(
        self, proc: subprocess.Popen[bytes], command: str, deadline: float, timeout: float
    ) -> tuple[bytes, bytes]:
        """Read stdout and stderr until both close, within the deadline and the limits."""
        import selectors

        assert proc.stdout is not None and proc.stderr is not None
        limits = {proc.stdout.fileno(): self.output_limit, proc.stderr.fileno(): COMMAND_STDERR_LIMIT}
        kept: dict[int, list[bytes]] = {fd: [] for fd in limits}
        sizes = dict.fromkeys(limits, 0)
        with selectors.DefaultSelector() as selector:
            for fd in limits:
                selector.register(fd, selectors.EVENT_READ)
            while selector.get_map():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise CommandTimeout(f"{command} did not finish in {timeout:g}s")
                for key, _ in selector.select(remaining):
                    fd = key.fd
                    chunk = os.read(fd, 1 << 16)
                    if not chunk:
                        selector.unregister(fd)
                        continue
                    sizes[fd] += len(chunk)
                    if sizes[fd] <= limits[fd]:
                        kept[fd].append(chunk)
                    elif fd == proc.stdout.fileno():
                        raise CommandOutputRefused(
                            f"{command} printed more than {limits[fd]} bytes: stopped, output not read"
                        )
        return b"".join(kept[proc.stdout.fileno()]), b"".join(kept[proc.stderr.fileno()])[
            :COMMAND_STDERR_LIMIT
        ]


@dataclasses.dataclass(frozen=True, slots=True)
class Replay:
    """A canned answer for ``ReplayRunner``: stdout text, exit code, stderr, a hang, or a refusal.

    ``refused`` (a reason) replays an output that was not read (``CommandOutputRefused``).
    """

    stdout: str = ""
    returncode: int = 0
    stderr: str = ""
    hang: bool = False
    refused: str | None = None


class ReplayRunner:
    """Serves captured outputs instead of running anything. Unknown commands are not installed;
    ``absent`` (argv → text) says so otherwise, e.g. "not in the bundle (no cmd/ibstat.txt)"."""

    def __init__(
        self,
        answers: Mapping[tuple[str, ...], Replay | str | Path],
        *,
        absent: Callable[[tuple[str, ...]], str] | None = None,
    ) -> None:
        self.absent = absent
        self.answers: dict[tuple[str, ...], Replay] = {}
        for argv, answer in answers.items():
            if isinstance(answer, Path):
                try:
                    data = read_regular_file(answer, limit=COMMAND_OUTPUT_LIMIT)
                except Refused as e:
                    answer = Replay(refused=str(e))
                else:
                    answer = Replay(stdout=data.decode("utf-8", errors="replace"))
            elif isinstance(answer, str):
                answer = Replay(stdout=answer)
            self.answers[tuple(argv)] = answer
        self.calls: list[tuple[str, ...]] = []

    def run(self, argv: Sequence[str], *, timeout: float) -> CommandResult:
        key = tuple(argv)
        self.calls.append(key)
        answer = self.answers.get(key)
        if answer is None:
            if self.absent is None:
                raise CommandNotFound(key[0])
            raise CommandNotFound(key[0], self.absent(key))
        if answer.hang:
            raise CommandTimeout(f"{' '.join(key)} did not finish in {timeout:g}s")
        if answer.refused is not None:
            raise CommandOutputRefused(answer.refused)
        return CommandResult(key, answer.returncode, answer.stdout, answer.stderr)
