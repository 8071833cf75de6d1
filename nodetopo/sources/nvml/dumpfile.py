"""A recorded NVML dump (``nvml.json``): its format, and the reader that validates it into recorded answers.

``replay.RecordedNvml`` replays the answers through the ``NvmlApi`` protocol; ``dump.dump_nvml`` writes
the format.

Dump format ``nodetopo-nvml-dump/v1``
------------------------------------
One JSON object. Keys are camelCase; lists are sorted as described; every object may carry an
``errors`` object mapping one of its own keys to the NVML error constant name the call raised
(``"NVML_ERROR_NOT_SUPPORTED"``, ``"NVML_ERROR_GPU_IS_LOST"``, ...); the key's value is then
``null``. A ``null`` value *without* an ``errors`` entry means "not asked" and replays as
``NVML_ERROR_NOT_SUPPORTED`` (hand-written dumps may omit the ``errors`` entry of a
not-supported call; ``dump_nvml`` always writes it, except for the "not asked" cases named below).
Unknown keys are ignored; a missing optional key reads as ``null``.

Validation is per device, per pair and per field, as every other source reads its input: only a file
that is not such a dump at all (not JSON, nested too deep, larger than ``NVML_DUMP_LIMIT``, not an
object, another ``format``) fails the source. A value of the wrong type or out of the range real
hardware has (``RANGES``; strings at most ``MAX_TEXT`` characters) is left out and replays as "not
asked"; a link, pair or MIG device without its identifying keys is left out; more than
``MAX_DEVICES`` devices are cut to that many. Each such problem is kept in ``RecordedNvml.problems``
(the source reports them as one ``ParseError`` condition) and the rest of the dump replays.

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
      "pcie": {"maxGen": 5, "deviceMaxGen": 5,                 the GPU's own PCIe link: Max-, GpuMax-,
               "currentGen": 5, "maxWidth": 16,               Curr-PcieLinkGeneration, Max-/Curr-
               "currentWidth": 16, "replays": 0} | null,      PcieLinkWidth, PcieReplayCounter
      "nvlinks": [                                            links 0, 1, ... in order (see below)
        {"link": 0, "active": true,                           nvmlDeviceGetNvLinkState
         "remotePciBusId": "00000000:05:00.0",                nvmlDeviceGetNvLinkRemotePciInfo
         "remoteType": "SWITCH",                              nvmlDeviceGetNvLinkRemoteDeviceType:
                                                              GPU | SWITCH | IBMNPU | UNKNOWN
         "speedMBps": 26562,                                  NVML_FI_DEV_NVLINK_GET_SPEED (field value)
         "counters": {"replay": 0, "recovery": 0,             nvmlDeviceGetNvLinkErrorCounter
                      "crcFlit": 0, "crcData": 0}},           (DL_REPLAY, DL_RECOVERY, DL_CRC_FLIT/DATA)
        {"link": 1, "active": false}                          inactive: remote keys not asked
      ],
      "fabric": {"clusterUuid": "9b2c7a4e-...", "cliqueId": 32766,       nvmlDeviceGetGpuFabricInfoV
                 "state": "COMPLETED", "health": "HEALTHY",
                 "healthMask": 0} | null,
                 state: NOT_SUPPORTED | NOT_STARTED | IN_PROGRESS | COMPLETED;
                 health: HEALTHY | UNHEALTHY | LIMITED_CAPACITY | NOT_SUPPORTED | null (old drivers);
                 healthMask: the structure's healthMask (v2 and later), null before
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

Health (the link-state readings ``nodetopo.health`` judges): ``pcie``, each active link's
``speedMBps`` and ``counters`` and the fabric's ``healthMask`` were added to v1 later; a dump without
them replays them as "not asked". ``pcie`` and ``counters`` are objects with their own ``errors``.

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
from collections.abc import Mapping
from pathlib import Path
from typing import TypeVar

from nodetopo.errors import ParseError, excerpt
from nodetopo.host import NVML_DUMP_LIMIT, HostRoot, Refused, read_regular_file
from nodetopo.model import (
    FabricInfo,
    MigDevice,
    PciAddress,
    RemoteDeviceType,
    parse_cpulist,
)
from nodetopo.sources.nvml.dumpjson import (
    MAX_DEPTH,
    MAX_TEXT,
    flatten_deep,
    loads_bounded,
    out_of_range,
    shown_value,
)
from nodetopo.sources.nvml.protocol import (
    MAX_DEVICES,
    NAME,
    MigMode,
    NvlinkCounter,
    P2pStatus,
    PcieQuestion,
    TopologyLevel,
    sorted_migs,
)

FORMAT = "nodetopo-nvml-dump/v1"

_ERROR_CODE = re.compile(r"^NVML_ERROR_[A-Z0-9_]{1,60}$")

#: the CPU ids one dump may build in distinct CPU sets
CPU_IDS_PER_DUMP = 1 << 18
#: problems listed one by one in the source's condition (the rest are counted)
SHOWN_PROBLEMS = 5

T = TypeVar("T")
E = TypeVar("E", bound=enum.Enum)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _RecordedLink:
    link: int
    active: bool | None
    remote_address: PciAddress | None
    remote_type: RemoteDeviceType | None
    errors: Mapping[str, str]
    speed_mbps: int | None = None
    counters: Mapping[str, int] = dataclasses.field(default_factory=dict)
    counter_errors: Mapping[str, str] = dataclasses.field(default_factory=dict)


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
    pcie: Mapping[str, int] = dataclasses.field(default_factory=dict)
    pcie_errors: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _RecordedPair:
    level: TopologyLevel | None
    read: P2pStatus | None
    nvlink: P2pStatus | None
    errors: Mapping[str, str]


@dataclasses.dataclass(slots=True, kw_only=True)
class RecordedDump:
    """A dump's recorded answers, as ``RecordedNvml`` replays them; ``problems``: what was left out
    (one ``<key path>: <why>`` each, see the module docstring)."""

    driver_version: str | None
    nvml_version: str | None
    devices: tuple[_RecordedDevice, ...]
    pairs: Mapping[tuple[int, int], _RecordedPair]
    errors: Mapping[str, str]
    path: str = "<nvml dump>"
    problems: tuple[str, ...] = ()


def load_dump(raw: bytes, *, where: str = "<nvml dump>") -> RecordedDump:
    """The recorded answers of the bytes of ``nvml.json`` (``where`` names it in messages).

    Raises ``ParseError`` when they are not a dump at all (module docstring).
    """
    text = raw.decode("utf-8", errors="replace")
    flattened: list[int] = []
    try:
        data = loads_bounded(text)
    except RecursionError:
        # Nesting no dump has: replace each too-deep value by null (that value is then "not
        # asked", noted below) and read the rest.
        text, flattened = flatten_deep(text)
        try:
            data = loads_bounded(text)
        except RecursionError:
            raise ParseError(NAME, where, "not a dump: JSON nested too deep") from None
        except json.JSONDecodeError as e:
            raise ParseError(NAME, where, f"not JSON: {e.msg}", line=e.lineno) from None
    except json.JSONDecodeError as e:
        raise ParseError(NAME, where, f"not JSON: {e.msg}", line=e.lineno) from None
    dump = dump_from_dict(data, path=where)
    if flattened:
        shown = ", ".join(str(line) for line in flattened[:SHOWN_PROBLEMS])
        more = f" and {len(flattened) - SHOWN_PROBLEMS} more" if len(flattened) > SHOWN_PROBLEMS else ""
        note = f"values nested deeper than {MAX_DEPTH} levels on lines {shown}{more}: read as null"
        dump.problems = (note, *dump.problems)
    return dump


def dump_from_dict(data: object, *, path: str = "<nvml dump>") -> RecordedDump:
    """The recorded answers of a parsed dump; ``ParseError`` only when it is not a dump at all."""
    return _DumpReader(path).read(data)


def read_dump(path: str | os.PathLike[str], *, root: HostRoot | None = None) -> bytes:
    """The bytes of an NVML dump (inside ``root`` when given); ``ParseError`` naming the file when
    it cannot be read, or is not a regular file of at most ``NVML_DUMP_LIMIT`` bytes."""
    try:
        if root is not None:
            return root.read_bytes(Path(path), limit=NVML_DUMP_LIMIT)
        return read_regular_file(path, limit=NVML_DUMP_LIMIT)
    except Refused as e:
        raise ParseError(NAME, str(path), f"not read: {e.why}") from None
    except OSError as e:
        raise ParseError(NAME, str(path), f"cannot read the NVML dump: {e.strerror or e}") from None


class _DumpReader:
    """Validates a dump while turning it into recorded answers (see "Validation" in the docstring).

    ``fail`` is for a file that is not a dump at all; everything else is ``note``-d in ``problems``
    and left out, so that one bad value costs that value.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.problems: list[str] = []
        self._cpus: dict[str, frozenset[int]] = {}
        self._cpu_budget = CPU_IDS_PER_DUMP

    def cpus(self, text: str, where: str) -> frozenset[int] | None:
        """A cpulist, parsed once per distinct text; distinct sets bounded in total (a hostile dump of
        256 GPUs with 65,536 CPUs each must not build gigabytes)."""
        known = self._cpus.get(text)
        if known is not None:
            return known
        if self._cpu_budget <= 0:
            self.note(where, "more distinct CPU sets than any machine has: left out")
            return None
        try:
            cpus = parse_cpulist(text)
        except ValueError as e:
            self.note(where, str(e))
            return None
        self._cpu_budget -= max(len(cpus), 1)
        self._cpus[text] = cpus
        return cpus

    def fail(self, where: str, detail: str) -> ParseError:
        return ParseError(NAME, self.path, f"{where}: {detail}")

    def note(self, where: str, detail: str) -> None:
        self.problems.append(f"{where}: {detail}")

    def obj(self, value: object, where: str, *, element: bool = False) -> dict[str, object] | None:
        """``value`` as an object; None when null (noted for an ``element`` of an array) or wrong."""
        if value is None and not element:
            return None
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            self.note(where, f"expected a JSON object, found {type(value).__name__}")
            return None
        return value

    def array(self, value: object, where: str) -> list[object]:
        if value is None:
            return []
        if not isinstance(value, list):
            self.note(where, f"expected a JSON array, found {type(value).__name__}")
            return []
        return value

    def opt(self, data: dict[str, object], key: str, kind: type[T], where: str) -> T | None:
        """``data[key]`` when it is a ``kind`` in range, else None (noted when present but bad)."""
        value = data.get(key)
        if value is None:
            return None
        # bool is an int in Python; an int key must not accept true/false
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            self.note(f"{where}.{key}", f"expected {kind.__name__}, found {shown_value(value)}")
            return None
        problem = out_of_range(key, value)
        if problem is not None:
            self.note(f"{where}.{key}", problem)
            return None
        return value

    def need(self, data: dict[str, object], key: str, kind: type[T], where: str) -> T | None:
        """``opt``, noting an absent key too: the caller leaves its element out on None."""
        if data.get(key) is None:
            self.note(f"{where}.{key}", "required")
            return None
        return self.opt(data, key, kind, where)

    def errors(self, data: dict[str, object], where: str) -> dict[str, str]:
        raw = self.obj(data.get("errors"), f"{where}.errors") or {}
        errors: dict[str, str] = {}
        for key, code in raw.items():
            if isinstance(code, str) and _ERROR_CODE.match(code) and len(key) <= MAX_TEXT:
                errors[key] = code
            else:
                self.note(
                    f"{where}.errors.{excerpt(key)}",
                    f"expected an NVML_ERROR_* name, found {shown_value(code)}",
                )
        return errors

    def address(self, data: dict[str, object], key: str, where: str) -> PciAddress | None:
        text = self.opt(data, key, str, where)
        if text is None:
            return None
        try:
            return PciAddress.parse(text)
        except ValueError as e:
            self.note(f"{where}.{key}", str(e))
            return None

    def choice(self, data: dict[str, object], key: str, kind: type[E], where: str) -> E | None:
        text = self.opt(data, key, str, where)
        if text is None:
            return None
        try:
            return kind(text)
        except ValueError:
            allowed = " | ".join(member.value for member in kind)
            self.note(f"{where}.{key}", f"expected {allowed}, found {excerpt(text)}")
            return None

    def read(self, data: object) -> RecordedDump:
        if not isinstance(data, dict):
            raise self.fail("dump", f"expected a JSON object, found {type(data).__name__}")
        top = self.obj(data, "dump") or {}
        if top.get("format") != FORMAT:
            raise self.fail("format", f"expected {FORMAT!r}, found {shown_value(top.get('format'))}")
        raw_devices = self.array(top.get("devices"), "devices")
        if len(raw_devices) > MAX_DEVICES:
            self.note("devices", f"{len(raw_devices)} devices, more than {MAX_DEVICES}: the rest left out")
            raw_devices = raw_devices[:MAX_DEVICES]
        devices = tuple(self.device(raw, position) for position, raw in enumerate(raw_devices))
        errors = self.errors(top, "dump")
        if "deviceCount" in errors and devices:
            self.note("errors.deviceCount", "a failed device count cannot list devices: devices left out")
            devices = ()
        pairs: dict[tuple[int, int], dict[str, object]] = {}
        for list_key, fields in (("commonAncestor", ("level",)), ("p2p", ("read", "nvlink"))):
            for i, raw in enumerate(self.array(top.get(list_key), list_key)):
                where = f"{list_key}[{i}]"
                entry = self.obj(raw, where, element=True)
                if entry is None:
                    continue
                a, b = self.need(entry, "a", int, where), self.need(entry, "b", int, where)
                if a is None or b is None:
                    continue
                if not a < b < len(devices):
                    self.note(where, f"expected device indices a < b < {len(devices)}, found {a}, {b}")
                    continue
                merged = pairs.setdefault((a, b), {"errors": {}})
                if any(key in merged for key in fields):
                    self.note(where, f"pair ({a}, {b}) recorded twice: the first kept")
                    continue
                errors_of_entry = self.errors(entry, where)
                for key in fields:
                    merged[key] = entry.get(key)
                    if key in errors_of_entry:
                        merged_errors = merged["errors"]
                        assert isinstance(merged_errors, dict)
                        merged_errors[key] = errors_of_entry[key]
                merged.setdefault("where", where)
        return RecordedDump(
            driver_version=self.opt(top, "driverVersion", str, "dump"),
            nvml_version=self.opt(top, "nvmlVersion", str, "dump"),
            devices=devices,
            pairs={key: self.pair(raw) for key, raw in pairs.items()},
            errors=errors,
            path=self.path,
            problems=tuple(self.problems),
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

    def device(self, raw: object, position: int) -> _RecordedDevice:
        """The device at ``position`` (its NVML index); a bad one replays with nothing known."""
        where = f"devices[{position}]"
        data = self.obj(raw, where, element=True) or {}
        index = self.opt(data, "index", int, where)
        if index is not None and index != position:
            self.note(f"{where}.index", f"expected {position}, found {index}: read as device {position}")
        cpus_text = self.opt(data, "cpuAffinity", str, where)
        cpus = None
        if cpus_text is not None:
            cpus = self.cpus(cpus_text, f"{where}.cpuAffinity")
        mig_mode = None
        mode = self.obj(data.get("migMode"), f"{where}.migMode")
        if mode is not None:
            current = self.need(mode, "current", bool, f"{where}.migMode")
            pending = self.need(mode, "pending", bool, f"{where}.migMode")
            if current is not None and pending is not None:
                mig_mode = MigMode(current=current, pending=pending)
        links: dict[int, _RecordedLink] = {}
        for i, link_raw in enumerate(self.array(data.get("nvlinks"), f"{where}.nvlinks")):
            link = self.link(link_raw, f"{where}.nvlinks[{i}]")
            if link is None:
                continue
            if link.link in links:
                self.note(f"{where}.nvlinks[{i}]", f"link {link.link} recorded twice: the first kept")
                continue
            links[link.link] = link
        mig_devices = None
        if data.get("migDevices") is not None:
            found = (
                self.mig(mig_raw, f"{where}.migDevices[{i}]")
                for i, mig_raw in enumerate(self.array(data["migDevices"], f"{where}.migDevices"))
            )
            mig_devices = sorted_migs([mig for mig in found if mig is not None])
        pcie, pcie_errors = self.answers(
            data.get("pcie"), f"{where}.pcie", tuple(q.value for q in PcieQuestion)
        )
        return _RecordedDevice(
            index=position,
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
            pcie=pcie,
            pcie_errors=pcie_errors,
        )

    def answers(
        self, raw: object, where: str, keys: tuple[str, ...]
    ) -> tuple[dict[str, int], dict[str, str]]:
        """An object of integer answers (``pcie``, a link's ``counters``) and its own errors."""
        data = self.obj(raw, where)
        if data is None:
            return {}, {}
        values = {key: value for key in keys if (value := self.opt(data, key, int, where)) is not None}
        return values, self.errors(data, where)

    def link(self, raw: object, where: str) -> _RecordedLink | None:
        data = self.obj(raw, where, element=True)
        if data is None:
            return None
        number = self.need(data, "link", int, where)
        if number is None:
            return None
        counters, counter_errors = self.answers(
            data.get("counters"), f"{where}.counters", tuple(c.value for c in NvlinkCounter)
        )
        return _RecordedLink(
            link=number,
            active=self.opt(data, "active", bool, where),
            remote_address=self.address(data, "remotePciBusId", where),
            remote_type=self.choice(data, "remoteType", RemoteDeviceType, where),
            errors=self.errors(data, where),
            speed_mbps=self.opt(data, "speedMBps", int, where),
            counters=counters,
            counter_errors=counter_errors,
        )

    def fabric(self, raw: object, where: str) -> FabricInfo | None:
        data = self.obj(raw, where)
        if data is None:
            return None
        cluster = self.need(data, "clusterUuid", str, where)
        clique = self.need(data, "cliqueId", int, where)
        state = self.need(data, "state", str, where)
        if cluster is None or clique is None or state is None:
            return None
        return FabricInfo(
            cluster_uuid=cluster,
            clique_id=clique,
            state=state,
            health=self.opt(data, "health", str, where),
            health_mask=self.opt(data, "healthMask", int, where),
        )

    def mig(self, raw: object, where: str) -> MigDevice | None:
        data = self.obj(raw, where, element=True)
        if data is None:
            return None
        uuid = self.need(data, "uuid", str, where)
        if uuid is None:
            return None
        return MigDevice(
            uuid=uuid,
            gpu_instance=self.opt(data, "gpuInstanceId", int, where),
            compute_instance=self.opt(data, "computeInstanceId", int, where),
            profile=self.opt(data, "profile", str, where),
        )
