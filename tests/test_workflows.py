"""The GitHub Actions workflows (.github/workflows/) pass the real actionlint and say what a release needs.

actionlint is built from its Go module (tests/tools-actionlint, its own module so the control plane's
cache key is untouched) by tests/tools-actionlint/build.sh. Nothing here can run a workflow: these
tests check the files statically (actionlint's syntax, expression, action-input and job-graph checks,
and the `run:` scripts through shellcheck, which must be installed) and that the release builds what
the issue asks.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = ROOT / ".github" / "workflows"
BUILD = ROOT / "tests" / "tools-actionlint" / "build.sh"


@pytest.fixture(scope="module")
def actionlint() -> Path:
    done = subprocess.run([str(BUILD)], capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        pytest.fail(f"actionlint could not be built (needs Go and the Go module proxy): {done.stderr}")
    return Path(done.stdout.strip().splitlines()[-1]) / "actionlint"


@pytest.fixture(scope="module")
def shellcheck() -> str:
    """actionlint checks `run:` scripts with shellcheck, and silently skips them without it."""
    path = shutil.which("shellcheck")
    if path is None:
        pytest.fail(
            "shellcheck is not installed (Debian package shellcheck): actionlint needs it for run: scripts"
        )
    return path


def _load(name: str) -> dict[Any, Any]:
    body = yaml.safe_load((WORKFLOWS / name).read_text(encoding="utf-8"))
    assert isinstance(body, dict)
    return body


def _steps(workflow: dict[Any, Any]) -> list[dict[str, Any]]:
    return [step for job in workflow["jobs"].values() for step in job.get("steps", [])]


def test_actionlint_passes_every_workflow(actionlint: Path, shellcheck: str) -> None:
    files = sorted(WORKFLOWS.glob("*.yml"))
    assert {p.name for p in files} >= {"release.yml", "ci.yml"}
    command = [str(actionlint), "-no-color", f"-shellcheck={shellcheck}", *map(str, files)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_actionlint_rejects_a_broken_workflow(actionlint: Path, tmp_path: Path) -> None:
    """The checker this suite relies on does find errors: an unknown context and a missing runs-on."""
    bad = tmp_path / "bad.yml"
    bad.write_text("on: push\njobs:\n  x:\n    steps:\n      - run: echo ${{ github.nope.x }}\n")
    command = [str(actionlint), "-no-color", str(bad)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "runs-on" in done.stdout


def test_actionlint_checks_run_scripts_with_shellcheck(
    actionlint: Path, shellcheck: str, tmp_path: Path
) -> None:
    bad = tmp_path / "unquoted.yml"
    bad.write_text(
        "on: push\njobs:\n  x:\n    runs-on: ubuntu-24.04\n    steps:\n      - run: rm -rf $DIR/x\n"
    )
    command = [str(actionlint), "-no-color", f"-shellcheck={shellcheck}", str(bad)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    assert done.returncode == 1 and "SC2086" in done.stdout, done.stdout + done.stderr


def test_release_runs_on_a_tag_and_builds_both_architectures_from_the_dockerfile() -> None:
    release = _load("release.yml")
    triggers = release[True]  # YAML 1.1 reads the key `on` as a boolean
    assert set(triggers) == {"push"} and triggers["push"]["tags"]
    builds = [s for s in _steps(release) if str(s.get("uses", "")).startswith("docker/build-push-action@")]
    assert len(builds) == 1
    build = builds[0]["with"]
    assert build["file"] == "Dockerfile" and build["context"] == "."
    assert set(build["platforms"].split(",")) == {"linux/amd64", "linux/arm64"}
    assert build["push"] is True
    # the Dockerfile is the locked recipe: hashes from image/requirements.lock, packages from the list
    dockerfile = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    assert "--require-hashes" in dockerfile and "image/requirements.lock" in dockerfile
    assert "image/debian-packages.txt" in dockerfile


def test_release_packages_and_pushes_the_chart_after_the_image() -> None:
    release = _load("release.yml")
    chart = release["jobs"]["chart"]
    assert "image" in chart["needs"]
    script = "\n".join(str(s.get("run", "")) for s in chart["steps"])
    assert "helm package charts/nodetopo" in script
    assert "helm push" in script


def test_release_signs_the_image_it_pushed_by_digest_with_its_sbom() -> None:
    image = _load("release.yml")["jobs"]["image"]
    [build] = [s for s in image["steps"] if str(s.get("uses", "")).startswith("docker/build-push-action@")]
    assert build["with"]["sbom"] is True and build["with"]["provenance"]
    assert image["permissions"]["id-token"] == "write"  # keyless: the workflow's OIDC identity
    names = [str(s.get("uses", s.get("name", ""))) for s in image["steps"]]
    sign = next(i for i, s in enumerate(image["steps"]) if "cosign sign" in str(s.get("run", "")))
    assert sign > names.index(build["uses"]) and any(
        n.startswith("sigstore/cosign-installer@") for n in names
    )
    step = image["steps"][sign]
    assert step["env"]["DIGEST"] == "${{ steps." + build["id"] + ".outputs.digest }}"
    assert '"${IMAGE}@${DIGEST}"' in step["run"]  # the digest pushed, never a movable tag


def test_release_builds_the_python_packages_the_plugin_for_four_platforms_and_publishes_last() -> None:
    release = _load("release.yml")
    jobs = release["jobs"]
    assert "python -m build" in "\n".join(str(s.get("run", "")) for s in jobs["python"]["steps"])
    platforms = {
        entry["platform"]: entry["runner"] for entry in jobs["plugin"]["strategy"]["matrix"]["include"]
    }
    assert set(platforms) == {"linux-amd64", "linux-arm64", "darwin-amd64", "darwin-arm64"}
    assert platforms["linux-arm64"].endswith("-arm") and "intel" in platforms["darwin-amd64"]
    # nothing is published to PyPI (which cannot be undone) unless every artifact was built
    assert set(jobs["pypi"]["needs"]) >= {"python", "image", "chart", "plugin"}
    assert any(
        str(s.get("uses", "")).startswith("pypa/gh-action-pypi-publish@") for s in jobs["pypi"]["steps"]
    )
    assert jobs["pypi"]["permissions"] == {"id-token": "write"}
    github = "\n".join(str(s.get("run", "")) for s in jobs["github"]["steps"])
    assert (
        "plugins/archive.py manifest" in github and "gh release create" in github and "SHA256SUMS" in github
    )
    assert set(jobs["github"]["needs"]) >= {"python", "chart", "plugin"}
    assert jobs["github"]["permissions"] == {"contents": "write"}
    # only the jobs that publish get write permissions; the default stays read-only
    assert release["permissions"] == {"contents": "read"}
    for name in ("version", "python", "plugin"):
        assert "permissions" not in jobs[name], name


def test_release_refuses_a_tag_that_is_not_the_code_version() -> None:
    script = "\n".join(str(s.get("run", "")) for s in _load("release.yml")["jobs"]["version"]["steps"])
    assert "nodetopo/__init__.py" in script and "exit 1" in script
    init = (ROOT / "nodetopo" / "__init__.py").read_text(encoding="utf-8")
    assert '__version__ = "' in init  # the line the sed expression reads


def test_ci_runs_the_projects_entry_point() -> None:
    runs = [str(s.get("run", "")) for s in _steps(_load("ci.yml"))]
    assert any(".ci/run" in r for r in runs)
    assert (ROOT / ".ci" / "run").is_file()
