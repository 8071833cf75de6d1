"""The link files a rescanning context keeps open between its scans (``sysfs.links``).

An agent reads the same few hundred small sysfs files every interval: every PCI function's link
speed, width and AER totals, every RDMA port's error counters. Each read the usual way is an open,
an ``fstat``, a read and a close; read through a descriptor kept open it is one ``pread`` at offset
0, which sysfs answers with a fresh value (a sysfs attribute is generated at every read from its
start). What is kept, per directory (a PCI function's, a port's ``counters``, a netdev's):

* its **identity** when it was read (device, inode and modification time of the directory): a
  directory that is no longer the same (a device removed and added again, hot-plug, a capture
  replaced) is read afresh the usual way, and what was kept of it is dropped;
* the texts of its **static** attributes (``max_link_speed``, ``max_link_width``: what the link
  can do, fixed for the directory's lifetime), read once;
* a read-only descriptor of each of its **live** attributes (the current link state, the
  counters), opened once (``O_NOFOLLOW``, a regular file, relative to the directory the source
  opened and checked inside the root), and ``pread`` every scan; an attribute the directory did not
  have is absent while the directory is the same.

Anything out of the ordinary (a read error, a text of a page or more, a directory that cannot be
checked) drops the directory and the source reads it the usual way, with that read's answer or
error. A directory not read in a scan is dropped at its end (``sweep``). At most ``budget``
descriptors are held (a quarter of the soft ``RLIMIT_NOFILE``, at most 4096); past it, directories
are read the usual way. One per scan context (``Context.cache``), used only when the context
rescans (``Context.rescans``: the agent); the descriptors close when the context is dropped or at
``close``.
"""

from __future__ import annotations

import contextlib
import os
import resource
import stat
import weakref
from collections.abc import Sequence

from nodetopo.sources import _sysfs

#: the most descriptors one context holds
MAX_HELD = 4096
#: how a live attribute is opened (``_sysfs``'s flags: never a link, never blocking, never a tty)
_FLAGS = _sysfs._AT_FLAGS
#: a pread shorter than this is the whole text (``_sysfs``: sysfs answers a page per read)
_WHOLE = _sysfs._SHORT_READ

Identity = tuple[int, int, int]


def identity_of(fd: int) -> Identity | None:
    """The identity of the directory ``fd``: device, inode and modification time (None: unknown)."""
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_mtime_ns)


def identity_at(path: str) -> Identity | None:
    """The identity of the directory at ``path`` (its links followed)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_mtime_ns)


def _budget() -> int:
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        return 0
    if soft == resource.RLIM_INFINITY:
        return MAX_HELD
    return max(0, min(MAX_HELD, soft // 4))


class _Held:
    """One directory: its identity, its attribute names, per name a descriptor (a live attribute) or
    None (a static one, or absent), and the texts of the last read (the static ones as kept)."""

    __slots__ = ("data", "fds", "identity", "names", "texts", "used")

    def __init__(
        self, identity: Identity, names: Sequence[str], texts: list[str | None], fds: list[int | None]
    ) -> None:
        self.identity = identity
        self.names = tuple(names)
        self.fds = fds
        self.texts = texts  #: read-only: given back as long as every live read is the same
        self.data: list[bytes | None] = [None] * len(fds)  #: the bytes each live read gave last
        self.used = True

    def read(self) -> list[str | None] | None:
        """Every attribute's text, or None when any live read is out of the ordinary. The list of the
        last read (the very same text objects) when nothing changed; a new one when anything did."""
        changed: list[str | None] | None = None
        data = self.data
        for index, fd in enumerate(self.fds):
            if fd is None:
                continue
            try:
                now = os.pread(fd, _WHOLE, 0)
            except OSError:
                return None
            if len(now) >= _WHOLE:
                return None
            if now != data[index]:
                if changed is None:
                    changed = list(self.texts)
                changed[index] = now.decode("utf-8", errors="replace")
                data[index] = now
        if changed is not None:
            self.texts = changed
        return self.texts


def _close_all(held: dict[str, _Held]) -> None:
    for entry in held.values():
        for fd in entry.fds:
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
    held.clear()


class LinkFiles:
    """The directories kept between scans (module docstring), by the directory's real path."""

    def __init__(self, budget: int | None = None) -> None:
        self.budget = _budget() if budget is None else budget
        self._held: dict[str, _Held] = {}
        self._count = 0  #: descriptors held
        self._finalizer = weakref.finalize(self, _close_all, self._held)

    def __len__(self) -> int:
        return self._count

    def read(
        self, directory: str, identity: Identity | None, names: Sequence[str]
    ) -> list[str | None] | None:
        """The texts of ``names`` in ``directory`` through what is kept of it, when it is kept with the
        same ``identity`` and names and every live read is ordinary; else None (and it is dropped):
        the caller reads it the usual way and may ``keep`` it. The list is read-only (``_Held.read``)."""
        entry = self._held.get(directory)
        if entry is None:
            return None
        if identity is not None and entry.identity == identity and entry.names == tuple(names):
            texts = entry.read()
            if texts is not None:
                entry.used = True
                return texts
        self._drop(directory)
        return None

    def keep(
        self,
        directory: str,
        dir_fd: int,
        identity: Identity | None,
        names: Sequence[str],
        texts: Sequence[str | None],
        static: frozenset[str] = frozenset(),
    ) -> None:
        """Keep ``directory`` (its checked descriptor ``dir_fd``), whose ``names`` the usual read gave
        ``texts`` without a problem: the static ones' texts, a descriptor of each live one present.
        Nothing is kept of a directory with a text of a page or more, an attribute that is not a
        regular file, or past the budget."""
        self._drop(directory)
        if identity is None:
            return
        live = [n for n, t in zip(names, texts, strict=True) if n not in static and t is not None]
        if self._count + len(live) > self.budget:
            return
        if any(t is not None and len(t.encode()) >= _WHOLE for t in texts):
            return
        fds: list[int | None] = []
        try:
            for name, text in zip(names, texts, strict=True):
                if name in static or text is None:
                    fds.append(None)
                    continue
                opened = os.open(name, _FLAGS, dir_fd=dir_fd)
                fds.append(opened)
                if not stat.S_ISREG(os.fstat(opened).st_mode):
                    raise OSError("not a regular file")
        except OSError:
            for fd in fds:
                if fd is not None:
                    os.close(fd)
            return
        self._held[directory] = _Held(identity, names, list(texts), fds)
        self._count += len(live)

    def sweep(self) -> None:
        """The end of a scan: drop every directory it did not read."""
        for directory in [d for d, e in self._held.items() if not e.used]:
            self._drop(directory)
        for entry in self._held.values():
            entry.used = False

    def close(self) -> None:
        """Close every descriptor (what is kept is read afresh at the next read)."""
        _close_all(self._held)
        self._count = 0

    def _drop(self, directory: str) -> None:
        entry = self._held.pop(directory, None)
        if entry is None:
            return
        for fd in entry.fds:
            if fd is not None:
                os.close(fd)
                self._count -= 1
