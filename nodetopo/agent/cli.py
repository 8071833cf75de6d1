"""``nodetopo agent``: flags, the composition root, signals. Registered by ``nodetopo.cli``.

Settings come from flags > environment > config file > defaults (``nodetopo.agent.config``). A
flag is "given" only when it is on the command line: this module replaces the defaults of the
shared flags (``--log-level``, ``--host-root`` ...) with markers so that an environment variable or
the config file can still supply them.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import socket
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from nodetopo.agent import config as agent_config
from nodetopo.agent.health import Health, HealthServer
from nodetopo.agent.loop import Agent
from nodetopo.agent.metrics import AgentStats, make_registry
from nodetopo.agent.publisher import AgentPublisher, ApiPublisher, DryRunPublisher, read_node_labels
from nodetopo.agent.udev import EventSource, NoEvents, UdevEventSource
from nodetopo.command.args import AddArguments, add_command
from nodetopo.command.logs import configure_logging
from nodetopo.command.signals import StopSignals
from nodetopo.kube.flags import add_kube_args
from nodetopo.kube.pacing import TokenBucket
from nodetopo.kubelet.allocation import GPU_DRA_DRIVERS, with_slices
from nodetopo.model import SliceDevice
from nodetopo.resource.noderesourcetopology import add_nrt_args

log = logging.getLogger(__name__)

HELP = "run the long-running agent: discover, publish on change, serve /healthz /readyz /metrics"
DESCRIPTION = """\
Discover this node's topology after a random start delay, then on a jittered interval and on
hot-plug (udev) events, and server-side-apply the NodeTopology resource and the nodetopo.io/ labels
of the node when they change. Serves /healthz, /readyz and /metrics on one port.

Every setting can come from a flag, an environment variable NODETOPO_<SETTING> (NODE_NAME for
the node name) or a YAML config file (--config / NODETOPO_CONFIG) with the settings as keys.
Precedence: flag > environment > config file > default.
"""


class _Unset(str):
    """A default that was not given on the command line (still a usable str for cli.main)."""

    __slots__ = ()


#: flag dest → config field, for the flags shared with other subcommands
_SHARED = {
    "host_root": "host_root",
    "bundle": "bundle",
    "command_timeout": "command_timeout_seconds",
    "nvml": "nvml",
}

#: (flag, config field, type, help)
_NUMERIC: tuple[tuple[str, str, type, str], ...] = (
    ("--interval-seconds", "interval_seconds", float, "rediscover this often (default 60)"),
    ("--jitter", "jitter", float, "vary the interval by ± this fraction (default 0.1)"),
    ("--start-delay-max-seconds", "start_delay_max_seconds", float, "random start delay bound (default 30)"),
    ("--debounce-seconds", "debounce_seconds", float, "quiet time that ends a udev burst (default 2)"),
    ("--resync-seconds", "resync_seconds", float, "at most one forced resync per this (default 3600)"),
    ("--qps", "qps", float, "client-side API rate limit, requests/s (default 1)"),
    ("--burst", "burst", int, "API requests allowed at once (default 5)"),
    ("--backoff-initial-seconds", "backoff_initial_seconds", float, "first retry delay (default 1)"),
    ("--backoff-max-seconds", "backoff_max_seconds", float, "longest retry delay (default 60)"),
    (
        "--allocation-interval-seconds",
        "allocation_interval_seconds",
        float,
        "ask the kubelet which pod holds which GPU this often; publish when it changes (default 5)",
    ),
    (
        "--allocation-grace-seconds",
        "allocation_grace_seconds",
        float,
        "keep the kubelet's last answer this long when it stops answering, e.g. a restart (default 60)",
    ),
)


def register(sub: Any, add_common: AddArguments, add_input: AddArguments) -> None:
    p = add_command(sub, "agent", help=HELP, description=DESCRIPTION)
    add_input(p)
    p.add_argument("--config", metavar="FILE", help="YAML config file (env NODETOPO_CONFIG)")
    p.add_argument(
        "--node-name",
        default=None,
        help="this node (env NODE_NAME, from the downward API); a --dry-run without one names the "
        "--from bundle's node (as discover does), else the hostname",
    )
    add_kube_args(p)
    p.add_argument("--once", action="store_true", default=None, help="discover and publish once, then exit")
    p.add_argument(
        "--dry-run",
        action="store_true",
        default=None,
        help="print the NodeTopology and the label patch that would be applied; no API calls",
    )
    p.add_argument("--listen", default=None, metavar="[ADDR]:PORT", help="health/metrics (default :8080)")
    p.add_argument(
        "--udev",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="rediscover on pci/infiniband/net/nvidia uevents (default on)",
    )
    p.add_argument("--nfd", action="store_true", default=None, help="labels via an NFD NodeFeature")
    add_nrt_args(p, default=None)
    p.add_argument(
        "--pod-resources-socket",
        default=None,
        metavar="PATH",
        help="the kubelet's PodResources socket, asked which pod holds each GPU (status.gpus[].heldBy); "
        "'' = do not ask (env NODETOPO_POD_RESOURCES_SOCKET; default "
        "/var/lib/kubelet/pod-resources/kubelet.sock)",
    )
    for flag, _field, kind, text in _NUMERIC:
        p.add_argument(flag, type=kind, default=None, help=text)
    add_common(p)
    # Shared flags: not given unless on the command line (env and the config file come later).
    p.set_defaults(
        func=cmd_agent,
        log_level=_Unset("info"),
        log_format=_Unset(os.environ.get("NODETOPO_LOG_FORMAT", "text")),
        host_root=None,
        bundle=None,
        command_timeout=None,
        nvml=None,
        kube_context=None,
    )


def given_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The settings given on the command line, as config field names."""
    flags: dict[str, Any] = {}
    for dest, value in vars(args).items():
        if value is None or isinstance(value, _Unset) or dest in ("func", "command", "config"):
            continue
        name = _SHARED.get(dest, dest)
        if name in agent_config.FIELDS:
            flags[name] = value
    return flags


