#!/usr/bin/env python3
"""Regenerate ``image/requirements.lock``: the Python packages of the nodetopo image, pinned with hashes.

    python3 image/lock.py            # rewrite the lock from pyproject.toml's [project.dependencies]
    python3 image/lock.py --ray      # rewrite image/ray-requirements.lock (the Ray image's extra layer)
    python3 image/lock.py --check    # exit 1 if a lock does not cover what it is generated from

The image is built for two architectures (the release builds linux/amd64 and linux/arm64; Grace nodes
are arm64), so the lock resolves pyproject.toml's runtime dependencies for the image's interpreter
(CPython 3.11, the python3 of Debian bookworm, manylinux wheels only: nothing is compiled in either
recipe) once per machine in ``MACHINES`` with ``pip install --dry-run --report``, the second resolution
held to the first one's versions. Each package gets one line, ``name==version`` and the sha256 of every
wheel the image may install: one for a pure-Python wheel, one per machine for a compiled one. The
trailing comment names each hash's wheel file (``x86_64=FILE aarch64=FILE``, or ``any=FILE``), which
pip ignores. Both recipes install exactly this file with ``pip install --no-deps --require-hashes``;
pip keeps only the wheel whose hash is listed, so each architecture gets its own locked wheel.

The Ray image (``image/build_oci.py --ray``: nodetopo and Ray in one image, for the init container and
the Ray containers of a RayCluster) adds one layer: ``image/ray-requirements.lock``, in the same format,
holds the packages that ``image/ray-requirements.in`` (Ray, pinned) needs beyond requirements.lock,
resolved together with pyproject.toml's dependencies and held to requirements.lock's versions, so
both layers install into one site-packages without a conflict.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
PYPROJECT = HERE.parent / "pyproject.toml"
LOCK = HERE / "requirements.lock"
#: The Ray image's top-level requirement (Ray, pinned) and its lock (packages beyond ``LOCK``).
RAY_REQUIREMENTS = HERE / "ray-requirements.in"
RAY_LOCK = HERE / "ray-requirements.lock"
PYTHON_VERSION = "3.11"
#: The machines the image is built for (``uname -m``), the first one resolved first.
MACHINES = ("x86_64", "aarch64")
#: The OCI architecture of each machine (what an image index's ``platform.architecture`` says).
OCI_ARCHITECTURES = {"x86_64": "amd64", "aarch64": "arm64"}
#: The manylinux tags Debian bookworm (glibc 2.36) can load, most specific first; ``{}`` is the machine.
PLATFORM_TAGS = (
    "manylinux_2_36_{}",
    "manylinux_2_28_{}",
    "manylinux_2_17_{}",
    "manylinux2014_{}",
    "manylinux_2_5_{}",
    "manylinux1_{}",
)
#: The wheel-file word for a pure-Python wheel (platform tag ``any``).
ANY = "any"
REQUIREMENT = re.compile(
    r"^(?P<name>[A-Za-z0-9._-]+)==(?P<version>\S+)(?P<hashes>(?:\s+--hash=sha256:[0-9a-f]{64})+)$"
)
HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")
WHEEL = re.compile(r"^(?P<kind>[a-z0-9_]+)=(?P<file>\S+\.whl)$")


def target_options(machine: str) -> tuple[str, ...]:
    """pip options that select the image's wheels for ``machine`` (shared by the resolver here and
    image/build_oci.py's installer)."""
    if machine not in MACHINES:
        raise ValueError(f"no image for machine {machine!r}: the lock covers {', '.join(MACHINES)}")
    return (
        "--only-binary=:all:",
        *(f"--platform={tag.format(machine)}" for tag in PLATFORM_TAGS),
        f"--python-version={PYTHON_VERSION}",
        "--implementation=cp",
        f"--abi=cp{PYTHON_VERSION.replace('.', '')}",
    )


def dependencies() -> list[str]:
    return list(tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"])


def ray_requirements(path: Path = RAY_REQUIREMENTS) -> list[str]:
    """The requirement lines of image/ray-requirements.in (comments and blank lines dropped)."""
    lines = [line.split("#", 1)[0].strip() for line in path.read_text().splitlines()]
    return [line for line in lines if line]


def requirement_name(requirement: str) -> str:
    """The canonical distribution name of a requirement line (``ray[default]==2.60.0`` → ``ray``)."""
    return canonical(re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0])


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_platforms(filename: str) -> frozenset[str]:
    """The platform tags of a wheel file name: both for
    ``x-1-cp311-cp311-manylinux2014_aarch64.manylinux_2_17_aarch64.whl``, ``{"any"}`` for a pure wheel."""
    parts = filename.removesuffix(".whl").split("-")
    if len(parts) not in (5, 6):
        raise ValueError(f"not a wheel file name: {filename!r}")
    return frozenset(parts[-1].split("."))


