"""The text parsers raise nothing but ``ParseError``: on random text, on text built from their own
vocabulary, and on mutations of every real corpus file (lines deleted or duplicated, tokens swapped,
tabs and spaces exchanged, truncation). Derandomized and bounded so CI stays fast and repeatable."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nodetopo.errors import ParseError
from nodetopo.sources import ibstat, nvidia_smi
from tests.sources.nvidia_smi_query_text import parse_smi_query_text

Parser = Callable[[str, str], object]

FUZZ = settings(
    max_examples=40,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

PARSERS: dict[str, Parser] = {
    "topo": nvidia_smi.parse_topo_matrix,
    "list": nvidia_smi.parse_smi_list,
    "nvlink": nvidia_smi.parse_nvlink_status,
    "query_xml": nvidia_smi.parse_smi_query_xml,
    "query_text": parse_smi_query_text,
    "ibstat": ibstat.parse_ibstat,
    "ibv_devinfo": ibstat.parse_ibv_devinfo,
}

#: corpus directory or file -> parser
CORPUS: list[tuple[str, str]] = [
    ("topo-m", "topo"),
    ("smi-L", "list"),
    ("nvlink", "nvlink"),
    ("smi-q/h100-nvl-2x-nvidia-smi-a-driver-thamada.txt", "query_text"),
    ("smi-q/v100-sxm2-8x-vast-machine03-nvidia-smi-q.xml", "query_xml"),
    ("ibstat/gpud-ibstat.39.0.a100.failed.ibpanic.exit-255.0.txt", "ibstat"),
    ("ibstat/h20-cx6lx-2ca-ethernet-down-disabled.txt", "ibstat"),
    ("ibstat/gpud-ibstat.47.0.h100.some.down.1.txt", "ibstat"),
    ("ibstat/ibv_devinfo-cx7-4port-ethernet-portdown-asus.txt", "ibv_devinfo"),
]


def only_parse_errors(parser: Parser, text: str) -> None:
    try:
        parser(text, "fuzz")
    except ParseError as e:
        assert e.source in ("nvidia-smi", "ibstat") and e.path == "fuzz"
        assert e.line is None or e.line >= 1


@st.composite
def mutations(draw: st.DrawFn, text: str) -> str:
    """A few random edits of a real output."""
    lines = text.split("\n")
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(
            st.sampled_from(["delete", "duplicate", "swap_tokens", "swap_lines", "ws", "token", "truncate"])
        )
        at = draw(st.integers(0, max(len(lines) - 1, 0)))
        if kind == "delete" and lines:
            del lines[at]
        elif kind == "duplicate" and lines:
            lines.insert(at, lines[at])
        elif kind == "swap_lines" and lines:
            other = draw(st.integers(0, len(lines) - 1))
            lines[at], lines[other] = lines[other], lines[at]
        elif kind == "swap_tokens" and lines:
            tokens = lines[at].split("\t") if "\t" in lines[at] else lines[at].split(" ")
            if len(tokens) > 1:
                i, j = draw(st.integers(0, len(tokens) - 1)), draw(st.integers(0, len(tokens) - 1))
                tokens[i], tokens[j] = tokens[j], tokens[i]
                lines[at] = ("\t" if "\t" in lines[at] else " ").join(tokens)
        elif kind == "ws" and lines:
            lines[at] = (
                lines[at].replace("\t", " ")
                if draw(st.booleans())
                else lines[at].replace("    ", "\t").replace("  ", "\t")
            )
        elif kind == "token" and lines:
            replacement = draw(
                st.sampled_from(
                    ["", "X", "NV0", "NV99999", "ERR!", "N/A", "[Unknown Error]", "<inactive>", "0-", ":"]
                )
                | st.text(max_size=8)
            )
            tokens = lines[at].split()
            if tokens:
                i = draw(st.integers(0, len(tokens) - 1))
                lines[at] = lines[at].replace(tokens[i], replacement, 1)
        elif kind == "truncate":
            joined = "\n".join(lines)
            return joined[: draw(st.integers(0, len(joined)))]
    return "\n".join(lines)


def corpus_cases() -> list[tuple[str, str]]:
    return CORPUS


@pytest.mark.corpus
@pytest.mark.parametrize(("where", "kind"), corpus_cases())
@FUZZ
@given(data=st.data())
def test_mutated_corpus_files_raise_only_parse_errors(
    corpus: Path, where: str, kind: str, data: st.DataObject
) -> None:
    target = corpus / where
    files = sorted(target.iterdir()) if target.is_dir() else [target]
    path = data.draw(st.sampled_from(files), label="file")
    text = data.draw(mutations(path.read_text(encoding="utf-8", errors="replace")), label="mutated")
    only_parse_errors(PARSERS[kind], text)


@pytest.mark.parametrize("kind", sorted(PARSERS))
@FUZZ
@given(text=st.text(max_size=300))
def test_random_text_raises_only_parse_errors(kind: str, text: str) -> None:
    only_parse_errors(PARSERS[kind], text)


VOCABULARY = [
    "GPU0", "GPU1", "GPU2", "NIC0", "NIC1", "mlx5_0", "X", " X ", "NV4", "NV0", "PIX", "PXB", "PHB",
    "NODE", "SYS", "SOC", "CPU", "Affinity", "NUMA", "GPU NUMA ID", "N/A", "ERR!", "0-3", "0,5-11", "4",
    "Legend:", "NIC Legend:", "NIC0: mlx5_0", "NIC9: x", "\x1b[4m", "[0m", "GPU 0: A (UUID: GPU-1)",
    "Link 0: 25 GB/s", "<inactive>", "MIG 1g.5gb Device 0: (UUID: MIG-1)", "CA 'mlx5_0'", "Port 1:",
    "State: Active", "Rate: 40", "Base lid: x", "hca_id: mlx5_0", "port: 1", "state: PORT_ACTIVE (4)",
    "ibpanic: boom",
]  # fmt: skip


@pytest.mark.parametrize("kind", sorted(PARSERS))
@FUZZ
@given(
    pieces=st.lists(
        st.sampled_from(VOCABULARY) | st.sampled_from(["\t", " ", "\n", "\n\n", "  "]),
        max_size=60,
    )
)
def test_vocabulary_soup_raises_only_parse_errors(kind: str, pieces: list[str]) -> None:
    only_parse_errors(PARSERS[kind], "".join(pieces))


@FUZZ
@given(
    rows=st.lists(
        st.lists(st.sampled_from(["X", "NV2", "PIX", "SYS", "N/A", "ERR!", "0-3", "1"]), max_size=6),
        max_size=4,
    )
)
def test_matrix_shaped_soup_raises_only_parse_errors(rows: list[list[str]]) -> None:
    """Well-formed header, random cells: the paths past the header get exercised."""
    header = "\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\n"
    labels = ["GPU0", "GPU1", "NIC0", "GPU1"]
    body = "".join(f"{labels[n]}\t" + "\t".join(cells) + "\n" for n, cells in enumerate(rows))
    only_parse_errors(nvidia_smi.parse_topo_matrix, header + body)
