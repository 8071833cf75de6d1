"""image/requirements.lock covers every machine the release builds: a compiled package has the hash of
its x86_64 wheel and of its aarch64 wheel (an arm64 image fails at pip --require-hashes otherwise), a
pure-Python one the hash of its one wheel; both recipes select the wheels of one machine."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load(name: str) -> ModuleType:
    sys.path.insert(0, str(ROOT / "image"))
    try:
        return __import__(name)
    finally:
        sys.path.remove(str(ROOT / "image"))


lock = _load("lock")


def test_the_release_machines_are_the_lock_machines() -> None:
    release = (ROOT / ".github" / "workflows" / "release.yml").read_text()
    found = re.search(r"platforms: (\S+)", release.split("build-push")[1])
    assert found is not None
    platforms = set(re.findall(r"linux/(\w+)", found[1]))
    assert platforms == {lock.OCI_ARCHITECTURES[m] for m in lock.MACHINES} == {"amd64", "arm64"}


def test_every_compiled_package_has_an_x86_64_and_an_aarch64_hash() -> None:
    pins = lock.read_lock()
    compiled = {name for name, pin in pins.items() if pin.compiled}
    # today's dependencies do compile (pydantic-core, PyYAML, aiohttp ...): the check checks something
    assert {"pydantic-core", "pyyaml", "aiohttp"} <= compiled
    for name, pin in pins.items():
        if pin.compiled:
            assert set(pin.wheels) == {"x86_64", "aarch64"}, name
            (x86, x86_sha), (arm, arm_sha) = pin.wheels["x86_64"], pin.wheels["aarch64"]
            assert x86_sha != arm_sha, name
            assert all(t.endswith("_x86_64") for t in lock.wheel_platforms(x86)), x86
            assert all(t.endswith("_aarch64") for t in lock.wheel_platforms(arm)), arm
        else:
            assert set(pin.wheels) == {"any"}, name
        for filename, _ in pin.wheels.values():
            # the wheel is the pinned version of the pinned package, for CPython 3.11 or any Python 3
            dist, version, *_, python, abi, _ = filename.removesuffix(".whl").split("-")
            assert (lock.canonical(dist), version) == (name, pin.version), filename
            assert python in ("cp311", "py3", "py2.py3") and abi in ("cp311", "abi3", "none"), filename
    assert lock.incomplete(pins) == []


def test_a_lock_without_the_aarch64_wheel_is_refused(tmp_path: Path) -> None:
    text = (ROOT / "image" / "requirements.lock").read_text()
    line = next(x for x in text.splitlines() if x.startswith("pydantic_core=="))
    x86_only = re.sub(r" --hash=sha256:\w+(  #.*) aarch64=\S+$", r"\1", line)
    assert x86_only.count("--hash") == 1 and "aarch64" not in x86_only
    doctored = tmp_path / "requirements.lock"
    doctored.write_text(text.replace(line, x86_only))
    assert lock.incomplete(lock.read_lock(doctored)) == ["pydantic_core"]
    # a hash whose wheel the comment does not name, or a wheel named for the wrong machine, is an error
    doctored.write_text(text.replace(line, line.replace("aarch64=", "")))
    with pytest.raises(ValueError, match="one wheel per hash"):
        lock.read_lock(doctored)
    doctored.write_text(
        text.replace(line, line.replace("aarch64=", "x86_64=", 1).replace("x86_64=", "aarch64=", 1))
    )
    with pytest.raises(ValueError, match="is not a"):
        lock.read_lock(doctored)


def test_the_lock_check_passes() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "image" / "lock.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_each_machine_selects_only_its_own_wheels() -> None:
    for machine in lock.MACHINES:
        platforms = [o.split("=", 1)[1] for o in lock.target_options(machine) if o.startswith("--platform=")]
        assert platforms and all(p.endswith(f"_{machine}") for p in platforms)
        assert "--only-binary=:all:" in lock.target_options(machine)
    with pytest.raises(ValueError, match="riscv64"):
        lock.target_options("riscv64")
    assert (
        lock.wheel_machine("yarl-1.25.1-cp311-cp311-manylinux2014_aarch64.manylinux_2_17_aarch64.whl")
        == "aarch64"
    )
    assert lock.wheel_machine("idna-3.20-py3-none-any.whl") == "any"


def test_the_registry_free_builder_labels_the_image_with_the_host_machine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("nodetopo_build_oci_arch", ROOT / "image" / "build_oci.py")
    assert spec is not None and spec.loader is not None
    builder = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, builder)  # its dataclasses look their module up
    spec.loader.exec_module(builder)
    monkeypatch.setattr(builder.platform, "machine", lambda: "aarch64")
    assert builder.host_machine() == "aarch64"
    assert lock.OCI_ARCHITECTURES[builder.host_machine()] == "arm64"
    monkeypatch.setattr(builder.platform, "machine", lambda: "ppc64le")
    with pytest.raises(builder.BuildError, match="ppc64le"):
        builder.host_machine()
