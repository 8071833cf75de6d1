"""The NVML source: the recorded dump format, its replay, the reader, and the live implementation.

No test needs a GPU. ``PynvmlApi`` is tested twice: against this machine's real (absent) NVML, and
against a stand-in ``pynvml`` module that answers like the library does.
"""

from __future__ import annotations

import copy
import ctypes
import ctypes.util
import json
import logging
import pickle
import subprocess
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nodetopo.errors import ParseError
from nodetopo.host import HostRoot, ReplayRunner
from nodetopo.model import ConditionReason, LinkClass, PciAddress, RemoteDeviceType
from nodetopo.sources import nvml
from nodetopo.sources.base import Context

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "nvml"
ALL_DUMPS = sorted(FIXTURES.glob("*.json"))


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return data


def replay(name: str) -> nvml.RecordedNvml:
    return nvml.RecordedNvml.from_json(FIXTURES / name)


def bundle_context(tmp_path: Path, api: object | None = None) -> Context:
    return Context(root=HostRoot(tmp_path), runner=ReplayRunner({}), nvml=api, bundle=True)


def addr(text: str) -> PciAddress:
    return PciAddress.parse(text)


# --------------------------------------------------------------------------------------------
# The dump format
# --------------------------------------------------------------------------------------------


def test_fixtures_exist() -> None:
    assert len(ALL_DUMPS) >= 6


@pytest.mark.parametrize("path", ALL_DUMPS, ids=lambda p: p.stem)
def test_dump_of_a_replay_is_the_dump_itself(path: Path) -> None:
    data = json.loads(path.read_text())
    assert nvml.dump_nvml(nvml.RecordedNvml.from_dict(data)) == data


@pytest.mark.parametrize("path", ALL_DUMPS, ids=lambda p: p.stem)
def test_dump_is_json_and_survives_a_file_round_trip(path: Path, tmp_path: Path) -> None:
    first = nvml.dump_nvml(nvml.RecordedNvml.from_json(path))
    copy_path = tmp_path / "nvml.json"
    copy_path.write_text(json.dumps(first, indent=1))
    assert nvml.dump_nvml(nvml.RecordedNvml.from_json(copy_path)) == first


def test_replayed_errors_keep_their_code_and_call() -> None:
    api = replay("hgx-a100-4x-errors.json")
    with pytest.raises(nvml.NvmlCallError) as lost:
        api.memory_total(3)
    assert (lost.value.call, lost.value.code, lost.value.gpu_lost) == (
        "nvmlDeviceGetMemoryInfo",
        "NVML_ERROR_GPU_IS_LOST",
        True,
    )
    assert str(lost.value) == "nvmlDeviceGetMemoryInfo: GPU is lost (NVML_ERROR_GPU_IS_LOST)"
    with pytest.raises(nvml.NvmlCallError) as unsupported:
        api.numa_node_id(0)
    assert unsupported.value.not_supported and not unsupported.value.gpu_lost


def test_links_past_the_last_one_replay_as_invalid_argument_or_the_recorded_code() -> None:
    h100 = replay("dgx-h100-8x-nvswitch.json")
    assert h100.nvlink_active(0, 17) is True
    with pytest.raises(nvml.NvmlCallError) as past:
        h100.nvlink_active(0, 18)
    assert past.value.code == "NVML_ERROR_INVALID_ARGUMENT"
    lost = replay("hgx-a100-4x-errors.json")
    with pytest.raises(nvml.NvmlCallError) as gone:
        lost.nvlink_active(3, 0)
    assert gone.value.code == "NVML_ERROR_GPU_IS_LOST"


def test_a_null_without_an_error_replays_as_not_supported() -> None:
    data = load("h100-nvl-2x-bridge.json")
    del data["devices"][0]["errors"]  # hand-written dumps may leave the code out
    api = nvml.RecordedNvml.from_dict(data)
    with pytest.raises(nvml.NvmlCallError) as e:
        api.numa_node_id(0)
    assert e.value.code == "NVML_ERROR_NOT_SUPPORTED"
    with pytest.raises(nvml.NvmlCallError):
        api.mig_devices(0)  # MIG is off: never asked, so not supported


