"""Logging set-up, in one place: text or JSON lines on stderr. Configured once by the CLI.

JSON lines (``--log-format json``, for log pipelines) carry ``ts`` (RFC 3339, UTC, milliseconds:
``2026-12-01T07:50:11.042Z``), ``level``, ``logger``, ``msg``, and every ``extra={...}`` field of
the call as a field of its own (``source``, ``reason``, ``gpus``, ``ready`` ...), so a pipeline
filters on facts instead of parsing messages. Text lines are for people: control characters are
stripped (a message may quote a capture bundle's bytes).
"""

from __future__ import annotations

import datetime
import json
import logging
import sys
from typing import Any

from nodetopo.command.terminal import strip_control

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

#: the attributes every ``LogRecord`` has: anything else on a record came from ``extra={...}``
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {
    "message",
    "asctime",
    "taskName",
}
#: names a field may not take (they are the line's own)
_RESERVED = frozenset({"ts", "level", "logger", "msg", "exc"})


def rfc3339_ms(created: float) -> str:
    """``created`` (seconds since the epoch) as RFC 3339 in UTC with milliseconds."""
    when = datetime.datetime.fromtimestamp(created, datetime.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, then the call's extra fields, then exc."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": rfc3339_ms(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[f"extra_{key}" if key in _RESERVED else key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class TextFormatter(logging.Formatter):
    """``TEXT_FORMAT`` lines for a person's terminal: control characters stripped (a message may
    quote a bundle's bytes), newlines kept only for tracebacks."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def formatMessage(self, record: logging.LogRecord) -> str:
        return strip_control(super().formatMessage(record))

    def formatException(self, ei: Any) -> str:
        return strip_control(super().formatException(ei), keep_newlines=True)


def configure_logging(level: str, fmt: str) -> None:
    """Send every log record at ``level`` or above to stderr, as ``text`` or ``json`` lines.

    Idempotent: calling it again (the agent does, once its config file is read) replaces the handler.
    """
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
