"""How the JSON of an NVML dump is read: integers bounded in digits, nesting past ``MAX_DEPTH``
flattened to null, and what each field may hold (``RANGES``, ``MAX_TEXT``); the message text of a
value. Pure."""

from __future__ import annotations

import json

from nodetopo.errors import excerpt
from nodetopo.jsonread import JSON_TOKEN
from nodetopo.model import MAX_NUMA_NODE_ID
from nodetopo.sources.nvml.protocol import MAX_DEVICES, MAX_NVLINKS, NvlinkCounter

#: the longest string a dump field may hold (UUIDs are 40 characters, names about 30)
MAX_TEXT = 256
#: (lowest, highest) value of each integer field: what hardware can have, with headroom
RANGES: dict[str, tuple[int, int]] = {
    "index": (0, MAX_DEVICES - 1),
    "memoryTotal": (0, 1 << 50),  # 1 PiB of GPU memory; 2025's largest GPU has 288 GB
    "numaNodeId": (0, MAX_NUMA_NODE_ID),
    "link": (0, MAX_NVLINKS - 1),
    "cliqueId": (0, 0xFFFFFFFF),
    "gpuInstanceId": (0, 0xFFFF),
    "computeInstanceId": (0, 0xFFFF),
    "a": (0, MAX_DEVICES - 1),
    "b": (0, MAX_DEVICES - 1),
    "healthMask": (0, 0xFFFFFFFF),
    "speedMBps": (0, 1 << 24),  # 16 TB/s per link
    "maxGen": (1, 16),
    "deviceMaxGen": (1, 16),
    "currentGen": (1, 16),
    "maxWidth": (0, 32),
    "currentWidth": (0, 32),
    "replays": (0, (1 << 64) - 1),
    **{counter.value: (0, (1 << 64) - 1) for counter in NvlinkCounter},
}


class LongNumber:
    """A JSON number of more digits than any field holds (``int()`` of it would raise or be slow)."""

    def __init__(self, digits: int) -> None:
        self.digits = digits


def _bounded_int(text: str) -> int | LongNumber:
    return int(text) if len(text) <= 40 else LongNumber(len(text))


def loads_bounded(text: str) -> object:
    """``json.loads``, with integers of more than 40 digits as ``LongNumber`` (a field problem)."""
    return json.loads(text, parse_int=_bounded_int)


#: the deepest nesting read (a dump has 5 levels: dump, devices, device, nvlinks, link errors)
MAX_DEPTH = 32


def flatten_deep(text: str) -> tuple[str, list[int]]:
    """``text`` with each value nested deeper than ``MAX_DEPTH`` replaced by ``null``, and its lines.

    One pass over the strings and bracket runs, linear in the size of the text (a run of a million
    ``[`` is one step).
    """
    pieces: list[str] = []
    lines: list[int] = []
    depth = 0
    kept_to = 0
    cut_from: int | None = None
    line, counted_to = 1, 0
    for match in JSON_TOKEN.finditer(text):
        token = match.group()
        if token[0] == '"':
            continue
        if token[0] in "[{":
            if cut_from is None and depth + len(token) > MAX_DEPTH:
                cut_from = match.start() + (MAX_DEPTH - depth)  # the bracket opening level MAX_DEPTH + 1
            depth += len(token)
            continue
        if cut_from is not None and depth - len(token) <= MAX_DEPTH:
            end = match.start() + (depth - MAX_DEPTH)  # just past the bracket closing level MAX_DEPTH + 1
            pieces += [text[kept_to:cut_from], "null"]
            kept_to = end
            line += text.count("\n", counted_to, cut_from)
            counted_to = cut_from
            lines.append(line)
            cut_from = None
        depth -= len(token)
    pieces.append(text[kept_to:])
    return "".join(pieces), lines


def out_of_range(key: str, value: object) -> str | None:
    """Why an integer or string value is more than hardware has (``RANGES``, ``MAX_TEXT``), or None."""
    if isinstance(value, int) and key in RANGES:
        low, high = RANGES[key]
        if not low <= value <= high:
            return f"{shown_value(value)} is outside {low}..{high}"
    if isinstance(value, str) and len(value) > MAX_TEXT:
        return f"{len(value)} characters, more than {MAX_TEXT}"
    return None


def shown_value(value: object) -> str:
    """A dump value for a message: its JSON type for containers, a short excerpt otherwise."""
    if isinstance(value, LongNumber):
        return f"a number of {value.digits} digits"
    if isinstance(value, dict | list):
        return f"a JSON {'object' if isinstance(value, dict) else 'array'}"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**12:
        return f"an integer of {value.bit_length()} bits"  # str() of a huge int raises
    return excerpt(json.dumps(value))
