"""`kubectl ntopo` without a cluster: the object → Topology conversion the renderer reads, the GPU
matrix from the object alone, the fleet filters, and what the plugin imports."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from helpers import BUNDLES, REPO
from helpers import nodetopology_of as _body

from nodetopo.kubectl.fleet import FleetFilter, fleet_row, fleet_rows, render_fleet
from nodetopo.model import LinkClass
from nodetopo.resource.body import to_nodetopology, topology_from_nodetopology
from nodetopo.resource.published import ResourceError
from nodetopo.topology.discover import bundle_context, scan
from nodetopo.views.matrix import gpu_matrix, link_cells, node_matrix
from nodetopo.views.published import published_gpu_matrix

MACHINES = sorted(p.name for p in BUNDLES.iterdir() if p.is_dir())
#: machines whose published NVLinks follow a degraded edge (a GPU out of its island): their links
#: are not the facts' own matrix by design (tests/health and test_bundles_expected cover them)
NVLINK_DEGRADED = {"dgx-h100-nvlink-down"}
AS_THE_FACTS = [m for m in MACHINES if m not in NVLINK_DEGRADED]


@pytest.mark.parametrize("machine", MACHINES)
def test_the_object_round_trips_through_the_topology(machine: str) -> None:
    body = _body(machine)
    again = to_nodetopology(topology_from_nodetopology(body), machine)
    assert again["status"] == body["status"]


def _matrix_section(table: str) -> str:
    """The ``GPU topology matrix`` section of a table (title to the next section), "" when none."""
    if "GPU topology matrix" not in table:
        return ""
    return "GPU topology matrix" + table.partition("GPU topology matrix")[2].split("\n\n")[0]


@pytest.mark.parametrize("machine", MACHINES)
def test_published_matrix_is_the_discover_matrix(machine: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``discover -o json`` → the object → ``kubectl ntopo matrix``'s table: the same matrix, cell for
    cell, as ``discover --matrix`` prints for the bundle (GPU×GPU from status.gpuLinks, GPU×NIC
    from status.gpus[].nics)."""
    from nodetopo.cli import main as nodetopo_main
    from nodetopo.kubectl.cli import _table

    assert nodetopo_main(["discover", "--from", str(BUNDLES / machine), "--matrix"]) == 0
    theirs = capsys.readouterr().out
    assert nodetopo_main(["discover", "--from", str(BUNDLES / machine), "-o", "json"]) == 0
    body = json.loads(capsys.readouterr().out)
    ours = _table(body, matrix=True)
    gpus = len(body["status"]["gpus"])
    assert "gpuLinks" in body["status"]  # every node of at most 64 GPUs has them (none: [])
    if gpus:
        assert _matrix_section(theirs).count("\n") == gpus + 1  # title, header, a row per GPU
    assert _matrix_section(ours) == _matrix_section(theirs)


@pytest.mark.parametrize("machine", AS_THE_FACTS)
def test_the_links_are_every_pair_the_facts_place(machine: str) -> None:
    result = scan(bundle_context(str(BUNDLES / machine)))
    indices = [g.index for g in result.topology.gpus]
    links = topology_from_nodetopology(to_nodetopology(result.topology, machine)).gpu_links
    assert links is not None and link_cells(links) == gpu_matrix(result.facts, indices)
    assert [(x.a, x.b) for x in links] == sorted({(x.a, x.b) for x in links if x.a < x.b})


def _older_agent(machine: str) -> dict[str, Any]:
    """The object as an agent before ``status.gpuLinks`` wrote it."""
    body = _body(machine)
    del body["status"]["gpuLinks"]
    return body


@pytest.mark.parametrize("machine", AS_THE_FACTS)
def test_without_links_the_matrix_never_contradicts_the_nodes_own(machine: str) -> None:
    result = scan(bundle_context(str(BUNDLES / machine)))
    full = gpu_matrix(result.facts, [g.index for g in result.topology.gpus])
    body = to_nodetopology(result.topology, machine)
    body["status"].pop("gpuLinks", None)
    ours = published_gpu_matrix(topology_from_nodetopology(body))
    for pair, cell in ours.items():
        if cell.endswith("+"):  # at least this many links
            assert full[pair].startswith("NV") and int(full[pair][2:]) >= int(cell[2:-1]), pair
        else:
            assert full[pair] == cell, pair


