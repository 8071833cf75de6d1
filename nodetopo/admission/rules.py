"""The admission rules, offline: what the ValidatingAdmissionPolicies in ``deploy/admission/`` decide
for a Pod, a Job, a RayCluster, a RayJob or a JobSet, with the same messages, so ``nodetopo admit``
in CI says what the API server will say. ``tests/admit/cases.py`` drives both this module and the
real API server through one table.

Every rule judges a *pod group* (``pod_groups``): one pod template and how many of its pods run at
once. A Pod is a group of one, a Job one group of ``parallelism``; a RayCluster (a RayJob's
``rayClusterSpec``) is its head group and one group per worker group (``replicas`` x
``numOfHosts``), a JobSet one group per replicated job (``replicas`` x the Job's ``parallelism``).
Pods and Jobs are judged by the two policies below; the other kinds by ``nodetopo-workload-*``,
which apply the same rules to each group and prefix each message with the group it is about
(``worker group "gpu": ...``), so a workload is refused at ``kubectl apply``, not pod by pod after
its operator created them.

Two policies, evaluated separately by the API server, and so here:

``nodetopo-annotations`` (no parameters; always on in an opted-in namespace)
    every ``nodetopo.io/`` annotation of the pod (of the Job's pod template) is known and its value
    matches its grammar (``GRAMMAR``; the extender's five plus ``topology``, ``topology-scope``,
    ``gpus-per-pod`` and ``min-busbw``, the need ``nodetopo accept`` and ``nodetopo probe`` read).
    All errors, in ``GRAMMAR`` order, then the unknown keys, joined by ``; ``.
``nodetopo-topology`` (parameters: the ``NodeTopologySummary``)
    only when the annotations parse. *Declaration* (thresholds in the summary's ``spec``): a pod
    with at least ``declareTopologyMinGPUs`` GPUs declares ``gpus-in-one-island``/``numa-aligned``
    "true" or ``topology: any``; a container requesting an RDMA device resource declares ``rdma``;
    ``gpus-per-pod``, when given, equals the pod's GPU request; a Job with ``parallelism`` ≥
    ``multiPodMinParallelism`` whose pods request GPUs declares ``gpus-per-pod`` and
    ``topology-scope`` (a worker group or replicated job too, "the group runs ...").
    *Feasibility* (pods with GPUs, only while the summary is fresh: computed
    less than ``staleAfterSeconds`` before the object's creation): one island ≤ the largest island,
    one NUMA node ≤ the largest single-NUMA group, ``rdma: required`` only if a node has a usable RDMA
    NIC (with the preferred link layer, when one is given), ``max-nic-distance`` no tighter than the
    best class the cluster has; a gang (a group of several pods that declares ``topology-scope``)
    takes no more GPUs at once than the cluster has. A fact the summary lacks is unknown and its
    check is skipped.

Each check refuses only what no single node can offer; combinations of needs are left to the
scheduler extender, which sees each node whole.
"""

from __future__ import annotations

import dataclasses
import datetime
import re
from collections.abc import Mapping
from typing import Any

from nodetopo.admission.summary import NO_NIC, UNKNOWN_LAYER, Thresholds
from nodetopo.model import LinkClass
from nodetopo.placement.request import (
    GPU_RESOURCE,
    LINK_LAYER,
    MAX_NIC_DISTANCE,
    MIN_BUSBW,
    MIN_BUSBW_GRAMMAR,
    NUMA_ALIGNED,
    ONE_ISLAND,
    RDMA,
    AnnotationError,
    Grammar,
    effective_gpus,
    is_sidecar,
    parse_quantity,
    value_error,
)
from nodetopo.placement.request import (
    GRAMMAR as EXTENDER_GRAMMAR,
)
from nodetopo.resource.identity import PREFIX

TOPOLOGY = PREFIX + "topology"
TOPOLOGY_SCOPE = PREFIX + "topology-scope"
GPUS_PER_POD = PREFIX + "gpus-per-pod"
#: The node label a pod selects a GPU model with (``nodeSelector``); its value keys ``status.models``.
GPU_MODEL_LABEL = PREFIX + "gpu.model"

