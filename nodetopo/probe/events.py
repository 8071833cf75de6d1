"""The probe's Event on its pod: ``TopologyProbePassed`` (Normal) or ``TopologyProbeFailed``
(Warning), the one-line verdict (with its attribution) as the message. Posted with the pod's own
service account, which needs ``create events`` in its namespace (the ``nodetopo-probe-events``
ClusterRole through a RoleBinding). Built by ``nodetopo.kube.events.event_body``, which makes the
message one line whatever the verdict quotes."""

from __future__ import annotations

import datetime
from typing import Any

from nodetopo.kube.events import MAX_MESSAGE, NORMAL, WARNING, event_body, involved_object
from nodetopo.probe.outcome import Verdict

PASSED = "TopologyProbePassed"
FAILED = "TopologyProbeFailed"
COMPONENT = "nodetopo-probe"

__all__ = ["COMPONENT", "FAILED", "MAX_MESSAGE", "PASSED", "event", "post_event"]


def event(
    namespace: str, pod: str, uid: str | None, node: str | None, result: Verdict, now: datetime.datetime
) -> dict[str, Any]:
    """The core/v1 Event for ``result`` on the pod."""
    return event_body(
        involved_object("Pod", pod, namespace=namespace, uid=uid),
        reason=PASSED if result.passed else FAILED,
        message=result.line,
        type=NORMAL if result.passed else WARNING,
        component=COMPONENT,
        host=node,
        now=now,
    )


def post_event(
    session: Any, namespace: str, pod: str, uid: str | None, node: str | None, result: Verdict
) -> None:
    """Create the Event through an ``ApiSession``; a refusal raises (one line, the API's answer)."""
    session.create_event(
        namespace, event(namespace, pod, uid, node, result, datetime.datetime.now(datetime.UTC))
    )
