"""``nodetopo admit`` and ``nodetopo summary-controller`` (registered by ``nodetopo.cli``).

Imports stay inside the command functions: ``nodetopo --help`` and the other commands never load
the Kubernetes client for them.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import sys
import threading
from pathlib import Path
from typing import Any

from nodetopo.command.args import AddArguments, add_command, add_output_format
from nodetopo.command.signals import run_until_stopped
from nodetopo.kube.flags import add_kube_args

log = logging.getLogger(__name__)

ADMIT_DESCRIPTION = """\
Check Pods, Jobs, RayClusters, RayJobs and JobSets in a manifest against nodetopo's admission rules
offline: the same rules and messages as the ValidatingAdmissionPolicies in deploy/admission/
(annotations parse; GPU, RDMA and multi-pod workloads declare their topology; the request can be met
by some node). A RayCluster (a RayJob's rayClusterSpec) is judged per group: its head and each worker
group (replicas x numOfHosts pods); a JobSet per replicated job (replicas x the Job's parallelism).
The cluster facts come from a NodeTopologySummary (--summary FILE, e.g. `kubectl get ntsum cluster
-o yaml`), from NodeTopology objects (--nodetopologies FILE, e.g. `kubectl get ntopo -o yaml`, or
`nodetopo discover -o yaml` of one node), or else from the cluster (--kubeconfig, or in-cluster).
Exit 0: every object would be admitted; 3: some would be refused; 2: unusable input.
"""

CONTROLLER_DESCRIPTION = """\
Keep the NodeTopologySummary "cluster" current from a watch of NodeTopology objects: per GPU model
and in total, the largest NVLink island, the largest single-NUMA GPU group, the best GPU-NIC class,
the RDMA link layers, node counts per shape, and when it was computed. The thresholds below are
published in the summary's spec for the admission policies. See deploy/admission/.
"""


def register(sub: Any, add_common: AddArguments, add_input: AddArguments) -> None:
    p = add_command(
        sub,
        "admit",
        help="check Pods, Jobs, RayClusters, RayJobs, JobSets in a manifest against the admission rules",
        description=ADMIT_DESCRIPTION,
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="YAML/JSON manifest(s); - reads stdin")
    source = p.add_mutually_exclusive_group()
    source.add_argument(
        "--summary", metavar="FILE", help="a NodeTopologySummary object (YAML or JSON; - reads stdin)"
    )
    source.add_argument(
        "--nodetopologies",
        metavar="FILE",
        help="NodeTopology objects (a List or several documents; - reads stdin); without --summary or "
        "this: the cluster's NodeTopologySummary",
    )
    add_kube_args(p)
    add_output_format(p, ("text", "json"), "one line per object, or JSON (default: text)")
    add_common(p)
    p.set_defaults(func=cmd_admit)

    p = add_command(
        sub,
        "summary-controller",
        help="keep the NodeTopologySummary (the admission policies' parameters) current",
        description=CONTROLLER_DESCRIPTION,
    )
    add_kube_args(p)
    p.add_argument(
        "--page-size",
        type=int,
        default=100,
        metavar="N",
        help="NodeTopology objects per list page: bounds the memory a list takes (default: %(default)s)",
    )
    p.add_argument(
        "--debounce",
        type=float,
        default=0.5,
        metavar="SECONDS",
        help="let changes settle (default: %(default)s)",
    )
    p.add_argument(
        "--stale-after",
        type=int,
        default=600,
        metavar="SECONDS",
        help="policies stop trusting a summary this old; rewritten every third of it (default: %(default)s)",
    )
    p.add_argument(
        "--declare-topology-min-gpus",
        type=int,
        default=2,
        metavar="N",
        help="pods with N+ GPUs must declare a topology (default: %(default)s)",
    )
    p.add_argument(
        "--rdma-resource-prefix",
        action="append",
        metavar="PREFIX",
        help="resource names that are RDMA devices (repeatable; default: rdma/)",
    )
    p.add_argument(
        "--multi-pod-min-parallelism",
        type=int,
        default=2,
        metavar="N",
        help="Jobs with parallelism N+ must declare GPUs per pod and a topology scope (default: %(default)s)",
    )
    add_common(p)
    p.set_defaults(func=cmd_summary_controller)


def _documents(path: str) -> list[Any]:
    import yaml

    text = sys.stdin.read() if path == "-" else Path(path).read_text()
    return [d for d in yaml.safe_load_all(text) if d is not None]


def _objects(documents: list[Any]) -> list[Any]:
    out: list[Any] = []
    for d in documents:
        if isinstance(d, dict) and str(d.get("kind", "")).endswith("List"):
            out.extend(d.get("items") or [])
        else:
            out.append(d)
    return out


def _summary(args: argparse.Namespace) -> dict[str, Any] | None:
    from nodetopo.admission.summary import KIND, NAME, PLURAL, summarize_objects
    from nodetopo.resource.identity import GROUP, VERSION
    from nodetopo.resource.identity import KIND as NODETOPOLOGY_KIND

    if args.summary:
        found = [
            d for d in _objects(_documents(args.summary)) if isinstance(d, dict) and d.get("kind") == KIND
        ]
        if len(found) != 1:
            raise ValueError(f"{args.summary}: expected one {KIND}, found {len(found)}")
        return dict(found[0])
    if args.nodetopologies:
        objects = [
            d
            for d in _objects(_documents(args.nodetopologies))
            if isinstance(d, dict) and d.get("kind") == NODETOPOLOGY_KIND
        ]
        if not objects:
            raise ValueError(f"{args.nodetopologies}: no NodeTopology object in it")
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return summarize_objects(objects, computed_at=now)
    from nodetopo.kube.session import ApiSession
    from nodetopo.kube.transport import connect

    session = ApiSession(connect(args.kubeconfig, context=args.kube_context))
    try:
        return session.read_cluster_object(GROUP, VERSION, PLURAL, NAME)
    finally:
        session.close()


def cmd_admit(args: argparse.Namespace) -> int:
    import yaml

    from nodetopo.admission.claims import check_documents
    from nodetopo.placement.request import AnnotationError

    try:
        documents = [d for path in args.files for d in _documents(path)]
        summary = _summary(args)
        results = check_documents(documents, summary)
    except (OSError, ValueError, yaml.YAMLError, AnnotationError) as e:
        print(f"nodetopo admit: {e}", file=sys.stderr)
        return 2
    if not results:
        print(
            "nodetopo admit: no Pod, Job (batch/v1), RayCluster, RayJob (ray.io), JobSet (jobset.x-k8s.io), "
            "ResourceClaim or ResourceClaimTemplate (resource.k8s.io) in the input",
            file=sys.stderr,
        )
        return 2
    if summary is None:
        print(
            "nodetopo admit: the cluster has no NodeTopologySummary: only the annotation rules apply",
            file=sys.stderr,
        )
    if args.output == "json":
        out = [
            {
                "object": name,
                "admitted": not denials,
                "denials": [{"policy": d.policy, "message": d.message} for d in denials],
            }
            for name, denials in results
        ]
        print(json.dumps(out, indent=2))
    else:
        for name, denials in results:
            if not denials:
                print(f"{name}: admitted")
            for d in denials:
                print(f"{name}: refused by {d.policy}: {d.message}")
    return 3 if any(denials for _, denials in results) else 0


def cmd_summary_controller(args: argparse.Namespace) -> int:
    from nodetopo.admission.controller import (
        FIELD_MANAGER,
        SummaryState,
        SummaryWriter,
        apply_with,
        start_reflector,
    )
    from nodetopo.admission.summary import Thresholds
    from nodetopo.kube.session import ApiSession
    from nodetopo.kube.transport import connect

    thresholds = Thresholds(
        stale_after_s=args.stale_after,
        declare_topology_min_gpus=args.declare_topology_min_gpus,
        rdma_resource_prefixes=tuple(args.rdma_resource_prefix or ("rdma/",)),
        multi_pod_min_parallelism=args.multi_pod_min_parallelism,
    )
    session = ApiSession(connect(args.kubeconfig, context=args.kube_context), field_manager=FIELD_MANAGER)
    stop = threading.Event()
    state = SummaryState()
    start_reflector(session.connection, state, page_size=args.page_size, stop=stop)
    writer = SummaryWriter(
        state, apply_with(session), thresholds=thresholds, debounce_s=args.debounce, stop=stop
    )

    run_until_stopped(writer.run, log, "summary controller", stop, state.changed)
    session.close()
    return 0
