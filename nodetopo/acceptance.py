"""Runtime acceptance from inside the workload: step times and request latencies, labelled with
where the workload runs, for the rules in ``deploy/monitoring/nodetopo-rules.yaml``.

Two lines in a training loop::

    steps = acceptance.StepTimer("llm-pretrain", port=9464)   # serves /metrics on :9464
    for batch in data:
        with steps.step():
            train(batch)

and in a serving replica (``p99``/``p999``: the latency objectives the alerts compare with)::

    latency = acceptance.LatencyRecorder("chat", p99=0.25, p999=1.0, port=9464)
    with latency.request():
        answer(prompt)

The labels come from what ``nodetopo probe`` learnt at start-up: its ``--report`` file (the
``placement`` section; ``$NODETOPO_PROBE_REPORT``, default ``/run/nodetopo/probe.json``, an emptyDir
shared by the init container and the workload) names the node, the node's leaf, and the container's
GPUs with their NVLink island and NUMA node. Without the report only the node is known
(``$NODE_NAME``), and an unknown fact is an absent label, never a placeholder. Where
``$CUDA_VISIBLE_DEVICES`` names a subset of the container's GPUs (a Ray task or actor with
``num_gpus``), the process is labelled with that subset: GPU UUIDs, or positions in the container's
GPU order (the probe lists them by index, which is the PCI bus order NVML and CUDA with
``CUDA_DEVICE_ORDER=PCI_BUS_ID`` use); anything else (MIG UUIDs) keeps the container's GPUs.

Series, one set per process (a registry):

* ``nodetopo_step_seconds{workload,replica,node,island,leaf}``: histogram, one training step;
* ``nodetopo_request_seconds{workload,replica,node,island,leaf}``: histogram, one request;
* ``nodetopo_workload_gpu_info{workload,replica,node,gpu,UUID,island,numa_node,leaf}``: 1 per GPU
  (``UUID`` joins the DCGM exporter's series to the workload);
* ``nodetopo_workload_cpu_numa_local_ratio{workload,replica,node}``: the share of the process's CPUs
  on its GPUs' NUMA nodes;
* ``nodetopo_latency_objective_seconds{workload,replica,quantile}``: the objectives given.

``island`` on the histograms is the set of islands of the process's GPUs (``0``, or ``0+1`` for
GPUs in two islands); ``replica`` is ``$POD_NAME``, else the host name (a pod's host name is its
name). The histograms have 53 buckets, 1 ms to 110 s, each 1.25 times the last: fine enough that a
steady step time gives a p99/p50 of at most 1.25, coarse enough for one series set per process
(56 series per histogram: 54 buckets with +Inf, the count and the sum). This module imports only
the standard library and prometheus-client.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import json
import os
import re
import socket
import stat
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from prometheus_client import REGISTRY, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import CollectorRegistry

REPORT_ENV = "NODETOPO_PROBE_REPORT"
DEFAULT_REPORT = "/run/nodetopo/probe.json"
BUCKETS: tuple[float, ...] = tuple(round(0.001 * 1.25**i, 6) for i in range(53))
#: the longest report read (characters, and bytes of the file): the probe writes a few KB (its
#: checks, the pod's GPUs); anything longer is not its report
MAX_REPORT_CHARS = 4 * 1024 * 1024
#: the deepest report read: the probe's is 4 levels deep
MAX_REPORT_DEPTH = 32
#: a JSON string (brackets inside do not nest), or a run of opening or of closing brackets
_JSON_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[{]+|[\]}]+')


class PlacementError(ValueError):
    """The probe's report could not be read as one (names the file and what was wrong)."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PlacedGpu:
    index: int
    uuid: str | None = None
    island: int | None = None
    numa_node: int | None = None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Placement:
    """Where the workload runs, as far as the probe could tell."""

    node: str | None = None
    leaf: str | None = None
    gpus: tuple[PlacedGpu, ...] = ()
    cpu_numa_local_ratio: float | None = None

    @property
    def islands(self) -> str | None:
        """The islands of the GPUs, sorted and joined by ``+``; None when no GPU is in one."""
        ids = sorted({g.island for g in self.gpus if g.island is not None})
        return "+".join(map(str, ids)) or None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _deep_line(text: str, max_depth: int) -> int | None:
    """The 1-based line where ``text`` opens JSON level ``max_depth + 1``, None when it never does;
    one pass, no recursion (``json.loads`` recurses once a level: 60,000 ``[`` is a RecursionError,
    which no ``except ValueError`` catches).

    nodetopo's bounded JSON reader does this for every other parser; this module imports only the
    standard library and prometheus-client (it is the workload's, installed beside its framework),
    so it measures the nesting itself."""
    depth = 0
    for match in _JSON_TOKEN.finditer(text):
        token = match.group()
        if token[0] == '"':
            continue
        if token[0] in "[{":
            if depth + len(token) > max_depth:
                return text.count("\n", 0, match.start() + max_depth - depth) + 1
            depth += len(token)
        else:
            depth -= len(token)
    return None


