"""The table an operator reads: width, order, Ready, the topo -m matrix, preferred sets, PCI names,
and no terminal control characters whatever the bundle holds (issues 16 and 17)."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from helpers import BUNDLES, REPO

from nodetopo.cli import main
from nodetopo.command.terminal import strip_control
from nodetopo.topology.discover import bundle_context, scan
from nodetopo.views.matrix import gpu_matrix
from nodetopo.views.pciids import find_pci_ids, names_in_database, parse_pci_ids, read_pci_names, short_vendor
from nodetopo.views.render import natural_key, render_table

ALL = sorted(p.name for p in BUNDLES.iterdir() if p.is_dir())
CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _discover(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(["discover", *argv]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("bundle", ALL)
def test_every_line_fits_an_80_column_terminal(
    bundle: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    out = _discover(capsys, "--from", str(BUNDLES / bundle), "--matrix", "--node-name", "a-long-node-name-01")
    too_wide = [line for line in out.splitlines() if len(line) > 80]
    assert too_wide == []
    # nothing essential is cut: every GPU row and every NIC name is still there
    topology = scan(bundle_context(BUNDLES / bundle)).topology
    for g in topology.gpus:
        assert re.search(rf"^  {g.index}\s", out, re.M)
    for n in topology.nics:
        assert n.name in out


def test_piped_output_is_plain_and_whole(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    out = _discover(capsys, "--from", str(BUNDLES / "dgx-a100"), "--node-name", "n")
    assert "\x1b" not in out and "…" not in out
    assert max(len(line) for line in out.splitlines()) > 80  # nothing shortened for a pipe
    assert "MODEL" in out  # no column dropped


def test_a_terminal_gets_bold_titles_unless_no_color() -> None:
    topology = scan(bundle_context(BUNDLES / "pcie-4x-nvbridge")).topology
    assert "\x1b[1mGPUs\x1b[0m" in render_table(topology, "n", width=100, style=True)
    assert "\x1b" not in render_table(topology, "n", width=100, style=False)


def test_names_sort_naturally(capsys: pytest.CaptureFixture[str]) -> None:
    assert sorted(["mlx5_10", "mlx5_2", "mlx5_1", "mlx5_11"], key=natural_key) == [
        "mlx5_1",
        "mlx5_2",
        "mlx5_10",
        "mlx5_11",
    ]
    out = _discover(capsys, "--from", str(BUNDLES / "dgx-a100"))
    nic_rows = [line.split()[0] for line in out.split("\nNICs\n")[1].split("\n\n")[0].splitlines()[1:]]
    assert nic_rows == [f"mlx5_{i}" for i in range(12)]
    matrix_header = out.split("GPU → NIC")[1].splitlines()[1].split()
    assert matrix_header == [f"mlx5_{i}" for i in range(12)]


def test_ready_and_the_reason_when_not(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = _discover(capsys, "--from", str(BUNDLES / "dgx-h100"))
    assert "Ready: True" in out.splitlines()[0]
    bundle = tmp_path / "b"
    (bundle / "cmd").mkdir(parents=True)
    (bundle / "cmd" / "nvidia-smi-topo-m.txt").write_text("\tGPU0\tGPU1\nGPU0\t X \tWAT\nGPU1\tWAT\t X \n")
    # with a sysfs tree: without one the essential sources are Missing, which Ready names first
    shutil.copytree(BUNDLES / "cpu-only" / "sys", bundle / "sys", symlinks=True)
    out = _discover(capsys, "--from", str(bundle))
    assert "Ready: False (ParseError)" in out
    assert re.search(r"^  not ready: nvidia-smi.*WAT", out, re.M)


def _topo_m_gpu_cells(path: Path) -> dict[tuple[int, int], str]:
    """The GPU×GPU cells of a topo -m file, read ad hoc (not with nodetopo's parser)."""
    cells: dict[tuple[int, int], str] = {}
    lines = path.read_text().splitlines()
    header = [c.strip() for c in re.sub(r"\x1b\[[0-9;]*m", "", lines[0]).split("\t") if c.strip()]
    gpus = [h for h in header if re.fullmatch(r"GPU\d+", h)]
    for line in lines[1:]:
        fields = line.split("\t")
        if not re.fullmatch(r"GPU\d+", fields[0].strip()):
            continue
        a = int(fields[0].strip()[3:])
        for column, cell in zip(gpus, fields[1 : 1 + len(gpus)], strict=True):
            b = int(column[3:])
            if a != b:
                cells[(a, b)] = cell.strip()
    return cells


#: dgx-h100-nvlink-down's topo -m is the generator's guess of what nvidia-smi prints for an NVSwitch
#: GPU with 6 of 18 links inactive (NV18 everywhere: no real capture of that case is known); the
#: matrix nodetopo derives from the same facts says each pair's links as the island's least
GUESSED_MATRIX = {"dgx-h100-nvlink-down"}


@pytest.mark.parametrize(
    "bundle",
    [b for b in ALL if (BUNDLES / b / "cmd" / "nvidia-smi-topo-m.txt").is_file() and b not in GUESSED_MATRIX],
)
def test_matrix_equals_what_nvidia_smi_printed(bundle: str) -> None:
    result = scan(bundle_context(BUNDLES / bundle))
    expected = _topo_m_gpu_cells(BUNDLES / bundle / "cmd" / "nvidia-smi-topo-m.txt")
    got = gpu_matrix(result.facts, [g.index for g in result.topology.gpus])
    assert {k: got.get(k) for k in expected} == expected


def test_matrix_without_topo_m_comes_from_sysfs_and_nvml(tmp_path: Path) -> None:
    """Without topo -m the cells are computed: NVML links (NVSwitch: the GPU's link count) and the
    sysfs PCIe tree."""
    bundle = tmp_path / "h100"
    shutil.copytree(BUNDLES / "dgx-h100", bundle, symlinks=True)
    (bundle / "cmd" / "nvidia-smi-topo-m.txt").unlink()
    result = scan(bundle_context(bundle))
    cells = gpu_matrix(result.facts, [g.index for g in result.topology.gpus])
    assert cells[(0, 7)] == cells[(7, 0)] == "NV18"
    bundle = tmp_path / "pcie"
    shutil.copytree(BUNDLES / "pcie-8x-2socket", bundle, symlinks=True)
    (bundle / "cmd" / "nvidia-smi-topo-m.txt").unlink()
    result = scan(bundle_context(bundle))
    cells = gpu_matrix(result.facts, [g.index for g in result.topology.gpus])
    expected = _topo_m_gpu_cells(BUNDLES / "pcie-8x-2socket" / "cmd" / "nvidia-smi-topo-m.txt")
    assert cells == expected


def test_matrix_section_in_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    out = _discover(capsys, "--from", str(BUNDLES / "pcie-4x-nvbridge"), "--matrix")
    section = out.split("GPU topology matrix")[1].split("\n\n")[0].splitlines()
    assert section[1].split() == ["GPU0", "GPU1", "GPU2", "GPU3", "mlx5_0", "mlx5_1"]
    assert section[2].split() == ["GPU0", "X", "NV12", "NODE", "NODE", "PIX", "NODE"]
    assert "GPU topology matrix" not in _discover(capsys, "--from", str(BUNDLES / "pcie-4x-nvbridge"))


def test_preferred_gpu_sets_are_shown(capsys: pytest.CaptureFixture[str]) -> None:
    out = _discover(capsys, "--from", str(BUNDLES / "pcie-4x-nvbridge"))
    section = out.split("Preferred GPU sets")[1].split("\n\n")[0]
    assert "2 GPUs: {0-1}  {2-3}" in section
    assert "4 GPUs: {0-3}" in section


PCI_IDS = """\
# a small pci.ids
10de  NVIDIA Corporation
\t2330  GH100 [H100 SXM5 80GB]
\t\t10de 16c1  a subsystem, ignored
\t20b2  GA100 [A100 SXM4 80GB]
15b3  Mellanox Technologies
\t101b  MT28908 Family [ConnectX-6]
1022  Advanced Micro Devices, Inc. [AMD]
\t1480  Starship/Matisse Root Complex
broken line
\tdead  a device under no vendor
C 00  Unclassified device
\t00  Non-VGA unclassified device
"""


def test_pci_ids_names(tmp_path: Path) -> None:
    names = parse_pci_ids(
        PCI_IDS.splitlines(), {(0x10DE, 0x2330), (0x15B3, 0x101B), (0x1022, 0x1480), (0x10DE, 1)}
    )
    assert names == {
        (0x10DE, 0x2330): "NVIDIA GH100 [H100 SXM5 80GB]",
        (0x15B3, 0x101B): "Mellanox MT28908 Family [ConnectX-6]",
        (0x1022, 0x1480): "AMD Starship/Matisse Root Complex",
    }
    assert short_vendor("Intel Corporation") == "Intel"
    ids = tmp_path / "pci.ids"
    ids.write_text(PCI_IDS)
    assert read_pci_names({(0x10DE, 0x20B2)}, [tmp_path / "missing", ids]) == {
        (0x10DE, 0x20B2): "NVIDIA GA100 [A100 SXM4 80GB]"
    }
    assert read_pci_names({(0x10DE, 0x20B2)}, [tmp_path / "missing", tmp_path]) == {}


def test_table_names_pci_devices_and_keeps_ids_without_a_database() -> None:
    topology = scan(bundle_context(BUNDLES / "dgx-a100")).topology
    names = parse_pci_ids(PCI_IDS.splitlines(), {(d.vendor, d.device) for d in topology.pci_devices})
    named = render_table(topology, "n", pci_names=names)
    assert "GPU0 [3D] via 5 bridges  NVIDIA GA100 [A100 SXM4 80GB] (10de:20b2)" in named
    bare = render_table(topology, "n")
    assert "GPU0 [3D] via 5 bridges  10de:20b2" in bare


def _system_pci_ids() -> Path:
    found = find_pci_ids()
    if found is None:
        message = "no pci.ids on this machine (apt-get install pciutils)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found


def test_discover_reads_the_system_pci_ids(capsys: pytest.CaptureFixture[str]) -> None:
    _system_pci_ids()
    out = _discover(capsys, "--from", str(BUNDLES / "dgx-a100"))
    assert "Mellanox MT28908 Family [ConnectX-6] (15b3:101b)" in out


def test_the_fast_lookup_agrees_with_the_line_parser_on_the_real_database() -> None:
    data = _system_pci_ids().read_bytes()
    lines = data.decode("utf-8", errors="replace").splitlines()
    vendors = [int(line[:4], 16) for line in lines if re.match(r"[0-9a-f]{4}  ", line)]
    wanted = {(v, d) for v in vendors[::50] for d in range(0, 0x3000, 7)} | {
        (0x10DE, 0x2330),
        (0x8086, 0x2030),
    }
    assert names_in_database(data, wanted) == parse_pci_ids(lines, wanted)
    assert len(names_in_database(data, wanted)) > 20


# --- terminal control characters (issue 17) ---------------------------------------------------

HOSTILE = {
    "csi": "\x1b[2J\x1b[1;1H",  # clear the screen, move the cursor
    "osc": "\x1b]0;pwned\x07",  # set the window title
    "osc-st": "\x1b]8;;http://evil\x1b\\",  # a hyperlink
    "c1": "\x9b31m",  # an 8-bit CSI
    "bidi": "\u202e",  # right-to-left override
    "cr": "\r",  # rewrite the line
    "bell": "\x07",
}


def test_strip_control_removes_whole_sequences() -> None:
    for name, seq in HOSTILE.items():
        cleaned = strip_control(f"NVIDIA {seq}H100")
        assert CONTROL.search(cleaned) is None, name
        assert "pwned" not in cleaned and "evil" not in cleaned, name
        assert cleaned.startswith("NVIDIA ") and cleaned.endswith("H100"), name
    assert strip_control("a\nb\tc") == "a b c"
    assert strip_control("a\nb", keep_newlines=True) == "a\nb"


def _hostile_bundle(tmp_path: Path) -> Path:
    bundle = tmp_path / "hostile"
    shutil.copytree(BUNDLES / "pcie-4x-nvbridge", bundle, symlinks=True)
    evil = "".join(HOSTILE.values())
    nvml = bundle / "nvml.json"
    escaped = json.dumps(evil)[1:-1]
    nvml.write_text(nvml.read_text().replace("NVIDIA A100-PCIE-40GB", f"NVIDIA{escaped} A100"))
    for name in ("nvidia-smi-L.txt", "nvidia-smi-q.xml"):
        path = bundle / "cmd" / name
        path.write_text(path.read_text().replace("NVIDIA A100-PCIE-40GB", f"NVIDIA{evil} A100"))
    # a NIC the sysfs way: its state file, and a condition message from a garbled ibstat
    (bundle / "cmd" / "ibstat.txt").write_text(f"CA 'mlx5_0'\n\tCA type: {evil}\n\tgarbage {evil}\n")
    return bundle


def test_a_hostile_bundle_cannot_drive_the_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle = _hostile_bundle(tmp_path)
    monkeypatch.delenv("COLUMNS", raising=False)
    out = _discover(capsys, "--from", str(bundle), "--matrix")
    assert "NVIDIA A100" in out  # the name is shown, cleaned
    assert CONTROL.search(out) is None
    gpus = out.split("\nGPUs\n")[1].split("\n\n")[0]
    assert "pwned" not in gpus and "pwned" not in out.splitlines()[0]  # the sequence went, not just ESC
    monkeypatch.setenv("COLUMNS", "80")
    assert CONTROL.search(_discover(capsys, "--from", str(bundle))) is None
    # machine output keeps the bytes, escaped by the encoder
    assert "\\u001b" in _discover(capsys, "--from", str(bundle), "-o", "json")


def test_error_lines_and_text_logs_are_cleaned(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["discover", "--from", str(tmp_path / "x\x1b]0;pwned\x07\x1b[2Jy")]) == 2
    err = capsys.readouterr().err
    assert "not a directory" in err and CONTROL.search(err.rstrip("\n")) is None
    bundle = tmp_path / "b"
    (bundle / "cmd").mkdir(parents=True)
    (bundle / "cmd" / "nvidia-smi-topo-m.txt").write_text("\x1b]0;pwned\x07\tGPU0\nGPU0\tWAT\x1b[2J\n")
    assert main(["discover", "--from", str(bundle), "--log-level", "debug"]) == 0
    captured = capsys.readouterr()
    assert "WAT" in captured.out
    assert CONTROL.search(captured.out) is None
    assert "\x1b" not in captured.err and "\x07" not in captured.err


def test_the_readme_example_is_real_output(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    readme = (REPO / "README.md").read_text()
    command = "$ nodetopo discover --from tests/fixtures/bundles/dgx-h100 --node-name dgx-h100-01 --matrix\n"
    block = readme.split(command)[1].split("```")[0]
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.chdir(REPO)
    out = _discover(
        capsys, "--from", "tests/fixtures/bundles/dgx-h100", "--node-name", "dgx-h100-01", "--matrix"
    )
    lines = out.splitlines()
    assert [line for line in block.splitlines() if line.strip() != "..." and line not in lines] == []


def test_help_says_what_the_views_do() -> None:
    import subprocess
    import sys

    run = [sys.executable, "-m", "nodetopo"]
    discover = subprocess.run([*run, "discover", "--help"], capture_output=True, text=True, check=True).stdout
    for word in ("--matrix", "dot", "svg", "Graphviz", "manifest"):
        assert word in discover, word
    capture = subprocess.run([*run, "capture", "--help"], capture_output=True, text=True, check=True).stdout
    assert "--tar" in capture and "--node-name" in capture
