"""What every ``nvidia-smi`` parser shares: the source's name and the words of its text outputs."""

from __future__ import annotations

import re

from nodetopo import model

NAME = "nvidia-smi"

#: ``ESC[4m`` / ``ESC[0m`` around the header, or the ``[4m`` / ``[0m`` left when a paste lost the ESC
_SGR = re.compile(r"\x1b?\[[0-9;]{1,8}m")
#: values nvidia-smi prints where it could not read something; one token each after normalising
_ERROR_VALUES = frozenset({"ERR!", "[N/A]", "[Unknown_Error]", "Unknown_Error", "[GPU_requires_reset]"})
_MAX_CPU_ID = 65535  # far above any real machine; bounds the sets a hostile input could make us build
_CPULIST = re.compile(r"[0-9]{1,6}(?:-[0-9]{1,6})?(?:,[0-9]{1,6}(?:-[0-9]{1,6})?)*")


def _lines(text: str) -> list[str]:
    """Lines without line ends or trailing whitespace; index + 1 is the line number."""
    return [line.rstrip() for line in text.split("\n")]


def _nonblank_lines(text: str) -> list[tuple[int, str, str]]:
    """The lines that are not blank: (line number, the line as ``_lines`` gives it, the line stripped)."""
    return [
        (number, line, stripped)
        for number, line in enumerate(_lines(text), start=1)
        if (stripped := line.strip())
    ]


def _normalise_errors(line: str) -> str:
    """Make the multi-word error values one token, so that whitespace splitting keeps columns."""
    return (
        line.replace("[Unknown Error]", "[Unknown_Error]")
        .replace("Unknown Error", "Unknown_Error")
        .replace("[GPU requires reset]", "[GPU_requires_reset]")
    )


def _cpulist(value: str) -> frozenset[int] | None:
    """A cpulist cell (``0-55,112-167``), or None when it is not one."""
    if _CPULIST.fullmatch(value) is None:
        return None
    try:
        ids = model.parse_cpulist(value)
    except ValueError:
        return None
    if any(cpu > _MAX_CPU_ID for cpu in ids):
        return None
    return ids


def _int(value: str) -> int | None:
    return int(value) if re.fullmatch(r"[0-9]{1,9}", value) else None
