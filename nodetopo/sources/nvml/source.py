"""The NVML source: ``read_nvml`` (protocol -> ``NvmlSnapshot``, pure over the protocol) and ``collect``."""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
from collections.abc import Callable
from typing import TypeVar

from nodetopo.errors import clip
from nodetopo.model import (
    Condition,
    ConditionReason,
    Facts,
    GpuPcieReading,
    HealthReadings,
    LinkClass,
    MigDevice,
    NvlinkReading,
    NvmlGpu,
    NvmlLink,
    NvmlSnapshot,
    RemoteDeviceType,
    SourceStatus,
)
from nodetopo.sources.base import (
    Context,
    SourceResult,
    condition,
    failed,
    failure_level,
    guarded,
    unobserved,
)
from nodetopo.sources.nvml.dumpfile import SHOWN_PROBLEMS, read_dump
from nodetopo.sources.nvml.protocol import (
    FUNCTION_NOT_FOUND,
    INVALID_ARGUMENT,
    LINK_CLASS_OF_LEVEL,
    MAX_DEVICES,
    MAX_NVLINKS,
    NAME,
    NOT_SUPPORTED,
    NvlinkCounter,
    NvmlApi,
    NvmlCallError,
    PcieQuestion,
    sorted_migs,
)
from nodetopo.sources.nvml.replay import RecordedNvml

log = logging.getLogger(__name__)

T = TypeVar("T")


class _DeviceScan:
    """Asks one GPU's questions; "not supported" is a silent None, other failures are noted.

    Once the GPU is lost (``NVML_ERROR_GPU_IS_LOST``) nothing more is asked of it.
    """

    def __init__(self, index: int) -> None:
        self.index = index
        self.failures: list[str] = []
        self.lost_at: NvmlCallError | None = None

    def ask(self, question: Callable[[], T], *, required: bool = False, quiet: bool = False) -> T | None:
        """``question()``, or None when it fails: a lost GPU stops every later question; a failure
        is kept for the source's condition unless it is NOT_SUPPORTED of an optional question, or
        ``quiet``."""
        if self.lost_at is not None:
            return None
        try:
            return question()
        except NvmlCallError as e:
            if e.gpu_lost:
                self.lost_at = e
            elif not quiet and (required or not e.not_supported):
                self.failures.append(str(e))
            return None

    def quietly(self, question: Callable[[], T]) -> T | None:
        """A health reading: any failure is an unknown value (never a condition of the source: a
        counter NVML cannot give says nothing about the topology)."""
        return self.ask(question, quiet=True)


def _read_links(api: NvmlApi, scan: _DeviceScan, probed: list[tuple[int, bool]]) -> tuple[NvmlLink, ...]:
    """The active links of a GPU; ``probed`` gets (link, active) of every link whose state was read."""
    links: list[NvmlLink] = []
    index = scan.index
    for link in range(MAX_NVLINKS):
        if scan.lost_at is not None:
            break
        try:
            active = api.nvlink_active(index, link)
        except NvmlCallError as e:
            if e.gpu_lost:
                scan.lost_at = e
                break
            if e.code in (INVALID_ARGUMENT, NOT_SUPPORTED, FUNCTION_NOT_FOUND):
                break
            scan.failures.append(f"{e} (link {link})")
            continue
        probed.append((link, active))
        if not active:
            continue
        remote_type = scan.ask(functools.partial(api.nvlink_remote_type, index, link))
        links.append(
            NvmlLink(
                link=link,
                remote_address=scan.ask(functools.partial(api.nvlink_remote_pci_bus_id, index, link)),
                remote_type=remote_type if remote_type is not None else RemoteDeviceType.UNKNOWN,
            )
        )
    return tuple(links)


#: (the reading's attribute, the question) of a GPU's PCIe link
_PCIE_READINGS = (
    ("max_gen", PcieQuestion.MAX_GEN),
    ("device_max_gen", PcieQuestion.DEVICE_MAX_GEN),
    ("current_gen", PcieQuestion.CURRENT_GEN),
    ("max_width", PcieQuestion.MAX_WIDTH),
    ("current_width", PcieQuestion.CURRENT_WIDTH),
    ("replays", PcieQuestion.REPLAYS),
)


