#!/usr/bin/env python3
"""Build the nodetopo image without a registry or Docker: an OCI image-layout archive for ``ctr``.

    python3 image/build_oci.py --out nodetopo.oci.tar
    ctr -n k8s.io images import nodetopo.oci.tar       # on each node (containerd)

The same recipe as the Dockerfile, from the same files:
  layer 1  Debian bookworm (mmdebstrap --variant=minbase) with image/debian-packages.txt installed;
  layer 2  the wheels of image/requirements.lock (pip --no-deps --require-hashes --only-binary=:all:)
           in /usr/local/lib/python3.11/dist-packages, for this machine (x86_64 or aarch64: the lock
           lists both wheels of each compiled package);
  layer 3  nodetopo/ and image/nodetopo (/usr/local/bin/nodetopo): the small layer a code change rebuilds.

    python3 image/build_oci.py --ray --out nodetopo-ray.oci.tar

also adds Ray (image/ray-requirements.in, locked in image/ray-requirements.lock: the packages beyond
requirements.lock) as a layer between 2 and 3, and image/ray as /usr/local/bin/ray: one image for a
RayCluster's Ray containers and its nodetopo init containers, named ``<default name>-ray<version>``.
The image's labels, environment, user, ports, entry point and command are read from the Dockerfile's
final stage, so both builders describe one image. Layers 1 and 2 are cached (``--cache``, default
``$NODETOPO_IMAGE_CACHE`` or ``~/.cache/nodetopo/image``) under the hash of what they are built from;
layer 3 is reproducible (fixed times and owners), so the same source gives the same image digest.

The image is for the machine the builder runs on (amd64 on x86_64, arm64 on aarch64), like the
rootfs mmdebstrap makes there. Needs root (mmdebstrap, Debian's package mirror) and pip (PyPI) for an
uncached build; Python 3.11+.
The default image name is the one deploy/daemonset.yaml runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import hashlib
import io
import json
import os
import platform
import py_compile
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DOCKERFILE = REPO / "Dockerfile"
PACKAGES = HERE / "debian-packages.txt"
LOCK = HERE / "requirements.lock"
RAY_LOCK = HERE / "ray-requirements.lock"
ENTRYPOINT = HERE / "nodetopo"
RAY_ENTRYPOINT = HERE / "ray"
DEFAULT_NAME = "ghcr.io/nodetopo/nodetopo:0.1.0"
SUITE = "bookworm"
SITE_PACKAGES = "usr/local/lib/python3.11/dist-packages"
#: Debian's base images put these in the image's PATH; so does this builder.
BASE_ENV = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",)
#: Layer 3's files get this modification time (reproducible digests).
EPOCH = 1767225600  # 2026-01-01T00:00:00Z
MMDEBSTRAP_OPTIONS = (
    "--variant=minbase",
    *(f"--dpkgopt=path-exclude=/usr/share/{d}/*" for d in ("doc", "man", "locale", "info")),
)
LAYER_MEDIA_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"


class BuildError(RuntimeError):
    """A step of the build failed; the message names the step and what to do."""


# ----------------------------------------------------------------------------------------------
# The Dockerfile's final stage (the image's metadata) and the shared package lists
# ----------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class ImageConfig:
    """What the Dockerfile's final stage says about the image (not its filesystem)."""

    labels: dict[str, str]
    env: tuple[str, ...]
    user: str
    exposed_ports: tuple[str, ...]
    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...]
    copies: tuple[tuple[str, ...], ...]  #: every COPY's arguments, all stages
    base: str


def _instructions(text: str) -> Iterator[tuple[str, str]]:
    logical = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not logical and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            logical += line[:-1] + " "
            continue
        logical += line
        keyword, _, rest = logical.partition(" ")
        yield keyword.upper(), rest.strip()
        logical = ""


def _pairs(rest: str) -> dict[str, str]:
    pairs = {}
    for word in shlex.split(rest):
        key, sep, value = word.partition("=")
        if not sep:
            raise BuildError(f"Dockerfile: expected key=value, got {word!r} in {rest!r}")
        pairs[key] = value
    return pairs


