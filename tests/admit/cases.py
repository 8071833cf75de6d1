# ruff: noqa: E501  (a table: one case per entry, messages kept whole so they can be grepped)
"""ONE table of admission cases, for ``nodetopo admit`` (tests/admit/test_admit.py) and for the real
API server running deploy/admission/ (tests/kube/test_admission.py). Both must give every case
exactly the ``expected`` denial (policy, message) or admit it (``expected`` None).

Summaries (``SUMMARIES``): NodeTopologySummary objects folded from real-machine fixture bundles:
``mixed`` — a DGX-1 V100 (1x8 NVLink, InfiniBand at PIX), a PCIe A100 node (2x2 NVLink bridges,
InfiniBand), an 8x RTX 4090 two-socket node (no NVLink, no NIC, 6 GPUs on one NUMA node) and a
GH200 (InfiniBand at NODE); ``gh200`` — the GH200 alone; ``pcie`` — the RTX 4090 node alone;
``unknown-layer`` — the GH200 with its NICs' link layers unreported (a ``topo -m``-only capture);
``poisoned`` — two DGX H100 nodes and one 8-GPU node without NVLink whose agent reports its model as
``!NVIDIA H100 80GB HBM3``, which labels as the H100's ``nodetopo.io/gpu.model`` value (issue 23: that
node's entry sorted first and stood for the label, refusing a valid 8-GPU pod); ``stale`` — ``mixed``
computed two hours ago; ``partial`` — a summary whose ``total`` lacks every
fact the feasibility checks read; ``empty`` — a summary with no status at all; ``missing`` — no
summary object; ``degraded`` — a DGX H100 whose GPU5 NVLinks and InfiniBand rails are published
degraded (issue 24: only healthy capacity counts).
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import functools
from typing import Any

from nodetopo.admission.rules import ANNOTATIONS_POLICY as ANN
from nodetopo.admission.rules import TOPOLOGY_POLICY as TOPO
from nodetopo.admission.rules import WORKLOAD_ANNOTATIONS_POLICY as WANN
from nodetopo.admission.rules import WORKLOAD_TOPOLOGY_POLICY as WTOPO

KNOWN = (
    "known: gpus-in-one-island, max-nic-distance, numa-aligned, rdma, link-layer, topology, "
    "topology-scope, gpus-per-pod, min-busbw"
)
NO_TOPOLOGY = (
    "pod requests {n} GPUs (at least 2) but declares no topology: set nodetopo.io/gpus-in-one-island "
    'or nodetopo.io/numa-aligned to "true", or nodetopo.io/topology to "any"'
)
ISLAND = {"nodetopo.io/gpus-in-one-island": "true"}
SCOPE = {"nodetopo.io/topology-scope": "nodetopo.io/nvlink.domain"}


@dataclasses.dataclass(frozen=True, slots=True)
class Case:
    id: str
    annotations: dict[str, str]
    expected: tuple[str, str] | None  #: (policy, message), or None: admitted
    gpus: int = 0  #: nvidia.com/gpu of the one container
    resources: dict[str, str] = dataclasses.field(default_factory=dict)  #: more limits of the container
    init_gpus: int | None = None
    #: more init containers after that one, in order: (GPUs, is a sidecar: restartPolicy Always)
    inits: tuple[tuple[int, bool], ...] = ()
    node_selector: dict[str, str] = dataclasses.field(default_factory=dict)
    job_parallelism: int | None = None  #: a batch/v1 Job with this parallelism instead of a Pod
    summary: str = "mixed"
    #: RayCluster / RayJob (the pod is worker group "gpu"'s template, ``replicas`` x ``hosts``, beside
    #: a CPU head) or JobSet (replicated job "workers", ``replicas`` x ``job_parallelism``)
    workload: str | None = None
    replicas: int = 1
    hosts: int | None = None  #: a worker group's numOfHosts

    @property
    def kind(self) -> str:
        return self.workload or ("Job" if self.job_parallelism is not None else "Pod")


def _case(id: str, annotations: dict[str, str], expected: tuple[str, str] | None, **kw: Any) -> Case:
    kw.setdefault("gpus", 1)
    return Case(id, annotations, expected, **kw)


def admit(id: str, annotations: dict[str, str] | None = None, **kw: Any) -> Case:
    """A case both policies admit. Every builder: one GPU unless ``gpus`` says otherwise; the
    ``mixed`` summary unless ``summary`` (or ``on``) says otherwise."""
    return _case(id, annotations or {}, None, **kw)


def deny_ann(id: str, annotations: dict[str, str], message: str, **kw: Any) -> Case:
    """A case nodetopo-annotations denies with ``message``."""
    return _case(id, annotations, (ANN, message), **kw)


def deny_topo(id: str, annotations: dict[str, str], message: str, **kw: Any) -> Case:
    """A case nodetopo-topology denies with ``message``."""
    return _case(id, annotations, (TOPO, message), **kw)


def workload(kind: str, case: Case, *, replicas: int = 1, **kw: Any) -> Case:
    """``case`` as the pod template of a RayCluster's or RayJob's worker group "gpu" or a JobSet's
    replicated job "workers" (``kind``), ``replicas`` of them: the same denial, on the workload
    policy, each message prefixed with the group."""
    expected = case.expected
    if expected is not None:
        subject = 'replicated job "workers"' if kind == "JobSet" else 'worker group "gpu"'
        policy = {ANN: WANN, TOPO: WTOPO}[expected[0]]
        expected = (policy, "; ".join(f"{subject}: {m}" for m in expected[1].split("; ")))
    return dataclasses.replace(
        case, id=f"{kind.lower()}-{case.id}", workload=kind, replicas=replicas, expected=expected, **kw
    )


def on(summary: str, *cases: Case) -> tuple[Case, ...]:
    """``cases`` judged against the summary named ``summary``."""
    return tuple(dataclasses.replace(case, summary=summary) for case in cases)


CASES: tuple[Case, ...] = (
    # ---- nodetopo-annotations: every nodetopo.io/ annotation parses ---------------------------
    admit("no-gpus-no-annotations", gpus=0),
    admit("one-gpu-plain"),
    admit(
        "all-annotations-valid",
        {
            **ISLAND,
            "nodetopo.io/max-nic-distance": "pxb",
            "nodetopo.io/numa-aligned": "False",
            "nodetopo.io/rdma": "Required",
            "nodetopo.io/link-layer": "infiniband",
            "nodetopo.io/topology": "ANY",
            "nodetopo.io/gpus-per-pod": "2",
            "nodetopo.io/min-busbw": "372.5",
            **SCOPE,
        },
        gpus=2,
    ),
    deny_ann(
        "space-around-flag",
        {"nodetopo.io/gpus-in-one-island": " true"},
        'nodetopo.io/gpus-in-one-island: expected true or false, got " true" (spaces are not allowed)',
        gpus=2,
    ),
    deny_ann(
        "space-inside-distance",
        {"nodetopo.io/max-nic-distance": "P IX"},
        'nodetopo.io/max-nic-distance: expected one of PIX|PXB|PHB|NODE|SYS, got "P IX" (spaces are not allowed)',
    ),
    deny_ann(
        "sign-plus",
        {"nodetopo.io/gpus-per-pod": "+8"},
        'nodetopo.io/gpus-per-pod: expected a whole number from 1 to 999, got "+8" (no sign allowed)',
        gpus=8,
    ),
    deny_ann(
        "sign-minus",
        {"nodetopo.io/gpus-per-pod": "-1"},
        'nodetopo.io/gpus-per-pod: expected a whole number from 1 to 999, got "-1" (no sign allowed)',
    ),
    deny_ann(
        "huge-number",
        {"nodetopo.io/gpus-per-pod": "99999999999999999999"},
        'nodetopo.io/gpus-per-pod: expected a whole number from 1 to 999, got "99999999999999999999"',
    ),
    deny_ann(
        "min-busbw-with-unit",
        {"nodetopo.io/min-busbw": "400GB/s"},
        'nodetopo.io/min-busbw: expected a positive number of GB/s (400, 372.5), got "400GB/s"',
    ),
    deny_ann(
        "min-busbw-zero",
        {"nodetopo.io/min-busbw": "0.0"},
        'nodetopo.io/min-busbw: expected a positive number of GB/s (400, 372.5), got "0.0"',
    ),
    deny_ann(
        "zero",
        {"nodetopo.io/gpus-per-pod": "0"},
        'nodetopo.io/gpus-per-pod: expected a whole number from 1 to 999, got "0"',
    ),
    deny_ann(
        "unicode-digit",
        {"nodetopo.io/gpus-per-pod": "\u0668"},  # ARABIC-INDIC DIGIT EIGHT: int() takes it
        "nodetopo.io/gpus-per-pod: expected a whole number from 1 to 999, "
        "got a value with characters outside printable ASCII",
        gpus=8,
    ),
    deny_ann(
        "unicode-lookalike",
        {"nodetopo.io/numa-aligned": "\uff54rue"},  # FULLWIDTH t
        "nodetopo.io/numa-aligned: expected true or false, got a value with characters outside printable ASCII",
        gpus=2,
    ),
    deny_ann(
        "unicode-case-fold",
        {"nodetopo.io/max-nic-distance": "\u017fys"},  # LATIN SMALL LONG S folds to s
        "nodetopo.io/max-nic-distance: expected one of PIX|PXB|PHB|NODE|SYS, "
        "got a value with characters outside printable ASCII",
    ),
    deny_ann(
        "long-value",
        {"nodetopo.io/link-layer": "InfiniBand" * 5},
        "nodetopo.io/link-layer: expected InfiniBand or Ethernet, got a value of 50 characters",
    ),
    deny_ann(
        "empty-value",
        {"nodetopo.io/rdma": ""},
        "nodetopo.io/rdma: expected required or optional, got an empty value",
    ),
    deny_ann(
        "bad-scope",
        {"nodetopo.io/topology-scope": "kubernetes.io/hostname"},
        "nodetopo.io/topology-scope: expected a node label key: nodetopo.io/nvlink.domain, nvlink.clique or "
        'fabric.tier-0 to fabric.tier-9, got "kubernetes.io/hostname"',
    ),
    deny_ann(
        "unknown-keys",
        {"nodetopo.io/gpus-in-one-islnd": "true", "nodetopo.io/zz": "1"},
        f"unknown annotation nodetopo.io/gpus-in-one-islnd and 1 more; {KNOWN}",
    ),
    deny_ann(
        "several-errors",
        {
            "nodetopo.io/rdma": "maybe",
            "nodetopo.io/gpus-in-one-island": "yes please",
            "nodetopo.io/typo": "x",
        },
        'nodetopo.io/gpus-in-one-island: expected true or false, got "yes please" (spaces are not allowed); '
        'nodetopo.io/rdma: expected required or optional, got "maybe"; '
        f"unknown annotation nodetopo.io/typo; {KNOWN}",
        gpus=16,
    ),
    deny_ann(
        "job-template-bad-annotation",
        {"nodetopo.io/numa-aligned": "sure"},
        'nodetopo.io/numa-aligned: expected true or false, got "sure"',
        job_parallelism=1,
    ),
    admit("other-prefixes-ignored", {"example.com/nodetopo.io": "x", "nodetopo.io": "x"}),
    # ---- nodetopo-topology: declaration where it matters -------------------------------------
    deny_topo("undeclared-multi-gpu", {}, NO_TOPOLOGY.format(n=4), gpus=4),
    deny_topo(
        "undeclared-false-is-not-a-declaration",
        {"nodetopo.io/numa-aligned": "false"},
        NO_TOPOLOGY.format(n=2),
        gpus=2,
    ),
    admit("topology-any", {"nodetopo.io/topology": "any"}, gpus=4),
    deny_topo("init-container-gpus-count", {}, NO_TOPOLOGY.format(n=3), init_gpus=3),
    # A sidecar keeps running beside the containers: 1 + 1 is a 2-GPU pod (was: counted 1, admitted).
    deny_topo("sidecar-gpus-add-to-the-containers", {}, NO_TOPOLOGY.format(n=2), inits=((1, True),)),
    # An ordinary init container after a sidecar runs beside it: 2 + 1 (was: counted 2).
    deny_topo(
        "init-after-a-sidecar-runs-beside-it", {}, NO_TOPOLOGY.format(n=3), inits=((1, True), (2, False))
    ),
    # ... and one before a sidecar runs alone: max(3, 1 + 1).
    deny_topo("init-before-a-sidecar-runs-alone", {}, NO_TOPOLOGY.format(n=3), inits=((3, False), (1, True))),
    admit("sidecar-without-gpus", {}, inits=((0, True),)),
    deny_topo(
        "rdma-device-undeclared",
        {},
        'container "main" requests rdma/hca_shared_devices_a but the pod does not declare nodetopo.io/rdma',
        resources={"rdma/hca_shared_devices_a": "1"},
    ),
    admit(
        "rdma-device-declared",
        {"nodetopo.io/rdma": "required"},
        resources={"rdma/hca_shared_devices_a": "1"},
    ),
    deny_topo(
        "gpus-per-pod-mismatch",
        {**ISLAND, "nodetopo.io/gpus-per-pod": "8"},
        "nodetopo.io/gpus-per-pod says 8 but the pod requests 4 nvidia.com/gpu",
        gpus=4,
    ),
    deny_topo(
        "job-gang-undeclared",
        ISLAND,
        "Job runs 4 pods at once but its pod template does not declare nodetopo.io/gpus-per-pod (e.g. 8); "
        "Job runs 4 pods at once but its pod template does not declare nodetopo.io/topology-scope "
        "(e.g. nodetopo.io/nvlink.domain)",
        gpus=8,
        job_parallelism=4,
    ),
    admit(
        "job-gang-declared", {**ISLAND, "nodetopo.io/gpus-per-pod": "8", **SCOPE}, gpus=8, job_parallelism=2
    ),
    admit("job-sequential", ISLAND, gpus=8, job_parallelism=1),
    admit("job-cpu-gang", gpus=0, job_parallelism=8),
    # ---- nodetopo-topology: the request can be met somewhere ---------------------------------
    admit("island-8-fits", ISLAND, gpus=8),
    deny_topo(
        "island-16-too-big",
        ISLAND,
        "pod needs 16 GPUs in one NVLink island but the largest island in the cluster has 8",
        gpus=16,
    ),
    deny_topo(
        "job-island-16-too-big",
        {**ISLAND, "nodetopo.io/gpus-per-pod": "16", **SCOPE},
        "pod needs 16 GPUs in one NVLink island but the largest island in the cluster has 8; "
        "Job runs 2 pods of 16 GPUs (32) at once but there are 22 whole GPUs in the cluster",
        gpus=16,
        job_parallelism=2,
    ),
    deny_topo(
        "island-8-plus-an-8-gpu-sidecar-too-big",
        ISLAND,
        "pod needs 16 GPUs in one NVLink island but the largest island in the cluster has 8",
        gpus=8,
        inits=((8, True),),
    ),
    deny_topo(
        "job-gang-more-gpus-than-the-cluster",
        {**ISLAND, "nodetopo.io/gpus-per-pod": "8", **SCOPE},
        "Job runs 4 pods of 8 GPUs (32) at once but there are 22 whole GPUs in the cluster",
        gpus=8,
        job_parallelism=4,
    ),
    admit("numa-6-fits", {"nodetopo.io/numa-aligned": "true"}, gpus=6),
    deny_topo(
        "numa-8-too-big",
        {"nodetopo.io/numa-aligned": "yes"},
        "pod needs 8 GPUs on one NUMA node but the most on one NUMA node in the cluster is 6",
        gpus=8,
    ),
    admit("rdma-infiniband", {"nodetopo.io/rdma": "required", "nodetopo.io/link-layer": "InfiniBand"}),
    deny_topo(
        "rdma-ethernet-absent",
        {"nodetopo.io/rdma": "required", "nodetopo.io/link-layer": "Ethernet"},
        "pod requires RDMA over Ethernet but the usable RDMA NICs in the cluster are InfiniBand",
    ),
    admit("nic-pix-fits", {"nodetopo.io/max-nic-distance": "PIX"}),
    admit(
        "no-gpus-no-feasibility",
        {**ISLAND, "nodetopo.io/rdma": "required", "nodetopo.io/link-layer": "Ethernet"},
        gpus=0,
    ),
    deny_topo(
        "two-problems",
        {
            **ISLAND,
            "nodetopo.io/numa-aligned": "true",
            "nodetopo.io/rdma": "required",
            "nodetopo.io/link-layer": "ethernet",
        },
        "pod needs 16 GPUs in one NVLink island but the largest island in the cluster has 8; "
        "pod needs 16 GPUs on one NUMA node but the most on one NUMA node in the cluster is 6; "
        "pod requires RDMA over Ethernet but the usable RDMA NICs in the cluster are InfiniBand",
        gpus=16,
    ),
    *on(
        "gh200",
        deny_topo(
            "gh200-nic-pix",
            {"nodetopo.io/max-nic-distance": "pix"},
            "pod needs a NIC at PIX or closer but the best GPU-to-NIC class in the cluster is NODE",
        ),
        deny_topo(
            "gh200-rdma-nic-phb",
            {"nodetopo.io/rdma": "required", "nodetopo.io/max-nic-distance": "PHB"},
            "pod needs an RDMA NIC at PHB or closer but the best GPU-to-RDMA-NIC class in the cluster is NODE",
        ),
        admit("gh200-nic-node", {"nodetopo.io/max-nic-distance": "NODE", "nodetopo.io/rdma": "required"}),
    ),
    *on(
        "pcie",
        deny_topo(
            "pcie-rdma-absent",
            {"nodetopo.io/rdma": "required"},
            "pod requires RDMA but no node in the cluster has a usable RDMA NIC",
        ),
        deny_topo(
            "pcie-no-island",
            ISLAND,
            "pod needs 2 GPUs in one NVLink island but no node in the cluster has an island",
            gpus=2,
        ),
        deny_topo(
            "pcie-no-nic",
            {"nodetopo.io/max-nic-distance": "SYS"},
            "pod needs a NIC at SYS or closer but no GPU in the cluster has a NIC",
        ),
        admit("pcie-numa-6-fits", {"nodetopo.io/numa-aligned": "true"}, gpus=6),
    ),
    # ---- only healthy capacity counts (issue 24): a DGX H100 whose GPU5 NVLinks and InfiniBand rails
    # are published degraded offers an island of 7 and RDMA over its two Ethernet NICs only --------
    *on(
        "degraded",
        deny_topo(
            "degraded-island-8",
            ISLAND,
            "pod needs 8 GPUs in one NVLink island but the largest island in the cluster has 7",
            gpus=8,
        ),
        admit("degraded-island-7-fits", ISLAND, gpus=7),
        deny_topo(
            "degraded-rdma-infiniband",
            {"nodetopo.io/rdma": "required", "nodetopo.io/link-layer": "InfiniBand"},
            "pod requires RDMA over InfiniBand but the usable RDMA NICs in the cluster are Ethernet",
        ),
        admit(
            "degraded-rdma-ethernet-fits",
            {"nodetopo.io/rdma": "required", "nodetopo.io/link-layer": "Ethernet"},
        ),
        deny_topo(
            "degraded-rdma-pix",
            {"nodetopo.io/rdma": "required", "nodetopo.io/max-nic-distance": "PIX"},
            "pod needs an RDMA NIC at PIX or closer but the best GPU-to-RDMA-NIC class in the cluster is NODE",
        ),
    ),
    *on(
        "unknown-layer",
        admit(
            "unknown-layer-may-be-ethernet",
            {"nodetopo.io/rdma": "required", "nodetopo.io/link-layer": "Ethernet"},
        ),
        deny_topo(
            "unknown-layer-rdma",
            {"nodetopo.io/rdma": "required", "nodetopo.io/max-nic-distance": "PIX"},
            "pod needs an RDMA NIC at PIX or closer but the best GPU-to-RDMA-NIC class in the cluster is NODE",
        ),
    ),
    # ---- a pod that selects a GPU model is judged against that model's nodes
    admit(
        "model-v100-island-8", ISLAND, gpus=8, node_selector={"nodetopo.io/gpu.model": "Tesla-V100-SXM2-32GB"}
    ),
    deny_topo(
        "model-a100-pcie-island-8",
        ISLAND,
        "pod needs 8 GPUs in one NVLink island but the largest island among "
        "nodetopo.io/gpu.model=NVIDIA-A100-PCIE-40GB nodes has 2",
        gpus=8,
        node_selector={"nodetopo.io/gpu.model": "NVIDIA-A100-PCIE-40GB"},
    ),
    deny_topo(
        "model-4090-rdma",
        {"nodetopo.io/rdma": "required"},
        "pod requires RDMA but no node among nodetopo.io/gpu.model=NVIDIA-GeForce-RTX-4090 nodes "
        "has a usable RDMA NIC",
        node_selector={"nodetopo.io/gpu.model": "NVIDIA-GeForce-RTX-4090"},
    ),
    deny_topo(
        "model-absent",
        {},
        "pod selects nodetopo.io/gpu.model=NVIDIA-H100-80GB-HBM3 but no node in the "
        "cluster has that GPU model",
        node_selector={"nodetopo.io/gpu.model": "NVIDIA-H100-80GB-HBM3"},
    ),
    admit("model-other-selectors-ignored", ISLAND, gpus=8, node_selector={"kubernetes.io/arch": "amd64"}),
    # ---- one node's model text labels like another's: the label's nodes are judged together
    *on(
        "poisoned",
        admit(
            "poisoned-label-island-8",
            ISLAND,
            gpus=8,
            node_selector={"nodetopo.io/gpu.model": "NVIDIA-H100-80GB-HBM3"},
        ),
        deny_topo(
            "poisoned-label-island-16",
            ISLAND,
            "pod needs 16 GPUs in one NVLink island but the largest island among "
            "nodetopo.io/gpu.model=NVIDIA-H100-80GB-HBM3 nodes has 8",
            gpus=16,
            node_selector={"nodetopo.io/gpu.model": "NVIDIA-H100-80GB-HBM3"},
        ),
        admit(
            "poisoned-label-numa-8",
            {"nodetopo.io/numa-aligned": "true"},
            gpus=6,
            node_selector={"nodetopo.io/gpu.model": "NVIDIA-H100-80GB-HBM3"},
        ),
    ),
    # ---- a summary that is stale, partial, empty or missing ----------------------------------
    *on(
        "stale",
        admit("stale-island-16-admitted", ISLAND, gpus=16),
        deny_topo("stale-declaration-still-applies", {}, NO_TOPOLOGY.format(n=4), gpus=4),
    ),
    *on(
        "partial",
        admit(
            "partial-island-16-admitted",
            {**ISLAND, "nodetopo.io/rdma": "required", "nodetopo.io/max-nic-distance": "PIX"},
            gpus=16,
        ),
        deny_topo("partial-declaration-applies", {}, NO_TOPOLOGY.format(n=4), gpus=4),
        deny_ann(
            "partial-annotations-apply",
            {"nodetopo.io/rdma": "yes"},
            'nodetopo.io/rdma: expected required or optional, got "yes"',
        ),
    ),
    admit("empty-island-16-admitted", ISLAND, gpus=16, summary="empty"),
    admit(
        "partial-model-selector-admitted",
        ISLAND,
        gpus=16,
        summary="partial",
        node_selector={"nodetopo.io/gpu.model": "NVIDIA-H100-80GB-HBM3"},
    ),
    # ---- RayCluster / RayJob worker groups and JobSet replicated jobs: each group as a pod template
    # with a count, at kubectl apply of the workload (nodetopo-workload-*) ----------------------
    *(
        workload(kind, case, replicas=replicas)
        for kind in ("RayCluster", "RayJob", "JobSet")
        for case, replicas in (
            (admit("gang-fits", {**ISLAND, "nodetopo.io/gpus-per-pod": "8", **SCOPE}, gpus=8), 2),
            (admit("cpu-workers", gpus=0), 8),
            (
                deny_topo(
                    "island-8-plus-an-8-gpu-sidecar-too-big",
                    ISLAND,
                    "pod needs 16 GPUs in one NVLink island but the largest island in the cluster has 8",
                    gpus=8,
                    inits=((8, True),),
                ),
                1,
            ),
            (
                deny_topo(
                    "island-16-too-big",
                    ISLAND,
                    "pod needs 16 GPUs in one NVLink island but the largest island in the cluster has 8",
                    gpus=16,
                ),
                1,
            ),
            (
                deny_topo(
                    "rdma-device-undeclared",
                    {},
                    'container "main" requests rdma/hca_shared_devices_a but the pod does not declare '
                    "nodetopo.io/rdma",
                    resources={"rdma/hca_shared_devices_a": "1"},
                ),
                1,
            ),
            (
                deny_topo(
                    "gang-more-gpus-than-the-cluster",
                    {**ISLAND, "nodetopo.io/gpus-per-pod": "8", **SCOPE},
                    "the group runs 4 pods of 8 GPUs (32) at once but there are 22 whole GPUs in the cluster",
                    gpus=8,
                ),
                4,
            ),
            (
                deny_topo(
                    "gang-undeclared",
                    ISLAND,
                    "the group runs 3 pods at once but its pod template does not declare "
                    "nodetopo.io/gpus-per-pod (e.g. 2); the group runs 3 pods at once but its pod template "
                    "does not declare nodetopo.io/topology-scope (e.g. nodetopo.io/nvlink.domain)",
                    gpus=2,
                ),
                3,
            ),
            (
                deny_ann(
                    "bad-annotation",
                    {"nodetopo.io/topology": "none"},
                    'nodetopo.io/topology: expected any, got "none"',
                ),
                1,
            ),
        )
    ),
    workload(  # numOfHosts: 2 replicas of 2 hosts are 4 pods
        "RayCluster",
        deny_topo(
            "hosts-gang-more-gpus-than-the-cluster",
            {**ISLAND, "nodetopo.io/gpus-per-pod": "8", **SCOPE},
            "the group runs 4 pods of 8 GPUs (32) at once but there are 22 whole GPUs in the cluster",
            gpus=8,
        ),
        replicas=2,
        hosts=2,
    ),
    workload(  # a JobSet's replicated job: replicas x the Job's parallelism
        "JobSet",
        deny_topo(
            "parallel-gang-more-gpus-than-the-cluster",
            {**ISLAND, "nodetopo.io/gpus-per-pod": "8", **SCOPE},
            "the group runs 4 pods of 8 GPUs (32) at once but there are 22 whole GPUs in the cluster",
            gpus=8,
            job_parallelism=2,
        ),
        replicas=2,
    ),
    workload(  # a worker group that selects a GPU model: judged against that model's nodes
        "RayCluster",
        deny_topo(
            "gang-more-gpus-than-the-model",
            {**ISLAND, "nodetopo.io/gpus-per-pod": "8", **SCOPE},
            "the group runs 2 pods of 8 GPUs (16) at once but there are 8 whole GPUs among "
            "nodetopo.io/gpu.model=Tesla-V100-SXM2-32GB nodes",
            gpus=8,
            node_selector={"nodetopo.io/gpu.model": "Tesla-V100-SXM2-32GB"},
        ),
        replicas=2,
    ),
    *on(
        "stale",
        workload(
            "RayJob",
            admit("stale-gang-admitted", {**ISLAND, "nodetopo.io/gpus-per-pod": "8", **SCOPE}, gpus=8),
            replicas=4,
        ),
    ),
    *on(
        "missing",
        admit("missing-island-16-admitted", ISLAND, gpus=16),
        admit("missing-undeclared-admitted", gpus=4),
        deny_ann(
            "missing-annotations-apply",
            {"nodetopo.io/topology": "none"},
            'nodetopo.io/topology: expected any, got "none"',
        ),
    ),
)

MIXED = ("dgx1-v100", "pcie-4x-nvbridge", "pcie-8x-2socket", "gh200-nvl")
SUMMARY_NAMES = (
    "mixed",
    "gh200",
    "pcie",
    "unknown-layer",
    "poisoned",
    "stale",
    "partial",
    "empty",
    "missing",
    "degraded",
)


#: Workloads as people write them (numbers unquoted where the CRDs allow it, several worker groups, a
#: CPU head, a RayJob attached to an existing cluster), for ``nodetopo admit`` and the API server.
USER_WORKLOADS = """\
apiVersion: ray.io/v1
kind: RayCluster
metadata: {name: train, namespace: team}
spec:
  headGroupSpec:
    rayStartParams: {}
    template:
      spec:
        containers: [{name: ray-head, image: rayproject/ray:2.52.0}]
  workerGroupSpecs:
    - groupName: small
      replicas: 2
      rayStartParams: {}
      template:
        metadata:
          annotations:
            nodetopo.io/gpus-in-one-island: "true"
            nodetopo.io/gpus-per-pod: "4"
            nodetopo.io/topology-scope: nodetopo.io/fabric.tier-0
        spec:
          containers:
            - name: ray-worker
              image: rayproject/ray:2.52.0
              resources: {limits: {nvidia.com/gpu: 4}}
    - groupName: rdma
      replicas: 1
      rayStartParams: {}
      template:
        spec:
          containers:
            - name: ray-worker
              image: rayproject/ray:2.52.0
              resources: {limits: {nvidia.com/gpu: 1, rdma/hca_shared_devices_a: 1}}
    - groupName: big
      replicas: 3
      numOfHosts: 2
      rayStartParams: {}
      template:
        metadata:
          annotations:
            nodetopo.io/gpus-in-one-island: "true"
            nodetopo.io/gpus-per-pod: "8"
            nodetopo.io/topology-scope: nodetopo.io/nvlink.domain
        spec:
          containers:
            - name: ray-worker
              image: rayproject/ray:2.52.0
              resources: {limits: {nvidia.com/gpu: 8}}