def _read_health(
    api: NvmlApi, scan: _DeviceScan, probed: list[tuple[int, bool]]
) -> tuple[tuple[GpuPcieReading, ...], tuple[NvlinkReading, ...]]:
    """The GPU's PCIe link and each probed NVLink's state, speed and error counters (unknown where
    NVML cannot say)."""
    index = scan.index
    pcie = {attr: scan.quietly(functools.partial(api.pcie, index, q)) for attr, q in _PCIE_READINGS}
    gpu_pcie: tuple[GpuPcieReading, ...] = ()
    if any(v is not None for v in pcie.values()):
        gpu_pcie = (
            GpuPcieReading(
                gpu=index,
                source=NAME,
                max_gen=pcie["max_gen"],
                device_max_gen=pcie["device_max_gen"],
                current_gen=pcie["current_gen"],
                max_width=pcie["max_width"],
                current_width=pcie["current_width"],
                replays=pcie["replays"],
            ),
        )
    nvlinks: list[NvlinkReading] = []
    for link, active in probed:
        if not active:
            nvlinks.append(NvlinkReading(gpu=index, link=link, source=NAME, active=False))
            continue
        speed = scan.quietly(functools.partial(api.nvlink_speed_mbps, index, link))
        counts = {
            c: scan.quietly(functools.partial(api.nvlink_error_counter, index, link, c))
            for c in NvlinkCounter
        }
        flit, data = counts[NvlinkCounter.CRC_FLIT], counts[NvlinkCounter.CRC_DATA]
        nvlinks.append(
            NvlinkReading(
                gpu=index,
                link=link,
                source=NAME,
                active=True,
                speed_gbps=speed / 1000 if speed is not None else None,
                replay=counts[NvlinkCounter.REPLAY],
                recovery=counts[NvlinkCounter.RECOVERY],
                crc=None if flit is None and data is None else (flit or 0) + (data or 0),
            )
        )
    return gpu_pcie, tuple(nvlinks)


def _read_gpu(
    api: NvmlApi, index: int, health: list[HealthReadings]
) -> tuple[NvmlGpu | None, Condition | None, bool]:
    """One GPU's facts (None when its identity cannot be read), a condition, and whether it was lost;
    its link readings are appended to ``health``."""
    scan = _DeviceScan(index)
    uuid = scan.ask(lambda: api.uuid(index), required=True)
    model = scan.ask(lambda: api.name(index), required=True)
    address = scan.ask(lambda: api.pci_bus_id(index), required=True)
    memory = scan.ask(lambda: api.memory_total(index))
    cpus = scan.ask(lambda: api.cpu_affinity(index))
    numa = scan.ask(lambda: api.numa_node_id(index))
    mig_mode = scan.ask(lambda: api.mig_mode(index))
    probed: list[tuple[int, bool]] = []
    links = _read_links(api, scan, probed)
    gpu_pcie, nvlinks = _read_health(api, scan, probed)
    health.append(HealthReadings(gpu_pcie=gpu_pcie, nvlinks=nvlinks))
    fabric = scan.ask(lambda: api.fabric_info(index))
    if fabric is not None and fabric.state == "NOT_SUPPORTED":
        fabric = None
    migs: tuple[MigDevice, ...] = ()
    if mig_mode is not None and mig_mode.current:
        found = scan.ask(lambda: api.mig_devices(index)) or ()
        migs = tuple(dataclasses.replace(m, parent_uuid=uuid, parent_index=index) for m in found)

    gpu = None
    if uuid is not None and model is not None and address is not None:
        gpu = NvmlGpu(
            index=index,
            uuid=uuid,
            model=model,
            address=address,
            memory_bytes=memory,
            cpu_affinity=cpus,
            numa_node=numa,
            mig_current=mig_mode.current if mig_mode is not None else None,
            mig_pending=mig_mode.pending if mig_mode is not None else None,
            links=links,
            fabric=fabric,
            migs=sorted_migs(migs),
        )
    lost = scan.lost_at is not None
    if not scan.failures and not lost:
        return gpu, None, False
    name = f"GPU {index}" + (f" ({address})" if address is not None else "")
    parts: list[str] = []
    if scan.lost_at is not None:
        parts.append(f"lost during the scan: {scan.lost_at}")
    parts.extend(scan.failures)
    if gpu is None:
        parts.append("left out: its UUID, name or PCI bus id could not be read")
    return gpu, condition(NAME, ConditionReason.DEGRADED, f"{name}: " + "; ".join(parts)), lost


