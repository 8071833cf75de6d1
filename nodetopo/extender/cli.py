"""``nodetopo extender``: serve the kube-scheduler extender (registered by ``nodetopo.cli``)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

log = logging.getLogger(__name__)

DESCRIPTION = """\
Serve the kube-scheduler extender protocol (POST /filter, /prioritize; GET /healthz, /readyz) from a
watch of NodeTopology objects and of the GPU pods bound to each node. Pods state their needs in
nodetopo.io/ annotations (gpus-in-one-island, max-nic-distance, numa-aligned, rdma, link-layer).
Answers 503 until both caches have synced. See deploy/extender/ for the scheduler configuration.
"""


def register(
    sub: Any,
    add_common: Callable[[argparse.ArgumentParser], None],
    add_input: Callable[[argparse.ArgumentParser], None],
) -> None:
    p = sub.add_parser(
        "extender",
        help="serve the kube-scheduler extender (topology-aware GPU placement)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--listen",
        default=os.environ.get("NODETOPO_EXTENDER_LISTEN", "0.0.0.0:8888"),
        metavar="HOST:PORT",
        help="address to serve on (env NODETOPO_EXTENDER_LISTEN; default: %(default)s)",
    )
    p.add_argument(
        "--kubeconfig", default=os.environ.get("KUBECONFIG"), help="default: in-cluster, or $KUBECONFIG"
    )
    p.add_argument(
        "--page-size", type=int, default=500, metavar="N", help="objects per list page (default: %(default)s)"
    )
    add_common(p)
    p.set_defaults(func=cmd_extender)


def parse_listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"--listen: expected HOST:PORT, got {text!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def cmd_extender(args: argparse.Namespace) -> int:
    from nodetopo.extender.cache import ClusterState, start_reflectors
    from nodetopo.extender.server import make_server
    from nodetopo.publish.client import load_api_client

    host, port = parse_listen(args.listen)
    state = ClusterState()
    stop = threading.Event()
    start_reflectors(load_api_client(args.kubeconfig), state, page_size=args.page_size, stop=stop)
    server = make_server(state, host, port)

    def _terminate(signum: int, frame: FrameType | None) -> None:
        log.info("signal %d: shutting down", signum)
        stop.set()
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, _terminate)
    log.info("extender listening on %s:%d", host, server.port)
    try:
        server.serve_forever()
    finally:
        stop.set()
        server.server_close()
    return 0
