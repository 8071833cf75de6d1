"""The kubelet's PodResources API: which container holds which device.

The kubelet serves ``v1.PodResourcesLister`` over gRPC on a Unix socket under its root directory
(``/var/lib/kubelet/pod-resources/kubelet.sock``). Two unary calls are used, both with empty
requests: ``List`` (every running container's devices, per resource) and
``GetAllocatableResources`` (every device the kubelet may hand out).

Parsing is pure (``parse_list_response`` / ``parse_allocatable_response``: protobuf bytes → facts);
``read_allocation`` is the thin reader. The protobuf wire format is decoded here for the few fields
used (message and field numbers of ``k8s.io/kubelet/pkg/apis/podresources/v1``), unknown fields
skipped as protobuf requires, so a newer kubelet that adds fields still parses. HTTP/2 framing and
HPACK are the ``h2`` library's (see ``call_unary``).

Field numbers used::

    ListPodResourcesResponse   1: repeated PodResources
    PodResources               1: name, 2: namespace, 3: repeated ContainerResources
    ContainerResources         1: name, 2: repeated ContainerDevices, 5: repeated DynamicResource
    ContainerDevices           1: resource_name, 2: repeated device_ids
    DynamicResource            2: claim_name, 3: claim_namespace, 4: repeated ClaimResource
    ClaimResource              2: driver_name, 3: pool_name, 4: device_name
    AllocatableResourcesResponse 1: repeated ContainerDevices

``DynamicResource`` (DRA: the devices of the container's ResourceClaims) is what a kubelet with
``KubeletPodResourcesDynamicResources`` (on by default from 1.34) adds; an older kubelet sends none.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator, Mapping

from nodetopo.errors import NodetopoError, ParseError, excerpt
from nodetopo.model import ClaimDevice, DeviceAssignment, KubeletAllocation, PodRef

NAME = "kubelet.podresources"
DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
LIST_METHOD = "/v1.PodResourcesLister/List"
ALLOCATABLE_METHOD = "/v1.PodResourcesLister/GetAllocatableResources"
#: the largest response read: a node's 110 pods with a few devices each are a few kilobytes
MAX_RESPONSE_BYTES = 8 << 20
#: bounds on what one response may name (a hostile or broken peer must not make us build millions)
MAX_ASSIGNMENTS = 65536
MAX_TEXT = 253  #: a DNS subdomain: pod, namespace and container names, resource names
MAX_DEVICE_ID = 1024

_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5
_GRPC_UNIMPLEMENTED = "12"


class PodResourcesError(NodetopoError):
    """The PodResources API could not be asked or did not answer usefully. ``reason`` is a condition
    reason (``Unavailable``, ``Timeout``, ``Degraded``)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class Unimplemented(PodResourcesError):
    """The kubelet does not serve this call (``GetAllocatableResources`` before Kubernetes 1.23)."""


# ---- protobuf wire format (pure) -----------------------------------------------------------


def _varint(data: bytes, pos: int, where: str) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ParseError(NAME, where, f"truncated varint at byte {pos}")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift >= 64:
            raise ParseError(NAME, where, f"varint longer than 10 bytes at byte {pos}")


