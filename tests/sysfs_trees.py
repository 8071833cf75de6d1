"""Sysfs trees for the sysfs-source tests.

* The real trees of the corpus: hwloc's sysfs tarballs (``sysfs/hwloc/*.tar.bz2``, unpacked once per
  test session into a pytest temporary directory, read only afterwards) and the gpud snapshot of
  ``/sys/class/infiniband`` (copied once into ``<tmp>/sys/class/infiniband``).
* ``write_tree``: small hand-made trees (bad input) under a test's ``tmp_path``.

No fixtures here (no autouse either): test modules define thin fixtures that call these functions.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
import tarfile
from collections.abc import Mapping
from pathlib import Path

import pytest

from nodetopo.host import HostRoot

HWLOC_DIR = Path("sysfs") / "hwloc"
GPUD_INFINIBAND = Path("sysfs") / "gpud-sys-class-infiniband-h100.0"

#: every hwloc sysfs tarball in the corpus (a test checks this list against the corpus)
HWLOC_TREES = (
    "16amd64-8n2c",
    "2pa-pcidomain32bits",
    "32em64t-2n8c+dax+nvme+mic+dimms",
    "32intel64-2p8co2t+8ve",
    "40intel64-2g2n4c+pcilocality",
    "8em64t-2s2ca2c-buggynuma",
    "nvidiagpunumanodes",
)


@dataclasses.dataclass(frozen=True)
class HwlocTree:
    """One unpacked hwloc test tree and what hwloc's own test told lstopo (its ``.test`` file)."""

    name: str  #: the tarball's name without ``.tar.bz2``
    path: Path  #: the unpacked folder holding ``sys/`` (its name may differ from ``name``)
    options: tuple[str, ...]  #: lstopo options from the ``.test`` file
    env: Mapping[str, str]  #: environment from the ``.test`` file

    @property
    def root(self) -> HostRoot:
        return HostRoot(self.path)


def parse_test_file(text: str) -> tuple[tuple[str, ...], dict[str, str]]:
    """The ``options:`` and ``env:`` lines of an hwloc ``.test`` file (``export`` lines ignored)."""
    options: list[str] = []
    env: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        value = value.strip()
        if key == "options":
            options.extend(value.split())
        elif key == "env":
            match = re.match(r'^(?P<name>[A-Z_][A-Z0-9_]*)=(?P<q>"?)(?P<value>.*)(?P=q)$', value)
            if match is not None:
                env[match["name"]] = match["value"]
    return tuple(options), env


_UNPACKED: dict[tuple[Path, str], HwlocTree] = {}
_GPUD: dict[Path, HostRoot] = {}


def hwloc_tree(corpus: Path, name: str, tmp_factory: pytest.TempPathFactory) -> HwlocTree:
    """Unpack ``sysfs/hwloc/<name>.tar.bz2`` once per session and return it."""
    key = (corpus, name)
    if key not in _UNPACKED:
        tarball = corpus / HWLOC_DIR / f"{name}.tar.bz2"
        dest = tmp_factory.mktemp(f"hwloc-{name}")
        _unpack(tarball, dest)
        (top,) = [p for p in dest.iterdir() if (p / "sys").is_dir()]
        options, env = parse_test_file((corpus / HWLOC_DIR / f"{name}.test").read_text())
        _UNPACKED[key] = HwlocTree(name=name, path=top, options=options, env=env)
    return _UNPACKED[key]


def _unpack(tarball: Path, dest: Path) -> None:
    """Unpack with the tar program where there is one (ten times faster than tarfile here)."""
    tar = shutil.which("tar")
    if tar is not None and shutil.which("bzip2") is not None:
        subprocess.run([tar, "-C", str(dest), "-xjf", str(tarball)], check=True, capture_output=True)
        return
    with tarfile.open(tarball) as archive:
        archive.extractall(dest, filter="tar")


def gpud_infiniband_root(corpus: Path, tmp_factory: pytest.TempPathFactory) -> HostRoot:
    """A host root whose ``sys/class/infiniband`` is the gpud H100 snapshot (no ``device`` links)."""
    if corpus not in _GPUD:
        dest = tmp_factory.mktemp("gpud-h100")
        shutil.copytree(corpus / GPUD_INFINIBAND, dest / "sys" / "class" / "infiniband", symlinks=True)
        _GPUD[corpus] = HostRoot(dest)
    return _GPUD[corpus]


@dataclasses.dataclass(frozen=True)
class Link:
    """A symlink with this target text."""

    target: str


@dataclasses.dataclass(frozen=True)
class Dir:
    """An (empty) directory."""


Entry = str | bytes | Link | Dir


def write_tree(base: Path, entries: Mapping[str, Entry]) -> HostRoot:
    """Create files, links and directories under ``base`` (paths relative to it) and return the root."""
    for relative, entry in entries.items():
        path = base / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(entry, Link):
            path.symlink_to(entry.target)
        elif isinstance(entry, Dir):
            path.mkdir(parents=True, exist_ok=True)
        elif isinstance(entry, bytes):
            path.write_bytes(entry)
        else:
            path.write_text(entry)
    return HostRoot(base)


def pci_function(
    address: str,
    chain: tuple[str, ...] = (),
    *,
    pcie_root: str = "pci0000:00",
    attributes: Mapping[str, Entry] | None = None,
) -> dict[str, Entry]:
    """Entries for one PCI function: its ``bus/pci/devices`` link and its real directory.

    ``chain`` is the upstream functions, nearest the root first; ``attributes`` defaults to a
    Mellanox ConnectX-7 on NUMA node 0 and may override or add anything (a value of ``Dir()`` makes
    a directory where a file is expected).
    """
    real = "/".join(("sys/devices", pcie_root, *chain, address))
    values: dict[str, Entry] = {
        "class": "0x020700\n",
        "vendor": "0x15b3\n",
        "device": "0x1021\n",
        "subsystem_vendor": "0x15b3\n",
        "subsystem_device": "0x0041\n",
        "numa_node": "0\n",
        "local_cpulist": "0-3\n",
        "local_cpus": "0000000f\n",
    }
    values.update(attributes or {})
    entries: dict[str, Entry] = {f"{real}/{name}": value for name, value in values.items()}
    entries[f"sys/bus/pci/devices/{address}"] = Link("../../../" + real.removeprefix("sys/"))
    return entries
