"""The image recipe: the Dockerfile and image/build_oci.py install the same locked packages and
describe the same image; the image built here holds exactly those packages, non-root, no build tools."""

from __future__ import annotations

import gzip
import io
import json
import re
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

import nodetopo

from .node import REPO, load_image_builder

pytestmark = [pytest.mark.k8s, pytest.mark.node]

DOCKERFILE = (REPO / "Dockerfile").read_text()


def read_layers(archive: Path) -> tuple[dict[str, Any], list[tarfile.TarFile]]:
    """The image config and the layers (as tar files in memory) of an OCI archive with one image."""
    with tarfile.open(archive) as outer:

        def blob(digest: str) -> bytes:
            member = outer.extractfile(f"blobs/sha256/{digest.split(':', 1)[1]}")
            assert member is not None
            return member.read()

        index = json.loads(outer.extractfile("index.json").read())  # type: ignore[union-attr]
        manifest = json.loads(blob(index["manifests"][0]["digest"]))
        config = json.loads(blob(manifest["config"]["digest"]))
        blobs = [gzip.decompress(blob(x["digest"])) for x in manifest["layers"]]
    return config, [tarfile.open(fileobj=io.BytesIO(b)) for b in blobs]


def test_both_recipes_name_the_same_locked_versions() -> None:
    builder = load_image_builder()
    # the Dockerfile installs image/requirements.lock by hash, wheels only, nothing else from PyPI
    assert "COPY image/requirements.lock /tmp/requirements.lock" in DOCKERFILE
    pip_lines = [line for line in DOCKERFILE.splitlines() if "pip install" in line]
    assert len(pip_lines) == 1
    for option in ("--no-deps", "--require-hashes", "--only-binary=:all:"):
        assert option in pip_lines[0]
    assert "-r /tmp/requirements.lock" in DOCKERFILE
    # ... and image/debian-packages.txt, as build_oci.py does through mmdebstrap --include
    assert "COPY image/debian-packages.txt" in DOCKERFILE and "xargs apt-get install" in DOCKERFILE
    # the same Debian release, the base pinned by digest
    config = builder.parse_dockerfile(DOCKERFILE)
    assert re.fullmatch(r"debian:(\w+)-slim@sha256:[0-9a-f]{64}", config.base), config.base
    assert config.base.split(":")[1].split("-")[0] == builder.SUITE
    # the lock covers pyproject.toml's dependencies, with a hash per machine for each compiled wheel
    done = subprocess.run(
        [sys.executable, str(REPO / "image" / "lock.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    sys.path.insert(0, str(REPO / "image"))
    import lock

    assert len(lock.read_lock()) >= len(lock.dependencies())
    # the image version is the package version
    assert config.labels["org.opencontainers.image.version"] == nodetopo.__version__
    assert {"org.opencontainers.image.source", "org.opencontainers.image.licenses"} <= set(config.labels)


def test_the_built_image_holds_exactly_the_locked_packages(image_archive: dict[str, Any]) -> None:
    sys.path.insert(0, str(REPO / "image"))
    import lock

    builder = load_image_builder()
    config, layers = read_layers(Path(image_archive["archive"]))
    names = [set(layer.getnames()) for layer in layers]
    everything = set().union(*names)
    # Python: exactly the lock's distributions, at the lock's versions
    site = builder.SITE_PACKAGES
    found = {}
    for name in everything:
        match = re.fullmatch(re.escape(site) + r"/([^/]+)-([^-/]+)\.dist-info/METADATA", name.lstrip("./"))
        if match:
            found[lock.canonical(match[1])] = match[2]
    pins = lock.read_lock()
    assert found == {name: pin.version for name, pin in pins.items()}
    # ... from the lock's wheel for this machine: each dist-info's WHEEL tags are those of the file the
    # lock names, and a wheel that is not pure Python is one the lock knows as compiled (so it has the
    # other machine's wheel too)
    machine, checked = builder.host_machine(), set()
    for name in everything:
        match = re.fullmatch(re.escape(site) + r"/([^/]+)-[^-/]+\.dist-info/WHEEL", name.lstrip("./"))
        if not match:
            continue
        pin = pins[lock.canonical(match[1])]
        wheel = next(layer for layer in layers if name in layer.getnames()).extractfile(name)
        assert wheel is not None
        text = wheel.read().decode()
        tags = set(re.findall(r"^Tag: (\S+)$", text, flags=re.M))
        filename, _ = pin.wheels.get(machine) or pin.wheels["any"]
        python, abi, platforms = filename.removesuffix(".whl").split("-")[-3:]
        expected = {
            f"{p}-{a}-{x}" for p in python.split(".") for a in abi.split(".") for x in platforms.split(".")
        }
        assert tags == expected, (filename, tags)
        assert ("Root-Is-Purelib: true" in text) == (not pin.compiled), filename
        checked.add(lock.canonical(match[1]))
    assert checked == set(pins)
    # Debian: every listed package installed (dpkg status of the rootfs layer)
    status = layers[0].extractfile("./var/lib/dpkg/status").read().decode()  # type: ignore[union-attr]
    installed = set(re.findall(r"^Package: (\S+)$", status, flags=re.M))
    assert set(builder.debian_packages()) <= installed
    for tool in ("usr/sbin/ibstat", "usr/bin/lspci", "usr/bin/python3.11"):
        assert any(n.lstrip("./") == tool for n in everything), tool
    # no build tools, no pip
    for absent in ("gcc", "cpp", "make", "python3-pip", "build-essential"):
        assert absent not in installed, absent
    assert not any("/pip/" in n or n.endswith("/pip") for n in names[1] | names[2])
    # the project layer is small and holds nodetopo + the entry point only
    assert image_archive["layers"][2]["size"] < 2_000_000
    assert all(n.startswith(f"{site}/nodetopo") or n.startswith("usr") for n in names[2])
    # the config the Dockerfile describes: non-root, entry point, labels
    dockerfile = builder.parse_dockerfile(DOCKERFILE)
    assert config["config"]["User"] == dockerfile.user == "65532:65532"
    assert config["config"]["Entrypoint"] == ["nodetopo"] and config["config"]["Cmd"] == list(dockerfile.cmd)
    assert config["config"]["Labels"] == dockerfile.labels


def test_a_code_change_rebuilds_only_the_project_layer(image_archive: dict[str, Any], tmp_path: Path) -> None:
    """Same source → same digest (reproducible); the cached layers are reused (seconds, not minutes)."""
    again = subprocess.run(
        [sys.executable, str(REPO / "image" / "build_oci.py"), "--out", str(tmp_path / "again.tar")],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    summary = json.loads(again.stdout)
    assert summary["manifest_digest"] == image_archive["manifest_digest"]
    assert summary["seconds"] < 30, summary


def test_every_dockerfile_copy_source_exists_and_is_in_the_build_context() -> None:
    """docker build sees only what .dockerignore lets through: each COPY source must be there."""
    builder = load_image_builder()
    ignore = [line for line in (REPO / ".dockerignore").read_text().splitlines() if line and line[0] != "#"]
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    sources = [
        args[0] for args in builder.parse_dockerfile(DOCKERFILE).copies if not args[0].startswith("--")
    ]
    assert sources, DOCKERFILE
    for source in sources:
        assert (REPO / source).exists(), source
        assert source.rstrip("/") in allowed, f"{source} is excluded by .dockerignore"


def test_the_project_layer_carries_checked_hash_bytecode(image_archive: dict[str, Any]) -> None:
    """Every module of nodetopo has bytecode that the image's read-only root can use: hash-based and
    checked (flags 0b11), for the shipped source's hash, naming the file's path in the image."""
    import importlib.util
    import marshal

    builder = load_image_builder()
    _, layers = read_layers(Path(image_archive["archive"]))
    project = layers[2]
    members = {m.name.lstrip("./"): m for m in project.getmembers() if m.isfile()}
    sources = [n for n in members if n.endswith(".py") and n.startswith(f"{builder.SITE_PACKAGES}/nodetopo/")]
    assert len(sources) > 50
    for name in sources:
        directory, _, filename = name.rpartition("/")
        cached = f"{directory}/__pycache__/{filename[:-3]}.cpython-311.pyc"
        assert cached in members, f"no bytecode for {name}"
        source = project.extractfile(members[name]).read()  # type: ignore[union-attr]
        pyc = project.extractfile(members[cached]).read()  # type: ignore[union-attr]
        assert pyc[:4] == importlib.util.MAGIC_NUMBER, name
        assert int.from_bytes(pyc[4:8], "little") == 0b11, name  # hash-based, checked
        assert pyc[8:16] == importlib.util.source_hash(source), name
        assert marshal.loads(pyc[16:]).co_filename == "/" + name
