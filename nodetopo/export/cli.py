"""``nodetopo export kueue|volcano|kai|slurm``: scheduler topology from published NodeTopology objects."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml

from nodetopo import export
from nodetopo.command.args import AddArguments, add_command
from nodetopo.command.output import output_help, write_output
from nodetopo.command.signals import run_until_stopped
from nodetopo.errors import BundleError, ParseError
from nodetopo.export.keys import KEY_SETS, KeySet, label_key
from nodetopo.export.targets import NAMES as TARGET_NAMES
from nodetopo.jsonread import load_json
from nodetopo.kube.flags import add_kube_args
from nodetopo.resource.identity import KIND

HELP = "write Kueue/Volcano/KAI/Slurm topology from the published NodeTopology objects"
DESCRIPTION = """\
Read NodeTopology objects (from the cluster, from files written by `kubectl get ntopo -o yaml`, or
from capture bundles) and write what a gang scheduler reads:

  kueue    a Topology (kueue.x-k8s.io/v1beta2; levels coarsest first, ending in kubernetes.io/hostname)
           and a ResourceFlavor that names it
  volcano  HyperNode objects (topology.volcano.sh/v1alpha1): tier 1 = the leaf groups
  kai      a Topology (kai.scheduler/v1alpha1)
  slurm    topology.conf: --plugin tree (switches) or block (one block per NVLink domain, else per leaf)

kueue and kai levels name nodetopo's labels, or with --levels-from gfd-topograph the keys GPU feature
discovery and topograph already write (nvidia.com/gpu.clique, fabric.topograph.run/tier-N); the
NodeTopologies decide which levels there are either way.

Nodes missing a level the others have are listed on stderr (and exit 4 with --strict), never dropped.
An input without fabric tiers gives nothing a gang scheduler can use: that is said on stderr (and
exit 4 with --strict).
"""

CONTROLLER_HELP = "keep Volcano HyperNodes, Kueue's and KAI's Topology current from the NodeTopology objects"
CONTROLLER_DESCRIPTION = """\
Keep what `nodetopo export volcano|kueue|kai` would write current as nodes join and leave: watch the
NodeTopology objects and the exported kind, server-side apply (field manager nodetopo-export-controller)
the objects the NodeTopologies call for, labelled app.kubernetes.io/managed-by=nodetopo-export-controller,
and delete the labelled ones no longer called for. An object without that label is never written or
deleted, even when its name is one the export wants.

