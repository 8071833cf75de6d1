"""``RecordedNvml``: a recorded NVML dump (``nvml.json``) replayed through the ``NvmlApi`` protocol.

Dump format ``nodetopo-nvml-dump/v1``
------------------------------------
One JSON object. Keys are camelCase; lists are sorted as described; every object may carry an
``errors`` object mapping one of its own keys to the NVML error constant name the call raised
(``"NVML_ERROR_NOT_SUPPORTED"``, ``"NVML_ERROR_GPU_IS_LOST"``, ...); the key's value is then
``null``. A ``null`` value *without* an ``errors`` entry means "not asked" and replays as
``NVML_ERROR_NOT_SUPPORTED`` (hand-written dumps may omit the ``errors`` entry of a
not-supported call; ``dump_nvml`` always writes it, except for the "not asked" cases named below).
Unknown keys are ignored; a missing optional key reads as ``null``.

``` text
{
  "format":        "nodetopo-nvml-dump/v1",                  required, exactly this
  "driverVersion": "550.54.15" | null,                        nvmlSystemGetDriverVersion
  "nvmlVersion":   "12.550.54.15" | null,                     nvmlSystemGetNVMLVersion
  "errors":        {"driverVersion"|"nvmlVersion"|"deviceCount": "NVML_ERROR_..."},   optional
                   (an errors.deviceCount entry makes nvmlDeviceGetCount fail: devices must be [])
  "devices": [                                 one per NVML index, sorted, indices exactly 0..n-1
    {
      "index":       0,
      "uuid":        "GPU-8c4a...",                           nvmlDeviceGetUUID
      "name":        "NVIDIA H100 80GB HBM3",                 nvmlDeviceGetName
      "pciBusId":    "00000000:18:00.0",                      nvmlDeviceGetPciInfo().busId
                     (written in NVML's form: 8 hex digit domain, upper case; any form
                      PciAddress.parse accepts is read)
      "memoryTotal": 85520809984,                             nvmlDeviceGetMemoryInfo().total, bytes
      "cpuAffinity": "0-55,112-167",                          nvmlDeviceGetCpuAffinity, as a cpulist
      "numaNodeId":  null,                                    nvmlDeviceGetNumaNodeId (GPU memory's
                                                              own node on GH200/GB200; int)
      "migMode":     {"current": false, "pending": false},    nvmlDeviceGetMigMode
      "nvlinks": [                                            links 0, 1, ... in order (see below)
        {"link": 0, "active": true,                           nvmlDeviceGetNvLinkState
         "remotePciBusId": "00000000:05:00.0",                nvmlDeviceGetNvLinkRemotePciInfo
         "remoteType": "SWITCH"},                             nvmlDeviceGetNvLinkRemoteDeviceType:
                                                              GPU | SWITCH | IBMNPU | UNKNOWN
        {"link": 1, "active": false}                          inactive: remote keys not asked
      ],
      "fabric": {"clusterUuid": "9b2c7a4e-...", "cliqueId": 32766,       nvmlDeviceGetGpuFabricInfoV
                 "state": "COMPLETED", "health": "HEALTHY"} | null,
                 state: NOT_SUPPORTED | NOT_STARTED | IN_PROGRESS | COMPLETED;
                 health: HEALTHY | UNHEALTHY | LIMITED_CAPACITY | NOT_SUPPORTED | null (old drivers)
      "migDevices": [                                         asked only when migMode.current is
        {"uuid": "MIG-5c0e...", "gpuInstanceId": 1,           true, else null (not asked);
         "computeInstanceId": 0, "profile": "3g.40gb"}        sorted by (gpuInstanceId,
      ] | null,                                               computeInstanceId, uuid)
      "errors": {"numaNodeId": "NVML_ERROR_NOT_SUPPORTED"}    optional
    }
  ],
  "commonAncestor": [                                         every pair a < b, sorted by (a, b)
    {"a": 0, "b": 1, "level": "NVML_TOPOLOGY_SINGLE"}         INTERNAL | SINGLE | MULTIPLE |
  ],                                                          HOSTBRIDGE | NODE | SYSTEM
  "p2p": [                                                    every pair a < b, sorted by (a, b)
    {"a": 0, "b": 1, "read": "OK", "nvlink": "OK"}            nvmlDeviceGetP2PStatus with caps
  ]                                                           index READ / NVLINK: OK |
}                                                             CHIPSET_NOT_SUPPORTED |
                                                              GPU_NOT_SUPPORTED |
                                                              IOH_TOPOLOGY_NOT_SUPPORTED |
                                                              DISABLED_BY_REGKEY | NOT_SUPPORTED |
                                                              UNKNOWN
```

NVLinks: links are probed 0, 1, 2, ... until the state call fails with
``NVML_ERROR_INVALID_ARGUMENT`` (past the GPU's last link), ``NVML_ERROR_NOT_SUPPORTED`` or
``NVML_ERROR_FUNCTION_NOT_FOUND`` (no NVLink at all) or ``NVML_ERROR_GPU_IS_LOST``, or until
``MAX_NVLINKS`` (36) links. ``nvlinks`` lists the probed links in order; a link that is not
listed replays with the code in the device's ``errors.nvlinks`` entry when there is one (e.g.
``NVML_ERROR_NOT_SUPPORTED`` on a PCIe GPU without NVLink), else with
``NVML_ERROR_INVALID_ARGUMENT``: so an 18-link H100 lists links 0-17 and needs no entry, and a
GPU without NVLink has ``"nvlinks": []`` plus ``"errors": {"nvlinks": "NVML_ERROR_NOT_SUPPORTED"}``.
A link's own failed calls go in the link object's ``errors``
(``{"link": 3, "active": null, "errors": {"active": "NVML_ERROR_UNKNOWN"}}``).

Pairs: ``commonAncestor`` and ``p2p`` may hold ``errors`` too (``{"a": 0, "b": 1, "level": null,
"errors": {"level": "NVML_ERROR_UNKNOWN"}}``); a pair that is not listed replays as not supported.

Fabric: a probe that completed with a failing status (``state`` COMPLETED, ``status`` not
``NVML_SUCCESS``) is reported as an error of the call, with that status as its code.
MIG profile: the text after ``MIG `` in the MIG device's ``nvmlDeviceGetName`` (``3g.40gb``).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

from nodetopo.errors import ParseError
from nodetopo.model import FabricInfo, MigDevice, PciAddress, RemoteDeviceType, parse_cpulist
from nodetopo.sources.nvml.protocol import (
    INVALID_ARGUMENT,
    NAME,
    NOT_SUPPORTED,
    MigMode,
    NvmlCallError,
    P2pCapability,
    P2pStatus,
    TopologyLevel,
    sorted_migs,
)

FORMAT = "nodetopo-nvml-dump/v1"

_ERROR_CODE = re.compile(r"^NVML_ERROR_[A-Z0-9_]+$")

T = TypeVar("T")
E = TypeVar("E", bound=enum.Enum)

# --------------------------------------------------------------------------------------------
# Replaying a dump
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _RecordedLink:
    link: int
    active: bool | None
    remote_address: PciAddress | None
    remote_type: RemoteDeviceType | None
    errors: Mapping[str, str]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _RecordedDevice:
    index: int
    uuid: str | None
    name: str | None
    address: PciAddress | None
    memory_total: int | None
    cpu_affinity: frozenset[int] | None
    numa_node_id: int | None
    mig_mode: MigMode | None
    links: Mapping[int, _RecordedLink]
    fabric: FabricInfo | None
    mig_devices: tuple[MigDevice, ...] | None
    errors: Mapping[str, str]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _RecordedPair:
    level: TopologyLevel | None
    read: P2pStatus | None
    nvlink: P2pStatus | None
    errors: Mapping[str, str]


def _answer(call: str, key: str, value: T | None, errors: Mapping[str, str]) -> T:
    """A recorded answer: the recorded error, else the value, else "not asked" = not supported."""
    code = errors.get(key)
    if code is not None:
        raise NvmlCallError(call, code)
    if value is None:
        raise NvmlCallError(call, NOT_SUPPORTED)
    return value


class RecordedNvml:
    """``NvmlApi`` that answers from a ``nodetopo-nvml-dump/v1`` dump (see the module docstring)."""

    def __init__(
        self,
        *,
        driver_version: str | None,
        nvml_version: str | None,
        devices: tuple[_RecordedDevice, ...],
        pairs: Mapping[tuple[int, int], _RecordedPair],
        errors: Mapping[str, str],
    ) -> None:
        self._driver_version = driver_version
        self._nvml_version = nvml_version
        self._devices = devices
        self._pairs = pairs
        self._errors = errors

    @classmethod
    def from_json(cls, path: str | os.PathLike[str]) -> RecordedNvml:
        """Load ``nvml.json``; raises ``ParseError`` naming the file and the bad key."""
        where = str(path)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as e:
            raise ParseError(NAME, where, f"cannot read the NVML dump: {e.strerror or e}") from e
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ParseError(NAME, where, f"not JSON: {e.msg}", line=e.lineno) from e
        return cls.from_dict(data, path=where)

    @classmethod
    def from_dict(cls, data: object, *, path: str = "<nvml dump>") -> RecordedNvml:
        """Build from a parsed dump; raises ``ParseError`` (source ``nvml``) on a malformed one."""
        return _DumpReader(path).read(data)

    # -- NvmlApi --------------------------------------------------------------------------------

    def _device(self, call: str, index: int) -> _RecordedDevice:
        if 0 <= index < len(self._devices):
            return self._devices[index]
        raise NvmlCallError(call, INVALID_ARGUMENT, f"no device {index} in the dump")

    def _on_device(self, call: str, index: int, key: str, pick: Callable[[_RecordedDevice], T | None]) -> T:
        device = self._device(call, index)
        return _answer(call, key, pick(device), device.errors)

    def driver_version(self) -> str:
        return _answer("nvmlSystemGetDriverVersion", "driverVersion", self._driver_version, self._errors)

    def nvml_version(self) -> str:
        return _answer("nvmlSystemGetNVMLVersion", "nvmlVersion", self._nvml_version, self._errors)

    def device_count(self) -> int:
        code = self._errors.get("deviceCount")
        if code is not None:
            raise NvmlCallError("nvmlDeviceGetCount", code)
        return len(self._devices)

    def uuid(self, index: int) -> str:
        return self._on_device("nvmlDeviceGetUUID", index, "uuid", lambda d: d.uuid)

    def name(self, index: int) -> str:
        return self._on_device("nvmlDeviceGetName", index, "name", lambda d: d.name)

    def pci_bus_id(self, index: int) -> PciAddress:
        return self._on_device("nvmlDeviceGetPciInfo", index, "pciBusId", lambda d: d.address)

    def memory_total(self, index: int) -> int:
        return self._on_device("nvmlDeviceGetMemoryInfo", index, "memoryTotal", lambda d: d.memory_total)

    def cpu_affinity(self, index: int) -> frozenset[int]:
        return self._on_device("nvmlDeviceGetCpuAffinity", index, "cpuAffinity", lambda d: d.cpu_affinity)

    def numa_node_id(self, index: int) -> int:
        return self._on_device("nvmlDeviceGetNumaNodeId", index, "numaNodeId", lambda d: d.numa_node_id)

    def mig_mode(self, index: int) -> MigMode:
        return self._on_device("nvmlDeviceGetMigMode", index, "migMode", lambda d: d.mig_mode)

    def fabric_info(self, index: int) -> FabricInfo:
        return self._on_device("nvmlDeviceGetGpuFabricInfoV", index, "fabric", lambda d: d.fabric)

    def mig_devices(self, index: int) -> tuple[MigDevice, ...]:
        return self._on_device(
            "nvmlDeviceGetMigDeviceHandleByIndex", index, "migDevices", lambda d: d.mig_devices
        )

    def _link(self, call: str, index: int, link: int) -> _RecordedLink:
        device = self._device(call, index)
        recorded = device.links.get(link)
        if recorded is None:
            raise NvmlCallError(call, device.errors.get("nvlinks", INVALID_ARGUMENT))
        return recorded

    def nvlink_active(self, index: int, link: int) -> bool:
        call = "nvmlDeviceGetNvLinkState"
        recorded = self._link(call, index, link)
        return _answer(call, "active", recorded.active, recorded.errors)

    def nvlink_remote_pci_bus_id(self, index: int, link: int) -> PciAddress:
        call = "nvmlDeviceGetNvLinkRemotePciInfo"
        recorded = self._link(call, index, link)
        return _answer(call, "remotePciBusId", recorded.remote_address, recorded.errors)

    def nvlink_remote_type(self, index: int, link: int) -> RemoteDeviceType:
        call = "nvmlDeviceGetNvLinkRemoteDeviceType"
        recorded = self._link(call, index, link)
        return _answer(call, "remoteType", recorded.remote_type, recorded.errors)

    def _pair(self, call: str, a: int, b: int) -> _RecordedPair:
        self._device(call, a)
        self._device(call, b)
        pair = self._pairs.get((min(a, b), max(a, b)))
        return pair if pair is not None else _RecordedPair(level=None, read=None, nvlink=None, errors={})

    def common_ancestor(self, a: int, b: int) -> TopologyLevel:
        call = "nvmlDeviceGetTopologyCommonAncestor"
        pair = self._pair(call, a, b)
        return _answer(call, "level", pair.level, pair.errors)

    def p2p_status(self, a: int, b: int, capability: P2pCapability) -> P2pStatus:
        call = "nvmlDeviceGetP2PStatus"
        pair = self._pair(call, a, b)
        value = pair.read if capability is P2pCapability.READ else pair.nvlink
        return _answer(call, capability.value, value, pair.errors)


class _DumpReader:
    """Validates a dump while turning it into recorded answers; every problem is a ParseError."""

    def __init__(self, path: str) -> None:
        self.path = path

    def fail(self, where: str, detail: str) -> ParseError:
        return ParseError(NAME, self.path, f"{where}: {detail}")

    def obj(self, value: object, where: str) -> dict[str, object]:
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise self.fail(where, f"expected a JSON object, found {type(value).__name__}")
        return value

    def array(self, value: object, where: str) -> list[object]:
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.fail(where, f"expected a JSON array, found {type(value).__name__}")
        return value

    def opt(self, data: dict[str, object], key: str, kind: type[T], where: str) -> T | None:
        value = data.get(key)
        if value is None:
            return None
        # bool is an int in Python; an int key must not accept true/false
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise self.fail(f"{where}.{key}", f"expected {kind.__name__}, found {value!r}")
        return value

    def need(self, data: dict[str, object], key: str, kind: type[T], where: str) -> T:
        value = self.opt(data, key, kind, where)
        if value is None:
            raise self.fail(f"{where}.{key}", "required")
        return value

    def errors(self, data: dict[str, object], where: str) -> dict[str, str]:
        raw = self.obj(data.get("errors") or {}, f"{where}.errors")
        for key, code in raw.items():
            if not isinstance(code, str) or not _ERROR_CODE.match(code):
                raise self.fail(f"{where}.errors.{key}", f"expected an NVML_ERROR_* name, found {code!r}")
        return {key: str(code) for key, code in raw.items()}

    def address(self, data: dict[str, object], key: str, where: str) -> PciAddress | None:
        text = self.opt(data, key, str, where)
        if text is None:
            return None
        try:
            return PciAddress.parse(text)
        except ValueError as e:
            raise self.fail(f"{where}.{key}", str(e)) from None

    def choice(self, data: dict[str, object], key: str, kind: type[E], where: str) -> E | None:
        text = self.opt(data, key, str, where)
        if text is None:
            return None
        try:
            return kind(text)
        except ValueError:
            allowed = " | ".join(member.value for member in kind)
            raise self.fail(f"{where}.{key}", f"expected {allowed}, found {text!r}") from None

    def read(self, data: object) -> RecordedNvml:
        top = self.obj(data, "dump")
        if top.get("format") != FORMAT:
            raise self.fail("format", f"expected {FORMAT!r}, found {top.get('format')!r}")
        devices = tuple(
            self.device(raw, f"devices[{i}]")
            for i, raw in enumerate(self.array(top.get("devices"), "devices"))
        )
        for position, device in enumerate(devices):
            if device.index != position:
                raise self.fail(f"devices[{position}].index", f"expected {position}, found {device.index}")
        errors = self.errors(top, "dump")
        if "deviceCount" in errors and devices:
            raise self.fail("errors.deviceCount", "a failed device count cannot list devices")
        pairs: dict[tuple[int, int], dict[str, object]] = {}
        for list_key, fields in (("commonAncestor", ("level",)), ("p2p", ("read", "nvlink"))):
            for i, raw in enumerate(self.array(top.get(list_key), list_key)):
                where = f"{list_key}[{i}]"
                entry = self.obj(raw, where)
                a, b = self.need(entry, "a", int, where), self.need(entry, "b", int, where)
                if not 0 <= a < b < len(devices):
                    raise self.fail(where, f"expected device indices a < b < {len(devices)}, found {a}, {b}")
                merged = pairs.setdefault((a, b), {"errors": {}})
                for key in fields:
                    if key in merged:
                        raise self.fail(where, f"pair ({a}, {b}) recorded twice")
                    merged[key] = entry.get(key)
                    errors_of_entry = self.errors(entry, where)
                    if key in errors_of_entry:
                        merged_errors = merged["errors"]
                        assert isinstance(merged_errors, dict)
                        merged_errors[key] = errors_of_entry[key]
                merged["where"] = where
        return RecordedNvml(
            driver_version=self.opt(top, "driverVersion", str, "dump"),
            nvml_version=self.opt(top, "nvmlVersion", str, "dump"),
            devices=devices,
            pairs={key: self.pair(raw) for key, raw in pairs.items()},
            errors=errors,
        )

    def pair(self, raw: dict[str, object]) -> _RecordedPair:
        where = str(raw.pop("where"))
        errors = raw.pop("errors")
        assert isinstance(errors, dict)
        return _RecordedPair(
            level=self.choice(raw, "level", TopologyLevel, where),
            read=self.choice(raw, "read", P2pStatus, where),
            nvlink=self.choice(raw, "nvlink", P2pStatus, where),
            errors=errors,
        )

    def device(self, raw: object, where: str) -> _RecordedDevice:
        data = self.obj(raw, where)
        cpus_text = self.opt(data, "cpuAffinity", str, where)
        try:
            cpus = parse_cpulist(cpus_text) if cpus_text is not None else None
        except ValueError as e:
            raise self.fail(f"{where}.cpuAffinity", str(e)) from None
        mig_mode_raw = data.get("migMode")
        mig_mode = None
        if mig_mode_raw is not None:
            mode = self.obj(mig_mode_raw, f"{where}.migMode")
            mig_mode = MigMode(
                current=self.need(mode, "current", bool, f"{where}.migMode"),
                pending=self.need(mode, "pending", bool, f"{where}.migMode"),
            )
        links: dict[int, _RecordedLink] = {}
        for i, link_raw in enumerate(self.array(data.get("nvlinks"), f"{where}.nvlinks")):
            link = self.link(link_raw, f"{where}.nvlinks[{i}]")
            if link.link in links:
                raise self.fail(f"{where}.nvlinks[{i}]", f"link {link.link} recorded twice")
            links[link.link] = link
        mig_devices = None
        if data.get("migDevices") is not None:
            mig_devices = sorted_migs(
                [
                    self.mig(mig_raw, f"{where}.migDevices[{i}]")
                    for i, mig_raw in enumerate(self.array(data["migDevices"], f"{where}.migDevices"))
                ]
            )
        return _RecordedDevice(
            index=self.need(data, "index", int, where),
            uuid=self.opt(data, "uuid", str, where),
            name=self.opt(data, "name", str, where),
            address=self.address(data, "pciBusId", where),
            memory_total=self.opt(data, "memoryTotal", int, where),
            cpu_affinity=cpus,
            numa_node_id=self.opt(data, "numaNodeId", int, where),
            mig_mode=mig_mode,
            links=links,
            fabric=self.fabric(data.get("fabric"), f"{where}.fabric"),
            mig_devices=mig_devices,
            errors=self.errors(data, where),
        )

    def link(self, raw: object, where: str) -> _RecordedLink:
        data = self.obj(raw, where)
        return _RecordedLink(
            link=self.need(data, "link", int, where),
            active=self.opt(data, "active", bool, where),
            remote_address=self.address(data, "remotePciBusId", where),
            remote_type=self.choice(data, "remoteType", RemoteDeviceType, where),
            errors=self.errors(data, where),
        )

    def fabric(self, raw: object, where: str) -> FabricInfo | None:
        if raw is None:
            return None
        data = self.obj(raw, where)
        return FabricInfo(
            cluster_uuid=self.need(data, "clusterUuid", str, where),
            clique_id=self.need(data, "cliqueId", int, where),
            state=self.need(data, "state", str, where),
            health=self.opt(data, "health", str, where),
        )

    def mig(self, raw: object, where: str) -> MigDevice:
        data = self.obj(raw, where)
        return MigDevice(
            uuid=self.need(data, "uuid", str, where),
            gpu_instance=self.opt(data, "gpuInstanceId", int, where),
            compute_instance=self.opt(data, "computeInstanceId", int, where),
            profile=self.opt(data, "profile", str, where),
        )
