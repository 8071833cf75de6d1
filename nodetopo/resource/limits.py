"""The bounds of the NodeTopology schema: what the CRD's ``maxItems``/``maxLength`` say, as numbers.

Sized to real hardware with headroom; tests/test_crd_bounds.py checks the CRD against these and
tests/kube/test_crd_bounds.py the API server against both. The body projection cuts what it writes
to them, and the reader (``nodetopo.resource.reader``) refuses a list over them whatever the CRD
says, so reading any object costs at most these many entries.
"""

from __future__ import annotations

from nodetopo.model import MAX_LINKED_GPUS

#: GPUs per node. The largest single-OS machines have 16 (DGX-2/HGX-2); a GB200 NVL72 rack is 18 nodes
#: of 4. 1,024 leaves room for a whole 576-GPU NVLink domain behind one kernel.
MAX_GPUS = 1024
#: NICs per node (and per GPU's NIC list): RDMA devices include SR-IOV virtual functions, e.g. 12
#: ConnectX ports with 127 VFs each is 1,536.
MAX_NICS = 2048
#: NUMA nodes: the kernel's own limit (MAX_NUMNODES with NODES_SHIFT=10).
MAX_NUMA_NODES = 1024
#: MIG devices: at most 7 per GPU.
MAX_MIG_DEVICES = 7 * MAX_GPUS
#: containers holding one GPU (more than one only when the device plugin shares GPUs: time-slicing,
#: MPS). A kubelet runs at most a few hundred pods; more holders are cut and the cut is said.
MAX_HOLDERS = 256
#: resources listed in ``status.allocation.resources``
MAX_RESOURCES = 256
#: NVLink islands: two GPUs at least each.
MAX_ISLANDS = MAX_GPUS // 2
#: GPU pairs in ``status.gpuLinks``: every pair of a node of ``MAX_LINKED_GPUS`` (64) GPUs. A larger
#: node publishes no gpuLinks (the derivation makes none), so no object lists 500,000 pairs.
MAX_GPU_LINKS = MAX_LINKED_GPUS * (MAX_LINKED_GPUS - 1) // 2
#: Sources and conditions (one condition per source, plus Ready, Consistent and room to grow).
MAX_SOURCES = 64
MAX_SOURCE_MESSAGE = 4096
MAX_CONDITIONS = 128
#: A CPU list in cpulist form: 8,192 CPUs (the kernel's NR_CPUS maximum) written one by one.
MAX_CPULIST = 32768
#: bounds of ``status.network`` (the CRD's maxItems/maxLength): a node has at most a few dozen NIC ports
MAX_NEIGHBOURS = 64
MAX_TIER_MEMBERS = 16
MAX_TIERS = 8
MAX_TEXT = 256
#: A GPU's index, island and NUMA node, which placement groups GPUs on: non-negative int32 values.
MAX_ID = 2**31
#: ``status.health``: the degraded edges listed (a node has a few hundred edges at most: every GPU,
#: NIC, NVSwitch and switch port has one or two), their reasons and rates, and the baseline's edges
MAX_EDGES = 1024
MAX_REASONS = 16
MAX_RATES = 32
MAX_MESSAGE = 1024
#: a link state's words (a port state, a fabric health)
MAX_STATE = 64