HyperNodes follow their member nodes. A Kueue or KAI Topology names label keys, not nodes: it changes
when the fleet's levels do, and as its levels are immutable it is deleted and created again (a Topology
held by a finalizer is waited for). Without any fabric tier no Topology is written; one written before
is kept. Kueue's ResourceFlavor is not written: `nodetopo export kueue` writes it once. See
deploy/export/ for the RBAC of the Volcano export, and the chart's exportController values for all three.
"""


def register(sub: Any, add_common: AddArguments, add_input: AddArguments) -> None:
    del add_input
    p = add_command(sub, "export", help=HELP, description=DESCRIPTION)
    p.add_argument(
        "format",
        choices=["kueue", "volcano", "kai", "slurm"],
        help="what to write: a Kueue Topology (+ ResourceFlavor), Volcano HyperNodes, a KAI Topology or "
        "Slurm's topology.conf",
    )
    source = p.add_mutually_exclusive_group()
    source.add_argument(
        "-f",
        "--file",
        action="append",
        metavar="FILE",
        help="NodeTopology objects (YAML/JSON; a List too; - reads stdin; repeatable); without -f or "
        "--from-bundle: every NodeTopology in the cluster",
    )
    source.add_argument(
        "--from-bundle",
        action="append",
        metavar="DIR",
        help="discover capture bundles (repeatable); each node is named as `discover --from` names it",
    )
    add_kube_args(p)
    p.add_argument("--name", default="nodetopo", help="Topology name (kueue, kai; default: %(default)s)")
    p.add_argument("--flavor", default="nodetopo", help="Kueue ResourceFlavor name (default: %(default)s)")
    p.add_argument(
        "--flavor-node-label",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Kueue ResourceFlavor spec.nodeLabels entry (repeatable)",
    )
    add_level_args(p)
    p.add_argument("--plugin", choices=["tree", "block"], default="tree", help="slurm plugin (default: tree)")
    p.add_argument(
        "--block-size",
        type=int,
        default=None,
        metavar="N",
        help="slurm block: BlockSizes= (nodes per block; default: not written, Slurm's own)",
    )
    p.add_argument("-o", "--output", default="-", metavar="FILE", help=output_help("the export"))
    p.add_argument(
        "--strict",
        action="store_true",
        help="exit 4 when a node is missing a level, or when the input gives nothing to write",
    )
    add_common(p)
    p.set_defaults(func=cmd_export)

    p = add_command(sub, "export-controller", help=CONTROLLER_HELP, description=CONTROLLER_DESCRIPTION)
    add_kube_args(p)
    p.add_argument(
        "--export",
        dest="exports",
        action="append",
        choices=list(TARGET_NAMES),
        metavar="{" + ",".join(TARGET_NAMES) + "}",
        help="what to keep current (repeatable; default: volcano): Volcano HyperNodes, Kueue's Topology "
        "(kueue.x-k8s.io/v1beta2), KAI's Topology (kai.scheduler/v1alpha1); each needs its CRD and RBAC",
    )
    p.add_argument(
        "--topology-name",
        default="nodetopo",
        metavar="NAME",
        help="kueue, kai: the Topology's name (default: %(default)s)",
    )
    add_level_args(p)
    p.add_argument(
        "--page-size",
        type=int,
        default=100,
        metavar="N",
        help="objects per list page: bounds the memory a list takes (default: %(default)s)",
    )
    p.add_argument(
        "--debounce",
        type=float,
        default=0.5,
        metavar="SECONDS",
        help="let a burst of changes settle into one pass (default: %(default)s)",
    )
    p.add_argument(
        "--resync",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="reconcile at least this often, changes or not (default: %(default)s)",
    )
    add_common(p)
    p.set_defaults(func=cmd_export_controller)


def add_level_args(p: argparse.ArgumentParser) -> None:
    """The flags that decide how a Kueue or KAI Topology's levels are named (export and controller)."""
    p.add_argument(
        "--nvlink-level",
        action="store_true",
        help="kueue/kai: add the NVLink domain as a level (nodetopo.io/nvlink.domain, or the key set's), "
        "where it nests among the fabric tiers",
    )
    p.add_argument(
        "--levels-from",
        choices=sorted(KEY_SETS),
        default="nodetopo",
        help="kueue/kai: which node label keys the levels name: nodetopo's (nodetopo.io/fabric.tier-N, "
        "nodetopo.io/nvlink.domain), gfd-topograph (fabric.topograph.run/tier-N, nvidia.com/gpu.clique) or "
        "gfd-topograph-v0 (topograph before v1.0: network.topology.nvidia.com/leaf|spine|core); the "
        "levels themselves come from the NodeTopologies (default: %(default)s)",
    )
    p.add_argument(
        "--tier-key",
        action="append",
        default=[],
        type=label_key,
        metavar="KEY",
        help="kueue/kai: the key of fabric tier 0, then 1, ... (repeatable, nearest first), e.g. the "
        "fabricLabels of a topograph that renames its keys; tiers beyond the last given are not levels "
        "(default: the --levels-from set's)",
    )
    p.add_argument(
        "--nvlink-key",
        type=label_key,
        metavar="KEY",
        help="kueue/kai: the key of the NVLink level (with --nvlink-level), e.g. topograph's "
        "acceleratorLabel (default: the --levels-from set's)",
    )


def level_keys(args: argparse.Namespace) -> KeySet:
    return KEY_SETS[args.levels_from].with_keys(tuple(args.tier_key), args.nvlink_key)


def load_objects(paths: Iterable[str]) -> list[dict[str, Any]]:
    """NodeTopology objects from files: one object, a ``List`` (``items``), or several YAML documents.

    A file that is JSON (``kubectl get ntopo -o json``) is read as JSON: PyYAML reads a 5,000-object
    list in minutes, the JSON decoder in about a second. Text that opens like JSON but is not (YAML's
    flow style) is read as YAML."""
    objects: list[dict[str, Any]] = []
    for path in paths:
        try:
            text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
            documents = _documents(text, path)
        except (OSError, yaml.YAMLError, ParseError) as e:
            raise BundleError(f"{path}: cannot read NodeTopology objects: {e}") from e
        for doc in documents:
            if not isinstance(doc, dict):
                continue
            items = doc.get("items") if doc.get("kind", "").endswith("List") else [doc]
            objects.extend(i for i in items or [] if isinstance(i, dict) and i.get("kind") == KIND)
    return objects


def _documents(text: str, path: str) -> list[Any]:
    """The documents of one file: its one JSON value, else its YAML documents."""
    if text.lstrip()[:1] in ("{", "["):
        try:
            # the user's own file, read once: no length bound (a list of 5,000 objects is ~150 MB as
            # kubectl indents it) and no measuring pass (it costs more than decoding such a list);
            # the decoder's recursion limit bounds the nesting
            return [load_json(text, source="export", path=path, max_chars=None, max_depth=None)]
        except ParseError as e:
            if not e.detail.startswith("not JSON"):
                raise  # nested too deep: refused here, never handed to the recursive YAML reader
    return list(yaml.safe_load_all(text))


