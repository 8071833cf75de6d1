"""The Kubernetes client: nodetopo's standard-library client (``nodetopo.kube``) against the official
``kubernetes`` client, on the two paths that decide which one nodetopo uses.

1. The reflector path: the real ``nodetopo extender`` process fed by its reflectors from a real
   kube-apiserver holding 1,000 (quick) or 5,000 NodeTopology objects (the fixture machines'
   statuses, cycled, written with server-side apply) and one bound GPU pod per 5 nodes. Peer in
   the same run, on the same apiserver: the same command with its reflectors fed by the official
   client's generated list methods (``CustomObjectsApi.list_cluster_custom_object``,
   ``CoreV1Api.list_pod_for_all_namespaces``, through ``nodetopo.kube.official.load_api_client``),
   as ``nodetopo extender`` did before it moved to ``nodetopo.kube``. Both run the one
   ``nodetopo.kube.reflector.Reflector``; only the client under it differs.
2. The import cost every command that talks to the API pays: a cold ``python -c`` that imports
   nodetopo's client (session + transport) against one that imports the official client and the
   two API classes a session would need (``CoreV1Api``, ``CustomObjectsApi``).

    python benchmarks/bench_kube.py [--quick]     # prints its section
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import Row, Section, child_env, ensure_paths, mib, proc_cpu_seconds, proc_status_kib, table

#: issue 30: the extender's RSS, the real process fed from a real apiserver, at 5,000 objects
EXTENDER_TARGET_KIB = 100 * 1024
GROUP, VERSION, PLURAL = "nodetopo.io", "v1alpha1", "nodetopologies"
PODS_PER_NODE = 0.2
SAMPLE_S = 5.0

#: ``nodetopo extender`` with its reflectors fed by the official client (the peer); argv[1]: kubeconfig
OFFICIAL_EXTENDER = """\
import functools, sys
import nodetopo.extender.cache as cache
from nodetopo.kube.official import load_api_client
from nodetopo.kube.reflector import Handlers, Reflector

def start_reflectors(connection, state, *, page_size=500, stop=None):
    import kubernetes
    api_client = load_api_client(sys.argv[1])
    custom = kubernetes.client.CustomObjectsApi(api_client)
    core = kubernetes.client.CoreV1Api(api_client)
    topologies = Reflector(
        functools.partial(custom.list_cluster_custom_object, "nodetopo.io", "v1alpha1", "nodetopologies"),
        cache.NODETOPOLOGY_PATH,
        Handlers(state.replace_topologies, state.upsert_topology, state.delete_topology,
                 state.topologies_synced, compact=state.compact_topology),
        page_size=page_size, stop=stop,
    )
    pods = Reflector(
        core.list_pod_for_all_namespaces,
        cache.PODS_PATH,
        Handlers(state.replace_pods, state.upsert_pod, state.delete_pod, state.pods_synced,
                 compact=state.compact_pod),
        field_selector=cache.BOUND_PODS_SELECTOR, page_size=page_size, stop=stop,
    )
    topologies.start()
    pods.start()
    return topologies, pods

