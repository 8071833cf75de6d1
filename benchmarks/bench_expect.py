"""The bandwidth model's cost: ``expect()`` for a 72-GPU NVL72 rack and a 1,024-node gang.

Inputs, built before timing:

* **NVL72 rack**: 18 compute trays of 4 GB300 in one multi-node NVLink domain (18 NVLink5 per GPU, 8 ×
  400 Gb/s RoCE per tray: the OCI BM.GPU.GB300.4 facts of the calibration points), all 72 GPUs held.
* **1,024-node gang**: 1,024 distinct ``Topology`` values read back from NodeTopology bodies (the
  ``dgx-h100`` golden object, renamed per node, with its own GPU UUIDs, 32 leaves of 32 nodes under
  one spine group), every GPU held: 8,192 ranks.

Timed: ``expect(placements, "all_reduce")``, median of repeated calls. Peer in the same run: one
networkx ``minimum_cut`` between two GPUs on the whole placement's capacity graph (every node's
links, one graph, built untimed): what computing even a single cut costs without the model's
per-shape reuse. No other tool computes this expectation, so the peer is a reference, and the targets
(≤ 10 ms, ≤ 200 ms) are absolute.

    python benchmarks/bench_expect.py [--quick]
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import Row, Section, ensure_paths, ms, table

ROOT = Path(__file__).resolve().parents[1]
TARGETS_S = {"nvl72": 0.010, "gang": 0.200}


def nvl72() -> list[Any]:
    ensure_paths()
    sys.path.insert(0, str(ROOT))
    from nodetopo.expect import Placement
    from tests.expect.machines import gb300_tray

    return [Placement(node=f"tray-{i:02d}", topology=gb300_tray("nvl72-rack.0")) for i in range(18)]


def gang(nodes: int = 1024, per_leaf: int = 32) -> list[Any]:
    ensure_paths()
    from nodetopo.expect import Placement
    from nodetopo.resource.body import topology_from_nodetopology

    body = json.loads((ROOT / "tests" / "fixtures" / "golden" / "dgx-h100.json").read_text())["nodeTopology"]
    out = []
    for i in range(nodes):
        b = copy.deepcopy(body)
        b["metadata"]["name"] = f"gpu-{i:04d}"
        for g in b["status"]["gpus"]:
            g["uuid"] = f"GPU-{i:04d}-{g['index']}"
        b["status"]["network"]["tiers"] = [
            {"level": 0, "id": f"leaf-{i // per_leaf:02d}"},
            {"level": 1, "id": "spine-group-0"},
        ]
        b["status"]["network"]["tierSource"] = "fabric.ib"
        out.append(Placement(node=f"gpu-{i:04d}", topology=topology_from_nodetopology(b)))
    return out


def _full_graph(placements: list[Any]) -> tuple[Any, str, str]:
    """Every node's links in one graph (the peer's input) and two GPUs far apart."""
    import networkx as nx

    from nodetopo.expect.links import build_shape, node_view

    g = nx.DiGraph()
    for p in placements:
        view = node_view(p.node, p.topology, None, None, set())
        shape = build_shape(view, {})
        for link in shape.egress + shape.transport:
            x = link.renamed(p.node)
            g.add_edge(x.a, x.b, capacity=x.capacity)
            g.add_edge(x.b, x.a, capacity=x.capacity)
        g.add_edge(f"out:{p.node}", "fabric", capacity=1e6)
        g.add_edge("fabric", f"out:{p.node}", capacity=1e6)
    first, last = placements[0], placements[-1]
    return g, f"gpu:{first.node}:0", f"gpu:{last.node}:{len(last.topology.gpus) - 1}"


def _times(fn: Any, runs: int) -> tuple[float, float]:
    """Median wall and median CPU (this thread) seconds of ``fn`` over ``runs`` calls, after one warm-up."""
    import statistics
    import time

    fn()
    wall, cpu = [], []
    for _ in range(runs):
        w, c = time.perf_counter(), time.thread_time()
        fn()
        cpu.append(time.thread_time() - c)
        wall.append(time.perf_counter() - w)
    return statistics.median(wall), statistics.median(cpu)


def measure(placements: list[Any], runs: int) -> dict[str, Any]:
    import networkx as nx

    from nodetopo.expect import expect

    e = expect(placements)
    wall, cpu = _times(lambda: expect(placements), runs)
    g, a, b = _full_graph(placements)
    peer_wall, peer_cpu = _times(lambda: nx.minimum_cut(g, a, b), 3)
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "peer_wall_s": peer_wall,
        "peer_cpu_s": peer_cpu,
        "ranks": e.ranks,
        "band": f"{e.band.low:.0f}-{e.band.high:.0f}",
        "algorithm": str(e.algorithm),
        "limiting": e.limiting_class,
        "vertices": g.number_of_nodes(),
        "edges": g.number_of_edges(),
    }


def run(quick: bool) -> Section:
    import os

    section = Section("expect", "9. The bandwidth model: expect() on an NVL72 rack and a 1,024-node gang")
    runs = 5 if quick else 15
    load = os.getloadavg()
    results = {"nvl72": measure(nvl72(), runs), "gang": measure(gang(), max(5, runs // 2))}
    labels = {
        "nvl72": "72-GPU NVL72 rack (18 trays, one NVLink domain)",
        "gang": "1,024-node gang (8,192 GPUs)",
    }
    short = {"nvl72": "rack", "gang": "gang"}
    for case, target in TARGETS_S.items():
        r = results[case]
        section.rows.append(
            Row(f"expect(), {labels[case]}, wall", ms(r["wall_s"]), f"≤ {ms(target)}", r["wall_s"] <= target)
        )
        section.rows.append(
            Row(f"… the {short[case]} in CPU time", ms(r["cpu_s"]), f"≤ {ms(target)}", r["cpu_s"] <= target)
        )
        section.rows.append(
            Row(
                f"… the {short[case]} ÷ one min cut on its whole graph (peer; CPU)",
                f"{r['cpu_s'] / r['peer_cpu_s']:.2f}×",
            )
        )
    section.tables.append(
        table(
            [
                "placement",
                "ranks",
                "expect() wall / CPU",
                "one min cut, whole graph, wall / CPU",
                "graph (vertices/arcs)",
                "band GB/s",
                "algorithm",
                "limiting",
            ],
            [
                [
                    labels[case],
                    r["ranks"],
                    f"{ms(r['wall_s'])} / {ms(r['cpu_s'])}",
                    f"{ms(r['peer_wall_s'])} / {ms(r['peer_cpu_s'])}",
                    f"{r['vertices']}/{r['edges']}",
                    r["band"],
                    r["algorithm"],
                    r["limiting"],
                ]
                for case, r in results.items()
            ],
        )
    )
    section.notes.append(
        "expect() builds and cuts each distinct node shape once (1,024 identical nodes: one shape), gives "
        "terminals that look alike one flow (colour refinement), peels dead ends before each flow and cuts "
        "the "
        "fabric between groups of interchangeable units; the peer is a single networkx minimum_cut on the "
        "graph "
        "of every node's links, which the model never builds. Medians of "
        f"{runs} (rack) and {max(5, runs // 2)} (gang) calls; load average at start {load[0]:.2f} on "
        f"{os.cpu_count()} CPUs: when it is well above the CPU count, read the CPU-time rows."
    )
    return section


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    print(run(args.quick).markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
