"""``nodetopo admit`` and the rules behind it, offline, on the one table of cases (cases.py) that
tests/kube/test_admission.py replays against the real API server."""

from __future__ import annotations

import copy
import datetime
import json
import re
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from admit.cases import CASES, SUMMARY_NAMES, USER_WORKLOADS, Case, manifest, summary, topology_of
from nodetopo.admission.controller import SummaryState, SummaryWriter
from nodetopo.admission.rules import GRAMMAR, Denial, check
from nodetopo.admission.summary import NO_NIC, Thresholds, node_facts, summarize, summarize_objects
from nodetopo.cli import main

REPO = Path(__file__).resolve().parents[2]
POLICIES = REPO / "deploy" / "admission" / "policies.yaml"
WORKLOAD_POLICIES = REPO / "deploy" / "admission" / "workload-policies.yaml"
NOW = datetime.datetime(2026, 6, 1, 12, 0, tzinfo=datetime.UTC)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_case(case: Case) -> None:
    obj = manifest(case, f"t-{case.id}", "team")
    denials = check(obj, summary(case.summary, NOW), now=NOW)
    assert denials == ([Denial(*case.expected)] if case.expected else [])


def test_the_table_covers_every_summary_and_both_outcomes() -> None:
    seen = Counter((c.summary, c.expected is None) for c in CASES)
    for name in SUMMARY_NAMES:
        assert seen[(name, True)] >= 1, f"no admitted case with summary {name}"
    assert {c.expected[0] for c in CASES if c.expected} == {
        "nodetopo-annotations",
        "nodetopo-topology",
        "nodetopo-workload-annotations",
        "nodetopo-workload-topology",
    }
    assert len({c.id for c in CASES}) == len(CASES)


def test_policies_carry_the_same_grammar() -> None:
    """Every policy lists exactly GRAMMAR (key, RE2 pattern, expected text), in GRAMMAR's order."""
    docs = [d for path in (POLICIES, WORKLOAD_POLICIES) for d in yaml.safe_load_all(path.read_text()) if d]
    assert len(docs) == 4
    expected = [[key, g.pattern, g.expected] for key, g in GRAMMAR.items()]
    for doc in docs:
        variables = {v["name"]: v["expression"] for v in doc["spec"]["variables"]}
        entries = re.findall(
            r"\['(nodetopo\.io/[^']+)', '((?:[^'\\]|\\.)*)',\s*'([^']*)'\]", variables["grammar"]
        )
        parsed = [[k, p.replace("\\\\", "\\"), e] for k, p, e in entries]
        assert parsed == expected, doc["metadata"]["name"]


def test_value_check_refuses_before_case_folding() -> None:
    """(?i) alone would let U+017F (long s) match 's' and U+212A (Kelvin) match 'k', in Python and RE2."""
    assert re.fullmatch(GRAMMAR["nodetopo.io/max-nic-distance"].pattern, "\u017fys")
    obj = manifest(Case("x", {"nodetopo.io/max-nic-distance": "\u017fys"}, None, gpus=1), "x", "ns")
    assert check(obj, None)[0].policy == "nodetopo-annotations"


def test_unquoted_annotation_value_is_a_manifest_error() -> None:
    obj = manifest(Case("x", {}, None, gpus=1), "x", "ns")
    obj["metadata"]["annotations"] = {"nodetopo.io/gpus-in-one-island": True}
    with pytest.raises(Exception, match="values must be strings"):
        check(obj, None)


# ---- the summary ---------------------------------------------------------------------------


def test_summary_of_the_mixed_fixture_cluster() -> None:
    body = summary("mixed", NOW)
    assert body is not None
    status = body["status"]
    assert status["computedAt"] == "2026-06-01T12:00:00Z"
    assert status["observedNodeTopologies"] == 4 and status["notReadyNodes"] == 0
    assert status["total"] == {
        "nodes": 4,
        "gpus": 8 + 4 + 8 + 2,
        "largestIsland": 8,
        "largestNUMAGroup": 6,
        "bestNICDistance": "PIX",
        "bestRDMANICDistance": "PIX",
        "rdmaNodes": 3,
        "rdmaLinkLayers": ["InfiniBand"],
    }
    models = {name: m for m in status["models"].values() for name in m["names"]}
    assert models["NVIDIA GeForce RTX 4090"]["bestNICDistance"] == NO_NIC
    assert models["NVIDIA GH200 480GB"]["bestNICDistance"] == "NODE"
    assert models["NVIDIA A100-PCIE-40GB"]["largestIsland"] == 2
    assert status["models"]["NVIDIA-A100-PCIE-40GB"] is models["NVIDIA A100-PCIE-40GB"]  # keyed by label
    assert sum(m["nodes"] for m in status["models"].values()) == 4
    assert "shapes" not in status  # the policies read total and models only
    assert body["spec"] == Thresholds().to_spec()