def test_without_links_the_matrix_places_what_the_object_implies() -> None:
    assert topology_from_nodetopology(_older_agent("dgx-h100")).gpu_links is None
    cells = published_gpu_matrix(topology_from_nodetopology(_older_agent("dgx-h100")))
    assert cells[(0, 7)] == "NV18" and len(cells) == 56  # NVSwitch: every pair
    two_socket = published_gpu_matrix(topology_from_nodetopology(_older_agent("pcie-8x-2socket")))
    assert two_socket[(0, 7)] == "SYS" and two_socket[(0, 2)] == "NODE"
    assert (0, 1) not in two_socket  # one root complex: PIX, PXB or PHB, the object cannot tell
    # with the links, the same object places that pair and the DGX-1's hybrid cube mesh exactly
    assert published_gpu_matrix(topology_from_nodetopology(_body("pcie-8x-2socket")))[(0, 1)] == "PHB"
    dgx1 = published_gpu_matrix(topology_from_nodetopology(_body("dgx1-v100")))
    assert (dgx1[(0, 1)], dgx1[(0, 3)], dgx1[(0, 5)], len(dgx1)) == ("NV1", "NV2", "SYS", 56)
    assert (0, 1) not in published_gpu_matrix(topology_from_nodetopology(_older_agent("dgx1-v100")))


def _synthetic(gpus: int) -> Any:
    benchmarks = str(REPO / "benchmarks")
    sys.path.insert(0, benchmarks)
    try:
        from synthetic import nvl72_node
    finally:
        sys.path.remove(benchmarks)
    return nvl72_node(gpus)


def test_links_are_published_up_to_the_bound_and_not_beyond() -> None:
    """64 GPUs: every pair, exactly as many as the schema holds. 72 GPUs: none, and the matrix of the
    object (one NVSwitch island) is still whole from the island."""
    from nodetopo.resource import limits as crd
    from nodetopo.topology.derive import derive_topology

    full = derive_topology(_synthetic(64))
    assert full.gpu_links is not None and len(full.gpu_links) == crd.MAX_GPU_LINKS == 64 * 63 // 2
    assert len(to_nodetopology(full, "n")["status"]["gpuLinks"]) == crd.MAX_GPU_LINKS
    facts = _synthetic(72)
    large = derive_topology(facts)
    assert large.gpu_links is None and "gpuLinks" not in to_nodetopology(large, "n")["status"]
    back = topology_from_nodetopology(to_nodetopology(large, "n"))
    assert published_gpu_matrix(back) == node_matrix(large, facts) == gpu_matrix(facts, range(72))
    assert len(node_matrix(large, facts)) == 72 * 71


def test_a_body_that_is_not_a_status_names_the_field() -> None:
    with pytest.raises(ResourceError, match=r"NodeTopology/x: no status"):
        topology_from_nodetopology({"metadata": {"name": "x"}})
    body = _body("dgx-h100", "x")
    body["status"]["gpus"][0]["nicDistance"] = "FAR"
    with pytest.raises(ResourceError, match=r"NodeTopology/x: status.gpus: missing 'FAR'"):
        topology_from_nodetopology(body)


# ---- fleet ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fleet() -> list[dict[str, Any]]:
    return [
        _body(m, f"node-{m}") for m in ("dgx-h100", "pcie-4x-nvbridge", "pcie-8x-2socket", "gpu-no-driver")
    ] + [{"apiVersion": "nodetopo.io/v1alpha1", "kind": "NodeTopology", "metadata": {"name": "node-new"}}]


def _names(objects: list[dict[str, Any]], keep: FleetFilter) -> list[str]:
    return [r.node for r in fleet_rows(objects, keep)]


def test_fleet_row(fleet: list[dict[str, Any]]) -> None:
    row = fleet_row(fleet[0])
    assert (row.node, row.gpus, row.islands, row.island_sizes) == ("node-dgx-h100", 8, "1x8", (8,))
    assert (row.nic_distance, row.ready, row.consistent) == (LinkClass.PIX, "True", "True")
    unknown = fleet_row(fleet[-1])  # published object without status yet
    assert (unknown.gpus, unknown.ready, unknown.consistent, unknown.nic_distance) == (
        None,
        "Unknown",
        "Unknown",
        None,
    )