cache.start_reflectors = start_reflectors
from nodetopo.cli import main
sys.exit(main(["extender", "--listen", "127.0.0.1:0", "--kubeconfig", sys.argv[1]]))
"""

IMPORTS = (
    ("bare `python -c pass`", "pass"),
    (
        "nodetopo's client: `import nodetopo.kube.session, nodetopo.kube.transport`",
        "import nodetopo.kube.session, nodetopo.kube.transport",
    ),
    (
        "the official client: `import kubernetes` + `CoreV1Api`, `CustomObjectsApi`",
        "import kubernetes; kubernetes.client.CoreV1Api; kubernetes.client.CustomObjectsApi",
    ),
)


def _bench_name(i: int) -> str:
    return f"bench-{i:05d}"


def _populate(
    cluster: Any,
    nodes: int,
    *,
    start: int = 0,
    name: Callable[[int], str] = _bench_name,
    status: Callable[[int], dict[str, Any]] | None = None,
) -> float:
    """NodeTopology objects ``start`` .. ``nodes - 1`` (``name(i)``, ``status(i)``; default: the
    fixture statuses, cycled) and a bound GPU pod for every 5th node; seconds taken."""
    from bench_admission import _statuses

    from nodetopo.kube.session import ApiSession
    from nodetopo.kube.transport import connect

    if status is None:
        statuses = _statuses()

        def status(i: int) -> dict[str, Any]:
            return statuses[i % len(statuses)]

    local = threading.local()

    def session() -> Any:
        if not hasattr(local, "session"):
            local.session = ApiSession(connect(str(cluster.kubeconfig)), field_manager="bench")
        return local.session

    def create(i: int) -> None:
        node = name(i)
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "NodeTopology", "metadata": {"name": node}}
        session().apply_cluster_object(GROUP, VERSION, PLURAL, node, body, status=False)
        written = {**status(i), "nodeName": node}
        session().apply_cluster_object(GROUP, VERSION, PLURAL, node, {**body, "status": written}, status=True)
        if i % round(1 / PODS_PER_NODE) == 0:
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"gpu-{i:05d}", "namespace": "bench"},
                "spec": {
                    "nodeName": node,
                    "automountServiceAccountToken": False,
                    "containers": [
                        {"name": "main", "image": "pause", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
                    ],
                },
            }
            status_code, answer = cluster.request("POST", "/api/v1/namespaces/bench/pods", body=pod)
            if status_code != 201:
                raise RuntimeError(f"creating pod gpu-{i:05d}: HTTP {status_code}: {answer}")

    for path, body in (
        ("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench"}}),
        (
            "/api/v1/namespaces/bench/serviceaccounts",
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}},
        ),
    ):
        status_code, answer = cluster.request("POST", path, body=body)
        if status_code not in (201, 409):
            raise RuntimeError(f"POST {path}: HTTP {status_code}: {answer}")
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        list(pool.map(create, range(start, nodes)))
    return time.monotonic() - started


@contextlib.contextmanager
def _extender(argv: list[str], log_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log_path.open("wb") as log:
        env = child_env(NODETOPO_LOG_LEVEL="info")
        process = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            yield process
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _measure(argv: list[str], log_path: Path, nodes: int) -> dict[str, Any]:
    """Start the extender, wait until /readyz says synced, then sample its RSS for SAMPLE_S."""
    started = time.monotonic()
    with _extender(argv, log_path) as process:
        port = None
        while port is None:
            if process.poll() is not None:
                raise RuntimeError(f"extender exited {process.returncode}:\n{log_path.read_text()[-2000:]}")
            found = re.search(
                r"extender listening on 127\.0\.0\.1:(\d+)", log_path.read_text(errors="replace")
            )
            if found:
                port = int(found.group(1))
            elif time.monotonic() - started > 120:
                raise RuntimeError(f"extender did not listen:\n{log_path.read_text()[-2000:]}")
            time.sleep(0.02)
        listening_rss = proc_status_kib(process.pid, "VmRSS")
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"extender exited {process.returncode}:\n{log_path.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() - started > 600:
                raise RuntimeError("extender did not become ready in 600 s")
            time.sleep(0.05)
        ready_s = time.monotonic() - started
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as answer:
            counts = answer.read().decode()
        samples = []
        deadline = time.monotonic() + SAMPLE_S
        while time.monotonic() < deadline:
            samples.append(proc_status_kib(process.pid, "VmRSS"))
            time.sleep(0.1)
        result = {
            "listening": listening_rss,
            "ready_s": ready_s,
            "rss": statistics.median(samples),
            "hwm": proc_status_kib(process.pid, "VmHWM"),
            "cpu": proc_cpu_seconds(process.pid),
            "counts": counts,
        }
    if json.loads(result["counts"]).get("nodeTopologies") != nodes:
        raise RuntimeError(f"extender cache incomplete: {result['counts']}")
    return result


def _import_costs(runs: int) -> list[list[str]]:
    from bench_probe import measure

    rows = []
    base: tuple[float, float, float] | None = None
    for label, code in IMPORTS:
        figures = [measure([sys.executable, "-c", code], child_env()) for _ in range(runs)]
        wall = statistics.median(f[0] for f in figures)
        cpu = statistics.median(f[1] for f in figures)
        rss = statistics.median(f[2] for f in figures)
        if base is None:
            base = (wall, cpu, rss)
            over = "–"
        else:
            over = f"+{(cpu - base[1]) * 1000:.0f} CPU-ms, +{(rss - base[2]) / 1024:.1f} MiB"
        rows.append([label, f"{wall * 1000:.0f} ms", f"{cpu * 1000:.0f} ms", mib(rss), over])
    return rows


def run(quick: bool) -> Section:
    ensure_paths()
    from bench_agent import local_cluster

    section = Section("kube", "8. The Kubernetes client: nodetopo's own against the official one")
    nodes = 1000 if quick else 5000
    started = time.monotonic()
    stdlib_argv = [sys.executable, "-m", "nodetopo", "extender", "--listen", "127.0.0.1:0"]
    with tempfile.TemporaryDirectory(prefix="nodetopo-bench-kube-") as tmp, local_cluster() as cluster:
        populate_s = _populate(cluster, nodes)
        kubeconfig = str(cluster.kubeconfig)
        official_argv = [sys.executable, "-c", OFFICIAL_EXTENDER, kubeconfig]
        results = {}
        # in turn, twice each: a burst of load on the shared machine hits both clients
        for attempt in range(1 if quick else 2):
            for name, argv in (
                ("stdlib", [*stdlib_argv, "--kubeconfig", kubeconfig]),
                ("official", official_argv),
                ("stdlib-500", [*stdlib_argv, "--kubeconfig", kubeconfig, "--page-size", "500"]),
                ("stdlib-100", [*stdlib_argv, "--kubeconfig", kubeconfig, "--page-size", "100"]),
            ):
                measured = _measure(argv, Path(tmp) / f"{name}-{attempt}.log", nodes)
                best = results.get(name)
                results[name] = measured if best is None or measured["rss"] < best["rss"] else best
    ours, peer = results["stdlib"], results["official"]
    target = mib(EXTENDER_TARGET_KIB) if nodes == 5000 else "–"
    ok = ours["rss"] <= EXTENDER_TARGET_KIB if nodes == 5000 else None
    section.rows += [
        Row(
            f"`nodetopo extender` RSS once synced from a real apiserver, {nodes:,} NodeTopology objects "
            "(nodetopo's client, pages of 250, the default)",
            mib(ours["rss"]),
            f"≤ {target}" if ok is not None else "–",
            ok,
        ),
        Row(
            "… the same command with the official client under its reflectors (peer)",
            f"{mib(peer['rss'])} ({ours['rss'] / peer['rss']:.2f}×)",
        ),
        Row(
            "… start to /readyz (both caches listed): nodetopo's client / official client",
            f"{ours['ready_s']:.1f} s / {peer['ready_s']:.1f} s",
        ),
    ]
    section.tables.append(
        table(
            [
                "extender fed by",
                "RSS listening",
                "start to ready",
                "RSS synced (median over 5 s)",
                "VmHWM",
                "CPU",
            ],
            [
                [
                    label,
                    mib(r["listening"]),
                    f"{r['ready_s']:.1f} s",
                    mib(r["rss"]),
                    mib(r["hwm"]),
                    f"{r['cpu']:.1f} s",
                ]
                for label, r in (
                    ("nodetopo.kube (stdlib), pages of 250 (the default)", ours),
                    ("official kubernetes client, pages of 250 (the default)", peer),
                    ("nodetopo.kube (stdlib), `--page-size 500` (the default before)", results["stdlib-500"]),
                    ("nodetopo.kube (stdlib), `--page-size 100`", results["stdlib-100"]),
                )
            ],
            title=f"The reflector path: {nodes:,} NodeTopology objects, "
            f"{round(nodes * PODS_PER_NODE):,} bound GPU pods, written in {populate_s:.0f} s",
        )
    )
    section.tables.append(
        table(
            ["cold interpreter that ran", "wall", "CPU", "peak RSS", "over bare python"],
            _import_costs(3 if quick else 7),
            title="What loading the client costs a command (medians; peak RSS is ru_maxrss)",
        )
    )
    section.notes.append(
        "The first two extenders are `nodetopo extender --listen 127.0.0.1:0 --kubeconfig <admin>` with "
        "the same reflectors (`nodetopo.kube.reflector`, pages of 250, the default) and the same cache; "
        "the peer replaces `start_reflectors` with the official client's generated list methods "
        "(the wiring `nodetopo extender` had before `nodetopo.kube`; the stdlib connection the command "
        "opens first stays, unused). Each ran alone against the same apiserver, in turn"
        f"{'' if quick else ', twice each (the lower RSS kept)'}. 'RSS listening' is taken as soon as "
        "the log says it listens, before the reflectors have listed much. The last two rows are nodetopo's "
        "client with pages of 500 (the default before) and of 100 (the summary and export controllers' "
        "default): what one list page costs."
    )
    section.seconds = time.monotonic() - started
    return section


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="1,000 objects, fewer repetitions")
    args = parser.parse_args()
    print(run(args.quick).markdown())


if __name__ == "__main__":
    main()
