"""A restarted agent's health judgement: its tracker seeded from what the last published NodeTopology
recorded, so that counter rates are judged across the restart and a degraded edge stays published.

* ``SeededJudge``: the agent's ``HealthTracker``; at its first judgement it reads the stored
  NodeTopology once (``read_published``) and seeds the tracker with its ``status.health``
  (``nodetopo.resource.baseline``): the degraded edges and the counter baseline. A read that fails
  is logged and the tracker starts from this scan, as it did before there was a baseline.
* ``read_boot_id``: the kernel's boot id, recorded with the baseline. Counters count since boot: a
  baseline of another boot is not used (``HealthTracker.seed``). A live host's is the agent's own
  kernel's (``/proc/sys/kernel/random/boot_id`` is not namespaced: a container sees its node's);
  a bundle's is the capture's ``proc/sys/kernel/random/boot_id`` when it holds one. Unknown: "".
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from nodetopo.errors import NodetopoError
from nodetopo.health import EdgeReading, HealthTracker
from nodetopo.host import HostRoot
from nodetopo.model import HealthReport
from nodetopo.resource.baseline import published_health

log = logging.getLogger(__name__)

BOOT_ID = "proc/sys/kernel/random/boot_id"
_BOOT_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def parse_boot_id(text: str) -> str:
    """``boot_id``'s text (a UUID and a newline) -> the UUID; anything else -> "" (unknown)."""
    value = text.strip().lower()
    return value if _BOOT_ID.match(value) else ""


def read_boot_id(root: HostRoot, *, bundle: bool) -> str:
    """The boot id of the kernel whose counters are read (module docstring); "" when unknown."""
    where = root if bundle else HostRoot("/")
    try:
        return parse_boot_id(where.read_text(where.real_path / BOOT_ID, limit=64))
    except (OSError, ValueError, NodetopoError):
        return ""


class SeededJudge:
    """The agent's tracker, seeded from the last published status at its first judgement."""

    def __init__(
        self, tracker: HealthTracker, read_published: Callable[[], Mapping[str, Any] | None] | None
    ) -> None:
        self.tracker = tracker
        self.policy = tracker.policy
        self._read = read_published

    def judge(self, readings: Sequence[EdgeReading], now: float) -> HealthReport:
        if self._read is not None:
            read, self._read = self._read, None
            self._seed(read, readings)
        return self.tracker.judge(readings, now)

    def _seed(self, read: Callable[[], Mapping[str, Any] | None], readings: Sequence[EdgeReading]) -> None:
        try:
            stored = read()
        except (NodetopoError, OSError, ValueError) as e:
            log.warning("edge health: cannot read the last published NodeTopology (%s): judging from now", e)
            return
        health = published_health(stored)
        if health is None:
            return
        self.tracker.seed(health, [r.edge for r in readings if r.known])
        baseline = health.baseline
        log.info(
            "edge health: started from the last published status (%d degraded edge(s), baseline %s)",
            len(health.degraded),
            "none" if baseline is None else f"of {baseline.at}",
        )