#: Every pod annotation under nodetopo.io/, in the order errors are reported.
GRAMMAR: dict[str, Grammar] = {
    **EXTENDER_GRAMMAR,
    TOPOLOGY: Grammar("(?i)^any$", "any"),
    TOPOLOGY_SCOPE: Grammar(
        rf"^{re.escape(PREFIX)}(nvlink\.(domain|clique)|fabric\.tier-[0-9])$",
        f"a node label key: {PREFIX}nvlink.domain, nvlink.clique or fabric.tier-0 to fabric.tier-9",
    ),
    GPUS_PER_POD: Grammar("^[1-9][0-9]{0,2}$", "a whole number from 1 to 999"),
    MIN_BUSBW: MIN_BUSBW_GRAMMAR,
}
_PRINTABLE = re.compile(r"[ -~]*")
_KNOWN = ", ".join(key.removeprefix(PREFIX) for key in GRAMMAR)

ANNOTATIONS_POLICY = "nodetopo-annotations"
TOPOLOGY_POLICY = "nodetopo-topology"
#: The same two rule sets for workloads whose pods come from several templates (``WORKLOADS``).
WORKLOAD_ANNOTATIONS_POLICY = "nodetopo-workload-annotations"
WORKLOAD_TOPOLOGY_POLICY = "nodetopo-workload-topology"


