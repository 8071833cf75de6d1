"""Every discovery source, in the order they run. Explicit: importing a module registers nothing.

Each module has ``NAME``, ``COMMANDS`` (the commands it runs, see ``sources.commands``) and
``collect(ctx) -> SourceResult`` (a pure ``parse_*`` + thin ``read_*``).
"""

from __future__ import annotations

from nodetopo.sources import ibstat, numa, nvidia_smi, nvml, pci, rdma
from nodetopo.sources.base import Source
from nodetopo.sources.commands import Command
from nodetopo.sources.fabric import cloud, infiniband, lldp

ALL: tuple[Source, ...] = (numa, pci, rdma, ibstat, nvidia_smi, nvml, infiniband, lldp, cloud)

#: every command a source declares, in source order: what a capture bundle holds and replays
COMMANDS: tuple[Command, ...] = tuple(command for source in ALL for command in source.COMMANDS)

__all__ = [
    "ALL",
    "COMMANDS",
    "cloud",
    "ibstat",
    "infiniband",
    "lldp",
    "numa",
    "nvidia_smi",
    "nvml",
    "pci",
    "rdma",
]
