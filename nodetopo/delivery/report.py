"""How an expectation is written: JSON (``-o json``) and the text for a terminal."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nodetopo.command.terminal import strip_control
from nodetopo.expect import (
    Expectation,
    Link,
)
from nodetopo.resource.identity import API_VERSION


def grouped_links(links: Sequence[Link]) -> list[str]:
    """``8 × NIC 50 GB/s (400 Gb/s InfiniBand): b/mlx5_0 … b/mlx5_7`` for links of one kind and capacity."""
    from nodetopo.expect.links import vertex_name

    groups: dict[tuple[str, float, str], list[Link]] = {}
    for link in links:
        groups.setdefault((str(link.kind), link.capacity, link.basis), []).append(link)
    out = []
    for (kind, cap, basis), members in groups.items():
        ends = [vertex_name(x.a) for x in members]
        where = ends[0] if len(ends) == 1 else f"{ends[0]} … {ends[-1]}"
        count = f"{len(members)} × " if len(members) > 1 else ""
        out.append(f"{count}{kind} {cap:g} GB/s ({basis}): {where}")
    return out


def link_json(link: Link) -> dict[str, Any]:
    from nodetopo.expect.links import vertex_name

    return {
        "kind": str(link.kind),
        "from": vertex_name(link.a),
        "to": vertex_name(link.b),
        "node": link.node,
        "capacityGBps": round(link.capacity, 3),
        "nominalGBps": round(link.nominal, 3),
        "basis": link.basis,
        "observed": link.observed,
    }


def band_json(low: float, high: float, expected: float) -> dict[str, float]:
    return {"lowGBps": round(low, 1), "highGBps": round(high, 1), "expectedGBps": round(expected, 1)}


def expectation_json(e: Expectation) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "BandwidthExpectation",
        "collective": e.collective,
        "ranks": e.ranks,
        "nodes": list(e.nodes),
        "units": list(e.units),
        "nvlinkDomains": list(e.domains),
        "fabricSpan": e.fabric_span,
        "busbw": band_json(e.band.low, e.band.high, e.band.expected),
        "algorithm": str(e.algorithm),
        "limitingClass": e.limiting_class,
        "limiting": [link_json(x) for x in e.limiting],
        "bounds": [
            {
                "algorithm": str(b.algorithm),
                "boundGBps": round(b.bound, 1),
                "busbw": band_json(b.band.low, b.band.high, b.band.expected),
                "efficiency": {
                    "low": b.efficiency.low,
                    "high": b.efficiency.high,
                    "calibrated": b.efficiency.calibrated,
                },
                "stage": b.stage,
                "cut": b.cut,
                "limiting": [link_json(x) for x in b.limiting],
            }
            for b in e.bounds
        ],
        "observedLinks": [link_json(x) for x in e.observed],
        "assumptions": list(e.assumptions),
    }


def expectation_text(e: Expectation) -> str:
    lines = [
        f"{e.collective} over {e.ranks} GPUs on {len(e.nodes)} node{'s' if len(e.nodes) != 1 else ''}"
        f" ({', '.join(e.units)}; {e.fabric_span})",
        f"expected busbw at large sizes: {e.band.low:.0f}-{e.band.high:.0f} GB/s "
        f"(most likely {e.band.expected:.0f}, {e.algorithm})",
        f"limited by {e.limiting_class}:",
        *(f"  {x}" for x in grouped_links(e.limiting)),
        "",
        f"{'algorithm':<10} {'bound':>8} {'band GB/s':>12}  stage",
    ]
    for b in e.bounds:
        band = f"{b.band.low:.0f}-{b.band.high:.0f}"
        lines.append(f"{b.algorithm!s:<10} {b.bound:8.1f} {band:>12}  {b.stage}: {b.cut}")
    if e.observed:
        lines += ["", "observed links:", *(f"  {x.label}" for x in e.observed)]
    lines += ["", "assumptions:", *(f"  - {a}" for a in e.assumptions)]
    return "".join(strip_control(line) + "\n" for line in lines)
