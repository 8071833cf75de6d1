"""Degraded links at a glance (issue 24): ``nodetopo discover`` and ``kubectl ntopo`` list each degraded
edge with its reasons, mark ``!`` what sits on one in the tables and matrices, and draw it red with
its reason in the picture. The machines are the degraded fixture bundles; ``kubectl ntopo`` reads the
object ``discover -o json`` publishes for them."""

from __future__ import annotations

import json
import re

import pytest
from helpers import BUNDLES, nodetopology_of, require_dot

from nodetopo.cli import main as nodetopo_main
from nodetopo.kubectl.cli import _table
from nodetopo.resource.body import topology_from_nodetopology
from nodetopo.views.dot import DEGRADED_COLOUR, to_dot

DEGRADED = {
    "dgx-h100-nvlink-down": ("GPU5/nvlink", "NVLinkDown", "12 of 18 NVLinks active (its peers have 18)"),
    "dgx-h100-gpu-x8": ("GPU3/pcie", "PcieWidthDegraded", "x8 of x16 (both ends support x16)"),
    "dgx-h100-rail-half": ("mlx5_3/port1", "PortRateBelowPeers", "200 Gb/s, its rails run at 400 Gb/s"),
}


def discover(capsys: pytest.CaptureFixture[str], bundle: str, *args: str) -> str:
    assert nodetopo_main(["discover", "--from", str(BUNDLES / bundle), *args]) == 0
    return capsys.readouterr().out


def section(table: str, title: str) -> list[str]:
    """The lines of the section whose title starts with ``title`` (header included), [] when none."""
    for block in table.split("\n\n"):
        lines = block.splitlines()
        if lines and lines[0].startswith(title):
            return lines[1:]
    return []


def marked_cells(table: str) -> set[tuple[str, str]]:
    """(row, column) of every matrix cell marked ``!``."""
    rows = section(table, "GPU topology matrix")
    header = rows[0].split()
    return {
        (r.split()[0], header[i - 1]) for r in rows[1:] for i, c in enumerate(r.split()) if c.endswith("!")
    }


