"""``discover -o dot|svg``: the node drawn as lstopo draws it (issue 16, "A picture")."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import BUNDLES, REPO, require_dot

from nodetopo.cli import main
from nodetopo.topology.discover import bundle_context, scan
from nodetopo.views.dot import ISLAND_COLOURS, to_dot

ALL = sorted(p.name for p in BUNDLES.iterdir() if p.is_dir())


def _clusters(dot_text: str) -> dict[str, list[str]]:
    """Graph node id -> the clusters it is declared in, outermost first (an ad-hoc reader)."""
    stack: list[str] = []
    placed: dict[str, list[str]] = {}
    for line in dot_text.splitlines():
        line = line.strip()
        m = re.match(r'subgraph "([^"]+)" \{$', line)
        if m:
            stack.append(m.group(1))
        elif line == "}":
            if stack:
                stack.pop()
        else:
            m = re.match(r'"([^"]+)" \[label=', line)
            if m and m.group(1) not in placed:
                placed[m.group(1)] = list(stack)
    return placed


@pytest.mark.parametrize("bundle", ALL)
def test_every_fixture_draws(bundle: str, capsys: pytest.CaptureFixture[str]) -> None:
    dot = require_dot()
    assert main(["discover", "--from", str(BUNDLES / bundle), "-o", "dot", "--node-name", "n"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("digraph nodetopo {")
    done = subprocess.run(
        [dot, "-Tsvg"], input=text, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # no warnings either
    topology = scan(bundle_context(BUNDLES / bundle)).topology
    for g in topology.gpus:
        assert f">GPU{g.index}</text>" in done.stdout
    for n in topology.nics:
        assert f">{n.name}" in done.stdout


def test_gpus_and_nics_sit_in_their_numa_node_and_root() -> None:
    result = scan(bundle_context(BUNDLES / "dgx-h100"))
    placed = _clusters(to_dot(result.topology, "n"))
    for g in result.topology.gpus:
        assert placed[f"gpu:{g.index}"] == [f"cluster_numa_{g.numa_node}", f"cluster_root_{g.pcie_root}"]
    for n in result.topology.nics:
        assert placed[f"nic:{n.name}"] == [f"cluster_numa_{n.numa_node}", f"cluster_root_{n.pcie_root}"]
    # the PCIe switches where the GPU and its NIC part, and the NVSwitches' own root
    assert placed["bridge:0000:18:00.0"] == ["cluster_numa_0", "cluster_root_pci0000:15"]
    assert sum(1 for k in placed if k.startswith("pci:")) == 4  # the 4 NVSwitch functions


def test_islands_are_coloured_groups_and_gpus_point_at_their_nics() -> None:
    result = scan(bundle_context(BUNDLES / "pcie-4x-nvbridge"))
    from nodetopo.views.matrix import gpu_matrix

    text = to_dot(result.topology, "n", gpu_matrix=gpu_matrix(result.facts, [0, 1, 2, 3]))
    colour = {
        int(m.group(1)): m.group(2)
        for m in re.finditer(r'"gpu:(\d+)" \[label=.*?fillcolor="(#[0-9A-F]+)"', text)
    }
    assert colour[0] == colour[1] == ISLAND_COLOURS[0]
    assert colour[2] == colour[3] == ISLAND_COLOURS[1]
    nvlink = re.findall(r'"gpu:(\d)" -> "gpu:(\d)" \[color="(#[0-9A-F]+)", penwidth=3, label="(NV\d+)"', text)
    assert sorted(nvlink) == [("0", "1", ISLAND_COLOURS[0], "NV12"), ("2", "3", ISLAND_COLOURS[1], "NV12")]
    affinity = re.findall(r'"gpu:(\d)" -> "nic:(mlx5_\d)" \[style=dashed.*?label="(\w+)"', text)
    assert sorted(affinity) == [
        ("0", "mlx5_0", "PIX"),
        ("1", "mlx5_0", "PIX"),
        ("2", "mlx5_1", "PIX"),
        ("3", "mlx5_1", "PIX"),
    ]
    # an NVSwitch island is one hub joined to each of its GPUs
    h100 = to_dot(scan(bundle_context(BUNDLES / "dgx-h100")).topology, "n")
    assert len(re.findall(r'"gpu:\d" -> "nvlink:0"', h100)) == 8
    assert "18 NVLinks each" in h100


def test_a_topo_m_only_bundle_places_gpus_by_numa_node(tmp_path: Path) -> None:
    bundle = tmp_path / "b"
    (bundle / "cmd").mkdir(parents=True)
    shutil.copy(BUNDLES / "dgx-a100" / "cmd" / "nvidia-smi-topo-m.txt", bundle / "cmd")
    topology = scan(bundle_context(bundle)).topology
    placed = _clusters(to_dot(topology, "n"))
    for g in topology.gpus:
        assert placed[f"gpu:{g.index}"] == ["cluster_numa_None"]  # no NUMA facts from sysfs: unknown box
    assert len([k for k in placed if k.startswith("gpu:")]) == 8


def test_hostile_names_stay_inside_their_quotes(tmp_path: Path) -> None:
    dot = require_dot()
    bundle = tmp_path / "b"
    shutil.copytree(BUNDLES / "pcie-4x-nvbridge", bundle, symlinks=True)
    (bundle / "nvml.json").unlink()
    for name in ("nvidia-smi-L.txt", "nvidia-smi-q.xml"):
        path = bundle / "cmd" / name
        path.write_text(path.read_text().replace("NVIDIA A100-PCIE-40GB", 'A100"]; evil [label="x\\\x1b[2J'))
    text = to_dot(scan(bundle_context(bundle)).topology, "n")
    assert "\x1b" not in text and '"evil"' not in text
    done = subprocess.run([dot, "-Tsvg"], input=text, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "<title>evil</title>" not in done.stdout


def test_svg_output_and_a_clear_error_without_graphviz(tmp_path: Path) -> None:
    require_dot()
    argv = [sys.executable, "-m", "nodetopo", "discover", "--from", str(BUNDLES / "dgx-h100"), "-o", "svg"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.lstrip().startswith("<?xml") and "</svg>" in done.stdout
    # a PATH with python but without dot
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    env["PATH"] = str(bin_dir)
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == 1
    assert done.stdout == ""
    assert "Graphviz" in done.stderr and "apt-get install graphviz" in done.stderr
    assert "Traceback" not in done.stderr
    argv[-1] = "dot"  # the graph itself needs no Graphviz
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == 0 and done.stdout.startswith("digraph")


def test_the_readme_picture_is_this_fixture_drawn() -> None:
    readme = (REPO / "README.md").read_text()
    assert "![" in readme and "docs/img/dgx-h100.svg" in readme
    svg = (REPO / "docs" / "img" / "dgx-h100.svg").read_text()
    topology = scan(bundle_context(BUNDLES / "dgx-h100")).topology
    for g in topology.gpus:
        assert f">GPU{g.index}</text>" in svg
    for n in topology.nics:
        assert f">{n.name} ({n.netdev})</text>" in svg
    assert "NVSwitch fabric (island 0)" in svg
