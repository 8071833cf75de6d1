"""The krew plugin of ``kubectl ntopo``: a single-file executable, its archive, and the manifest.

The release workflow (.github/workflows/release.yml) runs these three steps, the first two on one
runner per platform, the third once over every archive; tests/test_release_artifacts.py runs the
same commands:

    python plugins/archive.py binary --out DIR
        DIR/kubectl-ntopo: ``nodetopo.kubectl.cli`` and the Python that runs it in one executable
        (PyInstaller ``--onefile``), for the machine it runs on; needs plugins/build-requirements.txt
        and nodetopo installed in the running Python.
    python plugins/archive.py archive --binary DIR/kubectl-ntopo --out-dir DIST [--platform OS-ARCH]
        DIST/kubectl-ntopo-v<version>-<os>-<arch>.tar.gz (the executable and LICENSE; fixed owner,
        mode and time, so the same executable gives the same archive); prints its name and sha256.
    python plugins/archive.py manifest --out DIST/ntopo.yaml [--base-url URL] DIST/kubectl-ntopo-*.tar.gz
        plugins/ntopo.yaml with one platform per archive: its selector (from the name), download URL
        and sha256, computed from the file.

The executable needs no Python on the laptop. It holds only what ``kubectl ntopo`` imports: the
standard library, PyYAML and nodetopo; the agent's dependencies (networkx, the kubernetes client,
NVML, ...) are excluded, and the test runs every command of the executable against the console
script to show nothing it needs is missing.
"""

from __future__ import annotations

import argparse
import copy
import gzip
import hashlib
import io
import platform
import re
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "plugins" / "ntopo.yaml"
LICENSE = ROOT / "LICENSE"
BIN = "kubectl-ntopo"
#: where a release's archives are downloaded from ({tag}: v<version>); the workflow passes its own
BASE_URL = "https://github.com/nodetopo/nodetopo/releases/download/{tag}"
#: nodetopo's runtime dependencies that ``kubectl ntopo`` never imports: kept out of the executable
EXCLUDED = ("networkx", "kubernetes", "prometheus_client", "pyudev", "pynvml", "h2", "hpack", "hyperframe")
ENTRY = "import sys\n\nfrom nodetopo.kubectl.cli import main\n\nsys.exit(main())\n"
NAME = re.compile(rf"^{BIN}-(v\d+\.\d+\.\d+)-(linux|darwin)-(amd64|arm64)\.tar\.gz$")
_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


def version() -> str:
    """``nodetopo.__version__`` read from the source (the one place it is written)."""
    text = (ROOT / "nodetopo" / "__init__.py").read_text(encoding="utf-8")
    m = re.search(r'^__version__ = "([^"]+)"$', text, re.M)
    if m is None:
        raise SystemExit("nodetopo/__init__.py: no __version__ line")
    return m[1]


def this_platform() -> str:
    """``<os>-<arch>`` as krew names them (``linux-amd64``, ``darwin-arm64``)."""
    system, machine = platform.system().lower(), platform.machine().lower()
    if system not in ("linux", "darwin") or machine not in _ARCH:
        raise SystemExit(f"no krew platform for {system}/{machine}")
    return f"{system}-{_ARCH[machine]}"


def archive_name(tag: str, platform_name: str) -> str:
    return f"{BIN}-{tag}-{platform_name}.tar.gz"


# ----------------------------------------------------------------------------------------------
# The executable
# ----------------------------------------------------------------------------------------------


