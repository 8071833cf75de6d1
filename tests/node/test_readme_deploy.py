"""A newcomer's deploy, on a real node: a fresh ``git clone`` of this checkout's HEAD (nothing
untracked), then README.md's Deploy block run command by command as written, from the clone, with
the machine's ``python3`` (not this venv), Debian's ``ctr`` and the real kubectl and helm: the image
built by ``image/build_oci.py``, imported into the node's containerd, the namespace, ``helm install
--wait`` of ``charts/nodetopo`` with the chart's default image, ``helm test``, ``kubectl get ntopo``.

What only this machine knows is supplied in one way (tests/node/readme_deploy.py): the environment
the tools read (``KUBECONFIG``, ``CONTAINERD_ADDRESS``, ``PATH``) and one ``--values`` file appended
to ``helm install`` with what a test node differs by (no kube-proxy: the API server's address as the
pod sees it; the test kubelet's --root-dir for the PodResources socket). A Deploy block of another
shape fails the test before anything runs.

The node is the session's (control plane and kubelet shared with the other node tests); before the
block runs, what deploy/ or another release left of nodetopo is removed, as on a cluster that never
had it; the image name the block imports is put back as it was afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kube.chart_support import helm, helm_binary

from .conftest import TIMINGS
from .node import REPO, LocalNode
from .readme_deploy import Command, DeployPlan, deploy_plan, with_harness_values

pytestmark = [pytest.mark.k8s, pytest.mark.node]

IMAGE = "ghcr.io/nodetopo/nodetopo:0.1.0"  # the archive's name, the chart's default image
BACKUP = "nodetopo.test/image-before-readme:1"
SECONDS: dict[str, float] = {}


def _run(
    argv: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )  # fmt: skip


def fresh_clone(destination: Path) -> Path:
    """``git clone`` of the checkout, at its HEAD commit: what is committed, nothing else."""
    head = _run(["git", "-C", str(REPO), "rev-parse", "HEAD"])
    assert head.returncode == 0, f"the checkout is not a git repository: {head.stderr}"
    clone = destination / "nodetopo"
    for argv in (
        ["git", "clone", "--quiet", str(REPO), str(clone)],
        ["git", "-C", str(clone), "checkout", "--quiet", "--detach", head.stdout.strip()],
    ):
        done = _run(argv)
        assert done.returncode == 0, (argv, done.stderr)
    return clone


def without_nodetopo(node: LocalNode) -> None:
    """Remove what deploy/ (the DaemonSet test) or the chart test's release left: CRDs, namespace,
    cluster roles and policies of the same names as the README's release would create."""
    cluster = node.cluster
    cluster.kubectl(
        "delete", "-k", str(REPO / "deploy"), "--ignore-not-found", "--wait", "--timeout=180s", check=False
    )  # fmt: skip
    for crd in ("nodetopologies.nodetopo.io", "nodetopologysummaries.nodetopo.io"):
        cluster.kubectl("delete", "crd", crd, "--ignore-not-found", "--wait", "--timeout=120s", check=False)
    drop_node_labels(node)


def drop_node_labels(node: LocalNode) -> None:
    """The node's nodetopo.io/ labels removed (the other node tests expect a node without them)."""
    cluster = node.cluster
    status, body = cluster.request("GET", f"/api/v1/nodes/{node.name}")
    if status == 200:
        drop = {k: None for k in body["metadata"].get("labels", {}) if k.startswith("nodetopo.io/")}
        if drop:
            cluster.request("PATCH", f"/api/v1/nodes/{node.name}", body={"metadata": {"labels": drop}})


def archive_digests(archive: Path) -> set[str]:
    """The manifest and config digests of the archive's one image (the pod's imageID is one of them)."""
    with tarfile.open(archive) as tar:
        index = json.loads(tar.extractfile("index.json").read())  # type: ignore[union-attr]
        (entry,) = index["manifests"]
        blob = tar.extractfile(f"blobs/sha256/{entry['digest'].split(':', 1)[1]}")
        assert blob is not None
        manifest = json.loads(blob.read())
    return {entry["digest"], manifest["config"]["digest"]}


