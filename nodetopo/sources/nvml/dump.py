"""``dump_nvml``: record every answer ``read_nvml`` may ask of an ``NvmlApi``, failures included.

What ``nodetopo capture`` writes to ``nvml.json`` (format: ``nvml.dumpfile``);
``dump_nvml(RecordedNvml.from_dict(d)) == d`` for every dump it wrote. The health readings (the GPU's
PCIe link, each link's speed and error counters) are written where the GPU answered: one it cannot
give (not supported, or a library without the call) is left out, and replays as not supported.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable
from typing import TypeVar

from nodetopo.model import FabricInfo, MigDevice, PciAddress, format_cpulist
from nodetopo.sources.nvml.dumpfile import FORMAT
from nodetopo.sources.nvml.protocol import (
    FUNCTION_NOT_FOUND,
    GPU_IS_LOST,
    INVALID_ARGUMENT,
    MAX_NVLINKS,
    NOT_SUPPORTED,
    MigMode,
    NvlinkCounter,
    NvmlApi,
    NvmlCallError,
    P2pCapability,
    PcieQuestion,
    nvml_bus_id,
)

T = TypeVar("T")


#: link-state codes that end the probe of a GPU's links (past its last link, none, or GPU gone)
_END_OF_LINKS = (INVALID_ARGUMENT, NOT_SUPPORTED, FUNCTION_NOT_FOUND, GPU_IS_LOST)


def _record(errors: dict[str, str], key: str, ask: Callable[[], T]) -> T | None:
    try:
        return ask()
    except NvmlCallError as e:
        errors[key] = e.code
        return None


def _answered(errors: dict[str, str], key: str, ask: Callable[[], T]) -> T | None:
    """``_record`` of a health reading: an answer that says "this GPU cannot say" (not supported, or a
    library without the call) is left out, as a dump without the key replays (module docstring of
    ``nvml.dumpfile``); any other failure is recorded."""
    try:
        return ask()
    except NvmlCallError as e:
        if not e.not_supported:
            errors[key] = e.code
        return None


def _answers(entry: dict[str, object], key: str, answers: dict[str, object], errors: dict[str, str]) -> None:
    """``entry[key] = answers`` (with their errors) unless the GPU answered none of them."""
    present = {k: v for k, v in answers.items() if v is not None}
    if present or errors:
        entry[key] = _with_errors({k: answers[k] for k in answers}, errors)


def _jsonable(value: object) -> object:
    if isinstance(value, PciAddress):
        return nvml_bus_id(value)
    if isinstance(value, frozenset):
        return format_cpulist(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, MigMode):
        return {"current": value.current, "pending": value.pending}
    if isinstance(value, FabricInfo):
        return {
            "clusterUuid": value.cluster_uuid,
            "cliqueId": value.clique_id,
            "state": value.state,
            "health": value.health,
            **({"healthMask": value.health_mask} if value.health_mask is not None else {}),
        }
    if isinstance(value, MigDevice):
        return {
            "uuid": value.uuid,
            "gpuInstanceId": value.gpu_instance,
            "computeInstanceId": value.compute_instance,
            "profile": value.profile,
        }
    if isinstance(value, tuple):
        return [_jsonable(item) for item in value]
    return value


def _with_errors(entry: dict[str, object], errors: dict[str, str]) -> dict[str, object]:
    if errors:
        entry["errors"] = dict(sorted(errors.items()))
    return entry


def dump_nvml(api: NvmlApi) -> dict[str, object]:
    """Record everything ``read_nvml`` may ask of ``api``, failures included (module docstring)."""
    errors: dict[str, str] = {}
    dump: dict[str, object] = {
        "format": FORMAT,
        "driverVersion": _record(errors, "driverVersion", api.driver_version),
        "nvmlVersion": _record(errors, "nvmlVersion", api.nvml_version),
    }
    count = _record(errors, "deviceCount", api.device_count) or 0
    dump["devices"] = [_dump_device(api, index) for index in range(count)]
    ancestors: list[dict[str, object]] = []
    p2p: list[dict[str, object]] = []
    for a in range(count):
        for b in range(a + 1, count):
            pair_errors: dict[str, str] = {}
            level = _record(pair_errors, "level", functools.partial(api.common_ancestor, a, b))
            ancestors.append(_with_errors({"a": a, "b": b, "level": _jsonable(level)}, pair_errors))
            p2p_errors: dict[str, str] = {}
            entry: dict[str, object] = {"a": a, "b": b}
            for capability in P2pCapability:
                status = _record(
                    p2p_errors,
                    capability.value,
                    functools.partial(api.p2p_status, a, b, capability),
                )
                entry[capability.value] = _jsonable(status)
            p2p.append(_with_errors(entry, p2p_errors))
    dump["commonAncestor"] = ancestors
    dump["p2p"] = p2p
    return _with_errors(dump, errors)


def _dump_device(api: NvmlApi, index: int) -> dict[str, object]:
    errors: dict[str, str] = {}
    device: dict[str, object] = {"index": index}
    for key, ask in (
        ("uuid", api.uuid),
        ("name", api.name),
        ("pciBusId", api.pci_bus_id),
        ("memoryTotal", api.memory_total),
        ("cpuAffinity", api.cpu_affinity),
        ("numaNodeId", api.numa_node_id),
        ("migMode", api.mig_mode),
    ):
        device[key] = _jsonable(_record(errors, key, functools.partial(ask, index)))
    pcie_errors: dict[str, str] = {}
    pcie: dict[str, object] = {
        question.value: _answered(pcie_errors, question.value, functools.partial(api.pcie, index, question))
        for question in PcieQuestion
    }
    _answers(device, "pcie", pcie, pcie_errors)
    links: list[dict[str, object]] = []
    for link in range(MAX_NVLINKS):
        link_errors: dict[str, str] = {}
        try:
            active = api.nvlink_active(index, link)
        except NvmlCallError as e:
            if e.code in _END_OF_LINKS:
                if e.code != INVALID_ARGUMENT:
                    errors["nvlinks"] = e.code
                break
            links.append({"link": link, "active": None, "errors": {"active": e.code}})
            continue
        entry: dict[str, object] = {"link": link, "active": active}
        if active:
            entry["remotePciBusId"] = _jsonable(
                _record(
                    link_errors,
                    "remotePciBusId",
                    functools.partial(api.nvlink_remote_pci_bus_id, index, link),
                )
            )
            entry["remoteType"] = _jsonable(
                _record(link_errors, "remoteType", functools.partial(api.nvlink_remote_type, index, link))
            )
            speed = _answered(link_errors, "speedMBps", functools.partial(api.nvlink_speed_mbps, index, link))
            if speed is not None:
                entry["speedMBps"] = speed
            counter_errors: dict[str, str] = {}
            counters: dict[str, object] = {
                counter.value: _answered(
                    counter_errors,
                    counter.value,
                    functools.partial(api.nvlink_error_counter, index, link, counter),
                )
                for counter in NvlinkCounter
            }
            _answers(entry, "counters", counters, counter_errors)
        links.append(_with_errors(entry, link_errors))
    device["nvlinks"] = links
    device["fabric"] = _jsonable(_record(errors, "fabric", lambda: api.fabric_info(index)))
    mig_mode = device["migMode"]
    migs = None
    if isinstance(mig_mode, dict) and mig_mode.get("current"):
        migs = _jsonable(_record(errors, "migDevices", lambda: api.mig_devices(index)))
    device["migDevices"] = migs
    return _with_errors(device, errors)
