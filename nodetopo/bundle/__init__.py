"""The capture bundle: a directory (or a ``.tar.gz`` of one) that stands for a node.

```
BUNDLE/
  sys/...                      a subset of /sys, symlinks kept
  cmd/nvidia-smi-topo-m.txt    `nvidia-smi topo -m`
  cmd/nvidia-smi-L.txt         `nvidia-smi -L`
  cmd/nvidia-smi-q.xml         `nvidia-smi -q -x`
  cmd/nvidia-smi-nvlink-s.txt  `nvidia-smi nvlink -s`
  cmd/ibstat.txt               `ibstat`
  cmd/ibv_devinfo.txt          `ibv_devinfo` (used when ibstat is missing)
  cmd/lldpcli-neighbors.json   `lldpcli -f json0 show neighbors` (LLDP neighbours, when lldpd runs)
  run/lldpd.socket             empty: lldpd answered the capture (its socket cannot be copied)
  nvml.json                    NVML dump (sources.nvml)
  manifest.json                where and when: host, kernel, driver and nodetopo versions, date
```

Every part is optional. A bundle is replayed through the same seams as a live host: ``HostRoot``
on the bundle directory and a ``ReplayRunner`` that answers each command from its file. A command
whose file is absent behaves as a tool that is not there ("not in the bundle"). ``cmd/<file>.rc``
(exit code) and ``cmd/<file>.stderr`` may sit beside an output to replay a failing command; an
``.rc`` file that says ``timeout`` replays a command that hung; one that says anything else but an
exit status replays as a refused output (a condition of its source, like an unreadable output).

``nodetopo capture --tar`` packs the directory into one ``.tar.gz``; ``discover --from`` unpacks such
an archive into a private temporary directory first, refusing whatever a bundle never holds (see
``extract_archive``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import posixpath
import re
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from nodetopo import sources
from nodetopo.errors import BundleError, ParseError, clip, excerpt
from nodetopo.host import (
    COMMAND_OUTPUT_LIMIT,
    COMMAND_STDERR_LIMIT,
    SMALL_FILE_LIMIT,
    HostRoot,
    Refused,
    Replay,
    ReplayRunner,
)
from nodetopo.jsonread import load_json
from nodetopo.sources.commands import Command

#: the commands a bundle holds the outputs of: every command a source declares with an output file
CAPTURED: tuple[Command, ...] = tuple(c for c in sources.COMMANDS if c.output is not None)
#: bundle file name -> the command line it is the output of
COMMANDS: dict[str, tuple[str, ...]] = {c.output: c.argv for c in CAPTURED if c.output is not None}

NVML_DUMP = "nvml.json"
#: what ``cmd/<file>.rc`` holds besides ``timeout``: an exit status as ``capture`` writes it (ASCII
#: digits only: ``str.isdigit`` takes ``²`` and ``int`` refuses it)
_EXIT_CODE = re.compile(r"-?[0-9]{1,9}", re.ASCII)

log = logging.getLogger(__name__)


def bundle_runner(bundle: Path) -> ReplayRunner:
    """A runner that answers the commands the sources declare (``COMMANDS``) from ``bundle/cmd``.

    Files are read as ``HostRoot.read_bytes`` reads them: a file that is a link out of the bundle,
    not a regular file (a FIFO, ``/dev/zero``) or larger than ``COMMAND_OUTPUT_LIMIT`` is not read;
    its command replays as ``CommandOutputRefused``, which the source reports as a condition.
    """
    root = HostRoot(bundle)
    answers: dict[tuple[str, ...], Replay | str | Path] = {}
    cmd_dir = os.fspath(bundle / "cmd")  # paths as strings: building Path objects cost more than the reads
    for filename, argv in COMMANDS.items():
        path = f"{cmd_dir}/{filename}"
        try:
            stdout = root.read_text(path, limit=COMMAND_OUTPUT_LIMIT)
        except FileNotFoundError:
            continue
        except (Refused, OSError) as e:
            answers[argv] = Replay(refused=str(e) if isinstance(e, Refused) else f"{filename}: {e.strerror}")
            continue
        rc_text = (_side_file(root, f"{path}.rc", SMALL_FILE_LIMIT) or "").strip() or "0"
        if rc_text != "timeout" and not _EXIT_CODE.fullmatch(rc_text):
            # not an exit code `capture` writes: the output cannot be trusted to replay as it ran
            answers[argv] = Replay(
                refused=f"cmd/{filename}.rc: not an exit code or 'timeout': {excerpt(rc_text)}"
            )
            continue
        answers[argv] = Replay(
            stdout=stdout,
            returncode=int(rc_text) if rc_text != "timeout" else 0,
            hang=rc_text == "timeout",
            stderr=_side_file(root, f"{path}.stderr", COMMAND_STDERR_LIMIT) or "",
        )
    captured = {argv[0] for argv in answers}
    files = {argv: filename for filename, argv in COMMANDS.items()}

    def absent(argv: tuple[str, ...]) -> str:
        """One output missing: name its file; the whole program missing: say it once."""
        if argv[0] in captured and argv in files:
            return f"not in the bundle (no cmd/{files[argv]})"
        return f"not in the bundle (no cmd/{argv[0]}* file)"

    return ReplayRunner(answers, absent=absent)


def _side_file(root: HostRoot, path: str, limit: int) -> str | None:
    """An optional ``.rc``/``.stderr`` file; None when absent or refused (too large, not a file)."""
    try:
        return root.read_text(path, limit=limit)
    except (Refused, OSError):
        return None


def open_bundle(path: str | Path) -> tuple[HostRoot, ReplayRunner, Path | None]:
    """Check a bundle (a directory, or an archive of one) and return its host root, runner and NVML
    dump path (or None)."""
    bundle = bundle_dir(path)
    if not bundle.is_dir():
        raise BundleError(
            f"{bundle}: not a directory or a .tar.gz (expected a capture bundle, see `nodetopo capture`)"
        )
    parts = [bundle / "sys", bundle / "cmd", bundle / NVML_DUMP]
    if not any(p.exists() for p in parts):
        raise BundleError(f"{bundle}: no sys/, cmd/ or {NVML_DUMP} inside: not a capture bundle")
    nvml = bundle / NVML_DUMP
    # present in any form (a FIFO or a link out of the bundle too): the NVML source refuses it then
    return HostRoot(bundle), bundle_runner(bundle), nvml if os.path.lexists(nvml) else None


# --------------------------------------------------------------------------------------------
# The manifest: where and when a bundle was captured
# --------------------------------------------------------------------------------------------

MANIFEST = "manifest.json"
MANIFEST_LIMIT = 64 * 1024
#: a manifest is one flat object; the nesting read before refusing
MANIFEST_DEPTH = 4
#: a Kubernetes node name (DNS-1123 subdomain); a manifest's host is used as one
_NODE_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Manifest:
    """``manifest.json``: written by ``nodetopo capture``, read by ``discover --from``.

    Every field may be None (an older bundle, a field that could not be read or did not validate).
    """

    host: str | None = None  #: the node name (``$NODE_NAME``, else the hostname)
    kernel: str | None = None  #: ``uname -r``
    driver: str | None = None  #: the NVIDIA driver version, when one is loaded
    nodetopo_version: str | None = None
    captured_at: str | None = None  #: RFC 3339, UTC

    def to_json(self) -> dict[str, object]:
        return {
            "format": 1,
            "host": self.host,
            "kernel": self.kernel,
            "driver": self.driver,
            "nodetopoVersion": self.nodetopo_version,
            "capturedAt": self.captured_at,
        }

    def describe(self) -> str:
        """One line for people, e.g. ``captured 2026-12-01T07:30:03.831Z on gpu-7 (kernel 6.8.0,
        driver 550.54.15, nodetopo 0.2.0)``."""
        details = [
            f"kernel {self.kernel}" if self.kernel else None,
            f"driver {self.driver}" if self.driver else None,
            f"nodetopo {self.nodetopo_version}" if self.nodetopo_version else None,
        ]
        extra = ", ".join(d for d in details if d)
        return " ".join(
            part
            for part in (
                "captured",
                self.captured_at,
                f"on {self.host}" if self.host else None,
                f"({extra})" if extra else None,
            )
            if part
        )


def parse_manifest(text: str, path: str = MANIFEST) -> Manifest:
    """A manifest from its JSON text. Fields of the wrong type or shape are dropped, not fatal;
    text that is not a JSON object (or is nested deeper than a manifest is) raises ``ParseError``."""
    data = load_json(text, source="bundle", path=path, max_depth=MANIFEST_DEPTH, max_chars=MANIFEST_LIMIT)
    if not isinstance(data, dict):
        raise ParseError("bundle", path, "not a JSON object", line=1)

    def field(key: str, pattern: str = r"[\x20-\x7e]{1,128}") -> str | None:
        value = data.get(key)
        return value if isinstance(value, str) and re.fullmatch(pattern, value) else None

    host = data.get("host")
    return Manifest(
        host=host.lower() if isinstance(host, str) and _NODE_NAME.fullmatch(host.lower()) else None,
        kernel=field("kernel"),
        driver=field("driver", r"[0-9A-Za-z.\-_]{1,32}"),
        nodetopo_version=field("nodetopoVersion", r"[0-9A-Za-z.+\-_]{1,64}"),
        captured_at=field("capturedAt", r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)"),
    )


def read_manifest(path: str | Path) -> Manifest | None:
    """The manifest of a bundle (a directory or an archive), or None when it has none or it is
    unreadable (an older bundle; a damaged manifest costs its facts, never the bundle)."""
    bundle = bundle_dir(path)
    try:
        text = HostRoot(bundle).read_text(bundle / MANIFEST, limit=MANIFEST_LIMIT)
    except FileNotFoundError:
        return None
    except (Refused, OSError) as e:
        log.warning("bundle %s: %s not read: %s", bundle, MANIFEST, e)
        return None
    try:
        return parse_manifest(text, os.fspath(bundle / MANIFEST))
    except ParseError as e:
        log.warning("%s", e)
        return None


def bundle_node_name(path: str | Path) -> str:
    """The node a bundle describes, the one rule of every command that reads bundles (when it is
    not given ``--node-name``): the host its manifest names, else the bundle's own name (the
    directory's, or the archive's without ``.tar.gz``/``.tgz``/``.tar``). Never the name of the
    machine reading it."""
    manifest = read_manifest(path)
    if manifest is not None and manifest.host:
        return manifest.host
    name = Path(path).name
    for suffix in ARCHIVE_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


def driver_version(root: HostRoot, bundle: Path | None = None) -> str | None:
    """The loaded NVIDIA driver's version: ``/sys/module/nvidia/version``, else the
    ``<driver_version>`` of a captured ``nvidia-smi -q -x``."""
    candidates: list[tuple[HostRoot, Path]] = [(root, root.sys("module", "nvidia", "version"))]
    if bundle is not None:
        candidates.append((HostRoot(bundle), bundle / "cmd" / "nvidia-smi-q.xml"))
    for where, path in candidates:
        try:
            text = where.read_text(path, limit=COMMAND_OUTPUT_LIMIT)
        except (FileNotFoundError, Refused, OSError):
            continue
        m = re.search(r"<driver_version>\s*([0-9A-Za-z.\-_]{1,32})\s*</driver_version>", text)
        if m:
            return m.group(1)
        if path.name == "version" and re.fullmatch(r"[0-9A-Za-z.\-_]{1,32}", text.strip()):
            return text.strip()
    return None


# --------------------------------------------------------------------------------------------
# Archives: `capture --tar`, `discover --from BUNDLE.tar.gz`
# --------------------------------------------------------------------------------------------

#: the most bytes an archive may unpack to (a real bundle is a few MiB: sysfs attributes are small)
ARCHIVE_MAX_BYTES = 256 * 2**20
#: the most bytes of one file in an archive (``nvidia-smi -q -x`` and ``nvml.json`` are the largest)
ARCHIVE_MAX_FILE_BYTES = 32 * 2**20
#: the most entries (a 1,000-function PCIe tree with its links and attributes is ~60,000)
ARCHIVE_MAX_MEMBERS = 250_000
#: the most bytes of one GNU long-name/long-link or pax record (a path is at most 4 KiB), checked
#: before the record is read
ARCHIVE_MAX_RECORD_BYTES = 64 * 1024
#: the most such records in front of one entry (a long name, a long link, a pax header: three)
ARCHIVE_MAX_RECORDS_PER_ENTRY = 4
#: the most links followed resolving one path of an archive (Linux's own limit)
ARCHIVE_MAX_LINK_HOPS = 40
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar")
#: the name of an unpack directory: ``<prefix><pid>-<random>`` (the pid tells a later run whether the
#: process that unpacked it is gone, killed before it could remove it)
UNPACK_PREFIX = "nodetopo-bundle-"

_extracted: dict[str, Path] = {}


def is_archive(path: str | Path) -> bool:
    p = Path(path)
    return p.is_file() and str(p).endswith(ARCHIVE_SUFFIXES)


def bundle_dir(path: str | Path) -> Path:
    """The directory of a bundle: ``path`` itself, or an archive unpacked (once per process) into a
    private temporary directory, removed at exit and on any failure or SIGTERM while unpacking;
    one that a killed process left behind is removed by the next unpack (``sweep_unpacked``)."""
    p = Path(path)
    if not is_archive(p):
        return p
    import atexit  # archives only: every discover imports this module
    import shutil
    import tempfile

    key = os.path.realpath(p)
    if key not in _extracted:
        sweep_unpacked(Path(tempfile.gettempdir()))
        dest = Path(tempfile.mkdtemp(prefix=f"{UNPACK_PREFIX}{os.getpid()}-"))
        atexit.register(shutil.rmtree, dest, True)
        try:
            with _terminate_as_exit():
                extract_archive(p, dest)
        except BaseException:
            shutil.rmtree(dest, ignore_errors=True)
            raise
        entries = list(dest.iterdir())
        # `capture --tar` puts the bundle in one top directory; a bare archive of sys/ cmd/ works too
        _extracted[key] = entries[0] if len(entries) == 1 and entries[0].is_dir() else dest
    return _extracted[key]


def sweep_unpacked(tmp: Path) -> list[str]:
    """Remove the unpack directories in ``tmp`` of processes that are gone (killed before their
    exit could remove them): ours (same owner), named ``UNPACK_PREFIX<pid>-…``, a directory, not a
    link, and no process ``pid`` alive. Returns the names removed."""
    import shutil

    removed: list[str] = []
    try:
        names = os.listdir(tmp)
    except OSError:
        return removed
    for name in names:
        m = re.fullmatch(re.escape(UNPACK_PREFIX) + r"([0-9]{1,10})-[A-Za-z0-9_]+", name)
        if m is None or int(m.group(1)) == os.getpid():
            continue
        try:
            st = os.lstat(tmp / name)
            os.kill(int(m.group(1)), 0)
        except ProcessLookupError:  # gone: its directory is an orphan
            if os.path.isdir(tmp / name) and not os.path.islink(tmp / name) and st.st_uid == os.getuid():
                shutil.rmtree(tmp / name, ignore_errors=True)
                removed.append(name)
        except (OSError, OverflowError):  # absent, or a process of another user (alive)
            continue
    return removed


class _Terminated(SystemExit):
    """SIGTERM while an archive unpacks: unwinds like ``sys.exit`` so the directory is removed."""


@contextlib.contextmanager
def _terminate_as_exit() -> Iterator[None]:
    """While unpacking (main thread only), SIGTERM exits through the cleanup instead of killing
    the process where it stands (the unpack holds no lock a handler could need)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum: int, frame: object) -> None:
        raise _Terminated(128 + signum)

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class _RecordRefused(Exception):
    """A header record no bundle holds (see ``_BoundedTarInfo``)."""


