"""deploy/ on a real node: ``kubectl apply -k`` of an overlay that changes only what the harness
cannot provide (pull policy Never: no registry; the API server's address as the pod sees it: no
kube-proxy), a real kubelet starting the agent from the image built by image/build_oci.py.

The tests run in file order on one DaemonSet (module fixture); each leaves the agent Ready.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from monitoring.promtool import expr_tests_file, input_series_from_scrape, series_of
from monitoring.promtool import run as promtool

from nodetopo.publish.node_labels import owned_label_keys
from nodetopo.publish.ownership import REASON
from nodetopo.resource.conditions import condition_type

from .agent import (
    AGENT_USER,
    NAMESPACE,
    NODE_NAME_EXTRA,
    WRITES,
    Agent,
    bearer,
    is_ready,
    is_running_unready,
    jwt_claims,
    label_managers,
    normalized,
    write_overlay,
)
from .node import LocalNode

pytestmark = [pytest.mark.k8s, pytest.mark.node]


@pytest.fixture(scope="module")
def agent(
    node: LocalNode, node_image: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Agent]:
    overlay = write_overlay(Path(tmp_path_factory.mktemp("overlay")), node)
    assert node.forwarder is not None
    node.forwarder.stop()  # the first test watches the agent wait for an unreachable API server
    cluster = node.cluster
    installed = Agent(node)
    installed.installed_at = time.monotonic()
    cluster.kubectl("apply", "-k", str(overlay))
    yield installed
    cluster.kubectl("delete", "daemonset", "-n", NAMESPACE, "nodetopo-agent", "--wait=false", check=False)


def test_api_unreachable_keeps_the_pod_unready_with_a_reason_then_readyz_gates_ready(agent: Agent) -> None:
    pod = agent.wait("Running (unready: the API server is unreachable)", is_running_unready, timeout=180)
    deadline = time.monotonic() + 90
    failures: list[dict[str, Any]] = []
    while time.monotonic() < deadline and not failures:  # the agent says why it is not publishing
        time.sleep(2)
        records = [json.loads(line) for line in agent.logs(pod).splitlines() if line.startswith("{")]
        failures = [r for r in records if r.get("level") in ("warning", "error")]
    assert failures, agent.logs(pod)[-3000:]
    assert any("refused" in json.dumps(r).lower() for r in failures), failures
    pod = agent.pod()
    assert not is_ready(pod), pod["status"]  # readiness probes have been failing all along
    started = time.monotonic()
    ready = agent.wait_ready()
    agent.ready_after = time.monotonic() - started
    # kubelet's readiness probe (GET /readyz) turned it Ready: the probe is configured and the
    # transition happened only once the API server became reachable.
    probe = ready["spec"]["containers"][0]["readinessProbe"]
    assert probe["httpGet"]["path"] == "/readyz"
    assert ready["status"]["containerStatuses"][0]["restartCount"] == 0


def test_publishes_what_discover_sees_on_the_host(agent: Agent, tmp_path: Path) -> None:
    agent.wait_ready()
    published = agent.nodetopology()
    local = subprocess.run(
        [
            sys.executable,
            "-m",
            "nodetopo",
            "discover",
            "-o",
            "json",
            "--nvml",
            "on",
            "--node-name",
            agent.node.name,
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    expected = json.loads(local.stdout)
    # the agent asked the real kubelet which pod holds each device (none here: no GPUs); discover
    # does not ask
    allocation = published["status"].pop("allocation")
    assert allocation["state"] == "Known", allocation
    assert "allocation" not in expected["status"]
    # the agent judges the links over scans: it publishes the counters it judges rates from (what
    # its restart starts from), with this kernel's boot id; one discover judges its scan alone
    baseline = published["status"].get("health", {}).pop("baseline", None)
    assert baseline is not None and "baseline" not in expected["status"].get("health", {})
    assert baseline["boot"] == Path("/proc/sys/kernel/random/boot_id").read_text().strip(), baseline
    got, want = normalized(published["status"]), normalized(expected["status"])
    # A tool the host has but the image does not ship (lldpcli: lldpd is installed on this machine)
    # changes only the message of a source that is unavailable on both sides.
    absent = {s["name"] for s in got.get("sources", []) if "is not installed" in s.get("message", "")}
    for side in (got, want):
        for source in side.get("sources", []):
            if source["name"] in absent and not source["ok"]:
                source.pop("message")
        for condition in side.get("conditions", []):
            if (
                any(condition["type"] == condition_type(name) for name in absent)
                and condition["status"] == "False"
            ):
                condition.pop("message")
    differences = {
        key: {
            "pod": [x for x in got.get(key, []) if x not in want.get(key, [])]
            if isinstance(got.get(key), list)
            else got.get(key),
            "host": [x for x in want.get(key, []) if x not in got.get(key, [])]
            if isinstance(want.get(key), list)
            else want.get(key),
        }
        for key in sorted(set(got) | set(want))
        if got.get(key) != want.get(key)
    }
    assert differences == {}, json.dumps(differences, indent=1)
    labels = {k: v for k, v in agent.node_labels().items() if k.startswith("nodetopo.io/")}
    # the host's own publish of the same discovery to a twin Node gives the same labels
    twin = f"twin-{uuid.uuid4().hex[:8]}"
    status, _ = agent.cluster.request(
        "POST", "/api/v1/nodes", body={"apiVersion": "v1", "kind": "Node", "metadata": {"name": twin}}
    )
    assert status == 201
    try:
        subprocess.run(
            [
                sys.executable, "-m", "nodetopo", "publish", "--nvml", "on", "--node-name", twin,
                "--kubeconfig", str(agent.cluster.kubeconfig_for("publisher")),
            ],
            capture_output=True, text=True, check=True, timeout=120,
        )  # fmt: skip
        status, body = agent.cluster.request("GET", f"/api/v1/nodes/{twin}")
        twin_labels = {
            k: v for k, v in body["metadata"].get("labels", {}).items() if k.startswith("nodetopo.io/")
        }
    finally:
        agent.cluster.request("DELETE", f"/api/v1/nodes/{twin}")
    assert labels and labels == twin_labels


def test_join_series_scraped_from_the_pod_are_read_by_the_rules(agent: Agent, tmp_path: Path) -> None:
    """The topology join series as the real pod serves them, evaluated by promtool with
    deploy/monitoring's rules loaded: one per GPU and NIC of the published NodeTopology, its facts as
    labels, nothing made up for what the host lacks (this host: NICs, no GPU, no fabric)."""
    pod = agent.wait_ready()
    status = agent.nodetopology()["status"]
    assert status["nics"], "the host has a NIC: the check below would be empty"
    target = {"job": "nodetopo-agent", "instance": f"{pod['status']['podIP']}:8080"}
    names = ("nodetopo_gpu_info", "nodetopo_nic_info", "nodetopo_agent_info")
    series = input_series_from_scrape(agent.metrics(pod), target, names)
    node = agent.node.name
    network = status.get("network") or {}
    leaf = next((t["id"] for t in network.get("tiers") or () if t["level"] == 0), None)
    nearest: dict[str, list[int]] = {}
    for gpu in status.get("gpus") or ():
        for name in gpu.get("nearestNICs") or ():
            nearest.setdefault(name, []).append(gpu["index"])
    expected = []
    for nic in status["nics"]:
        switches = sorted(
            {
                n["switchID"]
                for n in network.get("neighbours") or ()
                if n["nic"] in (nic["name"], nic.get("netdev"))
                and n.get("switchID")
                and n.get("peerIsSwitch") is not False
            }
        )
        labels = {
            "node": node,
            "device": nic["name"],
            "netdev": nic.get("netdev"),
            "pci_bus_id": nic.get("pciBusID"),
            "numa_node": None if nic.get("numaNode") is None else str(nic["numaNode"]),
            "link_layer": nic.get("linkLayer"),
            "rdma": "true" if nic.get("rdma") else "false",
            "nearest_gpus": "+".join(map(str, sorted(nearest.get(nic["name"], [])))) or None,
            "switch": "+".join(switches) or None,
            "leaf": leaf,
        }
        expected.append(
            {"labels": series_of("nodetopo:nic_info", {k: v for k, v in labels.items() if v}), "value": 1}
        )
    cases = [
        ("nodetopo:nic_info", expected),
        ("count(nodetopo:gpu_info) or vector(0)", [{"labels": "{}", "value": len(status.get("gpus") or ())}]),
        ("count by (node) (nodetopo_agent_info)", [{"labels": series_of("", {"node": node}), "value": 1}]),
    ]
    path = expr_tests_file(tmp_path, series, cases, eval_time="5m")
    done = promtool("test", "rules", str(path))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_writes_were_made_with_the_pods_kubelet_minted_token(agent: Agent) -> None:
    pod = agent.wait_ready()
    claims = jwt_claims(agent.token(pod))
    k8s = claims["kubernetes.io"]
    assert k8s["node"]["name"] == agent.node.name and k8s["pod"]["name"] == pod["metadata"]["name"], claims
    assert claims["sub"] == AGENT_USER
    writes = [
        json.loads(line)
        for line in agent.cluster.audit_log.read_text().splitlines()
        if AGENT_USER in line and '"ResponseComplete"' in line
    ]
    writes = [
        e for e in writes if e["verb"] in WRITES and e["objectRef"]["resource"] in ("nodes", "nodetopologies")
    ]
    assert writes, "no write by the agent's service account in the audit log"
    for event in writes:
        assert event["user"]["extra"][NODE_NAME_EXTRA] == [agent.node.name], event["user"]
        assert event["objectRef"]["name"] == agent.node.name
        assert event["responseStatus"]["code"] < 300, event


def test_admission_policy_holds_against_the_real_token(agent: Agent) -> None:
    pod = agent.wait_ready()
    token = agent.token(pod)
    other = f"other-node-{uuid.uuid4().hex[:8]}"
    status, created = agent.cluster.request(
        "POST",
        "/api/v1/nodes",
        body={"apiVersion": "v1", "kind": "Node", "metadata": {"name": other, "labels": {"team": "ml"}}},
    )
    assert status == 201, created
    try:
        attempts = {
            "label": {"metadata": {"labels": {"nodetopo.io/gpu.count": "8"}}},
            "taint": {"spec": {"taints": [{"key": "evil", "effect": "NoExecute"}]}},
            "cordon": {"spec": {"unschedulable": True}},
            "role": {"metadata": {"labels": {"node-role.kubernetes.io/control-plane": ""}}},
        }
        for what, patch in attempts.items():
            code, body = bearer(agent, token, "PATCH", f"/api/v1/nodes/{other}", patch)
            assert code == 403, (what, code, body)
            assert "may change only its own Node" in str(body), body
        topology = {
            "apiVersion": "nodetopo.io/v1alpha1",
            "kind": "NodeTopology",
            "metadata": {
                "name": other,
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Node", "name": other, "uid": created["metadata"]["uid"]}
                ],
            },
        }
        code, body = bearer(agent, token, "POST", "/apis/nodetopo.io/v1alpha1/nodetopologies", topology)
        assert code == 403, body
        status, stored = agent.cluster.request("GET", f"/api/v1/nodes/{other}")
        assert stored["metadata"]["labels"] == {"team": "ml"}
        assert not stored["spec"].get("unschedulable")
        assert all(
            t["key"] != "evil" for t in stored["spec"].get("taints", [])
        )  # node-lifecycle's may be there
    finally:
        agent.cluster.request("DELETE", f"/api/v1/nodes/{other}")


def test_recreated_pod_writes_nothing_and_removes_no_label(agent: Agent) -> None:
    pod = agent.wait_ready()
    labels = agent.node_labels()
    offset = agent.cluster.audit_barrier()
    agent.cluster.kubectl("delete", "pod", "-n", NAMESPACE, pod["metadata"]["name"], "--wait=true")
    new = agent.wait_ready()
    assert new["metadata"]["uid"] != pod["metadata"]["uid"]
    time.sleep(3)
    assert agent.writes_since(offset) == []
    assert agent.node_labels() == labels


def test_containerd_and_kubelet_restart_write_nothing_and_remove_no_label(agent: Agent) -> None:
    pod = agent.wait_ready()
    labels = agent.node_labels()
    offset = agent.cluster.audit_barrier()
    agent.node.restart_runtime()
    after = agent.wait_ready()
    time.sleep(3)
    assert agent.writes_since(offset) == []
    assert agent.node_labels() == labels
    assert after["metadata"]["uid"] == pod["metadata"]["uid"]


def test_kubectl_logs_shows_structured_lines(agent: Agent) -> None:
    pod = agent.wait_ready()
    lines = [line for line in agent.logs(pod).splitlines() if line.strip()]
    assert lines
    records = [json.loads(line) for line in lines]
    assert all((isinstance(r, dict) and r.get("msg")) or r.get("message") for r in records), lines[:5]


def test_image_missing_from_the_node_says_err_image_never_pull(agent: Agent) -> None:
    agent.wait_ready()
    template = json.loads(
        agent.cluster.kubectl("get", "daemonset", "-n", NAMESPACE, "nodetopo-agent", "-o", "json").stdout
    )["spec"]["template"]
    name = f"missing-image-{uuid.uuid4().hex[:6]}"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {**template["spec"], "nodeName": agent.node.name},
    }
    pod["spec"]["containers"][0]["image"] = "ghcr.io/nodetopo/nodetopo:not-imported"
    agent.cluster.kubectl("create", "-f", "-", input=json.dumps(pod))
    try:
        deadline = time.monotonic() + 60
        waiting: dict[str, Any] = {}
        while time.monotonic() < deadline and waiting.get("reason") != "ErrImageNeverPull":
            time.sleep(0.5)
            _, body = agent.cluster.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods/{name}")
            statuses = body.get("status", {}).get("containerStatuses", [])
            waiting = statuses[0].get("state", {}).get("waiting", {}) if statuses else {}
        assert waiting.get("reason") == "ErrImageNeverPull", waiting
        assert "ghcr.io/nodetopo/nodetopo:not-imported" in waiting.get("message", ""), waiting
        events = agent.cluster.kubectl(
            "get", "events", "-n", NAMESPACE, "--field-selector", f"involvedObject.name={name}", "-o", "json"
        ).stdout
        assert "ErrImageNeverPull" in events
    finally:
        agent.cluster.kubectl(
            "delete", "pod", "-n", NAMESPACE, name, "--grace-period=0", "--force", check=False
        )


def test_memory_after_ten_cycles_stays_under_the_request(agent: Agent, record_property: Any) -> None:
    """The pod's cgroup memory after 10 discovery cycles (a full scan each; a write only on change),
    against deploy/'s request (64Mi) and limit (256Mi). The interval is shortened on the live
    DaemonSet (not in the overlay) so that 10 cycles take seconds."""
    agent.wait_ready()
    agent.cluster.kubectl(
        "patch", "daemonset", "-n", NAMESPACE, "nodetopo-agent", "--type=json",
        "-p", json.dumps([{"op": "add", "path": "/spec/template/spec/containers/0/args/-",
                           "value": "--interval-seconds=1"}]),
    )  # fmt: skip
    deadline = time.monotonic() + 180
    cycles = 0.0
    pod: dict[str, Any] = {}
    while time.monotonic() < deadline:
        pods = agent.pods()
        if (
            len(pods) == 1
            and "--interval-seconds=1" in pods[0]["spec"]["containers"][0]["args"]
            and is_ready(pods[0])
        ):
            pod = pods[0]
            text = agent.metrics(pod)
            cycles = sum(
                float(line.rsplit(" ", 1)[1])
                for line in text.splitlines()
                if line.startswith("nodetopo_discovery_cycles_total{")
            )
            if cycles >= 11:
                break
        time.sleep(1)
    assert cycles >= 11, f"only {cycles} cycles"
    qos = pod["status"]["qosClass"].lower()
    cgroup = Path("/sys/fs/cgroup/memory/kubepods") / qos / f"pod{pod['metadata']['uid']}"
    usage = int((cgroup / "memory.usage_in_bytes").read_text())
    stat = dict(line.split() for line in (cgroup / "memory.stat").read_text().splitlines())
    rss = int(stat["total_rss"])
    working_set = usage - int(stat["total_inactive_file"])
    record_property("pod_memory", {"usage": usage, "working_set": working_set, "rss": rss, "cycles": cycles})
    print(f"agent pod memory after {cycles:.0f} cycles: usage {usage / 2**20:.1f} MiB, "
          f"working set {working_set / 2**20:.1f} MiB, rss {rss / 2**20:.1f} MiB")  # fmt: skip
    resources = pod["spec"]["containers"][0]["resources"]
    assert resources["requests"]["memory"] == "64Mi" and resources["limits"]["memory"] == "256Mi"
    assert working_set < 256 * 2**20
    assert rss < 64 * 2**20, f"rss {rss / 2**20:.1f} MiB over the 64Mi request"


@pytest.mark.parametrize("host_sys", ["empty", "absent"])
def test_a_pod_without_the_hosts_sys_says_why_and_loses_nothing_published(
    agent: Agent, host_sys: str
) -> None:
    """The agent's pod with /host/sys an empty directory, or not mounted at all, next to the good
    one: it logs why, and the published NodeTopology and labels stay as they were."""
    agent.wait_ready()
    before_labels = agent.node_labels()
    before = agent.nodetopology()["status"]
    template = json.loads(
        agent.cluster.kubectl("get", "daemonset", "-n", NAMESPACE, "nodetopo-agent", "-o", "json").stdout
    )["spec"]["template"]
    spec = template["spec"]
    container = spec["containers"][0]
    if host_sys == "empty":
        spec["volumes"] = [
            {"name": "host-sys", "emptyDir": {}} if v["name"] == "host-sys" else v for v in spec["volumes"]
        ]
    else:
        spec["volumes"] = [v for v in spec["volumes"] if v["name"] != "host-sys"]
        container["volumeMounts"] = [m for m in container["volumeMounts"] if m["name"] != "host-sys"]
    if "--interval-seconds=1" not in container["args"]:
        container["args"].append("--interval-seconds=1")
    name = f"sys-{host_sys}-{uuid.uuid4().hex[:6]}"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {**spec, "nodeName": agent.node.name},
    }
    agent.cluster.kubectl("create", "-f", "-", input=json.dumps(pod))
    try:
        deadline = time.monotonic() + 90
        warnings: list[dict[str, Any]] = []
        cycles = 0
        while time.monotonic() < deadline and (not warnings or cycles < 3):
            time.sleep(2)
            done = agent.cluster.kubectl("logs", "-n", NAMESPACE, name, check=False)
            records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
            warnings = [r for r in records if r.get("level") in ("warning", "error")]
            cycles = sum(1 for r in records if "scan" in str(r.get("msg", "")).lower())
        assert warnings, done.stdout[-3000:] + done.stderr
        assert any("sys" in json.dumps(r) for r in warnings), warnings
        assert agent.node_labels() == before_labels
        after = agent.nodetopology()["status"]
        for key in ("summary", "gpus", "nics", "numaNodes", "nvlinkIslands"):
            assert after.get(key) == before.get(key), key
    finally:
        agent.cluster.kubectl(
            "delete", "pod", "-n", NAMESPACE, name, "--grace-period=0", "--force", check=False
        )


def test_kubelet_restarted_while_a_new_agent_publishes_loses_nothing(agent: Agent) -> None:
    """A label the agent owns is removed behind its back; the pod is recreated (its first cycle
    writes the label back) and kubelet is stopped and started again while that pod starts and
    publishes. The label comes back, nothing else published changes, the pod ends Ready."""
    pod = agent.wait_ready()
    labels = agent.node_labels()
    key = "nodetopo.io/numa.count"
    assert key in labels, labels
    before = agent.nodetopology()["status"]
    status, body = agent.cluster.request(
        "PATCH",
        f"/api/v1/nodes/{agent.node.name}",
        body={"metadata": {"labels": {key: None}}},
        content_type="application/merge-patch+json",
    )
    assert status == 200, body
    agent.cluster.kubectl("delete", "pod", "-n", NAMESPACE, pod["metadata"]["name"], "--wait=false")
    agent.wait("started again", lambda p: p["metadata"]["uid"] != pod["metadata"]["uid"] and bool(
        p.get("status", {}).get("containerStatuses")), timeout=120)  # fmt: skip
    agent.node.stop_kubelet()
    time.sleep(3)
    agent.node.start_kubelet()
    new = agent.wait_ready(timeout=180)
    assert new["metadata"]["uid"] != pod["metadata"]["uid"]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and agent.node_labels() != labels:
        time.sleep(1)
    assert agent.node_labels() == labels
    after = agent.nodetopology()["status"]
    for field in ("summary", "gpus", "nics", "numaNodes", "nvlinkIslands"):
        assert after.get(field) == before.get(field), field
    assert "Traceback" not in agent.logs(new)


def test_an_admins_label_on_an_agent_key_is_taken_back_with_one_event_and_no_restart(agent: Agent) -> None:
    """Was: ``kubectl label node N nodetopo.io/numa.count=7 --overwrite``, then an agent restart:
    every publish failed ``HTTP 409 … conflict with "kubectl-label"`` and the pod went to
    CrashLoopBackOff until someone removed the label. The new pod takes its key back with a forced
    apply of its own keys only, says so in one Event on the Node (admitted by deploy/'s policy for
    the pod's kubelet-minted token) and one log line, and keeps running; the admin's label outside
    the prefix, set by the same command, stays the admin's."""
    pod = agent.wait_ready()
    labels = agent.node_labels()
    key = "nodetopo.io/numa.count"
    assert key in labels and labels[key] != "7" and "team" not in labels, labels
    earlier = {e["metadata"]["name"] for e in agent.node_events(REASON)}
    agent.cluster.kubectl("label", "node", agent.node.name, "--overwrite", f"{key}=7", "team=ml")
    try:
        assert agent.node_labels() == {**labels, key: "7", "team": "ml"}
        offset = agent.cluster.audit_barrier()
        agent.cluster.kubectl("delete", "pod", "-n", NAMESPACE, pod["metadata"]["name"], "--wait=false")
        restarted: list[Any] = []

        def back(p: dict[str, Any]) -> bool:
            statuses = p.get("status", {}).get("containerStatuses", [])
            restarted.extend(  # a restart or a back-off seen at any poll, not only at the end
                (s.get("restartCount"), s.get("state", {}).get("waiting", {}).get("reason"))
                for s in statuses
                if s.get("restartCount")
                or s.get("state", {}).get("waiting", {}).get("reason") == "CrashLoopBackOff"
            )
            return (
                p["metadata"]["uid"] != pod["metadata"]["uid"]
                and is_ready(p)
                and agent.node_labels().get(key) == labels[key]
            )

        new = agent.wait(f"Ready with {key} taken back", back, timeout=180)
        deadline = time.monotonic() + 30
        events: list[dict[str, Any]] = []
        while time.monotonic() < deadline and not events:
            events = [e for e in agent.node_events(REASON) if e["metadata"]["name"] not in earlier]
            time.sleep(0.5)
        time.sleep(3)  # a crash loop would show by now: the conflict was the first publish's
        new = agent.pod()
        assert new["status"]["containerStatuses"][0]["restartCount"] == 0, new["status"]
        assert restarted == [], restarted
        stored = agent.cluster.request("GET", f"/api/v1/nodes/{agent.node.name}")[1]
        assert stored["metadata"]["labels"] == {**labels, "team": "ml"}
        # the agent's keys are its own again, the admin's label is still the admin's
        assert set(owned_label_keys(stored, field_manager="nodetopo-agent")) == {
            k for k in labels if k.startswith("nodetopo.io/")
        }
        assert label_managers(stored, key) == {"nodetopo-agent"}
        assert label_managers(stored, "team") == {"kubectl-label"}
        writes = [
            (
                e["verb"],
                e["objectRef"]["resource"],
                "force=true" in e["requestURI"],
                e["responseStatus"]["code"],
            )
            for e in agent.writes_since(offset)
            if e["objectRef"]["resource"] in ("nodes", "events")
        ]
        assert writes == [
            ("patch", "nodes", False, 409),
            ("patch", "nodes", True, 200),
            ("create", "events", False, 201),
        ], writes
        assert len(events) == 1, events
        (event,) = events
        assert (event["type"], event["reason"]) == ("Warning", REASON)
        assert f"label {key} (set to '7' by field manager 'kubectl-label'" in event["message"], event
        assert event["involvedObject"]["uid"] == stored["metadata"]["uid"]
        assert event["source"]["component"] == "nodetopo-agent"
        said = [
            r
            for r in (json.loads(line) for line in agent.logs(new).splitlines() if line.startswith("{"))
            if r.get("level") == "warning" and "kubectl-label" in str(r.get("msg"))
        ]
        assert len(said) == 1 and key in said[0]["msg"], said
        assert "Traceback" not in agent.logs(new)
    finally:
        agent.cluster.kubectl("label", "node", agent.node.name, "team-", check=False)
