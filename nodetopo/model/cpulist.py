"""The kernel's cpulist format (``0-3,8-11``); pure, used by parsers and projections."""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Iterator
from collections.abc import Set as AbstractSet
from typing import Any

from nodetopo.model.values import short_quote

# --------------------------------------------------------------------------------------------
# cpulist helpers (the kernel's "0-3,8-11" format); pure, used by parsers and projections
# --------------------------------------------------------------------------------------------


#: the largest CPU (and NUMA node) id a cpulist may name: Linux's NR_CPUS is at most 8192 (x86_64;
#: 4096 on arm64), so this leaves headroom while bounding what a hostile file can make us build
MAX_CPU_ID = 65535
#: the largest NUMA node id: Linux's MAX_NUMNODES is at most 1024 (NODES_SHIFT 10)
MAX_NUMA_NODE_ID = 1023

_CPULIST_ELEMENT = re.compile(r"([0-9]{1,6})(?:-([0-9]{1,6}))?")


def _cpulist_ranges(text: str) -> list[tuple[int, int]]:
    """The (first, last) ranges a kernel cpulist names, in the order written (the grammar of
    ``parse_cpulist``; raises its ``ValueError``)."""
    text = text.replace("\x00", "").strip()
    if not text:
        return []
    ranges = []
    for part in text.split(","):
        match = _CPULIST_ELEMENT.fullmatch(part.strip())
        if match is None:
            raise ValueError(f"bad element {short_quote(part.strip())} in cpulist {short_quote(text)}")
        lo = int(match[1])
        hi = int(match[2]) if match[2] is not None else lo
        if hi < lo:
            raise ValueError(f"bad range {short_quote(part.strip())} in cpulist {short_quote(text)}")
        if hi > MAX_CPU_ID:
            raise ValueError(f"id {hi} above {MAX_CPU_ID} in cpulist {short_quote(text)}")
        ranges.append((lo, hi))
    return ranges


def parse_cpulist(text: str) -> frozenset[int]:
    """Parse a kernel cpulist (``0-3,8-11``, ``0,5-11``, empty) into a set of ids.

    Tolerates surrounding whitespace and a trailing NUL byte (seen in real sysfs captures).
    Raises ``ValueError`` on anything else, including an id above ``MAX_CPU_ID`` (so a 13-byte
    ``0-4000000000`` costs nothing); parsers turn that into a ``ParseError``. A list read from a
    published object is a ``CpuSet`` instead (``CpuSet.parse``): its ranges, never expanded.
    """
    ids: set[int] = set()
    for lo, hi in _cpulist_ranges(text):
        if lo == hi:
            ids.add(lo)
        else:
            ids.update(range(lo, hi + 1))
    return frozenset(ids)


