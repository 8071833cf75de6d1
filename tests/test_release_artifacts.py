"""What a release publishes, built here with the commands the release workflow runs.

- the sdist and the wheel (``python -m build``, the `python` job): the wheel installs into a clean
  venv (its dependencies from PyPI, nothing from this checkout) and runs ``nodetopo discover`` and
  ``kubectl-ntopo --help``;
- the single-file ``kubectl-ntopo`` (``plugins/archive.py binary``, the `plugin` job), built in that
  venv as the workflow builds it: every command gives, byte for byte, what the console script gives,
  with no Python on PATH. The API server here is a small HTTP server holding NodeTopology objects
  made by ``nodetopo discover -o json --from`` (what is compared is the two programs, not the
  server; tests/kube/test_kubectl_ntopo.py runs the plugin against the real API server);
- its krew archive and the manifest (``plugins/archive.py archive`` then ``manifest``, the
  `plugin` and `github` jobs): the manifest names the archive the step wrote, with its sha256.

Needs PyPI (the clean venv's dependencies and PyInstaller) and, on Linux, binutils (PyInstaller reads
shared libraries with objdump).
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import shlex
import subprocess
import sys
import tarfile
import threading
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import BUNDLES

import nodetopo

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
RELEASE = ROOT / ".github" / "workflows" / "release.yml"
ARCHIVE = ROOT / "plugins" / "archive.py"

VERSION = nodetopo.__version__
TAG = f"v{VERSION}"


def _run(
    argv: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: int = 600
) -> str:
    done = subprocess.run(
        argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"{shlex.join(argv)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _clean_env(home: Path) -> dict[str, str]:
    """No PYTHONPATH, no virtualenv of the test run, a HOME of its own."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "KUBECONFIG")}
    env["HOME"] = str(home)
    env["PATH"] = "/usr/local/bin:/usr/bin:/bin"
    return env