def test_identical_nodes_are_one_shape_and_mig_gpus_are_not_whole() -> None:
    mig = topology_of("a100-mig")
    h100 = topology_of("dgx-h100")
    facts = node_facts(mig["status"])
    assert facts.gpus == 2 and facts.largest_island == 2  # 2 of 4 GPUs have MIG enabled
    assert node_facts(h100["status"]) == node_facts(copy.deepcopy(h100)["status"])
    body = summarize_objects([h100, h100, mig], computed_at="2026-06-01T12:00:00Z")
    h100s = body["status"]["models"]["NVIDIA-H100-80GB-HBM3"]
    assert h100s["nodes"] == 2 and h100s["names"] == ["NVIDIA H100 80GB HBM3"]
    assert body["status"]["total"]["gpus"] == 8 + 8 + 2


def test_models_that_label_alike_are_one_entry() -> None:
    """issue 23: a node reporting ``!NVIDIA H100 80GB HBM3`` labels as the H100s do; the label's entry
    is every such node, merged, so the one node without an island cannot stand for the label."""
    h100 = topology_of("dgx-h100")
    odd = copy.deepcopy(topology_of("pcie-8x-2socket"))
    odd["status"]["summary"]["gpuModel"] = "!NVIDIA H100 80GB HBM3"
    body = summarize_objects([h100, h100, odd], computed_at="2026-06-01T12:00:00Z")
    assert list(body["status"]["models"]) == ["NVIDIA-H100-80GB-HBM3"]
    entry = body["status"]["models"]["NVIDIA-H100-80GB-HBM3"]
    assert entry["names"] == ["NVIDIA H100 80GB HBM3", "!NVIDIA H100 80GB HBM3"]  # most nodes first
    assert entry["nodes"] == 3 and entry["largestIsland"] == 8 and entry["largestNUMAGroup"] == 6


def test_no_facts_means_no_total() -> None:
    """An empty cache or objects without status: nothing is known, so the policies skip feasibility."""
    body = summarize_objects([{"metadata": {"name": "n"}}], computed_at="2026-06-01T12:00:00Z")
    assert body["status"]["observedNodeTopologies"] == 1
    assert "total" not in body["status"] and "models" not in body["status"]


def test_not_ready_nodes_are_counted_and_kept() -> None:
    body = topology_of("dgx1-v100")
    body["status"]["conditions"] = [{"type": "Ready", "status": "False", "reason": "ParseError"}]
    out = summarize_objects([body], computed_at="2026-06-01T12:00:00Z")
    assert out["status"]["notReadyNodes"] == 1 and out["status"]["total"]["largestIsland"] == 8


# ---- the controller's state and writer -----------------------------------------------------


def _topology(name: str, island: int, numa: int = 0) -> dict[str, Any]:
    gpus = [{"index": i, "island": 0, "numaNode": numa, "nics": []} for i in range(island)]
    return {"metadata": {"name": name}, "status": {"gpus": gpus, "summary": {"gpuModel": "X"}}}


def test_state_counts_distinct_facts_and_follows_changes() -> None:
    state = SummaryState()
    state.replace([SummaryState.compact(_topology(f"n{i}", 4)) for i in range(1000)])
    counts, observed = state.snapshot()
    assert observed == 1000 and list(counts.values()) == [1000]
    state.upsert(_topology("n1", 8))
    counts, _ = state.snapshot()
    assert sorted(counts.values()) == [1, 999]
    state.changed.clear()
    state.upsert(_topology("n1", 8))  # no change: no wake-up
    assert not state.changed.is_set()
    state.delete({"metadata": {"name": "n1"}})
    counts, observed = state.snapshot()
    assert observed == 999 and list(counts.values()) == [999] and state.changed.is_set()


def test_writer_writes_on_change_and_on_heartbeat_only() -> None:
    state = SummaryState()
    state.replace([SummaryState.compact(_topology("a", 4))])
    written: list[dict[str, Any]] = []
    writer = SummaryWriter(state, written.append, thresholds=Thresholds(), heartbeat_s=3600)
    assert writer.write_once() and not writer.write_once()  # unchanged: skipped
    state.upsert(_topology("b", 8))
    assert writer.write_once()
    assert [w["status"]["total"]["largestIsland"] for w in written] == [4, 8]
    writer.heartbeat_s = 0
    assert writer.write_once()  # heartbeat due: computedAt refreshed even without a change


