"""Agent footprint (RSS, CPU) and API traffic: the real ``nodetopo agent`` process against a real
etcd + kube-apiserver (``tests/kube/cluster.py``), requests counted in the apiserver's audit log."""

from __future__ import annotations

import collections
import contextlib
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from common import (
    BUNDLES,
    Row,
    Section,
    child_env,
    compile_checkout,
    ensure_paths,
    import_rss_kib,
    mib,
    proc_cpu_seconds,
    proc_status_kib,
    table,
)

STEADY_TARGET_KIB = 48 * 1024  # issue 15: hold 48 MiB while features land (NFD worker requests 64)
BUNDLE = BUNDLES / "dgx-h100"
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}
#: cycles at the default 60 s interval in 30 minutes
SIMULATED_CYCLES = 30

IMPORTS = (
    ("bare `python -c pass`", "pass"),
    ("`import networkx`", "import networkx"),
    (
        "`import nodetopo.topology.discover, networkx` (sources, graph, derive, and the networkx a scan "
        "imports lazily)",
        "import nodetopo.topology.discover, networkx",
    ),
    ("`import kubernetes`", "import kubernetes"),
    ("`import urllib3, yaml` (what a thin client needs)", "import urllib3, yaml"),
    ("`import prometheus_client`", "import prometheus_client"),
    (
        "`import kubernetes` + `CoreV1Api`, `CustomObjectsApi` (what `ApiSession` touches)",
        "import kubernetes; kubernetes.client.CoreV1Api; kubernetes.client.CustomObjectsApi",
    ),
    (
        "`import http.client, ssl, json, yaml` (a stdlib client's floor)",
        "import http.client, ssl, json, yaml",
    ),
    (
        "everything `nodetopo agent` imports",
        "import nodetopo.agent.cli, nodetopo.kube.session, nodetopo.kube.transport, "
        "nodetopo.topology.discover, nodetopo.resource.body, nodetopo.resource.labels",
    ),
)


class AgentProcess:
    """``python -m nodetopo agent`` in its own process group, its log in a file."""

    def __init__(
        self, workdir: Path, name: str, bundle: Path, kubeconfig: Path, node: str, *extra: str
    ) -> None:
        self.log = workdir / f"agent-{name}.log"
        argv = [
            sys.executable,
            "-m",
            "nodetopo",
            "agent",
            "--from",
            str(bundle),
            "--node-name",
            node,
            "--kubeconfig",
            str(kubeconfig),
            "--start-delay-max-seconds",
            "0",
            "--jitter",
            "0",
            "--no-udev",
            "--listen",
            "127.0.0.1:0",
            "--log-level",
            "info",
            *extra,
        ]
        with self.log.open("wb") as handle:
            self.popen = subprocess.Popen(
                argv, stdout=handle, stderr=subprocess.STDOUT, env=child_env(), start_new_session=True
            )
        self.pid = self.popen.pid

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def cycles(self) -> int:
        return self.text().count(": scan (")

    def alive(self) -> bool:
        return self.popen.poll() is None

    def wait_for(self, what: str, predicate: Any, timeout: float, samples: list[int] | None = None) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if not self.alive():
                raise RuntimeError(
                    f"agent exited ({self.popen.returncode}) waiting for {what}:\n{self.text()[-3000:]}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(f"agent: no {what} after {timeout:.0f}s:\n{self.text()[-3000:]}")
            if samples is not None:
                samples.append(proc_status_kib(self.pid, "VmRSS"))
            time.sleep(0.1)

    def stop(self) -> None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=10)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


#: the topology join series (issue 26): one per GPU, one per NIC; the bandwidth model's bands
JOIN_SERIES = (
    "nodetopo_gpu_info",
    "nodetopo_nic_info",
    "nodetopo_expected_busbw_bytes_per_second",
    "nodetopo_expected_nvlink_tx_bytes_per_second",
)


