"""The kernel's cpulist format (``0-3,8-11``); pure, used by parsers and projections."""

from __future__ import annotations

import re
from collections.abc import Iterable

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


def parse_cpulist(text: str) -> frozenset[int]:
    """Parse a kernel cpulist (``0-3,8-11``, ``0,5-11``, empty) into a set of ids.

    Tolerates surrounding whitespace and a trailing NUL byte (seen in real sysfs captures).
    Raises ``ValueError`` on anything else, including an id above ``MAX_CPU_ID`` (so a 13-byte
    ``0-4000000000`` costs nothing); parsers turn that into a ``ParseError``.
    """
    text = text.replace("\x00", "").strip()
    if not text:
        return frozenset()
    ids: set[int] = set()
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
        if lo == hi:
            ids.add(lo)
        else:
            ids.update(range(lo, hi + 1))
    return frozenset(ids)


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
