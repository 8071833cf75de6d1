"""Exact reuse of a pure function's last result: the same input gives back the very same object.

An agent re-discovers an unchanged node every interval: it reads the same ``nvidia-smi`` and
``ibstat`` texts and the same NVML dump, builds equal facts and derives an equal topology. Each of
those steps is a pure function of its input, so when this scan's input equals the last one the last
(frozen, immutable) output *is* this scan's output. ``reuse_last`` wraps such a function and keeps
exactly one input/output pair.

What makes this sound, and what a caller must keep true:

* the key is the complete input, compared with ``==``: the whole text read this scan, not a file's
  mtime, inode or size, and never a read skipped (an input that changed by one byte is a new input);
* the function is pure (its result depends on its arguments only) and its result is immutable
  (frozen dataclasses, tuples, frozensets; a list in the result must be treated as read-only);
* an exception is never remembered: the next call runs the function again;
* one pair only, so what is held is what the caller held a scan ago anyway.

Comparing equal inputs costs little: ``str``/``bytes`` compare by length then memory, and a tuple
or frozen dataclass compares its parts element by element, stopping short at each part that is the
very same object (which reused results are).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Generic, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


class ReuseLast(Generic[P, R]):
    """``fn`` plus its last (arguments, result) pair; see the module docstring.

    Safe under threads: the pair is one tuple, read and replaced whole.
    """

    def __init__(self, fn: Callable[P, R]) -> None:
        self.fn = fn
        self._last: tuple[tuple[object, ...], dict[str, object], R] | None = None
        functools.update_wrapper(self, fn)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        last = self._last
        if last is not None and last[0] == args and last[1] == kwargs:
            return last[2]
        result = self.fn(*args, **kwargs)
        self._last = (args, kwargs, result)
        return result


def reuse_last(fn: Callable[P, R]) -> ReuseLast[P, R]:
    """``fn`` wrapped to return its last result again when called with equal arguments."""
    return ReuseLast(fn)
