"""The real kube-scheduler calls ``nodetopo extender`` over HTTPS with a client certificate (issue 17).

The extender runs as deploy/extender/tls configures it (``--tls-cert-file``, ``--tls-private-key-file``,
``--tls-client-ca-file``) and kube-scheduler with deploy/extender/tls/scheduler-config.yaml (an https
``urlPrefix`` and a ``tlsConfig`` with its client certificate). A constrained pod lands where only
the extender could have sent it; a scheduler without a client certificate is refused (403) and its
pod stays pending.
"""

from __future__ import annotations

import contextlib
import json
import ssl
import subprocess
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from . import scheduler_support as s
from .cluster import REPO, LocalCluster

pytestmark = [pytest.mark.k8s, pytest.mark.slow]

RUN = uuid.uuid4().hex[:6]
NAMESPACE = f"nodetopo-tls-{RUN}"
ISLAND_OF_FOUR = {"nodetopo.io/gpus-in-one-island": "true"}


def scheduler_config(cluster: LocalCluster, name: str, url: str, tls: dict[str, str]) -> dict[str, Any]:
    """deploy/extender/tls/scheduler-config.yaml pointed at this cluster, extender and certificate files."""
    config: dict[str, Any] = yaml.safe_load(
        (REPO / "deploy" / "extender" / "tls" / "scheduler-config.yaml").read_text()
    )
    config["clientConnection"] = {"kubeconfig": str(cluster.kubeconfig)}
    config["leaderElection"] = {"leaderElect": False}
    config["profiles"] = [{"schedulerName": name}]
    (extender,) = config["extenders"]
    assert extender["urlPrefix"].startswith("https://")
    extender["urlPrefix"] = url
    extender["tlsConfig"] = tls
    return config


def pod(name: str, scheduler: str, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "annotations": ISLAND_OF_FOUR},
        "spec": {
            "schedulerName": scheduler,
            "automountServiceAccountToken": False,
            "nodeSelector": {"nodetopo-tls": RUN},
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/cuda:e2e",
                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                }
            ],
        },
    }


@pytest.fixture(scope="module")
def tls_pool(cluster: LocalCluster) -> Iterator[dict[str, str]]:
    """Two GPU nodes: 8 GPUs in one NVSwitch island, and 4 GPUs in NVLink pairs."""
    from nodetopo.resource.body import to_nodetopology

    nodes = {"big": f"tls-{RUN}-h100", "pairs": f"tls-{RUN}-pairs"}
    bundles = {"big": "dgx-h100", "pairs": "pcie-4x-nvbridge"}
    try:
        for key, name in nodes.items():
            topology = s.discover(bundles[key])
            s.create_node(cluster, name, len(topology.gpus), {"nodetopo-tls": RUN})
            s.create_nodetopology(cluster, to_nodetopology(topology, name))
        s.create_namespace(cluster, NAMESPACE)
        yield nodes
    finally:
        cluster.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}")
        for name in nodes.values():
            cluster.request("DELETE", f"/apis/nodetopo.io/v1alpha1/nodetopologies/{name}")
            cluster.request("DELETE", f"/api/v1/nodes/{name}")


def test_kube_scheduler_calls_the_extender_over_https_with_a_client_certificate(
    cluster: LocalCluster, tls_pool: dict[str, str], tmp_path: Path
) -> None:
    files = s.certificates(tmp_path)
    log = tmp_path / "extender.log"  # running_extender's
    schedulers: list[subprocess.Popen[bytes]] = []
    extender = contextlib.ExitStack()
    try:
        url = extender.enter_context(s.running_extender(cluster, tmp_path, tls=files))
        trusted = {
            "caFile": str(files["ca.crt"]),
            "certFile": str(files["client.crt"]),
            "keyFile": str(files["client.key"]),
        }
        anonymous = {"caFile": str(files["ca.crt"])}
        trusted_config = scheduler_config(cluster, "tls-trusted", url, trusted)
        schedulers.append(s.start_scheduler(cluster, tmp_path, "tls-trusted", trusted_config)[0])
        anonymous_config = scheduler_config(cluster, "tls-anonymous", url, anonymous)
        # The shipped config is ignorable (an outage must not block every GPU pod): the refusal would
        # then place the pod topology-blind. Not ignorable here, so the refusal shows as a Pending pod.
        anonymous_config["extenders"][0]["ignorable"] = False
        schedulers.append(s.start_scheduler(cluster, tmp_path, "tls-anonymous", anonymous_config)[0])
        # 4 GPUs in one island exist only on the 8-GPU node: the extender must have been asked.
        for i in range(2):
            name = f"island-{i}"
            s.create_pod(cluster, pod(name, "tls-trusted", 4))
            assert s.node_of(cluster, NAMESPACE, name, 60) == tls_pool["big"]
        s.create_pod(cluster, pod("anon", "tls-anonymous", 1))
        # the extender refuses a scheduler without a certificate
        assert s.node_of(cluster, NAMESPACE, "anon", 20) is None
        trusted_context = ssl.create_default_context(cafile=str(files["ca.crt"]))
        trusted_context.load_cert_chain(files["client.crt"], files["client.key"])
        with urllib.request.urlopen(f"{url}/metrics", timeout=5, context=trusted_context) as r:
            metrics = r.read().decode()
        assert 'nodetopo_extender_requests_total{code="200",verb="filter"}' in metrics
        assert 'code="403"' in metrics
        assert "Traceback" not in log.read_text()
    finally:
        for process in schedulers:
            s.stop(process)
        extender.close()
        print(json.dumps({"extender_log_tail": log.read_text()[-1500:]}) if log.exists() else "")