def parse_dockerfile(text: str) -> ImageConfig:
    """The final stage's LABEL/ENV/USER/EXPOSE/ENTRYPOINT/CMD (exec form only) and the base image."""
    args: dict[str, str] = {}
    labels: dict[str, str] = {}
    env: list[str] = []
    user, ports, entrypoint, cmd, base = "", [], (), (), ""
    copies: list[tuple[str, ...]] = []
    for keyword, rest in _instructions(text):
        if keyword == "ARG" and "=" in rest:
            args.update(_pairs(rest))
        elif keyword == "FROM":  # a new stage: only the last one's metadata counts
            image = shlex.split(rest)[0]
            base = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m[1], m[0]), image)
            labels, env, user, ports, entrypoint, cmd = {}, [], "", [], (), ()
        elif keyword == "LABEL":
            labels.update(_pairs(rest))
        elif keyword == "ENV":
            env += [f"{k}={v}" for k, v in _pairs(rest).items()]
        elif keyword == "USER":
            user = rest
        elif keyword == "EXPOSE":
            ports += [p if "/" in p else f"{p}/tcp" for p in rest.split()]
        elif keyword in ("ENTRYPOINT", "CMD"):
            value = json.loads(rest)
            if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
                raise BuildError(f"Dockerfile: {keyword} must use the exec (JSON list) form")
            if keyword == "ENTRYPOINT":
                entrypoint = tuple(value)
            else:
                cmd = tuple(value)
        elif keyword == "COPY":
            copies.append(tuple(shlex.split(rest)))
    if not base:
        raise BuildError("Dockerfile: no FROM")
    return ImageConfig(
        labels=labels,
        env=tuple(env),
        user=user,
        exposed_ports=tuple(ports),
        entrypoint=entrypoint,
        cmd=cmd,
        copies=tuple(copies),
        base=base,
    )


def debian_packages(path: Path = PACKAGES) -> list[str]:
    """The package names of image/debian-packages.txt (comments and blank lines dropped)."""
    names = [line.split("#", 1)[0].strip() for line in path.read_text().splitlines()]
    return [n for n in names if n]


# ----------------------------------------------------------------------------------------------
# Layers
# ----------------------------------------------------------------------------------------------


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _key(*parts: str | bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode() if isinstance(part, str) else part)
        digest.update(b"\0")
    return digest.hexdigest()[:20]


@dataclasses.dataclass(frozen=True, slots=True)
class Layer:
    """A gzip-compressed layer blob: ``digest`` of the blob, ``diff_id`` of the uncompressed tar."""

    blob: Path
    digest: str
    diff_id: str
    size: int


def _gzip_layer(tar_path: Path, blob: Path) -> Layer:
    """Compress ``tar_path`` into ``blob`` (reproducibly: no name, time 0); return its digests."""
    diff = hashlib.sha256()
    with (
        tar_path.open("rb") as src,
        blob.open("wb") as raw,
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=6, mtime=0) as out,
    ):
        while chunk := src.read(1 << 20):
            diff.update(chunk)
            out.write(chunk)
    return Layer(blob=blob, digest=_sha256_file(blob), diff_id=diff.hexdigest(), size=blob.stat().st_size)


def _cached_layer(cache: Path, name: str, key: str, build: Callable[[Path, Path], None]) -> Layer:
    """Layer ``name`` from the cache under ``key``, or ``build(tar_path)`` it and cache it."""
    directory = cache / f"{name}-{key}"
    meta = directory / "layer.json"
    if meta.is_file():
        info = json.loads(meta.read_text())
        blob = directory / "layer.tar.gz"
        return Layer(blob=blob, digest=info["digest"], diff_id=info["diff_id"], size=blob.stat().st_size)
    partial = cache / f".{name}-{key}.partial-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        tar_path = partial / "layer.tar"
        build(tar_path, partial)
        layer = _gzip_layer(tar_path, partial / "layer.tar.gz")
        tar_path.unlink()
        (partial / "layer.json").write_text(json.dumps({"digest": layer.digest, "diff_id": layer.diff_id}))
        shutil.rmtree(directory, ignore_errors=True)
        partial.rename(directory)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    blob = directory / "layer.tar.gz"
    return dataclasses.replace(layer, blob=blob)


