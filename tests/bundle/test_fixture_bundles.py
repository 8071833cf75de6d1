"""The generated capture bundles (tests/fixtures/bundles) are current, self-consistent and faithful.

* ``--check``: the committed bundles equal what ``tests/fixtures/gen_bundle.py`` generates now.
* sysfs: every symlink resolves inside the bundle; every RDMA device and netdev hangs off a PCI
  function that ``bus/pci/devices`` lists.
* One machine per bundle: sysfs, ``topo -m``, ``-L``, ``-q -x``, ``ibstat`` and ``nvml.json`` agree.
* Faithful: where a bundle mirrors a real machine of the corpus, its rendered ``topo -m`` cells equal
  the real matrix's cells (read in place; an ad-hoc reader here, not nodetopo's parser).
* The hand-written ``expected.yaml`` agrees with the rendered matrix and sysfs (so a mistake in
  either shows up here before nodetopo's golden tests use it).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from helpers import BUNDLES, FIXTURES

NAMES = sorted(p.stem for p in (FIXTURES / "layouts").glob("*.yaml"))
WITH_SMI = [n for n in NAMES if (BUNDLES / n / "nvml.json").is_file()]
ORDER = ("PIX", "PXB", "PHB", "NODE", "SYS")


@functools.cache
def load_generator() -> ModuleType:
    """tests/fixtures/gen_bundle.py as a module (it is a script, not part of a package)."""
    spec = importlib.util.spec_from_file_location("gen_bundle", FIXTURES / "gen_bundle.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------------------------------------
# An ad-hoc `topo -m` reader (independent of nodetopo.sources.nvidia_smi)
# ------------------------------------------------------------------------------------------------


def read_matrix(text: str) -> tuple[dict[tuple[str, str], str], dict[str, list[str]]]:
    """Cells keyed by positional labels (``GPU0``, ``NIC0`` = first NIC column), and each GPU's
    trailing affinity columns (CPU Affinity, NUMA Affinity[, GPU NUMA ID])."""
    lines = re.sub(r"\x1b\[[0-9;]*m|\[[04]m", "", text).splitlines()
    labels = [t for t in lines[0].split() if re.fullmatch(r"GPU\d+|NIC\d+|mlx5_\w+", t)]
    positional, nics = {}, 0
    for label in labels:
        if label.startswith("GPU"):
            positional[label] = label
        else:
            positional[label] = f"NIC{nics}"
            nics += 1
    cells: dict[tuple[str, str], str] = {}
    affinity: dict[str, list[str]] = {}
    for line in lines[1:]:
        tokens = line.split()
        if not tokens:
            break
        row = positional[tokens[0]]
        for label, value in zip(labels, tokens[1 : 1 + len(labels)], strict=True):
            cells[row, positional[label]] = value
        if row.startswith("GPU"):
            affinity[row] = tokens[1 + len(labels) :]
    return cells, affinity


def nic_legend(text: str) -> list[str]:
    legend = re.findall(r"^\s+NIC\d+: (\S+)$", text, re.MULTILINE)
    if legend:
        return legend
    header = re.sub(r"\x1b\[[0-9;]*m", "", text.splitlines()[0]).split()
    return [t for t in header if re.fullmatch(r"mlx5_\w+", t)]


def bundle_matrix(name: str) -> str:
    return (BUNDLES / name / "cmd" / "nvidia-smi-topo-m.txt").read_text()


def sysfs(name: str) -> Path:
    return BUNDLES / name / "sys"


def attr(path: Path) -> str:
    return path.read_text().strip()


def sysfs_gpus(name: str) -> list[Path]:
    devices = sorted((sysfs(name) / "bus/pci/devices").iterdir())
    return [d for d in devices if attr(d / "vendor") == "0x10de" and attr(d / "class").startswith("0x03")]


# ------------------------------------------------------------------------------------------------
# Generated == committed; sysfs self-consistent
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_committed_bundle_is_what_the_generator_writes(name: str) -> None:
    assert load_generator().main(["--check", name]) == 0, f"run: python tests/fixtures/gen_bundle.py {name}"


@pytest.mark.parametrize("name", NAMES)
def test_every_symlink_resolves_inside_the_bundle(name: str) -> None:
    bundle = (BUNDLES / name).resolve()
    links = [p for p in bundle.rglob("*") if p.is_symlink()]
    assert links
    for link in links:
        assert not os.path.isabs(os.readlink(link)), f"{link}: sysfs links are relative"
        target = link.resolve()
        assert target.exists(), f"{link} dangles"
        assert target.is_relative_to(bundle / "sys"), f"{link} escapes the bundle's sys/"


@pytest.mark.parametrize("name", NAMES)
def test_rdma_devices_and_netdevs_hang_off_listed_pci_functions(name: str) -> None:
    root = sysfs(name)
    pci = {p.name: p.resolve() for p in (root / "bus/pci/devices").iterdir()}
    for bdf, path in pci.items():
        assert path.name == bdf and path.is_relative_to(root / "devices"), bdf
        assert re.fullmatch(r"pci[0-9a-f]{4}:[0-9a-f]{2}", path.relative_to(root / "devices").parts[0])
    for cls in ("infiniband", "net"):
        for entry in sorted((root / "class" / cls).glob("*")):
            function = (entry / "device").resolve()
            assert function.name in pci and pci[function.name] == function, entry
            assert entry.resolve().parent.parent == function, f"{entry}: not below its PCI function"
    for ib in sorted((root / "class/infiniband").glob("*")):
        assert re.fullmatch(r"\d: [A-Z_]+", attr(ib / "ports/1/state"))
        assert re.fullmatch(r"\d+ Gb/sec \(\d+X [A-Z]+\)", attr(ib / "ports/1/rate"))
        assert attr(ib / "ports/1/link_layer") in ("InfiniBand", "Ethernet")


# ------------------------------------------------------------------------------------------------
# Every file of one bundle describes the same machine
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", WITH_SMI)
def test_commands_and_nvml_describe_the_sysfs_machine(name: str) -> None:
    bundle = BUNDLES / name
    gpus = sysfs_gpus(name)
    nvml = json.loads((bundle / "nvml.json").read_text())
    assert nvml["format"] == "nodetopo-nvml-dump/v1"
    devices = nvml["devices"]
    assert [d["index"] for d in devices] == list(range(len(gpus)))
    as_sysfs = [f"{int(d['pciBusId'][:8], 16):04x}:{d['pciBusId'][9:].lower()}" for d in devices]
    assert as_sysfs == [g.name for g in gpus]

    listed = re.findall(
        r"^GPU (\d+): (.+) \(UUID: (GPU-[0-9a-f-]{36})\)$",
        (bundle / "cmd/nvidia-smi-L.txt").read_text(),
        re.MULTILINE,
    )
    assert [(int(i), n, u) for i, n, u in listed] == [(d["index"], d["name"], d["uuid"]) for d in devices]

    xml = ET.parse(bundle / "cmd/nvidia-smi-q.xml").getroot()
    assert [(g.findtext("uuid"), g.findtext("pci/pci_bus_id")) for g in xml.iter("gpu")] == [
        (d["uuid"], d["pciBusId"]) for d in devices
    ]

    text = bundle_matrix(name)
    cells, affinity = read_matrix(text)
    for i, (device, gpu) in enumerate(zip(devices, gpus, strict=True)):
        assert affinity[f"GPU{i}"][0] == attr(gpu / "local_cpulist") == device["cpuAffinity"]
        assert attr(gpu / "numa_node") in affinity[f"GPU{i}"][1].split(",")
    assert nic_legend(text) == sorted(
        (p.name for p in (sysfs(name) / "class/infiniband").glob("*")), key=lambda n: int(n.split("_")[-1])
    )

    switches = {
        f"{int(b[:8], 16):04x}:{b[9:].lower()}"
        for d in devices
        for link in d["nvlinks"]
        if link.get("remoteType") == "SWITCH" and (b := link.get("remotePciBusId"))
    }
    for bdf in switches:
        assert attr(sysfs(name) / "bus/pci/devices" / bdf / "class") == "0x068000", bdf
    for d in devices:
        for link in d["nvlinks"]:
            if link.get("remoteType") == "GPU":
                peer = as_sysfs.index(
                    f"{int(link['remotePciBusId'][:8], 16):04x}:{link['remotePciBusId'][9:].lower()}"
                )
                assert cells[f"GPU{d['index']}", f"GPU{peer}"].startswith("NV")


@pytest.mark.parametrize("name", [n for n in NAMES if (BUNDLES / n / "cmd/ibstat.txt").is_file()])
def test_ibstat_lists_the_sysfs_rdma_devices(name: str) -> None:
    text = (BUNDLES / name / "cmd/ibstat.txt").read_text()
    blocks = re.split(r"^CA '", text, flags=re.MULTILINE)[1:]
    for block in blocks:
        ca = block.split("'")[0]
        port = sysfs(name) / "class/infiniband" / ca / "ports/1"
        guid = attr(sysfs(name) / "class/infiniband" / ca / "node_guid").replace(":", "")
        assert f"Node GUID: 0x{guid}" in block
        assert f"Rate: {attr(port / 'rate').split()[0]}\n" in block
        assert f"Link layer: {attr(port / 'link_layer')}\n" in block
        assert ("State: Active" in block) == (attr(port / "state") == "4: ACTIVE")
    assert sorted(b.split("'")[0] for b in blocks) == sorted(
        p.name for p in (sysfs(name) / "class/infiniband").glob("*")
    )


def test_gpu_without_driver_is_in_sysfs_only() -> None:
    bundle = BUNDLES / "gpu-no-driver"
    expected = yaml.safe_load((bundle / "expected.yaml").read_text())
    gpus = sysfs_gpus("gpu-no-driver")
    assert [g.name for g in gpus] == expected["sysfsOnlyGPUs"]
    assert not any((g / "driver").exists() for g in gpus)
    assert not (bundle / "nvml.json").exists()
    for command in ("nvidia-smi-topo-m.txt", "nvidia-smi-L.txt"):
        assert "couldn't communicate with the NVIDIA driver" in (bundle / "cmd" / command).read_text()
        assert int((bundle / "cmd" / f"{command}.rc").read_text()) != 0


def test_cpu_only_and_no_ibstat_bundles_lack_what_they_say() -> None:
    assert not (BUNDLES / "cpu-only/cmd").exists() or not list((BUNDLES / "cpu-only/cmd").glob("nvidia-smi*"))
    assert not sysfs_gpus("cpu-only")
    assert not (BUNDLES / "no-ibstat/cmd/ibstat.txt").exists()
    assert list((sysfs("no-ibstat") / "class/infiniband").iterdir())


# ------------------------------------------------------------------------------------------------
# Faithful to the real machines of the corpus
# ------------------------------------------------------------------------------------------------

REAL = [
    # bundle, corpus matrix, compare GPU-GPU cells, compare the NIC columns, compare CPU/NUMA columns
    ("dgx-h100", "topo-m/h100-8x-nv18-8ib-5eth-mlx5_ib-mlx5_eth-spaces.txt", True, True, True),
    ("dgx-a100", "topo-m/dgx-a100-8x-nv12-12mlx5-colheaders-numa8.txt", True, True, True),
    ("dgx1-v100", "topo-m/v100-sxm2-8x-hybridcube-1nic-gpunumaid-vast.txt", True, False, True),
    ("dgx1-v100", "topo-m/dgx1-v100-8x-topo-mp-pcionly-no-nv-legend.txt", "pcie", True, True),
    ("pcie-8x-2socket", "topo-m/rtx4090-8x-pcie-dualsocket-phb-pairs-vast.txt", True, True, True),
]


@pytest.mark.corpus
@pytest.mark.parametrize(("name", "real", "gpu_pairs", "nic_columns", "affinity"), REAL)
def test_rendered_matrix_equals_the_real_machine(
    corpus: Path, name: str, real: str, gpu_pairs: bool | str, nic_columns: bool, affinity: bool
) -> None:
    ours, our_affinity = read_matrix(bundle_matrix(name))
    theirs, their_affinity = read_matrix((corpus / real).read_text())
    compared = 0
    for (row, col), cell in ours.items():
        if row.startswith("GPU") and col.startswith("GPU"):
            if not gpu_pairs or (gpu_pairs == "pcie" and cell.startswith("NV")):  # -mp hides NVLink
                continue
        elif not nic_columns:
            continue
        assert theirs[row, col] == cell, f"{row}/{col}: ours {cell}, real {theirs[row, col]}"
        compared += 1
    assert compared >= 16
    if affinity:
        for gpu, columns in our_affinity.items():
            assert columns[:2] == their_affinity[gpu][:2], gpu


@pytest.mark.corpus
def test_rtx4090_bundle_has_the_real_bus_ids_and_names(corpus: Path) -> None:
    real = ET.parse(corpus / "smi-q/rtx4090-vast-machine02-nvidia-smi-q.xml").getroot()
    ours = ET.parse(BUNDLES / "pcie-8x-2socket/cmd/nvidia-smi-q.xml").getroot()

    def gpus(root: ET.Element) -> list[tuple[str | None, str | None]]:
        return [(g.findtext("product_name"), g.findtext("pci/pci_bus_id")) for g in root.iter("gpu")]

    assert gpus(ours) == gpus(real)


# ------------------------------------------------------------------------------------------------
# The hand-written expectations agree with the rendered outputs and sysfs
# ------------------------------------------------------------------------------------------------


def islands_from_matrix(cells: dict[tuple[str, str], str], n: int) -> list[dict[str, Any]]:
    links = {
        (a, b): int(cells[f"GPU{a}", f"GPU{b}"][2:])
        for a in range(n)
        for b in range(n)
        if a != b and cells[f"GPU{a}", f"GPU{b}"].startswith("NV")
    }
    seen: set[int] = set()
    islands = []
    for start in range(n):
        if start in seen or not any(a == start for a, _ in links):
            continue
        group, todo = {start}, [start]
        while todo:
            a = todo.pop()
            for b in range(n):
                if (a, b) in links and b not in group:
                    group.add(b)
                    todo.append(b)
        seen |= group
        members = sorted(group)
        pairs = [(a, b) for a in members for b in members if a < b]
        islands.append(
            {
                "gpus": members,
                "linksPerPair": min(links[p] for p in pairs if p in links),
                "fullyConnected": all(p in links for p in pairs),
            }
        )
    return islands


@pytest.mark.parametrize("name", WITH_SMI)
def test_expected_yaml_agrees_with_the_rendered_matrix(name: str) -> None:
    expected = yaml.safe_load((BUNDLES / name / "expected.yaml").read_text())
    text = bundle_matrix(name)
    cells, affinity = read_matrix(text)
    nic_names = nic_legend(text)
    nvml = json.loads((BUNDLES / name / "nvml.json").read_text())
    assert len(expected["gpus"]) == len(nvml["devices"])
    for gpu, device in zip(expected["gpus"], nvml["devices"], strict=True):
        row = f"GPU{gpu['index']}"
        assert gpu["model"] == device["name"]
        assert gpu["cpuAffinity"] == affinity[row][0]
        if gpu["numaNode"] is not None:
            assert str(gpu["numaNode"]) == affinity[row][1]
        else:
            assert gpu["numaAffinity"] == affinity[row][1] and str(gpu["gpuNumaNode"]) == affinity[row][2]
        classes = {name: cells[row, f"NIC{k}"] for k, name in enumerate(nic_names)}
        best = min(classes.values(), key=ORDER.index) if classes else None
        assert gpu["nicDistance"] == best
        assert gpu["nearestNICs"] == [n for n, c in classes.items() if c == best]
        if "pciBusID" in gpu:
            assert sysfs_gpus(name)[gpu["index"]].name == gpu["pciBusID"]
        if "migEnabled" in gpu:
            assert gpu["migEnabled"] == bool(device["migMode"] and device["migMode"]["current"])
    ours = [{k: i[k] for k in ("gpus", "linksPerPair", "fullyConnected")} for i in expected["nvlinkIslands"]]
    assert ours == islands_from_matrix(cells, len(nvml["devices"]))
    for island in expected["nvlinkIslands"]:
        remote = {
            link.get("remoteType")
            for g in island["gpus"]
            for link in nvml["devices"][g]["nvlinks"]
            if link["active"]
        }
        assert island["nvswitch"] == (remote == {"SWITCH"})
    migs = [
        {
            "uuid": m["uuid"],
            "parentIndex": d["index"],
            "profile": m["profile"],
            "gpuInstance": m["gpuInstanceId"],
            "computeInstance": m["computeInstanceId"],
        }
        for d in nvml["devices"]
        for m in d["migDevices"] or []
    ]
    assert expected["migDevices"] == migs
    listed = re.findall(
        r"^  MIG (\S+) +Device +\d+: \(UUID: (MIG-[0-9a-f-]{36})\)$",
        (BUNDLES / name / "cmd/nvidia-smi-L.txt").read_text(),
        re.MULTILINE,
    )
    assert listed == [(m["profile"], m["uuid"]) for m in migs]


@pytest.mark.parametrize("name", NAMES)
def test_expected_nics_agree_with_sysfs(name: str) -> None:
    expected = yaml.safe_load((BUNDLES / name / "expected.yaml").read_text())
    root = sysfs(name) / "class/infiniband"
    assert sorted(n["name"] for n in expected["nics"]) == sorted(p.name for p in root.glob("*"))
    for nic in expected["nics"]:
        port = root / nic["name"] / "ports/1"
        assert str(nic["numaNode"]) == attr(root / nic["name"] / "device/numa_node")
        assert nic["linkLayer"] == attr(port / "link_layer")
        assert nic["state"] == attr(port / "state").split(": ")[1]
        assert nic["rateGbps"] == int(attr(port / "rate").split()[0])
