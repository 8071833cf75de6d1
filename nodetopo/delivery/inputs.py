"""Where ``nodetopo expect`` and ``nodetopo accept`` get their nodes, GPUs and results: NodeTopology
files, capture bundles, ``--gpus NODE=LIST`` (see ``nodetopo.delivery.cli``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from nodetopo.errors import BundleError
from nodetopo.expect import (
    Placement,
)
from nodetopo.model import Topology

MAX_INPUT_BYTES = 64 << 20


def read_input(path: str, stdin_used: list[bool]) -> str:
    if path == "-":
        if stdin_used[0]:
            raise BundleError(
                "-: stdin can be read once (give the results or the NodeTopology objects as files)"
            )
        stdin_used[0] = True
        return sys.stdin.read(MAX_INPUT_BYTES + 1)[: MAX_INPUT_BYTES + 1]
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read(MAX_INPUT_BYTES + 1)
    except OSError as e:
        raise BundleError(f"{path}: {e.strerror or e}") from None
    if len(text) > MAX_INPUT_BYTES:
        raise BundleError(f"{path}: more than {MAX_INPUT_BYTES >> 20} MiB")
    return text


def read_topologies(
    args: argparse.Namespace,
    stdin_used: list[bool],
    objects: dict[str, Mapping[str, Any]] | None = None,
    *,
    required: bool = True,
) -> dict[str, Topology]:
    """The nodes of ``-f`` and ``--from-bundle``; ``objects`` (when given) gets the NodeTopology
    objects of ``-f`` by name. ``required``: no node at all is an error."""
    import yaml

    from nodetopo.resource.body import topology_from_nodetopology
    from nodetopo.resource.published import ResourceError

    found: dict[str, Topology] = {}
    for path in args.file:
        text = read_input(path, stdin_used)
        try:
            documents = list(yaml.safe_load_all(text))
        except yaml.YAMLError as e:
            raise BundleError(f"{path}: not YAML or JSON: {str(e).splitlines()[0]}") from None
        count = 0
        for doc in documents:
            if not isinstance(doc, Mapping):
                continue
            kind = str(doc.get("kind") or "")
            items = doc.get("items") if kind.endswith("List") else [doc]
            for item in items or []:
                if not isinstance(item, Mapping) or item.get("kind") != "NodeTopology":
                    continue
                name = str((item.get("metadata") or {}).get("name") or "")
                if not name:
                    raise BundleError(f"{path}: a NodeTopology without metadata.name")
                try:
                    found[name] = topology_from_nodetopology(item)
                except ResourceError as e:
                    raise BundleError(f"{path}: {e}") from None
                if objects is not None:
                    objects[name] = item
                count += 1
        if not count:
            raise BundleError(f"{path}: no NodeTopology object in it")
    for directory in args.from_bundle:
        from nodetopo.bundle import bundle_node_name
        from nodetopo.topology.discover import bundle_context, scan

        found[bundle_node_name(directory)] = scan(bundle_context(directory)).topology
    if not found and required:
        raise BundleError(
            "no node: give NodeTopology objects (-f FILE) or capture bundles (--from-bundle DIR)"
        )
    return found


def gpu_indices(text: str, what: str) -> tuple[int, ...] | None:
    if text.strip() == "all":
        return None
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        lo, dash, hi = part.partition("-")
        try:
            first, last = int(lo), int(hi) if dash else int(lo)
        except ValueError:
            raise BundleError(f"{what}: {part!r} is not an index or a range (0-3)") from None
        if last < first or last - first > 4096:
            raise BundleError(f"{what}: bad range {part!r}")
        out.extend(range(first, last + 1))
    return tuple(out)


def flag_pairs(values: Sequence[str], flag: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for v in values:
        node, sep, rest = v.partition("=")
        if not sep or not node:
            raise BundleError(f"{flag} {v!r}: expected NODE=LIST")
        if node in out:
            raise BundleError(f"{flag}: node {node} given twice")
        out[node] = rest
    return out


def placements_for(
    args: argparse.Namespace,
    topologies: Mapping[str, Topology],
    inferred: Mapping[str, tuple[int, ...]] | None = None,
    fixed: Mapping[str, tuple[int, ...] | None] | None = None,
) -> list[Placement]:
    """The GPUs held per node: ``fixed`` (the pods' own, ``--pod``), else ``--gpus``, else
    ``inferred`` (the rank list), else every GPU of every node."""
    gpus = flag_pairs(args.gpus, "--gpus")
    nics = flag_pairs(args.nics, "--nics")
    for node in (*gpus, *nics):
        if node not in topologies:
            raise BundleError(f"node {node}: no NodeTopology for it (known: {', '.join(sorted(topologies))})")
    if fixed is not None:
        chosen = dict(fixed)
    elif gpus:
        chosen = {node: gpu_indices(spec, f"--gpus {node}") for node, spec in gpus.items()}
    elif inferred:
        chosen = dict(inferred)
    else:
        chosen = {node: None for node in topologies}
    return [
        Placement(
            node=node,
            topology=topologies[node],
            gpus=held,
            nics=tuple(n for n in nics[node].split(",") if n) if node in nics else None,
        )
        for node, held in chosen.items()
    ]
