"""Every discovery source, in the order they run. Explicit: importing a module registers nothing.

Each module has ``NAME`` and ``collect(ctx) -> SourceResult`` (a pure ``parse_*`` + thin ``read_*``).
"""

from __future__ import annotations

from nodetopo.sources import ibstat, numa, nvidia_smi, nvml, pci, rdma
from nodetopo.sources.base import Source
from nodetopo.sources.fabric import cloud, infiniband, lldp

ALL: tuple[Source, ...] = (numa, pci, rdma, ibstat, nvidia_smi, nvml, infiniband, lldp, cloud)

__all__ = ["ALL", "cloud", "ibstat", "infiniband", "lldp", "numa", "nvidia_smi", "nvml", "pci", "rdma"]
