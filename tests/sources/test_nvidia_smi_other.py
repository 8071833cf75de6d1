"""``nvidia-smi -L``, ``-q -x`` / ``-q``, ``nvlink -s``; ``collect()`` against the errors seen in the wild."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodetopo import bundle
from nodetopo.errors import ParseError
from nodetopo.host import HostRoot, Replay, ReplayRunner
from nodetopo.model import ConditionReason, PciAddress
from nodetopo.sources import nvidia_smi
from nodetopo.sources.base import Context
from nodetopo.sources.nvidia_smi import listing, nvlink, query
from tests.sources.nvidia_smi_query_text import parse_smi_query_text

V100_TOPO = "topo-m/v100-sxm2-8x-hybridcube-1nic-gpunumaid-vast.txt"
V100_XML = "smi-q/v100-sxm2-8x-vast-machine03-nvidia-smi-q.xml"
RTX4090_TOPO = "topo-m/rtx4090-8x-pcie-dualsocket-phb-pairs-vast.txt"
RTX4090_XML = "smi-q/rtx4090-vast-machine02-nvidia-smi-q.xml"
V100_NVLINK = "nvlink/v100-sxm2-8x-nvlink-s-vast.txt"
MIG_HEAD10 = "smi-L/dgx-a100-80gb-mig-mixed-3g40-2g20-1g10-head10-deepops.txt"
V100_LIST_LINE = "GPU 0: Tesla V100-SXM2-32GB (UUID: GPU-2b5fbbe0-802e-d2fd-c501-69ec52b11bb7)\n"
MIG_SLURM = "smi-L/dgx-a100-80gb-mig-1g10gb-inside-slurm-job-reindexed-deepops.txt"


def test_argv_matches_the_bundle_layout() -> None:
    assert {
        nvidia_smi.TOPO_ARGV,
        nvidia_smi.LIST_ARGV,
        nvidia_smi.QUERY_XML_ARGV,
        nvidia_smi.NVLINK_ARGV,
    } <= set(bundle.COMMANDS.values())


# --------------------------------------------------------------------------------------------
# nvidia-smi -L
# --------------------------------------------------------------------------------------------


@pytest.mark.corpus
def test_list_with_mig_truncated_by_head(corpus: Path) -> None:
    gpus = nvidia_smi.parse_smi_list((corpus / MIG_HEAD10).read_text())
    assert [(g.index, g.model) for g in gpus] == [(0, "NVIDIA A100-SXM4-80GB"), (1, "NVIDIA A100-SXM4-80GB")]
    assert gpus[1].uuid == "GPU-938c4705-98bf-1735-e98b-c2a5872a8022"
    for gpu in gpus:
        assert [(m.device_index, m.profile) for m in gpu.migs] == [
            (0, "3g.40gb"),
            (1, "2g.20gb"),
            (2, "1g.10gb"),
            (3, "1g.10gb"),
        ]
        assert all(m.parent_uuid == gpu.uuid and m.parent_index == gpu.index for m in gpu.migs)
    assert gpus[0].migs[2].uuid == "MIG-3fff3a97-95a9-5046-9053-4c0da3d1add7"


@pytest.mark.corpus
def test_list_inside_a_slurm_job_is_reindexed_but_the_uuid_is_stable(corpus: Path) -> None:
    host = nvidia_smi.parse_smi_list((corpus / MIG_HEAD10).read_text())
    job = nvidia_smi.parse_smi_list((corpus / MIG_SLURM).read_text())
    assert len(job) == 1 and len(job[0].migs) == 1
    mig = job[0].migs[0]
    assert mig.device_index == 0 and mig.profile == "1g.10gb"
    on_host = next(m for m in host[0].migs if m.uuid == mig.uuid)
    assert on_host.device_index == 2 and on_host.parent_uuid == mig.parent_uuid


def test_list_old_mig_uuid_carries_gpu_and_compute_instance() -> None:
    text = (
        "GPU 0: A100-SXM4-40GB (UUID: GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77)\n"
        "  MIG 3g.20gb Device 0: (UUID: MIG-GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77/1/0)\n"
    )
    (gpu,) = nvidia_smi.parse_smi_list(text)
    assert (gpu.migs[0].gpu_instance, gpu.migs[0].compute_instance) == (1, 0)


def test_list_without_mig_and_with_an_unreadable_gpu() -> None:
    text = (
        "GPU 0: NVIDIA GeForce RTX 4090 (UUID: GPU-56c928e1-48a0-742e-3c33-e7f87d722450)\n"
        "Unable to determine the device handle for GPU0000:18:00.0: Unknown Error\n"
    )
    gpus, problems = listing._read_smi_list(text, "sample")
    assert [(g.index, g.migs) for g in gpus] == [(0, ())]
    assert problems == ["Unable to determine the device handle for GPU0000:18:00.0: Unknown Error"]


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("  MIG 1g.10gb     Device  0: (UUID: MIG-3fff3a97-95a9-5046-9053-4c0da3d1add7)\n", 1),
        ("GPU 0: A (UUID: GPU-1)\nGPU 0: B (UUID: GPU-2)\n", 2),
        ("GPU 0: A (UUID: GPU-1)\nsomething else\n", 2),
    ],
)
def test_list_refusals(text: str, line: int) -> None:
    with pytest.raises(ParseError) as caught:
        nvidia_smi.parse_smi_list(text, "sample")
    assert caught.value.line == line


# --------------------------------------------------------------------------------------------
# nvidia-smi -q -x and -q
# --------------------------------------------------------------------------------------------


@pytest.mark.corpus
@pytest.mark.parametrize(
    ("xml", "topo", "driver", "model", "buses", "memory_mib"),
    [
        (V100_XML, V100_TOPO, "580.173.02", "Tesla V100-SXM2-32GB", "1A 1B 3D 3E 88 89 B2 B3", 32768),
        (
            RTX4090_XML,
            RTX4090_TOPO,
            "570.211.01",
            "NVIDIA GeForce RTX 4090",
            "17 18 31 32 65 66 98 99",
            24564,
        ),
    ],
)
def test_query_xml_matches_the_same_machines_topo_matrix(
    corpus: Path, xml: str, topo: str, driver: str, model: str, buses: str, memory_mib: int
) -> None:
    version, gpus = nvidia_smi.parse_smi_query_xml((corpus / xml).read_text())
    matrix = nvidia_smi.parse_topo_matrix((corpus / topo).read_text())
    assert version == driver
    assert len(gpus) == len(matrix.gpus) == 8
    assert [gpu.address for gpu in gpus] == [PciAddress(0, int(bus, 16), 0, 0) for bus in buses.split()]
    assert [gpu.minor_number for gpu in gpus] == list(range(8))  # bus order is the index order
    assert {gpu.model for gpu in gpus} == {model}
    assert {gpu.memory_bytes for gpu in gpus} == {memory_mib << 20}
    assert {(gpu.mig_current, gpu.mig_pending, gpu.driver_version) for gpu in gpus} == {(None, None, driver)}
    # Bus order against the matrix: GPUs on the second socket's buses (>= 0x80) are the NUMA 1 rows.
    on_socket1 = {n for n, gpu in enumerate(gpus) if gpu.address is not None and gpu.address.bus >= 0x80}
    assert on_socket1 == {gpu.index for gpu in matrix.gpus if gpu.numa_affinity == {1}}


@pytest.mark.corpus
def test_query_xml_and_nvlink_status_agree_on_uuids(corpus: Path) -> None:
    _, gpus = nvidia_smi.parse_smi_query_xml((corpus / V100_XML).read_text())
    links = nvidia_smi.parse_nvlink_status((corpus / V100_NVLINK).read_text())
    assert [gpu.uuid for gpu in gpus] == [status.uuid for status in links]


@pytest.mark.corpus
@pytest.mark.parametrize(
    ("name", "driver", "buses", "minors", "memory_mib"),
    [
        ("smi-q/h100-nvl-2x-nvidia-smi-a-driver-thamada.txt", "550.54.14", [0xAD, 0xAE], [4, 5], 95830),
        (
            "smi-q/a100-sxm4-80gb-4x-nvidia-smi-a-thamada.txt",
            "555.42.02",
            [0x68, 0x9E, 0xC2, 0xD4],
            None,
            81920,
        ),
    ],
)
def test_query_text(
    corpus: Path, name: str, driver: str, buses: list[int], minors: list[int] | None, memory_mib: int
) -> None:
    version, gpus = parse_smi_query_text((corpus / name).read_text())
    assert version == driver
    assert [gpu.address for gpu in gpus] == [PciAddress(0, bus, 0, 0) for bus in buses]
    assert {(gpu.mig_current, gpu.mig_pending) for gpu in gpus} == {(False, False)}
    assert {gpu.memory_bytes for gpu in gpus} == {memory_mib << 20}
    assert all(gpu.uuid.startswith("GPU-") and gpu.model.startswith("NVIDIA") for gpu in gpus)
    if minors is not None:
        assert [gpu.minor_number for gpu in gpus] == minors


XML_ONE_GPU = """<?xml version="1.0" ?>
<nvidia_smi_log>
  <driver_version>550.54.15</driver_version>
  <gpu id="00000000:07:00.0">
    <product_name>NVIDIA A100-SXM4-40GB</product_name>
    <mig_mode><current_mig>Enabled</current_mig><pending_mig>Disabled</pending_mig></mig_mode>
    <uuid>GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee</uuid>
    <minor_number>N/A</minor_number>
    <pci><pci_bus_id>00000000:07:00.0</pci_bus_id></pci>
    <fb_memory_usage><total>{total}</total></fb_memory_usage>
  </gpu>