---
apiVersion: ray.io/v1
kind: RayJob
metadata: {name: attach, namespace: team}
spec:
  entrypoint: python train.py
  clusterSelector: {ray.io/cluster: train}
---
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {name: sweep, namespace: team}
spec:
  replicatedJobs:
    - name: workers
      replicas: 2
      template:
        spec:
          parallelism: 2
          completions: 2
          template:
            metadata:
              annotations: {nodetopo.io/numa-aligned: " true"}
            spec:
              restartPolicy: Never
              containers:
                - {name: main, image: registry.invalid/train:1, resources: {limits: {nvidia.com/gpu: 2}}}
"""


def manifest(case: Case, name: str, namespace: str) -> dict[str, Any]:
    """The Pod, Job, RayCluster, RayJob or JobSet of ``case``."""
    limits = dict(case.resources)
    if case.gpus:
        limits["nvidia.com/gpu"] = str(case.gpus)
    container: dict[str, Any] = {"name": "main", "image": "registry.invalid/train:1"}
    if limits:
        container["resources"] = {"limits": limits}
    spec: dict[str, Any] = {"containers": [container], "restartPolicy": "Never"}
    if case.node_selector:
        spec["nodeSelector"] = dict(case.node_selector)
    inits = [] if case.init_gpus is None else [(case.init_gpus, False)]
    for i, (gpus, sidecar) in enumerate([*inits, *case.inits]):
        init: dict[str, Any] = {
            "name": f"init-{i}",
            "image": "registry.invalid/init:1",
            "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
        }
        if sidecar:
            init["restartPolicy"] = "Always"
        spec.setdefault("initContainers", []).append(init)
    meta: dict[str, Any] = {"annotations": dict(case.annotations)} if case.annotations else {}
    if case.workload is not None:
        return _workload(case, name, namespace, {"metadata": meta, "spec": spec})
    if case.job_parallelism is None:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, **meta},
            "spec": spec,
        }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "parallelism": case.job_parallelism,
            "completions": case.job_parallelism,
            "template": {"metadata": meta, "spec": spec},
        },
    }


def _workload(case: Case, name: str, namespace: str, template: dict[str, Any]) -> dict[str, Any]:
    meta = {"name": name, "namespace": namespace}
    if case.workload == "JobSet":
        parallelism = case.job_parallelism or 1
        job = {"parallelism": parallelism, "completions": parallelism, "template": template}
        return {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": meta,
            "spec": {
                "replicatedJobs": [{"name": "workers", "replicas": case.replicas, "template": {"spec": job}}]
            },
        }
    template["spec"]["restartPolicy"] = "Always"  # KubeRay's pods restart; the rules do not read it
    head = {"containers": [{"name": "ray-head", "image": "registry.invalid/ray:1"}]}
    worker: dict[str, Any] = {
        "groupName": "gpu",
        "replicas": case.replicas,
        "minReplicas": 0,
        "maxReplicas": case.replicas,
        "rayStartParams": {},
        "template": template,
    }
    if case.hosts is not None:
        worker["numOfHosts"] = case.hosts
    cluster = {
        "headGroupSpec": {"rayStartParams": {}, "template": {"spec": head}},
        "workerGroupSpecs": [worker],
    }
    if case.workload == "RayCluster":
        return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": meta, "spec": cluster}
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": meta,
        "spec": {"entrypoint": "python -c 'print(1)'", "rayClusterSpec": cluster},
    }


def topology_of(bundle: str, node_name: str | None = None) -> dict[str, Any]:
    """The NodeTopology object of a fixture bundle (``helpers.nodetopology_of``)."""
    from helpers import nodetopology_of

    return nodetopology_of(bundle, node_name)


@functools.cache
def _mixed_objects() -> tuple[dict[str, Any], ...]:
    return tuple(topology_of(bundle) for bundle in MIXED)


@functools.cache
def _degraded_objects() -> tuple[dict[str, Any], ...]:
    """A DGX H100 whose GPU5 NVLinks (12 of 18 active) and eight InfiniBand rails are published degraded."""
    from helpers import nodetopology_with_degraded, rail_down

    from nodetopo.model import EdgeHealth, EdgeKind, LinkState

    nvlink = EdgeHealth(
        edge="GPU5/nvlink",
        kind=EdgeKind.NVLINK,
        device="GPU5",
        gpu=5,
        peer="NVSwitch",
        reasons=("NVLinkDown",),
        message="12 of 18 NVLinks active (its peers have 18)",
        observed=LinkState(links=12),
        capability=LinkState(links=18),
    )
    degraded = (nvlink, *(rail_down(f"mlx5_{i}") for i in range(8)))
    return (nodetopology_with_degraded("dgx-h100", degraded, "h100-degraded"),)


@functools.cache
def _poisoned_objects() -> tuple[dict[str, Any], ...]:
    """Two honest H100 nodes and an 8-GPU node without NVLink reporting ``!NVIDIA H100 80GB HBM3``."""
    hostile = copy.deepcopy(topology_of("pcie-8x-2socket", "hostile"))
    for gpu in hostile["status"]["gpus"]:
        gpu["model"] = "!NVIDIA H100 80GB HBM3"
    hostile["status"]["summary"]["gpuModel"] = "!NVIDIA H100 80GB HBM3"
    return (topology_of("dgx-h100", "h100-a"), topology_of("dgx-h100", "h100-b"), hostile)


def summary(kind: str, now: datetime.datetime) -> dict[str, Any] | None:
    """The NodeTopologySummary object of a case's ``summary`` at time ``now`` (None: missing)."""
    from nodetopo.admission.summary import summarize_objects

    stamp = (now - datetime.timedelta(hours=2) if kind == "stale" else now).strftime("%Y-%m-%dT%H:%M:%SZ")
    objects = {
        "mixed": MIXED,
        "stale": MIXED,
        "partial": MIXED,
        "empty": MIXED,
        "gh200": ("gh200-nvl",),
        "pcie": ("pcie-8x-2socket",),
        "unknown-layer": ("gh200-nvl",),
    }
    if kind == "missing":
        return None
    if kind == "poisoned":
        return summarize_objects(_poisoned_objects(), computed_at=stamp)
    if kind == "degraded":
        return summarize_objects(_degraded_objects(), computed_at=stamp)
    chosen = [o for o in _mixed_objects() if o["metadata"]["name"] in objects[kind]]
    if kind == "unknown-layer":  # the GH200 as a topo -m-only capture would show it: no link layers
        chosen = copy.deepcopy(chosen)
        for nic in chosen[0]["status"]["nics"]:
            nic.pop("linkLayer", None)
    body = summarize_objects(chosen, computed_at=stamp)
    if kind == "partial":
        body["status"]["total"] = {"nodes": body["status"]["total"]["nodes"]}
        del body["status"]["models"]
    if kind == "empty":
        del body["status"]
    return body