def test_writer_waits_for_the_first_list() -> None:
    state = SummaryState()
    written: list[dict[str, Any]] = []
    stop = threading.Event()
    writer = SummaryWriter(state, written.append, thresholds=Thresholds(), debounce_s=0.01, stop=stop)
    thread = threading.Thread(target=writer.run)
    thread.start()
    stop.wait(0.7)
    assert written == []  # not synced: an empty cache must not be published as "the cluster has nothing"
    state.replace([SummaryState.compact(_topology("a", 4))])
    state.synced.set()
    for _ in range(100):
        if written:
            break
        stop.wait(0.05)
    stop.set()
    state.changed.set()
    thread.join(5)
    assert written and written[0]["status"]["total"]["largestIsland"] == 4


def test_summarize_caps_models_keeping_the_most_nodes() -> None:
    from nodetopo.admission.summary import MAX_MODELS, NodeFacts

    facts = {NodeFacts(f"M{i:05d}", 8, 8, 4, None, None, False, (), True): 1 for i in range(MAX_MODELS + 10)}
    facts[NodeFacts("Z big", 8, 8, 4, None, None, False, (), True)] = 50
    body = summarize(facts, computed_at="2026-06-01T12:00:00Z", thresholds=Thresholds(), observed=len(facts))
    models = body["status"]["models"]
    assert len(models) == MAX_MODELS and body["status"]["modelsOmitted"] == 11
    assert "Z-big" in models and "M00000" in models and f"M{MAX_MODELS + 9:05d}" not in models


# ---- the command (cli_logging: conftest.py) ---------------------------------------------


def _write(path: Path, docs: list[Any]) -> Path:
    path.write_text(yaml.safe_dump_all(docs))
    return path


def test_admit_command(tmp_path: Path, capsys: pytest.CaptureFixture[str], cli_logging: Any) -> None:
    now = datetime.datetime.now(datetime.UTC)
    summary_file = _write(tmp_path / "summary.yaml", [summary("mixed", now)])
    ok = next(c for c in CASES if c.id == "island-8-fits")
    bad = next(c for c in CASES if c.id == "island-16-too-big")
    good = _write(tmp_path / "good.yaml", [manifest(ok, "ok", "team")])
    both = _write(
        tmp_path / "both.yaml",
        [{"kind": "List", "items": [manifest(ok, "ok", "team"), manifest(bad, "bad", "team")]}],
    )
    assert main(["admit", str(good), "--summary", str(summary_file)]) == 0
    assert capsys.readouterr().out == "Pod/team/ok: admitted\n"
    assert main(["admit", str(both), "--summary", str(summary_file), "-o", "json"]) == 3
    out = json.loads(capsys.readouterr().out)
    assert out[1] == {
        "object": "Pod/team/bad",
        "admitted": False,
        "denials": [{"policy": "nodetopo-topology", "message": bad.expected[1]}],  # type: ignore[index]
    }


def test_admit_command_on_workloads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cli_logging: Any
) -> None:
    """A RayCluster as a user writes it (three worker groups beside a CPU head), a RayJob that attaches
    to an existing cluster (nothing to judge: it creates no pods) and a JobSet: each group judged as a
    pod template with its count, the messages naming the group."""
    summary_file = _write(tmp_path / "summary.yaml", [summary("mixed", datetime.datetime.now(datetime.UTC))])
    manifests = tmp_path / "ray.yaml"
    manifests.write_text(USER_WORKLOADS)
    assert main(["admit", str(manifests), "--summary", str(summary_file)]) == 3
    assert capsys.readouterr().out.splitlines() == [
        "RayCluster/team/train: refused by nodetopo-workload-topology: "
        'worker group "rdma": container "ray-worker" requests rdma/hca_shared_devices_a but the pod does not '
        "declare nodetopo.io/rdma; "
        'worker group "big": the group runs 6 pods of 8 GPUs (48) at once but there are 22 whole GPUs in '
        "the cluster",
        "RayJob/team/attach: admitted",
        "JobSet/team/sweep: refused by nodetopo-workload-annotations: "
        'replicated job "workers": nodetopo.io/numa-aligned: expected true or false, got " true" '
        "(spaces are not allowed)",
    ]


@pytest.mark.parametrize(
    ("edit", "complaint"),
    [
        (
            ("replicas: 2", "replicas: two"),
            "RayCluster/team/train: worker group small: replicas: expected a whole",
        ),
        (
            ("numOfHosts: 2", "numOfHosts: -2"),
            "worker group big: numOfHosts: expected a whole number, got -2",
        ),
        (("parallelism: 2", "parallelism: 1.5"), "replicated job workers: parallelism: expected a whole"),
    ],
)
def test_admit_bad_group_counts_exit_2(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    cli_logging: Any,
    edit: tuple[str, str],
    complaint: str,
) -> None:
    summary_file = _write(tmp_path / "summary.yaml", [summary("mixed", NOW)])
    manifests = tmp_path / "ray.yaml"
    manifests.write_text(USER_WORKLOADS.replace(*edit, 1))
    assert main(["admit", str(manifests), "--summary", str(summary_file)]) == 2
    assert complaint in capsys.readouterr().err