</nvidia_smi_log>
"""


def test_query_xml_mig_modes_and_error_values() -> None:
    (_, (gpu,), _), problems = query._read_smi_query_xml(XML_ONE_GPU.format(total="[Unknown Error]"), "x")
    assert (gpu.mig_current, gpu.mig_pending, gpu.minor_number, gpu.memory_bytes) == (True, False, None, None)
    assert gpu.address == PciAddress(0, 7, 0, 0)
    assert problems and "Unknown Error" in problems[0]


@pytest.mark.parametrize(
    "text",
    [
        "not xml",
        "<other/>",
        XML_ONE_GPU.format(total="lots"),
        XML_ONE_GPU.format(total="40960 MiB").replace(
            "00000000:07:00.0</pci_bus_id>", "nowhere</pci_bus_id>"
        ),
        XML_ONE_GPU.format(total="1 MiB").replace("<nvidia_smi_log>", "<nvidia_smi_log><!--"),
    ],
)
def test_query_xml_refusals(text: str) -> None:
    with pytest.raises(ParseError):
        nvidia_smi.parse_smi_query_xml(text, "x")


# --------------------------------------------------------------------------------------------
# nvidia-smi nvlink -s
# --------------------------------------------------------------------------------------------


@pytest.mark.corpus
@pytest.mark.parametrize(
    ("name", "gpus", "links", "speed"),
    [
        ("nvlink/v100-sxm2-8x-nvlink-s-vast.txt", 8, 6, 25.781),
        ("nvlink/gpud-nvidia-smi.nvlink.status.a100.txt", 8, 12, 25.0),
        ("nvlink/h100-gpu0-nvlink-status-i0-18links-spaces.txt", 1, 18, 26.562),
    ],
)
def test_nvlink_status(corpus: Path, name: str, gpus: int, links: int, speed: float) -> None:
    status = nvidia_smi.parse_nvlink_status((corpus / name).read_text())
    assert [s.index for s in status] == list(range(gpus))
    for gpu in status:
        assert gpu.uuid is not None and gpu.uuid.startswith("GPU-")
        assert gpu.links == tuple((n, speed) for n in range(links))


def test_nvlink_status_inactive_links_and_errors() -> None:
    text = (
        "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5a10e6e5-95f7-2785-ed63-6f6147f304f7)\n"
        "\t Link 0: 26.562 GB/s\n"
        "\t Link 1: <inactive>\n"
        "\t Link 2: ERR!\n"
        "GPU 1: NVIDIA GeForce RTX 4090 (UUID: GPU-56c928e1-48a0-742e-3c33-e7f87d722450)\n"
    )
    status, problems = nvlink._read_nvlink_status(text, "sample")
    assert status[0].links == ((0, 26.562), (1, None), (2, None))
    assert status[1].links == ()
    assert problems == ["GPU 0 link 2 reads ERR!"]


@pytest.mark.parametrize(
    "text",
    [
        "\t Link 0: 25 GB/s\n",
        "GPU 0: X (UUID: GPU-1)\n\t Link 0: fast\n",
        "GPU 0: X (UUID: GPU-1)\n\t Link 0: 25 GB/s\n\t Link 0: 25 GB/s\n",
        "GPU 0: X (UUID: GPU-1)\n\t Link 0, P2P is supported: true\n",  # --capabilities, not --status
    ],
)
def test_nvlink_status_refusals(text: str) -> None:
    with pytest.raises(ParseError):
        nvidia_smi.parse_nvlink_status(text, "sample")


# --------------------------------------------------------------------------------------------
# collect(): each command on its own, each wild error a clear condition
# --------------------------------------------------------------------------------------------


def context(answers: dict[tuple[str, ...], Replay | str | Path]) -> Context:
    return Context(root=HostRoot("/nonexistent-test-root"), runner=ReplayRunner(answers), command_timeout_s=7)


def all_commands(answer: Replay) -> dict[tuple[str, ...], Replay | str | Path]:
    argvs = (
        nvidia_smi.TOPO_ARGV,
        nvidia_smi.LIST_ARGV,
        nvidia_smi.QUERY_XML_ARGV,
        nvidia_smi.NVLINK_ARGV,
        nvidia_smi.NVLINK_ERRORS_ARGV,
    )
    return dict.fromkeys(argvs, answer)


def zero_error_counters(gpus: int, links: int) -> str:
    """``nvidia-smi nvlink -e`` of GPUs whose links have no errors, in the driver's layout."""
    lines = []
    for gpu in range(gpus):
        lines.append(f"GPU {gpu}: Tesla V100-SXM2-32GB (UUID: GPU-{gpu:08d}-0000-0000-0000-000000000000)")
        for link in range(links):
            lines += [f"         Link {link}: {name} Errors: 0" for name in ("Replay", "Recovery", "CRC")]
            lines.append("")
    return "\n".join(lines)


