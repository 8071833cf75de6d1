"""What a restarted agent judges edge health from: the last published NodeTopology's ``status.health``
(the degraded edges, and the counter baseline: the counters, when and on which boot they were read).

``published_health(obj)`` reads that section alone (``nodetopo.resource.reader``'s rule); an absent
object, an object without a status, or one that is not an object, is nothing to start from (None),
never an error: the agent then judges from its first scan on.
"""

from __future__ import annotations

from typing import Any

from nodetopo.model import HealthReport
from nodetopo.resource.published import ResourceError
from nodetopo.resource.reader import read_nodetopology


def published_health(obj: Any) -> HealthReport | None:
    """The health judgement the NodeTopology ``obj`` (a dict as the API serves it) published; None
    when there is none to start from (no object, no status, not judged, not an object)."""
    if obj is None:
        return None
    try:
        published = read_nodetopology(obj, sections=("health",))
    except ResourceError:
        return None
    status = published.status
    if status is None or not status.health.judged:
        return None
    return status.health