def _bounded_tarinfo() -> type:
    """A ``TarInfo`` that refuses, before reading it, a GNU long-name/long-link or pax record larger
    than ``ARCHIVE_MAX_RECORD_BYTES``, more than ``ARCHIVE_MAX_RECORDS_PER_ENTRY`` of them in front
    of one entry, and GNU sparse entries (``tarfile`` reads each of them whole into memory)."""
    import tarfile

    records = (
        tarfile.GNUTYPE_LONGNAME,
        tarfile.GNUTYPE_LONGLINK,
        tarfile.XHDTYPE,
        tarfile.XGLTYPE,
        tarfile.SOLARIS_XHDTYPE,
    )
    names = {tarfile.GNUTYPE_LONGNAME: "GNU long-name", tarfile.GNUTYPE_LONGLINK: "GNU long-link"}

    class _BoundedTarInfo(tarfile.TarInfo):
        def _proc_member(self, tarfile_: tarfile.TarFile) -> tarfile.TarInfo:
            if self.type == tarfile.GNUTYPE_SPARSE:
                raise _RecordRefused("a GNU sparse file (capture bundles hold none)")
            if self.type not in records:
                return super()._proc_member(tarfile_)  # type: ignore[misc, no-any-return]
            kind = names.get(self.type, "pax header")
            if self.size > ARCHIVE_MAX_RECORD_BYTES:
                raise _RecordRefused(
                    f"a {kind} record of {self.size} bytes (at most {ARCHIVE_MAX_RECORD_BYTES})"
                )
            depth = getattr(tarfile_, "_nodetopo_records", 0) + 1
            if depth > ARCHIVE_MAX_RECORDS_PER_ENTRY:
                raise _RecordRefused(
                    f"more than {ARCHIVE_MAX_RECORDS_PER_ENTRY} header records for one entry"
                )
            tarfile_._nodetopo_records = depth  # type: ignore[attr-defined]
            try:
                return super()._proc_member(tarfile_)  # type: ignore[misc, no-any-return]
            finally:
                tarfile_._nodetopo_records = depth - 1  # type: ignore[attr-defined]

    return _BoundedTarInfo


