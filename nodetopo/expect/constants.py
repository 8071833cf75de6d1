"""Every number the bandwidth model uses, with where it comes from.

Two kinds:

* **Link rates** (capacities): what a link carries per direction by its specification. They build the
  capacity graph; the flow computation finds the binding cut from them alone.
* **Efficiencies** (the band): what fraction of a cut's capacity a collective reaches at large sizes,
  per algorithm and link class. These are calibrated: each band lists the published measurements it
  was set from (``docs/bandwidth-model.md`` has the table, ``scripts/calibration_table.py`` makes it).

GB/s is 10^9 bytes per second throughout, per direction, as nccl-tests reports bus bandwidth.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

# --------------------------------------------------------------------------------------------
# NVLink: GB/s per link per direction, by generation
# --------------------------------------------------------------------------------------------

#: NVIDIA's published per-GPU NVLink bandwidth divided by the GPU's link count and by 2 directions:
#: P100 4 links 160 GB/s (NVLink 1); V100 6 links 300 GB/s (NVLink 2); A100 12 links 600 GB/s
#: (NVLink 3); H100 18 links 900 GB/s (NVLink 4); B200/GB200/B300/GB300 18 links 1.8 TB/s (NVLink 5)
#: (NVIDIA NVLink and NVSwitch product page; the Tesla P100, V100, A100, H100 and Blackwell
#: datasheets). ``nvidia-smi nvlink -s`` prints the signalling rate per link: 25.781 GB/s (V100),
#: 25 GB/s (A100), 26.562 GB/s (H100).
NVLINK_GBS_PER_LINK: Mapping[int, float] = {1: 20.0, 2: 25.0, 3: 25.0, 4: 25.0, 5: 50.0}

#: GA102 boards (A40, RTX A6000, RTX 3090) reach each other over an NVLink 3 bridge of 4 links,
#: 112.5 GB/s both directions (NVIDIA A40 / RTX A6000 datasheets): 14.0625 GB/s per link per direction.
NVLINK_BRIDGE_GA102_GBS_PER_LINK = 14.0625

#: NVLink-C2C between a Grace CPU and its GPU (GH200, GB200, GB300): 900 GB/s both directions
#: (NVIDIA Grace Hopper / GB200 datasheets).
NVLINK_C2C_GBS = 450.0

# --------------------------------------------------------------------------------------------
# PCIe: GB/s per lane per direction, by generation (PCI-SIG base specifications)
# --------------------------------------------------------------------------------------------

#: transfer rate × encoding: Gen1 2.5 GT/s and Gen2 5 GT/s with 8b/10b; Gen3 8, Gen4 16, Gen5 32 GT/s
#: with 128b/130b; Gen6 64 GT/s PAM4 with 242/256 FLIT efficiency. x16 Gen4 = 31.5 GB/s, Gen5 = 63 GB/s.
PCIE_GBS_PER_LANE: Mapping[int, float] = {
    1: 2.5 * 8 / 10 / 8,
    2: 5.0 * 8 / 10 / 8,
    3: 8.0 * 128 / 130 / 8,
    4: 16.0 * 128 / 130 / 8,
    5: 32.0 * 128 / 130 / 8,
    6: 64.0 * 242 / 256 / 8,
}
#: GT/s per lane of each generation, to read an observed ``current_link_speed`` back into a generation
PCIE_GTS: Mapping[int, float] = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}
#: GPUs and RDMA NICs sit in x16 slots; nothing nodetopo publishes today says otherwise (the link
#: width is an edge-health fact: an observed width replaces this one)
PCIE_NOMINAL_WIDTH = 16

# --------------------------------------------------------------------------------------------
# The host side
# --------------------------------------------------------------------------------------------

#: GPU or NIC traffic that crosses the CPU interconnect (a SYS path). NodeTopology does not say which
#: CPU a node has; NCCL's own topology model (src/graph/topo.h) weighs this link at 6-40 GB/s by CPU
#: family (BDW_QPI_BW 6, SKL_QPI_BW 10, AMD_BW 16, SRP_QPI_BW 22, ERP_QPI_BW 40). Assumed: 20 GB/s.
SMP_GBS = 20.0
#: NUMA nodes of one socket (SLIT distance at most this) share the socket's fabric, not the CPU link
SAME_SOCKET_MAX_DISTANCE = 15

# --------------------------------------------------------------------------------------------
# Network
# --------------------------------------------------------------------------------------------

#: a NIC's rate is its link rate as the HCA reports it (ibstat ``Rate``, sysfs ``rate``: 400 for
#: 4X NDR, 200 for HDR, 100 for EDR; ethtool speed for RoCE), bits per second: GB/s = Gb/s / 8
BITS_PER_BYTE = 8.0

#: NCCL uses GPUDirect RDMA between a GPU and a NIC only up to this PCIe class (NCCL_NET_GDR_LEVEL's
#: default, PATH_PXB in src/graph/paths.cc); a farther NIC is fed through host memory
GDR_MAX_CLASS = "PXB"
#: NCCL uses PCIe peer-to-peer between two GPUs only up to this class (NCCL_P2P_LEVEL's default,
#: PATH_PXB in src/graph/paths.cc); farther GPUs exchange through host memory (the SHM transport)
P2P_MAX_CLASS = "PXB"


# --------------------------------------------------------------------------------------------
# Efficiencies: the band
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Efficiency:
    """The fraction of a structural bound a collective reaches at large sizes: ``low``..``high``."""

    low: float
    high: float
    basis: str  #: the measurements it was set from
    calibrated: bool = True  #: False: no published measurement of this case was found

    @property
    def mid(self) -> float:
        return (self.low + self.high) / 2


#: Ring over NVLink (per-GPU NVLink egress is the binding cut). Set from: A100 ~230 GB/s of 300 (NCCL
#: maintainer, NVIDIA/nccl-tests#149; 232.54 measured, nccl-tests#175); H100 370 of 450 (nccl-tests#212,
#: NVIDIA/nccl#2140, 368.76 in nccl-tests#309); A800 ~160 of 200 (NVIDIA/nccl#412); B300 695 of 900
#: (NVIDIA/nccl#2140). 0.77-0.82.
RING_NVLINK = Efficiency(
    low=0.72,
    high=0.86,
    basis="A100 230/300, H100 370/450, A800 160/200, B300 695/900 (nccl-tests#149, #212, nccl#412, #2140)",
)
#: NVLink SHARP (NVLS): algbw against the per-GPU NVLink capacity into the switch, busbw = algbw × 2(n-1)/n.
#: Hopper: 8×H100 480 GB/s busbw (algbw 275 of 450: 0.61; nccl-tests#212, nccl#2140), 8×H200 475 (0.60,
#: nccl-tests#272), 8×H800 215 (0.61 of 200, nccl#1374), 2×8 H100 IB 467 (0.55, corpus), 2×8 H100 RoCE
#: 430 (0.51, nccl#1221). NCCL weighs NVLS on Hopper at 0.85 (tuning.cc nvlsEfficiency).
NVLS_HOPPER = Efficiency(
    low=0.49,
    high=0.68,
    basis="8×H100 480, 8×H200 475, 8×H800 215, 2×8 H100 467 (IB) and 430 (RoCE)",
)
#: Blackwell: GB300 NVL72 1/2/16 hosts 685/842/930 GB/s (algbw 457/481/473 of 900: 0.51-0.53, corpus);
#: 8×B300 845 (0.54, nccl#2140). NCCL weighs NVLS on Blackwell at 0.74 (tuning.cc nvlsEfficiency).
NVLS_BLACKWELL = Efficiency(
    low=0.46,
    high=0.60,
    basis="GB300 NVL72 4/8/64 GPUs 685/842/930 (corpus), 8×B300 845 (nccl#2140)",
)
#: Network with GPUDirect RDMA (every NIC PIX/PXB to a GPU that uses it), against the NICs' rate.
#: IB: ~24 GB/s per 200 Gb/s HDR NIC (0.96, nccl#412), 46-48 GB/s per 400 Gb/s NDR NIC (0.92-0.96,
#: nccl-tests#290), 2×8 A100 4×200G 86 of 100 (0.86, nccl-tests#175); RoCE: 4×8 H100 8×400G 320 of 400
#: (0.80, nccl#1221); the 2-rack GB300 run 738 GB/s (corpus) is 0.93 of one host's 8×400G in a tree.
NET_GDR = Efficiency(
    low=0.78,
    high=0.98,
    basis="HDR 24/25, NDR 46-48/50 (maintainers), 2×8 A100 86/100, 4×8 H100 RoCE 320/400, GB300 2 racks",
)
#: Network through host memory (the NIC is PHB/NODE/SYS to the GPUs: no GPUDirect RDMA): "If the NIC
#: is attached to the CPU getting 16 GB/s is normal" for a 200 Gb/s NIC (NCCL maintainer, nccl#412).
NET_HOST = Efficiency(low=0.50, high=0.80, basis="16 of 25 GB/s, NIC on the CPU (nccl#412)")
#: PCIe peer-to-peer through a PCIe switch (PIX/PXB). nvbandwidth CE copies between RTX A6000s over
#: PCIe Gen4: 26.34 of 31.5 GB/s (0.84, NVIDIA/nvbandwidth#50); NCCL's own PCIe model is width ×
#: rate × 0.76 (topo.cc, 24 GB/s at Gen4 x16). No all-reduce measurement with a published topology.
PCIE_P2P = Efficiency(
    low=0.55,
    high=0.88,
    basis="nvbandwidth A6000 26.34/31.5 (nvbandwidth#50); NCCL's PCIe model 0.76",
    calibrated=False,
)
#: GPUs that exchange through host memory (SHM: no NVLink, PCIe class beyond PXB, or a GeForce
#: board without P2P). "On PCI systems, the performance you get is usually determined by the bandwidth
#: your CPU and memory can deliver" (NCCL maintainer, nccl#1639: 8×RTX 5090 28 GB/s, 0.44 of Gen5 x16;
#: topology not published). Wide, uncalibrated.
PCIE_HOST = Efficiency(
    low=0.30,
    high=0.85,
    basis="8×RTX 5090 28 GB/s of 63 (nccl#1639, topology not published)",
    calibrated=False,
)
#: Tree over the network: the same links as a ring, its own data pattern (each node sends and receives
#: the buffer once per direction); NCCL weighs it at 0.92 of its ring figure (tuning.cc). Same band.
TREE_NET = dataclasses.replace(NET_GDR, basis=NET_GDR.basis + "; tree pattern")
#: Point-to-point copies (nvbandwidth, p2pBandwidthLatencyTest) between two GPUs: GB200 ~770 of 900 GB/s
#: (0.86, Azure/AI-benchmarking-guide#7), RTX A6000 PCIe 26.34/31.5 and 21.8/31.5 across sockets (0.84,
#: 0.69, nvbandwidth#50). Copy engines reach more than SM kernels (nccl-tests#149).
P2P_NVLINK = Efficiency(low=0.75, high=0.97, basis="GB200 nvbandwidth ~770/900 (AI-benchmarking-guide#7)")
P2P_PCIE = Efficiency(
    low=0.60, high=0.90, basis="RTX A6000 nvbandwidth 26.34 and 21.8 of 31.5 (nvbandwidth#50)"
)
#: all-to-all: every rank sends to every other; no published measurement with its topology was found.
#: The ring bands, widened below by a factor.
ALLTOALL_WIDEN = 0.75

#: nccl-tests reaches its plateau bus bandwidth only at large messages: the band is stated for the
#: busbw at the largest size of a sweep that reaches at least this many bytes (the calibration runs
#: reach 8-16 GiB; at 1 GiB a 128-GPU run is still 23 % below its 16 GiB figure).
JUDGED_MIN_BYTES = 1 << 30
#: a sweep that stops below this size is not a bandwidth measurement at all
HARNESS_MIN_BYTES = 64 << 20