def read_nvml(api: NvmlApi) -> tuple[NvmlSnapshot, tuple[Condition, ...]]:
    """What NVML says about the GPUs, plus Degraded conditions for the calls that failed.

    Raises ``NvmlCallError`` only when the device count itself cannot be read (NVML unusable).
    """
    snapshot, conditions, _ = read_nvml_with_health(api)
    return snapshot, conditions


def read_nvml_with_health(api: NvmlApi) -> tuple[NvmlSnapshot, tuple[Condition, ...], HealthReadings]:
    """``read_nvml`` plus the link readings (the GPUs' PCIe links, their NVLinks' states, speeds and
    error counters) asked in the same pass."""
    conditions: list[Condition] = []
    try:
        driver: str | None = api.driver_version()
    except NvmlCallError as e:
        driver = None
        if not e.not_supported:
            conditions.append(condition(NAME, ConditionReason.DEGRADED, str(e)))
    count = api.device_count()
    if count > MAX_DEVICES:
        message = f"NVML reports {count} GPUs, more than {MAX_DEVICES}: only the first {MAX_DEVICES} read"
        conditions.append(condition(NAME, ConditionReason.DEGRADED, message))
        count = MAX_DEVICES
    gpus: list[NvmlGpu] = []
    usable: list[int] = []  #: GPUs still there to ask about pairs
    health: list[HealthReadings] = []
    for index in range(count):
        gpu, problem, lost = _read_gpu(api, index, health)
        if gpu is not None:
            gpus.append(gpu)
            if not lost:
                usable.append(index)
        if problem is not None:
            conditions.append(problem)
    ancestors: list[tuple[tuple[int, int], LinkClass]] = []
    pair_failures: list[str] = []
    for i, a in enumerate(usable):
        for b in usable[i + 1 :]:
            try:
                level = api.common_ancestor(a, b)
            except NvmlCallError as e:
                if not e.not_supported:
                    pair_failures.append(f"GPUs {a},{b}: {e}")
                continue
            ancestors.append(((a, b), LINK_CLASS_OF_LEVEL[level]))
    if pair_failures:
        message = "; ".join(pair_failures[:SHOWN_PROBLEMS])
        if len(pair_failures) > SHOWN_PROBLEMS:
            message += f"; and {len(pair_failures) - SHOWN_PROBLEMS} more pairs"
        conditions.append(condition(NAME, ConditionReason.DEGRADED, message))
    snapshot = NvmlSnapshot(driver_version=driver, gpus=tuple(gpus), common_ancestor=tuple(sorted(ancestors)))
    readings = HealthReadings(
        gpu_pcie=tuple(r for part in health for r in part.gpu_pcie),
        nvlinks=tuple(r for part in health for r in part.nvlinks),
    )
    return snapshot, tuple(conditions), readings


# --------------------------------------------------------------------------------------------
# The source
# --------------------------------------------------------------------------------------------

NOT_THIS_SYSTEM = "NVML sees only the live host; no nvml.json in the bundle"
#: the same for a host root that is not ``/`` (``--host-root``): there is no bundle to name
NOT_THIS_ROOT = "NVML sees only the live host, not another --host-root (--nvml on uses it anyway)"


