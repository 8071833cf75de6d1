"""Machine-wide directories a test run may create, and how to undo exactly that.

Some tests create state outside their own work directory that the next run finds already there:
containerd (the real node, tests/node) creates ``/run/netns`` for its first pod's network namespace;
iproute2 (``ip netns add``: the live LLDP test, which runs while the session's node is still up)
creates it too, and bind-mounts it onto itself when it is not a mount point yet (so that namespace
mounts below it propagate); lldpd creates its ``/run/lldpd`` chroot; libcni its ``/var/lib/cni``
cache; the kubelet ``/var/lib/kubelet`` and ``/var/log/containers``; util-linux's ``mount`` and
``umount`` ``/run/mount``. A teardown that only ``rmdir``s cannot remove a mount point, and a
leftover check that compares with a "before" taken on a machine that had run the suite once never
sees it: only the first run on a fresh machine fails.

``remember(path)`` records whether ``path`` existed and how many mounts sit on it; ``restore``
unmounts what was mounted on it since, then removes it when it was created since; ``leftovers``
says, by the same rule, what is still not as it was. A directory that holds an entry this run does
not own (``foreign``: another test run's network namespace) is in use and left alone by both.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import os
import shutil
from collections.abc import Callable
from pathlib import Path

MOUNTINFO = Path("/proc/self/mountinfo")
MNT_DETACH = 2  #: umount2(2): detach now, free when no longer busy (``umount -l``)
_LIBC = ctypes.CDLL(None, use_errno=True)


def unmount(path: Path | str, *, lazy: bool = False) -> bool:
    """umount2(2) itself, not util-linux's ``umount``: that one creates /run/mount (libmount's
    utab directory) on a machine that has none, a trace of its own. True when it unmounted."""
    return bool(_LIBC.umount2(os.fsencode(str(path)), MNT_DETACH if lazy else 0) == 0)


@dataclasses.dataclass(frozen=True, slots=True)
class DirectoryState:
    """What ``path`` was when a run began."""

    path: Path
    existed: bool
    mounts: int  #: mounts whose mount point is exactly ``path``


def _unescape(field: str) -> str:
    """A mountinfo path field: space, tab, newline and backslash are written as octal escapes."""
    out, i = [], 0
    while i < len(field):
        code = field[i + 1 : i + 4]
        if field[i] == "\\" and len(code) == 3 and code.isdigit():
            out.append(chr(int(code, 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def _visible_mount_id(path: Path) -> int | None:
    """The id of the mount that ``path`` resolves to (the kernel's answer, in /proc/self/fdinfo)."""
    try:
        fd = os.open(path, os.O_PATH | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        for line in Path(f"/proc/self/fdinfo/{fd}").read_text().splitlines():
            if line.startswith("mnt_id:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    return None


def mounts_at(path: Path | str, mountinfo: Path = MOUNTINFO) -> int:
    """How many mounts are stacked on ``path`` as it resolves now: the one the kernel resolves it to
    when that mount's mount point is ``path`` itself, and each below it on the same point. Mounts
    hidden under a mount on a directory above (a copy a recursive bind mount covers, what another
    namespace's view left below a tmpfs) are not counted: nothing can reach them by this path."""
    wanted = os.path.abspath(path)
    top = _visible_mount_id(Path(wanted))
    if top is None:
        return 0
    table: dict[int, tuple[int, str]] = {}
    try:
        for line in mountinfo.read_text().splitlines():
            fields = line.split()
            if len(fields) > 4:
                table[int(fields[0])] = (int(fields[1]), _unescape(fields[4]))
    except (OSError, ValueError):
        return 0
    count, current = 0, top
    while current in table and table[current][1] == wanted and count < 64:
        count += 1
        current = table[current][0]
    return count


def remember(path: Path) -> DirectoryState:
    return DirectoryState(path=path, existed=path.exists() or path.is_symlink(), mounts=mounts_at(path))


def _names(path: Path) -> list[str]:
    try:
        return sorted(p.name for p in path.iterdir())
    except OSError:
        return []


def in_use(state: DirectoryState, foreign: Callable[[str], bool]) -> bool:
    """Whether something this run does not own is inside ``state.path`` (then it stays as it is)."""
    return any(foreign(name) for name in _names(state.path))


def restore(
    state: DirectoryState, *, foreign: Callable[[str], bool] = lambda name: False, tree: bool = False
) -> None:
    """Put ``state.path`` back as it was: unmount what was mounted on it since (a self bind mount),
    then remove it if this run created it: only when empty, or with everything in it (``tree``).
    Nothing happens while a ``foreign`` entry is inside."""
    if in_use(state, foreign):
        return
    for _ in range(16):  # stacked mounts: one umount each
        if mounts_at(state.path) <= state.mounts:
            break
        if not unmount(state.path) and not unmount(state.path, lazy=True):  # busy: detach it
            break  # not ours to unmount (EPERM) or gone meanwhile: leftovers says what remains
    if state.existed:
        return
    if tree:
        shutil.rmtree(state.path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            state.path.rmdir()


def leftovers(state: DirectoryState, *, foreign: Callable[[str], bool] = lambda name: False) -> list[str]:
    """What ``restore`` should have undone and is still there, by the same rule."""
    if in_use(state, foreign):
        return []
    found = []
    if mounts_at(state.path) > state.mounts:
        found.append(f"mount {state.path}")
    if not state.existed and (state.path.exists() or state.path.is_symlink()):
        inside = _names(state.path)
        found.append(f"directory {state.path}" + (f" (holding {', '.join(inside[:5])})" if inside else ""))
    return found