@pytest.mark.parametrize("bundle", sorted(DEGRADED))
def test_the_table_lists_each_degraded_link_with_its_reason(
    bundle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    edge, reason, message = DEGRADED[bundle]
    table = discover(capsys, bundle)
    assert table.splitlines()[0].endswith("Degraded: 1 link")
    rows = section(table, "Degraded links")
    assert rows[0].split() == ["LINK", "REASONS", "MESSAGE"]
    assert [r.split(None, 2) for r in rows[1:]] == [[edge, reason, message]]


def test_a_healthy_node_shows_no_degraded_link(capsys: pytest.CaptureFixture[str]) -> None:
    table = discover(capsys, "dgx-h100", "--matrix")
    assert "Degraded" not in table and "!" not in table


def test_the_marks_are_on_what_sits_on_the_degraded_link(capsys: pytest.CaptureFixture[str]) -> None:
    nvlink = discover(capsys, "dgx-h100-nvlink-down", "--matrix")
    gpus = {r.split()[0] for r in section(nvlink, "GPUs")[1:]}
    assert "5!" in gpus and not {g for g in gpus if g.endswith("!")} - {"5!"}
    # GPU5's pairs (its NVLinks are degraded), both ways; its NIC paths are healthy
    pairs = {(f"GPU{a}", f"GPU{b}") for a in range(8) for b in range(8) if a != b and 5 in (a, b)}
    assert marked_cells(nvlink) == pairs
    rail = discover(capsys, "dgx-h100-rail-half", "--matrix")
    assert marked_cells(rail) == {(f"GPU{g}", "mlx5_3") for g in range(8)}  # every path to the rail
    assert [r.split()[0] for r in section(rail, "NICs")[1:] if r.split()[0].endswith("!")] == ["mlx5_3!"]
    x8 = discover(capsys, "dgx-h100-gpu-x8", "--matrix")
    assert marked_cells(x8) == {("GPU3", f"mlx5_{n}") for n in range(10)}  # every path of GPU3
    # without --matrix, the GPU -> NIC matrix carries the same marks
    assert "PIX!" in "".join(section(discover(capsys, "dgx-h100-gpu-x8"), "GPU → NIC"))


@pytest.mark.parametrize("bundle", sorted(DEGRADED))
def test_kubectl_ntopo_shows_what_discover_shows(bundle: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The published object's table and matrix: the same degraded links and marks as on the node."""
    theirs = discover(capsys, bundle, "--matrix")
    body = json.loads(discover(capsys, bundle, "-o", "json"))
    ours = _table(body, matrix=True)
    for title in ("Degraded links", "GPUs", "NICs"):
        assert section(ours, title) == section(theirs, title), title
    assert marked_cells(ours) == marked_cells(theirs)


def red_edges(dot_text: str) -> list[tuple[str, str, str]]:
    """(tail, head, label) of every edge drawn in the degraded colour."""
    found = []
    for line in dot_text.splitlines():
        m = re.match(r'\s*"([^"]+)" -> "([^"]+)" \[(.*)\];$', line)
        if m and f'color="{DEGRADED_COLOUR}"' in m.group(3):
            label = re.search(r'label="([^"]*)"', m.group(3))
            found.append((m.group(1), m.group(2), label.group(1) if label else ""))
    return found


@pytest.mark.parametrize(
    ("bundle", "edges", "tree"),
    [
        # out of the island: to its NVSwitch fabric
        ("dgx-h100-nvlink-down", {("gpu:5", "nvlink:0")}, set()),
        # the GPU's own PCIe link (in the node's PCIe tree), and its path to its PIX NIC
        ("dgx-h100-gpu-x8", {("gpu:3", "nic:mlx5_3")}, {("bridge:0000:3e:00.0", "gpu:3")}),
        ("dgx-h100-rail-half", {("gpu:3", "nic:mlx5_3")}, set()),
    ],
)
def test_the_picture_draws_the_degraded_link_red_with_its_reason(
    bundle: str, edges: set[tuple[str, str]], tree: set[tuple[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    """``discover -o dot`` on the node, and ``kubectl ntopo get -o dot`` from the published object
    (which keeps no PCIe tree, so it draws no tree edge)."""
    edge, reason, message = DEGRADED[bundle]
    on_node = discover(capsys, bundle, "-o", "dot")
    published = to_dot(topology_from_nodetopology(nodetopology_of(bundle)), bundle)
    for text, expected in ((on_node, edges | tree), (published, edges)):
        drawn = red_edges(text)
        assert {(tail, head) for tail, head, _ in drawn} == expected
        assert all(f"{reason}: {message}" in label for _, _, label in drawn), drawn
        # the device whose own link it is: outlined red, its reason in its label
        outlined = [line for line in text.splitlines() if f"degraded: {edge} {reason}" in line]
        assert len(outlined) == 1 and f'color="{DEGRADED_COLOUR}", penwidth=3' in outlined[0]
        assert "red: a degraded link" in text and "1 degraded link" in text


def test_a_healthy_node_draws_nothing_red(capsys: pytest.CaptureFixture[str]) -> None:
    assert DEGRADED_COLOUR not in discover(capsys, "dgx-h100", "-o", "dot")


def test_the_svg_strokes_the_degraded_link_red(capsys: pytest.CaptureFixture[str]) -> None:
    require_dot()
    svg = discover(capsys, "dgx-h100-rail-half", "-o", "svg")
    colour = DEGRADED_COLOUR.lower()
    assert f'stroke="{colour}"' in svg
    assert re.search(
        rf'fill="{colour}">PIX, degraded: PortRateBelowPeers: 200 Gb/s, its rails run at 400 Gb/s<', svg
    )
