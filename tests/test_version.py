"""The version is written once (``nodetopo.__version__``); everything that repeats it agrees.

Also: the LICENSE is the Apache License 2.0 the package metadata and the image label declare, the
changelog has a section for the version, and the krew manifest template carries the version.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from pathlib import Path

import yaml

import nodetopo

ROOT = Path(__file__).resolve().parent.parent
VERSION = nodetopo.__version__
IMAGE = re.compile(r"ghcr\.io/nodetopo/nodetopo:([\w.+-]+)")


def test_version_is_a_release_version() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+", VERSION)


def test_pyproject_reads_the_version_from_the_package() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "version" not in project and "version" in project["dynamic"]
    # flit reads it without importing the package: a plain string assignment
    assert re.search(
        rf'^__version__ = "{re.escape(VERSION)}"$', (ROOT / "nodetopo/__init__.py").read_text(), re.M
    )


def test_image_label_and_every_image_tag_use_the_version() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert f'org.opencontainers.image.version="{VERSION}"' in dockerfile
    assert 'org.opencontainers.image.licenses="Apache-2.0"' in dockerfile
    shipped = [
        *ROOT.glob("deploy/**/*.yaml"),
        *ROOT.glob("charts/**/*.yaml"),
        ROOT / "image" / "build_oci.py",
    ]
    tags = {(str(p.relative_to(ROOT)), tag) for p in shipped for tag in IMAGE.findall(p.read_text())}
    assert len(tags) >= 3  # the DaemonSet, the extender and the summary controller at least
    assert {t for t in tags if t[1] != VERSION} == set()


def test_changelog_has_the_version_and_an_unreleased_section() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    assert "## [Unreleased]" in text
    assert re.search(rf"^## \[{re.escape(VERSION)}\] - \d{{4}}-\d{{2}}-\d{{2}}$", text, re.M)


def test_license_is_the_apache_license_2_0() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert text.split("\n", 3)[1].strip() == "Apache License"
    assert "Version 2.0, January 2004" in text and "END OF TERMS AND CONDITIONS" in text
    # the text apache.org publishes at /licenses/LICENSE-2.0.txt, byte for byte
    assert hashlib.md5(text.encode()).hexdigest() == "3b83ef96387f14655fc854ddc3c6bd57"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == {"text": "Apache-2.0"}


def test_krew_manifest_template_has_the_version() -> None:
    """The template plugins/archive.py fills in (tests/test_release_artifacts.py checks the filling)."""
    manifest = yaml.safe_load((ROOT / "plugins" / "ntopo.yaml").read_text())
    assert manifest["kind"] == "Plugin" and manifest["metadata"]["name"] == "ntopo"
    assert manifest["spec"]["version"] == f"v{VERSION}"
    assert manifest["spec"]["platforms"] == []