@pytest.fixture
def v100_answers(corpus: Path) -> dict[tuple[str, ...], Replay | str | Path]:
    return {
        nvidia_smi.TOPO_ARGV: corpus / V100_TOPO,
        nvidia_smi.LIST_ARGV: V100_LIST_LINE,
        nvidia_smi.QUERY_XML_ARGV: corpus / V100_XML,
        nvidia_smi.NVLINK_ARGV: corpus / V100_NVLINK,
        nvidia_smi.NVLINK_ERRORS_ARGV: zero_error_counters(8, 6),
    }


@pytest.mark.corpus
def test_collect_everything_readable(v100_answers: dict[tuple[str, ...], Replay | str | Path]) -> None:
    ctx = context(v100_answers)
    result = nvidia_smi.collect(ctx)
    facts = result.facts
    assert result.ok and facts.conditions == ()
    assert [s.name for s in facts.sources] == [
        "nvidia-smi topo -m",
        "nvidia-smi -L",
        "nvidia-smi -q -x",
        "nvidia-smi nvlink -s",
        "nvidia-smi nvlink -e",
    ]
    assert facts.topo_matrix is not None and len(facts.topo_matrix.gpus) == 8
    assert len(facts.queried_gpus) == 8 and len(facts.nvlink_status) == 8 and len(facts.listed_gpus) == 1
    assert len(facts.health.nvlinks) == 48 and len(facts.health.gpu_pcie) == 8
    assert isinstance(ctx.runner, ReplayRunner) and len(ctx.runner.calls) == 5