def _merged(ranges: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """Sorted, disjoint, non-adjacent ranges covering the same ids."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return tuple(out)


class CpuSet(AbstractSet[int]):
    """An immutable set of CPU (or NUMA node) ids kept as its ranges: ``0-65535`` is one pair.

    What the NodeTopology reader gives for a published CPU list: an object may say ``0-65535``
    for each of 1,024 GPUs, and a set of ids would make each of those 65,536 entries; this one
    costs the ranges written, which the CRD bounds by the list's length. It is a set: ``in``,
    ``len``, iteration, ``&``, ``|``, ``-``, ``<=`` and ``isdisjoint`` work with any set of ids (range
    arithmetic between two ``CpuSet``), and it equals and hashes like the frozenset of its ids.
    """

    __slots__ = ("_hashed", "_len", "_starts", "ranges")

    def __init__(self, ranges: Iterable[tuple[int, int]] = ()) -> None:
        self.ranges: tuple[tuple[int, int], ...] = _merged(ranges)
        self._starts = [lo for lo, _ in self.ranges]
        self._len = sum(hi - lo + 1 for lo, hi in self.ranges)
        self._hashed: int | None = None

    @classmethod
    def parse(cls, text: str) -> CpuSet:
        """A kernel cpulist as ranges (``parse_cpulist``'s grammar and errors)."""
        return cls(_cpulist_ranges(text))

    @classmethod
    def of(cls, ids: Iterable[int]) -> CpuSet:
        if isinstance(ids, CpuSet):
            return ids
        return cls((i, i) for i in ids)

    @classmethod
    def _from_iterable(cls, it: Iterable[Any]) -> CpuSet:  # type: ignore[override]
        return cls.of(it)  # the mixins' other operations (``^``) build a set of ids

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[int]:
        for lo, hi in self.ranges:
            yield from range(lo, hi + 1)

    def __contains__(self, value: object) -> bool:
        if not isinstance(value, int):
            return False
        i = bisect.bisect_right(self._starts, value) - 1
        return i >= 0 and value <= self.ranges[i][1]

    def __and__(self, other: AbstractSet[Any]) -> CpuSet:
        theirs = CpuSet.of(other).ranges
        out, i, j = [], 0, 0
        mine = self.ranges
        while i < len(mine) and j < len(theirs):
            lo, hi = max(mine[i][0], theirs[j][0]), min(mine[i][1], theirs[j][1])
            if lo <= hi:
                out.append((lo, hi))
            if mine[i][1] < theirs[j][1]:
                i += 1
            else:
                j += 1
        return CpuSet(out)

    __rand__ = __and__

    def __or__(self, other: AbstractSet[Any]) -> CpuSet:
        return CpuSet(self.ranges + CpuSet.of(other).ranges)

    __ror__ = __or__

    def union(self, *others: Iterable[int]) -> CpuSet:
        return CpuSet(self.ranges + tuple(r for o in others for r in CpuSet.of(o).ranges))

    def __sub__(self, other: AbstractSet[Any]) -> CpuSet:
        out = []
        theirs = CpuSet.of(other).ranges
        for lo, hi in self.ranges:
            for olo, ohi in theirs:
                if ohi < lo or olo > hi:
                    continue
                if olo > lo:
                    out.append((lo, olo - 1))
                lo = ohi + 1
                if lo > hi:
                    break
            if lo <= hi:
                out.append((lo, hi))
        return CpuSet(out)

    def __rsub__(self, other: AbstractSet[Any]) -> CpuSet:
        return CpuSet.of(other) - self

    def __le__(self, other: AbstractSet[Any]) -> bool:
        return len(self - other) == 0

    def __ge__(self, other: AbstractSet[Any]) -> bool:
        return len(CpuSet.of(other) - self) == 0

    def __lt__(self, other: AbstractSet[Any]) -> bool:
        return len(self) < len(other) and self <= other

    def __gt__(self, other: AbstractSet[Any]) -> bool:
        return len(self) > len(other) and self >= other

    def isdisjoint(self, other: Iterable[Any]) -> bool:
        return not (self & CpuSet.of(other))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, CpuSet):
            return self.ranges == other.ranges
        if isinstance(other, AbstractSet):
            return len(self) == len(other) and all(isinstance(i, int) for i in other) and self <= other
        return NotImplemented

    def __hash__(self) -> int:
        if self._hashed is None:
            self._hashed = AbstractSet._hash(self)  # the frozenset's hash: equal sets hash alike
        return self._hashed

    def __str__(self) -> str:
        return ",".join(f"{lo}" if lo == hi else f"{lo}-{hi}" for lo, hi in self.ranges)

    def __repr__(self) -> str:
        return f"CpuSet.parse({str(self)!r})"


def format_cpulist(ids: Iterable[int]) -> str:
    """The inverse of ``parse_cpulist``: ``{0,1,2,3,8}`` -> ``0-3,8``."""
    ordered = sorted(set(ids))
    parts: list[str] = []
    start = prev = None
    for value in ordered:
        if start is None:
            start = prev = value
        elif prev is not None and value == prev + 1:
            prev = value
        else:
            parts.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = prev = value
    if start is not None:
        parts.append(f"{start}" if start == prev else f"{start}-{prev}")
    return ",".join(parts)
