"""The probe reads the container through the host seam: a root (``HostRoot``) whose reads are bounded
and confined, and a command runner a test can replace."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nodetopo.host import HostRoot, Replay, ReplayRunner
from nodetopo.probe import observe

NCCL_OUTPUT = """#       size         count      type   redop    root     time   algbw   busbw #wrong
  1073741824     268435456     float     sum      -1  11810.0   90.92  159.11       0
"""


@pytest.mark.timeout(30)
def test_a_fifo_where_a_file_belongs_is_refused_not_waited_on(tmp_path: Path) -> None:
    (tmp_path / "proc/self").mkdir(parents=True)
    os.mkfifo(tmp_path / "proc/self/cgroup")
    os.mkfifo(tmp_path / "proc/self/status")
    with pytest.raises(observe.ReadFailure, match="a FIFO"):
        observe.read_cpuset(HostRoot(tmp_path))
    os.mkfifo(tmp_path / "proc/meminfo")
    with pytest.raises(observe.ReadFailure, match="a FIFO"):
        observe.read_hugepages(tmp_path)


def test_a_link_out_of_the_root_is_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "mlx5_0/ports/1").mkdir(parents=True)
    (outside / "mlx5_0/ports/1/state").write_text("4: ACTIVE\n")
    root = tmp_path / "root"
    (root / "sys/class").mkdir(parents=True)
    (root / "sys/class/infiniband").symlink_to(outside)
    with pytest.raises(observe.ReadFailure, match="outside the root"):
        observe.read_infiniband(HostRoot(root))
    (root / "dev").mkdir()
    (root / "dev/shm").symlink_to(outside)
    with pytest.raises(observe.ReadFailure, match="outside the root"):
        observe.read_shm_bytes(root)


def test_the_collective_runs_through_the_runner_it_is_given() -> None:
    argv = observe.collective_argv(4)
    run = observe.run_collective(4, 5, runner=ReplayRunner({argv: NCCL_OUTPUT}))
    assert run.output is not None and run.output.rows[0].best_busbw() == pytest.approx(159.11)
    with pytest.raises(observe.ReadFailure, match="not in the image"):
        observe.run_collective(4, 5, runner=ReplayRunner({}))
    with pytest.raises(observe.ReadFailure, match=r"no result within 5s"):
        observe.run_collective(4, 5, runner=ReplayRunner({argv: Replay(hang=True)}))
    failing = ReplayRunner({argv: Replay(returncode=3, stderr="NCCL WARN no GPU\n")})
    with pytest.raises(observe.ReadFailure, match="exited 3: NCCL WARN no GPU"):
        observe.run_collective(4, 5, runner=failing)
