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
``.rc`` file that says ``timeout`` replays a command that hung.

``nodetopo capture --tar`` packs the directory into one ``.tar.gz``; ``discover --from`` unpacks such
an archive into a private temporary directory first, refusing whatever a bundle never holds (see
``extract_archive``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import posixpath
import re
from pathlib import Path, PurePosixPath

from nodetopo import sources
from nodetopo.errors import BundleError
from nodetopo.host import (
    COMMAND_OUTPUT_LIMIT,
    COMMAND_STDERR_LIMIT,
    SMALL_FILE_LIMIT,
    HostRoot,
    Refused,
    Replay,
    ReplayRunner,
)
from nodetopo.sources.commands import Command

#: the commands a bundle holds the outputs of: every command a source declares with an output file
CAPTURED: tuple[Command, ...] = tuple(c for c in sources.COMMANDS if c.output is not None)
#: bundle file name -> the command line it is the output of
COMMANDS: dict[str, tuple[str, ...]] = {c.output: c.argv for c in CAPTURED if c.output is not None}

NVML_DUMP = "nvml.json"

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
        rc_text = _side_file(root, f"{path}.rc", SMALL_FILE_LIMIT) or "0"
        rc_text = rc_text.strip()
        answers[argv] = Replay(
            stdout=stdout,
            returncode=int(rc_text) if rc_text.lstrip("-").isdigit() and len(rc_text) < 10 else 0,
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


def parse_manifest(text: str) -> Manifest:
    """A manifest from its JSON text. Fields of the wrong type or shape are dropped, not fatal;
    text that is not a JSON object raises ``ValueError``."""
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")

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
        return parse_manifest(text)
    except ValueError as e:
        log.warning("bundle %s: %s is not a manifest: %s", bundle, MANIFEST, str(e)[:200])
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
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar")

_extracted: dict[str, Path] = {}


def is_archive(path: str | Path) -> bool:
    p = Path(path)
    return p.is_file() and str(p).endswith(ARCHIVE_SUFFIXES)


def bundle_dir(path: str | Path) -> Path:
    """The directory of a bundle: ``path`` itself, or an archive unpacked (once per process) into a
    private temporary directory that is removed at exit."""
    p = Path(path)
    if not is_archive(p):
        return p
    import atexit  # archives only: every discover imports this module
    import shutil
    import tempfile

    key = os.path.realpath(p)
    if key not in _extracted:
        dest = Path(tempfile.mkdtemp(prefix="nodetopo-bundle-"))
        atexit.register(shutil.rmtree, dest, True)
        try:
            extract_archive(p, dest)
        except BaseException:
            shutil.rmtree(dest, ignore_errors=True)
            raise
        entries = list(dest.iterdir())
        # `capture --tar` puts the bundle in one top directory; a bare archive of sys/ cmd/ works too
        _extracted[key] = entries[0] if len(entries) == 1 and entries[0].is_dir() else dest
    return _extracted[key]


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
    bundle, a hard link, a device, a FIFO; and more than ``max_members`` entries, one file over
    ``max_file_bytes`` or more than ``max_bytes`` in all. Python's ``data`` extraction filter checks
    each entry again as it is written (paths through links already unpacked, permissions)."""
    import tarfile

    total = 0
    try:
        with tarfile.open(archive, "r:*") as tar:
            for count, member in enumerate(tar, start=1):
                name = member.name
                if count > max_members:
                    raise BundleError(f"{archive}: more than {max_members} entries: not a capture bundle")
                parts = PurePosixPath(name).parts
                if name.startswith("/") or ".." in parts or "\x00" in name:
                    raise BundleError(f"{archive}: {name[:200]!r}: a path outside the bundle")
                if member.issym():
                    target = member.linkname
                    inside = posixpath.normpath(posixpath.join(posixpath.dirname(name), target))
                    if target.startswith("/") or inside == ".." or inside.startswith("../"):
                        raise BundleError(
                            f"{archive}: {name[:200]!r}: a link out of the bundle ({target[:200]!r})"
                        )
                elif member.islnk():
                    raise BundleError(f"{archive}: {name[:200]!r}: a hard link (capture bundles hold none)")
                elif member.isfile():
                    total += member.size
                    if member.size > max_file_bytes:
                        raise BundleError(f"{archive}: {name[:200]!r}: larger than {max_file_bytes} bytes")
                    if total > max_bytes:
                        raise BundleError(f"{archive}: unpacks to more than {max_bytes} bytes")
                elif not member.isdir():
                    raise BundleError(f"{archive}: {name[:200]!r}: a device, FIFO or other special file")
                tar.extract(member, dest, filter="data")
    except tarfile.TarError as e:  # FilterError included
        raise BundleError(f"{archive}: not a usable bundle archive: {e}") from None
    except (OSError, EOFError) as e:
        raise BundleError(f"{archive}: could not be unpacked: {e}") from None


def write_archive(bundle: Path, archive: str | Path) -> None:
    """Pack a bundle directory into ``archive`` (gzip-compressed tar; symlinks kept as links),
    under one top directory named like the archive (``bundle`` on standard output). Written through
    ``nodetopo.output``: a new file atomically (never half there), ``-``, a FIFO or a device as a stream."""
    import tarfile

    from nodetopo.output import open_output

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
