"""What a probe check concludes (``Check``: pass, fail, warn, skip, with an attribution) and the
one-line verdict over all of them (see ``nodetopo.probe.checks`` for the attributions)."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence
from typing import Any

from nodetopo.errors import clip


class Status(enum.StrEnum):
    PASS = "pass"
    FAIL = "fail"
    WARN = "warn"
    SKIP = "skip"


class Attribution(enum.StrEnum):
    PLACED_WRONG = "PlacedWrong"
    RESOURCE_NOT_REAL = "ResourceNotReal"
    UNDECLARED = "Undeclared"
    HARNESS_ERROR = "HarnessError"


@dataclasses.dataclass(frozen=True, slots=True)
class Check:
    name: str
    status: Status
    reason: str
    attribution: Attribution | None = None
    #: False for a check that does not apply to this pod (not declared, no minimum asked): skipped,
    #: and not counted among the checks that could have been made
    asked: bool = True

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "status": str(self.status), "reason": self.reason}
        if self.attribution is not None:
            out["attribution"] = str(self.attribution)
        if not self.asked:
            out["asked"] = False
        return out


def passed(name: str, reason: str) -> Check:
    return Check(name, Status.PASS, reason)


def skipped(name: str, reason: str) -> Check:
    """A check that applies but could not be made (what it needs could not be read)."""
    return Check(name, Status.SKIP, reason)


def not_asked(name: str, reason: str) -> Check:
    """A check that does not apply to this pod: nothing declared or asked needs it."""
    return Check(name, Status.SKIP, reason, asked=False)


def failed(name: str, reason: str, attribution: Attribution) -> Check:
    return Check(name, Status.FAIL, reason, attribution)


def warned(name: str, reason: str, attribution: Attribution) -> Check:
    return Check(name, Status.WARN, reason, attribution)


@dataclasses.dataclass(frozen=True, slots=True)
class Verdict:
    passed: bool
    attribution: Attribution | None
    line: str  #: the one-line verdict (termination message, Event message)


#: the longest verdict line (the kubelet keeps 4096 bytes of a termination message)
MAX_LINE = 4000


def checked(checks: Sequence[Check]) -> str:
    """``N of M checked`` over the checks that apply (M), naming the ones that could not be made."""
    applying = [c for c in checks if c.asked]
    made = sum(1 for c in applying if c.status is not Status.SKIP)
    unmade = [c.name for c in applying if c.status is Status.SKIP]
    return f"{made} of {len(applying)} checked" + (f" (skipped: {', '.join(unmade)})" if unmade else "")


def verdict(checks: Sequence[Check], *, strict: bool = False) -> Verdict:
    """The one-line verdict. ``strict``: a check that applies but could not be made fails the pod.

    Its ``line`` is one line (``nodetopo.errors.clip``): a reason quotes names the node and the
    container chose (NIC names, device names), which may hold newlines or terminal escape sequences,
    and the line ends in a termination message and an Event."""
    failures = [c for c in checks if c.status is Status.FAIL]
    warnings = [c for c in checks if c.status is Status.WARN]
    if failures:
        first = failures[0]
        more = f" (+{len(failures) - 1} more)" if len(failures) > 1 else ""
        line = clip(f"{first.attribution}: {first.name}: {first.reason}", MAX_LINE - len(more)) + more
        return Verdict(False, first.attribution, line)
    if strict and any(c.asked and c.status is Status.SKIP for c in checks):
        return Verdict(False, None, clip(f"failed (--strict): {checked(checks)}", MAX_LINE))
    if warnings:
        first = warnings[0]
        return Verdict(
            True,
            first.attribution,
            clip(
                f"passed with warning {first.attribution}: {first.name}: {first.reason}; {checked(checks)}",
                MAX_LINE,
            ),
        )
    return Verdict(True, None, clip(f"passed, {checked(checks)}", MAX_LINE))