def test_collect_not_installed_is_one_unavailable_condition() -> None:
    facts = nvidia_smi.collect(context({})).facts
    assert [(c.reason, c.message) for c in facts.conditions] == [
        (ConditionReason.UNAVAILABLE, "nvidia-smi is not installed (not found on PATH)")
    ]
    assert [(s.name, s.ok) for s in facts.sources] == [("nvidia-smi", False)]
    assert facts.topo_matrix is None


def test_collect_driver_library_mismatch() -> None:
    mismatch = Replay(stdout="Failed to initialize NVML: Driver/library version mismatch\n", returncode=18)
    facts = nvidia_smi.collect(context(all_commands(mismatch))).facts
    (cond,) = facts.conditions
    assert cond.reason is ConditionReason.UNAVAILABLE
    assert "Failed to initialize NVML: Driver/library version mismatch" in cond.message


def test_collect_no_devices() -> None:
    facts = nvidia_smi.collect(
        context(all_commands(Replay(stdout="No devices were found\n", returncode=6)))
    ).facts
    (cond,) = facts.conditions
    assert cond.reason is ConditionReason.UNAVAILABLE and "no GPUs visible to the driver" in cond.message


@pytest.mark.parametrize(
    ("stdout", "reason_text"),
    [
        # after a long answer, in another case
        ("Product Name : Tesla V100\n" * 2000 + "NO DEVICES WERE FOUND\n", "no GPUs visible to the driver"),
        ("ok\n" * 500 + "nvidia-smi HAS FAILED because it couldn't talk\n", "nvidia-smi HAS FAILED"),
        # characters outside ASCII that IGNORECASE matches to ASCII letters (long s as s, the Kelvin
        # sign as k): the line scan still sees them
        ("NVIDIA-SMI haſ failed because it couldn't communicate\n", "NVIDIA-SMI haſ failed"),
        ("\u212a\nNo devices were found\n", "no GPUs visible to the driver"),
        ("No deviceſ found\n", "no GPUs visible to the driver"),
    ],
)
def test_collect_finds_a_failure_line_anywhere_in_any_case(stdout: str, reason_text: str) -> None:
    facts = nvidia_smi.collect(context(all_commands(Replay(stdout=stdout, returncode=9)))).facts
    (cond,) = facts.conditions
    assert cond.reason is ConditionReason.UNAVAILABLE and reason_text in cond.message


