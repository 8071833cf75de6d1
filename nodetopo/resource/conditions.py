"""The conditions policy of the NodeTopology: which reasons make it not Ready, and the conditions a
``Topology`` publishes (Ready, Consistent, one per source).

Conditions carry no ``lastTransitionTime`` here: the publisher adds it (keeping the previous time
when a condition's status did not change), so that discovery output is deterministic.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from nodetopo.model import Condition, ConditionReason, SourceStatus, Topology
from nodetopo.resource.published import PublishedCondition
from nodetopo.resource.reader import read_nodetopology
from nodetopo.topology.interop import SOURCE as LABELS_SOURCE

#: Condition reasons that make the resource "not Ready": consumers should treat it as partial.
NOT_READY_REASONS = frozenset(
    {
        ConditionReason.PARSE_ERROR,
        ConditionReason.TIMEOUT,
        ConditionReason.DEGRADED,
        ConditionReason.STALE,
        ConditionReason.INCONSISTENT,
        ConditionReason.MISSING,
    }
)


def unique_sources(sources: tuple[SourceStatus, ...]) -> list[SourceStatus]:
    """One status per source name (a failed one wins over an ok one), sorted by name."""
    seen: dict[str, SourceStatus] = {}
    for s in sources:
        previous = seen.get(s.name)
        if previous is None or (previous.ok and not s.ok):
            seen[s.name] = s
    return [seen[name] for name in sorted(seen)]


def condition_type(source: str) -> str:
    """``sysfs.pci`` → ``SourceSysfsPci``; ``nvidia-smi topo -m`` → ``SourceNvidiaSmiTopoM``."""
    words = [w for w in re.split(r"[^A-Za-z0-9]+", source) if w]
    return "Source" + "".join(w[:1].upper() + w[1:] for w in words)


def degraded_condition(topology: Topology) -> dict[str, Any] | None:
    """``Degraded``: whether any edge of the node is published degraded, how many and which (None when
    the links were not judged). About the hardware; ``Ready`` stays about whether nodetopo could read."""
    report = topology.health
    if not report.judged:
        return None
    if not report.degraded and not report.checked:
        return {
            "type": "Degraded",
            "status": "Unknown",
            "reason": "NoLinkReadings",
            "message": "no link of the node could be read: nothing is known to be degraded, nor healthy",
        }
    if not report.degraded:
        return {
            "type": "Degraded",
            "status": "False",
            "reason": "NoEdgeDegraded",
            "message": f"{report.checked} edge(s) checked, none degraded",
        }
    count = len(report.degraded)
    listed = (f"{e.edge} ({', '.join(e.reasons)}: {e.message})" for e in report.degraded)
    return {
        "type": "Degraded",
        "status": "True",
        "reason": "EdgesDegraded",
        "message": _join(listed, prefix=f"{count} degraded edge{'s' if count != 1 else ''}: "),
    }


def conditions(topology: Topology) -> list[dict[str, Any]]:
    """Kubernetes-style conditions: Ready, Consistent, Degraded (when the links were judged), and one
    per source."""
    by_source: dict[str, list[Condition]] = {}
    for c in topology.conditions:
        by_source.setdefault(c.source, []).append(c)
    result: list[dict[str, Any]] = []
    # Ready is about whether nodetopo could read; another project's label that disagrees (GFD's) is
    # said in Consistent only
    bad = [c for c in topology.conditions if c.reason in NOT_READY_REASONS and c.source != LABELS_SOURCE]
    result.append(
        {
            "type": "Ready",
            "status": "False" if bad else "True",
            "reason": bad[0].reason.value if bad else "Discovered",
            "message": _join(f"{c.source}: {c.message}" for c in bad)
            if bad
            else f"{len(topology.gpus)} GPUs, {sum(1 for n in topology.nics if n.rdma)} RDMA NICs discovered",
        }
    )
    inconsistent = [c for c in topology.conditions if c.reason is ConditionReason.INCONSISTENT]
    result.append(
        {
            "type": "Consistent",
            "status": "False" if inconsistent else "True",
            "reason": "Inconsistent" if inconsistent else "SourcesAgree",
            "message": _join(c.message for c in inconsistent) if inconsistent else "sources agree",
        }
    )
    types = {"Ready", "Consistent"}
    degraded = degraded_condition(topology)
    if degraded is not None:
        result.append(degraded)
        types.add("Degraded")
    for s in unique_sources(topology.sources):
        if condition_type(s.name) in types:  # list-map key: two source names must not share a type
            continue
        types.add(condition_type(s.name))
        mine = by_source.get(s.name, [])
        result.append(
            {
                "type": condition_type(s.name),
                "status": "True" if s.ok else "False",
                "reason": mine[0].reason.value if mine and not s.ok else _status_reason(s),
                "message": _join(c.message for c in mine) if mine else (s.message or "ok"),
            }
        )
    return result


def typed_conditions(topology: Topology) -> tuple[PublishedCondition, ...]:
    """``conditions(topology)`` as the reader gives a published object's conditions."""
    return tuple(
        PublishedCondition(type=c["type"], status=c["status"], reason=c["reason"], message=c["message"])
        for c in conditions(topology)
    )


def _status_reason(s: SourceStatus) -> str:
    """The reason of a source status without a condition of the same name (``nvidia-smi topo -m``
    reports under ``nvidia-smi``): the ``Reason:`` its message starts with, else Unavailable."""
    if s.ok:
        return "Discovered"
    prefix = s.message.split(":", 1)[0]
    return prefix if prefix in {r.value for r in ConditionReason} else ConditionReason.UNAVAILABLE.value


def _join(messages: Any, limit: int = 1024, prefix: str = "") -> str:
    text = prefix + "; ".join(dict.fromkeys(messages))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def essential_missing(scan: Topology | Mapping[str, Any]) -> bool:
    """An essential source (sysfs PCI or NUMA) observed nothing in this scan (a wrong host root): one
    of its conditions has reason ``Missing``.

    ``scan`` is the ``Topology`` or the NodeTopology body made from it: the rule is the same on
    both, because ``conditions`` carries a Missing condition into the body as its source's own
    condition (``check_essential`` gives that source a failed status and that condition first).
    Then no label may be published from the scan and its facts never replace published ones.
    """
    if isinstance(scan, Topology):
        reasons: list[str | None] = [c.reason.value for c in scan.conditions]
    else:
        reasons = [c.reason for c in read_nodetopology(scan, sections={"conditions"}).facts.conditions]
    return ConditionReason.MISSING.value in reasons
