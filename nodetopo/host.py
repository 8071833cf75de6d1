"""The two seams through which nodetopo touches the host: a filesystem root and a command runner.

Production passes ``HostRoot("/")`` (``/host`` in the DaemonSet) and ``SubprocessRunner()``; tests
pass a fixture directory and a ``ReplayRunner`` that serves captured command outputs. Nothing else
in nodetopo opens host paths or starts processes.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol


class HostRoot:
    """A root directory standing for the host's ``/`` (like hwloc's ``HWLOC_FSROOT``)."""

    def __init__(self, path: str | os.PathLike[str] = "/") -> None:
        self.path = Path(path)
        self._real = os.path.realpath(self.path)  # resolve() is on the hot path of every PCI device

    def __repr__(self) -> str:
        return f"HostRoot({str(self.path)!r})"

    @property
    def real_path(self) -> Path:
        """The root with its own symlinks resolved (what ``resolve`` results are relative to)."""
        return Path(self._real)

    @property
    def is_this_system(self) -> bool:
        """True when the root is the real ``/``: only then may live-only sources (NVML) run."""
        return self.path.resolve() == Path("/")

    def sys(self, *parts: str) -> Path:
        """A path under ``<root>/sys``."""
        return self.path.joinpath("sys", *parts)

    def resolve(self, path: Path) -> Path:
        """Resolve symlinks of a path under this root, interpreting absolute links inside the root.

        sysfs uses relative links (``../../../devices/pci0000:00/...``), which resolve naturally;
        absolute links (seen in some captures) are re-rooted. Raises ``ValueError`` when the result
        escapes the root and ``FileNotFoundError`` for a dangling link.
        """
        root = self._real
        current = os.fspath(path)
        for _ in range(40):
            if not os.path.islink(current):
                break
            target = os.readlink(current)
            if os.path.isabs(target):
                current = os.path.join(root, target.lstrip("/"))
            else:
                current = os.path.join(os.path.dirname(current), target)
        resolved = os.path.realpath(current, strict=True)
        if resolved != root and not resolved.startswith(root.rstrip("/") + "/"):
            raise ValueError(f"{path} resolves outside the host root {root}: {resolved}")
        return Path(resolved)

    def relative(self, path: Path) -> str:
        """``path`` as the host would name it (``/sys/...``), for messages."""
        text, base = os.fspath(path), os.fspath(self.path).rstrip("/")
        if base and text.startswith(base + "/"):
            return text[len(base) :]
        return text


@dataclasses.dataclass(frozen=True, slots=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    duration_s: float = 0.0


class CommandNotFound(Exception):
    """The program is not installed (or not on PATH)."""


class CommandTimeout(Exception):
    """The program did not finish within its timeout (and was killed)."""


class CommandRunner(Protocol):
    """Runs a command and returns its output; raises ``CommandNotFound`` / ``CommandTimeout``."""

    def run(self, argv: Sequence[str], *, timeout: float) -> CommandResult: ...


class SubprocessRunner:
    """Runs commands for real, with a timeout, no shell and no stdin."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.env = dict(env) if env is not None else None

    def run(self, argv: Sequence[str], *, timeout: float) -> CommandResult:
        start = time.monotonic()
        try:
            proc = subprocess.run(
                list(argv),
                capture_output=True,
                timeout=timeout,
                stdin=subprocess.DEVNULL,
                env=self.env,
                check=False,
            )
        except FileNotFoundError as e:
            raise CommandNotFound(argv[0]) from e
        except subprocess.TimeoutExpired as e:
            raise CommandTimeout(f"{' '.join(argv)} did not finish in {timeout:g}s") from e
        return CommandResult(
            argv=tuple(argv),
            returncode=proc.returncode,
            stdout=proc.stdout.decode("utf-8", errors="replace"),
            stderr=proc.stderr.decode("utf-8", errors="replace"),
            duration_s=time.monotonic() - start,
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Replay:
    """A canned answer for ``ReplayRunner``: stdout text, exit code, stderr, or a hang."""

    stdout: str = ""
    returncode: int = 0
    stderr: str = ""
    hang: bool = False


class ReplayRunner:
    """Serves captured outputs instead of running anything. Unknown commands are not installed."""

    def __init__(self, answers: Mapping[tuple[str, ...], Replay | str | Path]) -> None:
        self.answers: dict[tuple[str, ...], Replay] = {}
        for argv, answer in answers.items():
            if isinstance(answer, Path):
                answer = Replay(stdout=answer.read_text(encoding="utf-8", errors="replace"))
            elif isinstance(answer, str):
                answer = Replay(stdout=answer)
            self.answers[tuple(argv)] = answer
        self.calls: list[tuple[str, ...]] = []

    def run(self, argv: Sequence[str], *, timeout: float) -> CommandResult:
        key = tuple(argv)
        self.calls.append(key)
        answer = self.answers.get(key)
        if answer is None:
            raise CommandNotFound(key[0])
        if answer.hang:
            raise CommandTimeout(f"{' '.join(key)} did not finish in {timeout:g}s")
        return CommandResult(key, answer.returncode, answer.stdout, answer.stderr)
