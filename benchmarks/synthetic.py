"""Synthetic ``Facts`` for the scale benchmark: big PCIe trees and an NVL72-like NVSwitch node.

Built in code from the model types (no bundle on disk), so only the join and the derivations are
timed. Addresses, UUIDs and CPU numbers are made up but shaped like real ones.
"""

from __future__ import annotations

from nodetopo.model import (
    FabricInfo,
    Facts,
    NumaNode,
    NvmlGpu,
    NvmlLink,
    NvmlSnapshot,
    PciAddress,
    PciDevice,
    RdmaDevice,
    RdmaPort,
    RemoteDeviceType,
    SourceStatus,
)

NVIDIA, MELLANOX, BROADCOM = 0x10DE, 0x15B3, 0x1000
GPU_CLASS, NIC_CLASS, BRIDGE_CLASS = 0x030200, 0x020700, 0x060400
#: devices per board in ``pcie_node``: a switch (upstream port + 4 downstream ports), 2 GPUs, 1 NIC
BOARD_DEVICES = 8
SOURCES = tuple(SourceStatus(name=n, ok=True) for n in ("nvml", "sysfs.numa", "sysfs.pci", "sysfs.rdma"))


def _numa_nodes(count: int, cpus_per_node: int) -> tuple[NumaNode, ...]:
    return tuple(
        NumaNode(
            id=n,
            cpus=frozenset(range(n * cpus_per_node, (n + 1) * cpus_per_node)),
            memory_bytes=512 << 30,
            distances=tuple((m, 10 if m == n else 20) for m in range(count)),
        )
        for n in range(count)
    )


def _uuid(i: int) -> str:
    return f"GPU-{i:08x}-0000-4000-8000-{i:012x}"


def _fn(
    address: PciAddress,
    vendor: int,
    device: int,
    cls: int,
    root: str,
    up: tuple[PciAddress, ...],
    numa: int,
    cpus: frozenset[int],
) -> PciDevice:
    return PciDevice(
        address=address,
        vendor=vendor,
        device=device,
        class_code=cls,
        root=root,
        upstream=up,
        numa_node=numa,
        local_cpus=cpus,
        driver={NVIDIA: "nvidia", MELLANOX: "mlx5_core"}.get(vendor, "pcieport"),
    )


def _nic(name: str, address: PciAddress, index: int) -> RdmaDevice:
    port = RdmaPort(
        number=1,
        state="ACTIVE",
        phys_state="LinkUp",
        rate_gbps=400.0,
        link_layer="InfiniBand",
        netdevs=(f"ibp{index}s0",),
    )
    return RdmaDevice(name=name, address=address, hca_type="MT4129", firmware="28.39.1002", ports=(port,))


