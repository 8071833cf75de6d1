"""A real ``nodetopo extender`` process under hostile and careless clients, on loopback.

Every case here broke 0.1.0 (issue 17): a request without a JSON answer, a traceback on stderr, a
thread held forever, a reset under a burst, or gigabytes of memory for one body. Each test bounds
its own time (socket timeouts) and checks the process's memory where memory is the point.
"""

from __future__ import annotations

import concurrent.futures
import http.client
import json
import signal
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import nodetopology_of
from prometheus_client.parser import text_string_to_metric_families

from extender.process import ExtenderProcess, run_extender
from nodetopo.extender.limits import MAX_BODY_BYTES, MEMORY_BUDGET_BYTES

NODES = [f"gpu-node-{i:04d}" for i in range(8)]


def pod(gpus: Any = "2", annotations: Any = None, **extra: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "default", "annotations": annotations or {}},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]},
        **extra,
    }


@pytest.fixture(scope="module")
def topologies() -> list[dict[str, Any]]:
    return [nodetopology_of("dgx-h100", name) for name in NODES]


@pytest.fixture(scope="module")
def extender(
    tmp_path_factory: pytest.TempPathFactory, topologies: list[dict[str, Any]]
) -> Iterator[ExtenderProcess]:
    with run_extender(tmp_path_factory.mktemp("ext"), topologies, "--request-timeout=2") as process:
        yield process


def connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One HTTP response from a raw socket (status, headers, body); EOF before it is an error."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise EOFError(f"connection closed before a response: {data!r}")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return status, headers, rest[:length]


def closed(sock: socket.socket, timeout: float = 5.0) -> bool:
    """True when the server closed the connection (EOF or reset) within ``timeout``."""
    sock.settimeout(timeout)
    try:
        return sock.recv(65536) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def post_raw(sock: socket.socket, path: str, body: bytes, headers: str | None = None) -> None:
    head = headers if headers is not None else f"Content-Length: {len(body)}\r\n"
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{head}\r\n".encode())
    sock.sendall(body)


def post(port: int, path: str, payload: Any, timeout: float = 10) -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def assert_quiet(process: ExtenderProcess) -> None:
    err = process.stderr
    assert "Traceback" not in err and "Exception occurred" not in err, err[-4000:]


# ---- malformed requests: a 4xx JSON answer each, on a connection that stays usable --------------


@pytest.mark.parametrize(
    ("name", "body"),
    [
        ("pod-is-a-string", {"Pod": "x", "NodeNames": NODES}),
        ("pod-missing", {"NodeNames": NODES}),
        ("annotations-a-list", {"Pod": pod(annotations=["nodetopo.io/rdma"]), "NodeNames": NODES}),
        ("annotation-not-a-string", {"Pod": pod(annotations={"nodetopo.io/rdma": 1}), "NodeNames": NODES}),
        ("metadata-a-number", {"Pod": {"metadata": 7, "spec": {}}, "NodeNames": NODES}),
        ("spec-a-list", {"Pod": {"metadata": {}, "spec": []}, "NodeNames": NODES}),
        ("containers-an-object", {"Pod": {"spec": {"containers": {"a": 1}}}, "NodeNames": NODES}),
        ("resources-a-string", {"Pod": {"spec": {"containers": [{"resources": "x"}]}}, "NodeNames": NODES}),
        ("huge-quantity-digits", {"Pod": pod(gpus="9" * 400), "NodeNames": NODES}),
        ("huge-quantity-suffix", {"Pod": pod(gpus="999999999999999999Ei"), "NodeNames": NODES}),
        ("quantity-a-float", {"Pod": pod(gpus=1.5), "NodeNames": NODES}),
        ("quantity-a-list", {"Pod": pod(gpus=[2]), "NodeNames": NODES}),
        ("node-names-a-string", {"Pod": pod(), "NodeNames": "gpu-node-0000"}),
        ("node-names-of-numbers", {"Pod": pod(), "NodeNames": [1, 2]}),
        ("nodes-items-without-names", {"Pod": pod(), "Nodes": {"items": [{"metadata": {}}]}}),
        ("nodes-a-list", {"Pod": pod(), "Nodes": [1]}),
        ("args-a-list", [1, 2, 3]),
        ("deep-nesting", b"[" * 200_000 + b"]" * 200_000),
        ("deep-nesting-in-pod", b'{"Pod":' + b'{"a":' * 50_000 + b"1" + b"}" * 50_001),
        ("not-json", b"{this is not json"),
        ("not-utf8", b'{"Pod": "\xff\xfe"}'),
    ],
)
def test_a_malformed_request_gets_a_4xx_json_error(extender: ExtenderProcess, name: str, body: Any) -> None:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    with connect(extender.port) as sock:
        post_raw(sock, "/filter", raw)
        status, headers, answer = read_response(sock)
        assert 400 <= status < 500, (name, status, answer)
        assert headers["content-type"] == "application/json"
        assert json.loads(answer)["Error"]
        # the connection still serves a good request afterwards
        post_raw(sock, "/filter", json.dumps({"Pod": pod(), "NodeNames": NODES[:1]}).encode())
        status, _, answer = read_response(sock)
        assert status == 200 and json.loads(answer)["NodeNames"] == NODES[:1]
    assert_quiet(extender)