def wheel_machine(filename: str) -> str:
    """``any`` for a pure-Python wheel, else the one machine of ``MACHINES`` all its platform tags name."""
    platforms = wheel_platforms(filename)
    if platforms == {ANY}:
        return ANY
    machines = {m for m in MACHINES if all(p.endswith(f"_{m}") for p in platforms)}
    if len(machines) != 1:
        raise ValueError(f"wheel {filename!r} is for none of {', '.join(MACHINES)}")
    return machines.pop()


@dataclasses.dataclass(frozen=True, slots=True)
class Pin:
    """One line of the lock: a distribution, its version and the wheel (file, sha256) per machine
    (``any`` for a pure-Python wheel, which every machine installs)."""

    name: str
    version: str
    wheels: dict[str, tuple[str, str]]

    @property
    def compiled(self) -> bool:
        return ANY not in self.wheels


def read_lock(path: Path = LOCK) -> dict[str, Pin]:
    """canonical name → its ``Pin``, for every line of the lock (a ValueError names a bad line)."""
    pins: dict[str, Pin] = {}
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line, _, comment = raw.partition("#")
        line = line.strip()
        if not line:
            continue
        match = REQUIREMENT.match(line)
        if match is None:
            raise ValueError(f"{path}:{number}: not 'name==version --hash=sha256:...': {raw!r}")
        hashes = HASH.findall(match["hashes"])
        words = [WHEEL.match(w) for w in comment.split()]
        if not words or None in words or len(words) != len(hashes):
            raise ValueError(
                f"{path}:{number}: the comment must name one wheel per hash (machine=FILE): {raw!r}"
            )
        wheels: dict[str, tuple[str, str]] = {}
        for word, sha in zip(words, hashes, strict=True):
            assert word is not None
            if word["kind"] != wheel_machine(word["file"]):
                raise ValueError(f"{path}:{number}: {word['file']} is not a {word['kind']} wheel")
            wheels[word["kind"]] = (word["file"], sha)
        pins[canonical(match["name"])] = Pin(match["name"], match["version"], wheels)
    return pins


def incomplete(pins: dict[str, Pin]) -> list[str]:
    """The compiled packages of ``pins`` that lack the wheel of one of ``MACHINES`` (an image for that
    machine would fail at ``pip install --require-hashes``)."""
    return [p.name for p in pins.values() if p.compiled and set(p.wheels) != set(MACHINES)]


def resolve(
    machine: str, requirements: list[str], constraints: list[str] | None = None
) -> dict[str, tuple[str, str, str, str]]:
    """canonical name → (name, version, wheel file, sha256) of every package pip resolves from
    ``requirements`` for the image's interpreter on ``machine``; ``constraints`` (``name==version``
    lines) hold it to given versions."""
    with tempfile.TemporaryDirectory() as tmp:
        requirements_in = Path(tmp) / "requirements.in"
        requirements_in.write_text("\n".join(requirements) + "\n")
        extra = []
        if constraints:
            (Path(tmp) / "constraints.txt").write_text("\n".join(constraints) + "\n")
            extra = [f"--constraint={tmp}/constraints.txt"]
        report = Path(tmp) / "report.json"
        subprocess.run(
            [
                sys.executable, "-m", "pip", "install", "--quiet", "--dry-run", "--ignore-installed",
                *target_options(machine), f"--target={tmp}/target", f"--report={report}", *extra,
                "-r", str(requirements_in),
            ],
            check=True,
        )  # fmt: skip
        installs = json.loads(report.read_text())["install"]
    found = {}
    for item in installs:
        name, version = item["metadata"]["name"], item["metadata"]["version"]
        sha = item["download_info"].get("archive_info", {}).get("hashes", {}).get("sha256")
        if not sha:
            raise SystemExit(f"lock.py: pip reported no sha256 for {name} on {machine}")
        filename = item["download_info"]["url"].rsplit("/", 1)[-1].split("#", 1)[0]
        found[canonical(name)] = (name, version, filename, sha)
    return found


