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
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from helpers import BUNDLES

from nodetopo import __version__
from nodetopo.bundle import (
    MANIFEST,
    Manifest,
    bundle_dir,
    extract_archive,
    parse_manifest,
    read_manifest,
    resolves_inside,
    write_archive,
)
from nodetopo.cli import main
from nodetopo.errors import BundleError


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
    from nodetopo.bundle.capture import write_manifest
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
        "[" * 60_000,  # json.loads recursed into RecursionError: a traceback, exit 1
        '{"host": "gpu-7", "kernel": ' + "[" * 5_000 + "]" * 5_000 + "}",
    ],
    ids=lambda text: text[:30] if len(text) < 100 else f"{text[:12]}... ({len(text)} chars)",
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
    # the same climb with the links in the other order: b/m is checked while b/l is not there yet
    # (b/l/.. is then b), and b/l -> .. is b's parent, the unpack directory: b/m is its parent
    "link-chain-later": [
        (_info("b/m", tarfile.SYMTYPE, "l/.."), b""),
        (_info("b/l", tarfile.SYMTYPE, ".."), b""),
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


def test_a_refused_archive_writes_nothing_at_all(tmp_path: Path) -> None:
    """Every entry is checked before the first is written: the 21st of 20 allowed, a link that
    climbs out last, an oversized file last."""
    cases = {
        "more than 10 entries": (
            [(_info(f"b/sys/f{i}", size=0), b"") for i in range(20)],
            {"max_members": 10},
        ),
        "out of the bundle": (
            [(_info("b/m", tarfile.SYMTYPE, "l/.."), b""), (_info("b/l", tarfile.SYMTYPE, ".."), b"")],
            {},
        ),
        "larger than 8 bytes": (
            [(_info("b/sys/a", size=1), b"x"), (_info("b/nvml.json", size=9), b"1" * 9)],
            {"max_file_bytes": 8},
        ),
    }
    for n, (want, (members, limits)) in enumerate(cases.items()):
        (tmp_path / str(n)).mkdir()
        archive = _archive(tmp_path / str(n), *members)
        dest = tmp_path / f"dest{n}"
        dest.mkdir()
        with pytest.raises(BundleError, match=want):
            extract_archive(archive, dest, **limits)  # type: ignore[arg-type]
        assert list(dest.iterdir()) == [], want


def _huge_record(tmp_path: Path, kind: bytes, size: int) -> Path:
    """An archive whose first entry is a GNU long-name or pax record of ``size`` bytes (gzip
    makes it ~0.1% of that), written a MiB at a time."""
    import gzip

    path = tmp_path / "record.tar.gz"
    info = tarfile.TarInfo("././@LongLink" if kind == tarfile.GNUTYPE_LONGNAME else "./PaxHeaders/x")
    info.type, info.size = kind, size
    with gzip.open(path, "wb", compresslevel=1) as out:
        out.write(
            info.tobuf(
                format=tarfile.GNU_FORMAT if kind == tarfile.GNUTYPE_LONGNAME else tarfile.USTAR_FORMAT
            )
        )
        head = b"%d path=" % size if kind == tarfile.XHDTYPE else b""
        out.write(head)
        left = size - len(head) - 1  # then a newline ends the record (and the name)
        chunk = b"a" * (1 << 20)
        for _ in range(left // len(chunk)):
            out.write(chunk)
        out.write(b"a" * (left % len(chunk)) + b"\n" + b"\0" * (-size % 512))
        entry = tarfile.TarInfo("b/cmd/nvidia-smi-L.txt")
        out.write(entry.tobuf() + b"\0" * 1024)
    return path


@pytest.mark.parametrize(
    "kind", [tarfile.GNUTYPE_LONGNAME, tarfile.XHDTYPE], ids=["gnu-long-name", "pax-path"]
)
def test_a_huge_header_record_is_refused_before_it_is_read(tmp_path: Path, kind: bytes) -> None:
    """A 100 MiB path record cost 952 MB of memory and 100 MB of stderr before the refusal."""
    archive = _huge_record(tmp_path, kind, 100 * 2**20)
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the forked parent (pytest) across exec
    script = (
        "import re, sys\n"
        "from nodetopo.cli import main\n"
        "code = main(['discover', '--from', sys.argv[1]])\n"
        "status = open('/proc/self/status').read()\n"
        "print(re.search(r'VmHWM:\\s*(\\d+) kB', status).group(1))\n"
        "sys.exit(code)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(archive)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert len(done.stderr) < 1000 and "Traceback" not in done.stderr
    assert "record of 104857600 bytes" in done.stderr
    assert int(done.stdout.split()[-1]) < 200 * 1024  # KiB: the interpreter and nodetopo, not the record


def test_a_chain_of_header_records_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "chain.tar"
    with path.open("wb") as out:
        for _ in range(2000):  # tarfile recursed once per record
            info = tarfile.TarInfo("././@LongLink")
            info.type, info.size = tarfile.GNUTYPE_LONGNAME, 10
            out.write(info.tobuf(format=tarfile.GNU_FORMAT) + b"b/sys/x\0\0\0".ljust(512, b"\0"))
        out.write(tarfile.TarInfo("b/sys/x").tobuf() + b"\0" * 1024)
    with pytest.raises(BundleError, match="more than 4 header records for one entry"):
        extract_archive(path, tmp_path / "dest")


def test_resolving_links_follows_them_in_any_order() -> None:
    links = {"b/l": "..", "b/m": "l/..", "b/s": ".", "b/loop": "loop2", "b/loop2": "loop"}
    assert resolves_inside(links, "b/l") and resolves_inside(links, "b/s/s/s/x")
    assert not resolves_inside(links, "b/m")  # b/l is the top, its parent is outside
    assert not resolves_inside(links, "b/loop")
    assert not resolves_inside({"a": "/etc"}, "a/passwd")
    assert resolves_inside({"sys/bus/d": "../../devices/x"}, "sys/bus/d/vendor")


def test_an_unpack_killed_with_sigterm_removes_its_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import signal
    import tempfile
    import time

    import nodetopo.bundle

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    before = signal.getsignal(signal.SIGTERM)  # SIG_DFL, or a handler an earlier test left (ray.init)

    def killed(archive: Path, dest: Path) -> None:
        (dest / "b").mkdir()
        (dest / "b" / "half").write_text("x")
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)

    monkeypatch.setattr(nodetopo.bundle, "extract_archive", killed)
    archive = tmp_path / "k.tar.gz"
    write_archive(BUNDLES / "cpu-only", archive)
    with pytest.raises(SystemExit) as exited:
        bundle_dir(archive)
    assert exited.value.code == 128 + signal.SIGTERM
    assert [p.name for p in tmp_path.iterdir()] == ["k.tar.gz"]
    assert signal.getsignal(signal.SIGTERM) is before  # the handler it found, restored


def test_a_later_unpack_removes_what_a_killed_one_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tempfile

    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    )
    dead = int(gone.stdout)
    left = tmp_path / f"nodetopo-bundle-{dead}-abc123"
    (left / "b" / "sys").mkdir(parents=True)
    alive = tmp_path / f"nodetopo-bundle-{os.getppid()}-def456"  # our parent: a live process
    alive.mkdir()
    other = tmp_path / "nodetopo-bundle-notapid"
    other.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    archive = tmp_path / "p.tar.gz"
    write_archive(BUNDLES / "cpu-only", archive)
    unpacked = bundle_dir(archive)
    assert unpacked.parent.name.startswith(f"nodetopo-bundle-{os.getpid()}-")
    assert not left.exists() and alive.is_dir() and other.is_dir()
