"""``nodetopo expect --job`` / ``--raycluster``: which pods make a workload's gang (the labels its
controller sets, finished pods left out, a RayCluster's GPU-less head left out) and the band for the
whole gang, placed as ``accept --pod`` places a pod, or refused naming every pod that cannot be placed;
through a session that answers as the API server does (the real one: tests/kube/test_expect_workload.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from nodetopo.cli import main
from nodetopo.delivery import cli as delivery_cli
from nodetopo.delivery.pods import Workload, gang_of, parse_workload_ref, places_of, read_gang
from nodetopo.errors import BundleError
from tests.expect.test_delivery_pods import FakeSession, nodetopology, pod

JOB = Workload(kind="Job", namespace="ml", name="allreduce")
RAY = Workload(kind="RayCluster", namespace="ml", name="train")


def labelled(ref: str, node: str | None, labels: dict[str, str], **extra: Any) -> dict[str, Any]:
    out = pod(ref, node)
    out["metadata"]["labels"] = labels
    out.update(extra)
    return out


def names(pods: list[Any]) -> list[str]:
    return [p["metadata"]["name"] for p in pods]


def test_a_jobs_gang_is_its_pods_by_either_job_label_finished_ones_said() -> None:
    new = {"batch.kubernetes.io/job-name": "allreduce", "job-name": "allreduce"}
    listed = [
        labelled("ml/allreduce-1", "node-b", new),
        labelled("ml/allreduce-0", "node-a", new),
        labelled("ml/allreduce-0", "node-a", new),  # listed by both selectors
        labelled("ml/legacy-2", None, {"job-name": "allreduce"}),  # before Kubernetes 1.27
        labelled("ml/allreduce-x", "node-a", new, status={"phase": "Failed"}),
        labelled("ml/other-0", "node-a", {"batch.kubernetes.io/job-name": "other"}),
        labelled("dev/allreduce-0", "node-a", new),  # another namespace's Job of that name
    ]
    gang, left = gang_of(JOB, listed)
    assert names(gang) == ["allreduce-0", "allreduce-1", "legacy-2"]
    assert left == ["pod ml/allreduce-x: Failed, it holds no GPU"]
    assert JOB.selectors == ("batch.kubernetes.io/job-name=allreduce", "job-name=allreduce")


def test_a_rayclusters_gang_is_its_workers_and_its_head_only_when_it_asks_for_gpus() -> None:
    def spec(gpus: int) -> dict[str, Any]:
        limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
        return {"nodeName": "node-a", "containers": [{"name": "ray", "resources": {"limits": limits}}]}

    cluster = {"ray.io/cluster": "train"}
    head = labelled("ml/train-head", "node-a", {**cluster, "ray.io/node-type": "head"}, spec=spec(0))
    worker = labelled("ml/train-gpu-w1", "node-b", {**cluster, "ray.io/node-type": "worker"}, spec=spec(0))
    other = labelled("ml/eval-gpu-w0", "node-a", {"ray.io/cluster": "eval", "ray.io/node-type": "worker"})
    gang, left = gang_of(RAY, [head, worker, other])
    # a worker counts even when its spec asks for no GPU: heldBy then refuses it, never a silent drop
    assert names(gang) == ["train-gpu-w1"]
    assert left == ["pod ml/train-head: head, it asks for no GPU"]
    head["spec"] = spec(8)
    gang, left = gang_of(RAY, [head, worker, other])
    assert names(gang) == ["train-gpu-w1", "train-head"] and left == []
    assert RAY.selectors == ("ray.io/cluster=train",)


def test_a_workload_ref_is_namespace_slash_name() -> None:
    assert parse_workload_ref("Job", "ml/a") == Workload(kind="Job", namespace="ml", name="a")
    assert parse_workload_ref("RayCluster", "a").namespace == "default"
    with pytest.raises(BundleError, match=r"--raycluster 'ml/a/b': expected NAMESPACE/NAME"):
        parse_workload_ref("RayCluster", "ml/a/b")


class ListingSession(FakeSession):
    """``FakeSession`` that also lists pods by an equality label selector, as the API server does."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.selectors: list[str] = []

    def list_pods(self, namespace: str, label_selector: str) -> dict[str, Any]:
        self.selectors.append(label_selector)
        key, _, value = label_selector.partition("=")
        items = [
            p
            for (ns, _), p in sorted(self.pods.items())
            if ns == namespace and (p["metadata"].get("labels") or {}).get(key) == value
        ]
        return {"kind": "PodList", "items": items}


