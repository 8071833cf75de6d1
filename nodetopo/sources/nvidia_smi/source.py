"""The nvidia-smi source: its five commands, each run on its own, and what each output says."""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from nodetopo import model
from nodetopo.errors import ParseError, clip
from nodetopo.host import CommandRunner
from nodetopo.model import Condition, ConditionReason, Facts, SourceStatus
from nodetopo.reuse import ScanCache
from nodetopo.sources import commands
from nodetopo.sources.base import Context, SourceResult, condition, failure_level, guarded
from nodetopo.sources.commands import Command
from nodetopo.sources.nvidia_smi._text import NAME
from nodetopo.sources.nvidia_smi.listing import _read_smi_list
from nodetopo.sources.nvidia_smi.nvlink import _read_nvlink_errors, _read_nvlink_status
from nodetopo.sources.nvidia_smi.query import _read_smi_query_xml
from nodetopo.sources.nvidia_smi.topo import _read_topo_matrix

log = logging.getLogger(__name__)

_HUNG = " (a hung GPU or driver?)"
#: the commands this source runs, each on its own (a capture bundle keeps each output in its file)
TOPO_COMMAND = Command(argv=("nvidia-smi", "topo", "-m"), output="nvidia-smi-topo-m.txt", hung=_HUNG)
LIST_COMMAND = Command(argv=("nvidia-smi", "-L"), output="nvidia-smi-L.txt", hung=_HUNG)
QUERY_XML_COMMAND = Command(argv=("nvidia-smi", "-q", "-x"), output="nvidia-smi-q.xml", hung=_HUNG)
NVLINK_COMMAND = Command(argv=("nvidia-smi", "nvlink", "-s"), output="nvidia-smi-nvlink-s.txt", hung=_HUNG)
NVLINK_ERRORS_COMMAND = Command(
    argv=("nvidia-smi", "nvlink", "-e"), output="nvidia-smi-nvlink-e.txt", hung=_HUNG
)
COMMANDS: tuple[Command, ...] = (
    TOPO_COMMAND,
    LIST_COMMAND,
    QUERY_XML_COMMAND,
    NVLINK_COMMAND,
    NVLINK_ERRORS_COMMAND,
)
TOPO_ARGV = TOPO_COMMAND.argv
LIST_ARGV = LIST_COMMAND.argv
QUERY_XML_ARGV = QUERY_XML_COMMAND.argv
NVLINK_ARGV = NVLINK_COMMAND.argv
NVLINK_ERRORS_ARGV = NVLINK_ERRORS_COMMAND.argv

_T = TypeVar("_T")

# --------------------------------------------------------------------------------------------
# collect(): run the commands, each on its own
# --------------------------------------------------------------------------------------------

#: output that means nvidia-smi cannot talk to any GPU; the message is kept as the reason's text
_NO_DEVICES = re.compile(r"No devices were found|No devices found", re.IGNORECASE)
_NO_DRIVER = re.compile(
    r"Failed to initialize NVML.*|NVIDIA-SMI has failed.*|.*couldn't communicate with the NVIDIA driver.*"
    r"|NVML Shared Library Not Found.*|.*Driver/library version mismatch.*",
    re.IGNORECASE,
)


#: text that each line ``_NO_DEVICES`` or ``_NO_DRIVER`` matches contains, in ASCII lower case
_FAILURE_WORDS = (
    "no devices",
    "failed to initialize nvml",
    "nvidia-smi has failed",
    "couldn't communicate with the nvidia driver",
    "nvml shared library not found",
    "driver/library version mismatch",
)


def _failure_candidates(text: str) -> list[str]:
    """The lines of ``text`` that ``_NO_DEVICES`` or ``_NO_DRIVER`` could match.

    An ASCII text that holds none of ``_FAILURE_WORDS`` (the usual answer) has none, which one
    pass over the text says; matching both patterns against each line of a 190 KB ``-q -x`` cost
    twice its parse. A text with any other character is scanned line by line: ``IGNORECASE``
    matches characters outside ASCII (the Kelvin sign as k) that lower-casing does not map.
    """
    if text.isascii():
        lowered = text.lower()
        if not any(word in lowered for word in _FAILURE_WORDS):
            return []
    return text.splitlines()


