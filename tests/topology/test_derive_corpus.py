"""Derivations over every real ``nvidia-smi topo -m`` in the corpus, as topo-m-only bundles.

design.md: a bundle holding only ``cmd/nvidia-smi-topo-m.txt`` must yield GPUs, NICs, NVLink islands,
GPU–NIC distances and CPU/NUMA affinity. The expected facts are those SOURCES.md lists for each file
(derived there by reading the matrix by hand and checked by an independent script).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from nodetopo.model import Topology
from nodetopo.resource.body import to_nodetopology
from nodetopo.topology.discover import bundle_context, scan

PIX, PXB, PHB, NODE, SYS = "PIX", "PXB", "PHB", "NODE", "SYS"


def _nearest(
    groups: dict[tuple[int, ...], tuple[tuple[str, ...], str]],
) -> dict[int, tuple[tuple[str, ...], str]]:
    return {gpu: value for gpus, value in groups.items() for gpu in gpus}


# file -> expectations: islands [(gpus, linksPerPair, fullyConnected, nvswitch)], nearest NICs, NUMA node
CASES: dict[str, dict[str, Any]] = {
    "dgx1-v100-8x-topo-mp-pcionly-no-nv-legend.txt": {
        "gpus": 8,
        "islands": [],
        "nearest": _nearest(
            {
                (0, 1): (("mlx5_0",), PIX),
                (2, 3): (("mlx5_1",), PIX),
                (4, 5): (("mlx5_2",), PIX),
                (6, 7): (("mlx5_3",), PIX),
            }
        ),
        "numa": {0: 0, 1: 0, 2: 0, 3: 0, 4: 1, 5: 1, 6: 1, 7: 1},
        "cpus": {0: "0-19,40-59", 7: "20-39,60-79"},
    },
    "dgx-a100-8x-nv12-12mlx5-colheaders-numa8.txt": {
        "gpus": 8,
        "islands": [((0, 1, 2, 3, 4, 5, 6, 7), 12, True, True)],
        "nearest": _nearest(
            {
                (0, 1): (("mlx5_0", "mlx5_1"), PXB),
                (2, 3): (("mlx5_2", "mlx5_3"), PXB),
                (4, 5): (("mlx5_6", "mlx5_7"), PXB),
                (6, 7): (("mlx5_8", "mlx5_9"), PXB),
            }
        ),
        "numa": {0: 3, 1: 3, 2: 1, 3: 1, 4: 7, 5: 7, 6: 5, 7: 5},
        "cpus": {0: "48-63,176-191", 2: "16-31,144-159", 4: "112-127,240-255", 6: "80-95,208-223"},
    },
    "v100-sxm2-8x-hybridcube-1nic-gpunumaid-vast.txt": {
        "gpus": 8,
        "islands": [((0, 1, 2, 3, 4, 5, 6, 7), 1, False, False)],
        "nearest": _nearest({(0, 1, 2, 3): (("mlx5_2",), NODE), (4, 5, 6, 7): (("mlx5_2",), SYS)}),
        "numa": {0: 0, 3: 0, 4: 1, 7: 1},
        "cpus": {0: "0-19,40-59", 4: "20-39,60-79"},
    },
    "power9-ac922-v100-4x-nv3-numa0-8-traverse.txt": {
        "gpus": 4,
        "islands": [((0, 1), 3, True, False), ((2, 3), 3, True, False)],
        "nearest": _nearest({(0, 1): (("mlx5_0", "mlx5_1"), NODE), (2, 3): (("mlx5_2", "mlx5_3"), NODE)}),
        "numa": {0: 0, 1: 0, 2: 8, 3: 8},
        "cpus": {0: "0-63", 2: "64-127"},
    },
    "a100-pcie-2x-dualsocket-2mlx5-della.txt": {
        "gpus": 2,
        "islands": [],
        "nearest": {0: (("mlx5_0",), NODE), 1: (("mlx5_1",), NODE)},
        "numa": {0: 0, 1: 1},
        "cpus": {0: "0-63", 1: "64-127"},
    },
    "polaris-a100-4x-nv4-2mlx5-numa-nps4-mangled-header.txt": {
        "gpus": 4,
        "islands": [((0, 1, 2, 3), 4, True, False)],
        "nearest": {
            0: (("mlx5_0", "mlx5_1"), SYS),
            1: (("mlx5_1",), PHB),
            2: (("mlx5_0", "mlx5_1"), SYS),
            3: (("mlx5_0",), PHB),
        },
        "numa": {0: 3, 1: 2, 2: 1, 3: 0},
        "cpus": {0: "24-31,56-63", 3: "0-7,32-39"},
    },
    "h100-8x-nv18-8ib-5eth-mlx5_ib-mlx5_eth-spaces.txt": {
        "gpus": 8,
        "islands": [((0, 1, 2, 3, 4, 5, 6, 7), 18, True, True)],
        "nearest": {k: ((f"mlx5_ib{k}",), PIX) for k in range(8)},
        "numa": {0: 0, 3: 0, 4: 1, 7: 1},
        "cpus": {0: "0-55,112-167", 4: "56-111,168-223"},
        "nics": 13,
    },
    "h100-8x-nv18-nonic-spaces-mlsys-tutorial.txt": {
        "gpus": 8,
        "islands": [((0, 1, 2, 3, 4, 5, 6, 7), 18, True, True)],
        "nearest": {k: ((), None) for k in range(8)},
        "numa": {0: 0, 3: 0, 4: 1, 7: 1},
        "cpus": {0: "0-47,96-143", 4: "48-95,144-191"},
        "nics": 0,
    },
    "h20-8x-nv18-2nic-cx6lx-nolegend-spaces.txt": {
        "gpus": 8,
        "islands": [((0, 1, 2, 3, 4, 5, 6, 7), 18, True, True)],
        "nearest": {
            **_nearest({(0, 1, 2, 3): (("NIC0", "NIC1"), SYS), (4, 5, 7): (("NIC0", "NIC1"), NODE)}),
            6: (("NIC0", "NIC1"), PHB),
        },
        "numa": {0: 0, 3: 0, 4: 1, 7: 1},
        "cpus": {0: "0-95,192-287", 4: "96-191,288-383"},
    },
    "gcp-a4-b200-8x-nv18-8cx7-gke-collapsed-numa-cols.txt": {
        "gpus": 8,
        "islands": [((0, 1, 2, 3, 4, 5, 6, 7), 18, True, True)],
        "nearest": _nearest(
            {
                (0, 1): (("mlx5_0", "mlx5_1"), PIX),
                (2, 3): (("mlx5_2", "mlx5_3"), PIX),
                (4, 5): (("mlx5_4", "mlx5_5"), PIX),
                (6, 7): (("mlx5_6", "mlx5_7"), PIX),
            }
        ),
        "numa": {0: 0, 3: 0, 4: 1, 7: 1},
        "cpus": {0: "0-55,112-167", 4: "56-111,168-223"},
    },
    "gh200-4x-cray-ex-nv6-gpunumaid-spaces.txt": {
        "gpus": 4,
        "islands": [((0, 1, 2, 3), 6, True, False)],
        "nearest": {k: ((), None) for k in range(4)},
        "numa": {0: None, 1: None, 2: None, 3: None},  # affinity spans several nodes on Grace
        "numaAffinity": {0: "0,5-11", 1: "1,13-19", 2: "2,21-27", 3: "3,29-35"},
        "gpuNumaNode": {0: 4, 1: 12, 2: 20, 3: 28},
        "cpus": {0: "0-71", 1: "72-143", 2: "144-215", 3: "216-287"},
    },
    "rtx6000ada-4x-pcie-dualsocket-epyc-4cx7-nics.txt": {
        "gpus": 4,
        "islands": [],
        "nearest": _nearest({(0, 1): (("mlx5_0", "mlx5_1"), NODE), (2, 3): (("mlx5_2", "mlx5_3"), NODE)}),
        "numa": {0: 0, 1: 0, 2: 1, 3: 1},
        "cpus": {0: "0-31", 2: "32-63"},
    },
    "rtx6000ada-2x-threadripper-phb-2nics-puget.txt": {
        "gpus": 2,
        "islands": [],
        "nearest": _nearest({(0, 1): (("mlx5_0", "mlx5_1"), NODE)}),
        "numa": {0: 0, 1: 0},
        "cpus": {0: "0-23"},
    },
    "rtx4090-8x-pcie-dualsocket-phb-pairs-vast.txt": {
        "gpus": 8,
        "islands": [],
        "nearest": {k: ((), None) for k in range(8)},
        "numa": {0: 0, 1: 0, 2: 0, 3: 0, 4: 0, 5: 0, 6: 1, 7: 1},
        "cpus": {0: "0-35,72-107", 6: "36-71,108-143"},
    },
    "rtx5090-2x-threadripper-phb-club3090.txt": {
        "gpus": 2,
        "islands": [],
        "nearest": {0: ((), None), 1: ((), None)},
        "numa": {0: 0, 1: 0},
        "cpus": {0: "0-63", 1: "0-63"},
    },
}


def _topo_only_bundle(tmp_path: Path, source: Path) -> Path:
    bundle = tmp_path / "bundle"
    (bundle / "cmd").mkdir(parents=True)
    shutil.copyfile(source, bundle / "cmd" / "nvidia-smi-topo-m.txt")
    return bundle


def _discover(tmp_path: Path, source: Path) -> tuple[Topology, dict[str, Any]]:
    topology = scan(bundle_context(_topo_only_bundle(tmp_path, source))).topology
    return topology, to_nodetopology(topology, "corpus-node")


def test_every_corpus_matrix_has_expectations(corpus: Path) -> None:
    files = {p.name for p in (corpus / "topo-m").iterdir()}
    assert files == set(CASES), "add expectations for new corpus files (or remove stale ones)"


@pytest.mark.parametrize("name", sorted(CASES))
def test_topo_m_only_bundle(tmp_path: Path, corpus: Path, name: str) -> None:
    expected = CASES[name]
    _topology, body = _discover(tmp_path, corpus / "topo-m" / name)
    status = body["status"]

    assert len(status["gpus"]) == expected["gpus"]
    islands = [
        (tuple(i["gpus"]), i["linksPerPair"], i["fullyConnected"], i["nvswitch"])
        for i in status["nvlinkIslands"]
    ]
    assert islands == expected["islands"]
    for gpu in status["gpus"]:
        if gpu["index"] in expected["nearest"]:
            nics, cls = expected["nearest"][gpu["index"]]
            assert (tuple(gpu["nearestNICs"]), gpu["nicDistance"]) == (nics, cls), f"GPU{gpu['index']}"
        if gpu["index"] in expected["numa"]:
            assert gpu["numaNode"] == expected["numa"][gpu["index"]], f"GPU{gpu['index']} NUMA"
        if gpu["index"] in expected["cpus"]:
            assert gpu["cpuAffinity"] == expected["cpus"][gpu["index"]], f"GPU{gpu['index']} CPUs"
        if gpu["index"] in expected.get("numaAffinity", {}):
            assert gpu["numaAffinity"] == expected["numaAffinity"][gpu["index"]]
        if gpu["index"] in expected.get("gpuNumaNode", {}):
            assert gpu["gpuNumaNode"] == expected["gpuNumaNode"][gpu["index"]]
        island_ids = [i["id"] for i in status["nvlinkIslands"] if gpu["index"] in i["gpus"]]
        assert gpu["island"] == (island_ids[0] if island_ids else None)
    if "nics" in expected:
        assert len(status["nics"]) == expected["nics"]
    # Every GPU is in exactly one preferred set of each size; sets of one size are disjoint.
    for preferred in status["preferredGPUSets"]:
        flat = [i for s in preferred["sets"] for i in s]
        assert len(flat) == len(set(flat))
        assert all(len(s) == preferred["size"] for s in preferred["sets"])
        assert len(preferred["sets"]) == expected["gpus"] // preferred["size"]
    # The topo-m-only bundle reports the sources it lacked, and nothing crashed.
    names = {s["name"] for s in status["sources"]}
    assert any(n.startswith("nvidia-smi") for n in names)


def test_hybrid_cube_mesh_preferred_sets(tmp_path: Path, corpus: Path) -> None:
    """DGX-1: the two fully connected quads, and pairs over the double (NV2) links within a socket."""
    _, body = _discover(tmp_path, corpus / "topo-m" / "v100-sxm2-8x-hybridcube-1nic-gpunumaid-vast.txt")
    sets = {p["size"]: p["sets"] for p in body["status"]["preferredGPUSets"]}
    assert sets[4] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert sets[2] == [[0, 3], [1, 2], [4, 7], [5, 6]]
    assert sets[8] == [[0, 1, 2, 3, 4, 5, 6, 7]]


def test_pcie_pairs_preferred_sets(tmp_path: Path, corpus: Path) -> None:
    """8x RTX 4090 without NVLink: pairs sharing a host bridge (PHB) first, never across sockets."""
    _, body = _discover(tmp_path, corpus / "topo-m" / "rtx4090-8x-pcie-dualsocket-phb-pairs-vast.txt")
    sets = {p["size"]: p["sets"] for p in body["status"]["preferredGPUSets"]}
    assert sets[2] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert [6, 7] in sets[2]
    # The best 4-set stays on socket 0 (six GPUs there); only the leftover set has to span sockets.
    assert sets[4][0] == [0, 1, 2, 3]
    assert sets[4][1] == [4, 5, 6, 7]


def test_summary_columns(tmp_path: Path, corpus: Path) -> None:
    _, body = _discover(tmp_path, corpus / "topo-m" / "dgx-a100-8x-nv12-12mlx5-colheaders-numa8.txt")
    summary = body["status"]["summary"]
    assert summary == {
        "gpuCount": 8,
        "gpuModel": None,  # topo -m does not name the model
        "islands": "1x8",
        "nvswitch": True,
        "rdmaNICs": 12,
        "worstNICDistance": "PXB",
        "migDevices": 0,
        "numaNodes": None,  # topo -m names NUMA ids but not the nodes themselves: unknown, not 0
    }
    _, body = _discover(tmp_path / "p9", corpus / "topo-m" / "power9-ac922-v100-4x-nv3-numa0-8-traverse.txt")
    assert body["status"]["summary"]["islands"] == "2x2"