def scrape_series(port: int) -> tuple[int, dict[str, int], int]:
    """(series in one /metrics scrape, join series by name, bytes of the scrape)."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples = [s for f in text_string_to_metric_families(text) for s in f.samples]
    join = {name: sum(1 for s in samples if s.name == name) for name in JOIN_SERIES}
    return len(samples), join, len(text.encode())


def published(agent: AgentProcess) -> bool:
    text = agent.text()
    return "labels applied" in text and "written" in text


def per_object(by_resource: dict[str, int]) -> dict[str, int]:
    """Writes by object kind: ``nodetopologies`` and ``nodetopologies/status`` are one object."""
    merged: dict[str, int] = collections.Counter()
    for key, count in by_resource.items():
        merged[key.split("/")[0]] += count
    return dict(merged)


def summarize(events: list[dict[str, Any]]) -> tuple[int, int, dict[str, int]]:
    """(writes, reads, writes by resource[/subresource])."""
    writes = [e for e in events if e.get("verb") in WRITE_VERBS]
    by_object: dict[str, int] = collections.Counter()
    for e in writes:
        ref = e.get("objectRef") or {}
        key = ref.get("resource", "?") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        by_object[key] += 1
    return len(writes), len(events) - len(writes), dict(sorted(by_object.items()))


def set_nic_rate(bundle: Path, text: str) -> int:
    """Rewrite every RDMA port's ``rate`` in the bundle copy's sysfs (a simulated NIC change)."""
    changed = 0
    for path in (bundle / "sys" / "devices").rglob("infiniband/*/ports/*/rate"):
        path.write_text(text + "\n")
        changed += 1
    return changed


@contextlib.contextmanager
def local_cluster() -> Iterator[Any]:
    ensure_paths()
    from kube.cluster import LocalCluster, build_binaries

    cluster = LocalCluster(build_binaries())
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def make_node(cluster: Any, name: str) -> None:
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
    status, answer = cluster.request("POST", "/api/v1/nodes", body=body)
    if status != 201:
        raise RuntimeError(f"creating Node {name}: HTTP {status}: {answer}")


def run(quick: bool) -> list[Section]:
    footprint = Section("agent", "3. Agent footprint: RSS and CPU of the `nodetopo agent` process")
    traffic = Section("agent", "4. API traffic of the agent (audit log of the real apiserver)")
    started = time.monotonic()
    # run alone (`run.py agent`), nothing else has byte-compiled the checkout: without it every
    # process here would compile nodetopo from source (about 2 MiB more RSS per import row)
    not_compiled = compile_checkout()
    if not_compiled:
        footprint.notes.append(not_compiled)

    # -- what imports cost -------------------------------------------------------------------
    rss = {label: import_rss_kib(code) for label, code in IMPORTS}
    bare = rss[IMPORTS[0][0]]
    footprint.tables.append(
        table(
            ["fresh interpreter that ran", "RSS", "over bare python"],
            [
                [label, mib(kib), mib(kib - bare) if label != IMPORTS[0][0] else "–"]
                for label, kib in rss.items()
            ],
            title="What imports cost (VmRSS of a fresh `python -c`, one run each)",
        )
    )

    idle_window = 15.0 if quick else 50.0
    with tempfile.TemporaryDirectory(prefix="nodetopo-bench-agent-") as tmp, local_cluster() as cluster:
        workdir = Path(tmp)
        footprint.notes.append(
            f"Test control plane (etcd + kube-apiserver) started in {cluster.startup_seconds:.1f} s."
        )
        bundle = workdir / "bundle"
        shutil.copytree(BUNDLE, bundle, symlinks=True)
        # no ibstat: sysfs alone says each port's rate, so rewriting it is a clean topology change
        (bundle / "cmd" / "ibstat.txt").unlink()
        make_node(cluster, "bench-busy")
        make_node(cluster, "bench-idle")

        port = free_port()
        busy = AgentProcess(
            workdir,
            "busy",
            bundle,
            cluster.kubeconfig_for("publisher"),
            "bench-busy",
            "--interval-seconds",
            "1",
            "--listen",
            f"127.0.0.1:{port}",
        )
        idle = AgentProcess(workdir, "idle", bundle, cluster.kubeconfig_for("other"), "bench-idle")
        dry = AgentProcess(
            workdir,
            "dry",
            bundle,
            cluster.kubeconfig_for("nobody"),
            "bench-dry",
            "--interval-seconds",
            "1",
            "--dry-run",
        )
        try:
            samples: list[int] = []
            busy.wait_for("first publish", lambda: published(busy), 60, samples)
            offset = cluster.audit_barrier()
            first_cycles = busy.cycles()
            cpu0 = proc_cpu_seconds(busy.pid)

            idle.wait_for("first publish", lambda: published(idle), 60)
            idle_cpu0, idle_t0 = proc_cpu_seconds(idle.pid), time.monotonic()

            busy.wait_for("10 cycles", lambda: busy.cycles() >= 10, 60, samples)
            after_ten = len(samples)
            steady_samples: list[int] = []
            busy.wait_for("12 cycles", lambda: busy.cycles() >= 12, 30, steady_samples)
            hwm_ten = proc_status_kib(busy.pid, "VmHWM")
            scraped = scrape_series(port)
            target_cycles = first_cycles + SIMULATED_CYCLES
            busy.wait_for(
                f"{target_cycles} cycles", lambda: busy.cycles() >= target_cycles, 120, steady_samples
            )
            cpu1, cycles1 = proc_cpu_seconds(busy.pid), busy.cycles()
            events = cluster.audit_events(since=offset, user="publisher")
            unchanged = summarize(events)

            # a change: every NIC port now 200 Gb/s
            changed_files = set_nic_rate(bundle, "200 Gb/sec (4X HDR)")
            offset = cluster.audit_barrier()
            before = busy.cycles()
            busy.wait_for(
                "3 cycles after the change", lambda: busy.cycles() >= before + 3, 60, steady_samples
            )
            change = summarize(cluster.audit_events(since=offset, user="publisher"))
            hwm_end = proc_status_kib(busy.pid, "VmHWM")
            rss_end = proc_status_kib(busy.pid, "VmRSS")

            remaining = idle_window - (time.monotonic() - idle_t0)
            if remaining > 0:
                time.sleep(remaining)
            idle_cpu1, idle_t1 = proc_cpu_seconds(idle.pid), time.monotonic()
            idle_rss = proc_status_kib(idle.pid, "VmRSS")
            idle_cycles = idle.cycles()
            dry_rss = proc_status_kib(dry.pid, "VmRSS")
        finally:
            busy.stop()
            idle.stop()
            dry.stop()

    steady = statistics.median(steady_samples)
    per_cycle = (cpu1 - cpu0) / max(1, cycles1 - first_cycles)
    idle_per_min = (idle_cpu1 - idle_cpu0) * 60 / (idle_t1 - idle_t0)
    footprint.rows += [
        Row(
            "steady RSS after 10 publish cycles (median of samples, cycles 10–34)",
            mib(steady),
            "≤ 48 MiB",
            steady <= STEADY_TARGET_KIB,
        ),
        Row("peak RSS (VmHWM) after 10 cycles / at the end", f"{mib(hwm_ten)} / {mib(hwm_end)}"),
        Row("RSS at the end (after the change)", mib(rss_end)),
        Row(
            "RSS of the idle agent (60 s interval)", mib(idle_rss), "≤ 48 MiB", idle_rss <= STEADY_TARGET_KIB
        ),
        Row(
            f"CPU per idle minute (between scans; {idle_t1 - idle_t0:.0f} s measured, scaled; 10 ms ticks)",
            f"{idle_per_min * 1000:.0f} CPU-ms/min",
        ),
        Row("CPU per scan + publish check (dgx-h100, 1 s interval)", f"{per_cycle * 1000:.0f} CPU-ms/cycle"),
        Row(
            "⇒ CPU per minute at the default 60 s interval",
            f"{(idle_per_min + per_cycle) * 1000:.0f} CPU-ms/min",
        ),
    ]
    total, join, scrape_bytes = scraped
    footprint.rows.append(
        Row(
            "series in one /metrics scrape (dgx-h100: 8 GPUs, 10 NICs); "
            "of them the topology join and band series",
            f"{total}; {sum(join.values())} ({', '.join(f'{k} {v}' for k, v in join.items())}); "
            f"{scrape_bytes / 1024:.1f} KiB",
        )
    )
    footprint.notes.append(
        f"`nodetopo agent --from dgx-h100 --interval-seconds 1 "
        f"--jitter 0 --start-delay-max-seconds 0 --no-udev "
        f"--listen 127.0.0.1:0` as user `publisher`; RSS sampled "
        f"every 0.1 s ({after_ten} samples before cycle 10). "
        f"The idle agent (default 60 s interval) ran {idle_cycles} scan(s) in total; its CPU was measured "
        f"from its first publish on. The same agent with `--dry-run` (no API client objects built) had "
        f"{mib(dry_rss)} RSS after the same run."
    )

    writes, reads, by_object = summarize(events)
    traffic.rows += [
        Row(
            f"writes over {SIMULATED_CYCLES} cycles of unchanged topology (= 30 min at 60 s)",
            str(unchanged[0]),
            "0",
            unchanged[0] == 0,
        ),
        Row(
            f"reads over the same {SIMULATED_CYCLES} cycles (after start)",
            str(unchanged[1]),
            "0",
            unchanged[1] == 0,
        ),
        Row(
            f"writes for one change (all {changed_files} NIC ports 400 → 200 Gb/s; 3 cycles)",
            (
                "; ".join(f"{k}: {v}" for k, v in per_object(change[2]).items())
                + " (requests: "
                + ", ".join(f"{k} {v}" for k, v in change[2].items())
                + ")"
            )
            if change[2]
            else "none",
            "1 per object",
            bool(change[2]) and all(v == 1 for v in per_object(change[2]).values()),
        ),
        Row("reads during the change", str(change[1]), "–"),
    ]
    traffic.notes.append(
        "Requests of the agent's user in the apiserver audit log, between two audit barriers (first publish "
        f"excluded). The agent ran at a 1 s interval so "
        f"{SIMULATED_CYCLES} cycles stand for 30 minutes at the "
        "default 60 s. The change rewrites `ports/1/rate` of every RDMA port in the agent's bundle copy "
        "(sysfs is re-read every scan; ibstat removed so sysfs is the only source of the rate): the "
        "NodeTopology status and the `nodetopo.io/rdma.rate-gbps` label change."
    )
    if writes or reads:
        traffic.notes.append(f"Unchanged-topology requests by object: {by_object}")
    footprint.seconds = traffic.seconds = time.monotonic() - started
    return [footprint, traffic]
