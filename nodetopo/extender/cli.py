"""``nodetopo extender``: serve the kube-scheduler extender (registered by ``nodetopo.cli``)."""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import ssl

from nodetopo.command.args import AddArguments, add_command
from nodetopo.errors import NodetopoError
from nodetopo.extender.limits import MAX_BODY_BYTES, MAX_CONNECTIONS, MEMORY_BUDGET_BYTES, REQUEST_TIMEOUT_S
from nodetopo.kube.flags import add_kube_args

log = logging.getLogger(__name__)

DESCRIPTION = """\
Serve the kube-scheduler extender protocol (POST /filter, /prioritize; GET /healthz, /readyz, /metrics) from a
watch of NodeTopology objects and of the GPU pods bound to each node. Pods state their needs in
nodetopo.io/ annotations (gpus-in-one-island, max-nic-distance, numa-aligned, rdma, link-layer).
Answers 503 until both caches have synced. See deploy/extender/ for the scheduler configuration.
"""


def register(sub: Any, add_common: AddArguments, add_input: AddArguments) -> None:
    p = add_command(
        sub,
        "extender",
        help="serve the kube-scheduler extender (topology-aware GPU placement)",
        description=DESCRIPTION,
    )
    p.add_argument(
        "--listen",
        default=os.environ.get("NODETOPO_EXTENDER_LISTEN", "0.0.0.0:8888"),
        metavar="HOST:PORT",
        help="address to serve on (env NODETOPO_EXTENDER_LISTEN; default: %(default)s)",
    )
    add_kube_args(p)
    p.add_argument(
        "--page-size",
        type=int,
        default=250,
        metavar="N",
        help="objects per list page (NodeTopology and Pod lists): bounds the memory a list takes "
        "(default: %(default)s)",
    )
    p.add_argument("--tls-cert-file", metavar="FILE", help="serve HTTPS with this certificate chain (PEM)")
    p.add_argument("--tls-private-key-file", metavar="FILE", help="the certificate's private key (PEM)")
    p.add_argument(
        "--tls-client-ca-file",
        metavar="FILE",
        help="require a client certificate signed by this CA for /filter, /prioritize and /metrics "
        "(kube-scheduler's tlsConfig certFile/keyFile); /healthz and /readyz stay open for probes",
    )
    p.add_argument(
        "--max-connections",
        type=int,
        default=MAX_CONNECTIONS,
        metavar="N",
        help="requests served at once; a connection whose request has not arrived holds no slot "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--max-body-bytes",
        type=int,
        default=MAX_BODY_BYTES,
        metavar="N",
        help="largest request body (default: %(default)s: a 3 MiB pod plus 20,000 node names)",
    )
    p.add_argument(
        "--memory-budget-bytes",
        type=int,
        default=MEMORY_BUDGET_BYTES,
        metavar="N",
        help="memory all requests in flight may reserve together (default: %(default)s)",
    )
    p.add_argument(
        "--request-timeout",
        type=float,
        default=REQUEST_TIMEOUT_S,
        metavar="SECONDS",
        help="a request's head must arrive within this, then its body and answer (default: %(default)s)",
    )
    add_common(p)
    p.set_defaults(func=cmd_extender)


class UsageError(ValueError):
    """A flag value that cannot be used: one line on stderr, exit 2."""


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT``, ``:PORT`` for every interface) → (host, port)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise UsageError(f"--listen: expected HOST:PORT with a port of 0-65535, got {text!r}")
    host = host.strip("[]") or "0.0.0.0"
    try:
        socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
    except (socket.gaierror, UnicodeError):
        raise UsageError(f"--listen: {host!r} is not an IP address (give the address to listen on)") from None
    return host, int(port)


def tls_context(cert: str | None, key: str | None, client_ca: str | None) -> ssl.SSLContext | None:
    import ssl

    """The server's TLS context, or None for plain HTTP; ``UsageError`` for unusable files."""
    if not cert and not key:
        if client_ca:
            raise UsageError("--tls-client-ca-file needs --tls-cert-file and --tls-private-key-file")
        return None
    if not cert or not key:
        raise UsageError("--tls-cert-file and --tls-private-key-file go together")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
        if client_ca:
            # OPTIONAL, not REQUIRED: the kubelet's probes carry no client certificate. A certificate
            # that is presented must verify; /filter, /prioritize and /metrics then require one.
            context.load_verify_locations(cafile=client_ca)
            context.verify_mode = ssl.CERT_OPTIONAL
    except (OSError, ssl.SSLError) as e:
        raise UsageError(f"TLS files {cert}, {key}{', ' + client_ca if client_ca else ''}: {e}") from None
    return context


def cmd_extender(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except UsageError as e:
        print(f"nodetopo extender: {e}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    from nodetopo.command.signals import StopSignals
    from nodetopo.extender.cache import ClusterState, start_reflectors
    from nodetopo.extender.claims import ClaimReader, session_getter
    from nodetopo.extender.limits import RequestLimits
    from nodetopo.extender.server import make_server
    from nodetopo.httpserver import Limits
    from nodetopo.kube.session import ApiSession
    from nodetopo.kube.transport import connect

    host, port = parse_listen(args.listen)
    try:
        limits = Limits(max_connections=args.max_connections, request_timeout_s=args.request_timeout)
        request_limits = RequestLimits(
            max_body_bytes=args.max_body_bytes, memory_budget_bytes=args.memory_budget_bytes
        )
    except ValueError as e:
        raise UsageError(str(e)) from None
    context = tls_context(args.tls_cert_file, args.tls_private_key_file, args.tls_client_ca_file)
    state = ClusterState()
    try:  # bind first: a busy port is reported before anything else starts
        server = make_server(
            state, host, port, limits=limits, request_limits=request_limits, ssl_context=context
        )
    except OSError as e:
        raise NodetopoError(f"extender: cannot listen on {args.listen}: {e.strerror or e}") from None
    stop = threading.Event()
    try:
        connection = connect(args.kubeconfig, context=args.kube_context)
        connection.check_credentials()  # an exec plugin or token file that fails, said at start
    except Exception as e:  # a kubeconfig nodetopo cannot use, an unreadable token file
        server.server_close()
        if isinstance(e, NodetopoError):
            raise
        raise NodetopoError(f"no usable Kubernetes configuration: {_first_line(e)}") from None
    start_reflectors(connection, state, page_size=args.page_size, stop=stop)
    # claim-based pods' ResourceClaims: GETs on a connection of their own (the reflectors' relists
    # never delay a /filter)
    server.claims = ClaimReader(
        session_getter(ApiSession(connect(args.kubeconfig, context=args.kube_context)))
    )

    def on_stop(name: str) -> None:  # the watcher thread, never the signal handler (nodetopo.command.signals)
        log.info("%s: shutting down", name)
        stop.set()
        server.shutdown()

    signals = StopSignals(on_stop).install()
    log.info(
        "extender listening on %s:%d (%s)", host, server.port, "https" if context is not None else "http"
    )
    try:
        server.serve_forever()
    finally:
        stop.set()
        signals.close()
        server.server_close()
    log.info("extender stopped")
    return 0


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return (text[0] if text else type(error).__name__)[:300]