def _run(argv: list[str], step: str) -> None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
    except OSError as e:
        raise BuildError(f"{step}: cannot run {argv[0]}: {e}") from e
    if done.returncode != 0:
        raise BuildError(f"{step}: {shlex.join(argv)} failed ({done.returncode}):\n{done.stderr[-3000:]}")


def rootfs_layer(cache: Path) -> Layer:
    """Layer 1: Debian ``SUITE`` minbase with image/debian-packages.txt, by mmdebstrap (cached)."""
    packages = debian_packages()
    key = _key("rootfs-v1", SUITE, *MMDEBSTRAP_OPTIONS, *packages)

    def build(tar_path: Path, _: Path) -> None:
        if shutil.which("mmdebstrap") is None:
            raise BuildError("layer 1: mmdebstrap is not installed (apt-get install mmdebstrap)")
        _run(
            ["mmdebstrap", *MMDEBSTRAP_OPTIONS, f"--include={','.join(packages)}", SUITE, str(tar_path)],
            "layer 1 (mmdebstrap)",
        )

    return _cached_layer(cache, "rootfs", key, build)


def _lock() -> Any:
    """image/lock.py, which names the wheels of each machine the lock covers."""
    sys.path.insert(0, str(HERE))
    import lock

    return lock


def host_machine() -> str:
    """This machine (``uname -m``): the builder makes an image for the machine it runs on, as
    mmdebstrap's rootfs is (its default architecture is the host's)."""
    machine = platform.machine()
    if machine not in _lock().MACHINES:
        raise BuildError(
            f"no image for machine {machine!r}: image/lock.py covers {', '.join(_lock().MACHINES)}"
        )
    return machine


def wheels_layer(cache: Path, machine: str, lock: Path = LOCK, name: str = "wheels") -> Layer:
    """Layer 2 (and, for the Ray image, the layer of image/ray-requirements.lock): the wheels of
    ``lock`` for ``machine`` in /usr/local/lib/python3.11/dist-packages (cached on the lock and the
    machine): pip keeps, of each package, the one wheel whose hash the lock lists."""
    options = ["--no-deps", "--require-hashes", *_lock().target_options(machine), "--no-cache-dir"]
    key = _key(f"{name}-v1", lock.read_bytes(), *options)

    def build(tar_path: Path, scratch: Path) -> None:
        root = scratch / "root"
        _run(
            [
                sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *options,
                f"--target={root / SITE_PACKAGES}", "-r", str(lock),
            ],
            f"layer {name} (pip install -r image/{lock.name})",
        )  # fmt: skip
        shutil.rmtree(root / SITE_PACKAGES / "bin", ignore_errors=True)  # console scripts: unused
        _write_tar(tar_path, root, mtime=None)
        shutil.rmtree(root)  # the cache keeps the layer only (the scratch directory becomes its entry)

    return _cached_layer(cache, name, key, build)


def ray_version() -> str:
    """The Ray version image/ray-requirements.lock pins (the Ray image's tag names it)."""
    pin = _lock().read_lock(RAY_LOCK).get("ray")
    if pin is None:
        raise BuildError(f"{RAY_LOCK} pins no ray: run python3 image/lock.py --ray")
    return str(pin.version)


def _app_files(*, ray: bool = False) -> Iterator[tuple[str, Path, int]]:
    """(path in the image, source, mode) of layer 3: nodetopo/ (no caches) and the entry point (and,
    with ``ray``, Ray's: ``ray start`` is how KubeRay starts every Ray node)."""
    package = REPO / "nodetopo"
    for source in sorted(package.rglob("*")):
        if "__pycache__" in source.parts or not source.is_file() or source.suffix == ".pyc":
            continue
        yield f"{SITE_PACKAGES}/nodetopo/{source.relative_to(package).as_posix()}", source, 0o644
    yield "usr/local/bin/nodetopo", ENTRYPOINT, 0o755
    if ray:
        yield "usr/local/bin/ray", RAY_ENTRYPOINT, 0o755


