"""Every probe check against typed inputs and fixture trees: pass, fail (with attribution), skip."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest

from nodetopo.probe import observe
from nodetopo.probe.checks import (
    check_cpuset,
    check_declared,
    check_gpus,
    check_hugepages,
    check_mems,
    check_nvlink,
    check_one_island,
    check_rdma,
    check_shm,
    placement,
    run_checks,
)
from nodetopo.probe.inputs import Declared, Seen, Thresholds
from nodetopo.probe.outcome import Attribution, Status, verdict
from nodetopo.probe.promised import parse_nodetopology
from nodetopo.sources.nvml import RecordedNvml

GIB = 2**30


def nodetopology() -> dict[str, Any]:
    """Two islands of two GPUs on two NUMA nodes; mlx5_0 (IB) near GPUs 0-1, mlx5_1 near 2-3."""
    gpus = []
    for i in range(4):
        numa = i // 2
        gpus.append(
            {
                "index": i,
                "uuid": f"GPU-{i}",
                "island": numa,
                "numaNode": numa,
                "numaAffinity": "0-3" if numa == 0 else "4-7",
                "nics": [
                    {"name": f"mlx5_{numa}", "distance": "PIX"},
                    {"name": f"mlx5_{1 - numa}", "distance": "SYS"},
                ],
            }
        )
    nics = [
        {"name": "mlx5_0", "rdma": True, "state": "ACTIVE", "linkLayer": "InfiniBand"},
        {"name": "mlx5_1", "rdma": True, "state": "ACTIVE", "linkLayer": "InfiniBand"},
    ]
    # an agent that judges its links publishes status.health, here with no edge degraded
    health = {"checked": 6, "degraded": []}
    return {
        "metadata": {"name": "n1"},
        "status": {"nodeName": "n1", "gpus": gpus, "nics": nics, "health": health},
    }


PROMISED = parse_nodetopology(nodetopology())


def declared(**annotations: str) -> Declared:
    return observe.declared_from_annotations(
        {f"nodetopo.io/{k.replace('_', '-')}": v for k, v in annotations.items()}
    )


def ib(name: str, state: str = "ACTIVE", uverbs: bool = True) -> observe.IbDevice:
    return observe.IbDevice(
        name, (observe.IbPort(1, state, "InfiniBand"),), "/dev/infiniband/uverbs0" if uverbs else None
    )


def seen(**kw: Any) -> Seen:
    base: dict[str, Any] = {
        "gpu_ids": ("GPU-0", "GPU-1"),
        "gpu_ids_from": "NVIDIA_VISIBLE_DEVICES",
        "dev_nvidia": (0, 1),
        "nvml": None,
        "infiniband": (ib("mlx5_0"),),
        "shm_bytes": GIB,
        "hugepages_bytes": 0,
        "cpus": frozenset(range(4)),
        "cpus_from": "cgroup v2",
        "mems": frozenset({0}),
    }
    base.update(kw)
    return Seen(**base)


# -- declared ---------------------------------------------------------------------------------


def test_no_declaration_is_an_undeclared_warning() -> None:
    c = check_declared(observe.declared_from_annotations({"other.io/x": "1"}))
    assert (c.status, c.attribution) == (Status.WARN, Attribution.UNDECLARED)
    result = verdict([c])
    assert result.passed and "Undeclared" in result.line


def test_unknown_annotation_value_fails_with_the_grammar_message() -> None:
    c = check_declared(declared(max_nic_distance="near"))
    assert (c.status, c.attribution) == (Status.FAIL, Attribution.UNDECLARED)
    assert "one of PIX|PXB|PHB|NODE|SYS" in c.reason and '"near"' in c.reason


def test_annotations_file(tmp_path: Path) -> None:
    f = tmp_path / "annotations"
    f.write_text(
        'kubernetes.io/config.seen="2026"\nnodetopo.io/gpus-in-one-island="true"\nnodetopo.io/rdma="required"\n'
    )
    d = observe.read_declared(str(f), {})
    assert d.request is not None and d.request.one_island and d.request.rdma and d.annotated
    # flags override the file
    d = observe.read_declared(str(f), {"nodetopo.io/rdma": "optional"})
    assert d.request is not None and not d.request.rdma


def test_unreadable_annotations_file_is_a_reason(tmp_path: Path) -> None:
    d = observe.read_declared(str(tmp_path / "missing"), {})
    assert d.error is not None and "missing" in d.error
    bad = tmp_path / "bad"
    bad.write_text("nodetopo.io/rdma=required\n")
    d = observe.read_declared(str(bad), {})
    assert d.error is not None and f"{bad}:1" in d.error
    assert check_declared(d).status is Status.FAIL


# -- GPUs -------------------------------------------------------------------------------------


def test_visible_devices_parsing() -> None:
    assert observe.parse_visible_devices("GPU-0,GPU-1") == ("GPU-0", "GPU-1")
    assert observe.parse_visible_devices("all") is None
    assert observe.parse_visible_devices("void") == ()
    assert observe.gpu_ids_from_env({"CUDA_VISIBLE_DEVICES": "0,1"}) == (("0", "1"), "CUDA_VISIBLE_DEVICES")


def test_gpus_pass_and_unknown_uuid_is_not_real() -> None:
    assert check_gpus(seen(), PROMISED, Thresholds()).status is Status.PASS
    c = check_gpus(seen(gpu_ids=("GPU-0", "GPU-9")), PROMISED, Thresholds())
    assert (c.status, c.attribution) == (Status.FAIL, Attribution.RESOURCE_NOT_REAL) and "GPU-9" in c.reason


def test_fewer_gpus_than_requested_and_missing_device_node() -> None:
    c = check_gpus(seen(gpu_ids=("GPU-0",)), PROMISED, Thresholds(gpus=2))
    assert c.attribution is Attribution.RESOURCE_NOT_REAL and "requested 2" in c.reason
    c = check_gpus(seen(gpu_ids=("0", "1"), dev_nvidia=(0,)), PROMISED, Thresholds())
    assert c.status is Status.FAIL and "/dev/nvidiaN" in c.reason


def test_gpus_unknown_is_skip() -> None:
    c = check_gpus(seen(gpu_ids=None, unread={"gpus": "no NVML; no variable"}), PROMISED, Thresholds())
    assert c.status is Status.SKIP and "no NVML" in c.reason


def test_one_island() -> None:
    d = declared(gpus_in_one_island="true")
    assert check_one_island(d, seen(), PROMISED).status is Status.PASS
    c = check_one_island(d, seen(gpu_ids=("GPU-1", "GPU-2")), PROMISED)
    assert (c.status, c.attribution) == (Status.FAIL, Attribution.PLACED_WRONG)
    assert "GPU 1 in island 0; GPU 2 in island 1" in c.reason
    assert check_one_island(declared(rdma="required"), seen(), PROMISED).status is Status.SKIP
    assert check_one_island(d, seen(), None).status is Status.SKIP


# -- NVML: P2P and NVLink ---------------------------------------------------------------------

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures/nvml/dgx-h100-8x-nvswitch.json"


def nvml_dump(mutate: Any = None) -> RecordedNvml:
    data = json.loads(FIXTURE.read_text())
    data = copy.deepcopy(data)
    if mutate is not None:
        mutate(data)
    return RecordedNvml.from_dict(data)


def h100_promised(api: RecordedNvml) -> Any:
    obj = nodetopology()
    obj["status"]["gpus"] = [
        {"index": i, "uuid": api.uuid(i), "island": 0, "numaNode": 0, "numaAffinity": "0-3"}
        for i in range(api.device_count())
    ]
    return parse_nodetopology(obj)


def test_nvml_replay_healthy_passes() -> None:
    api = nvml_dump()
    view = observe.read_nvml_view(api)
    assert len(view.uuids) == api.device_count() and all(view.active_links[u] > 0 for u in view.uuids)
    c = check_nvlink(declared(gpus_in_one_island="true"), seen(nvml=view), h100_promised(api), Thresholds())
    assert c.status is Status.PASS, c.reason


def test_nvml_replay_p2p_not_supported_fails() -> None:
    def unsupported(d: dict[str, Any]) -> None:
        d["p2p"][0]["nvlink"] = "NOT_SUPPORTED"
        d["p2p"][0]["read"] = "CHIPSET_NOT_SUPPORTED"

    api = nvml_dump(unsupported)
    view = observe.read_nvml_view(api)
    c = check_nvlink(declared(gpus_in_one_island="true"), seen(nvml=view), h100_promised(api), Thresholds())
    assert (c.status, c.attribution) == (Status.FAIL, Attribution.RESOURCE_NOT_REAL)
    assert "NVLink P2P NOT_SUPPORTED" in c.reason
    c = check_nvlink(
        declared(rdma="required"), seen(nvml=view), h100_promised(api), Thresholds(require_p2p=True)
    )
    assert c.status is Status.FAIL and "P2P read CHIPSET_NOT_SUPPORTED" in c.reason


def test_nvml_replay_link_down_fails() -> None:
    def down(d: dict[str, Any]) -> None:
        link = d["devices"][3]["nvlinks"][5]
        d["devices"][3]["nvlinks"][5] = {"link": link["link"], "active": False}

    api = nvml_dump(down)
    view = observe.read_nvml_view(api)
    c = check_nvlink(declared(gpus_in_one_island="true"), seen(nvml=view), h100_promised(api), Thresholds())
    assert c.status is Status.FAIL and f"{api.uuid(3)} NVLink link(s) 5 down" in c.reason


def test_nvml_missing_is_skip() -> None:
    c = check_nvlink(
        declared(gpus_in_one_island="true"),
        seen(unread={"nvml": "NVML unavailable: libnvidia-ml.so.1"}),
        PROMISED,
        Thresholds(),
    )
    assert c.status is Status.SKIP and "libnvidia-ml" in c.reason


# -- RDMA -------------------------------------------------------------------------------------


def ib_tree(root: Path, name: str, state: str = "4: ACTIVE", uverbs: str | None = "uverbs0") -> None:
    port = root / "sys/class/infiniband" / name / "ports/1"
    port.mkdir(parents=True)
    (port / "state").write_text(state + "\n")
    (port / "link_layer").write_text("InfiniBand\n")
    if uverbs:
        (root / "sys/class/infiniband" / name / "device/infiniband_verbs" / uverbs).mkdir(parents=True)
        (root / "dev/infiniband").mkdir(parents=True, exist_ok=True)
        (root / "dev/infiniband" / uverbs).write_text("")


def test_read_infiniband_tree(tmp_path: Path) -> None:
    ib_tree(tmp_path, "mlx5_0")
    ib_tree(tmp_path, "mlx5_1", state="1: DOWN", uverbs=None)
    devices = observe.read_infiniband(tmp_path)
    assert [(d.name, d.ports[0].state, d.ports[0].link_layer, d.uverbs) for d in devices] == [
        ("mlx5_0", "ACTIVE", "InfiniBand", "/dev/infiniband/uverbs0"),
        ("mlx5_1", "DOWN", "InfiniBand", None),
    ]


def test_missing_dev_infiniband_is_not_real(tmp_path: Path) -> None:
    assert observe.read_infiniband(tmp_path) == ()  # no /sys/class/infiniband: no device
    d = declared(rdma="required", max_nic_distance="PIX")
    c = check_rdma(d, seen(infiniband=()), PROMISED)
    assert (c.status, c.attribution) == (Status.FAIL, Attribution.RESOURCE_NOT_REAL)
    assert "not in the container's /sys/class/infiniband: mlx5_0" in c.reason
    ib_tree(tmp_path, "mlx5_0", uverbs=None)
    c = check_rdma(d, seen(infiniband=observe.read_infiniband(tmp_path)), PROMISED)
    assert c.status is Status.FAIL and "no usable /dev/infiniband/uverbs" in c.reason


def test_rdma_port_down_and_pass() -> None:
    d = declared(rdma="required", max_nic_distance="PIX")
    c = check_rdma(d, seen(infiniband=(ib("mlx5_0", state="DOWN"),)), PROMISED)
    assert c.status is Status.FAIL and "no ACTIVE port: mlx5_0 (1:DOWN)" in c.reason
    assert check_rdma(d, seen(), PROMISED).status is Status.PASS
    # a NIC only at SYS for GPUs 0-1 when PIX is asked is a placement error
    c = check_rdma(
        declared(max_nic_distance="PIX"), seen(gpu_ids=("GPU-0",)), parse_nodetopology(_no_near_nic())
    )
    assert c.attribution is Attribution.PLACED_WRONG
    assert check_rdma(declared(numa_aligned="true"), seen(), PROMISED).status is Status.SKIP


def _no_near_nic() -> dict[str, Any]:
    obj = nodetopology()
    obj["status"]["gpus"][0]["nics"] = [{"name": "mlx5_1", "distance": "SYS"}]
    return obj


# -- /dev/shm, hugepages ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shm", "gpus", "status"),
    [
        (64 * 2**20, ("GPU-0", "GPU-1"), Status.FAIL),
        (GIB, ("GPU-0", "GPU-1"), Status.PASS),
        (64 * 2**20, ("GPU-0",), Status.PASS),
    ],
)
def test_shm_sizes(shm: int, gpus: tuple[str, ...], status: Status) -> None:
    c = check_shm(seen(shm_bytes=shm, gpu_ids=gpus), Thresholds(min_shm_bytes=256 * 2**20))
    assert c.status is status, c.reason
    if status is Status.FAIL:
        assert c.attribution is Attribution.PLACED_WRONG and "64MiB" in c.reason


def test_shm_reader_reads_a_mount(tmp_path: Path) -> None:
    (tmp_path / "dev/shm").mkdir(parents=True)
    assert observe.read_shm_bytes(tmp_path) == os.statvfs(tmp_path).f_blocks * os.statvfs(tmp_path).f_frsize
    with pytest.raises(observe.ReadFailure):
        observe.read_shm_bytes(tmp_path / "nothing")


def test_hugepages() -> None:
    assert observe.parse_hugepages("HugePages_Total:      16\nHugepagesize:       2048 kB\n") == 32 * 2**20
    assert observe.parse_hugepages("MemTotal: 1 kB\n") is None
    assert (
        check_hugepages(seen(hugepages_bytes=32 * 2**20), Thresholds(min_hugepages_bytes=GIB)).status
        is Status.FAIL
    )
    assert (
        check_hugepages(seen(hugepages_bytes=GIB), Thresholds(min_hugepages_bytes=GIB)).status is Status.PASS
    )
    assert check_hugepages(seen(), Thresholds()).status is Status.SKIP


# -- cpuset and memory nodes -------------------------------------------------------------------


def test_cgroup_v2_cpuset(tmp_path: Path) -> None:
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/cgroup").write_text("0::/kubepods/pod1/c1\n")
    d = tmp_path / "sys/fs/cgroup/kubepods/pod1/c1"
    d.mkdir(parents=True)
    (d / "cpuset.cpus.effective").write_text("4-7\n")
    (d / "cpuset.mems.effective").write_text("1\n")
    cpus, mems, where = observe.read_cpuset(tmp_path)
    assert (cpus, mems) == (frozenset(range(4, 8)), frozenset({1})) and where.startswith("cgroup v2")


def test_cgroup_v1_cpuset(tmp_path: Path) -> None:
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/cgroup").write_text("12:memory:/kubepods/x\n5:cpuset:/kubepods/x\n")
    d = tmp_path / "sys/fs/cgroup/cpuset/kubepods/x"
    d.mkdir(parents=True)
    (d / "cpuset.cpus").write_text("0-3\n")
    (d / "cpuset.mems").write_text("0\n")
    cpus, mems, where = observe.read_cpuset(tmp_path)
    assert (cpus, mems) == (frozenset(range(4)), frozenset({0})) and where.startswith("cgroup v1")


def test_cpuset_falls_back_to_proc_status(tmp_path: Path) -> None:
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/status").write_text("Name: x\nCpus_allowed_list:\t0-1\nMems_allowed_list:\t0\n")
    assert observe.read_cpuset(tmp_path) == (frozenset({0, 1}), frozenset({0}), "/proc/self/status")
    with pytest.raises(observe.ReadFailure):
        observe.read_cpuset(tmp_path / "none")


def test_cpuset_against_numa_cpus() -> None:
    aligned = declared(numa_aligned="true")
    assert check_cpuset(aligned, seen(), PROMISED).status is Status.PASS
    c = check_cpuset(aligned, seen(cpus=frozenset({4, 5})), PROMISED)
    assert (c.status, c.attribution) == (Status.FAIL, Attribution.PLACED_WRONG) and "0-3" in c.reason
    c = check_cpuset(declared(rdma="required"), seen(cpus=frozenset({4, 5})), PROMISED)
    assert c.status is Status.WARN
    assert check_cpuset(aligned, seen(cpus=None), PROMISED).status is Status.SKIP


def test_memory_nodes() -> None:
    aligned = declared(numa_aligned="true")
    assert check_mems(aligned, seen(), PROMISED).status is Status.PASS
    assert check_mems(aligned, seen(mems=frozenset({1})), PROMISED).attribution is Attribution.PLACED_WRONG
    c = check_mems(aligned, seen(gpu_ids=("GPU-1", "GPU-2"), mems=frozenset({0, 1})), PROMISED)
    assert c.status is Status.FAIL and "NUMA nodes 0-1" in c.reason


# -- the whole run ----------------------------------------------------------------------------


def test_no_nodetopology_skips_with_reason_and_passes() -> None:
    checks = run_checks(
        declared(rdma="required"), None, "no NodeTopology for node n1 yet", seen(), Thresholds()
    )
    assert checks[1].status is Status.SKIP and "n1 yet" in checks[1].reason
    assert verdict(checks).passed


def test_verdict_names_first_failure() -> None:
    checks = run_checks(
        declared(rdma="required", max_nic_distance="PIX"), PROMISED, None, seen(infiniband=()), Thresholds()
    )
    result = verdict(checks)
    assert not result.passed and result.line.startswith("ResourceNotReal: rdma: ")


# -- collective smoke test (judged against the model: tests/probe/test_probe_collective.py) -------

NCCL_OUTPUT = """# nThread 1 nGpus 2 minBytes 8388608 maxBytes 1073741824 step: 2(factor) warmup iters: 5
#       size         count      type   redop    root     time   algbw   busbw #wrong
     8388608       2097152     float     sum      -1    95.12   88.19   88.19      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 91.4821
