"""``kubectl ntopo`` (the ``kubectl-ntopo`` console script): look at a node's topology from a laptop.

It reads the NodeTopology objects the agent publishes, turns each back into the ``Topology`` it was
made from (``crd.topology_from_nodetopology``) and renders it with the views ``nodetopo discover``
uses; ``band`` runs the bandwidth model (``nodetopo.expect``) over it. It talks to the API server
through the one client (``nodetopo.kube``): the user's kubeconfig as kubectl reads it
(``$KUBECONFIG``, contexts, exec credential plugins), ``--kubeconfig`` and ``--context``. Imports are
lazy: ``--help`` loads neither the client nor a renderer.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from nodetopo import __version__
from nodetopo.command.args import add_output_format, number, require, run_command
from nodetopo.command.terminal import strip_control
from nodetopo.errors import NodetopoError
from nodetopo.kube.flags import HELP as KUBECONFIG_HELP

PROG = "kubectl ntopo"
LINK_CLASSES = ("PIX", "PXB", "PHB", "NODE", "SYS")

EPILOG = """\
examples:
  kubectl ntopo nodes                          every node: GPUs, islands, NIC distance, Ready, Consistent,
                                               degraded links
  kubectl ntopo nodes --island-size 8 --nic-distance PIX
  kubectl ntopo nodes --inconsistent           nodes whose sources disagree
  kubectl ntopo get gpu-node-7                 the table `nodetopo discover` prints on that node
  kubectl ntopo get gpu-node-7 -o svg > n.svg  its picture (needs Graphviz's `dot`)
  kubectl ntopo matrix gpu-node-7 --context prod
  kubectl ntopo band gpu-node-7                the all-reduce busbw band its topology promises
  kubectl ntopo band gpu-node-7 --gpus 0-3 -o json
"""


def _kube_flags(parser: argparse.ArgumentParser, *, default: Any) -> None:
    """``--kubeconfig``/``--context``, accepted before or after the command (as kubectl's are)."""
    parser.add_argument("--kubeconfig", default=default, metavar="FILE", help=KUBECONFIG_HELP)
    parser.add_argument(
        "--context",
        dest="kube_context",
        default=default,
        metavar="NAME",
        help="the kubeconfig context to use (default: its current-context)",
    )


def _island_size(text: str) -> int:
    value = number(text, "a number of GPUs", int)
    require(value >= 2, "an NVLink island has at least 2 GPUs")
    return value


def _gpu_list(text: str) -> tuple[int, ...]:
    from nodetopo.model import parse_cpulist

    try:
        indices = parse_cpulist(text)
    except ValueError:
        indices = frozenset()
    if not indices or max(indices) > 4096:
        raise argparse.ArgumentTypeError(f"not a GPU list (0-3,6): {text[:32]!r}")
    return tuple(sorted(indices))


def _node_command(sub: Any, name: str, **texts: str) -> argparse.ArgumentParser:
    """A subcommand about one node (get, matrix, band): its NODE argument comes first."""
    p: argparse.ArgumentParser = sub.add_parser(name, **texts)
    p.add_argument("node", metavar="NODE", help="the node's name (its NodeTopology has the same name)")
    return p


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="The GPU topology of the cluster's nodes, as the nodetopo agent published it "
        "(NodeTopology objects), rendered as `nodetopo discover` renders a host.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"kubectl-ntopo (nodetopo) {__version__}")
    _kube_flags(parser, default=None)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = _node_command(sub, "get", help="one node's topology: the table, or -o yaml|json|dot|svg")
    add_output_format(
        p,
        ("table", "yaml", "json", "dot", "svg"),
        "table (default); the NodeTopology object as yaml or json; a picture of the node as a "
        "Graphviz graph (dot) or drawn as SVG (svg; needs Graphviz's `dot`)",
    )
    _kube_flags(p, default=argparse.SUPPRESS)
    p.set_defaults(func=cmd_get)

    p = _node_command(
        sub,
        "matrix",
        help="one node's table with its GPU×GPU and GPU×NIC matrix (as `nvidia-smi topo -m`)",
        description="The table with the GPU×GPU + GPU×NIC matrix, as `nodetopo discover --matrix` prints "
        "it, from the object's per-pair links (status.gpuLinks). An object without them (a node of more "
        "than 64 GPUs, an older agent) keeps only NVLink islands: a cell NV#+ means at least # links, "
        "and GPU pairs under one PCIe root (PIX/PXB/PHB) show '-'; run `nodetopo discover --matrix` on "
        "the node for every pair.",
    )
    _kube_flags(p, default=argparse.SUPPRESS)
    p.set_defaults(func=cmd_matrix)

    p = _node_command(
        sub,
        "band",
        help="one node's expected all-reduce bus bandwidth: the band its topology promises, per GPU set",
        description="The all-reduce bus-bandwidth band at large message sizes that the node's published "
        "topology promises inside the node (nodetopo's bandwidth model, as `nodetopo expect` computes it): "
        "for every GPU of the node and for each NVLink island when there are several, with the algorithm "
        "NCCL would likely run, the link that limits it and the model's assumptions.",
    )
    p.add_argument(
        "--gpus",
        type=_gpu_list,
        metavar="LIST",
        help="only this GPU set: indices and ranges (0-3,6)",
    )
    add_output_format(p, ("table", "json"), "table (default) or json")
    _kube_flags(p, default=argparse.SUPPRESS)
    p.set_defaults(func=cmd_band)

    p = sub.add_parser(
        "nodes",
        help="every node, one line each: GPUs, model, islands, NIC distance, Ready, Consistent",
        description="One line per NodeTopology object. Filters combine (all must hold); a node whose "
        "object does not say does not match.",
    )
    p.add_argument(
        "--island-size",
        type=_island_size,
        metavar="N",
        help="only nodes with an NVLink island of at least N GPUs",
    )
    p.add_argument(
        "--nic-distance",
        choices=LINK_CLASSES,
        metavar="CLASS",
        help="only nodes where every GPU has a NIC at CLASS or nearer (PIX < PXB < PHB < NODE < SYS)",
    )
    p.add_argument("--inconsistent", action="store_true", help="only nodes whose sources disagree")
    p.add_argument("--not-ready", action="store_true", help="only nodes whose NodeTopology is not Ready")
    p.add_argument(
        "--degraded",
        action="store_true",
        help="only nodes with a link published degraded (a node whose links were not judged is not listed)",
    )
    add_output_format(p, ("table", "name", "json"), "table (default), name, json")
    _kube_flags(p, default=argparse.SUPPRESS)
    p.set_defaults(func=cmd_nodes)
    return parser


# --------------------------------------------------------------------------------------------


def _read(args: argparse.Namespace) -> dict[str, Any]:
    from nodetopo.kube.session import ApiSession
    from nodetopo.kube.transport import connect
    from nodetopo.resource.identity import GROUP, PLURAL, VERSION

    with connect(args.kubeconfig, context=args.kube_context) as connection:
        body = ApiSession(connection).read_cluster_object(GROUP, VERSION, PLURAL, args.node)
    if body is None:
        raise NodetopoError(
            f"NodeTopology/{args.node} not found: no such node, or the nodetopo agent has not published "
            "it (kubectl ntopo nodes lists the nodes that have one)"
        )
    return body


def _topology(body: dict[str, Any]) -> Any:
    from nodetopo.resource.body import topology_from_nodetopology
    from nodetopo.resource.published import ResourceError

    try:
        return topology_from_nodetopology(body)
    except ResourceError as e:
        raise NodetopoError(str(e)) from None


def _origin(body: dict[str, Any]) -> str:
    from nodetopo.resource.reader import read_nodetopology

    status = read_nodetopology(body, sections={"conditions"}).facts
    ready = status.condition("Ready")
    since = (
        f", Ready {ready.status} since {ready.last_transition_time}"
        if ready is not None and ready.last_transition_time
        else ""
    )
    return f"NodeTopology/{body['metadata']['name']} (agent {status.agent_version or '?'}{since})"


def _table(body: dict[str, Any], *, matrix: bool) -> str:
    from nodetopo.command.terminal import output_width, use_style
    from nodetopo.views.render import render_table

    topology = _topology(body)
    cells = None
    if matrix:
        from nodetopo.views.published import published_gpu_matrix

        cells = published_gpu_matrix(topology)
    return render_table(
        topology,
        body["metadata"]["name"],
        width=output_width(sys.stdout),
        style=use_style(sys.stdout),
        gpu_matrix=cells,
        origin=_origin(body),
    )


def _shown(body: dict[str, Any]) -> dict[str, Any]:
    """The object as published, without the server's bookkeeping (``managedFields``)."""
    metadata = {k: v for k, v in (body.get("metadata") or {}).items() if k != "managedFields"}
    return {**body, "metadata": metadata}


def cmd_get(args: argparse.Namespace) -> int:
    body = _read(args)
    if args.output == "table":
        sys.stdout.write(_table(body, matrix=False))
    elif args.output == "json":
        sys.stdout.write(json.dumps(_shown(body), indent=2) + "\n")
    elif args.output == "yaml":
        import yaml

        sys.stdout.write(yaml.safe_dump(_shown(body), sort_keys=False))
    else:
        from nodetopo.views.dot import find_dot, render_svg, to_dot
        from nodetopo.views.published import published_gpu_matrix

        if args.output == "svg" and find_dot() is None:
            render_svg("")  # raises the one-line "install Graphviz" error before any work
        topology = _topology(body)
        text = to_dot(topology, args.node, gpu_matrix=published_gpu_matrix(topology))
        sys.stdout.write(text if args.output == "dot" else render_svg(text).decode("utf-8", errors="replace"))
    return 0


def cmd_matrix(args: argparse.Namespace) -> int:
    sys.stdout.write(_table(_read(args), matrix=True))
    return 0


#: ``band`` in an executable built without networkx (``plugins/archive.py``: it would add 7 MB and
#: a quarter of a second to every command's start-up)
NO_NETWORKX = (
    "kubectl ntopo band runs the bandwidth model, which needs networkx, and this kubectl-ntopo is built "
    "without it: use the kubectl-ntopo that pip installs, or `kubectl get ntopo NODE -o json | nodetopo "
    "expect -f -`"
)


def cmd_band(args: argparse.Namespace) -> int:
    try:
        from nodetopo.kubectl.band import band_rows, bands_json, render_bands
    except ModuleNotFoundError as e:
        if e.name != "networkx":
            raise
        raise NodetopoError(NO_NETWORKX) from None
    from nodetopo.command.terminal import output_width

    body = _read(args)
    topology = _topology(body)
    listed = {g.index for g in topology.gpus}
    unknown = sorted(set(args.gpus or ()) - listed)
    if unknown:
        raise NodetopoError(
            f"NodeTopology/{args.node} lists no GPU {','.join(map(str, unknown))} "
            f"(it lists {len(listed)}: {','.join(map(str, sorted(listed))) or 'none'})"
        )
    rows = band_rows(args.node, topology, args.gpus)
    if args.output == "json":
        sys.stdout.write(json.dumps(bands_json(args.node, rows), indent=2, ensure_ascii=False) + "\n")
    else:
        sys.stdout.write(
            strip_control(render_bands(_origin(body), rows, output_width(sys.stdout)), keep_newlines=True)
        )
    return 0


def cmd_nodes(args: argparse.Namespace) -> int:
    from nodetopo.command.terminal import output_width
    from nodetopo.kube.session import ApiSession
    from nodetopo.kube.transport import connect
    from nodetopo.kubectl.fleet import FleetFilter, fleet_rows, render_fleet
    from nodetopo.model import LinkClass
    from nodetopo.resource.identity import GROUP, PLURAL, VERSION

    with connect(args.kubeconfig, context=args.kube_context) as connection:
        listed = ApiSession(connection).list_cluster_objects(GROUP, VERSION, PLURAL)
    objects = [i for i in listed.get("items") or [] if isinstance(i, dict)]
    keep = FleetFilter(
        island_size=args.island_size,
        nic_distance=LinkClass[args.nic_distance] if args.nic_distance else None,
        inconsistent=args.inconsistent,
        not_ready=args.not_ready,
        degraded=args.degraded,
    )
    rows = fleet_rows(objects, keep)
    if args.output == "name":
        sys.stdout.write("".join(f"{strip_control(r.node)}\n" for r in rows))
    elif args.output == "json":
        shown = [
            {
                "node": r.node,
                "gpus": r.gpus,
                "model": r.model,
                "islands": r.islands,
                "nicDistance": r.nic_distance.name if r.nic_distance else None,
                "ready": r.ready,
                "consistent": r.consistent,
                "degraded": list(r.degraded) if r.degraded is not None else None,
            }
            for r in rows
        ]
        sys.stdout.write(json.dumps(shown, indent=2) + "\n")
    elif not rows:
        what = "match the filters" if keep != FleetFilter() else "are published in this cluster"
        print(f"No NodeTopology objects {what}.", file=sys.stderr)
    else:
        sys.stdout.write(render_fleet(rows, output_width(sys.stdout)))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    return run_command(args.func, args, prefix="error")


if __name__ == "__main__":
    raise SystemExit(main())
