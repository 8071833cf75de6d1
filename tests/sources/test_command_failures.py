"""Every source that runs a command reports the command's failures the same way: a refused output
(larger than its limit, or a bundle file that is a FIFO or a link out of the bundle) is a ParseError
of that source, never an internal error with a traceback."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from nodetopo.host import HostRoot, Replay, ReplayRunner
from nodetopo.model import ConditionReason
from nodetopo.sources.base import Context
from nodetopo.sources.fabric import infiniband, lldp
from nodetopo.topology.discover import bundle_context
from tests.sysfs_trees import write_tree

REFUSED = "printed more than 16777216 bytes: stopped, output not read"


def ib_host(tmp_path: Path) -> HostRoot:
    """A host with one ACTIVE InfiniBand port (mlx5_0 port 1, LID 1)."""
    base = "sys/class/infiniband/mlx5_0/ports/1"
    return write_tree(
        tmp_path,
        {
            f"{base}/state": "4: ACTIVE\n",
            f"{base}/link_layer": "InfiniBand\n",
            f"{base}/lid": "0x1\n",
            f"{base}/gids/0": "fe80:0000:0000:0000:ec0d:9a03:003d:677a\n",
        },
    )


def assert_a_parse_error_of(source: str, result: object, caplog: pytest.LogCaptureFixture) -> str:
    facts = result.facts  # type: ignore[attr-defined]
    assert [(c.source, c.reason) for c in facts.conditions] == [(source, ConditionReason.PARSE_ERROR)]
    assert not any("internal error" in c.message for c in facts.conditions)
    assert not any(r.exc_info for r in caplog.records)  # no traceback: not a bug of nodetopo
    (status,) = facts.sources
    assert not status.ok and status.message.startswith("ParseError: ")
    message: str = facts.conditions[0].message
    return message


def test_a_refused_neighbour_query_is_a_parse_error_of_the_ib_fabric_source(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    argv = infiniband.neighbour_query_argv("mlx5_0", 1)
    runner = ReplayRunner({argv: Replay(refused=f"{' '.join(argv)} {REFUSED}")})
    caplog.set_level(logging.INFO)
    result = infiniband.collect(Context(root=ib_host(tmp_path), runner=runner))
    message = assert_a_parse_error_of("fabric.ib", result, caplog)
    assert message == f"{' '.join(argv)}: output not read: {' '.join(argv)} {REFUSED}"


def test_a_refused_lldpcli_output_is_a_parse_error_of_the_lldp_source(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A bundle whose lldpcli output is a FIFO: refused without being opened."""
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "lldpd.socket").write_text("")
    (tmp_path / "cmd").mkdir()
    os.mkfifo(tmp_path / "cmd" / "lldpcli-neighbors.json")
    caplog.set_level(logging.INFO)
    result = lldp.collect(bundle_context(tmp_path))
    message = assert_a_parse_error_of("fabric.lldp", result, caplog)
    assert message.startswith("lldpcli -f json0 show neighbors: output not read: ")
    assert message.endswith("/cmd/lldpcli-neighbors.json: refused: a FIFO")