def _from_cluster(kubeconfig: str | None, context: str | None = None) -> list[dict[str, Any]]:
    from nodetopo.kube.session import ApiSession
    from nodetopo.kube.transport import connect
    from nodetopo.resource.identity import GROUP, PLURAL, VERSION

    with connect(kubeconfig, context=context) as api:
        listed = ApiSession(api).list_cluster_objects(GROUP, VERSION, PLURAL)
    items = listed.get("items") or []
    return [i for i in items if isinstance(i, dict)]


def _from_bundles(paths: Sequence[str]) -> list[dict[str, Any]]:
    from nodetopo.bundle import bundle_node_name
    from nodetopo.resource.body import to_nodetopology
    from nodetopo.topology.discover import bundle_context, scan

    return [to_nodetopology(scan(bundle_context(p)).topology, bundle_node_name(p)) for p in paths]


def cmd_export(args: argparse.Namespace) -> int:
    if args.file:
        objects = load_objects(args.file)
    elif args.from_bundle:
        objects = _from_bundles(args.from_bundle)
    else:
        objects = _from_cluster(args.kubeconfig, args.kube_context)
    places = export.places_from_nodetopologies(objects)
    keys = level_keys(args)
    if args.format == "kueue":
        labels = dict(item.split("=", 1) for item in args.flavor_node_label if "=" in item)
        result = export.kueue(
            places,
            name=args.name,
            flavor=args.flavor,
            flavor_node_labels=labels,
            nvlink=args.nvlink_level,
            keys=keys,
        )
    elif args.format == "kai":
        result = export.kai(places, name=args.name, nvlink=args.nvlink_level, keys=keys)
    elif args.format == "volcano":
        result = export.volcano(places)
    elif args.plugin == "block":
        result = export.slurm_block(places, block_size=args.block_size)
    else:
        result = export.slurm_tree(places)
    text = result.text or yaml.safe_dump_all(list(result.objects), sort_keys=False)
    write_output(args.output, text)
    for line in (*result.notes, *result.missing):
        print(f"nodetopo export: {line}", file=sys.stderr)
    print(f"nodetopo export: {len(places)} node(s), {len(result.missing)} missing level(s)", file=sys.stderr)
    empty = nothing_to_write(args.format, places, result)
    if empty:
        print(f"nodetopo export: {empty}", file=sys.stderr)
    return 4 if args.strict and (result.missing or empty) else 0


def nothing_to_write(fmt: str, places: Sequence[export.NodePlace], result: export.Export) -> str | None:
    """Why the export holds nothing a gang scheduler can use, or None. Kueue's and KAI's Topology
    always has the hostname level; without a fabric tier it is that level alone."""
    if not places:
        return "no NodeTopology in the input: nothing to write"
    if not result.objects and not result.text:
        return f"no fabric tiers in the {len(places)} node(s) of the input: nothing to write"
    if fmt in ("kueue", "kai") and export.depth(places) == 0:
        return (
            f"no fabric tiers in the {len(places)} node(s) of the input: "
            f"the Topology has only {export.HOSTNAME_LABEL}"
        )
    return None


def cmd_export_controller(args: argparse.Namespace) -> int:
    import logging
    import threading

    from nodetopo.export.controller import (
        FIELD_MANAGER,
        ExportState,
        ExportWriter,
        session_writes,
        start_reflectors,
    )
    from nodetopo.export.targets import targets
    from nodetopo.kube.session import ApiSession
    from nodetopo.kube.transport import connect

    log = logging.getLogger("nodetopo.export.controller")
    session = ApiSession(connect(args.kubeconfig, context=args.kube_context), field_manager=FIELD_MANAGER)
    stop = threading.Event()
    chosen = targets(
        args.exports or ["volcano"],
        topology=args.topology_name,
        nvlink=args.nvlink_level,
        keys=level_keys(args),
    )
    state = ExportState(chosen)
    start_reflectors(session.connection, state, page_size=args.page_size, stop=stop)
    apply, delete = session_writes(session)
    writer = ExportWriter(state, apply, delete, debounce_s=args.debounce, resync_s=args.resync, stop=stop)

    log.info("export controller: %s", ", ".join(f"{t.kind} ({t.name})" for t in chosen))
    run_until_stopped(writer.run, log, "export controller", stop, state.changed)
    session.close()
    return 0