def resolve_all(requirements: list[str], held: list[str] | None = None) -> list[Pin]:
    """One ``Pin`` per package of ``requirements``: resolved for ``MACHINES[0]`` (held to ``held``,
    ``name==version`` lines, when given), then for each other machine at the same versions; a package
    or version that differs between machines is an error (one lock, one image)."""
    first = resolve(MACHINES[0], requirements, held)
    by_machine = {MACHINES[0]: first}
    pinned = [f"{name}=={version}" for name, version, _, _ in first.values()]
    for machine in MACHINES[1:]:
        by_machine[machine] = resolve(machine, requirements, pinned)
        if by_machine[machine].keys() != first.keys():
            differ = sorted(by_machine[machine].keys() ^ first.keys())
            raise SystemExit(f"lock.py: {machine} resolves other packages than {MACHINES[0]}: {differ}")
    pins = []
    for key, (name, version, _, _) in sorted(first.items()):
        wheels: dict[str, tuple[str, str]] = {}
        for machine, found in by_machine.items():
            filename, sha = found[key][2], found[key][3]
            kind = wheel_machine(filename)
            if kind not in (ANY, machine):
                raise SystemExit(f"lock.py: pip chose {filename} for {machine}")
            wheels.setdefault(kind, (filename, sha))
        if ANY in wheels and len(wheels) > 1:
            raise SystemExit(
                f"lock.py: {name} {version} is pure on one machine, compiled on another: {wheels}"
            )
        pins.append(Pin(name, version, wheels))
    return pins


def format_pin(pin: Pin) -> str:
    hashes = " ".join(f"--hash=sha256:{sha}" for _, sha in pin.wheels.values())
    files = " ".join(f"{kind}={filename}" for kind, (filename, _) in pin.wheels.items())
    return f"{pin.name}=={pin.version} {hashes}  # {files}"


def check(lock: Path = LOCK, ray_lock: Path = RAY_LOCK) -> list[str]:
    """What is wrong with the two locks (empty: nothing): a dependency of pyproject.toml or a
    requirement of image/ray-requirements.in without its line, a pinned requirement at another
    version, a compiled package without the wheel of a machine, a package in both locks."""
    problems: list[str] = []
    pins = read_lock(lock)
    missing = [d for d in dependencies() if requirement_name(d) not in pins]
    if missing:
        problems.append(f"{lock} lacks {missing}: run python3 image/lock.py")
    ray_pins = read_lock(ray_lock)
    for requirement in ray_requirements():
        pin = ray_pins.get(requirement_name(requirement))
        version = requirement.partition("==")[2].strip()
        if pin is None or (version and pin.version != version):
            problems.append(f"{ray_lock} does not pin {requirement}: run python3 image/lock.py --ray")
    both = sorted(set(pins) & set(ray_pins))
    if both:
        problems.append(
            f"{ray_lock} holds {both}, which {lock.name} pins already: run python3 image/lock.py --ray"
        )
    for path, found in ((lock, pins), (ray_lock, ray_pins)):
        partial = incomplete(found)
        if partial:
            flag = " --ray" if path == ray_lock else ""
            problems.append(
                f"{path}: {partial} lack a wheel for one of {MACHINES}: run python3 image/lock.py{flag}"
            )
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--check", action="store_true", help="verify the locks instead of rewriting one")
    parser.add_argument(
        "--ray", action="store_true", help=f"rewrite {RAY_LOCK.name} (from {RAY_REQUIREMENTS.name})"
    )
    args = parser.parse_args()
    if args.check:
        problems = check()
        for problem in problems:
            print(f"lock.py: {problem}", file=sys.stderr)
        return 1 if problems else 0
    machines = " and ".join(MACHINES)
    if args.ray:
        base = read_lock()
        held = [f"{pin.name}=={pin.version}" for pin in base.values()]
        resolved = [
            pin
            for pin in resolve_all([*dependencies(), *ray_requirements()], held)
            if canonical(pin.name) not in base
        ]
        lines = [
            "# The Ray image's Python packages beyond requirements.lock, pinned with hashes. Generated by",
            "# image/lock.py --ray from ray-requirements.in with pyproject.toml's dependencies, held to",
            "# requirements.lock's versions, for CPython 3.11 (Debian bookworm's python3) on linux",
            f"# {machines}, wheels only: one hash for a pure-Python wheel, one per machine for a compiled",
            "# one (the comment names each hash's wheel). Installed by image/build_oci.py --ray, as a layer",
            "# above requirements.lock's, with pip install --no-deps --require-hashes. Do not edit by hand:",
            "# run python3 image/lock.py --ray.",
        ]
        target = RAY_LOCK
    else:
        resolved = resolve_all(dependencies())
        lines = [
            "# The nodetopo image's Python packages, pinned with hashes. Generated by image/lock.py from",
            "# pyproject.toml's [project.dependencies] for CPython 3.11 (Debian bookworm's python3) on",
            f"# linux {machines}, wheels only: one hash for a pure-Python wheel, one per machine",
            "# for a compiled one (the comment names each hash's wheel). Installed by both recipes "
            "(Dockerfile,",
            "# image/build_oci.py) with pip install --no-deps --require-hashes. Do not edit by hand: run",
            "# python3 image/lock.py.",
        ]
        target = LOCK
    target.write_text("\n".join([*lines, *(format_pin(pin) for pin in resolved)]) + "\n")
    print(f"wrote {target} ({len(resolved)} packages, {sum(p.compiled for p in resolved)} compiled)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