def test_a_bad_annotation_value_rejects_every_node_with_its_reason(extender: ExtenderProcess) -> None:
    args = {"Pod": pod(annotations={"nodetopo.io/max-nic-distance": "x" * 100_000}), "NodeNames": NODES}
    status, answer = post(extender.port, "/filter", args)
    assert status == 200 and answer["NodeNames"] == []
    reason = answer["FailedAndUnresolvableNodes"][NODES[0]]
    assert "max-nic-distance" in reason and len(reason) < 300  # the value is quoted, not echoed whole


def test_a_pod_asking_for_more_gpus_than_any_node_is_refused_normally(extender: ExtenderProcess) -> None:
    status, answer = post(extender.port, "/filter", {"Pod": pod(gpus="1Ei"), "NodeNames": NODES[:2]})
    assert status == 200 and answer["NodeNames"] == []
    assert "pod needs" in answer["FailedAndUnresolvableNodes"][NODES[0]]


@pytest.mark.parametrize(
    ("header", "status"),
    [
        ("Content-Length: abc\r\n", 400),
        ("Content-Length: -5\r\n", 400),
        ("Content-Length: 1e3\r\n", 400),
        ("Content-Length: 5\r\nContent-Length: 6\r\n", 400),
        ("Content-Length: 99999999999999999999999999\r\n", 413),
        ("", 411),
        ("Transfer-Encoding: chunked\r\n", 411),
    ],
)
def test_a_bad_content_length_is_answered_and_the_connection_closed(
    extender: ExtenderProcess, header: str, status: int
) -> None:
    # The "body" is itself a request: it must never be parsed as the next one.
    smuggled = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    with connect(extender.port) as sock:
        post_raw(sock, "/filter", smuggled, headers=header)
        got, headers, answer = read_response(sock)
        assert got == status and json.loads(answer)["Error"]
        assert headers.get("connection") == "close"
        assert closed(sock)
    assert_quiet(extender)


def test_an_oversized_body_is_refused_unread_and_never_parsed_as_a_request(extender: ExtenderProcess) -> None:
    smuggled = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" * 100
    rss = extender.rss()
    with connect(extender.port) as sock:
        post_raw(sock, "/prioritize", smuggled, headers=f"Content-Length: {63 * 1024 * 1024}\r\n")
        status, headers, answer = read_response(sock)
        assert status == 413 and str(MAX_BODY_BYTES) in json.loads(answer)["Error"]
        assert headers.get("connection") == "close"
        assert closed(sock)
    with connect(extender.port) as sock:  # unknown verb: its body is not read either
        post_raw(sock, "/bind", smuggled)
        status, _, _ = read_response(sock)
        assert status == 404 and closed(sock)
    assert extender.rss() - rss < 16 * 1024 * 1024
    assert_quiet(extender)


def test_a_body_nobody_reads_is_never_parsed_as_the_next_request(extender: ExtenderProcess) -> None:
    smuggled = b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
    for path in ("/healthz", "/readyz", "/metrics", "/nowhere"):
        with connect(extender.port) as sock:
            head = f"GET {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(smuggled)}\r\n\r\n"
            sock.sendall(head.encode())
            sock.sendall(smuggled)
            status, _, _ = read_response(sock)
            assert status in (200, 404), path
            assert closed(sock), path  # one answer, then the connection ends: no second (400) answer
    assert_quiet(extender)


# ---- time: slow clients hold nothing forever ------------------------------------------------------


def test_a_slow_body_is_cut_off_at_the_request_deadline(extender: ExtenderProcess) -> None:
    body = json.dumps({"Pod": pod(), "NodeNames": NODES}).encode()
    with connect(extender.port) as slow:
        post_raw(slow, "/filter", body[:10], headers=f"Content-Length: {len(body)}\r\n")
        started = time.monotonic()
        for _ in range(3):  # trickle: each byte well within a per-read timeout, the whole far over
            time.sleep(0.5)
            slow.sendall(b" ")
        # meanwhile others are served
        assert post(extender.port, "/filter", {"Pod": pod(), "NodeNames": NODES[:1]})[0] == 200
        assert closed(slow, timeout=5)
        assert time.monotonic() - started < 5  # --request-timeout=2
    assert_quiet(extender)


