"""``nodetopo accept --pod``: where a pod ran (its node, the GPUs its NodeTopology says the kubelet
handed it), the need it declares (``nodetopo.io/min-busbw``) and the Event the verdict leaves on it;
through a session that answers as the API server does (the real one: tests/kube/test_accept_pod.py)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from nodetopo.cli import main
from nodetopo.delivery import cli as delivery_cli
from nodetopo.delivery.pods import declared_need, event, merged, place_of
from nodetopo.errors import BundleError, ForbiddenError
from nodetopo.resource.body import to_nodetopology
from tests.expect.machines import hgx

H100 = "NVIDIA H100 80GB HBM3"


def nodetopology(node: str, holders: dict[int, list[str]] | None, state: str = "Known") -> dict[str, Any]:
    """An 8 × H100 NodeTopology whose GPUs are held as ``holders`` says (index -> ``ns/name``);
    None: no ``status.allocation`` at all (an agent that does not ask its kubelet)."""
    obj = copy.deepcopy(to_nodetopology(hgx(H100), node))
    if holders is not None:
        obj["status"]["allocation"] = {"state": state, "source": "kubelet-podresources", "message": "m"}
        for gpu in obj["status"]["gpus"]:
            gpu["heldBy"] = [
                {"namespace": ref.split("/")[0], "name": ref.split("/")[1], "container": "c"}
                for ref in holders.get(gpu["index"], [])
            ]
    return obj


def pod(ref: str, node: str | None, annotations: dict[str, Any] | None = None) -> dict[str, Any]:
    namespace, name = ref.split("/")
    metadata: dict[str, Any] = {"namespace": namespace, "name": name, "uid": f"uid-{name}"}
    if annotations is not None:
        metadata["annotations"] = annotations
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"nodeName": node} if node else {},
    }


def test_a_pods_gpus_are_the_ones_its_nodetopology_says_the_kubelet_handed_it() -> None:
    nt = nodetopology("node-a", {0: ["ml/w-0"], 1: ["ml/w-0"], 2: ["ml/other"], 5: ["ml/w-0"]})
    place = place_of(pod("ml/w-0", "node-a", {"nodetopo.io/min-busbw": "400"}), nt)
    assert (place.node, place.gpus, place.gpus_from, place.min_busbw) == (
        "node-a",
        (0, 1, 5),
        "heldBy",
        400.0,
    )
    assert place.uid == "uid-w-0"
    given = place_of(pod("ml/w-0", "node-a"), nt, {"node-a": (3, 4)})
    assert (given.gpus, given.gpus_from, given.min_busbw) == ((3, 4), "--gpus", None)


@pytest.mark.parametrize(
    ("nt", "message"),
    [
        (nodetopology("node-a", None), "does not say who holds its GPUs"),
        (nodetopology("node-a", {}, "Unknown"), "allocation Unknown: m"),
        (nodetopology("node-a", {0: ["ml/other"]}), "lists no GPU held by pod ml/w-0"),
    ],
)
def test_gpus_the_api_cannot_tell_need_gpus_on_the_command_line(nt: dict[str, Any], message: str) -> None:
    with pytest.raises(BundleError) as e:
        place_of(pod("ml/w-0", "node-a"), nt)
    assert message in str(e.value) and "give --gpus node-a=LIST" in str(e.value)


def test_a_pod_not_scheduled_or_with_a_bad_need_is_refused() -> None:
    nt = nodetopology("node-a", {0: ["ml/w-0"]})
    with pytest.raises(BundleError, match="not scheduled to a node"):
        place_of(pod("ml/w-0", None), nt)
    with pytest.raises(BundleError, match=r"pod ml/w-0: nodetopo.io/min-busbw: expected a positive number"):
        place_of(pod("ml/w-0", "node-a", {"nodetopo.io/min-busbw": "fast"}), nt)


def test_a_gangs_pods_add_up_per_node_and_the_highest_need_counts() -> None:
    nt = nodetopology("node-a", {0: ["ml/a"], 1: ["ml/b"], 2: ["ml/b"]})
    a = place_of(pod("ml/a", "node-a", {"nodetopo.io/min-busbw": "300"}), nt)
    b = place_of(pod("ml/b", "node-a", {"nodetopo.io/min-busbw": "350.5"}), nt)
    c = place_of(pod("ml/c", "node-b"), {}, {"node-b": None})
    assert merged([a, b, c]) == {"node-a": (0, 1, 2), "node-b": None}
    assert declared_need([a, b, c]) == (350.5, "nodetopo.io/min-busbw of pod ml/b")
    assert declared_need([c]) == (None, "")


def test_the_event_says_the_verdict_word_normal_only_for_passed() -> None:
    place = place_of(pod("ml/w-0", "node-a"), nodetopology("node-a", {0: ["ml/w-0"]}))
    passed = event(place, "Passed", "log: 467 GB/s is within")
    assert (passed["reason"], passed["type"], passed["metadata"]["namespace"]) == ("Passed", "Normal", "ml")
    assert passed["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "w-0",
        "namespace": "ml",
        "uid": "uid-w-0",
    }
    for word in ("PlacedWrong", "ResourceNotReal", "HarnessError"):
        warned = event(place, word, "a\nb")
        assert (warned["reason"], warned["type"]) == (word, "Warning") and "\n" not in warned["message"]


class FakeSession:
    """The calls ``accept --pod`` makes, answered from dicts as the API server would."""

    def __init__(self, pods: list[dict[str, Any]], nodetopologies: list[dict[str, Any]]) -> None:
        self.pods = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in pods}
        self.nts = {n["metadata"]["name"]: n for n in nodetopologies}
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.refuse_events = False
        self.closed = False

    def read_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.pods.get((namespace, name))

    def read_cluster_object(self, group: str, version: str, plural: str, name: str) -> dict[str, Any] | None:
        assert (group, plural) == ("nodetopo.io", "nodetopologies")
        return self.nts.get(name)

    def create_event(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        if self.refuse_events:
            raise ForbiddenError("create Event in ml: forbidden")
        self.events.append((namespace, body))
        return body

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def gang(monkeypatch: pytest.MonkeyPatch) -> FakeSession:
    """Two pods, each holding the 8 GPUs of its node; the second declares it needs 600 GB/s."""
    session = FakeSession(
        [pod("ml/w-0", "node-a"), pod("ml/w-1", "node-b", {"nodetopo.io/min-busbw": "600"})],
        [nodetopology("node-a", {i: ["ml/w-0"] for i in range(8)}), nodetopology("node-b", {})],
    )
    for gpu in session.nts["node-b"]["status"]["gpus"]:
        gpu["heldBy"] = [{"namespace": "ml", "name": "w-1", "container": "c"}]
    monkeypatch.setattr(delivery_cli, "_session", lambda args: session)
    return session


@pytest.mark.corpus
def test_accept_pod_judges_where_the_pods_ran_by_their_own_need(
    gang: FakeSession, corpus: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nebius's 2 × 8 H100 run, 467 GB/s: inside the band, below the 600 GB/s the pod declares."""
    log = str(corpus / "perf" / "nebius-h100-2x8-ib-k8s-tail.txt")
    code = main(["accept", log, "--pod", "ml/w-0", "--pod", "ml/w-1", "-o", "json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 4 and report["verdict"] == "PlacedWrong", report
    result = report["results"][0]
    assert "the workload needs 600 GB/s" in result["reason"]
    assert "the need, 600 GB/s: nodetopo.io/min-busbw of pod ml/w-1" in result["notes"]
    assert result["expectation"]["ranks"] == 16 and result["expectation"]["nodes"] == ["node-a", "node-b"]
    assert [(p["pod"], p["node"], p["gpus"], p["gpusFrom"]) for p in report["pods"]] == [
        ("ml/w-0", "node-a", list(range(8)), "heldBy"),
        ("ml/w-1", "node-b", list(range(8)), "heldBy"),
    ]
    assert [(ns, e["involvedObject"]["name"], e["reason"], e["type"]) for ns, e in gang.events] == [
        ("ml", "w-0", "PlacedWrong", "Warning"),
        ("ml", "w-1", "PlacedWrong", "Warning"),
    ]
    assert "the workload needs 600 GB/s" in gang.events[0][1]["message"] and gang.closed
    # the flag over the annotation: what the operator says it needs
    gang.events.clear()
    code = main(["accept", log, "--pod", "ml/w-0", "--pod", "ml/w-1", "--min-busbw", "400"])
    out = capsys.readouterr().out
    assert code == 0 and ": Passed: 467.28 GB/s" in out and "pod ml/w-1: node-b GPU(s) 0,1,2" in out
    assert [(e["reason"], e["type"]) for _, e in gang.events] == [("Passed", "Normal")] * 2


@pytest.mark.corpus
def test_accept_pod_says_why_it_cannot_place_or_post(
    gang: FakeSession, corpus: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = str(corpus / "perf" / "nebius-h100-2x8-ib-k8s-tail.txt")
    assert main(["accept", log, "--pod", "ml/gone"]) == 2
    assert "nodetopo: pod ml/gone: not found" in capsys.readouterr().err
    gang.pods[("ml", "w-0")]["spec"]["nodeName"] = "node-z"
    assert main(["accept", log, "--pod", "ml/w-0"]) == 2
    assert "ran on node node-z, which has no NodeTopology" in capsys.readouterr().err
    gang.pods[("ml", "w-0")]["spec"]["nodeName"] = "node-a"
    gang.nts["node-a"]["status"].pop("allocation")
    assert main(["accept", log, "--pod", "ml/w-0", "--pod", "ml/w-1"]) == 2
    err = capsys.readouterr().err
    assert (
        "the GPUs pod ml/w-0 holds cannot be known from the API" in err and "give --gpus node-a=LIST" in err
    )
    assert (
        main(
            [
                "accept",
                log,
                "--pod",
                "ml/w-0",
                "--pod",
                "ml/w-1",
                "--gpus",
                "node-a=all",
                "--gpus",
                "node-z=0",
            ]
        )
        == 2
    )
    assert "--gpus node-z: no --pod ran on that node" in capsys.readouterr().err
    # --gpus for the node whose object cannot say; an Event refused is said, the verdict's code kept
    gang.refuse_events = True
    code = main(["accept", log, "--pod", "ml/w-0", "--pod", "ml/w-1", "--gpus", "node-a=all"])
    out, err = capsys.readouterr()
    assert code == 4 and "PlacedWrong" in out and "pod ml/w-0: node-a GPU(s) all (--gpus)" in out
    assert "the Event on pod ml/w-0 was not posted: create Event in ml: forbidden" in err
    gang.refuse_events = False
    assert (
        main(["accept", log, "--pod", "ml/w-0", "--pod", "ml/w-1", "--gpus", "node-a=all", "--no-event"]) == 4
    )
    assert not gang.events and "Event not posted (--no-event)" in capsys.readouterr().out