def pcie_node(devices: int, *, numa_count: int = 2) -> Facts:
    """A node of ``devices`` PCI functions in boards of 8: a PCIe switch (upstream port and four
    downstream ports), two GPUs and one RDMA NIC below it, one root complex per board, boards spread
    over ``numa_count`` NUMA nodes. GPUs are seen by NVML (no NVLink) and sysfs; NICs by sysfs."""
    boards = max(1, devices // BOARD_DEVICES)
    numa = _numa_nodes(numa_count, 32)
    pci: list[PciDevice] = []
    gpus: list[NvmlGpu] = []
    nics: list[RdmaDevice] = []
    for b in range(boards):
        domain, base = b // 32, (b % 32) * 8
        node = b % numa_count
        cpus = numa[node].cpus
        root = f"pci{domain:04x}:{base:02x}"
        upstream_port = PciAddress(domain, base + 1, 0, 0)
        pci.append(_fn(upstream_port, BROADCOM, 0xC030, BRIDGE_CLASS, root, (), node, cpus))
        ports = [PciAddress(domain, base + 2, d, 0) for d in range(4)]
        pci += [_fn(p, BROADCOM, 0xC030, BRIDGE_CLASS, root, (upstream_port,), node, cpus) for p in ports]
        for slot in range(2):
            address = PciAddress(domain, base + 3 + slot, 0, 0)
            pci.append(
                _fn(address, NVIDIA, 0x2330, GPU_CLASS, root, (upstream_port, ports[slot]), node, cpus)
            )
            index = 2 * b + slot
            gpus.append(
                NvmlGpu(
                    index=index,
                    uuid=_uuid(index),
                    model="NVIDIA H100 80GB HBM3",
                    address=address,
                    memory_bytes=80 << 30,
                    cpu_affinity=cpus,
                    mig_current=False,
                )
            )
        nic_address = PciAddress(domain, base + 5, 0, 0)
        pci.append(_fn(nic_address, MELLANOX, 0x1021, NIC_CLASS, root, (upstream_port, ports[2]), node, cpus))
        nics.append(_nic(f"mlx5_{b}", nic_address, b))
    return Facts(
        numa_nodes=numa,
        pci_devices=tuple(sorted(pci, key=lambda d: d.address)),
        rdma_devices=tuple(nics),
        nvml=NvmlSnapshot(driver_version="570.86.15", gpus=tuple(gpus)),
        sources=SOURCES,
    )


def nvl72_node(gpus: int = 72, *, links_per_gpu: int = 18) -> Facts:
    """One node holding a whole NVL72-like NVLink domain: ``gpus`` GPUs, each with ``links_per_gpu``
    NVLinks into the NVSwitch fabric (NVML remote type SWITCH), one multi-node fabric clique, one
    RDMA NIC per GPU under the GPU's PCIe switch, two GPUs per Grace NUMA node."""
    numa = _numa_nodes(gpus // 2, 72)
    fabric = FabricInfo(
        cluster_uuid="6e1ee8ab-0f3c-4b5f-9d1b-5c7a2d0e4f11", clique_id=1, state="COMPLETED", health="Healthy"
    )
    pci: list[PciDevice] = []
    nvml: list[NvmlGpu] = []
    nics: list[RdmaDevice] = []
    for i in range(gpus):
        domain, base = i // 32, (i % 32) * 8
        node = i // 2
        cpus = numa[node].cpus
        root = f"pci{domain:04x}:{base:02x}"
        upstream_port = PciAddress(domain, base + 1, 0, 0)
        ports = (PciAddress(domain, base + 2, 0, 0), PciAddress(domain, base + 2, 1, 0))
        gpu_address = PciAddress(domain, base + 3, 0, 0)
        nic_address = PciAddress(domain, base + 4, 0, 0)
        pci.append(_fn(upstream_port, BROADCOM, 0xC030, BRIDGE_CLASS, root, (), node, cpus))
        pci += [_fn(p, BROADCOM, 0xC030, BRIDGE_CLASS, root, (upstream_port,), node, cpus) for p in ports]
        pci.append(_fn(gpu_address, NVIDIA, 0x2941, GPU_CLASS, root, (upstream_port, ports[0]), node, cpus))
        pci.append(_fn(nic_address, MELLANOX, 0x1021, NIC_CLASS, root, (upstream_port, ports[1]), node, cpus))
        nics.append(_nic(f"mlx5_{i}", nic_address, i))
        links = tuple(
            NvmlLink(link=n, remote_address=None, remote_type=RemoteDeviceType.SWITCH)
            for n in range(links_per_gpu)
        )
        nvml.append(
            NvmlGpu(
                index=i,
                uuid=_uuid(i),
                model="NVIDIA GB200",
                address=gpu_address,
                memory_bytes=186 << 30,
                cpu_affinity=cpus,
                numa_node=gpus // 2 + i,
                mig_current=False,
                links=links,
                fabric=fabric,
            )
        )
    return Facts(
        numa_nodes=numa,
        pci_devices=tuple(sorted(pci, key=lambda d: d.address)),
        rdma_devices=tuple(nics),
        nvml=NvmlSnapshot(driver_version="570.86.15", gpus=tuple(nvml)),
        sources=SOURCES,
    )
