#!/usr/bin/env python3
"""A/B one sysfs reader (or a whole scan) between a git revision and the working tree, in ONE process.

    python3 scripts/ab_sources.py --old HEAD~1 pci tests/fixtures/bundles/dgx-a100
    python3 scripts/ab_sources.py --old main --runs 41 scan tests/fixtures/bundles/*

Both versions of the ``nodetopo`` package are imported side by side (the old one from
``git archive REV nodetopo``; ``sys.modules`` is switched to a version's own modules around each of
its calls), then called in turn, old and new alternating, so that load on a shared machine hits
both alike. Prints the medians and checks that both versions return equal results. ``what``:
``pci``, ``rdma`` (class/infiniband + class/net), ``numa``, ``ib`` (fabric.ib's host ports),
``open`` (``bundle_context``), ``scan`` (``scan(bundle_context(B))``, every run with the same
scan cache where a version has one, as an agent keeps one across its scans), ``smiq`` (the parse of
``nvidia-smi -q -x``: a bundle's ``cmd/nvidia-smi-q.xml``, or an XML file named instead of a bundle).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
MODULES = (
    "nodetopo.reuse",
    "nodetopo.topology.discover",
    "nodetopo.bundle",
    "nodetopo.sources.pci",
    "nodetopo.sources.rdma",
    "nodetopo.sources.numa",
    "nodetopo.sources.fabric.infiniband",
    "nodetopo.sources.nvidia_smi",
)


def load(tree: Path) -> dict[str, ModuleType]:
    """The ``nodetopo`` modules imported from ``tree`` (and removed from ``sys.modules`` again)."""
    for name in [n for n in sys.modules if n == "nodetopo" or n.startswith("nodetopo.")]:
        del sys.modules[name]
    sys.path.insert(0, str(tree))
    try:
        for name in MODULES:
            __import__(name)
    finally:
        sys.path.remove(str(tree))
    loaded = {n: m for n, m in sys.modules.items() if n == "nodetopo" or n.startswith("nodetopo.")}
    for name in loaded:
        del sys.modules[name]
    return loaded


def reader(modules: dict[str, ModuleType], what: str, bundle: Path) -> Callable[[], object]:
    discover = modules["nodetopo.topology.discover"]
    if what == "smiq":
        xml = (bundle if bundle.is_file() else bundle / "cmd" / "nvidia-smi-q.xml").read_text()
        # the -q -x reader: in the nvidia_smi module, or its query module once that is a package
        smi = modules.get("nodetopo.sources.nvidia_smi.query", modules["nodetopo.sources.nvidia_smi"])
        return lambda: smi._read_smi_query_xml(xml, "nvidia-smi -q -x")
    root = modules["nodetopo.bundle"].open_bundle(bundle)[0]
    # a version whose scan caches belong to the context: one cache across the runs (what one agent
    # keeps); an older one kept them in module globals, shared by every run anyway
    scan_cache = getattr(modules["nodetopo.reuse"], "ScanCache", None)
    kept = {"cache": scan_cache()} if scan_cache is not None else {}
    pci, rdma = modules["nodetopo.sources.pci"], modules["nodetopo.sources.rdma"]
    numa, ib = modules["nodetopo.sources.numa"], modules["nodetopo.sources.fabric.infiniband"]
    readers: dict[str, Callable[[], object]] = {
        "pci": lambda: pci.read_pci_devices(root),
        "rdma": lambda: (rdma.read_rdma_devices(root), rdma.read_net_devices(root)),
        "numa": lambda: numa.read_numa_nodes(root),
        "ib": lambda: ib.read_host_ports(root),
        "open": lambda: discover.bundle_context(bundle),
        "scan": lambda: discover.scan(discover.bundle_context(bundle, **kept)),
    }
    return readers[what]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--old", required=True, help="git revision of the old version")
    parser.add_argument("--runs", type=int, default=31)
    parser.add_argument("what", choices=("pci", "rdma", "numa", "ib", "open", "scan", "smiq"))
    parser.add_argument(
        "bundles",
        nargs="+",
        type=Path,
        help="bundles or sysfs trees (a folder holding sys/); smiq: also XML files",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ab-sources-") as tmp:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", args.old, "nodetopo"], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        versions = {"old": load(Path(tmp)), "new": load(ROOT)}
        for bundle in args.bundles:
            calls = {label: reader(modules, args.what, bundle) for label, modules in versions.items()}
            results: dict[str, object] = {}
            times: dict[str, list[float]] = {label: [] for label in versions}
            for label in versions:  # warm-up, and the results compared
                sys.modules.update(versions[label])
                results[label] = calls[label]()
            same = args.what in ("open", "scan") or repr(results["old"]) == repr(results["new"])
            for _ in range(args.runs):
                for label in versions:
                    sys.modules.update(versions[label])
                    start = time.perf_counter()
                    calls[label]()
                    times[label].append(time.perf_counter() - start)
            old, new = (statistics.median(times[label]) * 1e3 for label in versions)
            print(
                f"{args.what} {bundle.name}: old {old:.3f} ms, new {new:.3f} ms ({new / old:.2f}×; "
                f"medians of {args.runs} alternating){'' if same else '  RESULTS DIFFER'}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
