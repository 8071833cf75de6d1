"""The texts of the link attributes ``sysfs.links`` reads, parsed: PCIe link speed and width, the
total line of an AER statistics file, a counter. Pure: text and path in, a value out, or a
``ParseError`` naming the file (and the line)."""

from __future__ import annotations

import re

from nodetopo.errors import ParseError, excerpt

#: the source whose files these are (``sources.links``)
NAME = "sysfs.links"

_SPEED = re.compile(r"^(?P<gts>[0-9]{1,3}(?:\.[0-9]{1,2})?) ?GT/s(?: PCIe)?$")
_WIDTH = re.compile(r"^x?(?P<lanes>[0-9]{1,2})$")
_COUNTER = re.compile(r"^[0-9]{1,20}$")
_AER_LINE = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_ ]{0,40}?)\s+(?P<count>[0-9]{1,20})$")
#: the largest width a PCIe link has (x32 is in the specification, no device uses it)
MAX_WIDTH = 32
#: the fastest lane there is (PCIe 6.0: 64 GT/s), with headroom
MAX_GTS = 256.0
#: a value no 64-bit counter reaches
MAX_COUNTER = (1 << 64) - 1


def _clean(text: str) -> str:
    return text.replace("\x00", "").strip()


def parse_link_speed(text: str, path: str) -> float | None:
    """``current_link_speed``/``max_link_speed``: ``16.0 GT/s PCIe`` -> 16.0 (older kernels: ``8 GT/s``,
    ``2.5 GT/s``); ``Unknown`` (a link that is down, a virtual function) -> None."""
    value = _clean(text)
    if value in ("Unknown", ""):
        return None
    match = _SPEED.match(value)
    if match is None or not 0 < float(match["gts"]) <= MAX_GTS:
        raise ParseError(NAME, path, f"expected a link speed like '16.0 GT/s PCIe', got {excerpt(value)}")
    return float(match["gts"])


def parse_link_width(text: str, path: str) -> int:
    """``current_link_width``/``max_link_width``: ``16`` -> 16 (0: the link is down)."""
    value = _clean(text)
    match = _WIDTH.match(value)
    if match is None or int(match["lanes"]) > MAX_WIDTH:
        raise ParseError(NAME, path, f"expected a link width like '16', got {excerpt(value)}")
    return int(match["lanes"])


def parse_aer_total(text: str, path: str, total: str) -> int:
    """The ``total`` line (``TOTAL_ERR_COR 3``) of an ``aer_dev_*`` file: one ``<name> <count>`` per line."""
    found: int | None = None
    for number, raw in enumerate(text.replace("\x00", "").splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        match = _AER_LINE.match(line)
        if match is None:
            raise ParseError(NAME, path, f"expected '<error> <count>', got {excerpt(line)}", line=number)
        if match["name"].strip() == total:
            found = int(match["count"])
    if found is None:
        raise ParseError(NAME, path, f"no {total} line")
    if found > MAX_COUNTER:
        raise ParseError(NAME, path, f"{total} {found} is more than a 64-bit counter holds")
    return found


def parse_counter(text: str, path: str) -> int | None:
    """A counter file: a decimal count; ``N/A (no PMA)`` (no performance management agent) -> None."""
    value = _clean(text)
    if value.startswith("N/A"):
        return None
    if _COUNTER.match(value) is None or int(value) > MAX_COUNTER:
        raise ParseError(NAME, path, f"expected a count, got {excerpt(value)}")
    return int(value)
