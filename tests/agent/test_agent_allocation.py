"""The agent asks the kubelet which pod holds each GPU between scans, and publishes only on change.

The kubelet's answers are scripted (``ScriptedKubelet``), on the fake clock of the loop tests: the
holders land in ``status.gpus[].heldBy``, an unchanged answer writes nothing, a changed one writes
the NodeTopology only (the labels are not observed again), and an unreachable kubelet makes the
allocation Unknown, never "all free".
"""

from __future__ import annotations

from agent.support import DGX_H100, FakeClock, FakePublisher, make_agent, stop_after
from nodetopo.agent.loop import Agent
from nodetopo.model import DeviceAssignment, KubeletAllocation, PodRef
from nodetopo.topology.discover import bundle_context, scan

UUIDS = {g.index: g.uuid for g in scan(bundle_context(DGX_H100)).topology.gpus}
TRAIN = PodRef(namespace="ml", name="train", container="main")


def holds(*indices: int, holder: PodRef = TRAIN) -> KubeletAllocation:
    return KubeletAllocation(
        assignments=tuple(
            DeviceAssignment(resource="nvidia.com/gpu", device_id=str(UUIDS[i]), holder=holder)
            for i in indices
        ),
        allocatable=(("nvidia.com/gpu", tuple(sorted(str(u) for u in UUIDS.values()))),),
    )


class ScriptedKubelet:
    """Answers ``answers[t]`` from time ``t`` on (a str is a failure's reason); counts the calls."""

    def __init__(self, clock: FakeClock, answers: dict[float, KubeletAllocation | str]) -> None:
        self.clock = clock
        self.answers = sorted(answers.items())
        self.calls = 0

    def __call__(self) -> KubeletAllocation | str:
        self.calls += 1
        current = self.answers[0][1]
        for since, answer in self.answers:
            if self.clock.now >= since:
                current = answer
        return current


def run_for(
    seconds: float, answers: dict[float, KubeletAllocation | str] | None
) -> tuple[Agent, FakePublisher, ScriptedKubelet | None, FakeClock]:
    """Run the agent on the fake clock for ``seconds``; ``answers`` None: no kubelet is asked."""
    clock, publisher = FakeClock(start=0.0), FakePublisher()
    kubelet = ScriptedKubelet(clock, answers) if answers is not None else None
    agent, _ = make_agent(clock, publisher, allocation=kubelet, allocation_interval_seconds=5.0)
    stop_after(clock, agent, seconds)
    assert agent.run() == 0
    return agent, publisher, kubelet, clock


def held(body: dict[str, object]) -> dict[int, list[str]]:
    status = body["status"]
    assert isinstance(status, dict)
    return {g["index"]: [h["name"] for h in g["heldBy"]] for g in status["gpus"] if "heldBy" in g}


def test_holders_are_published_and_an_unchanged_answer_writes_nothing() -> None:
    _, publisher, kubelet, _ = run_for(50, {0: holds(0, 1)})
    first = publisher.calls[0]["body"]
    assert held(first) == {0: ["train"], 1: ["train"], **{i: [] for i in range(2, 8)}}
    assert first["status"]["allocation"]["state"] == "Known"
    assert kubelet.calls >= 9  # asked every 5 s for 50 s
    assert publisher.writes == ["nodetopology", "labels"]  # nothing after the first publish
    assert publisher.topology_only == []


def test_a_new_pod_between_scans_is_published_within_the_allocation_interval() -> None:
    other = PodRef(namespace="ml", name="eval", container="main")
    changed = KubeletAllocation(
        assignments=holds(0, 1).assignments
        + tuple(
            DeviceAssignment(resource="nvidia.com/gpu", device_id=str(UUIDS[i]), holder=other) for i in (4, 5)
        ),
        allocatable=holds().allocatable,
    )
    agent, publisher, _, _ = run_for(50, {0: holds(0, 1), 12: changed})
    assert [o.written for o in publisher.topology_only] == [True]
    update = next(c for c in publisher.calls if c["labels"] is None)["body"]
    assert held(update)[4] == ["eval"] and held(update)[0] == ["train"]
    allocation_outcomes = [o for o in agent.outcomes if o.trigger == "allocation"]
    assert len(allocation_outcomes) == 1 and allocation_outcomes[0].written == ("nodetopology",)
    # the labels were observed once per scan only (t=0), not on the allocation change
    assert sum(1 for c in publisher.calls if c["labels"] is not None) == 1


def test_an_unreachable_kubelet_is_unknown_never_free() -> None:
    """Failing longer than the grace (60 s): Unknown, with the reason, and no heldBy at all."""
    reason = (
        "kubelet.podresources: no kubelet PodResources socket at /var/lib/kubelet/pod-resources/kubelet.sock"
    )
    _, publisher, _, _ = run_for(200, {0: holds(0), 20: reason, 140: holds(0)})
    bodies = [c["body"] for c in publisher.calls if c["labels"] is None or c is publisher.calls[0]]
    states = [b["status"]["allocation"]["state"] for b in bodies]
    assert states == ["Known", "Unknown", "Known"]
    unknown = bodies[1]["status"]
    assert reason in unknown["allocation"]["message"]
    assert all("heldBy" not in g for g in unknown["gpus"])


def test_a_kubelet_restart_within_the_grace_writes_nothing() -> None:
    """The kubelet's socket is gone for 25 s (a restart) and its answer is the same afterwards: the
    last answer stays published, so neither an Unknown nor a second write happens (the real-node
    test of a containerd + kubelet restart asserts zero writes)."""
    reason = "kubelet.podresources: nothing listens on /var/lib/kubelet/pod-resources/kubelet.sock"
    agent, publisher, kubelet, _ = run_for(100, {0: holds(0, 1), 20: reason, 45: holds(0, 1)})
    assert kubelet is not None and kubelet.calls >= 18
    assert publisher.writes == ["nodetopology", "labels"] and publisher.topology_only == []
    failed = [o for o in agent.outcomes if o.trigger == "allocation"]
    assert failed == []  # nothing changed, so no allocation publish at all


def test_without_a_socket_nothing_is_asked_and_nothing_is_said() -> None:
    _, publisher, _, clock = run_for(100, None)
    assert "allocation" not in publisher.calls[0]["body"]["status"]
    assert clock.slept[1:] == [60.0]  # woken for scans only


def test_the_allocation_is_in_the_metrics() -> None:
    from prometheus_client import generate_latest

    from nodetopo.agent.metrics import make_registry

    reason = "kubelet.podresources: no kubelet PodResources socket at /x"
    agent, _, _, _ = run_for(150, {0: holds(0, 1), 12: holds(0, 1, 2), 30: reason})
    text = generate_latest(make_registry(agent.stats, process=False)).decode()
    assert "nodetopo_gpu_allocation_known 0.0" in text  # the last answer failed
    assert "nodetopo_gpus_held" in text and "nodetopo_gpus_held 3.0" not in text  # unknown: no sample
    assert 'nodetopo_allocation_checks_total{result="changed"} 1.0' in text
    assert 'nodetopo_allocation_checks_total{result="failed"}' in text
    assert 'nodetopo_allocation_checks_total{result="unchanged"}' in text
