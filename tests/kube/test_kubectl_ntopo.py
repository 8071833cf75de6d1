"""`kubectl ntopo` as a user runs it: the console script pip installs, and the real kubectl finding it
on PATH as a plugin, against the real API server holding NodeTopology objects published from
fixture bundles.

It also produces the "Look at a node from your laptop" example of docs/kubectl-ntopo.md: run with
``-s`` to see the real output (`python -m pytest tests/kube/test_kubectl_ntopo.py -s`).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from helpers import BUNDLES

from .cluster import LocalCluster

pytestmark = pytest.mark.k8s

ROOT = Path(__file__).resolve().parent.parent.parent

MACHINES = ("dgx-h100", "pcie-4x-nvbridge", "pcie-8x-2socket", "gpu-no-driver")


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """This checkout installed by pip into a fresh directory (the real console scripts); the env that
    runs them: that directory's bin first on PATH, the directory the only nodetopo on sys.path.

    ``--target``, not ``--prefix``: pip installing with ``--prefix`` first uninstalls the nodetopo of
    the environment running the tests (the developer's ``pip install -e .``), which took the
    ``nodetopo`` command away from whoever ran ``make test``."""
    target = tmp_path_factory.mktemp("target")
    before = _installed_here()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--disable-pip-version-check",
            "--target",
            str(target),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"pip install of this checkout failed:\n{done.stderr}"
    assert _installed_here() == before, "installing the plugin changed the test environment's nodetopo"
    assert (target / "bin" / "kubectl-ntopo").exists(), "pyproject.toml declares no kubectl-ntopo script"
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "NODETOPO_KUBE_CONTEXT")}
    env.update(
        PATH=f"{target / 'bin'}{os.pathsep}{env.get('PATH', '')}", PYTHONPATH=str(target), COLUMNS="200"
    )
    env["HOME"] = str(target)  # no ~/.kube/config of whoever runs the tests
    return env


def _installed_here() -> str | None:
    """The nodetopo distribution of the environment running the tests, as a fresh process sees it."""
    done = subprocess.run(
        [sys.executable, "-c", "import importlib.metadata as m; print(m.version('nodetopo'))"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd="/",
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    return done.stdout.strip() if done.returncode == 0 else None


@pytest.fixture(scope="module")
def published(cluster: LocalCluster) -> Iterator[dict[str, str]]:
    """machine → node name: a Node and its NodeTopology published by `nodetopo publish --from`."""
    suffix = uuid.uuid4().hex[:6]
    names = {m: f"ntopo-{m}-{suffix}" for m in MACHINES}
    try:
        for machine, node in names.items():
            _publish(cluster, machine, node)
        yield names
    finally:
        for node in names.values():
            _unpublish(cluster, node)


def _publish(cluster: LocalCluster, machine: str, node: str) -> None:
    """A Node named ``node`` and its NodeTopology, published by `nodetopo publish --from` the bundle."""
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}
    status, answer = cluster.request("POST", "/api/v1/nodes", body=body)
    assert status == 201, answer
    done = cluster.publish_bundle(BUNDLES / machine, node)
    assert done.returncode == 0, done.stderr


def _unpublish(cluster: LocalCluster, node: str) -> None:
    cluster.request("DELETE", f"/apis/nodetopo.io/v1alpha1/nodetopologies/{node}")
    cluster.request("DELETE", f"/api/v1/nodes/{node}")


@pytest.fixture(scope="module")
def kubeconfig(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three contexts as a laptop has them: the current one has no RBAC grant (``nobody``), ``admin``
    a static token, ``exec`` an exec credential plugin (a script printing an ExecCredential)."""
    directory = tmp_path_factory.mktemp("laptop")
    plugin = directory / "credential-helper"
    credential = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "status": {"token": cluster.users["admin"].token},
    }
    plugin.write_text(f"#!/bin/sh\ncat <<'END'\n{json.dumps(credential)}\nEND\n")
    plugin.chmod(0o700)
    cluster_entry = {"server": cluster.server, "certificate-authority": str(cluster.ca_file)}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": cluster_entry}],
        "users": [
            {"name": "nobody", "user": {"token": cluster.users["nobody"].token}},
            {"name": "admin", "user": {"token": cluster.users["admin"].token}},
            {
                "name": "exec",
                "user": {
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1",
                        "command": str(plugin),
                        "interactiveMode": "Never",
                    }
                },
            },
        ],
        "contexts": [
            {"name": name, "context": {"cluster": "test", "user": name}}
            for name in ("nobody", "admin", "exec")
        ],
        "current-context": "nobody",
    }
    path = directory / "config"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def _ntopo(
    env: dict[str, str], *args: str, kubectl: Path | None = None, **extra: str
) -> subprocess.CompletedProcess[str]:
    argv = [str(kubectl), "ntopo", *args] if kubectl else ["kubectl-ntopo", *args]
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=120, check=False, env={**env, **extra}
    )