def parse_report(text: str, source: str = "<report>") -> Placement:
    """The ``placement`` section of a ``nodetopo probe`` JSON report. A field of the wrong type is
    unknown; text that is not a report (not JSON, longer than ``MAX_REPORT_CHARS``, nested deeper
    than ``MAX_REPORT_DEPTH``) is a ``PlacementError`` naming ``source``."""
    if len(text) > MAX_REPORT_CHARS:
        raise PlacementError(
            f"{source}: more than {MAX_REPORT_CHARS} characters: not a report of nodetopo probe"
        )
    line = _deep_line(text, MAX_REPORT_DEPTH)
    if line is not None:
        raise PlacementError(f"{source}:{line}: JSON nested deeper than {MAX_REPORT_DEPTH} levels")
    try:
        report = json.loads(text)
    except (ValueError, RecursionError) as e:  # RecursionError: a safety net under the depth
        raise PlacementError(f"{source}: not JSON ({str(e)[:200]})") from None
    if not isinstance(report, Mapping) or not isinstance(report.get("placement"), Mapping):
        raise PlacementError(f"{source}: no 'placement' object (a report of nodetopo probe --report)")
    section = report["placement"]
    gpus = []
    for g in section.get("gpus") or ():
        if isinstance(g, Mapping) and _int(g.get("index")) is not None:
            gpus.append(
                PlacedGpu(
                    index=g["index"],
                    uuid=_str(g.get("uuid")),
                    island=_int(g.get("island")),
                    numa_node=_int(g.get("numaNode")),
                )
            )
    ratio = section.get("cpuNumaLocalRatio")
    return Placement(
        node=_str(section.get("node")) or _str(report.get("node")),
        leaf=_str(section.get("leaf")),
        gpus=tuple(sorted(gpus, key=lambda g: g.index)),
        cpu_numa_local_ratio=float(ratio)
        if isinstance(ratio, int | float) and not isinstance(ratio, bool) and 0 <= ratio <= 1
        else None,
    )


def visible(placement: Placement, cuda_visible_devices: str | None) -> Placement:
    """``placement`` cut to the GPUs ``CUDA_VISIBLE_DEVICES`` names (UUIDs, or positions in the
    container's GPU order); unchanged when it is unset or names something else."""
    if not cuda_visible_devices or not cuda_visible_devices.strip():
        return placement
    entries = [e.strip() for e in cuda_visible_devices.split(",") if e.strip()]
    by_uuid = {g.uuid.lower(): g for g in placement.gpus if g.uuid}
    chosen: list[PlacedGpu] = []
    for entry in entries:
        if entry.lower() in by_uuid:
            chosen.append(by_uuid[entry.lower()])
        elif entry.isdigit() and int(entry) < len(placement.gpus):
            chosen.append(placement.gpus[int(entry)])
        else:
            return placement  # not a name of one of the container's GPUs: keep what the probe saw
    return dataclasses.replace(placement, gpus=tuple(sorted(set(chosen), key=lambda g: g.index)))


