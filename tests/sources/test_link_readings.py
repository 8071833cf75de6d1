"""The link readings (edge health's input): sysfs PCIe links, AER and RDMA port counters; ``nvidia-smi
-q -x`` link info; ``nvidia-smi nvlink -e``; NVML's link answers.

Real outputs where they exist: the corpus (read in place) and facts of published captures, the
latter rendered here in the tool's layout from the facts (never a copied file).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from nodetopo.errors import ParseError
from nodetopo.host import HostRoot, ReplayRunner
from nodetopo.model import PciAddress, RdmaDevice, RdmaPort
from nodetopo.sources import links, nvidia_smi, nvml, pci
from nodetopo.sources.base import Context
from nodetopo.sources.nvml.source import read_nvml_with_health
from tests.sysfs_trees import GPUD_INFINIBAND, gpud_infiniband_root

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "nvml"

# --------------------------------------------------------------------------------------------
# sysfs
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "gts"),
    [
        ("16.0 GT/s PCIe\n", 16.0),
        ("32.0 GT/s PCIe\n", 32.0),
        ("2.5 GT/s PCIe\n", 2.5),
        ("8 GT/s\n", 8.0),  # kernels before 5.x wrote no decimals and no "PCIe"
        ("2.5 GT/s\n", 2.5),
        ("Unknown\n", None),  # a link that is down, a virtual function
    ],
)
def test_link_speed(text: str, gts: float | None) -> None:
    assert links.parse_link_speed(text, "x") == gts


@pytest.mark.parametrize("text", ["16 Gb/s", "fast", "-8.0 GT/s PCIe", "999 GT/s PCIe", "16.0GT/s PCIe x"])
def test_link_speed_refusals(text: str) -> None:
    with pytest.raises(ParseError, match="link speed"):
        links.parse_link_speed(text, "x")


def test_link_width() -> None:
    assert links.parse_link_width("16\n", "x") == 16
    assert links.parse_link_width("0\n", "x") == 0  # the link is down
    with pytest.raises(ParseError):
        links.parse_link_width("64", "x")
    with pytest.raises(ParseError):
        links.parse_link_width("sixteen", "x")


AER_CORRECTABLE = (
    "RxErr 0\nBadTLP 3\nBadDLLP 1\nRollover 0\nTimeout 0\nNonFatalErr 0\nCorrIntErr 0\nHeaderOF 0\n"
    "TOTAL_ERR_COR 4\n"
)


def test_aer_total_is_the_total_line() -> None:
    # the kernel's aer_dev_correctable: one "<error> <count>" per line, then the total
    assert links.parse_aer_total(AER_CORRECTABLE, "x", "TOTAL_ERR_COR") == 4
    with pytest.raises(ParseError, match="no TOTAL_ERR_FATAL"):
        links.parse_aer_total(AER_CORRECTABLE, "x", "TOTAL_ERR_FATAL")
    with pytest.raises(ParseError, match="x:2: expected"):
        links.parse_aer_total("RxErr 0\nBadTLP: three\n", "x", "TOTAL_ERR_COR")


def test_counter_no_pma_is_unknown() -> None:
    # real: iWARP devices (i40iw) answer "N/A (no PMA)" for every port counter (node_exporter#966)
    assert links.parse_counter("N/A (no PMA)\n", "x") is None
    assert links.parse_counter("255\n", "x") == 255
    with pytest.raises(ParseError):
        links.parse_counter("-1", "x")


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_read_pcie_links_through_the_device_link(tmp_path: Path) -> None:
    real = tmp_path / "sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0"
    for name, value in (
        ("current_link_speed", "16.0 GT/s PCIe\n"),
        ("current_link_width", "8\n"),
        ("max_link_speed", "32.0 GT/s PCIe\n"),
        ("max_link_width", "16\n"),
        ("aer_dev_correctable", AER_CORRECTABLE),
        ("aer_dev_nonfatal", "Undefined 0\nTOTAL_ERR_NONFATAL 0\n"),
    ):
        _write(real / name, value)
    _write(real.parent / "max_link_width", "16\n")
    devices = tmp_path / "sys/bus/pci/devices"
    devices.mkdir(parents=True)
    os.symlink("../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0", devices / "0000:01:00.0")
    os.symlink("../../../devices/pci0000:00/0000:00:01.0", devices / "0000:00:01.0")
    readings, conditions = links.read_pcie_links(
        HostRoot(tmp_path), [PciAddress.parse("0000:00:01.0"), PciAddress.parse("0000:01:00.0")]
    )
    assert conditions == ()
    port, gpu = readings
    assert (port.max_width, port.current_width, port.aer_correctable) == (16, None, None)
    assert (gpu.current_gts, gpu.current_width, gpu.max_gts, gpu.max_width) == (16.0, 8, 32.0, 16)
    assert (gpu.aer_correctable, gpu.aer_nonfatal, gpu.aer_fatal) == (4, 0, None)


def test_garbage_is_a_parse_error_of_the_file(tmp_path: Path) -> None:
    real = tmp_path / "sys/devices/pci0000:00/0000:01:00.0"
    _write(real / "current_link_width", "lots\n")
    devices = tmp_path / "sys/bus/pci/devices"
    devices.mkdir(parents=True)
    os.symlink("../../../devices/pci0000:00/0000:01:00.0", devices / "0000:01:00.0")
    (reading,), (condition,) = links.read_pcie_links(HostRoot(tmp_path), [PciAddress.parse("0000:01:00.0")])
    assert reading.current_width is None
    assert condition.source == "sysfs.links" and condition.reason.value == "ParseError"
    assert "sys/bus/pci/devices/0000:01:00.0/current_link_width" in condition.message


def test_a_rescan_reads_every_file_and_parses_only_what_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through one memo (the scan context's), an unchanged function's reading is given back as parsed
    at the last read (no AER table parsed again); a counter that rose is new text, parsed afresh; a
    file that does not parse is its condition at every read, not only the first."""
    real = tmp_path / "sys/devices/pci0000:00/0000:01:00.0"
    _write(real / "max_link_width", "16\n")
    _write(real / "current_link_width", "lots\n")
    _write(real / "aer_dev_correctable", AER_CORRECTABLE)
    devices = tmp_path / "sys/bus/pci/devices"
    devices.mkdir(parents=True)
    os.symlink("../../../devices/pci0000:00/0000:01:00.0", devices / "0000:01:00.0")
    root, addresses = HostRoot(tmp_path), [PciAddress.parse("0000:01:00.0")]
    parsed: list[str] = []
    parse_aer_total = links.parse_aer_total

    def counting(text: str, path: str, total: str) -> int:
        parsed.append(path)
        return parse_aer_total(text, path, total)

    monkeypatch.setattr(links, "parse_aer_total", counting)
    memo = links.LinkMemo()
    (first,), first_conditions = links.read_pcie_links(root, addresses, memo)
    (again,), again_conditions = links.read_pcie_links(root, addresses, memo)
    assert again is first and len(parsed) == 1
    assert again_conditions == first_conditions and len(first_conditions) == 1
    _write(real / "aer_dev_correctable", AER_CORRECTABLE.replace("TOTAL_ERR_COR 4", "TOTAL_ERR_COR 9"))
    (rose,), _ = links.read_pcie_links(root, addresses, memo)
    assert (first.aer_correctable, rose.aer_correctable, len(parsed)) == (4, 9, 2)
    (fresh,), _ = links.read_pcie_links(root, addresses)  # without a memo nothing is kept
    assert fresh == rose and fresh is not rose


