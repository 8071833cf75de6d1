"""A subcommand imports only what it needs: a cold ``nodetopo discover`` must not pay for the agent,
the API client, the extender or Ray (issue 15: cold start-up against lstopo)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import BUNDLES

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
    "nodetopo.sources.nvml.live",  # a bundle's NVML is a replay: no ctypes adapter
    "nodetopo.sources.nvml.dump",  # only `capture` dumps NVML
    "ctypes",
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
    assert "nodetopo.topology.discover" in modules  # it did discover
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
    assert _loaded(modules, ("nodetopo.sources", "nodetopo.topology.discover")) == []


#: modules `probe` (an init container in every GPU pod) has no use for: discovery, the graph, the
#: publishers (it only reads its NodeTopology and posts an Event through ``nodetopo.kube``)
NOT_FOR_PROBE = (
    "nodetopo.topology.discover",
    "nodetopo.sources",
    "nodetopo.topology.graph",
    "nodetopo.topology.derive",
    "nodetopo.topology.nvlink",
    "nodetopo.topology.preferred",
    "nodetopo.agent",
    "nodetopo.ray",
    "nodetopo.publish.publisher",
    "nodetopo.publish.nodetopology",
    "nodetopo.publish.node_labels",
    "nodetopo.publish.nfd",
    "nodetopo.perf",  # the benchmark tools' parsers: imported when a collective ran, not before
    # the per-source facts and the link readings: a published object's reader builds none of them
    "nodetopo.model.facts",
    "nodetopo.model.readings",
    "networkx",
    "prometheus_client",
    "kubernetes",
)


def _nodetopology_file(tmp_path: Path) -> Path:
    body = subprocess.run(
        [sys.executable, "-m", "nodetopo", "discover", "--from", str(BUNDLES / "dgx-h100"), "-o", "json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    path = tmp_path / "nt.json"
    path.write_text(body)
    return path


def test_probe_from_a_file_imports_no_client_and_no_discovery(tmp_path: Path) -> None:
    (tmp_path / "root/dev").mkdir(parents=True)
    code, modules = _modules_after(
        [
            *("probe", "--root", str(tmp_path / "root")),
            *("--nodetopology", str(_nodetopology_file(tmp_path))),
            *("--no-event", "--termination-log", ""),
        ]
    )
    assert code == 0
    assert "nodetopo.probe.checks" in modules  # it did check
    assert _loaded(modules, (*NOT_FOR_PROBE, "nodetopo.publish", "yaml")) == []


def test_probe_through_the_api_imports_the_client_only(tmp_path: Path) -> None:
    """Reading the NodeTopology and posting the Event need the client (``nodetopo.kube``); importing
    it must not load any publisher (``nodetopo/publish/``) nor the official client."""
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
    }
    (tmp_path / "kubeconfig").write_text(json.dumps(kubeconfig))
    (tmp_path / "root/dev").mkdir(parents=True)
    code, modules = _modules_after(
        [
            *("probe", "--root", str(tmp_path / "root"), "--kubeconfig", str(tmp_path / "kubeconfig")),
            *("--node-name", "n1", "--pod-name", "p", "--pod-namespace", "d", "--timeout", "2"),
            *("--termination-log", ""),
        ]
    )
    assert code == 0  # undeclared and nothing promised: warnings and skips, no failure
    assert "nodetopo.kube.session" in modules  # it did try the API
    assert _loaded(modules, NOT_FOR_PROBE) == []


def test_the_in_cluster_client_reads_no_yaml(tmp_path: Path) -> None:
    """In a pod the probe's credentials are the service account's files, not a kubeconfig: no YAML
    parser is loaded for them (PyYAML is imported only to read a kubeconfig file)."""
    (tmp_path / "token").write_text("t")
    (tmp_path / "ca.crt").write_text("")
    script = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from nodetopo.kube.config import in_cluster_access\n"
        "from nodetopo.kube.session import ApiSession\n"
        "from nodetopo.kube.transport import KubeConnection\n"
        "env = {'KUBERNETES_SERVICE_HOST': '127.0.0.1', 'KUBERNETES_SERVICE_PORT': '1'}\n"
        "access = in_cluster_access(env, directory=Path(sys.argv[1]))\n"
        "print(json.dumps({'server': access.server, 'modules': sorted(sys.modules)}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, check=True, timeout=60
    )
    report = json.loads(done.stdout)
    assert report["server"] == "https://127.0.0.1:1"
    assert _loaded(report["modules"], ("yaml", "nodetopo.publish.publisher", "nodetopo.publish.nfd")) == []