def read_placement(
    path: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None
) -> Placement:
    """The placement of this process: the probe's report (``path``, else ``$NODETOPO_PROBE_REPORT``,
    else the default path) cut to ``$CUDA_VISIBLE_DEVICES``. No report: only ``$NODE_NAME``. A
    report that is there but unreadable is a ``PlacementError`` (a mistake to see, not to hide)."""
    env = os.environ if environ is None else environ
    chosen = Path(path if path is not None else env.get(REPORT_ENV) or DEFAULT_REPORT)
    text = _read_report(chosen)
    if text is None:
        return Placement(node=env.get("NODE_NAME") or None)
    return visible(parse_report(text, str(chosen)), env.get("CUDA_VISIBLE_DEVICES"))


def _read_report(path: Path) -> str | None:
    """The report's text, None when there is none; a ``PlacementError`` for anything but a regular
    file of at most ``MAX_REPORT_CHARS`` bytes of UTF-8. Opened without blocking (a FIFO with no
    writer would hang the workload's start), read bounded (``/dev/zero`` never ends)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise PlacementError(f"{path}: {e.strerror or e}") from e
    chunks: list[bytes] = []
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise PlacementError(f"{path}: not a regular file")
        left = MAX_REPORT_CHARS + 1
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as e:
        raise PlacementError(f"{path}: {e.strerror or e}") from e
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > MAX_REPORT_CHARS:
        raise PlacementError(f"{path}: more than {MAX_REPORT_CHARS} bytes: not a report of nodetopo probe")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise PlacementError(f"{path}: not UTF-8 (byte {e.start})") from None


def _labels(pairs: Sequence[tuple[str, str | None]]) -> dict[str, str]:
    return {k: v for k, v in pairs if v}


_served: dict[int, int] = {}
_served_lock = threading.Lock()


def serve(port: int, addr: str = "0.0.0.0", registry: CollectorRegistry = REGISTRY) -> None:
    """Serve ``registry`` on ``/metrics`` at ``port`` (once per process and port)."""
    with _served_lock:
        if port in _served:
            return
        start_http_server(port, addr=addr, registry=registry)
        _served[port] = port


class _Histogram:
    def __init__(self, buckets: Sequence[float]) -> None:
        self.bounds = tuple(buckets)
        self.counts = [0] * (len(self.bounds) + 1)
        self.total = 0.0
        self.lock = threading.Lock()

    def observe(self, value: float) -> None:
        with self.lock:
            self.counts[bisect.bisect_left(self.bounds, value)] += 1
            self.total += value

    def samples(self, name: str, labels: Mapping[str, str]) -> list[tuple[str, dict[str, str], float]]:
        with self.lock:
            counts, total = list(self.counts), self.total
        out, running = [], 0
        for bound, count in zip((*self.bounds, float("inf")), counts, strict=True):
            running += count
            le = "+Inf" if bound == float("inf") else repr(bound)
            out.append((f"{name}_bucket", {**labels, "le": le}, float(running)))
        out.append((f"{name}_count", dict(labels), float(running)))
        out.append((f"{name}_sum", dict(labels), total))
        return out


class _Workload:
    """One workload's series in one registry: the placement series and the histograms."""

    def __init__(self, name: str, placement: Placement, replica: str) -> None:
        self.name = name
        self.placement = placement
        self.replica = replica
        self.histograms: dict[str, tuple[str, _Histogram]] = {}
        self.objectives: dict[str, float] = {}
        self.lock = threading.Lock()

    def histogram(self, metric: str, doc: str, buckets: Sequence[float]) -> _Histogram:
        with self.lock:
            if metric not in self.histograms:
                self.histograms[metric] = (doc, _Histogram(buckets))
            return self.histograms[metric][1]

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        p = self.placement
        base = _labels(
            (
                ("workload", self.name),
                ("replica", self.replica),
                ("node", p.node),
                ("island", p.islands),
                ("leaf", p.leaf),
            )
        )
        with self.lock:
            histograms = sorted(self.histograms.items())
            objectives = sorted(self.objectives.items())
        for metric, (doc, hist) in histograms:
            family = Metric(metric, doc, "histogram")
            for sample_name, labels, value in hist.samples(metric, base):
                family.add_sample(sample_name, labels, value)
            yield family
        who = _labels((("workload", self.name), ("replica", self.replica), ("node", p.node)))
        gpus = GaugeMetricFamily(
            "nodetopo_workload_gpu_info", "1 per GPU of the workload process, with its island and leaf"
        )
        for g in p.gpus:
            gpus.add_sample(
                gpus.name,
                {
                    **who,
                    **_labels(
                        (
                            ("gpu", str(g.index)),
                            ("UUID", g.uuid),
                            ("island", str(g.island) if g.island is not None else None),
                            ("numa_node", str(g.numa_node) if g.numa_node is not None else None),
                            ("leaf", p.leaf),
                        )
                    ),
                },
                1.0,
            )
        yield gpus
        local = GaugeMetricFamily(
            "nodetopo_workload_cpu_numa_local_ratio",
            "Share of the process's CPUs on the NUMA nodes of its GPUs (absent while unknown)",
        )
        if p.cpu_numa_local_ratio is not None:
            local.add_sample(local.name, who, p.cpu_numa_local_ratio)
        yield local
        objective = GaugeMetricFamily(
            "nodetopo_latency_objective_seconds", "The latency objectives the workload declared"
        )
        for quantile, seconds in objectives:
            objective.add_sample(
                objective.name,
                _labels((("workload", self.name), ("replica", self.replica), ("quantile", quantile))),
                seconds,
            )
        yield objective