def test_fleet_filters(fleet: list[dict[str, Any]]) -> None:
    everyone = _names(fleet, FleetFilter())
    assert everyone == [
        "node-dgx-h100",
        "node-gpu-no-driver",
        "node-new",
        "node-pcie-4x-nvbridge",
        "node-pcie-8x-2socket",
    ]
    assert _names(fleet, FleetFilter(island_size=8)) == ["node-dgx-h100"]
    assert _names(fleet, FleetFilter(island_size=2)) == ["node-dgx-h100", "node-pcie-4x-nvbridge"]
    assert _names(fleet, FleetFilter(nic_distance=LinkClass.PIX)) == [
        "node-dgx-h100",
        "node-pcie-4x-nvbridge",
    ]
    assert _names(fleet, FleetFilter(not_ready=True)) == ["node-gpu-no-driver", "node-new"]
    assert _names(fleet, FleetFilter(island_size=8, not_ready=True)) == []
    assert _names(fleet, FleetFilter(inconsistent=True)) == []  # unknown is not False


def test_fleet_filter_inconsistent() -> None:
    body = _body("dgx-h100", "bad")
    for c in body["status"]["conditions"]:
        if c["type"] == "Consistent":
            c.update(status="False", reason="Inconsistent", message="sysfs and NVML disagree")
    assert _names([body, _body("dgx-a100")], FleetFilter(inconsistent=True)) == ["bad"]


def test_nic_distance_filter_is_at_most_the_class() -> None:
    bodies = [_body(m) for m in ("dgx-a100", "dgx1-v100", "pcie-8x-2socket", "pcie-4x-nvbridge")]
    worst = {r.node: r.nic_distance for r in fleet_rows(bodies)}
    assert len(set(worst.values())) >= 3  # PIX, SYS, and none: the filter has something to tell apart
    for cls in LinkClass:
        kept = set(_names(bodies, FleetFilter(nic_distance=cls)))
        assert kept == {n for n, w in worst.items() if w is not None and w <= cls}


def test_render_fleet_fits_a_terminal(fleet: list[dict[str, Any]]) -> None:
    text = render_fleet(fleet_rows(fleet), width=200)
    lines = text.splitlines()
    assert lines[0].split() == ["NODE", "GPUS", "MODEL", "ISLANDS", "NIC", "DISTANCE", "READY", "CONSISTENT"]
    assert "False (Degraded)" in text and "Unknown" in text
    narrow = render_fleet(fleet_rows(fleet), width=72)
    assert all(len(line) <= 72 for line in narrow.splitlines())
    assert "MODEL" not in narrow  # the first column to go


# ---- the console script ----------------------------------------------------------------------

_PROBE = """\
import contextlib, io, json, sys
from nodetopo.kubectl.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    try:
        main(sys.argv[1:])
    except SystemExit:
        pass
print(json.dumps(sorted(sys.modules)))
"""


def test_help_loads_no_client_and_no_renderer() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, "--help"], capture_output=True, text=True, check=True, timeout=60
    )
    modules = json.loads(done.stdout.splitlines()[-1])
    heavy = (
        "kubernetes",
        "yaml",
        "networkx",
        "nodetopo.publish",
        "nodetopo.views.render",
        "nodetopo.topology.discover",
    )
    assert [m for m in modules if m.split(".")[0] in heavy or m.startswith(heavy)] == []


def test_unknown_output_is_a_usage_error() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "nodetopo.kubectl.cli", "get", "n", "-o", "png"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and "invalid choice: 'png'" in done.stderr


