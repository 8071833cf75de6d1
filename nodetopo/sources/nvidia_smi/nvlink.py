"""``nvidia-smi nvlink -s`` (``--status``): each GPU's NVLink links and their speeds; ``nvidia-smi nvlink
-e`` (``--errorcounters``): each link's error counters."""

from __future__ import annotations

import dataclasses
import re

from nodetopo import model
from nodetopo.errors import ParseError, excerpt
from nodetopo.sources.nvidia_smi._text import _ERROR_VALUES, NAME, _nonblank_lines, _normalise_errors

NVLINK_PATH = "nvidia-smi nvlink -s"
NVLINK_ERRORS_PATH = "nvidia-smi nvlink -e"

_NVLINK_GPU = re.compile(
    r"GPU ([0-9]{1,4}): (.*\S) \(UUID: (GPU-[0-9A-Za-z-]{1,80})\)|GPU ([0-9]{1,4}): (.*\S)"
)
_NVLINK_LINE = re.compile(r"Link ([0-9]{1,3}): (.*)")
_NVLINK_SPEED = re.compile(r"([0-9]{1,6}(?:\.[0-9]{1,6})?) GB/s")


def _gpu_line(
    line: str, stripped: str, seen: set[int], path: str, number: int
) -> tuple[int, str | None] | None:
    """The index and UUID of a ``GPU n: ...`` line at the margin (None for any other line), added to
    ``seen``; a GPU listed twice is a ParseError."""
    gpu = _NVLINK_GPU.fullmatch(stripped)
    if gpu is None or line[0].isspace():
        return None
    index = int(gpu[1] if gpu[1] is not None else gpu[4])
    if index in seen:
        raise ParseError(NAME, path, f"GPU {index} is listed twice", line=number)
    seen.add(index)
    return index, gpu[3]


def _read_nvlink_status(text: str, path: str) -> tuple[tuple[model.NvlinkStatus, ...], list[str]]:
    gpus: list[model.NvlinkStatus] = []
    links: list[dict[int, float | None]] = []  #: the links of gpus[i], joined at the end (linear)
    seen: set[int] = set()
    problems: list[str] = []
    for number, line, stripped in _nonblank_lines(text):
        link = _NVLINK_LINE.fullmatch(stripped)
        if link is not None:
            if not gpus:
                raise ParseError(NAME, path, "a Link line before any GPU line", line=number)
            value = link[2].strip()
            speed: float | None
            if value.lower() == "<inactive>":
                speed = None
            elif (match := _NVLINK_SPEED.fullmatch(value)) is not None:
                speed = float(match[1])
            elif _normalise_errors(value) in _ERROR_VALUES or value == "N/A":
                problems.append(f"GPU {gpus[-1].index} link {link[1]} reads {value}")
                speed = None
            else:
                raise ParseError(
                    NAME,
                    path,
                    f"Link {link[1]}: expected '<n> GB/s' or '<inactive>', got {excerpt(value)}",
                    line=number,
                )
            if int(link[1]) in links[-1]:
                raise ParseError(NAME, path, f"GPU {gpus[-1].index} lists Link {link[1]} twice", line=number)
            links[-1][int(link[1])] = speed
            continue
        gpu = _gpu_line(line, stripped, seen, path, number)
        if gpu is not None:
            gpus.append(model.NvlinkStatus(index=gpu[0], uuid=gpu[1], links=()))
            links.append({})
            continue
        raise ParseError(
            NAME, path, f"expected 'GPU n: ...' or 'Link n: ...', got {excerpt(stripped)}", line=number
        )
    result = tuple(
        sorted(
            (
                dataclasses.replace(gpu, links=tuple(sorted(found.items())))
                for gpu, found in zip(gpus, links, strict=True)
            ),
            key=lambda gpu: gpu.index,
        )
    )
    return result, problems


def parse_nvlink_status(text: str, path: str = NVLINK_PATH) -> tuple[model.NvlinkStatus, ...]:
    """Parse ``nvidia-smi nvlink -s`` (``--status``): per GPU, (link, GB/s) with None for ``<inactive>``."""
    return _read_nvlink_status(text, path)[0]


#: ``Link 3: Replay Errors: 211``: a link, a counter's name, its count (or ``N/A``)
_ERROR_LINE = re.compile(r"Link ([0-9]{1,3}): ([A-Za-z][A-Za-z0-9 /_-]{0,40}?): (.*)")
#: the counters nodetopo reads, by the words nvidia-smi prints (other counters of newer drivers are
#: read and ignored)
ERROR_COUNTERS = {"replay errors": "replay", "recovery errors": "recovery", "crc errors": "crc"}
#: a count nvidia-smi prints: at most a 64-bit counter's digits
_COUNT = re.compile(r"[0-9]{1,20}")


def _read_nvlink_errors(text: str, path: str) -> tuple[tuple[model.NvlinkReading, ...], list[str]]:
    counters: dict[tuple[int, int], dict[str, int | None]] = {}
    gpu: int | None = None
    seen: set[int] = set()
    problems: list[str] = []
    for number, line, stripped in _nonblank_lines(text):
        found = _ERROR_LINE.fullmatch(stripped)
        if found is not None:
            if gpu is None:
                raise ParseError(NAME, path, "a Link line before any GPU line", line=number)
            link, name, value = int(found[1]), found[2].strip().lower(), found[3].strip()
            key = ERROR_COUNTERS.get(name)
            mine = counters.setdefault((gpu, link), {})
            if key is None:
                continue
            if key in mine:
                raise ParseError(NAME, path, f"GPU {gpu} Link {link}: {found[2]} listed twice", line=number)
            if _COUNT.fullmatch(value):
                mine[key] = int(value)
            elif value == "N/A" or _normalise_errors(value) in _ERROR_VALUES:
                mine[key] = None
                if value != "N/A":
                    problems.append(f"GPU {gpu} link {link} {found[2]} reads {value}")
            else:
                raise ParseError(
                    NAME,
                    path,
                    f"Link {link}: {found[2]}: expected a count, got {excerpt(value)}",
                    line=number,
                )
            continue
        header = _gpu_line(line, stripped, seen, path, number)
        if header is not None:
            gpu = header[0]
            continue
        raise ParseError(
            NAME,
            path,
            f"expected 'GPU n: ...' or 'Link n: <counter>: <count>', got {excerpt(stripped)}",
            line=number,
        )
    readings = tuple(
        model.NvlinkReading(
            gpu=gpu_index,
            link=link,
            source=NAME,
            replay=values.get("replay"),
            recovery=values.get("recovery"),
            crc=values.get("crc"),
        )
        for (gpu_index, link), values in sorted(counters.items())
    )
    return readings, problems


def parse_nvlink_errors(text: str, path: str = NVLINK_ERRORS_PATH) -> tuple[model.NvlinkReading, ...]:
    """Parse ``nvidia-smi nvlink -e``: per GPU and link, the replay, recovery and CRC error counts."""
    return _read_nvlink_errors(text, path)[0]