def test_pairs_are_symmetric_and_unknown_pairs_not_supported() -> None:
    api = replay("dgx-h100-8x-nvswitch.json")
    assert api.common_ancestor(5, 1) is api.common_ancestor(1, 5) is nvml.TopologyLevel.SYSTEM
    assert api.p2p_status(0, 7, nvml.P2pCapability.NVLINK) is nvml.P2pStatus.OK
    gh200 = replay("gh200-nvl32-1x-fabric.json")
    with pytest.raises(nvml.NvmlCallError) as e:
        gh200.common_ancestor(0, 1)
    assert e.value.code == "NVML_ERROR_INVALID_ARGUMENT"  # there is no device 1


def mutate(name: str, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    data = copy.deepcopy(load(name))
    change(data)
    return data


def test_a_dump_of_another_format_is_a_parse_error() -> None:
    with pytest.raises(ParseError) as e:
        nvml.RecordedNvml.from_dict(
            mutate("dgx-h100-8x-nvswitch.json", lambda d: d.update(format="nodetopo-nvml-dump/v2")),
            path="x/nvml.json",
        )
    assert (e.value.source, e.value.path) == ("nvml", "x/nvml.json")
    assert "format" in e.value.detail


@pytest.mark.parametrize(
    ("change", "expected", "gpus"),
    [
        (lambda d: d["devices"][1].update(index=5), "devices[1].index: expected 1, found 5", 8),
        (lambda d: d["devices"][0].update(memoryTotal=True), "devices[0].memoryTotal: expected int", 8),
        (lambda d: d["devices"][0].update(pciBusId="18:00"), "devices[0].pciBusId", 7),
        (lambda d: d["devices"][0].update(cpuAffinity="0-3,x"), "devices[0].cpuAffinity", 8),
        (lambda d: d["devices"][0]["nvlinks"][0].update(remoteType="NVSWITCH"), "GPU | SWITCH", 8),
        (lambda d: d["devices"][0].update(errors={"numaNodeId": "not supported"}), "NVML_ERROR_", 8),
        (lambda d: d["devices"][0]["nvlinks"].append(d["devices"][0]["nvlinks"][0]), "recorded twice", 8),
        (lambda d: d["commonAncestor"].append({"a": 1, "b": 1, "level": "NVML_TOPOLOGY_NODE"}), "a < b", 8),
        (lambda d: d["commonAncestor"][0].update(level="NVML_TOPOLOGY_CPU"), "NVML_TOPOLOGY_SYSTEM", 8),
        (lambda d: d.update(devices={}), "devices: expected a JSON array", 0),
    ],
)
def test_a_malformed_field_is_a_problem_naming_the_key_and_the_rest_replays(
    change: Callable[[dict[str, Any]], None], expected: str, gpus: int
) -> None:
    api = nvml.RecordedNvml.from_dict(mutate("dgx-h100-8x-nvswitch.json", change), path="x/nvml.json")
    assert expected in api.problems[0]
    assert len(api.problems) == 1 or gpus == 0  # no devices: every pair is orphaned too
    snapshot, _ = nvml.read_nvml(api)
    assert len(snapshot.gpus) == gpus


def test_a_file_that_is_not_json_is_a_parse_error_with_its_line(tmp_path: Path) -> None:
    bad = tmp_path / "nvml.json"
    bad.write_text('{"format": "nodetopo-nvml-dump/v1",\n "devices": [,]}')
    with pytest.raises(ParseError) as e:
        nvml.RecordedNvml.from_json(bad)
    assert e.value.line == 2


# --------------------------------------------------------------------------------------------
# Reading: protocol -> snapshot
# --------------------------------------------------------------------------------------------


def test_dgx_h100_every_gpu_has_18_links_into_four_nvswitches() -> None:
    snapshot, conditions = nvml.read_nvml(replay("dgx-h100-8x-nvswitch.json"))
    assert conditions == ()
    assert snapshot.driver_version == "550.54.15"
    assert [g.index for g in snapshot.gpus] == list(range(8))
    for gpu in snapshot.gpus:
        assert gpu.model == "NVIDIA H100 80GB HBM3"
        assert len(gpu.links) == 18
        assert {link.remote_type for link in gpu.links} == {RemoteDeviceType.SWITCH}
        switches = [str(link.remote_address) for link in gpu.links]
        assert sorted({s: switches.count(s) for s in switches}.items()) == [
            ("0000:05:00.0", 5),
            ("0000:06:00.0", 4),
            ("0000:07:00.0", 4),
            ("0000:08:00.0", 5),
        ]
        assert gpu.numa_node is None  # x86: nvmlDeviceGetNumaNodeId is not supported
        assert gpu.mig_current is False
    assert str(snapshot.gpus[4].address) == "0000:9d:00.0"
    assert snapshot.gpus[4].cpu_affinity == frozenset([*range(56, 112), *range(168, 224)])
    assert snapshot.gpus[0].memory_bytes == 85520809984
    ancestors = dict(snapshot.common_ancestor)
    assert len(ancestors) == 28
    assert ancestors[(0, 3)] is LinkClass.NODE
    assert ancestors[(3, 4)] is LinkClass.SYS
    assert ancestors[(4, 7)] is LinkClass.NODE


def test_h100_nvl_pair_links_point_at_each_other() -> None:
    snapshot, conditions = nvml.read_nvml(replay("h100-nvl-2x-bridge.json"))
    assert conditions == ()
    first, second = snapshot.gpus
    assert len(first.links) == len(second.links) == 12
    assert {link.remote_address for link in first.links} == {second.address}
    assert {link.remote_address for link in second.links} == {first.address}
    assert {link.remote_type for link in first.links} == {RemoteDeviceType.GPU}
    assert snapshot.common_ancestor == (((0, 1), LinkClass.PIX),)
    assert first.fabric is None


def test_mig_devices_carry_their_parent() -> None:
    snapshot, conditions = nvml.read_nvml(replay("dgx-a100-2x-mig.json"))
    assert conditions == ()
    mig_gpu, pending_gpu = snapshot.gpus
    assert (mig_gpu.mig_current, mig_gpu.mig_pending) == (True, True)
    assert [(m.profile, m.gpu_instance, m.compute_instance) for m in mig_gpu.migs] == [
        ("3g.40gb", 2, 0),
        ("2g.20gb", 3, 0),
        ("1g.10gb", 9, 0),
        ("1g.10gb", 10, 0),
    ]
    assert {(m.parent_uuid, m.parent_index) for m in mig_gpu.migs} == {(mig_gpu.uuid, 0)}
    assert all(m.uuid.startswith("MIG-") for m in mig_gpu.migs)
    assert (pending_gpu.mig_current, pending_gpu.mig_pending, pending_gpu.migs) == (False, True, ())


def test_gh200_numa_node_and_fabric_clique() -> None:
    snapshot, conditions = nvml.read_nvml(replay("gh200-nvl32-1x-fabric.json"))
    assert conditions == ()  # an off-node switch without PCI info is not a failure
    (gpu,) = snapshot.gpus
    assert gpu.numa_node == 1
    assert gpu.cpu_affinity == frozenset(range(72))
    assert gpu.address == PciAddress(domain=9, bus=1, device=0, function=0)
    assert gpu.fabric is not None
    assert (gpu.fabric.cluster_uuid, gpu.fabric.clique_id, gpu.fabric.state, gpu.fabric.health) == (
        "4f8a2c1e-9b3d-4e6f-a1c2-7d8e9f0a1b2c",
        32766,
        "COMPLETED",
        "HEALTHY",
    )
    assert {(link.remote_address, link.remote_type) for link in gpu.links} == {
        (None, RemoteDeviceType.SWITCH)
    }


def test_per_device_failures_degrade_and_keep_the_other_gpus() -> None:
    snapshot, conditions = nvml.read_nvml(replay("hgx-a100-4x-errors.json"))
    assert [g.index for g in snapshot.gpus] == [0, 1, 2, 3]
    gpu0, gpu1, _, gpu3 = snapshot.gpus
    assert gpu0.memory_bytes == 85899345920 and len(gpu0.links) == 12
    assert gpu1.memory_bytes is None
    assert [link.link for link in gpu1.links] == [0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11]
    assert gpu3.uuid.startswith("GPU-") and gpu3.memory_bytes is None and gpu3.links == ()
    assert {c.reason for c in conditions} == {ConditionReason.DEGRADED}
    messages = [c.message for c in conditions]
    assert messages[0].startswith("GPU 1 (0000:9e:00.0): nvmlDeviceGetMemoryInfo: Unknown Error")
    assert "(link 5)" in messages[0]
    assert messages[1] == (
        "GPU 3 (0000:d4:00.0): lost during the scan: "
        "nvmlDeviceGetMemoryInfo: GPU is lost (NVML_ERROR_GPU_IS_LOST)"
    )
    assert "GPUs 1,2: nvmlDeviceGetTopologyCommonAncestor" in messages[2]
    assert "GPUs 0,3" not in messages[2]  # a lost GPU is not asked about its pairs
    assert dict(snapshot.common_ancestor) == {(0, 1): LinkClass.NODE, (0, 2): LinkClass.SYS}


def test_a_gpu_whose_identity_cannot_be_read_is_left_out() -> None:
    def no_uuid(d: dict[str, Any]) -> None:
        d["devices"][1]["uuid"] = None
        d["devices"][1]["errors"] = {"uuid": "NVML_ERROR_UNKNOWN"}

    snapshot, conditions = nvml.read_nvml(
        nvml.RecordedNvml.from_dict(mutate("h100-nvl-2x-bridge.json", no_uuid))
    )
    assert [g.index for g in snapshot.gpus] == [0]
    (problem,) = conditions
    assert problem.message.startswith("GPU 1 (0000:ae:00.0): nvmlDeviceGetUUID: Unknown Error")
    assert "left out" in problem.message


def test_topology_levels_map_onto_nvidia_smi_classes() -> None:
    assert nvml.LINK_CLASS_OF_LEVEL == {
        nvml.TopologyLevel.INTERNAL: LinkClass.PIX,
        nvml.TopologyLevel.SINGLE: LinkClass.PIX,
        nvml.TopologyLevel.MULTIPLE: LinkClass.PXB,
        nvml.TopologyLevel.HOSTBRIDGE: LinkClass.PHB,
        nvml.TopologyLevel.NODE: LinkClass.NODE,
        nvml.TopologyLevel.SYSTEM: LinkClass.SYS,
    }


def test_small_conversions() -> None:
    assert nvml.cpus_of_bitmask([0b1011, 0, 1 << 63]) == frozenset({0, 1, 3, 191})
    assert nvml.cpus_of_bitmask([]) == frozenset()
    assert nvml.mig_profile_of_name("NVIDIA A100-SXM4-40GB MIG 3g.20gb") == "3g.20gb"
    assert nvml.mig_profile_of_name("NVIDIA H100 80GB HBM3 MIG 1g.10gb+me") == "1g.10gb+me"
    assert nvml.mig_profile_of_name("NVIDIA A100-SXM4-40GB") is None
    assert nvml.nvml_bus_id(addr("0000:3b:00.1")) == "00000000:3B:00.1"


def test_call_errors_pickle_and_classify() -> None:
    error = nvml.NvmlCallError("nvmlDeviceGetNvLinkRemoteDeviceType", "NVML_ERROR_FUNCTION_NOT_FOUND")
    assert error.not_supported  # a driver too old for the call cannot say: an absent fact
    again = pickle.loads(pickle.dumps(error))
    assert (again.call, again.code, again.text) == (error.call, error.code, "Function Not Found")


# --------------------------------------------------------------------------------------------
# The source boundary
# --------------------------------------------------------------------------------------------


def test_collect_from_a_recorded_dump(tmp_path: Path) -> None:
    result = nvml.collect(bundle_context(tmp_path, replay("dgx-h100-8x-nvswitch.json")))
    assert result.ok
    assert result.facts.nvml is not None and len(result.facts.nvml.gpus) == 8
    assert result.facts.sources[0].message == "8 GPUs, driver 550.54.15"


def test_collect_accepts_the_dump_path(tmp_path: Path) -> None:
    result = nvml.collect(bundle_context(tmp_path, FIXTURES / "dgx-a100-2x-mig.json"))
    assert result.ok and result.facts.nvml is not None
    assert len(result.facts.nvml.gpus[0].migs) == 4


def test_collect_degraded_keeps_the_snapshot(tmp_path: Path) -> None:
    result = nvml.collect(bundle_context(tmp_path, replay("hgx-a100-4x-errors.json")))
    assert not result.ok
    assert result.facts.nvml is not None and len(result.facts.nvml.gpus) == 4
    assert [c.reason for c in result.facts.conditions] == [ConditionReason.DEGRADED] * 3
    assert result.facts.sources[0].message.startswith("Degraded: 4 GPUs")


def test_collect_on_a_bundle_without_a_dump_is_unavailable(tmp_path: Path) -> None:
    result = nvml.collect(bundle_context(tmp_path))
    assert result.facts.nvml is None
    (problem,) = result.facts.conditions
    assert problem.reason is ConditionReason.UNAVAILABLE
    assert problem.message == "NVML sees only the live host; no nvml.json in the bundle"


def test_collect_when_the_driver_is_not_loaded_is_unavailable_in_nvmls_words(tmp_path: Path) -> None:
    result = nvml.collect(bundle_context(tmp_path, replay("driver-not-loaded.json")))
    (problem,) = result.facts.conditions
    assert problem.reason is ConditionReason.UNAVAILABLE
    assert problem.message == "nvmlDeviceGetCount: Driver Not Loaded (NVML_ERROR_DRIVER_NOT_LOADED)"


def test_collect_with_a_broken_dump_is_a_parse_error_condition(tmp_path: Path) -> None:
    broken = tmp_path / "nvml.json"
    broken.write_text('{"format": "something else"}')
    result = nvml.collect(bundle_context(tmp_path, broken))
    (problem,) = result.facts.conditions
    assert problem.reason is ConditionReason.PARSE_ERROR
    assert str(broken) in problem.message and "format" in problem.message


# --------------------------------------------------------------------------------------------
# The live implementation
# --------------------------------------------------------------------------------------------


def _libnvidia_ml_loads() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


needs_no_nvml = pytest.mark.skipif(_libnvidia_ml_loads(), reason="this machine has a real libnvidia-ml")


@needs_no_nvml
def test_real_pynvml_without_a_driver_fails_to_start_with_nvmls_words() -> None:
    with pytest.raises(nvml.NvmlCallError) as e:
        nvml.PynvmlApi().open()
    assert e.value.call == "nvmlInit"
    assert e.value.code == "NVML_ERROR_LIBRARY_NOT_FOUND"
    assert e.value.text == "NVML Shared Library Not Found"


@needs_no_nvml
def test_collect_on_this_host_without_a_driver_is_unavailable_without_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    result = nvml.collect(Context(root=HostRoot("/"), runner=ReplayRunner({})))
    (problem,) = result.facts.conditions
    assert problem.reason is ConditionReason.UNAVAILABLE
    assert (
        problem.message
        == "NVML cannot start: nvmlInit: NVML Shared Library Not Found (NVML_ERROR_LIBRARY_NOT_FOUND)"
    )
    assert all(record.exc_info is None for record in caplog.records)


@needs_no_nvml
def test_dump_of_real_pynvml_without_a_driver_records_the_failure() -> None:
    dump = nvml.dump_nvml(nvml.PynvmlApi())
    assert dump["devices"] == []
    assert dump["errors"] == {
        "deviceCount": "NVML_ERROR_LIBRARY_NOT_FOUND",
        "driverVersion": "NVML_ERROR_LIBRARY_NOT_FOUND",
        "nvmlVersion": "NVML_ERROR_LIBRARY_NOT_FOUND",
    }


def test_importing_nodetopo_does_not_import_pynvml() -> None:
    code = "import sys, nodetopo.sources.nvml; assert 'pynvml' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


class _FabricV2(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_uint),
        ("clusterUuid", ctypes.c_uint8 * 16),
        ("status", ctypes.c_uint),
        ("cliqueId", ctypes.c_uint32),
        ("state", ctypes.c_uint),
        ("healthMask", ctypes.c_uint32),
    ]