def test_collect_hang_is_a_timeout() -> None:
    facts = nvidia_smi.collect(context(all_commands(Replay(hang=True)))).facts
    (cond,) = facts.conditions
    assert cond.reason is ConditionReason.TIMEOUT and "7s" in cond.message


@pytest.mark.corpus
def test_collect_garbage_in_one_command_keeps_the_others(
    v100_answers: dict[tuple[str, ...], Replay | str | Path],
) -> None:
    v100_answers[nvidia_smi.TOPO_ARGV] = "\x00\x01 garbage \x02"
    facts = nvidia_smi.collect(context(v100_answers)).facts
    assert facts.topo_matrix is None and len(facts.queried_gpus) == 8 and len(facts.nvlink_status) == 8
    (cond,) = facts.conditions
    assert cond.reason is ConditionReason.PARSE_ERROR and cond.message.startswith("nvidia-smi topo -m: ")
    assert [s.ok for s in facts.sources] == [False, True, True, True, True]


@pytest.mark.corpus
def test_collect_error_values_are_degraded_and_the_rest_kept(
    corpus: Path, v100_answers: dict[tuple[str, ...], Replay | str | Path]
) -> None:
    topo = (corpus / V100_TOPO).read_text()
    v100_answers[nvidia_smi.TOPO_ARGV] = topo.replace("GPU4\tNV2\tSYS", "GPU4\tERR!\tSYS")
    v100_answers[nvidia_smi.LIST_ARGV] = (
        "GPU 0: Tesla V100-SXM2-32GB (UUID: GPU-2b5fbbe0-802e-d2fd-c501-69ec52b11bb7)\n"
        "Unable to determine the device handle for GPU0000:1B:00.0: Unknown Error\n"
    )
    facts = nvidia_smi.collect(context(v100_answers)).facts
    assert (
        facts.topo_matrix is not None and len(facts.topo_matrix.gpu_gpu) == 28
    )  # GPU0-GPU4 still from row 0
    assert [c.reason for c in facts.conditions] == [ConditionReason.DEGRADED, ConditionReason.DEGRADED]
    assert "ERR!" in facts.conditions[0].message and "Unknown Error" in facts.conditions[1].message
    assert len(facts.listed_gpus) == 1


@pytest.mark.corpus
def test_collect_bundle_with_only_the_matrix(corpus: Path) -> None:
    facts = nvidia_smi.collect(context({nvidia_smi.TOPO_ARGV: corpus / V100_TOPO})).facts
    assert facts.topo_matrix is not None
    assert (facts.sources[0].name, facts.sources[0].ok) == ("nvidia-smi topo -m", True)
    assert {c.reason for c in facts.conditions} == {ConditionReason.UNAVAILABLE}
    assert len(facts.conditions) == 4


def test_collect_nonzero_exit_with_readable_output_is_degraded() -> None:
    answers = all_commands(Replay(stdout="", returncode=3, stderr="Not Supported"))
    answers[nvidia_smi.LIST_ARGV] = Replay(
        stdout="GPU 0: NVIDIA L4 (UUID: GPU-11111111-2222-3333-4444-555555555555)\n",
        returncode=15,
        stderr="lost",
    )
    facts = nvidia_smi.collect(context(answers)).facts
    assert len(facts.listed_gpus) == 1
    reasons = {s.name: c.reason for s, c in zip(facts.sources, facts.conditions, strict=True)}
    assert reasons["nvidia-smi -L"] is ConditionReason.DEGRADED
    assert reasons["nvidia-smi topo -m"] is ConditionReason.UNAVAILABLE
