"""Per-source facts about the state of the links (edge health readings), kept apart from ``Facts``."""

from __future__ import annotations

import dataclasses

from nodetopo.model.values import PciAddress

# --------------------------------------------------------------------------------------------
# Per-source facts: the state of the links (edge health readings)
# --------------------------------------------------------------------------------------------
#
# Kept apart from the facts the topology is derived from (``Facts.health``): a link's negotiated
# speed and its error counters change from one scan to the next on a healthy node, and must not
# make an unchanged topology look changed. ``nodetopo.health`` judges them.


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PcieLinkReading:
    """One PCI function's link attributes in sysfs, and its AER totals (None: not there).

    Speeds are GT/s per lane as the kernel prints them (``16.0 GT/s PCIe`` -> 16.0); a function's
    ``max_*`` is its own capability (Link Capabilities), ``current_*`` the negotiated link. The AER
    totals are ``TOTAL_ERR_COR``/``TOTAL_ERR_NONFATAL``/``TOTAL_ERR_FATAL`` of ``aer_dev_*``.
    """

    address: PciAddress
    current_gts: float | None = None
    current_width: int | None = None
    max_gts: float | None = None
    max_width: int | None = None
    aer_correctable: int | None = None
    aer_nonfatal: int | None = None
    aer_fatal: int | None = None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class GpuPcieReading:
    """A GPU's own view of its PCIe link (NVML, or ``nvidia-smi -q -x``'s ``pci_gpu_link_info``).

    ``max_gen``: the highest generation the link can reach with this GPU and this system (NVML's
    ``MaxPcieLinkGeneration``, ``-q``'s ``Max``); ``device_max_gen`` the GPU's own; ``host_max_gen``
    the host side's (``-q`` only). ``replays``: the PCIe replay counter (since the driver loaded).
    """

    gpu: int | None  #: the NVML index; None from ``nvidia-smi -q`` (joined on ``uuid``/``address``)
    source: str  #: ``nvml`` | ``nvidia-smi``
    uuid: str | None = None
    address: PciAddress | None = None
    max_gen: int | None = None
    current_gen: int | None = None
    device_max_gen: int | None = None
    host_max_gen: int | None = None
    max_width: int | None = None
    current_width: int | None = None
    replays: int | None = None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class NvlinkReading:
    """One NVLink of one GPU: its state, speed and error counters (None: not read)."""

    gpu: int
    link: int
    source: str  #: ``nvml`` | ``nvidia-smi``
    active: bool | None = None
    speed_gbps: float | None = None  #: per direction, as ``nvidia-smi nvlink -s`` prints it
    replay: int | None = None
    recovery: int | None = None
    crc: int | None = None  #: CRC errors (NVML: flit + data)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PortCounterReading:
    """The error counters of one RDMA port (``ports/<n>/counters/*``) and its netdev's carrier changes."""

    nic: str
    port: int
    counters: tuple[tuple[str, int], ...] = ()  #: (counter, value) of the counters that were read
    netdev: str | None = None
    carrier_changes: int | None = None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class HealthReadings:
    """Every link-state reading of one scan (see above); empty parts were not read."""

    pcie: tuple[PcieLinkReading, ...] = ()
    gpu_pcie: tuple[GpuPcieReading, ...] = ()
    nvlinks: tuple[NvlinkReading, ...] = ()
    ports: tuple[PortCounterReading, ...] = ()

    def merge(self, other: HealthReadings) -> HealthReadings:
        if not (other.pcie or other.gpu_pcie or other.nvlinks or other.ports):
            return self
        if not (self.pcie or self.gpu_pcie or self.nvlinks or self.ports):
            return other
        return HealthReadings(
            pcie=self.pcie + other.pcie,
            gpu_pcie=self.gpu_pcie + other.gpu_pcie,
            nvlinks=self.nvlinks + other.nvlinks,
            ports=self.ports + other.ports,
        )


NO_READINGS = HealthReadings()
