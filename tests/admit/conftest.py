"""What the admission tests share."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture
def cli_logging() -> Any:
    """``nodetopo.cli.main`` configures the root logger (handler and level) for the process: put it
    back, or later tests that read log records see a WARNING-level root."""
    import logging

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
