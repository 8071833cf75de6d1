"""The calibration points: published measurements with the machine each ran on.

Each point names its source (the corpus log, or the public thread / file that states the figure), the
machine facts it was published with, and the figure. ``tests/expect/test_calibration.py`` holds every
point inside the model's band (and checks each corpus log still parses to its figure);
``scripts/calibration_table.py`` prints the table ``docs/bandwidth-model.md`` carries.
``tests/fixtures/perf/SOURCES.md`` lists the same sources in prose.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from nodetopo.expect import Placement
from nodetopo.model import LinkClass, Topology
from tests.expect.machines import gb300_tray, hgx, machine


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Point:
    name: str
    machine: str  #: the facts the source states (and which the builder encodes)
    placements: Callable[[], list[Placement]]
    busbw: float  #: GB/s, the published figure
    source: str
    collective: str = "all_reduce"
    nccl_algo: str | None = None  #: as the source states it; None: not stated (NCCL's choice)
    kind: str = "figure"  #: ``log`` (a corpus file), ``figure`` (a stated measurement), ``floor``, ``copy``
    log: str | None = None  #: corpus file under real/perf/
    copy: tuple[int, int] | None = None  #: ``copy``: the GPU pair


def _nodes(topology: Topology, count: int, prefix: str = "n") -> list[Placement]:
    return [Placement(node=f"{prefix}{i}", topology=topology) for i in range(count)]


def _gb300(hosts: int, per_rack: int = 16) -> list[Placement]:
    return [Placement(node=f"h{i}", topology=gb300_tray(f"oci-gb300.{i // per_rack}")) for i in range(hosts)]


H100 = "NVIDIA H100 80GB HBM3"
OCI_COMMIT = "2631bee55a3a373b013bd62a0e56ce70d921ff3e"
OCI = f"oracle-quickstart/oci-gpu-quickstarts@{OCI_COMMIT} nvidia/GB300/README-GB300.md"
NEBIUS = "skypilot-org/skypilot@179881e1cfc2418c3947a77611256c04a10f51db examples/nebius_infiniband/README.md"

POINTS: tuple[Point, ...] = (
    Point(
        name="GB300 NVL72, 1 host, 4 GPUs",
        machine="OCI BM.GPU.GB300.4: 4× GB300 (18 NVLink5 into the rack's NVSwitch), 8 × 400 Gb/s RoCE",
        placements=lambda: _gb300(1),
        busbw=685.27,
        source=OCI,
        kind="log",
        log="oci-gb300-nvl72-1host-4gpu.txt",
    ),
    Point(
        name="GB300 NVL72, 2 hosts in one rack, 8 GPUs",
        machine="2 of the trays above in one NVLink domain",
        placements=lambda: _gb300(2),
        busbw=842.11,
        source=OCI,
        kind="log",
        log="oci-gb300-nvl72-2hosts-1rack-8gpu.txt",
    ),
    Point(
        name="GB300 NVL72, 16 hosts in one rack, 64 GPUs",
        machine="16 trays, one NVLink domain",
        placements=lambda: _gb300(16),
        busbw=930.60,
        source=OCI,
        kind="log",
        log="oci-gb300-nvl72-16hosts-1rack-64gpu.txt",
    ),
    Point(
        name="GB300 NVL72, 32 hosts in two racks, 128 GPUs",
        machine="2 racks of 16 trays: two NVLink domains joined by the 8 × 400 Gb/s RoCE NICs of each host",
        placements=lambda: _gb300(32),
        busbw=739.99,
        source=OCI,
        kind="log",
        log="oci-gb300-nvl72-32hosts-2racks-128gpu.txt",
    ),
    Point(
        name="2 × 8 H100, InfiniBand, Kubernetes pods",
        machine="Nebius: 2 nodes × 8 H100 SXM on NVSwitch, 8 × 400 Gb/s NDR HCAs per node (one PIX to each "
        "GPU, "
        "the HGX layout: assumed, the page does not print the topology)",
        placements=lambda: _nodes(hgx(H100), 2),
        busbw=467.28,
        source=NEBIUS + ' (run "Kubernetes")',
        kind="log",
        log="nebius-h100-2x8-ib-k8s-tail.txt",
    ),
    Point(
        name="2 × 8 H100, InfiniBand, VMs",
        machine="the same nodes as VMs",
        placements=lambda: _nodes(hgx(H100), 2),
        busbw=467.79,
        source=NEBIUS + ' (run "VMs")',
        kind="log",
        log="nebius-h100-2x8-ib-vm-tail-nowrongcol.txt",
    ),
    Point(
        name="8 × H100, NVLS",
        machine="8 × H100 SXM, NVSwitch (NV18)",
        placements=lambda: _nodes(hgx(H100), 1),
        busbw=480,
        nccl_algo="NVLS",
        source="NVIDIA/nccl-tests#212 (maintainer); NVIDIA/nccl#2140",
    ),
    Point(
        name="8 × H100, NVLS off",
        machine="8 × H100 SXM, NVSwitch (NV18)",
        placements=lambda: _nodes(hgx(H100), 1),
        busbw=370,
        nccl_algo="^NVLS",
        source="NVIDIA/nccl-tests#212 (maintainer); NVIDIA/nccl#2140",
    ),
    Point(
        name="8 × H100 (HGX), NVLS disabled",
        machine="8 × H100 SXM, NVSwitch, 8 GPU-NIC pairs",
        placements=lambda: _nodes(hgx(H100), 1),
        busbw=368.76,
        nccl_algo="^NVLS",
        source="NVIDIA/nccl-tests#309",
    ),
    Point(
        name="8 × H200",
        machine="8 × H200 SXM, NVSwitch (NVLink4); NCCL 2.20.3, sweep to 4 GiB",
        placements=lambda: _nodes(hgx("NVIDIA H200"), 1),
        busbw=475,
        source="NVIDIA/nccl-tests#272",
    ),
    Point(
        name="8 × H800 (restricted NVLink)",
        machine="8 × H800 SXM, NVSwitch with 8 NVLinks per GPU (NV8: 400 GB/s both directions)",
        placements=lambda: _nodes(hgx("NVIDIA H800", links=8), 1),
        busbw=215,
        source="NVIDIA/nccl#1374",
    ),
    Point(
        name="8 × B300, NVLS off",
        machine="8 × B300 SXM, NVSwitch (18 NVLink5)",
        placements=lambda: _nodes(hgx("NVIDIA B300 SXM6 AC"), 1),
        busbw=695,
        nccl_algo="^NVLS",
        source="NVIDIA/nccl#2140",
    ),
    Point(
        name="8 × B300, NVLS",
        machine="8 × B300 SXM, NVSwitch (18 NVLink5)",
        placements=lambda: _nodes(hgx("NVIDIA B300 SXM6 AC"), 1),
        busbw=845,
        nccl_algo="NVLS",
        source="NVIDIA/nccl#2140",
    ),
    Point(
        name="8 × A100",
        machine="8 × A100 SXM4, NVSwitch (NV12)",
        placements=lambda: _nodes(hgx("NVIDIA A100-SXM4-80GB", links=12, nics=4, rate=200), 1),
        busbw=230,
        source="NVIDIA/nccl-tests#149 (maintainer: ~230 GB/s at 8 GiB)",
    ),
    Point(
        name="8 × A100, one node",
        machine="8 × A100 SXM4, NVSwitch; sweep to 4 GiB",
        placements=lambda: _nodes(hgx("NVIDIA A100-SXM4-80GB", links=12, nics=4, rate=200), 1),
        busbw=232.54,
        source="NVIDIA/nccl-tests#175",
    ),
    Point(
        name="2 × 8 A100, 4 × 200 Gb/s InfiniBand",
        machine="2 nodes × 8 A100 SXM4 (NV12), 4 × 200 Gb/s HDR per node, each PIX to 2 GPUs",
        placements=lambda: _nodes(hgx("NVIDIA A100-SXM4-80GB", links=12, nics=4, rate=200), 2),
        busbw=86,
        source="NVIDIA/nccl-tests#175",
    ),
    Point(
        name="8 × A800 (restricted NVLink)",
        machine="8 × A800 SXM4, NVSwitch with 8 NVLinks per GPU (NV8)",
        placements=lambda: _nodes(hgx("NVIDIA A800-SXM4-80GB", links=8, nics=1, rate=200, gpus_per_nic=1), 1),
        busbw=160,
        source="NVIDIA/nccl#412 (maintainer: ~160 GB/s intra-node at 8 GiB)",
    ),
    Point(
        name="12 × 8 A800, one 200 Gb/s HDR NIC per node, GPUDirect RDMA",
        machine="8 × A800 (NV8) per node, one HDR NIC on a PCIe switch with a GPU (PIX)",
        placements=lambda: _nodes(
            hgx("NVIDIA A800-SXM4-80GB", links=8, nics=1, rate=200, gpus_per_nic=1), 12
        ),
        busbw=24,
        source="NVIDIA/nccl#412 (maintainer: ~24 GB/s inter-node at 8 GiB)",
    ),
    Point(
        name="12 × 8 A800, the NIC on the CPU (no GPUDirect RDMA)",
        machine="as above, the NIC attached to the CPU (NODE to the GPUs of its socket, SYS to the others)",
        placements=lambda: _nodes(
            hgx("NVIDIA A800-SXM4-80GB", links=8, nics=1, rate=200, gpus_per_nic=1, nic_class=LinkClass.NODE),
            12,
        ),
        busbw=16,
        source="NVIDIA/nccl#412 (maintainer: 'If the NIC is attached to the CPU getting 16 GB/s is normal')",
    ),
    Point(
        name="2 × 8 H100, 8 × 400 Gb/s RoCE, NVLS",
        machine="2 nodes × 8 H100 SXM (NV18), 8 × 400 Gb/s RoCE per node; NCCL 2.19.3, 4-8 GiB",
        placements=lambda: _nodes(hgx(H100, link_layer="Ethernet"), 2),
        busbw=430,
        nccl_algo="NVLSTree",
        source="NVIDIA/nccl#1221",
    ),
    Point(
        name="2 × 8 H100, 8 × 400 Gb/s RoCE, NVLS off",
        machine="as above, NCCL_NVLS_ENABLE=0",
        placements=lambda: _nodes(hgx(H100, link_layer="Ethernet"), 2),
        busbw=330,
        nccl_algo="^NVLS,NVLSTree",
        source="NVIDIA/nccl#1221",
    ),
    Point(
        name="4 × 8 H100, 8 × 400 Gb/s RoCE",
        machine="4 nodes of the above",
        placements=lambda: _nodes(hgx(H100, link_layer="Ethernet"), 4),
        busbw=320,
        source="NVIDIA/nccl#1221",
    ),
    Point(
        name="2 × 8 H800, 8 × 100 Gb/s",
        machine="2 nodes × 8 H800 (NV8), 8 × 100 Gb/s ConnectX-6 per node; NCCL 2.18 with NVLS",
        placements=lambda: _nodes(hgx("NVIDIA H800", links=8, rate=100), 2),
        busbw=161,
        source="NVIDIA/nccl-tests#153",
    ),
    Point(
        name="ND H100 v5 health-check floor",
        machine="Azure ND H100 v5: 8 × H100 SXM, NVSwitch, 8 × 400 Gb/s NDR",
        placements=lambda: _nodes(hgx(H100), 1),
        busbw=460,
        kind="floor",
        source="Azure/azurehpc-health-checks conf/nd96isr_h100_v5.conf: check_nccl_allreduce 460.0 1 16G",
    ),
    Point(
        name="ND H200 v5 health-check floor",
        machine="Azure ND H200 v5: 8 × H200 SXM, NVSwitch",
        placements=lambda: _nodes(hgx("NVIDIA H200"), 1),
        busbw=431,
        kind="floor",
        source="Azure/azurehpc-health-checks conf/nd96isr_h200_v5.conf: check_nccl_allreduce 431.0 1 16G",
    ),
    Point(
        name="ND A100 v4 health-check floor",
        machine="Azure ND A100 v4: 8 × A100 SXM4 40GB, NVSwitch, 8 × 200 Gb/s HDR",
        placements=lambda: _nodes(hgx("NVIDIA A100-SXM4-40GB", links=12, rate=200), 1),
        busbw=228,
        kind="floor",
        source="Azure/azurehpc-health-checks conf/nd96asr_v4.conf: check_nccl_allreduce 228",
    ),
    Point(
        name="GB200, GPU to GPU copy",
        machine="Azure ND GB200 v6: 4 × GB200 per host in an NVL72 domain (18 NVLink5)",
        placements=lambda: [
            Placement(node="g0", topology=machine("NVIDIA GB200", 4, links=18, numa=2, clique="gb200.0"))
        ],
        busbw=770,
        kind="copy",
        copy=(0, 1),
        source="Azure/AI-benchmarking-guide#7 ('nvbandwidth's p2p is about 770GB/s')",
    ),
)