@dataclasses.dataclass(frozen=True, slots=True)
class _Outcome(Generic[_T]):
    """What one command gave: its value (None when it failed), its status and its conditions."""

    value: _T | None
    status: SourceStatus
    conditions: tuple[Condition, ...] = ()
    failure: tuple[ConditionReason, str] | None = None  #: (reason, message) when value is None
    partly: str | None = None  #: what was not readable in an output that was read (logged)


def _first_line(text: str) -> str:
    return clip(next((line.strip() for line in text.splitlines() if line.strip()), ""))


def _failure(command: str, reason: ConditionReason, message: str) -> _Outcome[_T]:
    return _Outcome(
        None,
        SourceStatus(name=command, ok=False, message=f"{reason.value}: {message}"),
        (condition(NAME, reason, f"{command}: {message}"),),
        (reason, message),
    )


def _logged(command: str, outcome: _Outcome[_T]) -> _Outcome[_T]:
    """``outcome``, with its failure or its partly readable output logged."""
    extra = {"source": NAME, "path": command}
    if outcome.failure is not None:
        reason, message = outcome.failure
        log.log(failure_level(reason), "%s: %s: %s", command, reason.value, message, extra=extra)
    elif outcome.partly is not None:
        log.warning("%s: partly readable: %s", command, outcome.partly, extra=extra)
    return outcome


def _outcome(
    command: str,
    stdout: str,
    stderr: str,
    returncode: int,
    read: Callable[[str, str], tuple[_T, Sequence[str]]],
) -> _Outcome[_T]:
    """What one command's output says (pure: logs nothing); every way it can be wrong is a condition."""
    for line in _failure_candidates(f"{stdout}\n{stderr}"):
        line = line.strip()
        if _NO_DEVICES.search(line):
            return _failure(
                command, ConditionReason.UNAVAILABLE, f"no GPUs visible to the driver ({clip(line)})"
            )
        if _NO_DRIVER.fullmatch(line):
            return _failure(command, ConditionReason.UNAVAILABLE, f"{clip(line)} (exit {returncode})")
    if returncode != 0 and not stdout.strip():
        detail = _first_line(stderr) or "no output"
        return _failure(command, ConditionReason.UNAVAILABLE, f"exited {returncode}: {detail}")

    try:
        value, problems = read(stdout, command)
    except ParseError as e:
        exit_note = f" (exit {returncode})" if returncode != 0 else ""
        return _failure(command, ConditionReason.PARSE_ERROR, f"{e}{exit_note}")

    notes = list(problems)
    if returncode != 0:
        notes.append(f"exited {returncode}: {_first_line(stderr) or 'no message'}")
    if not notes:
        return _Outcome(value, SourceStatus(name=command, ok=True))
    message = "; ".join(clip(note) for note in notes[:5])
    message += f"; and {len(notes) - 5} more" if len(notes) > 5 else ""
    return _Outcome(
        value,
        SourceStatus(name=command, ok=True, message=f"Degraded: {message}"),
        (condition(NAME, ConditionReason.DEGRADED, f"{command}: {message}"),),
        partly=message,
    )


def _run(
    runner: CommandRunner,
    command: Command,
    timeout: float,
    outcome: Callable[[str, str, str, int], _Outcome[_T]],
) -> _Outcome[_T]:
    """Run one command and read its output with ``outcome`` (``_outcome`` with its reader)."""
    line = command.line
    result = commands.run(runner, command, timeout=timeout)
    if isinstance(result, commands.Failed):
        return _logged(line, _failure(line, result.reason, result.message))
    return _logged(line, outcome(line, result.stdout, result.stderr, result.returncode))


