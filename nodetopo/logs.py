"""Logging set-up, in one place: text or JSON lines on stderr. Configured once by the CLI."""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

from nodetopo.terminal import strip_control

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

#: ``extra={...}`` keys that JSON log lines carry as fields
CONTEXT_KEYS = ("source", "path", "node", "reason")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, context fields, exc."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key in CONTEXT_KEYS:
            if hasattr(record, key):
                entry[key] = getattr(record, key)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry)


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