def test_what_get_and_nodes_import_builds_no_graph() -> None:
    """The plugin reads the object: no networkx, no official client, no discovery, no NVML."""
    probe = (
        "import json, sys, nodetopo.kubectl.cli, nodetopo.kubectl.fleet, nodetopo.views.render, "
        "nodetopo.views.published, nodetopo.views.dot, nodetopo.kube.session, nodetopo.kube.transport, "
        "nodetopo.resource.reader; "
        "print(json.dumps(sorted(sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = set(json.loads(done.stdout))
    heavy = {
        "networkx",
        "kubernetes",
        "nodetopo.topology.discover",
        "nodetopo.topology.graph",
        "nodetopo.topology.derive",
        "nodetopo.topology.nvlink",
        "nodetopo.topology.preferred",
        "pynvml",
    }
    assert loaded & heavy == set()


# -- kubectl ntopo band: the band the published topology promises inside the node -------------------


def _band_main(body: dict[str, Any], monkeypatch: pytest.MonkeyPatch, *argv: str) -> int:
    """``kubectl ntopo band`` with the object served in place of the API's answer."""
    from nodetopo.kubectl import cli

    monkeypatch.setattr(cli, "_read", lambda args: body)
    return cli.main(["band", *argv])


def test_band_is_the_models_band_for_every_gpu_of_the_node(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The node's row is what ``nodetopo expect`` computes for the same machine's GPUs."""
    from nodetopo.cli import main as nodetopo_main

    assert nodetopo_main(["expect", "--from-bundle", str(BUNDLES / "dgx-h100"), "-o", "json"]) == 0
    theirs = json.loads(capsys.readouterr().out)
    assert _band_main(_body("dgx-h100"), monkeypatch, "dgx-h100", "-o", "json") == 0
    ours = json.loads(capsys.readouterr().out)
    (row,) = ours["bands"]
    assert (row["scope"], row["gpus"]) == ("node", list(range(8)))
    assert row["busbw"] == theirs["busbw"] and row["algorithm"] == theirs["algorithm"] == "NVLS"
    assert row["limitingClass"] == theirs["limitingClass"] and row["assumptions"] == theirs["assumptions"]
    assert _band_main(_body("dgx-h100"), monkeypatch, "dgx-h100") == 0
    table = capsys.readouterr().out
    low, high = row["busbw"]["lowGBps"], row["busbw"]["highGBps"]
    assert f"node   0-7   {low:.0f}-{high:.0f}" in table and "assumptions (8 GPUs):" in table


def test_band_per_island_when_the_node_has_several() -> None:
    """Two NVLink-bridged pairs over PCIe: the node's band is the PCIe one, each pair's its NVLink's."""
    from nodetopo.kubectl.band import band_rows

    rows = band_rows("n", topology_from_nodetopology(_body("pcie-4x-nvbridge")))
    assert [(r.scope, r.gpus) for r in rows] == [
        ("node", (0, 1, 2, 3)),
        ("island 0", (0, 1)),
        ("island 1", (2, 3)),
    ]
    node, *islands = [r.expectation for r in rows]
    assert node is not None and node.limiting_class in ("PCIe", "host memory")
    for island in islands:
        assert island is not None and island.limiting_class == "NVLink"
        assert island.band.low > node.band.high


def test_band_for_a_gpu_set_and_where_there_is_none(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _band_main(_body("dgx-h100"), monkeypatch, "dgx-h100", "--gpus", "0-3", "-o", "json") == 0
    (row,) = json.loads(capsys.readouterr().out)["bands"]
    assert (row["scope"], row["gpus"]) == ("asked", [0, 1, 2, 3]) and row["busbw"]["lowGBps"] > 0
    assert _band_main(_body("dgx-h100"), monkeypatch, "dgx-h100", "--gpus", "6-9") == 1
    assert "NodeTopology/dgx-h100 lists no GPU 8,9" in capsys.readouterr().err
    assert _band_main(_body("cpu-only"), monkeypatch, "cpu-only", "-o", "json") == 0
    (row,) = json.loads(capsys.readouterr().out)["bands"]
    assert row["busbw"] is None and "at least two GPUs" in row["why"]


def test_band_without_networkx_is_one_line_saying_so() -> None:
    """The single-file plugin is built without networkx (plugins/archive.py): ``band`` says what to use."""
    script = (
        "import sys; sys.modules['networkx'] = None\n"
        "from nodetopo.kubectl import cli\n"
        "cli._read = lambda args: {}\n"
        "sys.exit(cli.main(['band', 'n1']))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (1, "") and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("error: kubectl ntopo band runs the bandwidth model, which needs networkx")
