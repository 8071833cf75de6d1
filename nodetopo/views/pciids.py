"""PCI device names from the system's ``pci.ids`` (the database ``lspci`` uses).

``pciutils`` installs it as ``/usr/share/misc/pci.ids``, ``hwdata`` as ``/usr/share/hwdata/pci.ids``.
When neither is there, names are simply not known and the views print ``vendor:device`` IDs.

Format (one entry a line, ``#`` comments): a vendor line ``10de  NVIDIA Corporation``, then its
devices indented by one tab ``\\t2330  GH100 [H100 SXM5 80GB]``, subsystems by two tabs (ignored),
and at the end class lists after a ``C`` line (ignored here).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import Path

SEARCH_PATH: tuple[str, ...] = (
    "/usr/share/misc/pci.ids",
    "/usr/share/hwdata/pci.ids",
    "/usr/share/pci.ids",
    "/usr/local/share/pci.ids",
)

#: the database is ~1.4 MB; anything much larger is not it
MAX_BYTES = 16 * 2**20

_ENTRY = re.compile(r"([0-9a-fA-F]{4})\s+(.+)")
_VENDOR_SUFFIX = re.compile(
    r"[,\s]+(Corporation|Corp\.?|Technologies|Technology|Incorporated|Inc\.?|Ltd\.?|Co\.|GmbH|LLC|Limited)$"
)


def short_vendor(name: str) -> str:
    """``NVIDIA Corporation`` → ``NVIDIA``; ``Advanced Micro Devices, Inc. [AMD]`` → ``AMD``."""
    bracket = re.search(r"\[([^\]]+)\]\s*$", name)
    if bracket:
        return bracket.group(1)
    previous = None
    while previous != name:
        previous, name = name, _VENDOR_SUFFIX.sub("", name).strip()
    return name


def parse_pci_ids(lines: Iterable[str], wanted: Collection[tuple[int, int]]) -> dict[tuple[int, int], str]:
    """``(vendor, device)`` → ``"<vendor> <device name>"`` for the ``wanted`` pairs found in ``lines``.

    Malformed lines are skipped: a damaged database costs names, never an error.
    """
    vendors = {v for v, _ in wanted}
    names: dict[tuple[int, int], str] = {}
    vendor: int | None = None
    vendor_name = ""
    for line in lines:
        if not line or line.startswith("#") or not line.strip():
            continue
        if line.startswith("C ") or line.startswith("C\t"):
            break  # the class list: no more vendors
        if line.startswith("\t\t"):
            continue  # a subsystem
        if line.startswith("\t"):
            if vendor is None:
                continue
            m = _ENTRY.fullmatch(line[1:].rstrip("\n"))
            if m and (vendor, int(m.group(1), 16)) in wanted:
                names[(vendor, int(m.group(1), 16))] = f"{vendor_name} {m.group(2).strip()}"
            continue
        m = _ENTRY.fullmatch(line.rstrip("\n"))
        if m is None:
            vendor = None
            continue
        code = int(m.group(1), 16)
        vendor = code if code in vendors else None
        vendor_name = short_vendor(m.group(2).strip())
    return names


def find_pci_ids(paths: Sequence[str | os.PathLike[str]] = SEARCH_PATH) -> Path | None:
    """The first of ``paths`` that is a regular file of plausible size, or None."""
    for candidate in paths:
        path = Path(candidate)
        try:
            info = path.stat()
        except OSError:
            continue
        if stat.S_ISREG(info.st_mode) and 0 < info.st_size <= MAX_BYTES:
            return path
    return None


#: the first line after a vendor's block: the next vendor (or the class list)
_NEXT_VENDOR = re.compile(rb"\n[^\t#\n]")


def names_in_database(data: bytes, wanted: Collection[tuple[int, int]]) -> dict[tuple[int, int], str]:
    """``parse_pci_ids`` for a whole pci.ids already in memory, fast: each wanted vendor's block is
    found by its vendor line and only its lines are decoded and matched (~10 ms, where parsing all
    ~40,000 lines of the file took ~100 ms on every table)."""
    data = data if data.startswith(b"\n") else b"\n" + data
    names: dict[tuple[int, int], str] = {}
    for vendor in sorted({v for v, _ in wanted}):
        start = data.find(b"\n%04x  " % vendor)
        if start < 0:
            continue
        nxt = _NEXT_VENDOR.search(data, start + 1)
        block = data[start + 1 : nxt.start() if nxt else len(data)].decode("utf-8", errors="replace")
        found = parse_pci_ids(block.split("\n"), {key for key in wanted if key[0] == vendor})
        names.update(found)
    return names


def read_pci_names(
    wanted: Collection[tuple[int, int]], paths: Sequence[str | os.PathLike[str]] = SEARCH_PATH
) -> Mapping[tuple[int, int], str]:
    """Names for the ``wanted`` (vendor, device) pairs from the system's pci.ids; empty without one."""
    path = find_pci_ids(paths)
    if path is None or not wanted:
        return {}
    try:
        data = path.read_bytes()
    except OSError:
        return {}
    return names_in_database(data, frozenset(wanted))
