"""The commands the sources run, declared once, and the one mapping of a command's failure to a condition.

Each source module declares the commands it runs in ``COMMANDS`` (``Command``: the argv, the most
time it may take, the file that holds its output in a capture bundle); ``nodetopo.sources.COMMANDS``
collects them in source order. The bundle runner answers the declared commands from their files and
``nodetopo capture`` writes those files: neither keeps a list of its own.

``run`` is how a source runs a command. A command that gave no output to read comes back as a
``Failed`` instead of an exception, its reason and message set by one table:

==========================  ===============  =================================================
the runner raised           condition        message
==========================  ===============  =================================================
``CommandNotFound``         ``Unavailable``  ``<program> is not installed ...`` + ``missing``
``CommandTimeout``          ``Timeout``      ``no answer within <t>s`` + ``hung``
``CommandOutputRefused``    ``ParseError``   ``output not read: <why>`` (too large, a FIFO ...)
==========================  ===============  =================================================

What an output that was read says (an exit code, a ``ParseError`` of its parser) is the source's to
judge. The source boundary (``sources.base.guarded``) maps a runner error that a source let through
with the same table, so that no command failure is ever reported as an internal error.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from nodetopo.host import (
    CommandError,
    CommandNotFound,
    CommandResult,
    CommandRunner,
    CommandTimeout,
)
from nodetopo.model import ConditionReason


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Command:
    """A command a source runs."""

    argv: tuple[str, ...]
    #: the file under a capture bundle's ``cmd/`` that holds its output; None: never captured
    output: str | None = None
    #: the most seconds it may run; None: the scan's command timeout (``Context.command_timeout_s``)
    timeout_s: float | None = None
    #: a file (relative to the bundle) that ``capture`` leaves when the command answered: it stands
    #: for what the source looks for on a host before it runs the command (lldpd's socket)
    answered_mark: str | None = None
    #: added to "<program> is not installed" (or "... not in the bundle"): what that means here
    missing: str = ""
    #: added to "no answer within <t>s": what a hang usually means
    hung: str = ""

    @property
    def line(self) -> str:
        """The command line as messages name it."""
        return " ".join(self.argv)

    def timeout(self, scan_timeout: float) -> float:
        """The timeout to run it with, given the scan's command timeout."""
        return scan_timeout if self.timeout_s is None else min(scan_timeout, self.timeout_s)


@dataclasses.dataclass(frozen=True, slots=True)
class Failed:
    """A command that gave no output to read (see the module docstring)."""

    command: str  #: the command line
    reason: ConditionReason
    message: str  #: what happened, without the command line: ``no answer within 20s``

    @property
    def not_found(self) -> bool:
        """The program is not there (not installed, or not in the bundle)."""
        return self.reason is ConditionReason.UNAVAILABLE

    @property
    def text(self) -> str:
        """The message, naming the command where it does not name its program already."""
        return self.message if self.not_found else f"{self.command}: {self.message}"


def describe(
    error: CommandError, *, timeout: float | None = None, missing: str = "", hung: str = ""
) -> tuple[ConditionReason, str]:
    """The condition reason and message of a runner's error (the module docstring's table).

    Without ``timeout`` a hang is described in the runner's own words (``<command> did not finish
    in <t>s``), for a caller that does not know which command it was.
    """
    if isinstance(error, CommandNotFound):
        return ConditionReason.UNAVAILABLE, f"{error}{missing}"
    if isinstance(error, CommandTimeout):
        said = f"no answer within {timeout:g}s" if timeout is not None else str(error)
        return ConditionReason.TIMEOUT, f"{said}{hung}"
    return ConditionReason.PARSE_ERROR, f"output not read: {error}"


def run(
    runner: CommandRunner, command: Command, *, timeout: float, argv: Sequence[str] | None = None
) -> CommandResult | Failed:
    """Run ``command`` (as ``argv`` when given: the same command spelled for this host, e.g. with
    the path of a socket) within ``timeout``; a ``Failed`` when it gave no output to read."""
    try:
        return runner.run(command.argv if argv is None else argv, timeout=timeout)
    except CommandError as e:
        reason, message = describe(e, timeout=timeout, missing=command.missing, hung=command.hung)
        return Failed(command.line, reason, message)
