"""The bandwidth model: what a placement should deliver, and the verdict on what it did.

``expect`` (pure) turns NodeTopology facts and the GPU sets a workload holds into the expected
bus-bandwidth band of a collective, the limiting link and the assumptions; ``judge`` (pure) compares
a measured result (``nodetopo.perf``) with it: ``Passed``, ``ResourceNotReal`` (with the suspect
link), ``PlacedWrong`` (the placement caps below the declared need) or ``HarnessError``.
"""

from __future__ import annotations

from nodetopo.expect.links import ExpectError, Link, LinkKind, ObservedLink
from nodetopo.expect.model import (
    COLLECTIVE_ALGORITHMS,
    Algorithm,
    Band,
    Bound,
    Expectation,
    Placement,
    algorithms_for,
    expect,
)

__all__ = [
    "COLLECTIVE_ALGORITHMS",
    "Algorithm",
    "Band",
    "Bound",
    "ExpectError",
    "Expectation",
    "Link",
    "LinkKind",
    "ObservedLink",
    "Placement",
    "algorithms_for",
    "expect",
]
