"""Capture a node into a bundle directory (see ``nodetopo.bundle``): the sysfs part, the manifest,
and the hook for the rest.

``capture_sysfs`` copies into ``DEST/sys`` exactly the subset of ``/sys`` that the sysfs sources
(``sources.numa``, ``sources.pci``, ``sources.rdma``) read, so that reading the copy gives the same
facts as reading the host. It works like ``cp -P`` / hwloc-gather-topology:

* symlinks are recreated as symlinks with the same target text (sysfs links are relative, so they
  keep working inside the bundle), and the real directories they lead to are created, so that the
  PCIe tree (``devices/pci*/...``) is there for ``HostRoot.resolve``;
* attribute files are copied by reading them (sysfs reports a size of 4096 for every attribute, so
  size-based copying is wrong) and writing the bytes;
* only the attributes the sources read are copied (the lists live in the source modules:
  ``numa.NODE_FILES``, ``pci.ATTRIBUTES``/``pci.LINKS``, ``rdma.*_ATTRIBUTES``, and the link readings
  of ``links``: PCIe link speed/width and AER totals of every function, the RDMA port error counters
  and ``carrier_changes``), never other counters or binary files such as ``config``;
* an attribute that cannot be read is skipped and its host path returned as a warning, except for
  the "no value now" answers (EINVAL/ENODATA: the speed of a link that is down), which the sources
  read as absent anyway.

``capture_commands`` writes the outputs of the commands the sources declare (``sources.COMMANDS``,
each with its file under ``DEST/cmd``), the same list the bundle's runner replays.

``capture_bundle`` is the whole capture: it runs ``capture_sysfs`` and then every further step
given to it (``capture_commands``, the NVML dump into ``DEST/nvml.json``: wired by the CLI),
collecting their warnings.
"""

from __future__ import annotations

import datetime
import errno
import json
import logging
import os
import platform
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path, PurePosixPath

from nodetopo import __version__
from nodetopo.bundle import CAPTURED, MANIFEST, Manifest, driver_version, parse_manifest
from nodetopo.host import (
    SYSFS_ATTRIBUTE_LIMIT,
    CommandNotFound,
    CommandRunner,
    CommandTimeout,
    HostRoot,
    Refused,
)
from nodetopo.sources import _sysfs, links, numa, pci, rdma

log = logging.getLogger(__name__)

#: a further capture step: writes into the bundle directory, returns warnings
CaptureStep = Callable[[Path], list[str]]

_MAX_LINKS = 40
_NO_VALUE_ERRNOS = frozenset({errno.EINVAL, errno.ENODATA, errno.EOPNOTSUPP})


def capture_bundle(root: HostRoot, dest: Path, steps: Sequence[CaptureStep] = ()) -> list[str]:
    """Write a capture bundle of ``root`` into ``dest``: sysfs first, then each of ``steps``.

    The command outputs (``cmd/*``, ``capture_commands``) and the NVML dump (``nvml.json``) are
    such steps; a step that raises is reported as a warning and the others still run.
    """
    dest.mkdir(parents=True, exist_ok=True)
    warnings = capture_sysfs(root, dest)
    for step in steps:
        try:
            warnings.extend(step(dest))
        except Exception as e:  # one failed part must not lose the rest of the bundle
            log.exception("capture step %s failed", getattr(step, "__name__", step))
            warnings.append(f"{getattr(step, '__name__', step)}: failed: {type(e).__name__}: {e}")
    return warnings


def write_manifest(root: HostRoot, dest: Path, host: str | None) -> Manifest:
    """Write ``dest/manifest.json`` (after the other parts: the driver version may come from the
    captured ``nvidia-smi -q -x``). Values that would not read back (a hostname that is not a valid
    node name) are left out, exactly as ``discover --from`` would drop them."""
    now = datetime.datetime.now(datetime.UTC)
    draft = Manifest(
        host=host.lower() if host else None,
        kernel=platform.release() or None,
        driver=driver_version(root, dest),
        nodetopo_version=__version__,
        captured_at=now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z",
    )
    manifest = parse_manifest(json.dumps(draft.to_json()))
    (dest / MANIFEST).write_text(json.dumps(manifest.to_json(), indent=1) + "\n")
    return manifest


def capture_commands(runner: CommandRunner, bundle: Path, *, timeout: float = 30.0) -> list[str]:
    """Run every command the sources declare an output file for (``bundle.CAPTURED``) and write its
    output into ``bundle/cmd``.

    A command that is not installed leaves no file (replayed as "not installed"). A failing one
    keeps its stdout plus ``.rc`` and ``.stderr`` so the failure replays too. Returns notes for the
    user, one per command.
    """
    cmd_dir = bundle / "cmd"
    cmd_dir.mkdir(parents=True, exist_ok=True)
    notes: list[str] = []
    for declared in CAPTURED:
        filename, command = declared.output, declared.line
        assert filename is not None
        try:
            result = runner.run(declared.argv, timeout=timeout)
        except CommandNotFound:
            notes.append(f"{command}: not installed, skipped")
            continue
        except CommandTimeout as e:
            (cmd_dir / filename).write_text("")
            (cmd_dir / (filename + ".rc")).write_text("timeout\n")
            (cmd_dir / (filename + ".stderr")).write_text(f"{e}\n")
            notes.append(f"{command}: timed out after {timeout:g}s")
            continue
        (cmd_dir / filename).write_text(result.stdout)
        if declared.answered_mark is not None and result.returncode == 0:
            # the source asks the command only where this file is (lldpd's socket): leave it
            mark = bundle / declared.answered_mark
            mark.parent.mkdir(parents=True, exist_ok=True)
            mark.write_text("")
        if result.returncode != 0:
            (cmd_dir / (filename + ".rc")).write_text(f"{result.returncode}\n")
            (cmd_dir / (filename + ".stderr")).write_text(result.stderr)
            notes.append(f"{command}: exit {result.returncode}, output kept")
        else:
            notes.append(f"{command}: ok")
    return notes


