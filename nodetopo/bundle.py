"""The capture bundle: a directory that stands for a node (design.md §2).

```
BUNDLE/
  sys/...                      a subset of /sys, symlinks kept
  cmd/nvidia-smi-topo-m.txt    `nvidia-smi topo -m`
  cmd/nvidia-smi-L.txt         `nvidia-smi -L`
  cmd/nvidia-smi-q.xml         `nvidia-smi -q -x`
  cmd/nvidia-smi-nvlink-s.txt  `nvidia-smi nvlink -s`
  cmd/ibstat.txt               `ibstat`
  cmd/ibv_devinfo.txt          `ibv_devinfo` (used when ibstat is missing)
  cmd/lldpcli-neighbors.json   `lldpcli -f json0 show neighbors` (LLDP neighbours, when lldpd runs)
  nvml.json                    NVML dump (sources.nvml)
```

Every part is optional. A bundle is replayed through the same seams as a live host: ``HostRoot``
on the bundle directory and a ``ReplayRunner`` that answers each command from its file. A command
whose file is absent behaves as a tool that is not there ("not in the bundle"). ``cmd/<file>.rc``
(exit code) and ``cmd/<file>.stderr`` may sit beside an output to replay a failing command; an
``.rc`` file that says ``timeout`` replays a command that hung.
"""

from __future__ import annotations

import os
from pathlib import Path

from nodetopo.errors import BundleError
from nodetopo.host import (
    COMMAND_OUTPUT_LIMIT,
    COMMAND_STDERR_LIMIT,
    SMALL_FILE_LIMIT,
    CommandNotFound,
    CommandRunner,
    CommandTimeout,
    HostRoot,
    Refused,
    Replay,
    ReplayRunner,
)

#: bundle file name -> the command line it is the output of
COMMANDS: dict[str, tuple[str, ...]] = {
    "nvidia-smi-topo-m.txt": ("nvidia-smi", "topo", "-m"),
    "nvidia-smi-L.txt": ("nvidia-smi", "-L"),
    "nvidia-smi-q.xml": ("nvidia-smi", "-q", "-x"),
    "nvidia-smi-nvlink-s.txt": ("nvidia-smi", "nvlink", "-s"),
    "ibstat.txt": ("ibstat",),
    "ibv_devinfo.txt": ("ibv_devinfo",),
    "lldpcli-neighbors.json": ("lldpcli", "-f", "json0", "show", "neighbors"),
}

NVML_DUMP = "nvml.json"


def bundle_runner(bundle: Path) -> ReplayRunner:
    """A runner that answers the commands in ``COMMANDS`` from ``bundle/cmd``.

    Files are read as ``HostRoot.read_bytes`` reads them: a file that is a link out of the bundle,
    not a regular file (a FIFO, ``/dev/zero``) or larger than ``COMMAND_OUTPUT_LIMIT`` is not read;
    its command replays as ``CommandOutputRefused``, which the source reports as a condition.
    """
    root = HostRoot(bundle)
    answers: dict[tuple[str, ...], Replay | str | Path] = {}
    cmd_dir = bundle / "cmd"
    for filename, argv in COMMANDS.items():
        path = cmd_dir / filename
        try:
            stdout = root.read_text(path, limit=COMMAND_OUTPUT_LIMIT)
        except FileNotFoundError:
            continue
        except (Refused, OSError) as e:
            answers[argv] = Replay(refused=str(e) if isinstance(e, Refused) else f"{filename}: {e.strerror}")
            continue
        rc_text = _side_file(root, path.with_name(path.name + ".rc"), SMALL_FILE_LIMIT) or "0"
        rc_text = rc_text.strip()
        answers[argv] = Replay(
            stdout=stdout,
            returncode=int(rc_text) if rc_text.lstrip("-").isdigit() and len(rc_text) < 10 else 0,
            hang=rc_text == "timeout",
            stderr=_side_file(root, path.with_name(path.name + ".stderr"), COMMAND_STDERR_LIMIT) or "",
        )
    captured = {argv[0] for argv in answers}
    files = {argv: filename for filename, argv in COMMANDS.items()}

    def absent(argv: tuple[str, ...]) -> str:
        """One output missing: name its file; the whole program missing: say it once."""
        if argv[0] in captured and argv in files:
            return f"not in the bundle (no cmd/{files[argv]})"
        return f"not in the bundle (no cmd/{argv[0]}* file)"

    return ReplayRunner(answers, absent=absent)


def _side_file(root: HostRoot, path: Path, limit: int) -> str | None:
    """An optional ``.rc``/``.stderr`` file; None when absent or refused (too large, not a file)."""
    try:
        return root.read_text(path, limit=limit)
    except (Refused, OSError):
        return None


def open_bundle(path: str | Path) -> tuple[HostRoot, ReplayRunner, Path | None]:
    """Check a bundle directory and return its host root, runner and NVML dump path (or None)."""
    bundle = Path(path)
    if not bundle.is_dir():
        raise BundleError(f"{bundle}: not a directory (expected a capture bundle, see `nodetopo capture`)")
    parts = [bundle / "sys", bundle / "cmd", bundle / NVML_DUMP]
    if not any(p.exists() for p in parts):
        raise BundleError(f"{bundle}: no sys/, cmd/ or {NVML_DUMP} inside: not a capture bundle")
    nvml = bundle / NVML_DUMP
    # present in any form (a FIFO or a link out of the bundle too): the NVML source refuses it then
    return HostRoot(bundle), bundle_runner(bundle), nvml if os.path.lexists(nvml) else None


def capture_commands(runner: CommandRunner, bundle: Path, *, timeout: float = 30.0) -> list[str]:
    """Run every command in ``COMMANDS`` and write its output into ``bundle/cmd``.

    A command that is not installed leaves no file (replayed as "not installed"). A failing one
    keeps its stdout plus ``.rc`` and ``.stderr`` so the failure replays too. Returns notes for the
    user, one per command.
    """
    cmd_dir = bundle / "cmd"
    cmd_dir.mkdir(parents=True, exist_ok=True)
    notes: list[str] = []
    for filename, argv in COMMANDS.items():
        command = " ".join(argv)
        try:
            result = runner.run(argv, timeout=timeout)
        except CommandNotFound:
            notes.append(f"{command}: not installed, skipped")
            continue
        except CommandTimeout as e:
            (cmd_dir / filename).write_text("")
            (cmd_dir / (filename + ".rc")).write_text("timeout\n")
            (cmd_dir / (filename + ".stderr")).write_text(f"{e}\n")
            notes.append(f"{command}: timed out after {timeout:g}s")
            continue
        (cmd_dir / filename).write_text(result.stdout)
        if result.returncode != 0:
            (cmd_dir / (filename + ".rc")).write_text(f"{result.returncode}\n")
            (cmd_dir / (filename + ".stderr")).write_text(result.stderr)
            notes.append(f"{command}: exit {result.returncode}, output kept")
        else:
            notes.append(f"{command}: ok")
    return notes
