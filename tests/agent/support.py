"""Test doubles for the agent: a fake clock, a recording publisher, and bundle contexts with faults.

Shared by ``tests/agent`` (unit tests) and ``tests/kube/test_agent_*`` (imported as ``agent.support``).
"""

from __future__ import annotations

import dataclasses
import io
import shutil
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from helpers import BUNDLES

from nodetopo.agent.config import AgentConfig
from nodetopo.agent.loop import Agent
from nodetopo.agent.publisher import DryRunPublisher, PublishOutcome
from nodetopo.host import Replay, ReplayRunner
from nodetopo.model import KubeletAllocation
from nodetopo.publish.nodetopology import ApplyOutcome
from nodetopo.sources.base import Context
from nodetopo.topology.discover import Scan, bundle_context, scan

DGX_H100 = BUNDLES / "dgx-h100"

NVIDIA_SMI_COMMANDS = (
    ("nvidia-smi", "topo", "-m"),
    ("nvidia-smi", "-L"),
    ("nvidia-smi", "-q", "-x"),
    ("nvidia-smi", "nvlink", "-s"),
    ("nvidia-smi", "nvlink", "-e"),
)

#: what nvidia-smi prints when the kernel module and the user-space library differ (exit code 18)
DRIVER_MISMATCH = Replay(
    stdout="Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 550.54\n",
    returncode=18,
)
HANG = Replay(hang=True)
GARBAGE = Replay(stdout="\x00\x7f<<<%%% this is not nvidia-smi output %%%>>>\n\tGPU0\tGPU0\tX\n#\n")


def config(**overrides: Any) -> AgentConfig:
    """A config for tests: no start delay, no jitter, short intervals, no HTTP, no udev."""
    base: dict[str, Any] = {
        "node_name": "node-a",
        "interval_seconds": 60.0,
        "jitter": 0.0,
        "start_delay_max_seconds": 0.0,
        "debounce_seconds": 2.0,
        "debounce_max_seconds": 10.0,
        "backoff_initial_seconds": 1.0,
        "backoff_max_seconds": 60.0,
        "listen": "",
        "udev": False,
    }
    base.update(overrides)
    return AgentConfig(**base).validate()


class FakeClock:
    """A monotonic clock that only ``sleep`` advances. ``on_sleep`` hooks run before each sleep;
    a hook that returns True interrupted it (an event woke the loop): the time it set stands."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self.slept: list[float] = []
        self.on_sleep: list[Callable[[FakeClock, float], bool | None]] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        interrupted = False
        for hook in list(self.on_sleep):
            interrupted = bool(hook(self, seconds)) or interrupted
        if not interrupted:
            self.now += max(0.0, seconds)


class FakePublisher:
    """``DryRunPublisher`` semantics (label tracker, change detection), recorded, with injected errors."""

    def __init__(self, node_name: str = "node-a") -> None:
        self.output = io.StringIO()
        self._inner = DryRunPublisher(node_name, self.output)
        self.errors: list[BaseException] = []  #: raised (first one first) instead of publishing
        self.calls: list[dict[str, Any]] = []
        self.outcomes: list[PublishOutcome] = []
        self.resyncs = 0
        self.during_publish: Callable[[], None] | None = None
        self.topology_only: list[ApplyOutcome] = []  #: outcomes of ``publish_topology`` (allocation changes)

    def publish(
        self, body: Mapping[str, Any], labels: Mapping[str, str], *, uncertain_keys: Iterable[str]
    ) -> PublishOutcome:
        self.calls.append({"body": body, "labels": dict(labels), "uncertain": sorted(uncertain_keys)})
        if self.during_publish is not None:
            self.during_publish()
        if self.errors:
            raise self.errors.pop(0)
        outcome = self._inner.publish(body, labels, uncertain_keys=uncertain_keys)
        self.outcomes.append(outcome)
        return outcome

    def publish_topology(self, body: Mapping[str, Any]) -> ApplyOutcome:
        self.calls.append({"body": body, "labels": None, "uncertain": None})
        if self.errors:
            raise self.errors.pop(0)
        outcome = self._inner.publish_topology(body)
        self.topology_only.append(outcome)
        return outcome

    def resync(self) -> None:
        self.resyncs += 1
        self._inner.resync()

    @property
    def writes(self) -> list[str]:
        done = []
        for o in self.outcomes:
            if o.topology.written:
                done.append("nodetopology")
            if o.labels.written:
                done.append("labels")
        return done

    @property
    def applied_labels(self) -> dict[str, str]:
        return dict(self.outcomes[-1].labels.applied) if self.outcomes else {}


class SwitchableScan:
    """A scan function whose context can be swapped between cycles (a fault appears, then heals)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.count = 0

    def __call__(self) -> Scan:
        self.count += 1
        return scan(self.ctx)


def bundle_with(
    bundle: Path = DGX_H100, *, commands: Mapping[tuple[str, ...], Replay | None] | None = None
) -> Context:
    """The bundle's context with some commands replaced (a ``Replay``) or removed (None: not installed)."""
    ctx = bundle_context(bundle)
    runner = ctx.runner
    assert isinstance(runner, ReplayRunner)
    answers: dict[tuple[str, ...], Replay | str | Path] = dict(runner.answers)
    for argv, answer in (commands or {}).items():
        if answer is None:
            answers.pop(argv, None)
        else:
            answers[argv] = answer
    return dataclasses.replace(ctx, runner=ReplayRunner(answers, absent=runner.absent))


def all_nvidia_smi(answer: Replay | None) -> dict[tuple[str, ...], Replay | None]:
    return dict.fromkeys(NVIDIA_SMI_COMMANDS, answer)


def copy_bundle(tmp_path: Path, bundle: Path = DGX_H100) -> Path:
    dest = tmp_path / bundle.name
    shutil.copytree(bundle, dest, symlinks=True)
    return dest


def make_unreadable(path: Path) -> None:
    """Replace a sysfs file by a directory: reading it fails with an OSError even as root."""
    path.unlink()
    path.mkdir()


def make_agent(
    clock: FakeClock,
    publisher: FakePublisher,
    scan: SwitchableScan | None = None,
    *,
    allocation: Callable[[], KubeletAllocation | str] | None = None,
    **cfg: Any,
) -> tuple[Agent, SwitchableScan]:
    """An agent on ``clock`` (wall clock and sleep too, no jitter), scanning ``scan`` (default: the
    dgx-h100 bundle) with ``config(**cfg)``; ``allocation``: what asks the kubelet (None: nothing)."""
    scan = scan or SwitchableScan(bundle_context(DGX_H100))
    agent = Agent(
        config(**cfg),
        scan=scan,
        publisher=publisher,
        clock=clock,
        wall_clock=lambda: 1_700_000_000.0 + clock.now,
        sleep=clock.sleep,
        random=lambda: 0.5,
        allocation=allocation,
    )
    return agent, scan


def stop_after(clock: FakeClock, agent: Agent, seconds: float) -> None:
    """Stop ``agent`` at its first sleep that would end ``seconds`` from now on ``clock``."""
    end = clock.now + seconds
    clock.on_sleep.append(lambda c, s: agent.stop() if c.now + s >= end else None)
