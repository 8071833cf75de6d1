"""Bundles carry a manifest (host, kernel, driver and nodetopo versions, date), travel as one
``.tar.gz``, and an archive from elsewhere is unpacked safely (issue 16, "Bundles")."""

from __future__ import annotations

import io
import json
import os
import platform
import re
import shutil
import socket
import tarfile
from pathlib import Path

import pytest

from nodetopo import __version__
from nodetopo.bundle import (
    MANIFEST,
    Manifest,
    bundle_dir,
    extract_archive,
    parse_manifest,
    read_manifest,
    write_archive,
)
from nodetopo.cli import main
from nodetopo.errors import BundleError

BUNDLES = Path(__file__).parent / "fixtures" / "bundles"


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    assert main(["discover", *argv, "-o", "json"]) == 0
    body: dict[str, object] = json.loads(capsys.readouterr().out)
    return body


def _copy(tmp_path: Path, name: str = "pcie-4x-nvbridge") -> Path:
    bundle = tmp_path / name
    shutil.copytree(BUNDLES / name, bundle, symlinks=True)
    return bundle


def test_capture_writes_a_manifest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["capture", str(tmp_path / "b"), "--no-nvml", "--node-name", "GPU-Node-7"]) == 0
    out = capsys.readouterr().out
    data = json.loads((tmp_path / "b" / MANIFEST).read_text())
    assert data["host"] == "gpu-node-7"  # a node name: lower case
    assert data["kernel"] == platform.release()
    assert data["nodetopoVersion"] == __version__
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", data["capturedAt"])
    assert "driver" in data  # None here: no NVIDIA driver on this machine
    assert "manifest.json: captured" in out and "on gpu-node-7" in out


def test_the_driver_version_comes_from_sysfs_or_the_captured_nvidia_smi(tmp_path: Path) -> None:
    from nodetopo.capture import write_manifest
    from nodetopo.host import HostRoot

    host = tmp_path / "host"
    (host / "sys" / "module" / "nvidia").mkdir(parents=True)
    (host / "sys" / "module" / "nvidia" / "version").write_text("570.86.10\n")
    dest = tmp_path / "b"
    dest.mkdir()
    assert write_manifest(HostRoot(host), dest, "n").driver == "570.86.10"
    bundle = _copy(tmp_path)  # its cmd/nvidia-smi-q.xml names the driver
    assert "<driver_version>535.183.01</driver_version>" in (bundle / "cmd" / "nvidia-smi-q.xml").read_text()
    assert write_manifest(HostRoot(tmp_path / "empty"), bundle, "n").driver == "535.183.01"