@pytest.fixture
def job(monkeypatch: pytest.MonkeyPatch) -> ListingSession:
    """A Job's two pods, each holding the 8 GPUs of its node."""
    labels = {"batch.kubernetes.io/job-name": "allreduce", "job-name": "allreduce"}
    session = ListingSession(
        [labelled("ml/allreduce-0", "node-a", labels), labelled("ml/allreduce-1", "node-b", labels)],
        [
            nodetopology("node-a", {i: ["ml/allreduce-0"] for i in range(8)}),
            nodetopology("node-b", {i: ["ml/allreduce-1"] for i in range(8)}),
        ],
    )
    monkeypatch.setattr(delivery_cli, "_session", lambda args: session)
    return session


def test_expect_job_gives_the_band_of_the_whole_gang(
    job: ListingSession, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["expect", "--job", "ml/allreduce", "-o", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ranks"] == 16 and report["nodes"] == ["node-a", "node-b"]
    assert [(p["pod"], p["node"], p["gpus"], p["gpusFrom"]) for p in report["pods"]] == [
        ("ml/allreduce-0", "node-a", list(range(8)), "heldBy"),
        ("ml/allreduce-1", "node-b", list(range(8)), "heldBy"),
    ]
    assert job.selectors == ["batch.kubernetes.io/job-name=allreduce", "job-name=allreduce"]
    assert job.closed and job.events == []
    # the same gang named pod by pod: the same band
    assert main(["expect", "--pod", "ml/allreduce-0", "--pod", "ml/allreduce-1", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["busbw"] == report["busbw"]
    assert main(["expect", "--job", "ml/allreduce"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("all_reduce over 16 GPUs on 2 nodes")
    assert "pod ml/allreduce-1: node-b GPU(s) 0,1,2,3,4,5,6,7 (heldBy)" in out


def test_expect_job_refuses_a_smaller_gang_naming_every_pod_it_cannot_place(
    job: ListingSession, capsys: pytest.CaptureFixture[str]
) -> None:
    job.pods[("ml", "allreduce-0")]["spec"] = {}
    assert main(["expect", "--job", "ml/allreduce"]) == 2
    err = capsys.readouterr().err
    assert "pod ml/allreduce-0: not scheduled to a node" in err and "allreduce-1" not in err
    for gpu in job.nts["node-b"]["status"]["gpus"]:
        gpu["heldBy"] = []
    assert main(["expect", "--job", "ml/allreduce"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("nodetopo: 2 of 2 pods cannot be placed: pod ml/allreduce-0: not scheduled")
    assert "NodeTopology/node-b lists no GPU held by pod ml/allreduce-1" in err
    assert main(["expect", "--job", "ml/nothing"]) == 2
    assert (
        "Job ml/nothing: no pod to place (listed by batch.kubernetes.io/job-name=nothing or job-name=nothing)"
        in capsys.readouterr().err
    )


def test_read_gang_says_what_it_left_out_when_nothing_is_left() -> None:
    done = labelled("ml/a-0", "node-a", {"job-name": "a"}, status={"phase": "Succeeded"})
    session = ListingSession([done], [])
    with pytest.raises(BundleError, match=r"Job ml/a: no pod to place .*\(pod ml/a-0: Succeeded, it holds"):
        read_gang(session, Workload(kind="Job", namespace="ml", name="a"))
    assert places_of(session, [], {}, {}) == []
