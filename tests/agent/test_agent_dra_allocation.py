"""The agent publishes the holders of GPUs held through DRA ResourceClaims: the kubelet's claim
devices joined through this node's ResourceSlices (``nodetopo.kubelet.allocation.with_slices``, as
``build_agent`` wires it), on the loop's fake clock. Slices that cannot be read make the allocation
Unknown with the reason; they are read only while the kubelet lists a GPU claim device."""

from __future__ import annotations

import functools

from agent.support import DGX_H100, FakeClock, FakePublisher, make_agent, stop_after
from agent.test_agent_allocation import ScriptedKubelet, held, holds
from nodetopo.kubelet.allocation import with_slices
from nodetopo.model import ClaimDevice, KubeletAllocation, PodRef, SliceDevice
from nodetopo.topology.discover import bundle_context, scan

GPUS = scan(bundle_context(DGX_H100)).topology.gpus
TRAIN = PodRef(namespace="ml", name="train", container="main")
SLICES = tuple(
    SliceDevice(driver="gpu.nvidia.com", pool="n", device=f"gpu-{g.index}", uuid=g.uuid) for g in GPUS
)
FORBIDDEN = (
    "list ResourceSlices (resource.k8s.io/v1): HTTP 403: "
    'resourceslices.resource.k8s.io is forbidden: User "system:serviceaccount:nodetopo:nodetopo-agent" '
    'cannot list resource "resourceslices"'
)


def claim_holds(*indices: int) -> KubeletAllocation:
    return KubeletAllocation(
        assignments=(),
        claim_devices=tuple(
            ClaimDevice(
                driver="gpu.nvidia.com", pool="n", device=f"gpu-{i}", claim="ml/train-gpus", holder=TRAIN
            )
            for i in indices
        ),
    )


class ScriptedSlices:
    def __init__(self, clock: FakeClock, answers: dict[float, tuple[SliceDevice, ...] | str]) -> None:
        self.clock, self.answers, self.calls = clock, sorted(answers.items()), 0

    def __call__(self) -> tuple[SliceDevice, ...] | str:
        self.calls += 1
        return [a for since, a in self.answers if self.clock.now >= since][-1]


def run_for(
    seconds: float,
    kubelet: dict[float, KubeletAllocation | str],
    slices: dict[float, tuple[SliceDevice, ...] | str],
) -> tuple[FakePublisher, ScriptedSlices]:
    clock, publisher = FakeClock(start=0.0), FakePublisher()
    reader = ScriptedSlices(clock, slices)
    ask = functools.partial(with_slices, ScriptedKubelet(clock, kubelet), reader)
    agent, _ = make_agent(clock, publisher, allocation=ask, allocation_interval_seconds=5.0)
    stop_after(clock, agent, seconds)
    assert agent.run() == 0
    return publisher, reader


def test_claim_held_gpus_are_published_in_held_by() -> None:
    publisher, _ = run_for(20, {0: claim_holds(2, 3)}, {0: SLICES})
    status = publisher.calls[0]["body"]["status"]
    assert status["allocation"]["state"] == "Known", status["allocation"]
    assert held(publisher.calls[0]["body"]) == {
        2: ["train"],
        3: ["train"],
        **{i: [] for i in (0, 1, 4, 5, 6, 7)},
    }
    assert {"name": "gpu.nvidia.com", "allocatable": 8, "allocated": 2} in status["allocation"]["resources"]


def test_unreadable_slices_are_unknown_with_the_reason_then_known_once_they_are_read() -> None:
    publisher, _ = run_for(60, {0: claim_holds(2, 3)}, {0: FORBIDDEN, 30: SLICES})
    bodies = [c["body"] for c in publisher.calls]
    first = bodies[0]["status"]
    assert first["allocation"]["state"] == "Unknown"
    message = first["allocation"]["message"]
    assert (
        "this node's ResourceSlices cannot be read: list ResourceSlices (resource.k8s.io/v1): HTTP 403"
        in message
    )
    assert all("heldBy" not in g for g in first["gpus"])  # unknown, never free
    last = bodies[-1]
    assert last["status"]["allocation"]["state"] == "Known"
    assert held(last)[2] == ["train"]


def test_slices_are_read_only_while_the_kubelet_lists_a_gpu_claim_device() -> None:
    publisher, reader = run_for(60, {0: holds(0), 30: claim_holds(1)}, {0: SLICES})
    calls_before_claims = 30 // 5 + 1
    assert 0 < reader.calls <= (60 - 30) // 5 + 1, reader.calls  # asked from t=30 on only
    assert held(publisher.calls[0]["body"])[0] == ["train"]
    assert held(publisher.calls[-1]["body"])[1] == ["train"] and held(publisher.calls[-1]["body"])[0] == []
    assert calls_before_claims > 0


def test_without_api_access_the_claim_held_gpus_stay_unknown() -> None:
    # the dry run has no API session: no slice reader, and the allocation says the slices are not read
    answer = with_slices(lambda: claim_holds(0), None)
    assert isinstance(answer, KubeletAllocation) and answer.slice_devices is None
