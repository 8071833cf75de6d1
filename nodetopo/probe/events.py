"""The probe's Event on its pod: ``TopologyProbePassed`` (Normal) or ``TopologyProbeFailed``
(Warning), the one-line verdict (with its attribution) as the message. Posted with the pod's own
service account, which needs only ``create events`` in its namespace (the ``nodetopo-probe-events``
ClusterRole through a RoleBinding)."""

from __future__ import annotations

import contextlib
import datetime
import json
from typing import Any

from nodetopo.probe.checks import Verdict

PASSED = "TopologyProbePassed"
FAILED = "TopologyProbeFailed"
COMPONENT = "nodetopo-probe"
#: the Event's message limit (the API server refuses messages over 1 KiB... in events.k8s.io; be safe)
MAX_MESSAGE = 1000


def event_body(
    namespace: str, pod: str, uid: str | None, node: str | None, result: Verdict, now: datetime.datetime
) -> dict[str, Any]:
    """The core/v1 Event for ``result`` on the pod."""
    stamp = now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    involved: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": pod}
    if uid:
        involved["uid"] = uid
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{pod[:200]}.nodetopo-probe.", "namespace": namespace},
        "involvedObject": involved,
        "reason": PASSED if result.passed else FAILED,
        "message": result.line[:MAX_MESSAGE],
        "type": "Normal" if result.passed else "Warning",
        "source": {"component": COMPONENT, **({"host": node} if node else {})},
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


def post_event(
    session: Any, namespace: str, pod: str, uid: str | None, node: str | None, result: Verdict
) -> None:
    """POST the Event through an ``ApiSession``'s connection; a refusal raises with the API's answer."""
    from nodetopo.kube.session import quote_segment

    body = event_body(namespace, pod, uid, node, result, datetime.datetime.now(datetime.UTC))
    response = session.connection.request(
        "POST", f"/api/v1/namespaces/{quote_segment(namespace)}/events", body=json.dumps(body).encode()
    )
    if not 200 <= response.status < 300:
        text = response.data.decode("utf-8", "replace")
        with contextlib.suppress(ValueError, AttributeError):
            text = json.loads(text).get("message", text)
        raise RuntimeError(f"create Event in {namespace}: HTTP {response.status}: {str(text)[:200]}")