def test_discover_from_a_bundle_names_the_node_from_its_manifest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    bundle = _copy(tmp_path)
    # no manifest: the bundle's own name, never the machine reading it
    assert _json(capsys, "--from", str(bundle))["metadata"]["name"] == bundle.name  # type: ignore[index]
    assert bundle.name != socket.gethostname()
    manifest = Manifest(host="gpu-7", kernel="6.8.0", driver="550.54.15", nodetopo_version="0.1.0")
    (bundle / MANIFEST).write_text(json.dumps(manifest.to_json()))
    assert _json(capsys, "--from", str(bundle))["metadata"]["name"] == "gpu-7"  # type: ignore[index]
    monkeypatch.setenv("NODE_NAME", "local-node")  # the bundle's host wins over where it is read
    assert _json(capsys, "--from", str(bundle))["metadata"]["name"] == "gpu-7"  # type: ignore[index]
    assert _json(capsys, "--from", str(bundle), "--node-name", "x")["metadata"]["name"] == "x"  # type: ignore[index]
    assert main(["discover", "--from", str(bundle)]) == 0
    head = capsys.readouterr().out.splitlines()[:2]
    assert head[0].startswith("Node gpu-7 ")
    assert "captured on gpu-7 (kernel 6.8.0, driver 550.54.15, nodetopo 0.1.0)" in head[1]


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[1, 2]",
        '{"host": "../../etc/passwd"}',
        '{"host": "gpu\\u001b[2J-7", "kernel": "6.8\\u001b]0;x\\u0007"}',
        '{"host": 7, "kernel": ["x"], "capturedAt": "yesterday"}',
        '{"host": "' + "a" * 300 + '"}',
    ],
)
def test_a_bad_manifest_costs_its_facts_not_the_bundle(
    text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NODE_NAME", "fallback")
    bundle = _copy(tmp_path)
    (bundle / MANIFEST).write_text(text)
    body = _json(capsys, "--from", str(bundle))
    # the manifest's facts are lost; the bundle's own name stands in, not $NODE_NAME of the reader
    assert body["metadata"]["name"] == bundle.name  # type: ignore[index]
    manifest = read_manifest(bundle)
    assert manifest is None or (manifest.host is None and manifest.kernel is None)


def test_manifest_fields_are_validated() -> None:
    m = parse_manifest(
        '{"host": "Node-1.example.com", "driver": "550.54.15", "capturedAt": "2026-12-01T07:30:03Z"}'
    )
    assert (m.host, m.driver, m.captured_at) == ("node-1.example.com", "550.54.15", "2026-12-01T07:30:03Z")


def test_capture_tar_and_discover_from_the_archive(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["capture", str(tmp_path / "node"), "--tar", "--no-nvml", "--node-name", "n1"]) == 0
    assert "captured " + str(tmp_path / "node.tar.gz") in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["node.tar.gz"]  # no directory, no partial file
    with tarfile.open(tmp_path / "node.tar.gz") as tar:
        names = tar.getnames()
    assert "node/manifest.json" in names and all(n == "node" or n.startswith("node/") for n in names)
    assert main(["capture", str(tmp_path / "node"), "--tar"]) == 2  # never overwrites
    assert "exists" in capsys.readouterr().err
    body = _json(capsys, "--from", str(tmp_path / "node.tar.gz"))
    assert body["metadata"]["name"] == "n1"  # type: ignore[index]


@pytest.mark.parametrize("bundle", ["dgx-h100", "gpu-no-driver"])
def test_an_archive_replays_exactly_like_its_directory(
    bundle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = tmp_path / f"{bundle}.tar.gz"
    write_archive(BUNDLES / bundle, archive)
    with tarfile.open(archive) as tar:
        assert any(m.issym() for m in tar.getmembers())  # sysfs links travel as links
    direct = _json(capsys, "--from", str(BUNDLES / bundle), "--node-name", "n")
    packed = _json(capsys, "--from", str(archive), "--node-name", "n")
    assert packed == direct


def _archive(tmp_path: Path, *members: tuple[tarfile.TarInfo, bytes]) -> Path:
    path = tmp_path / "evil.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        ok = tarfile.TarInfo("b/cmd/nvidia-smi-L.txt")
        ok.size = 3
        tar.addfile(ok, io.BytesIO(b"x\n\n"))
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
    return path


def _info(name: str, kind: bytes = tarfile.REGTYPE, link: str = "", size: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.size = size
    return info


HOSTILE = {
    "dot-dot": [(_info("b/../../escaped", size=1), b"x")],
    "absolute": [(_info("/tmp/nodetopo-escaped", size=1), b"x")],
    "link-up": [(_info("b/sys/l", tarfile.SYMTYPE, "../../../../etc"), b"")],
    "link-absolute": [(_info("b/sys/passwd", tarfile.SYMTYPE, "/etc/passwd"), b"")],
    # each link stays inside on paper; together they climb out (b/s/s/s is b/, so ../../.. leaves it)
    "link-chain": [
        (_info("b/s", tarfile.SYMTYPE, "."), b""),
        (_info("b/s/s/s/l", tarfile.SYMTYPE, "../../../etc"), b""),
    ],
    "write-through-link": [
        (_info("b/d", tarfile.SYMTYPE, "."), b""),
        (_info("b/d/d/d/ok", size=1), b"x"),
        (_info("b/up", tarfile.SYMTYPE, "d/.."), b""),
        (_info("b/up/up/x", size=1), b"x"),
    ],
    "hard-link": [(_info("b/sys/h", tarfile.LNKTYPE, "b/cmd/nvidia-smi-L.txt"), b"")],
    "fifo": [(_info("b/cmd/ibstat.txt", tarfile.FIFOTYPE), b"")],
    "device": [(_info("b/sys/zero", tarfile.CHRTYPE), b"")],
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_an_unsafe_archive_is_refused_and_writes_nothing_outside(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = _archive(tmp_path, *HOSTILE[case])
    before = set(tmp_path.parent.iterdir())
    code = main(["discover", "--from", str(archive)])
    err = capsys.readouterr().err
    # (write-through-link stays inside the unpack directory — b/up is its top — and is then no bundle)
    assert code == 2, err
    assert err.startswith("nodetopo: ") and "Traceback" not in err
    assert set(tmp_path.parent.iterdir()) == before
    assert not Path("/tmp/nodetopo-escaped").exists() and not (tmp_path / "escaped").exists()


def test_archive_size_and_entry_bounds(tmp_path: Path) -> None:
    big = _archive(tmp_path, (_info("b/nvml.json", size=4096), b"0" * 4096))
    with pytest.raises(BundleError, match="larger than 1024 bytes"):
        extract_archive(big, tmp_path / "x1", max_file_bytes=1024)
    with pytest.raises(BundleError, match="more than 2048 bytes"):
        extract_archive(big, tmp_path / "x2", max_bytes=2048)
    many = _archive(tmp_path, *[(_info(f"b/sys/f{i}", size=0), b"") for i in range(20)])
    with pytest.raises(BundleError, match="more than 10 entries"):
        extract_archive(many, tmp_path / "x3", max_members=10)
    not_tar = tmp_path / "x.tar.gz"
    not_tar.write_bytes(b"\x1f\x8b garbage")
    with pytest.raises(BundleError):
        bundle_dir(not_tar)


def test_unpacked_archives_are_private_and_removed_at_exit(tmp_path: Path) -> None:
    archive = tmp_path / "p.tar.gz"
    write_archive(BUNDLES / "cpu-only", archive)
    unpacked = bundle_dir(archive)
    assert bundle_dir(archive) == unpacked  # once per process
    assert unpacked.name == "p" and (unpacked / "sys").is_dir()
    assert os.stat(unpacked.parent).st_mode & 0o077 == 0  # mkdtemp: only we can read it
