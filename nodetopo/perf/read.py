"""Which benchmark printed this text: nccl-tests (text or ``-J`` JSON) or nvbandwidth (text or ``-j``)."""

from __future__ import annotations

import re

from nodetopo.errors import ParseError
from nodetopo.perf.nccl import NcclOutput, parse_nccl_tests
from nodetopo.perf.nccl_json import parse_nccl_json
from nodetopo.perf.nvbandwidth import NvbOutput, parse_nvbandwidth

BenchmarkOutput = NcclOutput | NvbOutput

_NVBANDWIDTH = re.compile(r"^(nvbandwidth Version:|Running [a-z_]+_(ce|sm)\.|SUM [a-z_]+ )", re.M)


def parse_benchmark(text: str, path: str = "-") -> BenchmarkOutput:
    """Parse ``text`` as whichever benchmark output it is; ``ParseError`` when it is neither."""
    head = text.lstrip()[:4096]
    if head.startswith("{"):
        if '"nvbandwidth"' in head:
            return parse_nvbandwidth(text, path)
        return parse_nccl_json(text, path)
    if _NVBANDWIDTH.search(text[: 1 << 20]):
        return parse_nvbandwidth(text, path)
    try:
        return parse_nccl_tests(text, path)
    except ParseError as e:
        if "no nccl-tests output" in e.detail:
            raise ParseError(
                "benchmark",
                path,
                "neither nccl-tests nor nvbandwidth output (no header, rank list, result row or testcase)",
            ) from None
        raise