def _dump_problems(api: RecordedNvml) -> Condition:
    """One ParseError condition for what was left out of a dump (``replay``'s validation)."""
    shown = "; ".join(clip(problem, 160) for problem in api.problems[:SHOWN_PROBLEMS])
    more = len(api.problems) - SHOWN_PROBLEMS
    message = f"{api.path}: left out: {shown}" + (f"; and {more} more" if more > 0 else "")
    return condition(NAME, ConditionReason.PARSE_ERROR, message)


def _facts(api: NvmlApi) -> Facts:
    return _logged(_observed(api))


def _logged(facts: Facts) -> Facts:
    """``facts``, with each condition logged (Unavailable at info level, as ``failed`` does)."""
    for problem in facts.conditions:
        level = failure_level(problem.reason)
        if level == logging.INFO:
            log.info("source %s: %s: %s", NAME, problem.reason.value, problem.message, extra={"source": NAME})
        else:
            log.warning("source %s: %s", NAME, problem.message, extra={"source": NAME})
    return facts


def _observed(api: NvmlApi) -> Facts:
    """What NVML says through ``api`` as facts; logs nothing (``_logged`` does)."""
    try:
        snapshot, read_conditions, health = read_nvml_with_health(api)
    except NvmlCallError as e:
        return unobserved(NAME, ConditionReason.UNAVAILABLE, str(e))
    conditions = read_conditions
    if isinstance(api, RecordedNvml) and api.problems:
        conditions = (_dump_problems(api), *conditions)
    summary = f"{len(snapshot.gpus)} GPUs, driver {snapshot.driver_version or 'unknown'}"
    status = SourceStatus(
        name=NAME,
        ok=not conditions,
        message=summary if not conditions else f"Degraded: {summary}; {len(conditions)} problem(s)",
    )
    return Facts(nvml=snapshot, sources=(status,), conditions=conditions, health=health)


def _replayed(raw: bytes, where: str) -> Facts:
    """The facts of a dump's bytes (``where`` names it): read every scan, and when they are the
    same bytes as last scan's, last scan's facts are given back (through ``Context.cache``)."""
    return _observed(RecordedNvml.from_bytes(raw, where=where))


def _collect(ctx: Context) -> Facts:
    given = ctx.nvml
    if isinstance(given, str | os.PathLike):
        # a bundle's own nvml.json is read inside the bundle: a link out of it is refused
        inside = os.path.abspath(given).startswith(os.path.abspath(ctx.root.path) + os.sep)
        raw = read_dump(given, root=ctx.root if inside else None)
        return _logged(ctx.cache.last(_replayed)(raw, str(given)))
    if given is not None:
        if not isinstance(given, NvmlApi):
            raise TypeError(f"Context.nvml must be an NvmlApi or a dump path, not {type(given).__name__}")
        return _facts(given)
    live = ctx.live_nvml if ctx.live_nvml is not None else ctx.root.is_this_system
    if not live:
        return failed(NAME, ConditionReason.UNAVAILABLE, NOT_THIS_SYSTEM if ctx.bundle else NOT_THIS_ROOT)
    from nodetopo.sources.nvml.live import PynvmlApi  # here: a bundle's replay needs no ctypes

    api = PynvmlApi()
    try:
        api.open()
    except NvmlCallError as e:
        return failed(NAME, ConditionReason.UNAVAILABLE, f"NVML cannot start: {e}")
    with api:
        return _facts(api)


def collect(ctx: Context) -> SourceResult:
    """NVML's view: ``ctx.nvml`` (an ``NvmlApi``, or the path of a dump) or the live host.

    Without ``ctx.nvml`` the live NVML is used only when ``ctx.root`` is this system; a bundle
    without ``nvml.json`` gives Unavailable. NVML that cannot start (no library, no driver,
    driver/library mismatch, no permission) gives Unavailable with NVML's own words; failed
    calls on some GPUs give Degraded, with the other GPUs kept.
    """
    return guarded(NAME, lambda: _collect(ctx))