class _FabricV3(ctypes.Structure):
    _fields_ = [*_FabricV2._fields_, ("healthSummary", ctypes.c_uint8)]


def fake_pynvml() -> types.ModuleType:
    """A stand-in for pynvml: two GPUs, two NVLinks each, an R550-era fabric call (v2 only)."""
    module = types.ModuleType("pynvml")

    class NVMLError(Exception):
        def __init__(self, value: int) -> None:
            super().__init__(value)
            self.value = value

        def __str__(self) -> str:
            return {
                3: "Not Supported",
                2: "Invalid Argument",
                25: "Argument version mismatch",
                6: "Not Found",
            }[self.value]

    def fail(code: int) -> Any:
        raise NVMLError(code)

    busy = {0: "00000000:18:00.0", 1: "00000000:2A:00.0"}
    fabric_calls: list[str] = []

    def fabric_v(handle: int, ref: Any) -> int:
        info = ref._obj
        fabric_calls.append(type(info).__name__)
        if isinstance(info, _FabricV3):
            return fail(25)
        info.clusterUuid[:] = list(range(16))
        info.cliqueId, info.state, info.status = 7, 3, 0
        return 0

    module.__dict__.update(
        NVMLError=NVMLError,
        NVML_ERROR_INVALID_ARGUMENT=2,
        NVML_ERROR_NOT_SUPPORTED=3,
        NVML_ERROR_NOT_FOUND=6,
        NVML_ERROR_FUNCTION_NOT_FOUND=13,
        NVML_ERROR_ARGUMENT_VERSION_MISMATCH=25,
        c_nvmlGpuFabricInfo_v3_t=_FabricV3,
        c_nvmlGpuFabricInfo_v2_t=_FabricV2,
        fabric_calls=fabric_calls,
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlSystemGetDriverVersion=lambda: "550.54.15",
        nvmlSystemGetNVMLVersion=lambda: b"12.550.54.15",
        nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetUUID=lambda h: f"GPU-{h}",
        nvmlDeviceGetName=lambda h: b"NVIDIA H100 80GB HBM3",
        nvmlDeviceGetPciInfo=lambda h: types.SimpleNamespace(busId=busy[h].encode()),
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(total=85520809984),
        nvmlDeviceGetCpuAffinity=lambda h, n: [0xF << (4 * h)] + [0] * (n - 1),
        nvmlDeviceGetNumaNodeId=lambda h: fail(3),
        nvmlDeviceGetMigMode=lambda h: [0, 0],
        nvmlDeviceGetNvLinkState=lambda h, link: 1 if link < 2 else fail(2),
        nvmlDeviceGetNvLinkRemotePciInfo=lambda h, link: types.SimpleNamespace(busId=busy[1 - h]),
        nvmlDeviceGetNvLinkRemoteDeviceType=lambda h, link: 0,
        nvmlDeviceGetGpuFabricInfoV=fabric_v,
        nvmlDeviceGetTopologyCommonAncestor=lambda a, b: 40,
        nvmlDeviceGetP2PStatus=lambda a, b, index: 0 if index == 0 else 4,
        # the link readings: GPU1 trained at x8 below its x16, with 7 replays; no NVLink speed
        # field on this driver; link 1 of GPU1 has CRC errors (flit 3, data 2)
        nvmlDeviceGetMaxPcieLinkGeneration=lambda h: 5,
        nvmlDeviceGetGpuMaxPcieLinkGeneration=lambda h: 5,
        nvmlDeviceGetCurrPcieLinkGeneration=lambda h: 1,
        nvmlDeviceGetMaxPcieLinkWidth=lambda h: 16,
        nvmlDeviceGetCurrPcieLinkWidth=lambda h: 16 if h == 0 else 8,
        nvmlDeviceGetPcieReplayCounter=lambda h: 7 * h,
        nvmlDeviceGetNvLinkErrorCounter=lambda h, link, counter: (
            (3 if counter == 2 else 2 if counter == 3 else 0) if (h, link) == (1, 1) else 0
        ),
        nvmlDeviceGetFieldValues=lambda h, fields: fail(3),
    )
    return module


