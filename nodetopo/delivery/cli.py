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
import json
import math
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from nodetopo.command.args import AddArguments, add_command, add_output_format, number, require
from nodetopo.command.terminal import strip_control
from nodetopo.delivery.inputs import flag_pairs, gpu_indices, placements_for, read_input, read_topologies
from nodetopo.delivery.judging import (
    event_line,
    judge_nccl,
    judge_nvbandwidth_output,
    judgement_json,
    judgement_text,
    nccl_algorithms,
)
from nodetopo.delivery.report import expectation_json, expectation_text
from nodetopo.errors import BundleError, NodetopoError, ParseError
from nodetopo.expect import (
    COLLECTIVE_ALGORITHMS,
    Expectation,
    ExpectError,
    expect,
)
from nodetopo.model import Topology
from nodetopo.resource.identity import API_VERSION

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


def register(sub: Any, add_common: AddArguments, add_input: AddArguments) -> None:
    del add_input
    p = add_command(
        sub,
        "expect",
        help=EXPECT_HELP,
        description="The expected bus-bandwidth band at large message sizes of a collective over the GPUs "
        "a workload holds, from the nodes' NodeTopology: the algorithm NCCL would likely run, the link that "
        "limits it and every assumption the model made.",
        epilog=EXPECT_EPILOG,
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
    add_output_format(p, ("table", "json"), "the band as a table, or JSON (default: table)")
    add_common(p)
    p.set_defaults(func=cmd_expect)

    p = add_command(
        sub,
        "accept",
        help=ACCEPT_HELP,
        description="Read nccl-tests (*_perf text or its -J JSON) or nvbandwidth output and give the "
        "verdict: "
        "Passed, ResourceNotReal (with the suspect link), PlacedWrong (the placement caps below --min-busbw) "
        "or HarnessError (the output cannot be a bandwidth result).",
        epilog=ACCEPT_EPILOG,
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
    add_output_format(p, ("text", "json"), "the verdict as text, or JSON (default: text)")
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
    value = number(text, "a number of GB/s", float)
    require(math.isfinite(value) and value > 0, f"must be a positive number of GB/s, not {text}")
    return value


def _ratio(text: str) -> float:
    value = number(text.split(":", 1)[0], "a ratio", float, shown=text, hint=" (e.g. 2 or 2:1)")
    require(math.isfinite(value) and value >= 1, f"must be at least 1 (1 = non-blocking), not {text}")
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
# expect
# --------------------------------------------------------------------------------------------


def cmd_expect(args: argparse.Namespace) -> int:
    stdin_used = [False]
    objects: dict[str, Mapping[str, Any]] = {}
    from_api = bool(args.pod or args.job or args.raycluster)
    topologies = read_topologies(args, stdin_used, objects, required=not from_api)
    places: list[Any] = []
    left: list[str] = []
    if from_api:
        from nodetopo.delivery.pods import merged

        session = _session(args)
        try:
            places, left = _pod_places(args, session, topologies, objects)
        finally:
            session.close()
        placements = placements_for(args, topologies, fixed=merged(places))
    else:
        placements = placements_for(args, topologies)
    try:
        e = expect(
            placements,
            args.collective,
            algorithms=nccl_algorithms(args, args.collective),
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


def cmd_accept(args: argparse.Namespace) -> int:
    from nodetopo.expect.verdict import Judgement, Verdict, worst
    from nodetopo.perf import NvbOutput, parse_benchmark

    stdin_used = [False]
    texts = [(path, read_input(path, stdin_used)) for path in args.results]
    objects: dict[str, Mapping[str, Any]] = {}
    topologies = read_topologies(args, stdin_used, objects, required=not args.pod)
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
                judgements.append((judge_nvbandwidth_output(output, args, topologies, fixed), None))
            else:
                judgements.append(judge_nccl(output, args, topologies, fixed, need, need_from))
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
            "results": [judgement_json(j, e) for j, e in judgements],
        }
        if places:
            report["pods"] = [{**_place_json(p), "event": events[p.ref]} for p in places]
        sys.stdout.write(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    else:
        for j, _ in judgements:
            sys.stdout.write(judgement_text(j))
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

    given = {
        node: gpu_indices(spec, f"--gpus {node}") for node, spec in flag_pairs(args.gpus, "--gpus").items()
    }
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


def _post_events(
    args: argparse.Namespace, session: Any, places: Sequence[Any], verdict: Any, judgements: Sequence[Any]
) -> dict[str, str]:
    """Post the verdict on each pod; what happened, by pod."""
    from nodetopo.delivery.pods import event
    from nodetopo.kube.events import event_namespace

    said: dict[str, str] = {}
    if not places:
        return said
    line = event_line(judgements, verdict)
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