def test_the_pci_pass_reads_the_links_once_and_they_are_not_kept_past_the_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``sysfs.pci`` reads a GPU's and its port's link attributes through the directory it has open;
    ``sysfs.links`` takes those texts (opening no directory again) and reads the rest itself (the
    audio function is not offered). The texts belong to one scan: a link read without a PCI read
    before it reads the files again."""
    port = tmp_path / "sys/devices/pci0000:00/0000:00:01.0"
    gpu = port / "0000:01:00.0"
    audio = port / "0000:01:00.1"
    for directory, cls, vendor in (
        (port, "0x060400", "0x8086"),
        (gpu, "0x030200", "0x10de"),
        (audio, "0x040300", "0x10de"),
    ):
        _write(directory / "class", cls + "\n")
        _write(directory / "vendor", vendor + "\n")
        _write(directory / "device", "0x2330\n")
        _write(directory / "max_link_width", "16\n")
        _write(directory / "current_link_width", "16\n")
    devices = tmp_path / "sys/bus/pci/devices"
    devices.mkdir(parents=True)
    for address, target in (
        ("0000:00:01.0", "pci0000:00/0000:00:01.0"),
        ("0000:01:00.0", "pci0000:00/0000:00:01.0/0000:01:00.0"),
        ("0000:01:00.1", "pci0000:00/0000:00:01.0/0000:01:00.1"),
    ):
        os.symlink(f"../../../devices/{target}", devices / address)
    ctx = Context(root=HostRoot(tmp_path), runner=ReplayRunner({}))
    facts = pci.collect(ctx).facts
    opened: list[str] = []
    open_link_directory = HostRoot.open_link_directory

    def counting(self: HostRoot, link: str) -> tuple[int, str] | None:
        opened.append(link.rsplit("/", 1)[-1])
        return open_link_directory(self, link)

    monkeypatch.setattr(HostRoot, "open_link_directory", counting)
    addresses = [d.address for d in facts.pci_devices]
    shared, _ = links.read_pcie_links(ctx.root, addresses, read=ctx.cache.state(links.PcieTexts))
    assert opened == ["0000:01:00.1"]  # the audio function only: the PCI pass offered the other two
    assert shared == links.read_pcie_links(ctx.root, addresses)[0]
    _write(gpu / "current_link_width", "8\n")
    opened.clear()
    again, _ = links.read_pcie_links(ctx.root, addresses, read=ctx.cache.state(links.PcieTexts))
    assert len(opened) == 3 and [r.current_width for r in again] == [16, 8, 16]


@pytest.mark.corpus
def test_port_counters_of_a_real_h100_node(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """gpud's capture of /sys/class/infiniband on an H100 node: link_downed of mlx5_1 reads 255 (the
    8-bit counter's ceiling: saturated, judged as unknown by the rules), port_rcv_errors 14 on each."""
    root = gpud_infiniband_root(corpus, tmp_path_factory)
    names = sorted(p.name for p in (corpus / GPUD_INFINIBAND).iterdir())
    devices = [RdmaDevice(name=n, ports=(RdmaPort(number=1),)) for n in names]
    readings, conditions = links.read_port_counters(root, devices)
    assert conditions == ()
    by_nic = {r.nic: dict(r.counters) for r in readings}
    assert by_nic["mlx5_1"]["link_downed"] == 255
    assert {n: c["port_rcv_errors"] for n, c in by_nic.items()} == dict.fromkeys(names, 14)
    assert all(c["symbol_error"] == 0 and c["link_error_recovery"] == 0 for c in by_nic.values())