def test_admit_from_nodetopology_objects(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cli_logging: Any
) -> None:
    topologies = _write(tmp_path / "ntopo.yaml", [{"kind": "List", "items": [topology_of("gh200-nvl")]}])
    case = next(c for c in CASES if c.id == "gh200-nic-pix")
    pod = _write(tmp_path / "pod.yaml", [manifest(case, "p", "team")])
    assert main(["admit", str(pod), "--nodetopologies", str(topologies)]) == 3
    assert capsys.readouterr().out == f"Pod/team/p: refused by nodetopo-topology: {case.expected[1]}\n"  # type: ignore[index]


def test_admit_bad_input_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cli_logging: Any
) -> None:
    summary_file = _write(tmp_path / "s.yaml", [summary("mixed", NOW)])
    service = _write(
        tmp_path / "svc.yaml", [{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}}]
    )
    assert main(["admit", str(service), "--summary", str(summary_file)]) == 2
    assert "no Pod, Job (batch/v1), RayCluster, RayJob (ray.io), JobSet" in capsys.readouterr().err
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: Pod\n  metadata: [\n")
    assert main(["admit", str(broken), "--summary", str(summary_file)]) == 2
    assert main(["admit", str(tmp_path / "absent.yaml"), "--summary", str(summary_file)]) == 2


class _FakeStream:
    def __init__(self, status: int, payload: bytes) -> None:
        self.status, self.reason, self.payload, self.closed = (
            status,
            "OK" if status == 200 else "Gone",
            payload,
            False,
        )

    def read(self) -> bytes:
        return self.payload

    def chunks(self, size: int = 65536) -> Any:
        yield from (self.payload[i : i + 3] for i in range(0, len(self.payload), 3))

    def close(self) -> None:
        self.closed = True


class _FakeConnection:
    def __init__(self, *answers: _FakeStream) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[str, dict[str, str], float | None]] = []

    def stream(self, path: str, *, query: dict[str, str], timeout: float | None = None) -> _FakeStream:
        self.calls.append((path, query, timeout))
        return self.answers.pop(0)


def test_list_function_speaks_the_reflectors_protocol() -> None:
    """The controller lists and watches over the standard-library client with the reflector's
    (official client's) keyword arguments; a non-2xx answer carries its status (410 means relist)."""
    from nodetopo.kube.errors import ApiStatusError
    from nodetopo.kube.reflector import list_function

    page = _FakeStream(200, b'{"items": []}')
    watch = _FakeStream(200, b'{"type":"ADDED"}\n')
    gone = _FakeStream(410, b'{"kind":"Status","code":410}')
    connection = _FakeConnection(page, watch, gone)
    list_func = list_function(connection, "/apis/nodetopo.io/v1alpha1/nodetopologies")
    assert json.loads(list_func(limit=100, _continue=None, _request_timeout=(10.0, 60.0)).data) == {
        "items": []
    }
    assert page.closed
    response = list_func(
        watch=True, resource_version="42", timeout_seconds=300, _request_timeout=(10.0, 330.0)
    )
    assert b"".join(response.stream(65536)) == b'{"type":"ADDED"}\n'
    response.release_conn()
    with pytest.raises(ApiStatusError) as info:
        list_func(limit=100)
    assert info.value.status == 410 and gone.closed
    assert connection.calls[0] == ("/apis/nodetopo.io/v1alpha1/nodetopologies", {"limit": "100"}, 60.0)
    assert connection.calls[1][1] == {
        "resourceVersion": "42",
        "timeoutSeconds": "300",
        "watch": "true",
        "allowWatchBookmarks": "true",
    }


def test_commands_are_listed_and_import_no_official_client() -> None:
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "nodetopo", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert re.search(r"^ +admit ", out, re.M) and re.search(r"^ +summary-controller\b", out, re.M)
    modules = "nodetopo.admission.controller, nodetopo.admission.rules"
    probe = f"import sys, {modules}; print('kubernetes' in sys.modules)"
    assert (
        subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
        == "False\n"
    )


def test_rdma_nics_with_unknown_link_layer_serve_rdma_required() -> None:
    """As the extender's filter: a usable RDMA NIC whose link layer is not reported still serves
    rdma: required, and its layer is 'Unknown', never read as 'not Ethernet'."""
    body = topology_of("gh200-nvl")
    for nic in body["status"]["nics"]:
        nic.pop("linkLayer", None)
    facts = node_facts(body["status"])
    assert facts.rdma and facts.rdma_layers == ("Unknown",)
    total = summarize_objects([body], computed_at="2026-06-01T12:00:00Z")["status"]["total"]
    assert total["rdmaNodes"] == 1 and total["rdmaLinkLayers"] == ["Unknown"]