def test_slow_headers_are_cut_off_too(extender: ExtenderProcess) -> None:
    with connect(extender.port) as slow:
        slow.sendall(b"POST /filter HTTP/1.1\r\n")
        started = time.monotonic()
        for i in range(8):
            time.sleep(0.4)
            try:
                slow.sendall(f"X-Slow-{i}: 1\r\n".encode())
            except OSError:
                break
        assert closed(slow, timeout=5)
        assert time.monotonic() - started < 6
    assert_quiet(extender)


# ---- bursts and disconnects -----------------------------------------------------------------------


def test_a_burst_of_200_concurrent_requests_is_answered_without_resets(extender: ExtenderProcess) -> None:
    args = {"Pod": pod(annotations={"nodetopo.io/gpus-in-one-island": "true"}), "NodeNames": NODES}
    body = json.dumps(args).encode()
    sockets = [connect(extender.port) for _ in range(200)]  # all connected before any is answered
    try:
        for sock in sockets:
            post_raw(sock, "/filter", body)

        def answer(sock: socket.socket) -> int:
            sock.settimeout(30)
            return read_response(sock)[0]

        with concurrent.futures.ThreadPoolExecutor(32) as pool:
            statuses = list(pool.map(answer, sockets))
    finally:
        for sock in sockets:
            sock.close()
    assert statuses == [200] * 200
    assert_quiet(extender)


def test_clients_that_disconnect_early_leave_no_traceback(extender: ExtenderProcess) -> None:
    big = {"Pod": pod(), "NodeNames": [f"missing-{i}" for i in range(20_000)]}  # a large answer
    body = json.dumps(big).encode()
    for _ in range(20):
        sock = connect(extender.port)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        post_raw(sock, "/filter", body)
        sock.close()  # reset before the answer is written
    with connect(extender.port) as sock:
        sock.sendall(b"POST /filter HTTP/1.1\r\nContent-Length: 100\r\n\r\n{")  # gone mid-body
    time.sleep(0.5)
    assert post(extender.port, "/filter", {"Pod": pod(), "NodeNames": NODES[:1]})[0] == 200
    assert_quiet(extender)


def test_metrics_count_requests_by_verb_and_code(extender: ExtenderProcess) -> None:
    post(extender.port, "/filter", {"Pod": pod(), "NodeNames": NODES})
    post(extender.port, "/filter", {"Pod": "not a pod", "NodeNames": NODES})
    conn = http.client.HTTPConnection("127.0.0.1", extender.port, timeout=10)
    conn.request("GET", "/metrics")
    response = conn.getresponse()
    text = response.read().decode()
    conn.close()
    assert response.status == 200
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert samples[("nodetopo_extender_requests_total", (("code", "200"), ("verb", "filter")))] >= 1
    assert samples[("nodetopo_extender_requests_total", (("code", "400"), ("verb", "filter")))] >= 1
    assert ("nodetopo_extender_request_duration_seconds_count", (("verb", "filter"),)) in samples
    assert samples[("nodetopo_extender_memory_budget_bytes", ())] == MEMORY_BUDGET_BYTES
    assert samples[("nodetopo_extender_cache_objects", (("kind", "nodeTopologies"),))] == len(NODES)


# ---- memory: bounded per request and in total -------------------------------------------------------