def capture_sysfs(root: HostRoot, dest: Path) -> list[str]:
    """Copy the sysfs subset the sysfs sources read from ``root`` into ``dest/sys``.

    Returns warnings: host paths that could not be copied, and why. Raises nothing for a missing or
    odd host tree (a part that is not there is simply not in the copy).
    """
    copier = _Copier(root, dest)
    for path in _sysfs_paths(root):
        copier.copy(path.relative_to(root.path), follow=path.name not in _KEEP_AS_LINK)
    return copier.warnings


# The names that the sources read as links, not through them (``driver``: only its basename).
_KEEP_AS_LINK = frozenset(pci.LINKS)


def _with_files(directory: Path, names: Iterable[str]) -> Iterable[Path]:
    """``directory``, then each of the files ``names`` in it."""
    yield directory
    for name in names:
        yield directory / name


def _sysfs_paths(root: HostRoot) -> Iterable[Path]:
    """Every path the sysfs sources read (or list) under ``root``, in a stable order."""
    yield root.sys(numa.CPU_ONLINE)
    yield root.sys(numa.NODE_ONLINE)
    node_dir = root.sys(numa.NODE_DIR)
    for _, directory in _sysfs.numbered_entries(node_dir, "node"):
        yield from _with_files(directory, numa.NODE_FILES)

    pci_dir = root.sys(pci.DEVICES_DIR)
    yield pci_dir
    for name in _sysfs.list_directory(pci_dir):
        yield from _with_files(pci_dir / name, (*pci.ATTRIBUTES, *pci.LINKS, *links.PCI_ATTRIBUTES))

    ib_dir = root.sys(rdma.INFINIBAND_DIR)
    yield ib_dir
    for name in _sysfs.list_directory(ib_dir):
        entry = ib_dir / name
        yield from _with_files(entry, (*rdma.DEVICE_ATTRIBUTES, "device"))
        for _, port in _sysfs.numbered_entries(entry / "ports", ""):
            yield from _with_files(port, rdma.PORT_ATTRIBUTES)
            for counter in links.PORT_COUNTERS:
                yield port / "counters" / counter
        net_dir = entry / "device" / "net"
        for netdev in _sysfs.list_directory(net_dir):
            yield from _with_files(net_dir / netdev, (*rdma.NET_ATTRIBUTES, *links.NET_COUNTERS))

    net_dir = root.sys(rdma.NET_DIR)
    yield net_dir
    for name in _sysfs.list_directory(net_dir):
        yield from _with_files(net_dir / name, ("device", *rdma.NET_ATTRIBUTES, *links.NET_COUNTERS))


class _Copier:
    """Replicates paths of a source root under a destination, walking symlinks like realpath."""

    def __init__(self, root: HostRoot, dest: Path) -> None:
        self.source = root.path
        self.root = root
        self.dest = dest
        self.warnings: list[str] = []
        self._done: set[tuple[PurePosixPath, bool]] = set()

    def copy(self, relative: Path, *, follow: bool = True) -> None:
        """Make ``relative`` (a path under the source root) readable the same way under dest.

        Every symlink met on the way is recreated, every directory is created at its physical
        place, and the final file's bytes are copied. With ``follow`` False a final symlink is
        recreated but not followed.
        """
        key = (PurePosixPath(relative), follow)
        if key in self._done:
            return
        self._done.add(key)
        physical: list[str] = []  # the resolved path so far: no symlinks in it
        pending = list(PurePosixPath(relative).parts)
        links = 0
        while pending:
            part = pending.pop(0)
            if part in ("", "."):
                continue
            if part == "..":
                if physical:
                    physical.pop()
                continue
            here = [*physical, part]
            src = self.source.joinpath(*here)
            dst = self.dest.joinpath(*here)
            is_last = not pending
            if src.is_symlink():
                target = os.readlink(src)
                self._make_link(dst, target)
                if is_last and not follow:
                    return
                links += 1
                if links > _MAX_LINKS:
                    self.warnings.append(f"{self.root.relative(src)}: too many levels of symlinks")
                    return
                target_parts = list(PurePosixPath(target).parts)
                if target.startswith("/"):
                    physical = []
                    target_parts = target_parts[1:]
                pending = target_parts + pending
                continue
            if src.is_dir():
                dst.mkdir(parents=True, exist_ok=True)
                physical = here
                continue
            if not src.exists():
                return  # absent (or dangling further on): absent in the copy too
            if not is_last:
                return  # a file in the middle of a path: nothing below it to copy
            self._copy_file(src, dst)
            return

    def _make_link(self, dst: Path, target: str) -> None:
        if dst.is_symlink():
            return
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, dst)

    def _copy_file(self, src: Path, dst: Path) -> None:
        # The same confined, bounded read discovery uses: a FIFO, a device, a link out of the root
        # or an over-long attribute is reported, never followed, blocked on or read to exhaustion.
        try:
            data = self.root.read_bytes(src, limit=SYSFS_ATTRIBUTE_LIMIT)
        except Refused as e:
            self.warnings.append(f"{e.host_path}: not copied: {e.why}")
            return
        except FileNotFoundError:
            return  # vanished between the walk and the read (a device went away)
        except OSError as e:
            if e.errno not in _NO_VALUE_ERRNOS:
                self.warnings.append(f"{self.root.relative(src)}: not copied: {e.strerror or e}")
            return
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(data)