#: the image's interpreter (Debian bookworm's python3): bytecode is compiled only by the same minor version
IMAGE_PYTHON = (3, 11)


def _bytecode(files: list[tuple[str, bytes, int]], scratch: Path) -> list[tuple[str, bytes, int]]:
    """``__pycache__/*.cpython-311.pyc`` for each ``.py`` of layer 3, compiled with checked-hash
    invalidation (valid for as long as the source's hash matches, whatever the file times): the root
    filesystem is read-only and PYTHONDONTWRITEBYTECODE is set, so without them every agent, discover
    and probe start would compile nodetopo from source (~30 ms CPU per probe). Tracebacks name the
    files' paths in the image. Empty when this interpreter is not the image's minor version."""
    if sys.version_info[:2] != IMAGE_PYTHON:
        print(
            f"build_oci: not compiling bytecode: this is Python {sys.version_info[0]}.{sys.version_info[1]}, "
            f"the image runs {IMAGE_PYTHON[0]}.{IMAGE_PYTHON[1]}",
            file=sys.stderr,
        )
        return []
    out: list[tuple[str, bytes, int]] = []
    for name, data, _ in files:
        if not name.endswith(".py"):
            continue
        source = scratch / "bytecode-source.py"
        source.write_bytes(data)
        target = scratch / "bytecode.pyc"
        py_compile.compile(
            str(source),
            cfile=str(target),
            dfile="/" + name,
            doraise=True,
            invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH,
        )
        directory, _, filename = name.rpartition("/")
        cached = f"{directory}/__pycache__/{filename[:-3]}.{sys.implementation.cache_tag}.pyc"
        out.append((cached, target.read_bytes(), 0o644))
    return out