# --------------------------------------------------------------------------------------------
# nvidia-smi -q -x
# --------------------------------------------------------------------------------------------


@pytest.mark.corpus
def test_query_links_of_a_rented_rtx4090_machine(corpus: Path) -> None:
    """8x RTX 4090 (Vast.ai): every GPU at x8 or x4 of x16; one trained Gen3 at most though both the
    GPU and the host go to Gen4; idle ones at Gen1/Gen2 (normal)."""
    readings = nvidia_smi.parse_smi_query_links(
        (corpus / "smi-q/rtx4090-vast-machine02-nvidia-smi-q.xml").read_text()
    )
    assert len(readings) == 8
    assert sorted(r.current_width or 0 for r in readings) == [4, 8, 8, 8, 8, 8, 8, 8]
    assert {r.max_width for r in readings} == {16}
    limited = [r for r in readings if r.max_gen is not None and r.max_gen < 4]
    assert [(r.max_gen, r.device_max_gen, r.host_max_gen) for r in limited] == [(3, 4, 4)]
    assert all(r.replays == 0 and r.source == "nvidia-smi" and r.address is not None for r in readings)
    assert min(r.current_gen or 9 for r in readings) == 1


@pytest.mark.corpus
def test_query_links_of_the_v100_machine(corpus: Path) -> None:
    readings = nvidia_smi.parse_smi_query_links(
        (corpus / "smi-q/v100-sxm2-8x-vast-machine03-nvidia-smi-q.xml").read_text()
    )
    assert {
        (r.max_gen, r.current_gen, r.device_max_gen, r.host_max_gen, r.max_width, r.current_width)
        for r in readings
    } == {(3, 3, 3, 3, 16, 16)}


# --------------------------------------------------------------------------------------------
# nvidia-smi nvlink -e
# --------------------------------------------------------------------------------------------

#: ScuffedSquared/NVLink-Error-Testing-Notes@77861dc, 'output of "nvidia-smi nvlink -e"': two
#: Tesla V100-SXM2-32GB-LS (driver 580) with 6 links each; GPU 0 link 3 has 211 replay errors,
#: GPU 2 link 0 2 replay errors and 65535 CRC errors (the count's ceiling), every other count 0.
V100_ERRORS = {
    (0, "GPU-bd0738fc-434f-4a42-28e0-d699cb37f301"): {3: (211, 0, 0)},
    (2, "GPU-926a4a2e-2909-4d8a-fb23-6d90ed5bcb14"): {0: (2, 0, 65535)},
}