def _job_script(job: str) -> str:
    workflow = yaml.safe_load(RELEASE.read_text(encoding="utf-8"))
    return "\n".join(str(step.get("run", "")) for step in workflow["jobs"][job]["steps"])


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``python -m build``, as the `python` job runs it: the sdist, and the wheel built from it."""
    assert "python -m build --outdir dist ." in _job_script("python")
    out = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)], timeout=300)
    return out


@pytest.fixture(scope="module")
def venv(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clean venv with the wheel (and its dependencies from PyPI), then the plugin's build tools."""
    where = tmp_path_factory.mktemp("clean") / "venv"
    _run([sys.executable, "-m", "venv", str(where)])
    [wheel] = dist.glob("*.whl")
    _run([str(where / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check", str(wheel)])
    return where


@pytest.fixture(scope="module")
def binary(venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``plugins/archive.py binary`` in the clean venv, as the `plugin` job runs it."""
    script = _job_script("plugin")
    assert "pip install . -r plugins/build-requirements.txt" in script
    assert "plugins/archive.py binary --out build/plugin" in script
    pip = [str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check"]
    _run([*pip, "-r", str(ROOT / "plugins" / "build-requirements.txt")])
    out = tmp_path_factory.mktemp("plugin")
    printed = _run([str(venv / "bin" / "python"), str(ARCHIVE), "binary", "--out", str(out)], timeout=900)
    assert printed.strip() == str(out / "kubectl-ntopo")
    return out / "kubectl-ntopo"


# ----------------------------------------------------------------------------------------------
# sdist and wheel
# ----------------------------------------------------------------------------------------------


def test_sdist_and_wheel_carry_the_package_its_scripts_and_dependencies(dist: Path) -> None:
    assert sorted(p.name for p in dist.iterdir()) == [
        f"nodetopo-{VERSION}-py3-none-any.whl",
        f"nodetopo-{VERSION}.tar.gz",
    ]
    with tarfile.open(dist / f"nodetopo-{VERSION}.tar.gz") as sdist:
        names = set(sdist.getnames())
    top = f"nodetopo-{VERSION}"
    assert {f"{top}/{n}" for n in ("pyproject.toml", "LICENSE", "README.md", "nodetopo/__init__.py")} <= names
    source = {str(p.relative_to(ROOT)) for p in (ROOT / "nodetopo").rglob("*.py")}
    assert {n.removeprefix(f"{top}/") for n in names if n.endswith(".py")} >= source
    with zipfile.ZipFile(dist / f"nodetopo-{VERSION}-py3-none-any.whl") as wheel:
        files = set(wheel.namelist())
        metadata = wheel.read(f"nodetopo-{VERSION}.dist-info/METADATA").decode()
        scripts = wheel.read(f"nodetopo-{VERSION}.dist-info/entry_points.txt").decode()
    assert {n for n in files if n.endswith(".py")} == source
    assert "nodetopo/py.typed" in files
    assert "nodetopo=nodetopo.cli:main" in scripts.splitlines()
    assert "kubectl-ntopo=nodetopo.kubectl.cli:main" in scripts.splitlines()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requires = {
        line.removeprefix("Requires-Dist: ")
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist: ")
    }
    assert set(project["dependencies"]) <= requires
    assert f"Version: {VERSION}" in metadata.splitlines()


def test_the_wheel_installs_in_a_clean_venv_and_runs(venv: Path, tmp_path: Path) -> None:
    env = _clean_env(tmp_path)
    where = _run(
        [str(venv / "bin" / "python"), "-c", "import nodetopo; print(nodetopo.__file__)"],
        env=env,
        cwd=tmp_path,
    )
    assert Path(where.strip()).is_relative_to(venv), "the clean venv imported nodetopo from elsewhere"
    live = _run([str(venv / "bin" / "nodetopo"), "discover"], env=env, cwd=tmp_path)
    assert live.startswith("Node ")
    replay = json.loads(
        _run(
            [str(venv / "bin" / "nodetopo"), "discover", "--from", str(BUNDLES / "dgx-h100"), "-o", "json"],
            env=env,
        )
    )
    assert len(replay["status"]["gpus"]) == 8 and replay["status"]["nvlinkIslands"][0]["gpus"] == list(
        range(8)
    )
    helped = _run([str(venv / "bin" / "kubectl-ntopo"), "--help"], env=env, cwd=tmp_path)
    assert helped.startswith("usage: kubectl ntopo")
    assert (
        _run([str(venv / "bin" / "kubectl-ntopo"), "--version"], env=env).strip()
        == f"kubectl-ntopo (nodetopo) {VERSION}"
    )


# ----------------------------------------------------------------------------------------------
# The single-file kubectl-ntopo
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def api(venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A kubeconfig for an HTTP server answering GET of NodeTopology objects (one and the list)."""
    objects: dict[str, Any] = {}
    for machine in ("dgx-h100", "pcie-4x-nvbridge", "gpu-no-driver"):
        text = _run(
            [
                str(venv / "bin" / "nodetopo"),
                "discover",
                "--from",
                str(BUNDLES / machine),
                "-o",
                "json",
                "--node-name",
                machine,
            ]
        )
        objects[machine] = json.loads(text)
    prefix = "/apis/nodetopo.io/v1alpha1/nodetopologies"

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == prefix:
                body: Any = {
                    "apiVersion": "nodetopo.io/v1alpha1",
                    "kind": "NodeTopologyList",
                    "metadata": {},
                    "items": list(objects.values()),
                }
            elif path.startswith(prefix + "/") and path[len(prefix) + 1 :] in objects:
                body = objects[path[len(prefix) + 1 :]]
            else:
                body = {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "status": "Failure",
                    "reason": "NotFound",
                    "code": 404,
                }
            data = json.dumps(body).encode()
            self.send_response(int(body.get("code", 200)))
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            del format, args

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    kubeconfig = tmp_path_factory.mktemp("laptop") / "config"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{server.server_port}"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "here", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "here",
            }
        )
    )
    try:
        yield kubeconfig
    finally:
        server.shutdown()
        server.server_close()


COMMANDS = (
    ["--version"],
    ["--help"],
    ["get", "--help"],
    ["nodes"],
    ["nodes", "-o", "json"],
    ["nodes", "--island-size", "8", "-o", "name"],
    ["get", "dgx-h100"],
    ["get", "pcie-4x-nvbridge", "-o", "yaml"],
    ["get", "gpu-no-driver", "-o", "json"],
    ["get", "dgx-h100", "-o", "dot"],
    ["matrix", "dgx-h100"],
    ["matrix", "pcie-4x-nvbridge"],
    ["get", "no-such-node"],
    ["get", "dgx-h100", "--context", "missing"],
)


def test_single_file_plugin_does_what_the_console_script_does_without_python(
    binary: Path, venv: Path, api: Path, tmp_path: Path
) -> None:
    env = {"HOME": str(tmp_path), "KUBECONFIG": str(api), "COLUMNS": "200", "PATH": "/nonexistent"}
    script_env = {**env, "PATH": str(venv / "bin")}
    for args in COMMANDS:
        mine = subprocess.run(
            [str(binary), *args], capture_output=True, text=True, env=env, timeout=120, check=False
        )
        theirs = subprocess.run(
            [str(venv / "bin" / "kubectl-ntopo"), *args],
            capture_output=True,
            text=True,
            env=script_env,
            timeout=120,
            check=False,
        )
        shown = shlex.join(["kubectl-ntopo", *args])
        assert (mine.returncode, mine.stdout, mine.stderr) == (
            theirs.returncode,
            theirs.stdout,
            theirs.stderr,
        ), shown
    # the two failures are failures (a 404, an unknown context), one line each
    missing = subprocess.run(
        [str(binary), "get", "no-such-node"], capture_output=True, text=True, env=env, check=False
    )
    assert missing.returncode == 1 and missing.stderr.count("\n") == 1 and "not found" in missing.stderr
    # band runs the model's flows: the executable leaves networkx out and says so, in one line
    band = subprocess.run(
        [str(binary), "band", "dgx-h100"], capture_output=True, text=True, env=env, check=False
    )
    assert (band.returncode, band.stdout) == (1, "") and band.stderr.count("\n") == 1
    assert "needs networkx, and this kubectl-ntopo is built without it" in band.stderr


# ----------------------------------------------------------------------------------------------
# The krew archive and manifest
# ----------------------------------------------------------------------------------------------


def test_the_krew_manifest_names_the_archive_the_workflow_builds_with_its_sha256(
    binary: Path, venv: Path, tmp_path: Path
) -> None:
    plugin, github = _job_script("plugin"), _job_script("github")
    assert "plugins/archive.py archive --binary build/plugin/kubectl-ntopo" in plugin
    assert "--out-dir dist" in plugin and '--platform "$PLATFORM"' in plugin
    assert (
        "plugins/archive.py manifest --out dist/ntopo.yaml" in github
        and "dist/kubectl-ntopo-*.tar.gz" in github
    )
    python = str(venv / "bin" / "python")
    dist = tmp_path / "dist"
    printed = _run([python, str(ARCHIVE), "archive", "--binary", str(binary), "--out-dir", str(dist)]).split()
    [archive] = dist.glob("kubectl-ntopo-*.tar.gz")
    assert printed == [archive.name, hashlib.sha256(archive.read_bytes()).hexdigest()]
    machine = {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64"}[os.uname().machine]
    assert archive.name == f"kubectl-ntopo-{TAG}-{sys.platform}-{machine}.tar.gz"
    first = archive.read_bytes()  # the same executable gives the same archive
    _run([python, str(ARCHIVE), "archive", "--binary", str(binary), "--out-dir", str(dist)])
    assert archive.read_bytes() == first
    with tarfile.open(archive) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert set(members) == {"kubectl-ntopo", "LICENSE"}
        assert members["kubectl-ntopo"].mode == 0o755 and members["kubectl-ntopo"].mtime == 0
        packed = tar.extractfile("kubectl-ntopo")
        assert packed is not None and packed.read() == binary.read_bytes()

    _run([python, str(ARCHIVE), "manifest", "--out", str(dist / "ntopo.yaml"), str(archive)])
    manifest = yaml.safe_load((dist / "ntopo.yaml").read_text())
    template = yaml.safe_load((ROOT / "plugins" / "ntopo.yaml").read_text())
    assert {k: v for k, v in manifest["spec"].items() if k != "platforms"} == {
        k: v for k, v in template["spec"].items() if k != "platforms"
    }
    assert manifest["metadata"] == template["metadata"] and manifest["spec"]["version"] == TAG
    [entry] = manifest["spec"]["platforms"]
    assert entry["uri"] == f"https://github.com/nodetopo/nodetopo/releases/download/{TAG}/{archive.name}"
    assert entry["sha256"] == hashlib.sha256(archive.read_bytes()).hexdigest()
    assert entry["selector"] == {"matchLabels": {"os": sys.platform, "arch": machine}}
    assert entry["bin"] == "kubectl-ntopo" and {f["from"] for f in entry["files"]} == set(members)


def test_the_manifest_step_refuses_an_archive_of_another_version_or_name(venv: Path, tmp_path: Path) -> None:
    for name in ("kubectl-ntopo-v9.9.9-linux-amd64.tar.gz", "kubectl-ntopo-linux-amd64.tar.gz"):
        stray = tmp_path / name
        stray.write_bytes(b"")
        done = subprocess.run(
            [
                str(venv / "bin" / "python"),
                str(ARCHIVE),
                "manifest",
                "--out",
                str(tmp_path / "m.yaml"),
                str(stray),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode != 0 and name in done.stderr
        assert not (tmp_path / "m.yaml").exists()
