"""Cloud metadata: the recorded provider answers, served by a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import http.server
import re
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from nodetopo.errors import ParseError
from nodetopo.host import HostRoot, ReplayRunner
from nodetopo.model import ConditionReason
from nodetopo.sources.base import Context
from nodetopo.sources.fabric import cloud

AWS = "fabric/cloud/aws-describe-instance-topology-p4de-2instances-same-3nn-awsankur.json"
AWS_DOC = "fabric/cloud/aws-describe-instance-topology-docs-example-4inst-awscli.json"
GCP = "fabric/cloud/gcp-physicalHost-and-scontrol-topology-5nodes-1rack-cluster-toolkit-pr3873.txt"
OCI = "fabric/cloud/oci-imds-rdmaTopologyData-docs-example-truncated-ocids-oci-hpc-oke.json"


class Server:
    """A metadata endpoint on 127.0.0.1: path -> (status, body, required headers), or a hang."""

    def __init__(
        self,
        routes: Mapping[str, tuple[int, bytes, Mapping[str, str]]],
        hang: float = 0.0,
        location: str | None = None,
    ) -> None:
        self.routes = routes
        self.seen: list[tuple[str, dict[str, str]]] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.seen.append((self.path, dict(self.headers)))
                if hang:
                    time.sleep(hang)
                status, body, headers = outer.routes.get(self.path, (404, b"not found", {}))
                if any(self.headers.get(k) != v for k, v in headers.items()):
                    status, body = 403, b"missing header"
                try:
                    self.send_response(status)
                    if location is not None:
                        self.send_header("Location", location)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (the timeout test)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


@pytest.fixture
def serve() -> Iterator[list[Server]]:
    servers: list[Server] = []
    yield servers
    for s in servers:
        s.close()


def context(setting: str, timeout: float = 1.0) -> Context:
    return Context(
        root=HostRoot("/nonexistent"),
        runner=ReplayRunner({}),
        cloud_metadata=setting,
        cloud_timeout_s=timeout,
    )


def physical_hosts(corpus: Path) -> dict[str, str]:
    text = (corpus / GCP).read_text()
    return dict(re.findall(r"physicalHost for (\S+): (\S+)", text))


@pytest.mark.corpus
def test_gce_physical_host_from_a_local_endpoint(corpus: Path, serve: list[Server]) -> None:
    hosts = physical_hosts(corpus)
    assert sorted(hosts) == [f"topology7e-nodeset-{i}" for i in range(5)]
    tiers = set()
    for name, value in hosts.items():
        server = Server({cloud.GCE_PATH: (200, value.encode(), cloud.GCE_HEADERS)})
        serve.append(server)
        result = cloud.collect(context(f"gce={server.url}"))
        (observation,) = result.facts.network
        assert result.facts.conditions == (), name
        tiers.add(tuple((t.level, t.id) for t in observation.tiers))
        assert server.seen[0][1]["Metadata-Flavor"] == "Google"
    # all five VMs: one rack, one cluster (the log maps all of them to rack switch s0_0_0)
    assert tiers == {((0, "1f78a6fb820c234b394e9d189b020fc0"), (1, "21888861f7be68cd67634687b0de4574"))}
    assert len({v.rsplit("/", 1)[1] for v in hosts.values()}) == 5
    assert (
        "SwitchName=s0_0_0 Level=0 LinkSpeed=1 Nodes=topology7e-nodeset-[0-4]" in (corpus / GCP).read_text()
    )


@pytest.mark.corpus
def test_aws_instance_topology(corpus: Path, serve: list[Server]) -> None:
    document = (corpus / AWS).read_bytes()
    tiers = []
    for instance in ("i-05a4ae1432177a3a5", "i-0d7a5c941dc912692"):
        server = Server(
            {
                cloud.AWS_INSTANCE_ID_PATH: (200, instance.encode(), {}),
                cloud.AWS_TOPOLOGY_PATH: (200, document, {}),
            }
        )
        serve.append(server)
        (observation,) = cloud.collect(context(f"aws={server.url}")).facts.network
        tiers.append([(t.level, t.id) for t in observation.tiers])
    # the last network node is the one the instance attaches to: tier 0
    assert (
        tiers[0]
        == tiers[1]
        == [(0, "nn-38464347ecf47e324"), (1, "nn-a42b0750f49b48c69"), (2, "nn-b59b170155f6801f8")]
    )


@pytest.mark.corpus
def test_aws_docs_example(corpus: Path) -> None:
    text = (corpus / AWS_DOC).read_text()
    one = cloud.parse_aws_instance_topology(text, "i-1111111111example")
    two = cloud.parse_aws_instance_topology(text, "i-2222222222example")
    three = cloud.parse_aws_instance_topology(text, "i-3333333333example")
    four = cloud.parse_aws_instance_topology(text, "i-444444444example")
    assert one == two and len(one) == 3
    assert four[2] == one[2] and four[1] != one[1] and four[0] != one[0]  # only layer 1 (the top) shared
    assert not {t.id for t in three} & {t.id for t in one + four}
    assert cloud.parse_aws_instance_topology(text, "i-9999999999example") == ()


@pytest.mark.corpus
def test_oci_rdma_topology(corpus: Path, serve: list[Server]) -> None:
    server = Server({cloud.OCI_PATH: (200, (corpus / OCI).read_bytes(), cloud.OCI_HEADERS)})
    serve.append(server)
    (observation,) = cloud.collect(context(f"oci={server.url}")).facts.network
    assert [(t.level, t.id.split(".")[1]) for t in observation.tiers] == [
        (0, "computelocalblock"),
        (1, "computenetworkblock"),
        (2, "hpcisland"),
    ]
    assert observation.tiers[0].id == "ocid1.computelocalblock.oc1.iad.anuwcljrg5pyaeyc..."


def test_off_by_default_runs_nothing() -> None:
    result = cloud.collect(Context(root=HostRoot("/nonexistent"), runner=ReplayRunner({})))
    assert result.facts.sources == () and result.facts.network == ()


def test_timeout_and_garbage_are_conditions_naming_the_source(serve: list[Server]) -> None:
    slow = Server({cloud.GCE_PATH: (200, b"/a/b/c", cloud.GCE_HEADERS)}, hang=1.0)
    serve.append(slow)
    started = time.monotonic()
    result = cloud.collect(context(f"gce={slow.url}", timeout=0.2))
    assert time.monotonic() - started < 0.9
    (condition,) = result.facts.conditions
    assert (condition.source, condition.reason) == ("fabric.cloud", ConditionReason.TIMEOUT)
    garbage = Server({cloud.OCI_PATH: (200, b"<html>captive portal</html>", cloud.OCI_HEADERS)})
    serve.append(garbage)
    (condition,) = cloud.collect(context(f"oci={garbage.url}")).facts.conditions
    assert condition.reason is ConditionReason.PARSE_ERROR and "fabric.cloud" in condition.message
    wrong = Server({cloud.GCE_PATH: (200, b"rack-7", cloud.GCE_HEADERS)})
    serve.append(wrong)
    (condition,) = cloud.collect(context(f"gce={wrong.url}")).facts.conditions
    assert condition.reason is ConditionReason.PARSE_ERROR and "/<cluster>/<rack>/<host>" in condition.message
    missing = Server({})
    serve.append(missing)
    (condition,) = cloud.collect(context(f"gce={missing.url}")).facts.conditions
    assert condition.reason is ConditionReason.UNAVAILABLE and "HTTP 404" in condition.message


def test_setting_is_checked() -> None:
    with pytest.raises(ValueError, match="cloud metadata must be"):
        cloud.parse_setting("azure=http://x")
    (condition,) = cloud.collect(context("gce=ftp://169.254.169.254")).facts.conditions
    assert condition.source == "fabric.cloud" and "cloud metadata must be <gce|aws|oci>=" in condition.message
    with pytest.raises(ParseError):
        cloud.parse_oci_rdma_topology('{"customerLocalBlock": 7}')


def test_a_redirect_is_not_followed(serve: list[Server]) -> None:
    """The metadata headers (an OCI bearer, GCE's flavour) go to the endpoint configured, never on."""
    elsewhere = Server({cloud.OCI_PATH: (200, b'{"customerLocalBlock": "ocid1.x"}', {})})
    serve.append(elsewhere)
    moved = elsewhere.url.replace("127.0.0.1", "localhost") + cloud.OCI_PATH
    redirect = Server({cloud.OCI_PATH: (302, b"", {})}, location=moved)
    serve.append(redirect)
    (condition,) = cloud.collect(context(f"oci={redirect.url}")).facts.conditions
    assert condition.reason is ConditionReason.UNAVAILABLE
    assert "HTTP 302: a redirect, not followed" in condition.message
    assert [path for path, _ in redirect.seen] == [cloud.OCI_PATH] and elsewhere.seen == []


class Drip:
    """A loopback endpoint that sends ``at_once``, then ``dripped`` one byte every ``interval``
    seconds: each read waits less than the client's timeout, the whole answer much more."""

    def __init__(self, at_once: bytes, dripped: bytes, interval: float = 0.05) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(5)
        self.at_once, self.dripped, self.interval = at_once, dripped, interval
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        with conn:
            try:
                conn.recv(65536)
                conn.sendall(self.at_once)
                for byte in self.dripped:
                    conn.sendall(bytes([byte]))
                    time.sleep(self.interval)
            except OSError:
                return  # the client gave up: what the test wants

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}"

    def close(self) -> None:
        self.listener.close()
        self.thread.join(timeout=10)


@pytest.mark.parametrize("where", ["headers", "body"])
def test_an_answer_dripping_a_byte_at_a_time_meets_the_deadline(where: str) -> None:
    body = b"/cluster-1/rack-2/host-3" + b" " * 36
    head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nX-Padding: %s\r\n\r\n" % (len(body), b"p" * 20)
    # 60 bytes dripped at 0.05 s: 3 s in all, while no single read waits more than 0.05 s
    drip = Drip(b"", (head + body)[:60]) if where == "headers" else Drip(head, body)
    try:
        started = time.monotonic()
        result = cloud.collect(context(f"gce={drip.url}", timeout=0.5))
        elapsed = time.monotonic() - started
    finally:
        drip.close()
    (condition,) = result.facts.conditions
    assert condition.reason is ConditionReason.TIMEOUT, condition.message
    assert "no answer within 0.5s" in condition.message
    assert elapsed < 1.5, elapsed
