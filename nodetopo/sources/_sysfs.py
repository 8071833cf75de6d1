"""Reading sysfs attribute files, shared by the sysfs sources (numa, pci, rdma) and ``capture``.

sysfs has three ways of not answering, and the sources treat them differently:

* the attribute is **absent** (older kernel, driver without it, a capture that left it out):
  ``read_attribute`` returns None and the caller uses its default, without a condition;
* it is there but **cannot be read** (permission denied, a directory where a file belongs, a
  dangling symlink, an I/O error) or **is refused** (a link out of the host root, a FIFO or device
  where an attribute belongs, more than ``SYSFS_ATTRIBUTE_LIMIT`` bytes: see ``HostRoot.read_bytes``):
  ``read_attribute`` raises ``Unreadable``, which the ``read_*`` functions turn into an
  ``Unavailable`` condition; nothing of a refused file is read, so nothing of it is quoted;
* the kernel answers ``EINVAL``/``ENODATA`` for "no value now" (``class/net/*/speed`` of a link that
  is down, ``ports/*/rate`` on some drivers): ``Unreadable.no_value`` is True, and the callers for
  which that is documented kernel behaviour treat it as absent.

Nothing here parses: the parsers are pure functions in each source module.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TypeVar

from nodetopo.errors import ParseError, excerpt
from nodetopo.host import PLAIN_DIRECTORY_FLAGS, SYSFS_ATTRIBUTE_LIMIT, HostRoot, Refused
from nodetopo.model import Condition, ConditionReason

#: errno values with which sysfs says "this attribute has no value right now"
_NO_VALUE_ERRNOS = frozenset({errno.EINVAL, errno.ENODATA, errno.EOPNOTSUPP})

#: digits of a ``nodeN`` / ``cpuN`` / port directory name
_NUMBERED = re.compile(r"^(?P<prefix>[a-z_]*)(?P<number>\d+)$")
#: digits of a numbered entry's number taken into account (more is no node, CPU or port)
_MAX_DIGITS = 9


class Unreadable(Exception):
    """An attribute that exists but could not be read; ``str()`` says why, with the host path."""

    def __init__(self, host_path: str, why: str, *, no_value: bool = False) -> None:
        super().__init__(f"{host_path}: cannot read: {why}")
        self.host_path = host_path
        self.no_value = no_value


def read_attribute(
    root: HostRoot, path: str | os.PathLike[str], *, shown_as: str | os.PathLike[str] | None = None
) -> str | None:
    """The text of one sysfs attribute, None when it does not exist.

    ``shown_as``: the path messages name instead of ``path`` (the unresolved sysfs path a user
    knows, when ``path`` goes through a resolved device directory). Either may be a ``str``: the
    PCI source reads ~10 attributes per function and building ``Path`` objects for them cost more
    than reading them.

    Raises ``Unreadable`` when it exists but cannot be read (see the module docstring). Bytes that
    are not UTF-8 are replaced rather than rejected: the parsers then report garbage precisely.
    """
    try:
        data = root.read_bytes(path, limit=SYSFS_ATTRIBUTE_LIMIT)
    except FileNotFoundError:
        if os.path.islink(path):
            raise Unreadable(
                _shown(root, path, shown_as), f"dangling symlink to {excerpt(os.readlink(path))}"
            ) from None
        return None
    except Refused as e:
        if e.why == "a directory":
            raise Unreadable(_shown(root, path, shown_as), "a directory where a file was expected") from None
        raise Unreadable(_shown(root, path, shown_as), f"refused: {e.why}") from None
    except IsADirectoryError:
        raise Unreadable(_shown(root, path, shown_as), "a directory where a file was expected") from None
    except PermissionError as e:
        raise Unreadable(_shown(root, path, shown_as), e.strerror or "permission denied") from None
    except OSError as e:
        raise Unreadable(
            _shown(root, path, shown_as), e.strerror or type(e).__name__, no_value=e.errno in _NO_VALUE_ERRNOS
        ) from None
    return data.decode("utf-8", errors="replace")


_AT_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC | os.O_NOFOLLOW
#: a read of a regular file that returns fewer bytes than this is at the file's end (the smallest
#: page: sysfs's binary attributes answer a page per read)
_SHORT_READ = 4096


def open_checked_directory(root: HostRoot, real_dir: str) -> int | None:
    """A descriptor of a resolved directory, checked once to lie inside the root; None when it cannot
    be opened or checked (callers then read through ``read_attribute`` alone)."""
    try:
        fd = os.open(real_dir, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    return checked_directory(root, fd)


def checked_directory(root: HostRoot, fd: int) -> int | None:
    """``fd`` (a directory opened ``O_PATH``) when ``/proc`` names a place inside the root; else None,
    with ``fd`` closed."""
    try:
        real = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        real = ""
    if not real or not root.contains(real):
        os.close(fd)
        return None
    return fd


def read_attribute_at(
    root: HostRoot, dir_fd: int | None, name: str, path: str, *, shown_as: str | None = None
) -> str | None:
    """``read_attribute(root, path, shown_as=...)`` where ``path`` is ``<dir>/<name>`` and ``dir_fd``
    comes from ``open_checked_directory(root, <dir>)``.

    The common case, a regular file directly in the checked directory (``O_NOFOLLOW``: never a
    link; ``name`` may also be ``<subdirectory>/<file>``, see ``_read_below``), is one open + fstat
    + read relative to the descriptor, instead of a confined open of the full path per attribute.
    Anything else (absent, a link, not a regular file, an error, over the limit) goes through
    ``read_attribute``, which gives the same answer or error as always; an absent attribute is None
    at once.

    One read, not a second one to see the end of the file: a read of a regular file returns fewer
    bytes than asked only at its end (the page cache and sysfs's text attributes fill the buffer up
    to the end). sysfs's binary attributes answer a page per read, so a read that returns a page or
    more is followed by a second read to make sure; more than ``SYSFS_ATTRIBUTE_LIMIT`` bytes is
    refused through ``read_attribute``.
    """
    if dir_fd is not None:
        if "/" in name:
            return _read_below(root, dir_fd, name, path, shown_as)
        text = _read_regular_at(dir_fd, name)
        if not isinstance(text, _SlowPath):
            return text
    return read_attribute(root, path, shown_as=shown_as)


def read_attributes_at(
    root: HostRoot, dir_fd: int | None, directory: str, names: Sequence[str], *, shown_dir: str | None = None
) -> tuple[list[str | None], list[Unreadable]]:
    """``read_attribute_at`` of each of ``names`` in ``directory`` (``dir_fd``: its checked
    descriptor), in one loop: the texts in the order of ``names`` (None for an absent or unreadable
    one) and the ``Unreadable`` errors in that order. ``shown_dir``: the directory messages name.

    The same reads, answers and errors as one ``read_attribute_at`` per name; one call and no path
    strings for the common case (a regular file read whole), which is most of the cost of a PCI
    function's ten small files.
    """
    texts: list[str | None] = []
    problems: list[Unreadable] = []
    for name in names:
        if dir_fd is not None and "/" not in name:
            text = _read_regular_at(dir_fd, name)
            if not isinstance(text, _SlowPath):
                texts.append(text)
                continue
        shown = f"{shown_dir}/{name}" if shown_dir is not None else None
        try:
            # a name with a subdirectory through read_attribute_at; the fast path's leftovers straight
            # to read_attribute, which gives their answer or error
            below = dir_fd if "/" in name else None
            texts.append(read_attribute_at(root, below, name, f"{directory}/{name}", shown_as=shown))
        except Unreadable as e:
            problems.append(e)
            texts.append(None)
    return texts, problems


class _SlowPath:
    """What ``_read_regular_at`` answers when ``read_attribute`` must decide."""


_SLOW_PATH = _SlowPath()


def _read_regular_at(dir_fd: int, name: str) -> str | _SlowPath | None:
    """The common case of ``read_attribute_at``: the text of ``name``, a regular file directly in the
    checked directory (``O_NOFOLLOW``: never a link), read whole; None when there is no entry of
    that name (with O_NOFOLLOW a link of that name, dangling or not, is ELOOP, not ENOENT: absent,
    as ``read_attribute`` would say after two more system calls); ``_SLOW_PATH`` for anything else
    (a link, not a regular file, an error, a page or more)."""
    try:
        fd = os.open(name, _AT_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError:
        return _SLOW_PATH
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            data = os.read(fd, SYSFS_ATTRIBUTE_LIMIT + 1)
            if len(data) < _SHORT_READ or (len(data) <= SYSFS_ATTRIBUTE_LIMIT and not os.read(fd, 1)):
                return data.decode("utf-8", errors="replace")
    except OSError:
        pass
    finally:
        os.close(fd)
    return _SLOW_PATH


def open_subdirectory(dir_fd: int, name: str) -> int:
    """An ``O_PATH`` descriptor of ``name``, a plain directory (``O_NOFOLLOW``: not a link) directly
    in the checked directory ``dir_fd``: inside the root as well, so not checked again. Raises
    ``OSError`` as ``os.open`` does (absent, a link, not a directory)."""
    return os.open(name, PLAIN_DIRECTORY_FLAGS, dir_fd=dir_fd)


def _read_below(root: HostRoot, dir_fd: int, name: str, path: str, shown_as: str | None) -> str | None:
    """``read_attribute_at`` of ``<subdirectory>/<file>`` (``gids/0``): through the subdirectory when
    it is a plain directory of the checked one (not a link: ``O_NOFOLLOW``), so inside the root too.
    An absent subdirectory is an absent attribute; anything else takes ``read_attribute``."""
    subdirectory, _, leaf = name.partition("/")
    if subdirectory in ("", ".", "..") or not leaf or "/" in leaf:
        return read_attribute(root, path, shown_as=shown_as)
    try:
        sub_fd = open_subdirectory(dir_fd, subdirectory)
    except FileNotFoundError:
        return None
    except OSError:  # a link, not a directory, ...
        return read_attribute(root, path, shown_as=shown_as)
    try:
        return read_attribute_at(root, sub_fd, leaf, path, shown_as=shown_as)
    finally:
        os.close(sub_fd)


def _shown(root: HostRoot, path: str | os.PathLike[str], shown_as: str | os.PathLike[str] | None) -> str:
    """The host path a message names (built only for a message)."""
    return root.relative(shown_as if shown_as is not None else path)


def numbered_entries(directory: Path, prefix: str, *, root: HostRoot | None = None) -> list[tuple[int, Path]]:
    """``(number, path)`` of the entries named ``<prefix><digits>``, in numeric order.

    Numeric, not lexical: ``node8`` comes before ``node250``. A directory that cannot be listed, or
    lies outside the root, gives no entries (the caller has already checked that it exists).
    """
    return [(number, directory / name) for number, name in numbered_names(directory, prefix, root=root)]


def numbered_names(
    directory: str | os.PathLike[str], prefix: str, *, root: HostRoot | None = None
) -> list[tuple[int, str]]:
    """``numbered_entries`` as ``(number, entry name)``, without building paths."""
    return numbered_names_of(list_directory(directory, root=root), prefix)


def numbered_names_of(names: Iterable[str], prefix: str) -> list[tuple[int, str]]:
    """``numbered_names`` of a directory whose entry names were listed already."""
    found: list[tuple[int, str]] = []
    for name in names:
        match = _NUMBERED.match(name)
        if match is not None and match["prefix"] == prefix and len(match["number"]) <= _MAX_DIGITS:
            found.append((int(match["number"]), name))
    found.sort()
    return found


def list_directory(directory: str | os.PathLike[str], *, root: HostRoot | None = None) -> list[str]:
    """Sorted entry names of a directory; empty when it is absent, outside ``root`` or unlistable."""
    try:
        return sorted(root.list_directory(directory) if root is not None else os.listdir(directory))
    except (OSError, Refused):
        return []


def is_dangling(path: Path) -> bool:
    return path.is_symlink() and not path.exists()


_T = TypeVar("_T")

#: the CPU ids one read may build in distinct CPU sets (about 10 MiB of frozensets; a real machine
#: has one set per NUMA node, a few thousand ids in all)
CPU_IDS_PER_READ = 1 << 18


class CpuSets:
    """Parses the CPU lists and masks of one read: equal texts once, distinct ones within a budget.

    Every PCI function of a NUMA node repeats one ``local_cpulist``: it is parsed once and the set
    shared. Distinct sets are bounded in total (``CPU_IDS_PER_READ``): a hostile tree of thousands of
    functions, each with its own list of 65,536 CPUs, cannot make a scan build gigabytes; past the
    budget a new list is a ParseError of its file.
    """

    def __init__(self, source: str, budget: int = CPU_IDS_PER_READ) -> None:
        self.source = source
        self.budget = budget
        self._known: dict[tuple[object, str], frozenset[int]] = {}
        #: how many texts were refused for want of budget (a result that depends on the budget)
        self.refused = 0

    def parse(self, parser: Callable[[str, str], frozenset[int]], text: str, path: str) -> frozenset[int]:
        key = (parser, text)
        known = self._known.get(key)
        if known is not None:
            return known
        if self.budget <= 0:
            self.refused += 1
            raise ParseError(self.source, path, "more distinct CPU sets than any machine has: not read")
        cpus = parser(text, path)
        self.budget -= max(len(cpus), 1)
        self._known[key] = cpus
        return cpus

    def replay(
        self, parser: Callable[[str, str], frozenset[int]], text: str, cpus: frozenset[int] | None
    ) -> bool:
        """Account for ``parse(parser, text, ...)`` whose outcome is already known (``cpus``; None: the
        parser raised a ParseError), as that call would: the same budget spent, the same set shared
        with later texts. False, and nothing changed, where the budget would make that call refuse
        the text instead (the known outcome does not hold: parse it again)."""
        key = (parser, text)
        if key in self._known:
            return True
        if self.budget <= 0:
            return False
        if cpus is not None:
            self.budget -= max(len(cpus), 1)
            self._known[key] = cpus
        return True

    def parser(self, parser: Callable[[str, str], frozenset[int]]) -> Callable[[str, str], frozenset[int]]:
        """``parser`` through this cache (for readers that take a parser)."""
        return lambda text, path: self.parse(parser, text, path)


def unavailable(source: str, message: str) -> Condition:
    return Condition(source=source, reason=ConditionReason.UNAVAILABLE, message=message)


def parse_error(source: str, message: str) -> Condition:
    return Condition(source=source, reason=ConditionReason.PARSE_ERROR, message=message)


def from_parse_error(error: ParseError) -> Condition:
    """The condition for a ParseError caught at the source boundary (message without the source)."""
    where = f"{error.path}:{error.line}" if error.line is not None else error.path
    return parse_error(error.source, f"{where}: {error.detail}")