def build_binary(out: Path) -> Path:
    """PyInstaller ``--onefile`` of ``kubectl ntopo`` into ``out``; returns the executable's path."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kubectl-ntopo-build-") as work:
        entry = Path(work) / "kubectl_ntopo.py"
        entry.write_text(ENTRY, encoding="utf-8")
        command = [
            sys.executable,
            "-m",
            "PyInstaller",
            "--onefile",
            "--noconfirm",
            "--clean",
            "--log-level=WARN",
            f"--name={BIN}",
            f"--distpath={out}",
            f"--workpath={work}/build",
            f"--specpath={work}",
            *(f"--exclude-module={m}" for m in EXCLUDED),
            str(entry),
        ]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"PyInstaller failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return out / BIN


# ----------------------------------------------------------------------------------------------
# The archive
# ----------------------------------------------------------------------------------------------


def archive_bytes(binary: Path) -> bytes:
    """``kubectl-ntopo`` (mode 755) and ``LICENSE``, owner root, time 0, gzip without a timestamp."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, name, mode in ((binary, BIN, 0o755), (LICENSE, "LICENSE", 0o644)):
            data = path.read_bytes()
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, 0
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), compresslevel=9, mtime=0)


def write_archive(binary: Path, out_dir: Path, platform_name: str, tag: str) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / archive_name(tag, platform_name)
    target.write_bytes(archive_bytes(binary))
    return target


# ----------------------------------------------------------------------------------------------
# The manifest
# ----------------------------------------------------------------------------------------------


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def render_manifest(template: dict[str, Any], archives: Sequence[Path], base_url: str) -> dict[str, Any]:
    """The template with one platform per archive; every archive must be of the template's version."""
    manifest = copy.deepcopy(template)
    tag = manifest["spec"]["version"]
    platforms = []
    for path in sorted(archives, key=lambda p: p.name):
        m = NAME.match(path.name)
        if m is None:
            raise SystemExit(f"{path.name}: not a {BIN}-v<version>-<os>-<arch>.tar.gz archive")
        if m[1] != tag:
            raise SystemExit(f"{path.name}: version {m[1]}, the manifest is {tag}")
        platforms.append(
            {
                "selector": {"matchLabels": {"os": m[2], "arch": m[3]}},
                "uri": f"{base_url.format(tag=tag).rstrip('/')}/{path.name}",
                "sha256": sha256(path),
                "bin": BIN,
                "files": [{"from": BIN, "to": "."}, {"from": "LICENSE", "to": "."}],
            }
        )
    if not platforms:
        raise SystemExit("no archive given")
    manifest["spec"]["platforms"] = platforms
    return manifest


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="plugins/archive.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="step", required=True)
    p = sub.add_parser("binary", help="build the single-file executable")
    p.add_argument("--out", type=Path, required=True, metavar="DIR", help="directory for kubectl-ntopo")
    p = sub.add_parser("archive", help="pack the executable and LICENSE as the krew archive")
    p.add_argument("--binary", type=Path, required=True, metavar="FILE", help="the executable")
    p.add_argument("--out-dir", type=Path, required=True, metavar="DIR", help="where the archive goes")
    p.add_argument("--platform", default=None, metavar="OS-ARCH", help="default: this machine's")
    p = sub.add_parser("manifest", help="plugins/ntopo.yaml with the archives' URLs and sha256")
    p.add_argument("archives", nargs="+", type=Path, metavar="ARCHIVE")
    p.add_argument("--out", type=Path, required=True, metavar="FILE", help="the manifest to write")
    p.add_argument("--base-url", default=BASE_URL, help="download URL of the archives ({tag}: the tag)")
    args = parser.parse_args(argv)
    tag = f"v{version()}"
    if args.step == "binary":
        print(build_binary(args.out))
    elif args.step == "archive":
        target = write_archive(args.binary, args.out_dir, args.platform or this_platform(), tag)
        print(target.name, sha256(target))
    else:
        import yaml

        template = yaml.safe_load(TEMPLATE.read_text(encoding="utf-8"))
        if template["spec"]["version"] != tag:
            raise SystemExit(f"{TEMPLATE}: spec.version {template['spec']['version']}, the code is {tag}")
        manifest = render_manifest(template, args.archives, args.base_url)
        header = "".join(line + "\n" for line in TEMPLATE.read_text().splitlines() if line.startswith("#"))
        args.out.write_text(header + yaml.safe_dump(manifest, sort_keys=False), encoding="utf-8")
        print(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