@pytest.fixture(scope="module")
def followed(node: LocalNode, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The Deploy block, followed from a fresh clone: each command's result, the plan, the clone."""
    started = time.monotonic()
    cluster = node.cluster
    work = Path(tmp_path_factory.mktemp("newcomer"))
    clone = fresh_clone(work)
    SECONDS["clone"] = round(time.monotonic() - started, 2)
    plan: DeployPlan = deploy_plan((clone / "README.md").read_text(encoding="utf-8"))

    assert node.forwarder is not None
    if node.forwarder._listener is None:
        node.forwarder.start()
    step = time.monotonic()
    without_nodetopo(node)
    SECONDS["cluster without nodetopo"] = round(time.monotonic() - step, 2)
    had_image = IMAGE in node.images()
    if had_image:  # the session's image (this working tree): kept aside, the block must import its own
        node.ctr("images", "tag", "--force", IMAGE, BACKUP)
        node.ctr("images", "rm", IMAGE)

    tools = work / "bin"  # the real kubectl and helm first on PATH; the venv's python3 off it
    tools.mkdir()
    (tools / "kubectl").symlink_to(cluster.binary("kubectl"))
    (tools / "helm").symlink_to(helm_binary())
    venv = str(Path(sys.executable).parent)
    path = [str(tools), *(p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != venv)]
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env.update(
        PATH=os.pathsep.join(path),
        KUBECONFIG=str(cluster.kubeconfig_for("admin")),
        CONTAINERD_ADDRESS=str(node.containerd_socket),
        COLUMNS="200",
    )
    values = work / "harness-values.yaml"
    values.write_text(
        json.dumps(
            {
                "agent": {
                    "podResources": {"hostPath": str(node.kubelet_root / "pod-resources")},
                    "extraEnv": [
                        {"name": "KUBERNETES_SERVICE_HOST", "value": node.api_host},
                        {"name": "KUBERNETES_SERVICE_PORT", "value": str(node.api_port)},
                    ],
                }
            }
        )
    )
    results: dict[str, subprocess.CompletedProcess[str]] = {}
    try:
        for command in plan.commands:
            argv = with_harness_values(command, values) if command is plan.install else command.argv
            step = time.monotonic()
            done = _run(list(argv), cwd=clone, env=env, timeout=1800 if command is plan.build else 300)
            SECONDS[" ".join(command.argv[:2])] = round(time.monotonic() - step, 2)
            if done.returncode != 0:
                events = cluster.kubectl("get", "events", "-A", check=False).stdout[-3000:]
                pytest.fail(
                    f"{command} failed ({done.returncode}):\n{done.stdout[-3000:]}\n"
                    f"{done.stderr[-3000:]}\n{events}",
                    pytrace=False,
                )
            results[str(command)] = done
        TIMINGS["readme deploy (clone to kubectl get ntopo)"] = round(time.monotonic() - started, 2)
        TIMINGS.update({f"readme deploy: {k}": v for k, v in SECONDS.items()})
        yield {"plan": plan, "clone": clone, "results": results}
    finally:
        step = time.monotonic()
        kubeconfig = str(cluster.kubeconfig_for("admin"))
        helm(
            "uninstall", plan.release, "-n", plan.namespace, "--kubeconfig", kubeconfig, "--wait", check=False
        )
        cluster.kubectl("delete", "namespace", plan.namespace, "--wait", "--timeout=120s", check=False)
        # the CRDs stay (the chart keeps them), as deploy/ leaves them; no NodeTopology, no label
        cluster.kubectl("delete", "nodetopology", node.name, "--ignore-not-found", check=False)
        drop_node_labels(node)
        if had_image:
            node.ctr("images", "tag", "--force", BACKUP, IMAGE, check=False)
            node.ctr("images", "rm", BACKUP, check=False)
        TIMINGS["readme deploy: teardown"] = round(time.monotonic() - step, 2)


def result(followed: dict[str, Any], command: Command) -> subprocess.CompletedProcess[str]:
    done: subprocess.CompletedProcess[str] = followed["results"][str(command)]
    return done


def test_the_readme_deploy_block_runs_the_agent_from_the_image_it_built(
    node: LocalNode, followed: dict[str, Any]
) -> None:
    plan: DeployPlan = followed["plan"]
    cluster = node.cluster
    built = json.loads(result(followed, plan.build).stdout)  # build_oci.py's summary
    archive = followed["clone"] / plan.archive
    assert (followed["clone"] / built["archive"]).resolve() == archive.resolve(), built
    assert built["name"] == IMAGE, built
    # the chart's agent pods carry its selector labels (name, component), not the release's instance
    listed = cluster.kubectl(
        "get", "pods", "-n", plan.namespace, "-l", "app.kubernetes.io/component=agent", "-o", "json"
    )
    pods = [  # the DaemonSet's
        p
        for p in json.loads(listed.stdout)["items"]
        if [o["kind"] for o in p["metadata"].get("ownerReferences", [])] == ["DaemonSet"]
    ]
    assert [p["spec"]["nodeName"] for p in pods] == [node.name], pods
    (pod,) = pods
    conditions = {c["type"]: c["status"] for c in pod["status"].get("conditions", [])}
    assert conditions.get("Ready") == "True", pod["status"]
    (status,) = pod["status"]["containerStatuses"]
    assert status["image"].endswith(IMAGE), status
    # the image the block built and imported, not one the session had: its digest
    assert status["imageID"].rsplit("@", 1)[-1] in archive_digests(archive), (status, built)


def test_kubectl_get_ntopo_shows_this_node(node: LocalNode, followed: dict[str, Any]) -> None:
    plan: DeployPlan = followed["plan"]
    shown = result(followed, plan.get_ntopo).stdout
    print(f"\n$ {' '.join(plan.get_ntopo.argv)}\n{shown}")
    rows = [line.split() for line in shown.splitlines()]
    assert rows and rows[0][0] == "NAME", shown
    assert [r[0] for r in rows[1:]] == [node.name], shown
    status, topology = node.cluster.request("GET", f"/apis/nodetopo.io/v1alpha1/nodetopologies/{node.name}")
    assert status == 200 and topology["status"]["conditions"], topology
    tested = result(followed, plan.helm_test).stdout
    assert "Phase:          Succeeded" in tested, tested