def test_memory_stays_within_the_budget_under_worst_case_bodies(
    tmp_path: Path, topologies: list[dict[str, Any]]
) -> None:
    """The 0.1.0 attack (63 MB /prioritize bodies) and the most expensive bodies under the limit, at once."""
    with run_extender(tmp_path, topologies[:2]) as process:
        post(process.port, "/filter", {"Pod": pod(), "NodeNames": NODES})  # warm up (gc.freeze etc.)
        time.sleep(0.2)
        process.reset_peak()
        base = process.rss()
        # Most JSON values per byte under the body limit: empty objects (~25x in CPython).
        dense = b'{"Pod":{},"NodeNames":[],"x":[' + b"{}," * ((MAX_BODY_BYTES - 64) // 3) + b"{}]}"
        # Largest legitimate request: 20,000 node names of 253 characters and a big pod.
        names = [f"{i:05d}" + "n" * 248 for i in range(20_000)]
        legit = json.dumps({"Pod": pod(), "NodeNames": names}).encode()
        assert len(legit) <= MAX_BODY_BYTES
        # Non-ASCII text: 4 bytes a character once decoded.
        wide = json.dumps({"Pod": pod(), "NodeNames": ["é" * 1000] * 3000}, ensure_ascii=False).encode()
        bodies = [dense, dense, legit, legit, wide, wide, b"[" * (MAX_BODY_BYTES - 1)]
        with concurrent.futures.ThreadPoolExecutor(len(bodies)) as pool:
            results = list(pool.map(lambda b: post(process.port, "/prioritize", b, timeout=60), bodies))
        statuses = [status for status, _ in results]
        assert statuses[0] == statuses[1] == 413 and statuses[-1] in (400, 413)
        assert all(s in (200, 503) for s in statuses[2:6]), statuses
        assert statuses.count(200) >= 2, statuses
        grown = process.peak_rss() - base
        print(f"statuses {statuses}; peak RSS {base / 2**20:.0f} MiB + {grown / 2**20:.0f} MiB")
        assert grown < MEMORY_BUDGET_BYTES + 32 * 1024 * 1024, f"peak grew by {grown / 2**20:.0f} MiB"
        assert_quiet(process)


# ---- TLS ------------------------------------------------------------------------------------------------


def self_signed(tmp_path: Path) -> tuple[Path, Path]:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
            "-addext", "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


def test_tls_when_given_a_certificate(tmp_path: Path, topologies: list[dict[str, Any]]) -> None:
    cert, key = self_signed(tmp_path)
    args = (f"--tls-cert-file={cert}", f"--tls-private-key-file={key}", "--request-timeout=2")
    with run_extender(tmp_path, topologies[:1], *args) as process:
        context = ssl.create_default_context(cafile=str(cert))
        conn = http.client.HTTPSConnection("127.0.0.1", process.port, timeout=10, context=context)
        conn.request("POST", "/filter", body=json.dumps({"Pod": pod(), "NodeNames": NODES[:1]}))
        response = conn.getresponse()
        assert response.status == 200 and json.loads(response.read())["NodeNames"] == NODES[:1]
        conn.close()
        with connect(process.port) as plain:  # plain HTTP to the TLS port: refused, quietly
            plain.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert closed(plain)
        with connect(process.port) as silent:  # a client that never starts the handshake
            assert closed(silent, timeout=6)
        assert_quiet(process)


def test_tls_client_certificates_can_be_required_for_the_protocol(
    tmp_path: Path, topologies: list[dict[str, Any]]
) -> None:
    cert, key = self_signed(tmp_path)
    args = (f"--tls-cert-file={cert}", f"--tls-private-key-file={key}", f"--tls-client-ca-file={cert}")
    with run_extender(tmp_path, topologies[:1], *args, wait_ready=False) as process:
        anonymous = ssl.create_default_context(cafile=str(cert))
        trusted = ssl.create_default_context(cafile=str(cert))
        trusted.load_cert_chain(cert, key)
        deadline = time.monotonic() + 30
        while True:
            try:
                conn = http.client.HTTPSConnection("127.0.0.1", process.port, timeout=10, context=trusted)
                conn.request("GET", "/readyz")
                if conn.getresponse().status == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, process.stderr
            time.sleep(0.2)
        for path in ("/filter", "/prioritize", "/metrics"):  # without a certificate: refused
            conn = http.client.HTTPSConnection("127.0.0.1", process.port, timeout=10, context=anonymous)
            conn.request("POST" if path != "/metrics" else "GET", path, body=b"{}")
            response = conn.getresponse()
            assert response.status == 403 and "client certificate" in json.loads(response.read())["Error"]
            conn.close()
        conn = http.client.HTTPSConnection("127.0.0.1", process.port, timeout=10, context=anonymous)
        conn.request("GET", "/readyz")  # the kubelet's probes carry no certificate
        assert conn.getresponse().status == 200
        conn.close()
        conn = http.client.HTTPSConnection("127.0.0.1", process.port, timeout=10, context=trusted)
        conn.request("POST", "/filter", body=json.dumps({"Pod": pod(), "NodeNames": NODES[:1]}))
        assert conn.getresponse().status == 200
        conn.close()
        assert_quiet(process)


def test_sigterm_stops_the_extender_cleanly(tmp_path: Path, topologies: list[dict[str, Any]]) -> None:
    """The handler only records the signal (nodetopo.command.signals); a watcher thread shuts the server
    down."""
    with run_extender(tmp_path, topologies[:1]) as process:
        keep_alive = connect(process.port)  # an idle keep-alive connection must not hold the exit
        post_raw(keep_alive, "/filter", json.dumps({"Pod": pod(), "NodeNames": NODES[:1]}).encode())
        assert read_response(keep_alive)[0] == 200
        process.proc.send_signal(signal.SIGTERM)
        assert process.proc.wait(15) == 0
        keep_alive.close()
        assert "SIGTERM: shutting down" in process.stderr
        assert_quiet(process)