def build_agent(
    config: agent_config.AgentConfig,
    *,
    publisher: AgentPublisher | None = None,
    events: EventSource | None = None,
    read_published: Callable[[], Mapping[str, Any] | None] | None = None,
) -> Agent:
    """The production wiring: host (or bundle) seams, API publisher (or dry run), udev events.
    ``read_published``: how the agent reads the NodeTopology its node last published, to start its
    edge health from (default: from the API when it publishes there; a dry run starts from nothing)."""
    from nodetopo.agent.restart import SeededJudge, read_boot_id
    from nodetopo.health import DEFAULT_POLICY, HealthTracker
    from nodetopo.resource.identity import GROUP, PLURAL, VERSION
    from nodetopo.topology.discover import bundle_context, host_context, scan

    # the agent scans its context every interval: it keeps its link files open between scans
    ctx = (
        bundle_context(config.bundle, rescans=True)
        if config.bundle
        else host_context(
            config.host_root,
            timeout_s=config.command_timeout_seconds,
            nvml=config.nvml,
            # the fabric sources' settings come from the DaemonSet's env (see `nodetopo fabric`)
            fabric_map=os.environ.get("NODETOPO_FABRIC_MAP") or None,
            cloud_metadata=os.environ.get("NODETOPO_CLOUD_METADATA") or None,
            rescans=True,
        )
    )
    node_name = config.node_name
    node_labels = None
    slice_reader: Callable[[], tuple[SliceDevice, ...] | str] | None = None
    if publisher is None:
        if config.dry_run:
            publisher = DryRunPublisher(node_name, sys.stdout, nrt=config.topology_manager())
        else:
            from nodetopo.kube.session import RateLimitedSession
            from nodetopo.kube.transport import connect

            bucket = TokenBucket(config.qps, config.burst, clock=time.monotonic, sleep=time.sleep)
            session = RateLimitedSession(connect(config.kubeconfig, context=config.kube_context), bucket)
            publisher = ApiPublisher(session, node_name, nfd=config.nfd, nrt=config.topology_manager())
            node_labels = functools.partial(read_node_labels, session, node_name)
            # the NodeTopology this node's agent last published: the restarted agent's health baseline
            if read_published is None:
                read_published = functools.partial(
                    session.read_cluster_object, GROUP, VERSION, PLURAL, node_name
                )
            from nodetopo.kube.resourceslices import read_resource_slices

            slice_reader = functools.partial(
                read_resource_slices, session, node_name, drivers=GPU_DRA_DRIVERS
            )
    if events is None:
        events = UdevEventSource(config.udev_source) if config.udev else NoEvents()
    allocation = None
    if config.pod_resources_socket and not config.bundle:
        from nodetopo.kubelet.podresources import ask_kubelet

        timeout = min(config.command_timeout_seconds, 5.0)
        allocation = functools.partial(
            with_slices,
            functools.partial(ask_kubelet, config.pod_resources_socket, timeout_s=timeout),
            slice_reader,
        )
    # the links are judged over scans: K degraded scans publish an edge, K clean ones clear it, counter
    # rates between scans and, from the baseline the last published status recorded, across a restart
    tracker = HealthTracker(DEFAULT_POLICY, boot=read_boot_id(ctx.root, bundle=ctx.bundle))
    judge = SeededJudge(tracker, read_published)
    return Agent(
        config,
        scan=lambda: scan(ctx, judge=judge),
        publisher=publisher,
        events=events,
        allocation=allocation,
        node_labels=node_labels,
    )


def cmd_agent(args: argparse.Namespace) -> int:
    try:
        config = agent_config.load(given_flags(args), os.environ, config_path=args.config)
    except agent_config.ConfigError as e:
        print(f"nodetopo agent: {e}", file=sys.stderr)
        return 2
    if not config.node_name:  # --dry-run without a node name: the bundle's node, else the hostname
        from nodetopo.bundle import bundle_node_name

        named = bundle_node_name(config.bundle) if config.bundle else socket.gethostname()
        config = agent_config.AgentConfig(
            **{**{f: getattr(config, f) for f in agent_config.FIELDS}, "node_name": named}
        )
    configure_logging(config.log_level, config.log_format)  # cli.main saw flags/env only
    agent = build_agent(config)
    server = None
    address = agent_config.listen_address(config.listen)
    if address is not None and not config.once:
        health: Health = agent.health
        try:
            server = HealthServer(address, health, make_registry(agent.stats)).start()
        except OSError as e:
            print(f"nodetopo agent: cannot listen on {config.listen}: {e.strerror or e}", file=sys.stderr)
            return 1

    def on_stop(name: str) -> None:  # called by the watcher thread, never inside the signal handler
        log.info("%s: finishing the current write, then exiting", name)
        agent.stop()

    signals = StopSignals(on_stop).install()
    log.info(
        "nodetopo agent for node %s (%s)", config.node_name, "dry run" if config.dry_run else "publishing"
    )
    try:
        return agent.run()
    finally:
        signals.close()
        if server is not None:
            server.stop()


__all__ = ["AgentStats", "build_agent", "cmd_agent", "given_flags", "register"]
