"""NVML (``pynvml``) behind a narrow protocol, plus a recorded dump that replays through it.

One module per role:

* ``protocol``: ``NvmlApi`` (a ``Protocol``: the few NVML calls nodetopo needs, in its own types),
  ``NvmlCallError`` and NVML's enumerations;
* ``live``: ``PynvmlApi``, the protocol over the real library (the only import of ``pynvml`` in
  nodetopo, and a lazy one: importing nodetopo never needs ``libnvidia-ml.so.1``);
* ``dumpfile``: the dump format (``nvml.json``, ``nodetopo-nvml-dump/v1``) and its reader, which
  validates a dump per device and per field;
* ``replay``: ``RecordedNvml``, a dump replayed through the protocol;
* ``dump``: ``dump_nvml(api) -> dict``, what ``nodetopo capture`` writes to ``nvml.json``;
* ``source``: ``read_nvml(api) -> (NvmlSnapshot, conditions)`` (pure over the protocol) and
  ``collect(ctx)``, the source.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from nodetopo.sources.commands import Command
from nodetopo.sources.nvml.protocol import (
    ERROR_TEXT,
    FUNCTION_NOT_FOUND,
    GPU_IS_LOST,
    INVALID_ARGUMENT,
    LINK_CLASS_OF_LEVEL,
    MAX_DEVICES,
    MAX_NVLINKS,
    NAME,
    NOT_FOUND,
    NOT_SUPPORTED,
    MigMode,
    NvlinkCounter,
    NvmlApi,
    NvmlCallError,
    P2pCapability,
    P2pStatus,
    PcieQuestion,
    TopologyLevel,
    cpus_of_bitmask,
    mig_profile_of_name,
    nvml_bus_id,
)
from nodetopo.sources.nvml.replay import FORMAT, RecordedNvml
from nodetopo.sources.nvml.source import NOT_THIS_SYSTEM, collect, read_nvml

#: NVML is a library (or a dump replayed): the source runs no command
COMMANDS: tuple[Command, ...] = ()

if TYPE_CHECKING:
    from nodetopo.sources.nvml.dump import dump_nvml
    from nodetopo.sources.nvml.live import PynvmlApi

#: loaded on first use: replaying a bundle needs neither the live adapter (ctypes, uuid) nor the dumper
_LAZY = {"PynvmlApi": "nodetopo.sources.nvml.live", "dump_nvml": "nodetopo.sources.nvml.dump"}

__all__ = [
    "COMMANDS",
    "ERROR_TEXT",
    "FORMAT",
    "FUNCTION_NOT_FOUND",
    "GPU_IS_LOST",
    "INVALID_ARGUMENT",
    "LINK_CLASS_OF_LEVEL",
    "MAX_DEVICES",
    "MAX_NVLINKS",
    "NAME",
    "NOT_FOUND",
    "NOT_SUPPORTED",
    "NOT_THIS_SYSTEM",
    "MigMode",
    "NvlinkCounter",
    "NvmlApi",
    "NvmlCallError",
    "P2pCapability",
    "P2pStatus",
    "PcieQuestion",
    "PynvmlApi",
    "RecordedNvml",
    "TopologyLevel",
    "collect",
    "cpus_of_bitmask",
    "dump_nvml",
    "mig_profile_of_name",
    "nvml_bus_id",
    "read_nvml",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
