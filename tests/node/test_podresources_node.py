"""The kubelet PodResources client against the real kubelet (grpc-go over its Unix socket).

The device-plugin cases (who holds which GPU) are in test_allocation*.py; here: the transport and
the parser against the real server, and why the agent must run as root to ask it.
"""

from __future__ import annotations

import os
import stat
import statistics
import time
from typing import Any

import pytest

from nodetopo.kubelet.podresources import read_allocation

from .node import LocalNode

pytestmark = [pytest.mark.k8s, pytest.mark.node]


def test_the_real_kubelet_answers_list_and_allocatable(node: LocalNode, record_property: Any) -> None:
    path = node.kubelet_root / "pod-resources" / "kubelet.sock"
    mode = stat.S_IMODE(os.stat(path).st_mode)
    record_property("pod-resources socket mode", oct(mode))
    got = read_allocation(str(path), timeout_s=10)
    # the kubelet serves GetAllocatableResources (1.23+): a list, possibly empty, never "not served"
    assert got.allocatable is not None
    names = {(a.holder.namespace, a.holder.name) for a in got.assignments}
    assert all(ns and name for ns, name in names)
    # what one allocation check costs the agent (every 5 s by default): wall and CPU of this process;
    # paced, because the kubelet rate-limits the API (a burst of 10, then gRPC status 8)
    walls, cpus = [], []
    for _ in range(20):
        time.sleep(0.1)
        wall, cpu = time.perf_counter(), time.process_time()
        read_allocation(str(path), timeout_s=10)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    figures = (round(statistics.median(walls) * 1000, 2), round(statistics.median(cpus) * 1000, 2))
    record_property("allocation check ms (median wall, CPU)", figures)
    print(
        f"allocation check (List + GetAllocatableResources): median {figures[0]} ms wall, {figures[1]} ms CPU"
    )


def test_the_socket_is_writable_by_root_only(node: LocalNode) -> None:
    """Why deploy/daemonset.yaml runs the agent as UID 0 (all capabilities dropped): the kubelet
    creates the socket owned by root and writable by root only, and connecting needs write access."""
    info = os.stat(node.kubelet_root / "pod-resources" / "kubelet.sock")
    assert stat.S_ISSOCK(info.st_mode)
    assert info.st_uid == 0 and not stat.S_IMODE(info.st_mode) & (stat.S_IWGRP | stat.S_IWOTH), oct(
        info.st_mode
    )