class ManifestError(AnnotationError):
    """An object ``nodetopo admit`` cannot check (not a kind it knows, or not valid as one)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Denial:
    policy: str  #: the ValidatingAdmissionPolicy that refuses
    message: str  #: its message, exactly as the API server reports it


# --------------------------------------------------------------------------------------------
# Reading the object
# --------------------------------------------------------------------------------------------


def is_job(obj: Mapping[str, Any]) -> bool:
    return str(obj.get("apiVersion", "")).startswith("batch/") and obj.get("kind") == "Job"


#: Workloads judged group by group: (API group, kind) -> the plural the policies match.
WORKLOADS = {
    ("ray.io", "RayCluster"): "rayclusters",
    ("ray.io", "RayJob"): "rayjobs",
    ("jobset.x-k8s.io", "JobSet"): "jobsets",
}


def workload_kind(obj: Mapping[str, Any]) -> tuple[str, str] | None:
    """(API group, kind) of a RayCluster, RayJob or JobSet; None for anything else."""
    key = (str(obj.get("apiVersion", "")).partition("/")[0], str(obj.get("kind", "")))
    return key if key in WORKLOADS else None


def is_checked(obj: Mapping[str, Any]) -> bool:
    """A kind the policies judge: a Pod, a batch/v1 Job, a RayCluster, a RayJob or a JobSet."""
    return obj.get("kind") == "Pod" or is_job(obj) or workload_kind(obj) is not None


@dataclasses.dataclass(frozen=True, slots=True)
class PodGroup:
    """Pods of one template that run at once: what each rule judges (a Pod is a group of one)."""

    template: Mapping[str, Any]  #: the Pod, or a pod template (``metadata`` + ``spec``)
    pods: int  #: how many run at once (a Job's parallelism, a worker group's replicas x hosts)
    subject: str = ""  #: prefixed to every message: 'worker group "gpu"' ("" for a Pod or a Job)
    runner: str = "Job"  #: what "runs N pods at once" in the gang messages


def _count(value: Any, where: str, default: int = 1) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ManifestError(f"{where}: expected a whole number, got {value!r}")
    return value


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _ray_groups(spec: Mapping[str, Any], where: str) -> list[PodGroup]:
    """The head and every worker group of a RayCluster spec (a RayJob's ``rayClusterSpec``)."""
    groups = []
    head = _mapping(spec.get("headGroupSpec")).get("template")
    if head is not None:
        groups.append(PodGroup(template=_mapping(head), pods=1, subject="head group", runner="the group"))
    for worker in spec.get("workerGroupSpecs") or []:
        worker = _mapping(worker)
        groups.append(
            _replicated_group(
                where,
                "worker group",
                str(worker.get("groupName", "")),
                worker.get("template"),
                ("replicas", worker.get("replicas")),
                ("numOfHosts", worker.get("numOfHosts")),
            )
        )
    return groups


def _replicated_group(where: str, what: str, name: str, template: Any, *counts: tuple[str, Any]) -> PodGroup:
    """The group ``what`` ``name`` of a workload: ``template`` x the product of ``counts`` (each a
    field and its value, read in that order)."""
    at = f"{where}: {what} {name}"
    pods = 1
    for field, value in counts:
        pods *= _count(value, f"{at}: {field}")
    return PodGroup(template=_mapping(template), pods=pods, subject=f'{what} "{name}"', runner="the group")


def pod_groups(obj: Mapping[str, Any]) -> list[PodGroup]:
    """The pod templates of ``obj``, each with the number of its pods that run at once.

    A Pod: itself, one. A Job: ``spec.template`` x ``parallelism``. A RayCluster: the head group's
    template (one pod) and each worker group's x ``replicas`` x ``numOfHosts``; a RayJob: those of its
    ``rayClusterSpec`` (none when it selects an existing cluster). A JobSet: each replicated job's pod
    template x ``replicas`` x the Job's ``parallelism``.
    """
    spec = _mapping(obj.get("spec"))
    where = describe(obj)
    if obj.get("kind") == "Pod":
        return [PodGroup(template=obj, pods=1)]
    if is_job(obj):
        return [
            PodGroup(template=_mapping(spec.get("template")), pods=_count(spec.get("parallelism"), where))
        ]
    kind = workload_kind(obj)
    if kind == ("ray.io", "RayCluster"):
        return _ray_groups(spec, where)
    if kind == ("ray.io", "RayJob"):
        return _ray_groups(_mapping(spec.get("rayClusterSpec")), where)
    if kind == ("jobset.x-k8s.io", "JobSet"):
        groups = []
        for job in spec.get("replicatedJobs") or []:
            job = _mapping(job)
            job_spec = _mapping(_mapping(job.get("template")).get("spec"))
            groups.append(
                _replicated_group(
                    where,
                    "replicated job",
                    str(job.get("name", "")),
                    job_spec.get("template"),
                    ("replicas", job.get("replicas")),
                    ("parallelism", job_spec.get("parallelism")),
                )
            )
        return groups
    raise ManifestError(
        f"{obj.get('kind')!s}: nodetopo admit checks Pods, Jobs (batch/v1), RayClusters, RayJobs "
        "(ray.io) and JobSets (jobset.x-k8s.io)"
    )


def annotations_of(group: PodGroup, obj: Mapping[str, Any]) -> dict[str, str]:
    annotations = dict(_mapping(_mapping(group.template.get("metadata")).get("annotations")))
    for key, value in annotations.items():
        if not isinstance(value, str):  # YAML `true` or `8` unquoted: the API server refuses the object
            raise ManifestError(
                f"{describe(obj)}: annotation {key}: values must be strings (quote {value!r})"
            )
    return annotations


def _containers(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list(spec.get("containers") or []) + list(spec.get("initContainers") or [])


def _whole(value: Any, where: str) -> int:
    number = parse_quantity(str(value))
    if number != int(number):
        raise ManifestError(f"{where}: {GPU_RESOURCE} must be a whole number, got {value!r}")
    return int(number)


def gpu_request(spec: Mapping[str, Any]) -> int:
    """GPUs per pod, as the policy computes them (``effective_gpus``: sidecars add to the containers,
    an ordinary init container counts alone with the sidecars started before it). (The API server
    has already defaulted requests from limits and checked whole numbers.)"""

    def one(container: Mapping[str, Any]) -> int:
        resources = container.get("resources") or {}
        for kind in ("requests", "limits"):
            value = (resources.get(kind) or {}).get(GPU_RESOURCE)
            if value is not None:
                return _whole(value, f"container {container.get('name')}")
        return 0

    inits = spec.get("initContainers") or []
    return effective_gpus(
        (one(c) for c in spec.get("containers") or []), ((one(c), is_sidecar(c)) for c in inits)
    )


# --------------------------------------------------------------------------------------------
# nodetopo-annotations
# --------------------------------------------------------------------------------------------


def annotation_errors(annotations: Mapping[str, str]) -> list[str]:
    """The grammar errors of a pod's ``nodetopo.io/`` annotations (empty: they all parse)."""
    errors = []
    for key, grammar in GRAMMAR.items():
        if key in annotations:
            value = str(annotations[key])
            if not (_PRINTABLE.fullmatch(value) and re.fullmatch(grammar.pattern, value)):
                errors.append(value_error(key, value, grammar.expected))
    unknown = sorted(k for k in annotations if k.startswith(PREFIX) and k not in GRAMMAR)
    if unknown:
        more = f" and {len(unknown) - 1} more" if len(unknown) > 1 else ""
        errors.append(f"unknown annotation {unknown[0]}{more}; known: {_KNOWN}")
    return errors


# --------------------------------------------------------------------------------------------
# nodetopo-topology
# --------------------------------------------------------------------------------------------


def _timestamp(text: Any) -> datetime.datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def _thresholds(summary: Mapping[str, Any]) -> Thresholds:
    spec = summary.get("spec") or {}
    default = Thresholds()
    return Thresholds(
        stale_after_s=int(spec.get("staleAfterSeconds", default.stale_after_s)),
        declare_topology_min_gpus=int(spec.get("declareTopologyMinGPUs", default.declare_topology_min_gpus)),
        rdma_resource_prefixes=tuple(spec.get("rdmaResourcePrefixes", default.rdma_resource_prefixes)),
        multi_pod_min_parallelism=int(spec.get("multiPodMinParallelism", default.multi_pod_min_parallelism)),
    )


def is_fresh(summary: Mapping[str, Any], created: datetime.datetime) -> bool:
    """True when the summary was computed less than ``staleAfterSeconds`` before ``created``."""
    computed = _timestamp((summary.get("status") or {}).get("computedAt"))
    if computed is None:
        return False
    return (created - computed).total_seconds() < _thresholds(summary).stale_after_s


def declaration_errors(group: PodGroup, ann: Mapping[str, str], summary: Mapping[str, Any]) -> list[str]:
    limits = _thresholds(summary)
    spec = _mapping(group.template.get("spec"))
    gpus = gpu_request(spec)
    errors = []
    declared = (
        str(ann.get(ONE_ISLAND, "")).lower() in ("true", "yes", "1")
        or str(ann.get(NUMA_ALIGNED, "")).lower() in ("true", "yes", "1")
        or TOPOLOGY in ann
    )
    if gpus >= limits.declare_topology_min_gpus and not declared:
        errors.append(
            f"pod requests {gpus} GPUs (at least {limits.declare_topology_min_gpus}) but declares no "
            f'topology: set {ONE_ISLAND} or {NUMA_ALIGNED} to "true", or {TOPOLOGY} to "any"'
        )
    if RDMA not in ann:
        for container in _containers(spec):
            resources = container.get("resources") or {}
            names = [
                name
                for kind in ("requests", "limits")
                for name in resources.get(kind) or {}
                if any(name.startswith(p) for p in limits.rdma_resource_prefixes)
            ]
            if names:
                errors.append(
                    f'container "{container.get("name")}" requests {min(names)} but the pod does not '
                    f"declare {RDMA}"
                )
                break
    if GPUS_PER_POD in ann and int(ann[GPUS_PER_POD]) != gpus:
        errors.append(f"{GPUS_PER_POD} says {ann[GPUS_PER_POD]} but the pod requests {gpus} {GPU_RESOURCE}")
    if group.pods >= limits.multi_pod_min_parallelism and gpus > 0:
        for key, example in ((GPUS_PER_POD, str(gpus)), (TOPOLOGY_SCOPE, f"{PREFIX}nvlink.domain")):
            if key not in ann:
                errors.append(
                    f"{group.runner} runs {group.pods} pods at once but its pod template does not "
                    f"declare {key} (e.g. {example})"
                )
    return errors


def feasibility_errors(
    group: PodGroup,
    annotations: Mapping[str, str],
    summary: Mapping[str, Any],
    *,
    gpus: int | None = None,
    noun: str = "pod",
) -> list[str]:
    """What no node in the summary can offer. Unknown facts (missing fields) skip their check.

    A pod whose ``nodeSelector`` names a ``nodetopo.io/gpu.model`` is judged against the nodes whose
    model labels as that value (``status.models``, a map keyed by the label value: one lookup)
    instead of the whole cluster. A gang (several pods at once that declare ``topology-scope``)
    needs all its GPUs at once: no more than those nodes have. ``gpus`` and ``noun``: a ResourceClaim's
    GPUs and "claim" (``nodetopo.admission.claims``), the same checks and messages.
    """
    status = summary.get("status") or {}
    spec = _mapping(group.template.get("spec"))
    gpus = gpu_request(spec) if gpus is None else gpus
    if gpus < 1:
        return []
    model = str((spec.get("nodeSelector") or {}).get(GPU_MODEL_LABEL, ""))
    total: Any = status.get("total")
    where = "in the cluster"
    if model:
        models = status.get("models")
        if not isinstance(models, Mapping):
            return []
        if model not in models:
            if status.get("modelsOmitted"):  # not every label is listed: absent is not "none"
                return []
            return [f"{noun} selects {GPU_MODEL_LABEL}={model} but no node in the cluster has that GPU model"]
        total, where = models[model], f"among {GPU_MODEL_LABEL}={model} nodes"
    if not isinstance(total, Mapping):
        return []
    ann = {k: str(v).lower() for k, v in annotations.items()}
    errors = []
    island = total.get("largestIsland")
    if ann.get(ONE_ISLAND) in ("true", "yes", "1") and gpus > 1 and isinstance(island, int) and gpus > island:
        has = f"the largest island {where} has {island}" if island else f"no node {where} has an island"
        errors.append(f"{noun} needs {gpus} GPUs in one NVLink island but {has}")
    numa = total.get("largestNUMAGroup")
    if ann.get(NUMA_ALIGNED) in ("true", "yes", "1") and isinstance(numa, int) and gpus > numa:
        errors.append(
            f"{noun} needs {gpus} GPUs on one NUMA node but the most on one NUMA node {where} is {numa}"
        )
    rdma = ann.get(RDMA) in ("required", "true")
    layer = {"infiniband": "InfiniBand", "ethernet": "Ethernet"}.get(ann.get(LINK_LAYER, ""))
    rdma_nodes = total.get("rdmaNodes")
    layers = total.get("rdmaLinkLayers")
    if rdma and rdma_nodes == 0:
        errors.append(f"{noun} requires RDMA but no node {where} has a usable RDMA NIC")
    elif (
        rdma
        and layer
        and isinstance(rdma_nodes, int)
        and isinstance(layers, list)
        and layer not in layers
        and UNKNOWN_LAYER not in layers  # an unknown layer may be the one asked for
    ):
        errors.append(
            f"{noun} requires RDMA over {layer} but the usable RDMA NICs {where} are {', '.join(layers)}"
        )
    if MAX_NIC_DISTANCE in ann:
        wanted = LinkClass[ann[MAX_NIC_DISTANCE].upper()]
        to_rdma = rdma or layer is not None
        field = "bestRDMANICDistance" if to_rdma else "bestNICDistance"
        kind = "an RDMA NIC" if to_rdma else "a NIC"
        best = str(total.get(field))
        if best == NO_NIC and not rdma:
            errors.append(f"{noun} needs {kind} at {wanted.name} or closer but no GPU {where} has {kind}")
        elif best in LinkClass.__members__ and wanted < LinkClass[best]:
            errors.append(
                f"{noun} needs {kind} at {wanted.name} or closer but the best GPU-to-"
                f"{'RDMA-NIC' if to_rdma else 'NIC'} class {where} is {best}"
            )
    whole = total.get("gpus")
    if group.pods > 1 and TOPOLOGY_SCOPE in ann and isinstance(whole, int) and group.pods * gpus > whole:
        errors.append(
            f"{group.runner} runs {group.pods} pods of {gpus} GPUs ({group.pods * gpus}) at once but "
            f"there are {whole} whole GPUs {where}"
        )
    return errors


# --------------------------------------------------------------------------------------------


def _prefixed(group: PodGroup, errors: list[str]) -> list[str]:
    return [f"{group.subject}: {e}" for e in errors] if group.subject else errors


def check(
    obj: Mapping[str, Any], summary: Mapping[str, Any] | None, *, now: datetime.datetime | None = None
) -> list[Denial]:
    """The denials the policies give ``obj`` on CREATE in an opted-in namespace (empty: admitted).

    ``summary`` None is a missing summary: the topology policy does not run (it fails open).
    ``now`` is the creation time the staleness check compares with (default: the object's
    ``creationTimestamp``, else the current time). Each pod group (``pod_groups``) is judged by the
    same rules; a workload's messages name the group they are about, in the groups' order.
    """
    grouped = workload_kind(obj) is not None
    groups = [(group, annotations_of(group, obj)) for group in pod_groups(obj)]
    errors = [e for group, ann in groups for e in _prefixed(group, annotation_errors(ann))]
    if errors:
        return [Denial(WORKLOAD_ANNOTATIONS_POLICY if grouped else ANNOTATIONS_POLICY, "; ".join(errors))]
    if summary is None:
        return []
    created = now or _timestamp((obj.get("metadata") or {}).get("creationTimestamp"))
    created = created or datetime.datetime.now(datetime.UTC)
    fresh = is_fresh(summary, created)
    for group, ann in groups:
        found = declaration_errors(group, ann, summary)
        if fresh:
            found += feasibility_errors(group, ann, summary)
        errors += _prefixed(group, found)
    policy = WORKLOAD_TOPOLOGY_POLICY if grouped else TOPOLOGY_POLICY
    return [Denial(policy, "; ".join(errors))] if errors else []


def describe(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    namespace = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{obj.get('kind')}/{namespace}{meta.get('name') or meta.get('generateName') or '?'}"