def test_pynvml_answers_become_the_dump_format(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = fake_pynvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    with nvml.PynvmlApi() as api:
        dump = nvml.dump_nvml(api)
    assert fake.fabric_calls == ["_FabricV3", "_FabricV2", "_FabricV3", "_FabricV2"]
    assert dump["driverVersion"] == "550.54.15" and dump["nvmlVersion"] == "12.550.54.15"
    devices = dump["devices"]
    assert isinstance(devices, list)
    assert devices[1] == {
        "index": 1,
        "uuid": "GPU-1",
        "name": "NVIDIA H100 80GB HBM3",
        "pciBusId": "00000000:2A:00.0",
        "memoryTotal": 85520809984,
        "cpuAffinity": "4-7",
        "numaNodeId": None,
        "migMode": {"current": False, "pending": False},
        "pcie": {
            "maxGen": 5,
            "deviceMaxGen": 5,
            "currentGen": 1,
            "maxWidth": 16,
            "currentWidth": 8,
            "replays": 7,
        },
        "nvlinks": [
            {
                "link": 0,
                "active": True,
                "remotePciBusId": "00000000:18:00.0",
                "remoteType": "GPU",
                "counters": {"replay": 0, "recovery": 0, "crcFlit": 0, "crcData": 0},
            },
            {
                "link": 1,
                "active": True,
                "remotePciBusId": "00000000:18:00.0",
                "remoteType": "GPU",
                "counters": {"replay": 0, "recovery": 0, "crcFlit": 3, "crcData": 2},
            },
        ],
        "fabric": {
            "clusterUuid": "00010203-0405-0607-0809-0a0b0c0d0e0f",
            "cliqueId": 7,
            "state": "COMPLETED",
            "health": None,
            "healthMask": 0,
        },
        "migDevices": None,
        "errors": {"numaNodeId": "NVML_ERROR_NOT_SUPPORTED"},
    }
    assert dump["commonAncestor"] == [{"a": 0, "b": 1, "level": "NVML_TOPOLOGY_NODE"}]
    assert dump["p2p"] == [{"a": 0, "b": 1, "read": "OK", "nvlink": "DISABLED_BY_REGKEY"}]
    assert nvml.dump_nvml(nvml.RecordedNvml.from_dict(dump)) == dump
