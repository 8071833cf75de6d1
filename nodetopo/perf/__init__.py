"""Benchmark outputs as facts: nccl-tests (``*_perf`` text and ``-J`` JSON) and nvbandwidth (text and
``-j`` JSON).

Pure parsers: text in, frozen dataclasses out, a ``ParseError`` naming the source, the file and the
line when the text is not what the tool prints. Nothing here judges a number; ``nodetopo.expect``
compares them with what the topology should deliver.
"""

from __future__ import annotations

from nodetopo.perf.nccl import (
    COLLECTIVES,
    NcclHalf,
    NcclHeader,
    NcclOutput,
    NcclRank,
    NcclRow,
    bus_factor,
    collective_of,
    parse_nccl_tests,
)
from nodetopo.perf.nccl_json import parse_nccl_json
from nodetopo.perf.nvbandwidth import NvbDevice, NvbMatrix, NvbOutput, NvbTestcase, parse_nvbandwidth
from nodetopo.perf.read import BenchmarkOutput, parse_benchmark

__all__ = [
    "COLLECTIVES",
    "BenchmarkOutput",
    "NcclHalf",
    "NcclHeader",
    "NcclOutput",
    "NcclRank",
    "NcclRow",
    "NvbDevice",
    "NvbMatrix",
    "NvbOutput",
    "NvbTestcase",
    "bus_factor",
    "collective_of",
    "parse_benchmark",
    "parse_nccl_json",
    "parse_nccl_tests",
    "parse_nvbandwidth",
]
