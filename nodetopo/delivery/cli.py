"""``nodetopo expect`` and ``nodetopo accept``.

Where the nodes come from: NodeTopology objects in files (``-f``; one object, a ``List`` as
``kubectl get ntopo -o json`` prints, several YAML documents, ``-`` for stdin) or capture bundles
(``--from-bundle DIR``, discovered on the spot). Which GPUs: ``--gpus NODE=0-3`` per node (without it,
every GPU of every node; ``accept`` first tries the rank list of the result).

``accept --pod NAMESPACE/NAME`` (repeatable: a gang's pods) reads where it ran from the API: the pod's
node (``spec.nodeName``), that node's NodeTopology (unless ``-f`` gives it) and the GPUs the kubelet
handed the pod as the NodeTopology publishes them (``heldBy``, the rule the probe uses); where the
object does not say who holds its GPUs, ``--gpus NODE=LIST`` must. The pod's ``nodetopo.io/min-busbw``
annotation is the need unless ``--min-busbw`` gives one. The verdict is posted as an Event on each pod
(reason the verdict word; ``Normal`` for Passed, else ``Warning``).

``expect --pod``, ``--job NAMESPACE/NAME`` and ``--raycluster NAMESPACE/NAME`` read the same from the
API for a workload's gang (``nodetopo.delivery.pods.gang_of``: the pods its controller labels, finished
ones left out, a RayCluster's head only when it asks for GPUs); a pod that cannot be placed stops it
(exit 2, every such pod named), never the band of a smaller gang.

``accept`` exit codes: 0 Passed, 3 HarnessError, 4 PlacedWrong, 5 ResourceNotReal (with several
results, the highest); 1 an error (the API server's refusal included), 2 bad usage or an unreadable
input (a pod that does not exist or is not scheduled, GPUs that cannot be known without ``--gpus``).
An Event that cannot be posted is said on stderr and leaves the exit code the verdict's.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from nodetopo.errors import BundleError, NodetopoError, ParseError
from nodetopo.expect import (
    COLLECTIVE_ALGORITHMS,
    Algorithm,
    Expectation,
    ExpectError,
    Link,
    ObservedLink,
    Placement,
    algorithms_for,
    expect,
)
from nodetopo.model import Topology
from nodetopo.resource.identity import API_VERSION
from nodetopo.terminal import strip_control

EXPECT_HELP = "the bus bandwidth a placement should deliver, its limiting link and the assumptions"
ACCEPT_HELP = "judge an nccl-tests or nvbandwidth result against what its placement should deliver"

EXPECT_EPILOG = """\
examples:
  nodetopo expect -f node-a.json                      all GPUs of one node, all-reduce
  nodetopo expect -f nodes.json --gpus a=0-3 --gpus b=0-3 -o json
  kubectl get ntopo -o json | nodetopo expect -f - --gpus gpu-1=all --gpus gpu-2=all
  nodetopo expect --job ml/allreduce                  the pods of a Job, where they run (from the API)
  nodetopo expect --raycluster ml/train --pod ml/x-0  a RayCluster's GPU pods, and one pod more

--job and --raycluster list the pods by the labels their controllers set (Job: batch.kubernetes.io/job-name
or the legacy job-name; RayCluster: ray.io/cluster): a Job's every pod, a RayCluster's workers and its head
only when it asks for GPUs; pods that have finished (Succeeded, Failed) are left out and said. Each pod's
node and GPUs are read as accept --pod reads them (heldBy); a pod not scheduled yet, or whose GPUs its
NodeTopology does not publish, stops it (exit 2, naming every such pod): the band is the whole gang's.
"""

ACCEPT_EPILOG = """\
examples:
  nodetopo accept all_reduce.log -f nodes.json                  the ranks' hosts name the nodes
  nodetopo accept - -f nodes.json --gpus a=all --gpus b=all --min-busbw 400 < all_reduce.log
  nodetopo accept nvbandwidth.txt -f node-a.json -o json
  nodetopo accept all_reduce.log --pod ml/trainer-0 --pod ml/trainer-1    where the pods ran; an Event on each