def render_nvlink_errors(
    facts: dict[tuple[int, str], dict[int, tuple[int, int, int]]], links_per_gpu: int
) -> str:
    """``nvidia-smi nvlink -e`` in the driver's layout (9-space indent, a blank line after each link)."""
    lines: list[str] = []
    for (gpu, uuid), counts in facts.items():
        lines.append(f"GPU {gpu}: Tesla V100-SXM2-32GB-LS (UUID: {uuid})")
        for link in range(links_per_gpu):
            replay, recovery, crc = counts.get(link, (0, 0, 0))
            lines += [
                f"         Link {link}: Replay Errors: {replay}",
                f"         Link {link}: Recovery Errors: {recovery}",
                f"         Link {link}: CRC Errors: {crc}",
                "",
            ]
    return "\n".join(lines)


def test_nvlink_errors_of_a_real_v100_pair() -> None:
    readings = nvidia_smi.parse_nvlink_errors(render_nvlink_errors(V100_ERRORS, 6))
    assert len(readings) == 12
    by_link = {(r.gpu, r.link): (r.replay, r.recovery, r.crc) for r in readings}
    assert by_link[(0, 3)] == (211, 0, 0)
    assert by_link[(2, 0)] == (2, 0, 65535)
    assert sum(1 for v in by_link.values() if v == (0, 0, 0)) == 10
    assert {r.source for r in readings} == {"nvidia-smi"} and all(r.active is None for r in readings)


def test_nvlink_errors_na_and_unknown_counters() -> None:
    text = (
        "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-abc)\n"
        "\t Link 0: Replay Errors: N/A\n"
        "\t Link 0: Recovery Errors: 0\n"
        "\t Link 0: Rx0 Flit Errors: 9\n"  # a counter this reader does not use: read and ignored
        "\t Link 0: CRC Errors: [Unknown Error]\n"
    )
    readings, problems = nvidia_smi.nvlink._read_nvlink_errors(text, "x")
    (reading,) = readings
    assert (reading.replay, reading.recovery, reading.crc) == (None, 0, None)
    assert problems == ["GPU 0 link 0 CRC Errors reads [Unknown Error]"]


@pytest.mark.parametrize(
    "text",
    [
        "\t Link 0: Replay Errors: 0\n",  # before any GPU
        "GPU 0: x (UUID: GPU-a)\n\t Link 0: Replay Errors: many\n",
        "GPU 0: x (UUID: GPU-a)\n\t Link 0: Replay Errors: 0\n\t Link 0: Replay Errors: 1\n",
        "GPU 0: x (UUID: GPU-a)\nGPU 0: x (UUID: GPU-a)\n",
        "GPU 0: x (UUID: GPU-a)\nsomething else\n",
    ],
)
def test_nvlink_errors_refusals(text: str) -> None:
    with pytest.raises(ParseError):
        nvidia_smi.parse_nvlink_errors(text, "x")


# --------------------------------------------------------------------------------------------
# NVML
# --------------------------------------------------------------------------------------------


def test_nvml_link_readings_replay_from_a_dump() -> None:
    data = json.loads((FIXTURES / "h100-nvl-2x-bridge.json").read_text())
    device = data["devices"][1]
    device["pcie"] = {
        "maxGen": 5,
        "deviceMaxGen": 5,
        "currentGen": 1,
        "maxWidth": 16,
        "currentWidth": 8,
        "replays": 12,
        "errors": {},
    }
    device["nvlinks"][2]["counters"] = {"replay": 4, "recovery": 1, "crcFlit": 3, "crcData": 2}
    device["nvlinks"][2]["speedMBps"] = 26562
    _, _, health = read_nvml_with_health(nvml.RecordedNvml.from_dict(data))
    (pcie,) = health.gpu_pcie
    assert (pcie.gpu, pcie.current_width, pcie.max_width, pcie.replays, pcie.current_gen) == (1, 8, 16, 12, 1)
    link = next(r for r in health.nvlinks if (r.gpu, r.link) == (1, 2))
    assert (link.active, link.replay, link.recovery, link.crc, link.speed_gbps) == (True, 4, 1, 5, 26.562)
    others = [r for r in health.nvlinks if (r.gpu, r.link) != (1, 2) and r.active]
    assert others and all(r.replay is None and r.crc is None for r in others)  # not in the dump: unknown
    # and the dump of the replay is the dump (the format round trip)
    assert nvml.dump_nvml(nvml.RecordedNvml.from_dict(data))["devices"][1]["pcie"]["currentWidth"] == 8