def _write_tar(tar_path: Path, root: Path, *, mtime: int | None) -> None:
    """Tar ``root``'s contents (sorted, owner 0:0, real mtimes so .pyc files stay valid)."""
    with tarfile.open(tar_path, "w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(root.rglob("*")):
            info = tar.gettarinfo(str(path), arcname=path.relative_to(root).as_posix())
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if mtime is not None:
                info.mtime = mtime
            if info.isreg():
                with path.open("rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)


# ----------------------------------------------------------------------------------------------
# The OCI image layout
# ----------------------------------------------------------------------------------------------


def _blob(data: bytes) -> tuple[str, bytes]:
    return hashlib.sha256(data).hexdigest(), data


def write_archive(
    out: Path, *, name: str, layers: list[Layer], config: dict[str, object], architecture: str = "amd64"
) -> str:
    """Write the OCI image-layout archive ``out`` (one image: ``config`` + ``layers``, named ``name``
    for ``ctr images import``); return the manifest digest."""
    image_config = {
        "architecture": architecture,
        "os": "linux",
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(EPOCH)),
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{layer.diff_id}" for layer in layers]},
    }
    config_digest, config_bytes = _blob(json.dumps(image_config, sort_keys=True).encode())
    labels = config.get("Labels") or {}
    assert isinstance(labels, dict)
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": f"sha256:{config_digest}",
            "size": len(config_bytes),
        },
        "layers": [
            {"mediaType": LAYER_MEDIA_TYPE, "digest": f"sha256:{layer.digest}", "size": layer.size}
            for layer in layers
        ],
        "annotations": {k: v for k, v in labels.items() if k.startswith("org.opencontainers.")},
    }
    manifest_digest, manifest_bytes = _blob(json.dumps(manifest, sort_keys=True).encode())
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": f"sha256:{manifest_digest}",
                "size": len(manifest_bytes),
                "platform": {"architecture": architecture, "os": "linux"},
                "annotations": {
                    "io.containerd.image.name": name,
                    "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1],
                },
            }
        ],
    }
    partial = out.with_name(out.name + ".partial")
    with tarfile.open(partial, "w") as tar:

        def add_bytes(arcname: str, data: bytes) -> None:
            info = tarfile.TarInfo(arcname)
            info.size, info.mtime, info.mode = len(data), EPOCH, 0o644
            tar.addfile(info, io.BytesIO(data))

        add_bytes("oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode())
        add_bytes("index.json", json.dumps(index, sort_keys=True).encode())
        add_bytes(f"blobs/sha256/{config_digest}", config_bytes)
        add_bytes(f"blobs/sha256/{manifest_digest}", manifest_bytes)
        for layer in layers:
            info = tar.gettarinfo(str(layer.blob), arcname=f"blobs/sha256/{layer.digest}")
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = EPOCH
            with layer.blob.open("rb") as f:
                tar.addfile(info, f)
    partial.rename(out)
    return f"sha256:{manifest_digest}"


def files_layer(scratch: Path, files: list[tuple[str, bytes, int]]) -> Layer:
    """A reproducible layer (sorted, owner 0:0, fixed times) of ``(path, content, mode)`` files."""
    tar_path = scratch / f"files-{len(list(scratch.iterdir()))}.tar"
    with tarfile.open(tar_path, "w", format=tarfile.PAX_FORMAT) as tar:
        directories: set[str] = set()
        for name, data, mode in sorted(files):
            parts = name.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                directory = "/".join(parts[:i])
                if directory not in directories:
                    directories.add(directory)
                    info = tarfile.TarInfo(directory)
                    info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, EPOCH
                    tar.addfile(info)
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, EPOCH
            tar.addfile(info, io.BytesIO(data))
    layer = _gzip_layer(tar_path, tar_path.with_suffix(".tar.gz"))
    tar_path.unlink()
    return layer


def build(
    out: Path, *, name: str | None = None, cache: Path | None = None, ray: bool = False
) -> dict[str, object]:
    """Build the image (with ``ray``, the Ray image) into the OCI archive ``out``; return a summary
    (digests, sizes, seconds)."""
    started = time.monotonic()
    name = name or (f"{DEFAULT_NAME}-ray{ray_version()}" if ray else DEFAULT_NAME)
    cache = cache or Path(os.environ.get("NODETOPO_IMAGE_CACHE", Path.home() / ".cache/nodetopo/image"))
    cache.mkdir(parents=True, exist_ok=True)
    config = parse_dockerfile(DOCKERFILE.read_text())
    with tempfile.TemporaryDirectory(prefix="nodetopo-image-") as tmp:
        scratch = Path(tmp)
        app = [(path, source.read_bytes(), mode) for path, source, mode in _app_files(ray=ray)]
        app += _bytecode(app, scratch)
        machine = host_machine()
        layers = [rootfs_layer(cache), wheels_layer(cache, machine)]
        if ray:
            layers.append(wheels_layer(cache, machine, RAY_LOCK, "ray-wheels"))
        layers.append(files_layer(scratch, app))
        digest = write_archive(
            out,
            name=name,
            layers=layers,
            architecture=_lock().OCI_ARCHITECTURES[machine],
            config={
                "User": config.user,
                "Env": [*BASE_ENV, *config.env],
                "Entrypoint": list(config.entrypoint),
                "Cmd": list(config.cmd),
                "ExposedPorts": {p: {} for p in config.exposed_ports},
                "Labels": config.labels,
                "WorkingDir": "/",
            },
        )
    return {
        "name": name,
        "archive": str(out),
        "manifest_digest": digest,
        "layers": [{"digest": f"sha256:{x.digest}", "size": x.size} for x in layers],
        "compressed_bytes": sum(x.size for x in layers),
        "seconds": round(time.monotonic() - started, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="the OCI archive to write")
    parser.add_argument(
        "--name", help=f"image name (default {DEFAULT_NAME}, with --ray {DEFAULT_NAME}-ray<version>)"
    )
    parser.add_argument("--cache", type=Path, help="layer cache directory")
    parser.add_argument("--ray", action="store_true", help="the Ray image: also Ray and its `ray` command")
    args = parser.parse_args()
    try:
        summary = build(args.out, name=args.name, cache=args.cache, ray=args.ray)
    except BuildError as e:
        print(f"build_oci.py: {e}", file=sys.stderr)
        return 1
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
