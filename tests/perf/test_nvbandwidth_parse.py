"""nvbandwidth output. No real capture is in the corpus: these are our own fixtures in nvbandwidth
v0.8's layout (``tests/fixtures/perf/SOURCES.md``: not measurements)."""

from __future__ import annotations

import pytest
from helpers import FIXTURES

from nodetopo.errors import ParseError
from nodetopo.perf import NvbOutput, parse_benchmark, parse_nvbandwidth

OWN = FIXTURES / "perf" / "own"


def test_the_text_output() -> None:
    out = parse_nvbandwidth((OWN / "nvbandwidth-4xh100-one-slow-pair.txt").read_text(), "nvb.txt")
    assert (out.version, out.cuda_runtime, out.driver_version, out.host) == (
        "v0.8",
        12080,
        "570.124.06",
        "node-a",
    )
    assert [(d.index, d.bus_id) for d in out.devices] == [
        (0, "00000000:18:00"),
        (1, "00000000:2a:00"),
        (2, "00000000:3a:00"),
        (3, "00000000:5d:00"),
    ]
    h2d = out.testcase("host_to_device_memcpy_ce")
    assert h2d is not None and h2d.status == "Passed" and h2d.matrix is not None
    assert h2d.matrix.rows == ("0",) and h2d.matrix.value("0", "3") == 54.20 and h2d.matrix.total == 216.30
    d2d = out.testcase("device_to_device_memcpy_read_ce")
    assert d2d is not None and d2d.gpu_to_gpu and d2d.matrix is not None
    assert d2d.matrix.unit == "GB/s" and d2d.matrix.value("0", "0") is None
    assert d2d.matrix.value("1", "3") == 121.40 and d2d.matrix.value("3", "1") == 120.95
    waived = out.testcase("host_to_device_memcpy_sm")
    assert waived is not None and waived.status == "Waived" and "NUMA" in waived.message


def test_the_json_output() -> None:
    out = parse_benchmark((OWN / "nvbandwidth-4xh100.json").read_text(), "nvb.json")
    assert isinstance(out, NvbOutput)
    assert out.host == "node-a" and len(out.devices) == 4 and out.devices[2].bus_id == "00000000:3a:00"
    d2d = out.testcase("device_to_device_memcpy_read_ce")
    assert d2d is not None and d2d.matrix is not None and d2d.matrix.value("1", "3") == 388.60
    assert d2d.matrix.total == pytest.approx(4668.0, abs=0.01)
    assert out.testcase("device_to_device_memcpy_write_sm").status == "Waived"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("text", "line", "detail"),
    [
        (
            "nvbandwidth Version: v0.8\nRunning x_ce.\nmemcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)\n  "
            " 0   1\n 0 N/A 3.0 4.0\n",
            5,
            "cells",
        ),
        (
            "nvbandwidth Version: v0.8\nRunning x_ce.\nmemcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)\n  "
            " 0   1\n 0 N/A fast\n",
            5,
            "number",
        ),
        (
            "nvbandwidth Version: v0.8\nRunning x_ce.\nmemcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)\n  "
            " 0   1\n 0 N/A 1.0\n 1 1.0 N/A\n\nSUM y_ce 2.0\n",
            8,
            "SUM of",
        ),
    ],
)
def test_bad_input_names_the_line(text: str, line: int, detail: str) -> None:
    with pytest.raises(ParseError) as e:
        parse_nvbandwidth(text, "nvb.txt")
    assert e.value.source == "nvbandwidth" and e.value.line == line and detail in e.value.detail


def test_a_run_cut_short_is_an_error_testcase() -> None:
    out = parse_nvbandwidth("nvbandwidth Version: v0.8\nRunning device_to_device_memcpy_read_ce.\n")
    assert out.testcases[0].status == "Error" and "ends" in out.testcases[0].message
    with pytest.raises(ParseError, match="no nvbandwidth output"):
        parse_nvbandwidth("hello\n")