exit: 0 Passed, 3 HarnessError, 4 PlacedWrong, 5 ResourceNotReal, 1 error, 2 usage
"""

MAX_INPUT_BYTES = 64 << 20


def register(sub: Any, add_common: Callable[..., None], add_input: Callable[..., None]) -> None:
    del add_input
    p = sub.add_parser(
        "expect",
        help=EXPECT_HELP,
        description="The expected bus-bandwidth band at large message sizes of a collective over the GPUs "
        "a workload holds, from the nodes' NodeTopology: the algorithm NCCL would likely run, the link that "
        "limits it and every assumption the model made.",
        epilog=EXPECT_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    source = _add_placement(p)
    _add_pods(source, "a pod of the workload (repeatable)")
    source.add_argument(
        "--job",
        action="append",
        default=[],
        metavar="NAMESPACE/NAME",
        help="a Job: its pods (batch.kubernetes.io/job-name or job-name=NAME) read from the API, the band "
        "for them all",
    )
    source.add_argument(
        "--raycluster",
        action="append",
        default=[],
        metavar="NAMESPACE/NAME",
        help="a RayCluster: its worker pods, and its head when it asks for GPUs (ray.io/cluster=NAME), "
        "read from the API, the band for them all",
    )
    from nodetopo.kube.flags import add_kube_args

    add_kube_args(p)
    p.add_argument(
        "--collective",
        default="all_reduce",
        choices=sorted(COLLECTIVE_ALGORITHMS),
        help="the collective (default: %(default)s)",
    )
    p.add_argument(
        "-o",
        "--output",
        choices=["table", "json"],
        default="table",
        help="the band as a table, or JSON (default: table)",
    )
    add_common(p)
    p.set_defaults(func=cmd_expect)

    p = sub.add_parser(
        "accept",
        help=ACCEPT_HELP,
        description="Read nccl-tests (*_perf text or its -J JSON) or nvbandwidth output and give the "
        "verdict: "
        "Passed, ResourceNotReal (with the suspect link), PlacedWrong (the placement caps below --min-busbw) "
        "or HarnessError (the output cannot be a bandwidth result).",
        epilog=ACCEPT_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("results", nargs="+", metavar="RESULT", help="an output file, or - for stdin")
    source = _add_placement(p)
    _add_pods(
        source,
        "a pod the result ran in (repeat per pod of a gang); its nodetopo.io/min-busbw is the need, and "
        "the verdict is posted as an Event on it",
    )
    source.add_argument("--no-event", action="store_true", help="with --pod: post no Event")
    from nodetopo.kube.flags import add_kube_args

    add_kube_args(p)
    p.add_argument(
        "--collective",
        default=None,
        choices=sorted(COLLECTIVE_ALGORITHMS),
        help="the collective, when the output does not say (a pasted tail of the table)",
    )
    p.add_argument(
        "--min-busbw",
        type=_gbps,
        default=None,
        metavar="GBPS",
        help="what the workload needs (default: with --pod, the pods' nodetopo.io/min-busbw annotation): "
        "below it a result that is what the placement gives is PlacedWrong",
    )
    p.add_argument(
        "-o",
        "--output",
        choices=["text", "json"],
        default="text",
        help="the verdict as text, or JSON (default: text)",
    )
    add_common(p)
    p.set_defaults(func=cmd_accept)


def _add_pods(source: Any, what: str) -> None:
    source.add_argument(
        "--pod",
        action="append",
        default=[],
        metavar="NAMESPACE/NAME",
        help=f"{what}: its node, its NodeTopology and its GPUs (heldBy) are read from the API. Where the "
        "NodeTopology does not say who holds its GPUs, give --gpus NODE=LIST",
    )


def _gbps(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of GB/s: {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number of GB/s, not {text}")
    return value


def _ratio(text: str) -> float:
    head = text.split(":", 1)[0]
    try:
        value = float(head)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a ratio: {text!r} (e.g. 2 or 2:1)") from None
    if not (math.isfinite(value) and value >= 1):
        raise argparse.ArgumentTypeError(f"must be at least 1 (1 = non-blocking), not {text}")
    return value


def _add_placement(p: argparse.ArgumentParser) -> Any:
    source = p.add_argument_group("where it runs")
    source.add_argument(
        "-f",
        "--file",
        action="append",
        default=[],
        metavar="FILE",
        help="NodeTopology objects (YAML or JSON: one, a List, several documents; - for stdin)",
    )
    source.add_argument(
        "--from-bundle",
        action="append",
        default=[],
        metavar="DIR",
        help="a capture bundle, discovered here (the node is named after the bundle's manifest or directory)",
    )
    source.add_argument(
        "--gpus",
        action="append",
        default=[],
        metavar="NODE=LIST",
        help="the GPUs held on NODE: indices (0,1,4-7) or all; repeat per node. Without it: every GPU of "
        "every node",
    )
    source.add_argument(
        "--nics",
        action="append",
        default=[],
        metavar="NODE=LIST",
        help="the RDMA NICs held on NODE (mlx5_0,mlx5_1); without it: the nearest NICs of its GPUs",
    )
    source.add_argument(
        "--nccl-algo",
        default=None,
        metavar="ALGO",
        help="NCCL_ALGO as the run had it (Ring, Tree, NVLS, NVLSTree, ^NVLS): narrows the band",
    )
    source.add_argument(
        "--oversubscription",
        type=_ratio,
        default=1.0,
        metavar="RATIO",
        help="the fabric's oversubscription above each leaf (2 or 2:1; default 1, non-blocking)",
    )
    return source


# --------------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------------


def _read(path: str, stdin_used: list[bool]) -> str:
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


def _topologies(
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
        text = _read(path, stdin_used)
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


def _indices(text: str, what: str) -> tuple[int, ...] | None:
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


def _pairs(values: Sequence[str], flag: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for v in values:
        node, sep, rest = v.partition("=")
        if not sep or not node:
            raise BundleError(f"{flag} {v!r}: expected NODE=LIST")
        if node in out:
            raise BundleError(f"{flag}: node {node} given twice")
        out[node] = rest
    return out


def _placements(
    args: argparse.Namespace,
    topologies: Mapping[str, Topology],
    inferred: Mapping[str, tuple[int, ...]] | None = None,
    fixed: Mapping[str, tuple[int, ...] | None] | None = None,
) -> list[Placement]:
    """The GPUs held per node: ``fixed`` (the pods' own, ``--pod``), else ``--gpus``, else
    ``inferred`` (the rank list), else every GPU of every node."""
    gpus = _pairs(args.gpus, "--gpus")
    nics = _pairs(args.nics, "--nics")
    for node in (*gpus, *nics):
        if node not in topologies:
            raise BundleError(f"node {node}: no NodeTopology for it (known: {', '.join(sorted(topologies))})")
    if fixed is not None:
        chosen = dict(fixed)
    elif gpus:
        chosen = {node: _indices(spec, f"--gpus {node}") for node, spec in gpus.items()}
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


# --------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------


def _grouped(links: Sequence[Link]) -> list[str]:
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


def _link_json(link: Link) -> dict[str, Any]:
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


def _band_json(low: float, high: float, expected: float) -> dict[str, float]:
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
        "busbw": _band_json(e.band.low, e.band.high, e.band.expected),
        "algorithm": str(e.algorithm),
        "limitingClass": e.limiting_class,
        "limiting": [_link_json(x) for x in e.limiting],
        "bounds": [
            {
                "algorithm": str(b.algorithm),
                "boundGBps": round(b.bound, 1),
                "busbw": _band_json(b.band.low, b.band.high, b.band.expected),
                "efficiency": {
                    "low": b.efficiency.low,
                    "high": b.efficiency.high,
                    "calibrated": b.efficiency.calibrated,
                },
                "stage": b.stage,
                "cut": b.cut,
                "limiting": [_link_json(x) for x in b.limiting],
            }
            for b in e.bounds
        ],
        "observedLinks": [_link_json(x) for x in e.observed],
        "assumptions": list(e.assumptions),
    }


def expectation_text(e: Expectation) -> str:
    lines = [
        f"{e.collective} over {e.ranks} GPUs on {len(e.nodes)} node{'s' if len(e.nodes) != 1 else ''}"
        f" ({', '.join(e.units)}; {e.fabric_span})",
        f"expected busbw at large sizes: {e.band.low:.0f}-{e.band.high:.0f} GB/s "
        f"(most likely {e.band.expected:.0f}, {e.algorithm})",
        f"limited by {e.limiting_class}:",
        *(f"  {x}" for x in _grouped(e.limiting)),
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


# --------------------------------------------------------------------------------------------
# expect
# --------------------------------------------------------------------------------------------


def _algorithms(
    args: argparse.Namespace, collective: str, from_output: str | None = None
) -> tuple[Algorithm, ...] | None:
    text = args.nccl_algo or from_output
    if not text:
        return None
    picked = algorithms_for(collective, text)
    if picked is None:
        raise ExpectError(
            f"NCCL_ALGO={text}: none of the model's algorithms for {collective} "
            f"({', '.join(map(str, COLLECTIVE_ALGORITHMS[collective]))})"
        )
    return picked


def cmd_expect(args: argparse.Namespace) -> int:
    stdin_used = [False]
    objects: dict[str, Mapping[str, Any]] = {}
    from_api = bool(args.pod or args.job or args.raycluster)
    topologies = _topologies(args, stdin_used, objects, required=not from_api)
    places: list[Any] = []
    left: list[str] = []
    if from_api:
        from nodetopo.delivery.pods import merged

        session = _session(args)
        try:
            places, left = _pod_places(args, session, topologies, objects)
        finally:
            session.close()
        placements = _placements(args, topologies, fixed=merged(places))
    else:
        placements = _placements(args, topologies)
    try:
        e = expect(
            placements,
            args.collective,
            algorithms=_algorithms(args, args.collective),
            oversubscription=args.oversubscription,
        )
    except ExpectError as err:
        print(f"nodetopo expect: {strip_control(str(err))}", file=sys.stderr)
        return 1
    if args.output == "json":
        report = expectation_json(e)
        if from_api:
            report["pods"] = [_place_json(p) for p in places]
            report["leftOut"] = left
        sys.stdout.write(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    else:
        sys.stdout.write(expectation_text(e))
        if from_api:
            sys.stdout.write("\n")
        for p in places:
            sys.stdout.write(strip_control(f"pod {p.ref}: {_where(p)}") + "\n")
        for line in left:
            sys.stdout.write(strip_control(f"left out {line}") + "\n")
    return 0


def _where(p: Any) -> str:
    return f"{p.node} GPU(s) {_listed(p.gpus)} ({p.gpus_from})"


def _place_json(p: Any) -> dict[str, Any]:
    return {
        "pod": p.ref,
        "node": p.node,
        "gpus": list(p.gpus) if p.gpus is not None else "all",
        "gpusFrom": p.gpus_from,
        "minBusbwGBps": p.min_busbw,
    }


# --------------------------------------------------------------------------------------------
# accept
# --------------------------------------------------------------------------------------------


def _inferred_gpus(
    ranks: Iterable[Any], topologies: Mapping[str, Topology]
) -> dict[str, tuple[int, ...]] | None:
    """The placement the rank list shows, when every rank's host names a known node: GPUs by PCI bus id
    where printed in full (domain:bus:device), else by device index."""
    from nodetopo.model import PciAddress

    held: dict[str, set[int]] = {}
    for r in ranks:
        topology = topologies.get(r.host)
        if topology is None:
            return None
        index = r.device
        if r.bus_id and r.bus_id.count(":") == 2:
            try:
                address = PciAddress.parse(r.bus_id + ".0")
            except ValueError:
                address = None
            match = [g.index for g in topology.gpus if g.address is not None and g.address == address]
            if match:
                index = match[0]
        held.setdefault(r.host, set()).add(index)
    return {node: tuple(sorted(v)) for node, v in held.items()} or None


def cmd_accept(args: argparse.Namespace) -> int:
    from nodetopo.expect.verdict import Judgement, Verdict, worst
    from nodetopo.perf import NvbOutput, parse_benchmark

    stdin_used = [False]
    texts = [(path, _read(path, stdin_used)) for path in args.results]
    objects: dict[str, Mapping[str, Any]] = {}
    topologies = _topologies(args, stdin_used, objects, required=not args.pod)
    session = _session(args) if args.pod else None
    try:
        places = _pod_places(args, session, topologies, objects)[0] if args.pod else []
        fixed = None
        need, need_from = args.min_busbw, "--min-busbw"
        if places:
            from nodetopo.delivery.pods import declared_need, merged

            fixed = merged(places)
            if need is None:
                need, need_from = declared_need(places)
        judgements: list[tuple[Judgement, Expectation | None]] = []
        for path, text in texts:
            try:
                output = parse_benchmark(text, path)
            except ParseError as e:
                judgements.append(
                    (Judgement(verdict=Verdict.HARNESS_ERROR, reason=f"unreadable: {e}", source=path), None)
                )
                continue
            if isinstance(output, NvbOutput):
                judgements.append((_accept_nvbandwidth(output, args, topologies, fixed), None))
            else:
                judgements.append(_accept_nccl(output, args, topologies, fixed, need, need_from))
        verdict = worst([j for j, _ in judgements])
        events = _post_events(args, session, places, verdict, [j for j, _ in judgements])
    finally:
        if session is not None:
            session.close()
    if args.output == "json":
        report: dict[str, Any] = {
            "apiVersion": API_VERSION,
            "kind": "AcceptanceReport",
            "verdict": str(verdict),
            "results": [_judgement_json(j, e) for j, e in judgements],
        }
        if places:
            report["pods"] = [{**_place_json(p), "event": events[p.ref]} for p in places]
        sys.stdout.write(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    else:
        for j, _ in judgements:
            sys.stdout.write(_judgement_text(j))
        for p in places:
            sys.stdout.write(strip_control(f"pod {p.ref}: {_where(p)}; Event {events[p.ref]}") + "\n")
    for ref, said in events.items():
        if not said.startswith("posted"):
            print(f"nodetopo accept: the Event on pod {ref} was {strip_control(said)}", file=sys.stderr)
    from nodetopo.expect.verdict import EXIT_CODES

    return EXIT_CODES[verdict]


def _listed(gpus: tuple[int, ...] | None) -> str:
    return "all" if gpus is None else ",".join(map(str, gpus))


def _session(args: argparse.Namespace) -> Any:
    """The API session ``--pod`` reads and posts through (no credentials: an error, exit 1)."""
    from nodetopo.kube.session import ApiSession
    from nodetopo.kube.transport import connect

    return ApiSession(connect(args.kubeconfig, context=args.kube_context), field_manager="nodetopo-accept")


def _pod_places(
    args: argparse.Namespace,
    session: Any,
    topologies: dict[str, Topology],
    objects: dict[str, Mapping[str, Any]],
) -> tuple[list[Any], list[str]]:
    """The places (``nodetopo.delivery.pods``) of the pods of ``--pod`` and of the workloads of
    ``--job`` and ``--raycluster`` (``expect`` only), their nodes' topologies added to ``topologies``;
    and the workloads' pods left out, a line each."""
    from nodetopo.delivery.pods import parse_workload_ref, places_of, read_gang, read_places
    from nodetopo.resource.body import topology_from_nodetopology
    from nodetopo.resource.published import ResourceError

    given = {node: _indices(spec, f"--gpus {node}") for node, spec in _pairs(args.gpus, "--gpus").items()}
    known = tuple(topologies)
    workloads = [
        *(parse_workload_ref("Job", t) for t in getattr(args, "job", ())),
        *(parse_workload_ref("RayCluster", t) for t in getattr(args, "raycluster", ())),
    ]
    places = read_places(session, args.pod, objects, given, known=known)
    left: list[str] = []
    for workload in workloads:
        gang, out = read_gang(session, workload)
        left += out
        named = {p.ref for p in places}
        fresh = [
            pod
            for pod in gang
            if f"{workload.namespace}/{(pod.get('metadata') or {}).get('name')}" not in named
        ]
        places += places_of(session, fresh, objects, given, known=known)
    for p in places:
        if p.node not in topologies:
            try:
                topologies[p.node] = topology_from_nodetopology(objects[p.node])
            except ResourceError as e:
                raise BundleError(f"NodeTopology/{p.node}: {e}") from None
    unused = sorted(set(given) - {p.node for p in places})
    if unused:
        raise BundleError(f"--gpus {unused[0]}: no {'pod' if workloads else '--pod'} ran on that node")
    return places, left


def _event_line(judgements: Sequence[Any], verdict: Any) -> str:
    """One line for the Event: the worst result's, with how many results there were."""
    j = next(x for x in judgements if x.verdict == verdict)
    line = f"{j.source}: {j.reason}"
    if j.suspects:
        line += "; suspect: " + "; ".join(_grouped(j.suspects)[:3])
    if len(judgements) > 1:
        line = f"{len(judgements)} results, the worst: {line}"
    return line


def _post_events(
    args: argparse.Namespace, session: Any, places: Sequence[Any], verdict: Any, judgements: Sequence[Any]
) -> dict[str, str]:
    """Post the verdict on each pod; what happened, by pod."""
    from nodetopo.delivery.pods import event
    from nodetopo.kube.events import event_namespace

    said: dict[str, str] = {}
    if not places:
        return said
    line = _event_line(judgements, verdict)
    for p in places:
        if args.no_event:
            said[p.ref] = "not posted (--no-event)"
            continue
        body = event(p, str(verdict), line)
        try:
            session.create_event(event_namespace(body["involvedObject"]), body)
            said[p.ref] = f"posted ({body['type']} {verdict})"
        except NodetopoError as e:
            said[p.ref] = f"not posted: {e}"
    return said


def _accept_nccl(
    output: Any,
    args: argparse.Namespace,
    topologies: Mapping[str, Topology],
    fixed: Mapping[str, tuple[int, ...] | None] | None = None,
    need: float | None = None,
    need_from: str = "--min-busbw",
) -> tuple[Any, Expectation | None]:
    from nodetopo.expect.verdict import Judgement, Measurement, Verdict, judge, measure

    measured = measure(output, args.collective)
    if not isinstance(measured, Measurement):
        return measured, None
    collective = measured.collective
    notes: list[str] = []
    if collective is None:
        collective = "all_reduce"
        notes.append("the output does not name its benchmark: all_reduce assumed (give --collective)")
    if collective not in COLLECTIVE_ALGORITHMS:
        return (
            Judgement(
                verdict=Verdict.HARNESS_ERROR,
                reason=f"{collective}: the model has no expectation for it",
                source=measured.source,
                measured=measured,
            ),
            None,
        )
    inferred = (
        _inferred_gpus(output.ranks, topologies)
        if fixed is None and not args.gpus and output.ranks and not output.ranks_elided
        else None
    )
    placements = _placements(args, topologies, inferred, fixed)
    observed: tuple[ObservedLink, ...] = ()
    try:
        algos = _algorithms(args, collective, measured.nccl_algo)
        expected = expect(
            placements,
            collective,
            algorithms=algos,
            observed=observed,
            oversubscription=args.oversubscription,
        )
    except ExpectError as e:
        return (
            Judgement(
                verdict=Verdict.HARNESS_ERROR,
                reason=f"no expectation: {e}",
                source=measured.source,
                measured=measured,
            ),
            None,
        )
    if need is not None and need_from != "--min-busbw":
        notes.append(f"the need, {need:g} GB/s: {need_from}")
    if notes:
        measured = dataclasses.replace(measured, notes=(*measured.notes, *notes))
    return judge(output, measured, expected, min_busbw=need), expected


def _accept_nvbandwidth(
    output: Any,
    args: argparse.Namespace,
    topologies: Mapping[str, Topology],
    fixed: Mapping[str, tuple[int, ...] | None] | None = None,
) -> Any:
    from nodetopo.expect.nvbandwidth import judge_nvbandwidth

    placements = _placements(args, topologies, None, fixed)
    if len(placements) != 1:
        from nodetopo.expect.verdict import Judgement, Verdict

        return Judgement(
            verdict=Verdict.HARNESS_ERROR,
            reason=f"nvbandwidth measures one node; {len(placements)} are given (name one with --gpus "
            "NODE=...)",
            source=output.source,
        )
    return judge_nvbandwidth(output, placements[0])


def _judgement_json(j: Any, e: Expectation | None) -> dict[str, Any]:
    out: dict[str, Any] = {"source": j.source, "verdict": str(j.verdict), "reason": j.reason}
    if j.measured is not None:
        m = j.measured
        out["measured"] = {
            "collective": m.collective,
            "ranks": m.ranks,
            "sizeBytes": m.size,
            "busbwGBps": m.busbw,
            "algbwGBps": m.algbw,
            "peakBusbwGBps": m.peak_busbw,
            "avgBusBandwidth": m.avg_busbw,
            "ncclVersion": m.nccl_version,
            "ncclAlgo": m.nccl_algo,
            "hosts": list(m.hosts),
        }
    if j.expected is not None:
        out["expected"] = _band_json(j.expected.low, j.expected.high, j.expected.expected)
    if e is not None:
        out["expectation"] = expectation_json(e)
    out["suspects"] = [_link_json(x) for x in j.suspects]
    out["notes"] = list(j.notes)
    return out


def _judgement_text(j: Any) -> str:
    lines = [f"{j.source}: {j.verdict}: {j.reason}"]
    if j.suspects:
        lines.append("  suspect:")
        lines += [f"    {x}" for x in _grouped(j.suspects)]
    lines += [f"  note: {n}" for n in j.notes]
    return "".join(strip_control(line) + "\n" for line in lines)
