"""What a GPU's multi-node NVLink fabric says about its health (GB200/GB300): the driver's health
summary and health mask, read as the problems they name (``rules``' ``FabricUnhealthy``)."""

from __future__ import annotations

from nodetopo.model import FabricInfo

#: (shift, value meaning "true" / a problem, what it says) of the fabric health mask's fields
_MASK_PROBLEMS = (
    (0, 0x3, {1}, "degraded bandwidth"),
    (4, 0x3, {1}, "an unhealthy route"),
    (6, 0x3, {1}, "access timeout recovery in progress"),
    (8, 0xF, set(range(2, 16)), "an incorrect configuration"),
)


def fabric_problems(fabric: FabricInfo) -> list[str]:
    """What a GPU's fabric health summary and mask say is wrong (empty: healthy or not said)."""
    problems: list[str] = []
    if fabric.health is not None and fabric.health.upper() in ("UNHEALTHY", "LIMITED_CAPACITY"):
        problems.append(f"health {fabric.health}")
    if fabric.health_mask is not None:
        for shift, width, bad, what in _MASK_PROBLEMS:
            if (fabric.health_mask >> shift) & width in bad:
                problems.append(what)
    return problems