def _topo_outcome(command: str, stdout: str, stderr: str, returncode: int) -> _Outcome[model.TopoMatrix]:
    return _outcome(command, stdout, stderr, returncode, _read_topo_matrix)


def _list_outcome(
    command: str, stdout: str, stderr: str, returncode: int
) -> _Outcome[tuple[model.ListedGpu, ...]]:
    return _outcome(command, stdout, stderr, returncode, _read_smi_list)


def _nvlink_outcome(
    command: str, stdout: str, stderr: str, returncode: int
) -> _Outcome[tuple[model.NvlinkStatus, ...]]:
    return _outcome(command, stdout, stderr, returncode, _read_nvlink_status)


def _nvlink_errors_outcome(
    command: str, stdout: str, stderr: str, returncode: int
) -> _Outcome[tuple[model.NvlinkReading, ...]]:
    """``nvlink -e`` is read afresh every scan: its counters are what changes."""
    return _outcome(command, stdout, stderr, returncode, _read_nvlink_errors)


def _query_xml_outcome(
    command: str, stdout: str, stderr: str, returncode: int
) -> _Outcome[tuple[str | None, tuple[model.QueriedGpu, ...], tuple[model.GpuPcieReading, ...]]]:
    """``-q -x`` is read afresh every scan: a live driver's answer carries a timestamp and sensor
    readings (temperature, power, clocks) that differ at every call, so an equal output would only
    ever come from a capture, and remembering the last one would hold its text for nothing."""
    return _outcome(command, stdout, stderr, returncode, _read_smi_query_xml)


def read_facts(runner: CommandRunner, *, timeout: float, cache: ScanCache | None = None) -> Facts:
    """Run the five nvidia-smi commands, each on its own: one failing keeps the others' facts.

    What ``topo -m``, ``-L`` and ``nvlink -s`` said is given back through ``cache`` when the command
    printed the same output as last time (an unchanged node, every scan); any other output is read
    afresh (nodetopo.reuse).
    """
    cache = cache if cache is not None else ScanCache()
    topo = _run(runner, TOPO_COMMAND, timeout, cache.last(_topo_outcome))
    listed = _run(runner, LIST_COMMAND, timeout, cache.last(_list_outcome))
    queried = _run(runner, QUERY_XML_COMMAND, timeout, _query_xml_outcome)
    nvlink = _run(runner, NVLINK_COMMAND, timeout, cache.last(_nvlink_outcome))
    errors = _run(runner, NVLINK_ERRORS_COMMAND, timeout, _nvlink_errors_outcome)
    outcomes = (topo, listed, queried, nvlink, errors)
    statuses = tuple(o.status for o in outcomes)
    conditions = tuple(c for o in outcomes for c in o.conditions)

    # The same failure five times (not installed, driver mismatch, no GPUs) is one fact: say it once.
    failures = {o.failure for o in outcomes}
    if len(failures) == 1 and (failure := failures.pop()) is not None:
        reason, message = failure
        return Facts(
            sources=(SourceStatus(name=NAME, ok=False, message=f"{reason.value}: {message}"),),
            conditions=(condition(NAME, reason, message),),
        )
    return Facts(
        topo_matrix=topo.value,
        listed_gpus=listed.value or (),
        queried_gpus=queried.value[1] if queried.value is not None else (),
        nvlink_status=nvlink.value or (),
        sources=statuses,
        conditions=conditions,
        health=model.HealthReadings(
            gpu_pcie=queried.value[2] if queried.value is not None else (),
            nvlinks=errors.value or (),
        ),
    )


def collect(ctx: Context) -> SourceResult:
    """The nvidia-smi source: ``topo -m``, ``-L``, ``-q -x``, ``nvlink -s`` and ``nvlink -e`` through
    ``ctx.runner``."""
    return guarded(NAME, lambda: read_facts(ctx.runner, timeout=ctx.command_timeout_s, cache=ctx.cache))