def resolves_inside(links: dict[str, str], path: str, *, max_hops: int = ARCHIVE_MAX_LINK_HOPS) -> bool:
    """Whether ``path`` (relative, normalised) stays inside the archive's top when every link of
    ``links`` (normalised name -> target) along it is followed, as the kernel would once they are
    all unpacked, whatever their order in the archive. A loop, an absolute target or more than
    ``max_hops`` links followed is refused too."""
    pending = [p for p in path.split("/") if p not in ("", ".")][::-1]  # a stack: next part last
    where: list[str] = []
    hops = 0
    while pending:
        part = pending.pop()
        if part == "..":
            if not where:
                return False
            where.pop()
            continue
        target = links.get("/".join((*where, part)))
        if target is None:
            where.append(part)
            continue
        hops += 1
        if hops > max_hops or target.startswith("/"):
            return False
        pending.extend(p for p in reversed(target.split("/")) if p not in ("", "."))
    return True


def extract_archive(
    archive: Path,
    dest: Path,
    *,
    max_bytes: int = ARCHIVE_MAX_BYTES,
    max_file_bytes: int = ARCHIVE_MAX_FILE_BYTES,
    max_members: int = ARCHIVE_MAX_MEMBERS,
) -> None:
    """Unpack a bundle archive into ``dest``, refusing (``BundleError``) anything a bundle never
    holds: a path that is absolute or climbs out with ``..``, a symlink whose target leaves the
    bundle (followed through every other link of the archive, in any order), a hard link, a device,
    a FIFO, a header record over ``ARCHIVE_MAX_RECORD_BYTES``; and more than ``max_members`` entries,
    one file over ``max_file_bytes`` or more than ``max_bytes`` in all. Every entry is checked before
    the first is written; Python's ``data`` extraction filter checks each again as it is written."""
    import tarfile

    total = 0
    links: dict[str, str] = {}
    try:
        with tarfile.open(archive, "r:*", tarinfo=_bounded_tarinfo()) as tar:
            members: list[tarfile.TarInfo] = []
            for count, member in enumerate(tar, start=1):
                name = member.name
                if count > max_members:
                    raise BundleError(f"{archive}: more than {max_members} entries: not a capture bundle")
                parts = PurePosixPath(name).parts
                if name.startswith("/") or ".." in parts or "\x00" in name:
                    raise BundleError(f"{archive}: {excerpt(name, 200)}: a path outside the bundle")
                if member.issym():
                    target = member.linkname
                    inside = posixpath.normpath(posixpath.join(posixpath.dirname(name), target))
                    if target.startswith("/") or inside == ".." or inside.startswith("../"):
                        why = f"a link out of the bundle ({excerpt(target, 200)})"
                        raise BundleError(f"{archive}: {excerpt(name, 200)}: {why}")
                    links[posixpath.normpath(name)] = target
                elif member.islnk():
                    raise BundleError(
                        f"{archive}: {excerpt(name, 200)}: a hard link (capture bundles hold none)"
                    )
                elif member.isfile():
                    total += member.size
                    if member.size > max_file_bytes:
                        raise BundleError(
                            f"{archive}: {excerpt(name, 200)}: larger than {max_file_bytes} bytes"
                        )
                    if total > max_bytes:
                        raise BundleError(f"{archive}: unpacks to more than {max_bytes} bytes")
                elif not member.isdir():
                    raise BundleError(
                        f"{archive}: {excerpt(name, 200)}: a device, FIFO or other special file"
                    )
                members.append(member)
            for member in members:  # every link and every path through links, once all are known
                name = posixpath.normpath(member.name)
                if not resolves_inside(links, name if member.issym() else posixpath.dirname(name)):
                    why = "a link" if member.issym() else "a path through links"
                    raise BundleError(f"{archive}: {excerpt(member.name, 200)}: {why} out of the bundle")
            for member in members:
                tar.extract(member, dest, filter="data")
    except _RecordRefused as e:
        raise BundleError(f"{archive}: not a capture bundle: {e}") from None
    except tarfile.TarError as e:  # FilterError included
        raise BundleError(f"{archive}: not a usable bundle archive: {clip(str(e), 300)}") from None
    except (OSError, EOFError) as e:
        raise BundleError(f"{archive}: could not be unpacked: {clip(str(e), 300)}") from None


def write_archive(bundle: Path, archive: str | Path) -> None:
    """Pack a bundle directory into ``archive`` (gzip-compressed tar; symlinks kept as links),
    under one top directory named like the archive (``bundle`` on standard output). Written through
    ``nodetopo.command.output``: a new file atomically (never half there), ``-``, a FIFO or a device
    as a stream."""
    import tarfile

    from nodetopo.command.output import open_output

    name = "bundle.tar.gz" if str(archive) == "-" else Path(archive).name
    top = name
    for suffix in ARCHIVE_SUFFIXES:
        if top.endswith(suffix):
            top = top[: -len(suffix)]
            break

    def anonymous(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        return info

    plain = name.endswith(".tar")
    with (  # stream modes: the output need not seek
        open_output(archive) as out,
        tarfile.open(fileobj=out, mode="w|") if plain else tarfile.open(fileobj=out, mode="w|gz") as tar,
    ):
        tar.add(bundle, arcname=top or "bundle", recursive=True, filter=anonymous)
