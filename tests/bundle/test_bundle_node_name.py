"""One rule for the node a bundle describes, in every command that reads bundles: ``--node-name``,
else the host its manifest names, else the bundle's own name (directory, or archive without its
suffix); never the machine reading it, never ``$NODE_NAME`` (the pod running the command):
discover, publish, expect, export, ray, and an agent's dry run without a node. And a bundle's
messages do not speak of "this host"."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import BUNDLES

import nodetopo.publish
from nodetopo.bundle import bundle_node_name, write_archive
from nodetopo.bundle.capture import write_manifest
from nodetopo.host import HostRoot


def _nodetopo(*args: str, stdin: str | None = None, node_name: str | None = "the-pod-s-node") -> str:
    env = {k: v for k, v in os.environ.items() if k != "NODE_NAME"} | {"COLUMNS": "200"}
    if node_name is not None:
        env["NODE_NAME"] = node_name
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


def test_publish_from_a_bundle_names_the_bundles_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`publish --from B` publishes for B's node (as discover names it), not for $NODE_NAME, and
    needs no --node-name; --node-name still wins. Without any of them it is a usage error."""
    published: list[str] = []

    def run_publish(body: dict[str, Any], labels: dict[str, str], *, node_name: str, **_: Any) -> Any:
        from nodetopo.publish.node_labels import LabelOutcome
        from nodetopo.publish.nodetopology import ApplyOutcome
        from nodetopo.publish.publisher import PublishOutcome

        assert body["metadata"]["name"] == node_name
        published.append(node_name)
        return PublishOutcome(
            topology=ApplyOutcome(name=node_name, written=True),
            labels=LabelOutcome(written=True, applied=labels),
        )

    monkeypatch.setattr(nodetopo.publish, "run_publish", run_publish)
    from nodetopo.cli import main

    bundles = _bundles(tmp_path)
    monkeypatch.delenv("NODE_NAME", raising=False)
    assert main(["publish", "--from", str(bundles["gpu-node-12"])]) == 0
    monkeypatch.setenv("NODE_NAME", "the-pod-s-node")
    for bundle in bundles.values():
        assert main(["publish", "--from", str(bundle)]) == 0
    assert main(["publish", "--from", str(bundles["gpu-node-9"]), "--node-name", "given"]) == 0
    assert main(["publish"]) == 0  # the live host: $NODE_NAME
    assert published == ["gpu-node-12", *bundles, "given", "the-pod-s-node"]
    monkeypatch.delenv("NODE_NAME")
    assert main(["publish"]) == 2
    assert published[-1] == "the-pod-s-node"


def test_an_agent_dry_run_without_a_node_names_the_bundles_node(tmp_path: Path) -> None:
    """The agent publishes for the Node it runs on ($NODE_NAME); a dry run with none names the
    bundle's node, never the machine reading it."""
    for node, bundle in _bundles(tmp_path).items():
        shown = _nodetopo(
            "agent", "--dry-run", "--once", "--from", str(bundle), "--listen", "", node_name=None
        )
        assert f"\n  name: {node}\n" in shown, shown[:300]
    shown = _nodetopo("agent", "--dry-run", "--once", "--from", str(bundle), "--listen", "")
    assert "\n  name: the-pod-s-node\n" in shown


def test_a_bundles_messages_do_not_speak_of_this_host() -> None:
    for bundle in sorted(BUNDLES.iterdir()):
        if bundle.is_dir():
            shown = _nodetopo("discover", "--from", str(bundle)) + _nodetopo(
                "discover", "--from", str(bundle), "-o", "yaml"
            )
            for live in ("this host", "is not running", "not installed"):  # the machine reading it
                assert live not in shown, (bundle.name, live)
