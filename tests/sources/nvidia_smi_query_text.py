"""The text form of ``nvidia-smi -q`` (``-a``): the fields ``parse_smi_query_xml`` reads from the XML form.

No production caller (nodetopo runs ``nvidia-smi -q -x``); kept beside the tests that read pasted
``-q`` output from the corpus and fuzz it, through the XML parser's own field checks.
"""

from __future__ import annotations

import re

from nodetopo import model
from nodetopo.errors import ParseError, excerpt
from nodetopo.sources.nvidia_smi._text import NAME, _lines
from nodetopo.sources.nvidia_smi.query import _GpuFields, _queried_gpu, _sorted_queried

QUERY_TEXT_PATH = "nvidia-smi -q"

_QUERY_TEXT_LINE = re.compile(r"(\S.*?)\s+: ?(.*)")
_QUERY_TEXT_GPU = re.compile(r"GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])")
_QUERY_TEXT_KEYS: dict[tuple[str, ...], str] = {
    ("Product Name",): "model",
    ("GPU UUID",): "uuid",
    ("Minor Number",): "minor_number",
    ("MIG Mode", "Current"): "mig_current",
    ("MIG Mode", "Pending"): "mig_pending",
    ("FB Memory Usage", "Total"): "memory_total",
    ("PCI", "Bus Id"): "bus_id",
}


def _read_smi_query_text(
    text: str, path: str
) -> tuple[tuple[str | None, tuple[model.QueriedGpu, ...]], list[str]]:
    driver: str | None = None
    blocks: list[_GpuFields] = []
    sections: list[tuple[int, str]] = []  # (indent, name) of the open sections inside a GPU block
    seen: set[str] = set()  # the fields already read in the current GPU block
    for number, raw in enumerate(_lines(text), start=1):
        line = raw.expandtabs(8)
        stripped = line.strip()
        if not stripped or stripped.startswith("=="):
            continue
        indent = len(line) - len(line.lstrip())
        if indent == 0:
            gpu = _QUERY_TEXT_GPU.fullmatch(stripped)
            if gpu is not None:
                blocks.append(_GpuFields(where=number, bus_id=gpu[1]))
                sections = []
                seen = set()
                continue
            top = _QUERY_TEXT_LINE.fullmatch(stripped)
            if top is None:
                raise ParseError(
                    NAME,
                    path,
                    f"expected 'Key : value' or 'GPU <bus id>', got {excerpt(stripped)}",
                    line=number,
                )
            if top[1] == "Driver Version":
                driver = top[2].strip() or None
            continue
        if not blocks:
            raise ParseError(NAME, path, "an indented line before the first GPU block", line=number)
        while sections and sections[-1][0] >= indent:
            sections.pop()
        pair = _QUERY_TEXT_LINE.fullmatch(stripped)
        if pair is None:
            sections.append((indent, stripped))
            continue
        key = (*(name for _, name in sections), pair[1])
        field = _QUERY_TEXT_KEYS.get(key)
        if field is not None and field not in seen:  # the first occurrence of a key wins
            seen.add(field)
            setattr(blocks[-1], field, pair[2])
    problems: list[str] = []
    gpus = [queried for fields in blocks if (queried := _queried_gpu(fields, driver, path, problems))]
    return (driver, _sorted_queried(gpus, path)), problems


def parse_smi_query_text(
    text: str, path: str = QUERY_TEXT_PATH
) -> tuple[str | None, tuple[model.QueriedGpu, ...]]:
    """Parse the text form of ``nvidia-smi -q`` (``-a``): the same fields as ``parse_smi_query_xml``."""
    return _read_smi_query_text(text, path)[0]