def _rows(output: str, names: dict[str, str]) -> dict[str, list[str]]:
    mine = set(names.values())
    return {
        line.split()[0]: line.split()
        for line in output.splitlines()
        if line.split()[:1] and line.split()[0] in mine
    }


def test_get_renders_the_published_node_as_discover_renders_the_bundle(
    installed: dict[str, str], published: dict[str, str], kubeconfig: Path
) -> None:
    node = published["dgx-h100"]
    done = _ntopo(installed, "get", node, "--kubeconfig", str(kubeconfig), "--context", "admin")
    assert done.returncode == 0, done.stderr
    print(f"\n$ kubectl ntopo get {node}\n{done.stdout}")
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"Node {node}   Ready: True   GPUs: 8 x NVIDIA H100 80GB HBM3")
    assert "NVLink islands: 1x8" in lines[0] and "worst GPU→NIC: PIX" in lines[0]
    assert lines[1].strip().startswith(f"NodeTopology/{node} (agent 0.1.0, Ready True since ")
    # The same renderer: every section discover prints for the bundle, except the PCIe tree, which
    # the object does not carry, is printed identically from the object.
    discover = subprocess.run(
        [
            sys.executable,
            "-m",
            "nodetopo",
            "discover",
            "--from",
            str(BUNDLES / "dgx-h100"),
            "--node-name",
            node,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env={**installed, "PYTHONPATH": str(ROOT)},
    ).stdout
    ours, theirs = _sections(done.stdout), _sections(discover)
    assert set(theirs) - set(ours) == {"PCIe roots (endpoints under each host bridge)"}
    for title in ours:
        if title.startswith("Node "):  # the summary, then where the facts come from
            assert ours[title][0] == theirs[title][0]
            assert theirs[title][1].strip().startswith("bundle ")
        elif title == "Conditions":  # a condition whose source published no status of its own is
            assert set(ours[title]) <= set(theirs[title])  # in the object only as that source's status
        else:
            assert ours[title] == theirs[title], title


def _sections(text: str) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    title = ""
    for block in text.split("\n\n"):
        lines = block.splitlines()
        if lines and not lines[0].startswith(" "):
            title = lines[0]
        sections[title if title != lines[0] else lines[0]] = lines
    return sections


def test_get_output_formats(installed: dict[str, str], published: dict[str, str], kubeconfig: Path) -> None:
    node = published["pcie-4x-nvbridge"]
    flags = ("--kubeconfig", str(kubeconfig), "--context", "admin")
    as_json = _ntopo(installed, "get", node, "-o", "json", *flags)
    assert as_json.returncode == 0, as_json.stderr
    body = json.loads(as_json.stdout)
    assert body["kind"] == "NodeTopology" and body["metadata"]["name"] == node
    assert "managedFields" not in body["metadata"]
    assert body["status"]["summary"]["islands"] == "2x2"
    as_yaml = _ntopo(installed, "get", node, "-o", "yaml", *flags)
    assert yaml.safe_load(as_yaml.stdout)["status"] == body["status"]
    dot = _ntopo(installed, "get", node, "-o", "dot", *flags)
    assert dot.returncode == 0, dot.stderr
    assert dot.stdout.startswith("digraph") and '"gpu:0"' in dot.stdout and "NV" in dot.stdout
    svg = _ntopo(installed, "get", node, "-o", "svg", *flags)
    assert svg.returncode == 0, svg.stderr
    assert "<svg" in svg.stdout and "GPU0" in svg.stdout


def _discover_matrix(env: dict[str, str], machine: str) -> str:
    return subprocess.run(
        [sys.executable, "-m", "nodetopo", "discover", "--from", str(BUNDLES / machine), "--matrix"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env={**env, "PYTHONPATH": str(ROOT)},
    ).stdout


def _matrix_section(table: str) -> str:
    return "GPU topology matrix" + table.partition("GPU topology matrix")[2].split("\n\n")[0]


def test_matrix(installed: dict[str, str], published: dict[str, str], kubeconfig: Path) -> None:
    node = published["pcie-8x-2socket"]
    done = _ntopo(installed, "matrix", node, "--context", "exec", KUBECONFIG=str(kubeconfig))
    assert done.returncode == 0, done.stderr
    print(f"\n$ kubectl ntopo matrix {node}\n{done.stdout}")
    theirs = _discover_matrix(installed, "pcie-8x-2socket")
    ours = _matrix_cells(done.stdout)
    assert len(ours) == 8 * 8  # this machine has no RDMA NIC: GPU×GPU only
    assert ours == _matrix_cells(theirs) and "-" not in ours.values()
    assert ours[("GPU0", "GPU7")] == "SYS" and ours[("GPU0", "GPU2")] == "NODE"
    assert ours[("GPU0", "GPU1")] == "PHB"  # one root complex: published in status.gpuLinks


def test_matrix_of_a_dgx1_through_the_real_kubectl(
    cluster: LocalCluster, installed: dict[str, str], kubeconfig: Path
) -> None:
    """The DGX-1's hybrid cube mesh (NV1 and NV2 pairs, SYS across the cube) and its GPU×NIC
    classes: `kubectl ntopo matrix` run by the real kubectl prints what `discover --matrix` prints
    on the node, character for character."""
    node = f"ntopo-dgx1-v100-{uuid.uuid4().hex[:6]}"
    _publish(cluster, "dgx1-v100", node)
    try:
        done = _ntopo(
            installed,
            "matrix",
            node,
            "--context",
            "exec",
            kubectl=cluster.binary("kubectl"),
            KUBECONFIG=str(kubeconfig),
        )
        assert done.returncode == 0, done.stderr
        print(f"\n$ kubectl ntopo matrix {node}\n{done.stdout}")
        theirs = _discover_matrix(installed, "dgx1-v100")
        assert _matrix_section(done.stdout) == _matrix_section(theirs)
        cells = _matrix_cells(done.stdout)
        assert len(cells) == 8 * (8 + 4) and "-" not in cells.values()  # 8 GPUs, 4 NICs
        assert (cells[("GPU0", "GPU1")], cells[("GPU0", "GPU3")], cells[("GPU0", "GPU5")]) == (
            "NV1",
            "NV2",
            "SYS",
        )
        assert cells[("GPU0", "mlx5_0")] == "PIX"
    finally:
        _unpublish(cluster, node)


def _matrix_cells(table: str) -> dict[tuple[str, str], str]:
    lines = table.partition("GPU topology matrix")[2].split("\n\n")[0].splitlines()[1:]
    header = lines[0].split()
    return {
        (row.split()[0], col): cell
        for row in lines[1:]
        for col, cell in zip(header, row.split()[1:], strict=True)
    }


def test_nodes_fleet_view_and_filters(
    installed: dict[str, str], published: dict[str, str], kubeconfig: Path
) -> None:
    flags = ("--kubeconfig", str(kubeconfig), "--context", "admin")
    done = _ntopo(installed, "nodes", *flags)
    assert done.returncode == 0, done.stderr
    print("\n$ kubectl ntopo nodes\n" + done.stdout)
    assert done.stdout.splitlines()[0].split() == [
        "NODE",
        "GPUS",
        "MODEL",
        "ISLANDS",
        "NIC",
        "DISTANCE",
        "READY",
        "CONSISTENT",
        "DEGRADED",
    ]
    rows = _rows(done.stdout, published)
    assert set(rows) == set(published.values())
    assert rows[published["dgx-h100"]][1] == "8"
    assert rows[published["dgx-h100"]][-5:] == ["1x8", "PIX", "True", "True", "none"]
    assert rows[published["pcie-4x-nvbridge"]][-5:] == ["2x2", "PIX", "True", "True", "none"]
    assert rows[published["gpu-no-driver"]][-4:] == ["False", "(Degraded)", "True", "none"]

    eight = _rows(_ntopo(installed, "nodes", "--island-size", "8", *flags).stdout, published)
    assert set(eight) == {published["dgx-h100"]}
    both = _ntopo(installed, "nodes", "--island-size", "8", "--nic-distance", "PIX", "-o", "name", *flags)
    print("$ kubectl ntopo nodes --island-size 8 --nic-distance PIX -o name\n" + both.stdout)
    assert set(both.stdout.split()) & set(published.values()) == {published["dgx-h100"]}
    pix = _ntopo(installed, "nodes", "--nic-distance", "PIX", "-o", "name", *flags).stdout.split()
    assert {published["dgx-h100"], published["pcie-4x-nvbridge"]} <= set(pix)
    assert published["gpu-no-driver"] not in pix
    not_ready = _ntopo(installed, "nodes", "--not-ready", "-o", "json", *flags)
    shown = {r["node"]: r for r in json.loads(not_ready.stdout)}
    assert published["gpu-no-driver"] in shown and published["dgx-h100"] not in shown


def test_real_kubectl_runs_the_plugin_from_path(
    cluster: LocalCluster, installed: dict[str, str], published: dict[str, str], kubeconfig: Path
) -> None:
    kubectl = cluster.binary("kubectl")
    plugins = subprocess.run(
        [str(kubectl), "plugin", "list"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=installed,
    )
    assert "kubectl-ntopo" in plugins.stdout, plugins.stdout + plugins.stderr
    node = published["dgx-h100"]
    done = _ntopo(installed, "get", node, "--context", "exec", kubectl=kubectl, KUBECONFIG=str(kubeconfig))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"Node {node}   Ready: True   GPUs: 8 x NVIDIA H100")
    nodes = _ntopo(installed, "nodes", "--island-size", "8", kubectl=kubectl, KUBECONFIG=f"{kubeconfig}")
    # the current context is `nobody`: one line naming the refusal, no traceback
    assert nodes.returncode == 1
    assert nodes.stderr.startswith("error: list nodetopologies: HTTP 403: ")
    assert len(nodes.stderr.strip().splitlines()) == 1 and "Traceback" not in nodes.stderr


def test_one_line_errors(installed: dict[str, str], published: dict[str, str], kubeconfig: Path) -> None:
    missing = _ntopo(
        installed, "get", "no-such-node-x", "--kubeconfig", str(kubeconfig), "--context", "admin"
    )
    assert missing.returncode == 1
    assert missing.stderr.strip() == (
        "error: NodeTopology/no-such-node-x not found: no such node, or the nodetopo agent has not published "
        "it (kubectl ntopo nodes lists the nodes that have one)"
    )
    no_context = _ntopo(installed, "--kubeconfig", str(kubeconfig), "--context", "prod", "nodes")
    assert no_context.returncode == 1 and len(no_context.stderr.strip().splitlines()) == 1
    assert "prod" in no_context.stderr
    config = yaml.safe_load(kubeconfig.read_text())
    config["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:1"
    down = kubeconfig.with_name("down")
    down.write_text(yaml.safe_dump(config))
    unreachable = _ntopo(installed, "nodes", "--context", "admin", KUBECONFIG=str(down))
    assert unreachable.returncode == 1
    assert unreachable.stderr.startswith(
        "error: list nodetopologies: cannot reach the API server https://127.0.0.1:1"
    )
    assert len(unreachable.stderr.strip().splitlines()) == 1


def test_the_readme_example_is_real_output(
    installed: dict[str, str], published: dict[str, str], kubeconfig: Path
) -> None:
    """docs/kubectl-ntopo.md's "Look at a node from your laptop" block, node names aside, is what these
    commands print."""
    readme = (ROOT / "docs" / "kubectl-ntopo.md").read_text()
    block = readme.split("```\n$ kubectl ntopo nodes\n", 1)[1].split("```")[0]
    suffix = next(iter(published.values())).rsplit("-", 1)[1]
    block = re.sub(r"(ntopo-[a-z0-9-]+)-[0-9a-f]{6}\b", lambda m: f"{m[1]}-{suffix}", block)
    flags = ("--kubeconfig", str(kubeconfig), "--context", "admin")
    nodes, both, get = block.split("\n$ kubectl ntopo ")
    assert both.startswith("nodes --island-size 8 --nic-distance PIX -o name\n")
    assert get.startswith(f"get {published['dgx-h100']}\n")
    printed = _ntopo(installed, "nodes", *flags).stdout.splitlines()
    assert [line for line in nodes.strip().splitlines() if line not in printed] == []
    printed = _ntopo(installed, "get", published["dgx-h100"], *flags).stdout.splitlines()
    shown = [
        line for line in get.splitlines()[1:] if line.strip() not in ("…", "") and " since 20" not in line
    ]
    assert len(shown) > 20 and [line for line in shown if line not in printed] == []