#: (id of the registry, workload) -> (the registry, kept alive so that its id stays its own; the workload)
_workloads: dict[tuple[int, str], tuple[CollectorRegistry, _Workload]] = {}
_workloads_lock = threading.Lock()


def _default_replica(environ: Mapping[str, str]) -> str:
    return environ.get("POD_NAME") or environ.get("HOSTNAME") or socket.gethostname()


def _workload(
    name: str,
    registry: CollectorRegistry,
    placement: Placement | None,
    replica: str | None,
) -> _Workload:
    """The one ``_Workload`` of ``name`` in ``registry`` (made, with its placement read, once)."""
    if not name:
        raise ValueError("a workload needs a name (the label the rules group its replicas by)")
    with _workloads_lock:
        key = (id(registry), name)
        if key in _workloads:
            return _workloads[key][1]
        made = _Workload(
            name,
            placement if placement is not None else read_placement(),
            replica or _default_replica(os.environ),
        )
        registry.register(made)
        _workloads[key] = (registry, made)
        return made


class _Recorder:
    metric = ""
    doc = ""

    def __init__(
        self,
        workload: str,
        *,
        registry: CollectorRegistry = REGISTRY,
        placement: Placement | None = None,
        replica: str | None = None,
        buckets: Sequence[float] = BUCKETS,
        port: int | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._workload = _workload(workload, registry, placement, replica)
        self._hist = self._workload.histogram(self.metric, self.doc, buckets)
        self._clock = clock
        if port is not None:
            serve(port, registry=registry)

    @property
    def placement(self) -> Placement:
        return self._workload.placement

    def observe(self, seconds: float) -> None:
        self._hist.observe(seconds)

    @contextlib.contextmanager
    def _time(self) -> Iterator[None]:
        start = self._clock()
        try:
            yield
        finally:
            self._hist.observe(self._clock() - start)


class StepTimer(_Recorder):
    """Times training steps into ``nodetopo_step_seconds``: ``with timer.step(): ...``."""

    metric = "nodetopo_step_seconds"
    doc = "Duration of one training step"

    def step(self) -> contextlib.AbstractContextManager[None]:
        return self._time()


class LatencyRecorder(_Recorder):
    """Times requests into ``nodetopo_request_seconds``: ``with recorder.request(): ...``; ``p99``
    and ``p999`` (seconds) are the objectives the serving alerts compare the quantiles with."""

    metric = "nodetopo_request_seconds"
    doc = "Duration of one request"

    def __init__(
        self, workload: str, *, p99: float | None = None, p999: float | None = None, **kw: Any
    ) -> None:
        super().__init__(workload, **kw)
        with self._workload.lock:
            for quantile, seconds in (("0.99", p99), ("0.999", p999)):
                if seconds is not None:
                    if not seconds > 0:
                        raise ValueError(f"a latency objective must be positive seconds, not {seconds!r}")
                    self._workload.objectives[quantile] = float(seconds)

    def request(self) -> contextlib.AbstractContextManager[None]:
        return self._time()
