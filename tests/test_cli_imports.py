"""A subcommand imports only what it needs: a cold ``nodetopo discover`` must not pay for the agent,
the API client, the extender or Ray (issue 15: cold start-up against lstopo)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BUNDLES = Path(__file__).parent / "fixtures" / "bundles"

#: modules (and their submodules) that `discover` has no use for
NOT_FOR_DISCOVER = (
    "nodetopo.agent",
    "nodetopo.extender",
    "nodetopo.ray",
    "nodetopo.publish",
    "prometheus_client",
    "kubernetes",
    "ray",
    "urllib.request",  # only the cloud metadata source's live fetch needs it
)

_PROBE = """\
import contextlib, io, json, sys
from nodetopo.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    code = main(sys.argv[1:])
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def _modules_after(argv: list[str]) -> tuple[int, list[str]]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True, check=True, timeout=120
    )
    report = json.loads(done.stdout.splitlines()[-1])
    return report["code"], report["modules"]


def _loaded(modules: list[str], roots: tuple[str, ...]) -> list[str]:
    return [m for m in modules if any(m == r or m.startswith(r + ".") for r in roots)]


@pytest.mark.parametrize("output", ["json", "table"])
def test_discover_imports_only_what_it_needs(output: str) -> None:
    code, modules = _modules_after(["discover", "--from", str(BUNDLES / "dgx-h100"), "-o", output])
    assert code == 0
    assert "nodetopo.discover" in modules  # it did discover
    assert _loaded(modules, NOT_FOR_DISCOVER) == []


def test_json_output_does_not_import_yaml() -> None:
    _, modules = _modules_after(["discover", "--from", str(BUNDLES / "dgx-h100"), "-o", "json"])
    assert _loaded(modules, ("yaml",)) == []


def test_help_still_lists_the_commands_in_their_own_modules() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "nodetopo", "--help"], capture_output=True, text=True, check=True
    ).stdout
    for command in ("agent", "extender", "ray"):
        assert f"    {command} " in out


def test_ray_from_a_nodetopology_file_builds_no_graph(tmp_path: Path) -> None:
    """Consumers read the resource: networkx (~0.1 s, ~17 MiB) is imported only where a graph is built."""
    body = subprocess.run(
        [sys.executable, "-m", "nodetopo", "discover", "--from", str(BUNDLES / "dgx-h100"), "-o", "json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (tmp_path / "nt.json").write_text(body)
    code, modules = _modules_after(["ray", "--nodetopology", str(tmp_path / "nt.json")])
    assert code == 0
    assert "nodetopo.ray.labels" in modules  # it did make the labels
    assert _loaded(modules, ("networkx",)) == []
    # nor any discovery source (the resource projection is all a consumer needs)
    assert _loaded(modules, ("nodetopo.sources", "nodetopo.discover")) == []
