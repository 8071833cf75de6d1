"""Run nodetopo's benchmarks against their peers and write ``benchmarks/RESULTS.md``.

    python benchmarks/run.py                 # everything (~10 minutes on 2 cores)
    python benchmarks/run.py --quick         # fewer repetitions, shorter windows (~3 minutes)
    python benchmarks/run.py discovery scale # some of them (see NAMES)
    python benchmarks/run.py --compare OLD.md  # also print (and append) the deltas against OLD.md
    python benchmarks/run.py cluster-scale --full  # the cluster at 1,000, 5,000 and 15,000 objects

See benchmarks/README.md for what each one measures and how to read the ratios.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import Section, ensure_paths, load_average, machine, table
from compare import compare

log = logging.getLogger("benchmarks")

NAMES = (
    "discovery",
    "scale",
    "agent",
    "extender",
    "admission",
    "fabric",
    "probe",
    "kube",
    "expect",
    "health",
    "cluster-scale",
)
RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def runner(name: str, full: bool = False) -> Callable[[bool], list[Section]]:
    if name == "cluster-scale":
        import bench_cluster_scale

        return lambda quick: [bench_cluster_scale.run(quick, full=full)]
    if name == "admission":
        import bench_admission

        return lambda quick: [bench_admission.run(quick)]
    if name == "discovery":
        import bench_discovery

        return lambda quick: [bench_discovery.run(quick)]
    if name == "scale":
        import bench_scale

        return lambda quick: [bench_scale.run(quick)]
    if name == "probe":
        import bench_probe

        return lambda quick: [bench_probe.run(quick)]
    if name == "expect":
        import bench_expect

        return lambda quick: [bench_expect.run(quick)]
    if name == "fabric":
        import bench_fabric

        return lambda quick: [bench_fabric.run(quick)]
    if name == "kube":
        import bench_kube

        return lambda quick: [bench_kube.run(quick)]
    if name == "health":
        import bench_health

        return lambda quick: [bench_health.run(quick)]
    if name == "agent":
        import bench_agent

        return bench_agent.run
    import bench_extender

    return lambda quick: [bench_extender.run(quick)]


def render(
    sections: list[Section], quick: bool, argv: list[str], wall_s: float, load_at_start: str | None = None
) -> str:
    out = [
        "# nodetopo benchmarks: results",
        "",
        f"Written by `python benchmarks/run.py{' ' + ' '.join(argv) if argv else ''}` "
        f"({'quick' if quick else 'full'} run, {wall_s / 60:.1f} min). "
        "Each figure stands next to its target; peers ran in the same run on the same machine. "
        "See README.md for how each figure is measured.",
        "",
        table(["machine", ""], machine(load_at_start)),
        "",
        "## Summary",
        "",
        "| benchmark | figure | measured | target | |",
        "|---|---|---|---|---|",
    ]
    for s in sections:
        out += [
            f"| {s.title.split(':')[0]} | {r.metric} | {r.value} | {r.target} | {r.verdict} |" for r in s.rows
        ]
    out.append("")
    for s in sections:
        out += [s.markdown(), ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("benchmarks", nargs="*", choices=[*NAMES, []], metavar="NAME", help=", ".join(NAMES))
    parser.add_argument("--quick", action="store_true", help="fewer repetitions and shorter windows")
    parser.add_argument(
        "--full",
        action="store_true",
        help="cluster-scale: grow the apiserver to 15,000 objects too (about 10 more minutes, ~8 GB memory)",
    )
    parser.add_argument("-o", "--output", type=Path, default=RESULTS, help="default: %(default)s")
    parser.add_argument(
        "--compare",
        type=Path,
        metavar="OLD.md",
        help="an earlier RESULTS.md: print the figure-by-figure deltas and append them to the output",
    )
    args = parser.parse_args(argv)
    old_text = args.compare.read_text() if args.compare else None  # before -o may overwrite it
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("nodetopo").setLevel(logging.WARNING)  # the sources' own notes are not results
    ensure_paths()
    chosen = args.benchmarks or list(NAMES)
    sections: list[Section] = []
    started = time.monotonic()
    load_at_start = load_average()  # now: the header is written at the end, after the run's own load
    failed = False
    for name in chosen:
        log.info("running %s%s", name, " (quick)" if args.quick else "")
        begun = time.monotonic()
        load_before = load_average()
        try:
            produced = runner(name, args.full)(args.quick)
        except Exception as e:  # one broken benchmark must not lose the others' results
            log.exception("%s failed", name)
            produced = [Section(name, f"{name}: FAILED", notes=[f"`{type(e).__name__}: {e}`"])]
            failed = True
        load_after = load_average()
        for section in produced:
            section.seconds = section.seconds or time.monotonic() - begun
            section.notes.append(
                f"Load average (1/5/15 min) at this section's start: {load_before}; at its end: {load_after} "
                f"({os.cpu_count()} CPUs)."
            )
        sections += produced
        log.info("%s done in %.0f s", name, time.monotonic() - begun)
    text = render(
        sections,
        args.quick,
        sys.argv[1:] if argv is None else argv,
        time.monotonic() - started,
        load_at_start,
    )
    if old_text is not None:
        deltas = compare(old_text, text)
        print(deltas)
        text += f"\n## Against an earlier run ({args.compare.name})\n\n{deltas}\n"
    args.output.write_text(text + "\n")
    log.info("wrote %s", args.output)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
