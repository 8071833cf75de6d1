"""Text meant for a person's terminal: safe to print, and as wide as the terminal.

Every string nodetopo prints for a person (the table, the capture summary, one-line errors, text
log lines) may hold bytes from a host or a bundle — a GPU name from ``nvidia-smi``, a netdev name
from sysfs, a path — and a hostile bundle can put terminal escape sequences there (move the cursor,
rewrite earlier lines, set the window title, hide text). ``strip_control`` removes them: whole
ANSI/VT escape sequences first, then every other C0/C1 control character, and the Unicode
direction overrides that make text read differently from what it is. Machine output (``-o json``,
``-o yaml``, JSON log lines) needs none of this: its encoders escape control characters.
"""

from __future__ import annotations

import os
import re
from typing import TextIO

# ESC [ ... final (CSI), ESC ] ... BEL or ST (OSC), ESC P/X/^/_ ... ST (DCS/SOS/PM/APC), ESC + one
# character (the other two- and three-character escapes), and the 8-bit CSI/OSC introducers.
_ESCAPE = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"
    r"|(?:\x1b[\]PX^_]|[\x9d\x90\x98\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[ -/]*[0-~]?"
)
# C0 (except tab and newline, handled below), DEL, C1; bidirectional overrides and isolates; the
# Unicode line and paragraph separators.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")


def strip_control(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` without escape sequences or control characters; tabs become spaces.

    Newlines become spaces too, unless ``keep_newlines`` (for a whole block of output whose
    values were already cleaned one by one).
    """
    text = _ESCAPE.sub("", text)
    text = _CONTROL.sub("", text).replace("\t", " ")
    return text if keep_newlines else text.replace("\n", " ").replace("\r", "")


def output_width(stream: TextIO) -> int | None:
    """The width to lay text out for: the terminal's columns, or None (no limit) when piped.

    ``COLUMNS`` wins when set (as for ``ls``), also for a pipe, so a test or a script can ask for
    a width.
    """
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        if not stream.isatty():
            return None
    except (AttributeError, ValueError):
        return None
    import shutil  # a terminal only (logging imports this module in every command)

    return shutil.get_terminal_size().columns


def use_style(stream: TextIO) -> bool:
    """Bold section titles only on a terminal, and never when ``NO_COLOR`` is set."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
