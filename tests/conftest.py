"""Shared test helpers: where the third-party corpus lives. No autouse fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import REPO


def corpus_dir() -> Path:
    """``$NODETOPO_CORPUS`` or ``../shared/corpus`` beside the checkout."""
    return Path(os.environ.get("NODETOPO_CORPUS", REPO.parent / "shared" / "corpus"))


@pytest.fixture(scope="session")
def corpus() -> Path:
    """The real-machine corpus (read in place, never copied). Missing: fail under CI, else skip."""
    path = corpus_dir()
    if not (path / "real").is_dir():
        message = (
            f"the real-machine corpus is not at {path}: clone the steering repo's shared/ beside this "
            "checkout (../shared/corpus) or set NODETOPO_CORPUS"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path / "real"