#
"""


def fake_tool(directory: Path, body: str) -> str:
    directory.mkdir(parents=True, exist_ok=True)
    tool = directory / "all_reduce_perf"
    tool.write_text("#!/bin/sh\n" + body)
    tool.chmod(0o755)
    return str(directory)


def test_run_collective_with_and_without_the_tool(tmp_path: Path) -> None:
    with pytest.raises(observe.ReadFailure, match="not in the image"):
        observe.run_collective(2, 5, str(tmp_path / "empty"))
    output = tmp_path / "out.txt"
    output.write_text(NCCL_OUTPUT)
    path = fake_tool(tmp_path / "ok", f'[ "$7 $8" = "-g 2" ] || exit 9\ncat "{output}"\n')
    run = observe.run_collective(2, 5, path)
    assert run.output is not None and [r.size for r in run.output.rows] == [8388608]
    path = fake_tool(tmp_path / "bad", 'echo "NCCL WARN no GPU" >&2\nexit 3\n')
    with pytest.raises(observe.ReadFailure, match="exited 3: NCCL WARN no GPU"):
        observe.run_collective(2, 5, path)
    path = fake_tool(tmp_path / "slow", "sleep 5\n")
    with pytest.raises(observe.ReadFailure, match=r"no result within 0\.5s"):
        observe.run_collective(2, 0.5, path)


def test_collective_not_run_is_a_skip() -> None:
    from nodetopo.probe.checks import check_collective

    c = check_collective(
        seen(unread={"collective": "all_reduce_perf (nccl-tests) is not in the image"}),
        PROMISED,
        Thresholds(),
    )
    assert c.status is Status.SKIP and "not in the image" in c.reason


# -- how much was checked; --strict -----------------------------------------------------------


def test_a_pass_says_how_many_of_the_checks_that_apply_were_made() -> None:
    """No NodeTopology: its check and those comparing with it are skipped, and the verdict says so;
    what the pod never asked for (rdma, hugepages, the collective here) is not counted."""
    checks = run_checks(declared(), None, "no NodeTopology for node n1 yet", seen(), Thresholds())
    applying = [c for c in checks if c.asked]
    made = [c for c in applying if c.status is not Status.SKIP]
    unmade = [c.name for c in applying if c.status is Status.SKIP]
    assert unmade and len(applying) < len(checks)  # the case has both kinds of skip
    line = verdict(checks).line
    assert f"{len(made)} of {len(applying)} checked (skipped: {', '.join(unmade)})" in line
    assert "nodetopology" in unmade and "rdma" not in line
    everything = run_checks(declared(), PROMISED, None, seen(), Thresholds())
    assert verdict(everything).passed


def test_strict_fails_on_a_skip_that_applies_and_only_then() -> None:
    skipped_one = run_checks(declared(), None, "no NodeTopology for node n1 yet", seen(), Thresholds())
    result = verdict(skipped_one, strict=True)
    assert not result.passed and result.attribution is None
    assert result.line.startswith("failed (--strict): ") and "nodetopology" in result.line
    assert verdict(skipped_one).passed  # without --strict a skip never fails a pod
    checks = run_checks(declared(), PROMISED, None, seen(collective_asked=False), Thresholds())
    unmade = [c.name for c in checks if c.asked and c.status is Status.SKIP]
    assert unmade == ["kubelet-allocation"]  # no pod name: the kubelet's answer cannot be matched
    assert not verdict(checks, strict=True).passed
    made_or_not_asked = [c for c in checks if c.name != "kubelet-allocation"]
    assert any(not c.asked for c in made_or_not_asked)
    assert verdict(made_or_not_asked, strict=True).passed  # what the pod never asked for never fails it


def test_not_asked_is_in_the_report() -> None:
    checks = run_checks(declared(), PROMISED, None, seen(), Thresholds())
    hugepages = next(c for c in checks if c.name == "hugepages")
    assert hugepages.to_json() == {
        "name": "hugepages",
        "status": "skip",
        "reason": "no minimum asked (--min-hugepages)",
        "asked": False,
    }


# -- placement (the report's section nodetopo.acceptance reads) ---------------------------------


def test_placement_names_the_gpus_islands_leaf_and_cpu_locality() -> None:
    body = nodetopology()
    body["status"]["network"] = {"tiers": [{"level": 1, "id": "spine-a"}, {"level": 0, "id": "leaf-7"}]}
    promised = parse_nodetopology(body)
    # GPU-1 (island 0, NUMA 0: CPUs 0-3) and GPU-2 (island 1, NUMA 1: CPUs 4-7); CPUs 2-5: half local
    got = placement(seen(gpu_ids=("GPU-2", "GPU-1"), cpus=frozenset(range(2, 6))), promised, "n1")
    assert got == {
        "node": "n1",
        "leaf": "leaf-7",
        "gpus": [
            {"index": 1, "uuid": "GPU-1", "island": 0, "numaNode": 0},
            {"index": 2, "uuid": "GPU-2", "island": 1, "numaNode": 1},
        ],
        "cpuNumaLocalRatio": 1.0,
    }
    # CPUs of the other socket only: nothing local
    remote = placement(seen(gpu_ids=("GPU-0",), cpus=frozenset({4, 5})), promised, "n1")
    assert remote["cpuNumaLocalRatio"] == 0.0
    assert (
        placement(seen(gpu_ids=("GPU-0",), cpus=frozenset({2, 5})), promised, "n1")["cpuNumaLocalRatio"]
        == 0.5
    )


def test_placement_without_a_nodetopology_knows_only_the_node() -> None:
    assert placement(seen(), None, "n9") == {
        "node": "n9",
        "leaf": None,
        "gpus": [],
        "cpuNumaLocalRatio": None,
    }
    # a NodeTopology without network tiers, or cpus unreadable: those facts are null, never guessed
    got = placement(seen(cpus=None), PROMISED, None)
    assert got["node"] == "n1" and got["leaf"] is None and got["cpuNumaLocalRatio"] is None
    assert [g["island"] for g in got["gpus"]] == [0, 0]
