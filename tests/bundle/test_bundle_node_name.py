"""One rule for the node a bundle describes, in every command that reads bundles: ``--node-name``,
else the host its manifest names, else the bundle's own name (directory, or archive without its
suffix); never the machine reading it, never ``$NODE_NAME`` (the pod running the command). And a
bundle's messages do not speak of "this host"."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from helpers import BUNDLES

from nodetopo.bundle import bundle_node_name, write_archive
from nodetopo.bundle.capture import write_manifest
from nodetopo.host import HostRoot


def _nodetopo(*args: str, stdin: str | None = None) -> str:
    env = {**os.environ, "NODE_NAME": "the-pod-s-node", "COLUMNS": "200"}
    done = subprocess.run(
        [sys.executable, "-m", "nodetopo", *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        input=stdin,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _bundles(tmp_path: Path) -> dict[str, Path]:
    """The same capture three ways: a plain directory, one with a manifest, an archive."""
    plain = tmp_path / "rack7-node3"
    shutil.copytree(BUNDLES / "pcie-4x-nvbridge", plain, symlinks=True)
    named = tmp_path / "copied-bundle"
    shutil.copytree(BUNDLES / "pcie-4x-nvbridge", named, symlinks=True)
    write_manifest(HostRoot(str(named)), named, "gpu-node-12")
    archive = tmp_path / "gpu-node-9.tar.gz"
    write_archive(plain, archive)
    return {"rack7-node3": plain, "gpu-node-12": named, "gpu-node-9": archive}


def test_the_rule(tmp_path: Path) -> None:
    assert {bundle_node_name(p) for p in _bundles(tmp_path).values()} == {
        "rack7-node3",
        "gpu-node-12",
        "gpu-node-9",
    }
    assert {k: bundle_node_name(p) for k, p in _bundles(tmp_path / "again").items()} == {
        k: k for k in ("rack7-node3", "gpu-node-12", "gpu-node-9")
    }


def test_every_command_names_a_bundles_node_alike(tmp_path: Path) -> None:
    for node, bundle in _bundles(tmp_path).items():
        table = _nodetopo("discover", "--from", str(bundle))
        assert table.startswith(f"Node {node} "), table[:80]
        obj = json.loads(_nodetopo("discover", "--from", str(bundle), "-o", "json"))
        assert obj["metadata"]["name"] == node
        expected = _nodetopo("expect", "--from-bundle", str(bundle), "-o", "json")
        assert node in expected
        assert (
            _nodetopo("discover", "--from", str(bundle), "--node-name", "given", "-o", "json").count(
                '"given"'
            )
            >= 1
        )


def test_a_bundles_messages_do_not_speak_of_this_host() -> None:
    for bundle in sorted(BUNDLES.iterdir()):
        if bundle.is_dir():
            shown = _nodetopo("discover", "--from", str(bundle)) + _nodetopo(
                "discover", "--from", str(bundle), "-o", "yaml"
            )
            assert "this host" not in shown, bundle.name