def _fields(data: bytes, where: str) -> Iterator[tuple[int, bytes | int]]:
    """(field number, value) of one message: length-delimited values as bytes, varints as int;
    fixed-width fields are skipped (none of the fields used is fixed-width)."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos, where)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise ParseError(NAME, where, f"field number 0 at byte {pos}")
        if wire == _VARINT:
            value, pos = _varint(data, pos, where)
            yield number, value
        elif wire == _LEN:
            length, pos = _varint(data, pos, where)
            if length > len(data) - pos:
                raise ParseError(NAME, where, f"field {number} claims {length} bytes, {len(data) - pos} left")
            yield number, data[pos : pos + length]
            pos += length
        elif wire in (_I64, _I32):
            pos += 8 if wire == _I64 else 4
            if pos > len(data):
                raise ParseError(NAME, where, f"truncated fixed-width field {number}")
        else:
            raise ParseError(NAME, where, f"unsupported wire type {wire} for field {number}")


def _text(value: bytes | int, where: str, what: str, limit: int = MAX_TEXT) -> str:
    if not isinstance(value, bytes):
        raise ParseError(NAME, where, f"{what}: expected a string, got a number")
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        raise ParseError(NAME, where, f"{what}: not UTF-8: {excerpt(value)}") from None
    if len(text) > limit or not text.isprintable():
        raise ParseError(NAME, where, f"{what}: not a name: {excerpt(text)}")
    return text


def _message(value: bytes | int, where: str, what: str) -> bytes:
    if not isinstance(value, bytes):
        raise ParseError(NAME, where, f"{what}: expected a message, got a number")
    return value


def _read(
    data: bytes, where: str, texts: Mapping[int, str], repeated: tuple[int, str] | None = None
) -> tuple[list[str], list[bytes]]:
    """The text fields ``texts`` (number: name) of one message, in that order ("" when absent; the
    last one written counts), and each message of the repeated field ``repeated`` (number, name)."""
    found = dict.fromkeys(texts, "")
    messages: list[bytes] = []
    for number, value in _fields(data, where):
        if number in texts:
            found[number] = _text(value, where, texts[number])
        elif repeated is not None and number == repeated[0]:
            messages.append(_message(value, where, repeated[1]))
    return list(found.values()), messages


def _container_devices(data: bytes, where: str, room: int, what: str) -> tuple[str, tuple[str, ...]]:
    """One ``ContainerDevices``; a ``ParseError`` as soon as it names more than ``room`` device ids
    (the response's bound less what came before: counted as read, never after building them all)."""
    resource = ""
    ids: list[str] = []
    for number, value in _fields(data, where):
        if number == 1:
            resource = _text(value, where, "resource_name")
        elif number == 2:
            device = _text(value, where, "device_id", MAX_DEVICE_ID)
            if not device:
                raise ParseError(NAME, where, "an empty device_id")
            ids.append(device)
            if len(ids) > room:
                raise ParseError(NAME, where, f"more than {MAX_ASSIGNMENTS} {what}")
    if not resource:
        raise ParseError(NAME, where, "ContainerDevices without a resource_name")
    return resource, tuple(ids)


def _claim_devices(data: bytes, holder: PodRef, where: str) -> list[ClaimDevice]:
    """One ``DynamicResource`` (a claim of the container) → its devices."""
    (name, namespace), resources = _read(
        data, where, {2: "claim_name", 3: "claim_namespace"}, (4, "ClaimResource")
    )
    out = []
    for resource in resources:
        (driver, pool, device), _ = _read(
            resource, where, {2: "driver_name", 3: "pool_name", 4: "device_name"}
        )
        if not driver or not device:
            raise ParseError(
                NAME, where, f"ClaimResource of claim {namespace}/{name} without a driver or device"
            )
        out.append(
            ClaimDevice(driver=driver, pool=pool, device=device, claim=f"{namespace}/{name}", holder=holder)
        )
    return out


def _pod_containers(data: bytes, where: str) -> Iterator[tuple[str, str, bytes]]:
    """(namespace, pod name, ContainerResources message) of each container a
    ``ListPodResourcesResponse`` lists, pod by pod, in the order written."""
    for number, pod_value in _fields(data, where):
        if number != 1:
            continue
        (name, namespace), containers = _read(
            _message(pod_value, where, "PodResources"),
            where,
            {1: "pod name", 2: "pod namespace"},
            (3, "ContainerResources"),
        )
        for container in containers:
            yield namespace, name, container


def parse_list_claims(data: bytes, where: str = LIST_METHOD) -> tuple[ClaimDevice, ...]:
    """``ListPodResourcesResponse`` → one ``ClaimDevice`` per (container, claim, device), sorted."""
    out: list[ClaimDevice] = []
    for namespace, name, container in _pod_containers(data, where):
        fields = list(_fields(container, where))
        container_name = next((_text(v, where, "container name") for f, v in fields if f == 1), "")
        holder = PodRef(namespace=namespace, name=name, container=container_name)
        for field, value in fields:
            if field == 5:
                out += _claim_devices(_message(value, where, "DynamicResource"), holder, where)
        if len(out) > MAX_ASSIGNMENTS:
            raise ParseError(NAME, where, f"more than {MAX_ASSIGNMENTS} claim devices")
    return tuple(sorted(out, key=lambda c: (c.driver, c.pool, c.device, c.claim, c.holder)))


def parse_list_response(data: bytes, where: str = LIST_METHOD) -> tuple[DeviceAssignment, ...]:
    """``ListPodResourcesResponse`` → one ``DeviceAssignment`` per (container, device), sorted."""
    out: list[DeviceAssignment] = []
    for namespace, name, container in _pod_containers(data, where):
        container_name = ""
        devices: list[tuple[str, tuple[str, ...]]] = []
        for field, value in _fields(container, where):
            if field == 1:
                container_name = _text(value, where, "container name")
            elif field == 2:
                room = MAX_ASSIGNMENTS - len(out) - sum(len(ids) for _, ids in devices)
                message = _message(value, where, "ContainerDevices")
                devices.append(_container_devices(message, where, room, "device assignments"))
        holder = PodRef(namespace=namespace, name=name, container=container_name)
        for resource, ids in devices:
            out.extend(DeviceAssignment(resource=resource, device_id=i, holder=holder) for i in ids)
        if len(out) > MAX_ASSIGNMENTS:
            raise ParseError(NAME, where, f"more than {MAX_ASSIGNMENTS} device assignments")
    return tuple(sorted(out, key=lambda a: (a.resource, a.device_id, a.holder)))


def parse_allocatable_response(
    data: bytes, where: str = ALLOCATABLE_METHOD
) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``AllocatableResourcesResponse`` → (resource, sorted device ids), sorted by resource."""
    by_resource: dict[str, set[str]] = {}
    count = 0
    for number, value in _fields(data, where):
        if number == 1:
            message = _message(value, where, "ContainerDevices")
            resource, ids = _container_devices(message, where, MAX_ASSIGNMENTS - count, "allocatable devices")
            by_resource.setdefault(resource, set()).update(ids)
            count += len(ids)
            if count > MAX_ASSIGNMENTS:
                raise ParseError(NAME, where, f"more than {MAX_ASSIGNMENTS} allocatable devices")
    return tuple((r, tuple(sorted(ids))) for r, ids in sorted(by_resource.items()))


def grpc_frame(message: bytes) -> bytes:
    """A gRPC length-prefixed message (uncompressed)."""
    return b"\x00" + len(message).to_bytes(4, "big") + message


def parse_grpc_body(body: bytes, where: str) -> bytes:
    """The one message of a unary gRPC response body (5-byte prefix, then the message)."""
    if len(body) < 5:
        raise ParseError(NAME, where, f"gRPC response body of {len(body)} bytes, expected at least 5")
    if body[0] != 0:
        raise ParseError(NAME, where, "compressed gRPC message (no compression was offered)")
    length = int.from_bytes(body[1:5], "big")
    if length != len(body) - 5:
        raise ParseError(NAME, where, f"gRPC message of {length} bytes in a body of {len(body) - 5}")
    return body[5:]


# ---- transport: one unary gRPC call over HTTP/2 on a Unix socket -----------------------------


def call_unary(
    path: str, method: str, request: bytes = b"", *, timeout_s: float = 5.0, limit: int = MAX_RESPONSE_BYTES
) -> bytes:
    """Call ``method`` on the gRPC server at the Unix socket ``path``; return the response message.

    HTTP/2 (connection preface, SETTINGS, HPACK-compressed headers, flow control) is done by the
    ``h2`` state machine; this function only moves bytes, with one deadline for the whole call.
    Raises ``PodResourcesError`` (``Unimplemented`` for gRPC status 12) or ``ParseError``.
    """
    # imported here: only the agent and `publish --pod-resources-socket` speak HTTP/2
    import h2.config
    import h2.connection
    import h2.events
    import h2.exceptions

    deadline = time.monotonic() + timeout_s
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        try:
            sock.settimeout(timeout_s)
            sock.connect(path)
        except FileNotFoundError:
            raise PodResourcesError("Unavailable", f"no kubelet PodResources socket at {path}") from None
        except PermissionError:
            raise PodResourcesError(
                "Unavailable",
                f"permission denied connecting to {path}: the kubelet's socket is writable by root only",
            ) from None
        except ConnectionRefusedError:
            raise PodResourcesError(
                "Unavailable", f"nothing listens on {path} (kubelet not running?)"
            ) from None
        except TimeoutError:
            raise PodResourcesError("Timeout", f"connecting to {path} took over {timeout_s:g}s") from None
        except OSError as e:
            raise PodResourcesError("Unavailable", f"cannot connect to {path}: {e.strerror or e}") from None

        conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        )
        conn.initiate_connection()
        stream = conn.get_next_available_stream_id()
        conn.send_headers(
            stream,
            [
                (":method", "POST"),
                (":scheme", "http"),
                (":path", method),
                (":authority", "localhost"),
                ("content-type", "application/grpc"),
                ("te", "trailers"),
                ("grpc-timeout", f"{max(1, int(timeout_s * 1000))}m"),
            ],
        )
        conn.send_data(stream, grpc_frame(request), end_stream=True)
        headers: dict[str, str] = {}
        body = bytearray()
        ended = False
        try:
            sock.sendall(conn.data_to_send())
            while not ended:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                sock.settimeout(left)
                chunk = sock.recv(65536)
                if not chunk:
                    raise PodResourcesError("Unavailable", f"{path} closed the connection during {method}")
                for event in conn.receive_data(chunk):
                    if isinstance(event, h2.events.ResponseReceived | h2.events.TrailersReceived):
                        headers.update((str(k), str(v)) for k, v in event.headers)
                    elif isinstance(event, h2.events.DataReceived):
                        body += event.data
                        if len(body) > limit:
                            raise PodResourcesError("Degraded", f"{method} answered more than {limit} bytes")
                        conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                    elif isinstance(event, h2.events.StreamEnded):
                        ended = True
                    elif isinstance(event, h2.events.StreamReset | h2.events.ConnectionTerminated):
                        raise PodResourcesError("Unavailable", f"{path} reset the stream of {method}")
                pending = conn.data_to_send()
                if pending:
                    sock.sendall(pending)
        except TimeoutError:
            raise PodResourcesError(
                "Timeout", f"{method} on {path}: no answer within {timeout_s:g}s"
            ) from None
        except h2.exceptions.ProtocolError as e:
            raise ParseError(NAME, method, f"HTTP/2 protocol error from {path}: {type(e).__name__}") from None
        except OSError as e:
            raise PodResourcesError("Unavailable", f"{method} on {path}: {e.strerror or e}") from None
    finally:
        sock.close()
    status = headers.get("grpc-status")
    if status is None:
        http = headers.get(":status", "?")
        raise ParseError(NAME, method, f"no grpc-status in the answer (HTTP status {http})")
    if status != "0":
        message = headers.get("grpc-message", "")
        text = f"{method} failed with gRPC status {status}" + (
            f": {excerpt(message, 120)}" if message else ""
        )
        raise (Unimplemented if status == _GRPC_UNIMPLEMENTED else PodResourcesError)("Degraded", text)
    return parse_grpc_body(bytes(body), method)


def read_allocation(path: str = DEFAULT_SOCKET, *, timeout_s: float = 5.0) -> KubeletAllocation:
    """Ask the kubelet at ``path``: ``List``, then ``GetAllocatableResources`` (None if not served).

    Raises ``PodResourcesError`` or ``ParseError``; the caller turns either into "allocation unknown".
    """
    deadline = time.monotonic() + timeout_s
    listed = call_unary(path, LIST_METHOD, timeout_s=timeout_s)
    assignments, claim_devices = parse_list_response(listed), parse_list_claims(listed)
    left = max(0.1, deadline - time.monotonic())
    try:
        allocatable: tuple[tuple[str, tuple[str, ...]], ...] | None = parse_allocatable_response(
            call_unary(path, ALLOCATABLE_METHOD, timeout_s=left)
        )
    except Unimplemented:
        allocatable = None
    return KubeletAllocation(assignments=assignments, allocatable=allocatable, claim_devices=claim_devices)


def ask_kubelet(path: str = DEFAULT_SOCKET, *, timeout_s: float = 5.0) -> KubeletAllocation | str:
    """``read_allocation``, with a failure (``PodResourcesError``, ``ParseError``) as its reason: what
    the agent and ``nodetopo publish`` publish as an unknown allocation."""
    try:
        return read_allocation(path, timeout_s=timeout_s)
    except (PodResourcesError, ParseError) as e:
        return str(e)
