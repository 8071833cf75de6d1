"""The kubelet PodResources source: the protobuf parsers, the gRPC transport, and the join to GPUs.

Messages are encoded here by a minimal protobuf *encoder* (the other direction of what the source
decodes), so every test states the answer it feeds in field by field. The transport is exercised
against an HTTP/2 gRPC server run in a thread on a Unix socket (h2's server side: HPACK, SETTINGS,
flow control and trailers are real). The real kubelet answers in tests/node.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import h2.config
import h2.connection
import h2.events
import pytest
from helpers import BUNDLES

from nodetopo.errors import ParseError
from nodetopo.kubelet.allocation import device_key, gpu_allocation, unknown_allocation
from nodetopo.kubelet.podresources import (
    ALLOCATABLE_METHOD,
    LIST_METHOD,
    PodResourcesError,
    call_unary,
    grpc_frame,
    parse_allocatable_response,
    parse_list_claims,
    parse_list_response,
    read_allocation,
)
from nodetopo.model import ClaimDevice, DeviceAssignment, KubeletAllocation, PodRef
from nodetopo.resource.body import to_nodetopology
from nodetopo.topology.discover import bundle_context, scan

# ---- a minimal protobuf encoder ------------------------------------------------------------


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(number: int, value: bytes | str | int) -> bytes:
    if isinstance(value, int):
        return varint(number << 3) + varint(value)
    data = value.encode() if isinstance(value, str) else value
    return varint(number << 3 | 2) + varint(len(data)) + data


def devices(resource: str, *ids: str, numa: int | None = None) -> bytes:
    body = field(1, resource) + b"".join(field(2, i) for i in ids)
    if numa is not None:
        body += field(3, field(1, field(1, numa)))  # TopologyInfo{nodes: [NUMANode{ID}]}
    return body


def container(name: str, *devs: bytes, cpus: tuple[int, ...] = ()) -> bytes:
    body = field(1, name) + b"".join(field(2, d) for d in devs)
    if cpus:  # packed repeated int64 cpu_ids: ignored by the parser
        packed = b"".join(varint(c) for c in cpus)
        body += varint(3 << 3 | 2) + varint(len(packed)) + packed
    return body


def pod(name: str, namespace: str, *containers: bytes) -> bytes:
    return field(1, name) + field(2, namespace) + b"".join(field(3, c) for c in containers)


def list_response(*pods: bytes) -> bytes:
    return b"".join(field(1, p) for p in pods)


def claim(name: str, namespace: str, *devices: tuple[str, str, str], cdi: str = "") -> bytes:
    """A DynamicResource (ContainerResources field 5): the claim and its (driver, pool, device)s."""
    body = field(2, name) + field(3, namespace)
    for driver, pool, device in devices:
        resource = field(2, driver) + field(3, pool) + field(4, device)
        if cdi:
            resource = field(1, field(1, cdi)) + resource  # CDIDevice{name}: not read
        body += field(4, resource)
    return field(5, body)


# ---- parsers -------------------------------------------------------------------------------


def test_list_response_gives_one_assignment_per_container_and_device() -> None:
    data = list_response(
        pod(
            "train-0",
            "ml",
            container("main", devices("nvidia.com/gpu", "GPU-b", "GPU-a", numa=0), cpus=(0, 1, 2)),
            container("sidecar"),
        ),
        pod("other", "default", container("c", devices("example.com/fpga", "fpga-1"))),
        pod("no-devices", "default"),
    )
    got = parse_list_response(data)
    main = PodRef(namespace="ml", name="train-0", container="main")
    assert got == (
        DeviceAssignment(
            resource="example.com/fpga",
            device_id="fpga-1",
            holder=PodRef(namespace="default", name="other", container="c"),
        ),
        DeviceAssignment(resource="nvidia.com/gpu", device_id="GPU-a", holder=main),
        DeviceAssignment(resource="nvidia.com/gpu", device_id="GPU-b", holder=main),
    )


def test_unknown_fields_are_skipped_as_protobuf_requires() -> None:
    # a newer kubelet adds fields (varint 9, fixed64 10, fixed32 11, a message 12) at every level
    extra = (
        field(9, 7)
        + varint(10 << 3 | 1)
        + b"\x00" * 8
        + varint(11 << 3 | 5)
        + b"\x00" * 4
        + field(12, b"xyz")
    )
    data = (
        list_response(
            pod("p", "ns", container("c", devices("nvidia.com/gpu", "GPU-a") + extra) + extra) + extra
        )
        + extra
    )
    assert [a.device_id for a in parse_list_response(data)] == ["GPU-a"]


def test_claims_are_listed_per_container_and_device_and_apart_from_device_plugin_devices() -> None:
    # as the 1.34 kubelet answered on the real node (tests/node/test_dra_node.py): a claim-based
    # container has no device-plugin devices, one DynamicResource per claim
    data = list_response(
        pod(
            "train-0",
            "ml",
            field(1, "main")
            + claim(
                "train-0-gpus-x7",
                "ml",
                ("gpu.nvidia.com", "node-a", "gpu-1"),
                ("gpu.nvidia.com", "node-a", "gpu-0"),
                cdi="k8s.gpu.nvidia.com/claim=uid-gpu-0",
            )
            + claim("train-0-nic", "ml", ("dra.net", "node-a", "ibp69s0")),
            container("sidecar", devices("nvidia.com/gpu", "GPU-a")),
        ),
    )
    main = PodRef(namespace="ml", name="train-0", container="main")
    assert parse_list_claims(data) == (
        ClaimDevice(driver="dra.net", pool="node-a", device="ibp69s0", claim="ml/train-0-nic", holder=main),
        ClaimDevice(
            driver="gpu.nvidia.com", pool="node-a", device="gpu-0", claim="ml/train-0-gpus-x7", holder=main
        ),
        ClaimDevice(
            driver="gpu.nvidia.com", pool="node-a", device="gpu-1", claim="ml/train-0-gpus-x7", holder=main
        ),
    )
    assert [a.device_id for a in parse_list_response(data)] == ["GPU-a"]
    with pytest.raises(ParseError, match="claim ml/c without a driver or device"):
        parse_list_claims(list_response(pod("p", "ml", field(1, "main") + claim("c", "ml", ("", "p", "d")))))


def test_allocatable_response_groups_ids_by_resource() -> None:
    data = field(1, devices("nvidia.com/gpu", "GPU-b", numa=1)) + field(
        1, devices("nvidia.com/gpu", "GPU-a", numa=0)
    )
    data += field(2, 5)  # cpu_ids (not packed here): ignored
    assert parse_allocatable_response(data) == (("nvidia.com/gpu", ("GPU-a", "GPU-b")),)
    assert parse_allocatable_response(b"") == ()


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"\x0a\x05abc", "claims 5 bytes, 3 left"),
        (b"\x0a", "truncated varint"),
        (b"\x08" + b"\xff" * 11, "varint longer than 10 bytes"),
        (b"\x0b", "unsupported wire type 3"),
        (b"\x02\x00", "field number 0"),
        (field(1, field(1, b"\xff\xfe")), "pod name: not UTF-8"),
        (field(1, field(1, "a\nb")), "pod name: not a name"),
        (field(1, field(1, "x" * 300)), "pod name: not a name"),
        (field(1, field(3, field(2, field(2, "GPU-a")))), "ContainerDevices without a resource_name"),
        (field(1, 5), "PodResources: expected a message"),
    ],
)
def test_garbled_answers_are_parse_errors_naming_the_call(data: bytes, says: str) -> None:
    with pytest.raises(ParseError) as e:
        parse_list_response(data)
    assert says in str(e.value) and LIST_METHOD in str(e.value)


def _empty_ids(count: int) -> bytes:
    """A ContainerDevices naming ``count`` empty device ids: two bytes each."""
    return field(1, "nvidia.com/gpu") + b"\x12\x00" * count


@pytest.mark.parametrize("call", ["list", "allocatable"])
def test_millions_of_device_ids_are_refused_as_they_are_read(call: str) -> None:
    """4 million empty ids (8 MB, within the response limit) built 420 MB of assignments before the
    count was checked; now the count is checked per id, and an empty id is no device at all."""
    import tracemalloc

    many = 4_000_000
    if call == "list":
        data = list_response(pod("p", "ns", container("c", _empty_ids(many))))
        parse: Callable[[bytes], object] = parse_list_response
    else:
        data = field(1, _empty_ids(many))
        parse = parse_allocatable_response
    tracemalloc.start()
    try:
        with pytest.raises(ParseError, match="an empty device_id"):
            parse(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 * 2**20, peak  # the 8 MB answer's own slices, not millions of objects
    named = field(1, "nvidia.com/gpu") + b"".join(field(2, f"g{i}") for i in range(70_000))
    with pytest.raises(ParseError, match="more than 65536"):
        parse(list_response(pod("p", "ns", container("c", named))) if call == "list" else field(1, named))


# ---- the join to the node's GPUs -----------------------------------------------------------


@pytest.fixture(scope="module")
def h100() -> object:
    return scan(bundle_context(BUNDLES / "dgx-h100")).topology


def test_gpu_allocation_joins_uuids_replicas_and_indices(h100: object) -> None:
    from nodetopo.model import Topology

    assert isinstance(h100, Topology)
    uuid = {g.index: g.uuid for g in h100.gpus}
    a = PodRef(namespace="ml", name="a", container="main")
    b = PodRef(namespace="ml", name="b", container="main")
    c = PodRef(namespace="ml", name="c", container="main")
    observed = KubeletAllocation(
        assignments=(
            DeviceAssignment(resource="nvidia.com/gpu", device_id=str(uuid[0]), holder=a),
            DeviceAssignment(resource="nvidia.com/gpu", device_id=f"{uuid[1]}::0", holder=a),
            DeviceAssignment(resource="nvidia.com/gpu", device_id=f"{uuid[1]}::1", holder=b),
            DeviceAssignment(resource="nvidia.com/gpu", device_id="5", holder=c),
            DeviceAssignment(resource="nvidia.com/gpu", device_id="GPU-not-on-this-node", holder=c),
            DeviceAssignment(resource="example.com/fpga", device_id="fpga-0", holder=c),
        ),
        allocatable=(
            ("example.com/fpga", ("fpga-0", "fpga-1")),
            ("nvidia.com/gpu", tuple(str(uuid[i]) for i in range(8))),
        ),
    )
    got = gpu_allocation(h100, observed)
    assert got.known
    assert got.gpu_holders == ((0, (a,)), (1, (a, b)), (5, (c,)))
    assert "nvidia.com/gpu: GPU-not-on-this-node" in got.message
    counts = {r.name: (r.allocatable, r.allocated) for r in got.resources}
    assert counts == {"example.com/fpga": (2, 1), "nvidia.com/gpu": (8, 5)}
    assert device_key("GPU-x::12") == "GPU-x"


def test_gpus_held_through_dra_claims_make_the_holders_unknown_never_free(h100: object) -> None:
    from nodetopo.model import Topology

    assert isinstance(h100, Topology)
    a = PodRef(namespace="ml", name="a", container="main")
    plugin = DeviceAssignment(resource="nvidia.com/gpu", device_id=str(h100.gpus[0].uuid), holder=a)

    def nic(device: str) -> ClaimDevice:
        return ClaimDevice(driver="dra.net", pool="n", device=device, claim="ml/nic", holder=a)

    # a NIC driver's claims say nothing about GPUs: the device-plugin holders stand
    with_nic = gpu_allocation(h100, KubeletAllocation(assignments=(plugin,), claim_devices=(nic("ib0"),)))
    assert with_nic.known and with_nic.gpu_holders == ((0, (a,)),)
    # a GPU driver's device names (gpu-3) are not GPU UUIDs: which GPU is held is not known here
    gpu = ClaimDevice(driver="gpu.nvidia.com", pool="n", device="gpu-3", claim="ml/a-gpus", holder=a)
    got = gpu_allocation(h100, KubeletAllocation(assignments=(plugin,), claim_devices=(gpu, nic("ib0"))))
    assert not got.known and got.gpu_holders == ()
    assert "1 GPU device(s) of gpu.nvidia.com allocated through ResourceClaims (ml/a-gpus)" in got.message
    status = to_nodetopology(h100, "n", got)["status"]
    assert status["allocation"]["state"] == "Unknown"
    assert all("heldBy" not in g for g in status["gpus"])


def test_the_resource_says_held_free_and_unknown_apart(h100: object) -> None:
    from nodetopo.model import Topology

    assert isinstance(h100, Topology)
    uuid0 = h100.gpus[0].uuid
    holder = PodRef(namespace="ml", name="a", container="main")
    known = gpu_allocation(
        h100,
        KubeletAllocation(
            assignments=(DeviceAssignment(resource="nvidia.com/gpu", device_id=str(uuid0), holder=holder),)
        ),
    )
    status = to_nodetopology(h100, "n1", known)["status"]
    assert status["allocation"] == {
        "state": "Known",
        "source": "kubelet-podresources",
        "message": "",
        "resources": [{"name": "nvidia.com/gpu", "allocatable": None, "allocated": 1}],
    }
    assert status["gpus"][0]["heldBy"] == [{"namespace": "ml", "name": "a", "container": "main"}]
    assert all(g["heldBy"] == [] for g in status["gpus"][1:])  # known and free

    unknown = to_nodetopology(h100, "n1", unknown_allocation("no kubelet PodResources socket at /x"))[
        "status"
    ]
    assert unknown["allocation"]["state"] == "Unknown" and "/x" in unknown["allocation"]["message"]
    assert all("heldBy" not in g for g in unknown["gpus"])  # unknown is not "free"

    plain = to_nodetopology(h100, "n1")["status"]
    assert "allocation" not in plain and all("heldBy" not in g for g in plain["gpus"])
    assert len({known_hash := status["contentHash"], unknown["contentHash"], plain["contentHash"]}) == 3, (
        known_hash
    )


# ---- the transport, against an HTTP/2 gRPC server on a Unix socket ------------------------------


Handler = Callable[[str], tuple[list[tuple[str, str]], bytes, list[tuple[str, str]] | None]]


@pytest.fixture
def grpc_server(tmp_path: Path) -> Iterator[Callable[[Handler], str]]:
    """Start a one-thread gRPC server answering with ``handler(path) -> (headers, body, trailers)``."""
    servers: list[tuple[socket.socket, threading.Thread]] = []
    stop = threading.Event()

    def start(handler: Handler) -> str:
        path = str(tmp_path / f"s{len(servers)}.sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        listener.listen(4)
        listener.settimeout(0.1)

        def serve() -> None:
            while not stop.is_set():
                try:
                    conn_sock, _ = listener.accept()
                except TimeoutError:
                    continue
                except OSError:
                    return
                conn_sock.settimeout(5)
                with conn_sock, contextlib.suppress(OSError):  # the client hung up: next connection
                    conn = h2.connection.H2Connection(
                        h2.config.H2Configuration(client_side=False, header_encoding="utf-8")
                    )
                    conn.initiate_connection()
                    conn_sock.sendall(conn.data_to_send())
                    method = ""
                    while True:
                        data = conn_sock.recv(65536)
                        if not data:
                            break
                        for event in conn.receive_data(data):
                            if isinstance(event, h2.events.RequestReceived):
                                method = dict(event.headers)[":path"]
                            elif isinstance(event, h2.events.StreamEnded):
                                headers, body, trailers = handler(method)
                                if trailers is None:  # trailers-only answer
                                    conn.send_headers(event.stream_id, headers, end_stream=True)
                                else:
                                    conn.send_headers(event.stream_id, headers)
                                    if body:
                                        conn.send_data(event.stream_id, body)
                                    conn.send_headers(event.stream_id, trailers, end_stream=True)
                        conn_sock.sendall(conn.data_to_send())

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        servers.append((listener, thread))
        return path

    yield start
    stop.set()
    for listener, thread in servers:
        listener.close()
        thread.join(timeout=5)


OK_HEADERS = [(":status", "200"), ("content-type", "application/grpc")]


def test_read_allocation_asks_list_then_allocatable(grpc_server: Callable[[Handler], str]) -> None:
    answers = {
        LIST_METHOD: list_response(pod("p", "ns", container("c", devices("nvidia.com/gpu", "GPU-a")))),
        ALLOCATABLE_METHOD: field(1, devices("nvidia.com/gpu", "GPU-a", "GPU-b")),
    }
    asked: list[str] = []

    def handler(method: str) -> tuple[list[tuple[str, str]], bytes, list[tuple[str, str]] | None]:
        asked.append(method)
        return OK_HEADERS, grpc_frame(answers[method]), [("grpc-status", "0")]

    got = read_allocation(grpc_server(handler), timeout_s=5)
    assert asked == [LIST_METHOD, ALLOCATABLE_METHOD]
    assert got.allocatable == (("nvidia.com/gpu", ("GPU-a", "GPU-b")),)
    assert [a.device_id for a in got.assignments] == ["GPU-a"]
    assert got.claim_devices == ()


def test_a_kubelet_without_get_allocatable_still_gives_the_holders(
    grpc_server: Callable[[Handler], str],
) -> None:
    def handler(method: str) -> tuple[list[tuple[str, str]], bytes, list[tuple[str, str]] | None]:
        if method == ALLOCATABLE_METHOD:
            return [*OK_HEADERS, ("grpc-status", "12"), ("grpc-message", "unknown method")], b"", None
        return OK_HEADERS, grpc_frame(b""), [("grpc-status", "0")]

    got = read_allocation(grpc_server(handler), timeout_s=5)
    assert got == KubeletAllocation(assignments=(), allocatable=None)


def test_grpc_errors_and_garbage_are_typed(grpc_server: Callable[[Handler], str], tmp_path: Path) -> None:
    def denied(method: str) -> tuple[list[tuple[str, str]], bytes, list[tuple[str, str]] | None]:
        return OK_HEADERS, b"", [("grpc-status", "8"), ("grpc-message", "rate limited\x1b[31m")]

    with pytest.raises(PodResourcesError) as e:
        call_unary(grpc_server(denied), LIST_METHOD, timeout_s=5)
    assert "gRPC status 8" in str(e.value) and "\x1b" not in str(e.value)

    def short(method: str) -> tuple[list[tuple[str, str]], bytes, list[tuple[str, str]] | None]:
        return OK_HEADERS, b"\x00\x00\x00\x00\x09abc", [("grpc-status", "0")]

    with pytest.raises(ParseError, match="gRPC message of 9 bytes in a body of 3"):
        call_unary(grpc_server(short), LIST_METHOD, timeout_s=5)

    with pytest.raises(PodResourcesError, match="no kubelet PodResources socket at") as missing:
        read_allocation(str(tmp_path / "absent.sock"), timeout_s=1)
    assert missing.value.reason == "Unavailable"


def test_a_silent_server_times_out(tmp_path: Path) -> None:
    path = str(tmp_path / "silent.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)  # accepts (the backlog), never answers
    try:
        with pytest.raises(PodResourcesError) as e:
            call_unary(path, LIST_METHOD, timeout_s=0.3)
        assert e.value.reason == "Timeout"
    finally:
        listener.close()


def test_a_server_that_is_not_http2_is_a_clear_error(tmp_path: Path) -> None:
    path = str(tmp_path / "http1.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)

    def answer() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(1024)
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    try:
        with pytest.raises((ParseError, PodResourcesError)) as e:
            call_unary(path, LIST_METHOD, timeout_s=2)
        assert "HTTP/2" in str(e.value) or "closed the connection" in str(e.value)
    finally:
        listener.close()
        thread.join(timeout=5)
