"""``nodetopo``: command-line entry point. Parses flags, configures logging once, calls the library.

Exit codes: 0 success; 1 an error nodetopo could not work around (message on stderr); 2 bad usage or
an unusable input (not a bundle, missing file); 3 ``discover --strict`` found the result not Ready.

Start-up cost: a subcommand imports only what it runs. Module-level imports here are the standard
library and nodetopo's small leaf modules; each handler imports its own work, and the subcommands that
live in their own modules (``_MODULE_COMMANDS``) are imported only when one of them is run or the
whole command list is needed (``--help``, a usage error). ``tests/cli/test_cli_imports.py`` holds
``discover`` to that.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nodetopo import __version__
from nodetopo.command.args import add_output_format, number, require, run_command
from nodetopo.command.logs import configure_logging
from nodetopo.command.terminal import strip_control
from nodetopo.errors import BundleError
from nodetopo.kube.flags import add_kube_args
from nodetopo.resource.noderesourcetopology import TopologyManager, add_nrt_args

log = logging.getLogger("nodetopo")

DESCRIPTION = """\
nodetopo reads a GPU node's topology — NUMA nodes, the PCIe tree, RDMA NICs, GPUs, NVLink islands,
GPU–NIC affinity (PIX/PXB/PHB/NODE/SYS), MIG devices — from sysfs, nvidia-smi, NVML and ibstat,
and publishes it as a NodeTopology resource and nodetopo.io/ node labels.
"""

EPILOG = """\
examples:
  nodetopo discover                          this host, as a table
  nodetopo discover -o json                  the NodeTopology object nodetopo would publish
  nodetopo capture /tmp/node-bundle          a support bundle (sysfs subset + command outputs + NVML dump)
  nodetopo discover --from /tmp/node-bundle  replay a bundle exactly as the live host
  nodetopo agent --node-name $NODE_NAME      the DaemonSet's long-running agent
"""


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--log-level",
        default=os.environ.get("NODETOPO_LOG_LEVEL", "warning"),
        choices=["debug", "info", "warning", "error"],
        help="log verbosity on stderr (env NODETOPO_LOG_LEVEL; default: %(default)s)",
    )
    p.add_argument(
        "--log-format",
        default=os.environ.get("NODETOPO_LOG_FORMAT", "text"),
        choices=["text", "json"],
        help="log line format (env NODETOPO_LOG_FORMAT; default: %(default)s)",
    )


def command_timeout(text: str) -> float:
    """``--command-timeout``: a finite number of seconds, more than 0 and at most an hour."""
    value = number(text, "a number of seconds", float)
    require(
        math.isfinite(value) and 0 < value <= 3600,
        f"must be more than 0 and at most 3600 seconds, not {text}",
    )
    return value


LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("text", "json")


def _add_input(p: argparse.ArgumentParser) -> None:
    group = p.add_mutually_exclusive_group()
    group.add_argument(
        "--host-root",
        default=os.environ.get("NODETOPO_HOST_ROOT", "/"),
        metavar="DIR",
        help="directory holding the host's /sys (default: /; the DaemonSet mounts the host at /host)",
    )
    group.add_argument(
        "--from",
        dest="bundle",
        metavar="BUNDLE",
        help="read a capture bundle (made by `nodetopo capture`) instead of the live host",
    )
    p.add_argument(
        "--command-timeout",
        type=command_timeout,
        default=20.0,
        metavar="SECONDS",
        help="kill nvidia-smi/ibstat after this long and report a Timeout condition (default: 20)",
    )
    p.add_argument(
        "--nvml",
        choices=["auto", "on", "off"],
        default=os.environ.get("NODETOPO_NVML", "auto"),
        help="use the live NVML library: auto = only when --host-root is / (NVML cannot see a fake root); "
        "on = also under another root, as in the DaemonSet (env NODETOPO_NVML; default: auto)",
    )


def _add_fabric(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--fabric-map",
        default=os.environ.get("NODETOPO_FABRIC_MAP") or None,
        metavar="FILE",
        help="InfiniBand fabric map written by `nodetopo fabric` (env NODETOPO_FABRIC_MAP); without it each "
        "IB port asks only the switch at its far end (tier 0)",
    )
    p.add_argument(
        "--cloud-metadata",
        default=os.environ.get("NODETOPO_CLOUD_METADATA") or None,
        metavar="PROVIDER=URL",
        help="read the cloud's topology metadata: gce=URL, aws=URL or oci=URL (env NODETOPO_CLOUD_METADATA; "
        "default: off)",
    )


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser, or (``command`` given) one that knows only the built-in subcommands and
    ``command``: enough to parse a command line that runs ``command``."""
    parser = argparse.ArgumentParser(
        prog="nodetopo",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"nodetopo {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser(
        "discover",
        help="discover this node's topology and print it",
        description="Discover the topology of this host (or of a capture bundle) and print it. "
        "Sources that fail become conditions in the output; discovery itself does not fail.",
    )
    _add_input(p)
    _add_fabric(p)
    add_output_format(
        p,
        ("table", "yaml", "json", "dot", "svg"),
        "table (default), the NodeTopology as yaml or json, or a picture of the node: a Graphviz "
        "graph (dot) or that graph drawn as SVG (svg; needs Graphviz's `dot` program)",
    )
    p.add_argument(
        "--node-name",
        default=None,
        help="name to put in the NodeTopology object (default: with --from, the host the bundle's "
        "manifest names, else the bundle's directory or file name; else $NODE_NAME or the hostname)",
    )
    p.add_argument(
        "--strict",
        action="store_true",
        help="exit 3 when the result is not Ready: an essential source (sysfs PCI, sysfs NUMA) observed "
        "nothing (Missing: a wrong --host-root), a source failed (ParseError, Timeout, Degraded) or "
        "sources disagree (Inconsistent). A tool that is simply absent (no ibstat, no nvidia-smi on a "
        "CPU node) is not a failure",
    )
    p.add_argument(
        "--matrix",
        action="store_true",
        help="table: add the GPU×GPU matrix as `nvidia-smi topo -m` prints it (NV#, PIX ... SYS)",
    )
    _add_common(p)
    p.set_defaults(func=cmd_discover)

    p = sub.add_parser(
        "capture",
        help="write a capture bundle of this node (for bug reports and fixtures)",
        description="Copy the sysfs subset nodetopo reads (symlinks kept), the outputs of nvidia-smi and "
        "ibstat, and an NVML dump into DIR. `nodetopo discover --from DIR` then reproduces this host.",
    )
    p.add_argument(
        "directory",
        metavar="DIR",
        help="bundle directory to create (must not exist or be empty); with --tar, the archive: a new "
        "path, or '-' is standard output (a FIFO or character device is written in place)",
    )
    p.add_argument("--host-root", default="/", metavar="DIR", help="host root to capture (default: /)")
    p.add_argument(
        "--command-timeout",
        type=command_timeout,
        default=30.0,
        metavar="SECONDS",
        help="kill nvidia-smi/ibstat after this long; the bundle records the Timeout (default: %(default)s)",
    )
    p.add_argument("--no-nvml", action="store_true", help="do not try to dump NVML")
    p.add_argument(
        "--tar",
        action="store_true",
        help="write one archive, DIR.tar.gz (or DIR itself when it ends in .tar.gz/.tgz/.tar), instead of "
        "a directory; `discover --from` reads it as it is",
    )
    p.add_argument(
        "--node-name",
        default=None,
        help="node name to record in the bundle's manifest (default: $NODE_NAME or the hostname)",
    )
    _add_common(p)
    p.set_defaults(func=cmd_capture)

    p = sub.add_parser(
        "publish",
        help="discover once and publish the NodeTopology and labels to the cluster",
        description="Discover (host or --from bundle) and server-side-apply the NodeTopology resource and "
        "the nodetopo.io/ labels of NODE, once. The agent does this in a loop.",
    )
    _add_input(p)
    _add_fabric(p)
    p.add_argument(
        "--node-name",
        help="the Node to publish for: its NodeTopology and labels (default: with --from, the host the "
        "bundle's manifest names, else the bundle's directory or file name; else $NODE_NAME)",
    )
    add_kube_args(p)
    p.add_argument(
        "--nfd", action="store_true", help="publish labels as an NFD NodeFeature instead of the Node"
    )
    add_nrt_args(p)
    p.add_argument(
        "--pod-resources-socket",
        default=None,
        metavar="PATH",
        help="also ask the kubelet's PodResources socket (e.g. /var/lib/kubelet/pod-resources/kubelet.sock) "
        "which pod holds each GPU and publish it (status.gpus[].heldBy, status.allocation); "
        "default: do not ask",
    )
    _add_common(p)
    p.set_defaults(func=cmd_publish)

    _add_module_commands(sub, command)
    return parser


#: Subcommands implemented in their own modules, in the order ``--help`` lists them: (name, module).
#: Each module's ``register(sub, add_common, add_input)`` adds its parser.
_MODULE_COMMANDS: tuple[tuple[str, str], ...] = (
    ("agent", "nodetopo.agent.cli"),
    ("extender", "nodetopo.extender.cli"),
    ("ray", "nodetopo.ray.cli"),
    ("export", "nodetopo.export.cli"),
    ("export-controller", "nodetopo.export.cli"),
    ("fabric", "nodetopo.export.fabric_cli"),
    ("admit", "nodetopo.admission.cli"),
    ("summary-controller", "nodetopo.admission.cli"),
    ("probe", "nodetopo.probe.cli"),
    ("expect", "nodetopo.delivery.cli"),
    ("accept", "nodetopo.delivery.cli"),
)
_BUILTIN_COMMANDS = ("discover", "capture", "publish")


def _add_module_commands(sub: Any, command: str | None) -> None:
    """Register the subcommands that live in their own modules: only ``command``'s when one is given
    (importing the agent costs more than a whole discovery), else all of them."""
    registered: set[str] = set()  # a module may register several commands
    for name, module_name in _MODULE_COMMANDS:
        if (command is not None and name != command) or module_name in registered:
            continue
        registered.add(module_name)
        try:
            module = __import__(module_name, fromlist=["register"])
        except ModuleNotFoundError as e:
            if e.name and module_name.startswith(e.name):
                continue
            raise
        module.register(sub, _add_common, _add_input)


# --------------------------------------------------------------------------------------------


def _context(args: argparse.Namespace) -> Any:
    from nodetopo.topology.discover import bundle_context, host_context

    if getattr(args, "bundle", None):
        return bundle_context(args.bundle)
    return host_context(
        args.host_root,
        timeout_s=args.command_timeout,
        nvml=args.nvml,
        fabric_map=getattr(args, "fabric_map", None),
        cloud_metadata=getattr(args, "cloud_metadata", None),
    )


def cmd_discover(args: argparse.Namespace) -> int:
    from nodetopo.resource.body import to_nodetopology
    from nodetopo.topology.discover import scan

    result = scan(_context(args))
    log.info("discovery took %.3fs", result.duration_s)
    args.node_name = _node_name(args, args.bundle)
    if args.output == "table":
        from nodetopo.views.table import table_text

        sys.stdout.write(
            table_text(
                result.topology,
                result.facts,
                args.node_name,
                sys.stdout,
                matrix=args.matrix,
                bundle=args.bundle,
            )
        )
    elif args.output in ("dot", "svg"):
        from nodetopo.views.dot import picture

        sys.stdout.write(picture(result.topology, result.facts, args.node_name, args.output))
    else:
        body = to_nodetopology(result.topology, args.node_name)
        if args.output == "json":
            sys.stdout.write(json.dumps(body, indent=2) + "\n")
        else:
            import yaml

            sys.stdout.write(yaml.safe_dump(body, sort_keys=False))
    if args.strict:
        from nodetopo.resource.conditions import NOT_READY_REASONS

        if any(c.reason in NOT_READY_REASONS for c in result.topology.conditions):
            return 3
    return 0


def cmd_capture(args: argparse.Namespace) -> int:
    import shutil
    import tempfile

    from nodetopo.bundle import ARCHIVE_SUFFIXES, NVML_DUMP, write_archive
    from nodetopo.bundle.capture import capture_bundle, capture_commands, write_manifest
    from nodetopo.command.output import is_stream
    from nodetopo.host import HostRoot, SubprocessRunner

    target = Path(args.directory)
    stream = args.tar and is_stream(args.directory)  # '-', a FIFO, a device: the archive flows there
    if args.directory == "-" and not args.tar:
        raise BundleError("-: standard output takes an archive: add --tar")
    try:  # find out now, in one line, that the bundle cannot be written there
        if args.tar:
            if not stream and not str(target).endswith(ARCHIVE_SUFFIXES):
                target = target.with_name(target.name + ".tar.gz")
            if not stream and (target.exists() or target.is_symlink()):
                raise BundleError(f"{target}: exists; choose a new name")
            if not stream:
                target.parent.mkdir(parents=True, exist_ok=True)
            work = Path(tempfile.mkdtemp(prefix=".nodetopo-capture-", dir=None if stream else target.parent))
            dest = work / "bundle"
        else:
            dest = target
            dest.mkdir(parents=True, exist_ok=True)
            if any(dest.iterdir()):
                raise BundleError(f"{dest}: exists and is not empty; choose a new directory")
            probe = dest / ".nodetopo-write-test"
            probe.touch()
            probe.unlink()
    except OSError as e:
        raise BundleError(f"{target}: cannot write a bundle there: {e.strerror or e}") from None
    notes: list[str] = []

    def command_outputs(bundle: Path) -> list[str]:
        notes.extend(capture_commands(SubprocessRunner(), bundle, timeout=args.command_timeout))
        return []

    def nvml_dump(bundle: Path) -> list[str]:
        notes.append(_capture_nvml(bundle / NVML_DUMP))
        return []

    def manifest(bundle: Path) -> list[str]:
        notes.append(
            f"manifest.json: {write_manifest(HostRoot(args.host_root), bundle, _node_name(args)).describe()}"
        )
        return []

    steps = [command_outputs] if args.no_nvml else [command_outputs, nvml_dump]
    try:
        warnings = capture_bundle(HostRoot(args.host_root), dest, [*steps, manifest])
        entries = sum(1 for _ in (dest / "sys").rglob("*")) if (dest / "sys").exists() else 0
        if args.tar:
            write_archive(dest, args.directory if stream else target)
    finally:
        if args.tar:
            shutil.rmtree(work, ignore_errors=True)
    for w in warnings:
        log.warning("capture: %s", w)
    report = sys.stderr if stream else sys.stdout  # an archive on stdout is alone there
    print(strip_control(f"captured {target}:"), file=report)
    print(f"  sys/: {entries} entries", file=report)
    for note in notes:
        print(f"  {strip_control(note)}", file=report)
    if warnings:
        print(f"  {len(warnings)} part(s) could not be captured (see log)", file=report)
    return 0


def _node_name(args: argparse.Namespace, bundle: str | None = None) -> str:
    """--node-name, else (reading a bundle) the bundle's node (``bundle_node_name``: its manifest's
    host, else the bundle's name), else $NODE_NAME, else the hostname: discover, capture and publish
    (which has made sure there is a name before it gets here)."""
    if args.node_name:
        return str(args.node_name)
    if bundle:
        from nodetopo.bundle import bundle_node_name

        return bundle_node_name(bundle)
    import socket  # only here: most commands never need a host name

    return os.environ.get("NODE_NAME") or socket.gethostname()


def _capture_nvml(path: Path) -> str:
    try:
        from nodetopo.sources.nvml import PynvmlApi, dump_nvml

        with PynvmlApi() as api:
            dump = dump_nvml(api)
    except Exception as e:  # noqa: BLE001 - capture keeps going without NVML, and says why
        return f"nvml.json: not written ({type(e).__name__}: {e})"
    path.write_text(json.dumps(dump, indent=1, sort_keys=True) + "\n")
    devices = dump.get("devices")
    return f"nvml.json: {len(devices) if isinstance(devices, list) else 0} GPUs"


def cmd_publish(args: argparse.Namespace) -> int:
    from nodetopo.publish import run_publish
    from nodetopo.resource.body import to_nodetopology
    from nodetopo.resource.labels import node_labels, uncertain_keys
    from nodetopo.topology.discover import scan

    if not (args.node_name or args.bundle or os.environ.get("NODE_NAME")):
        print("nodetopo publish: name the Node: --node-name, $NODE_NAME or --from a bundle", file=sys.stderr)
        return 2  # a usage error, as argparse's own
    args.node_name = _node_name(args, args.bundle)
    result = scan(_context(args))
    allocation = None
    if args.pod_resources_socket:
        from nodetopo.kubelet.allocation import GPU_DRA_DRIVERS, allocation_of, with_slices
        from nodetopo.kubelet.podresources import ask_kubelet

        def read_slices() -> Any:  # only when the kubelet lists GPU devices of ResourceClaims
            from nodetopo.errors import NodetopoError
            from nodetopo.kube.resourceslices import read_resource_slices
            from nodetopo.kube.session import ApiSession
            from nodetopo.kube.transport import connect

            try:
                with connect(args.kubeconfig, context=args.kube_context) as connection:
                    session = ApiSession(connection)
                    return read_resource_slices(session, args.node_name, drivers=GPU_DRA_DRIVERS)
            except NodetopoError as e:  # unknown, never "free": the allocation says why
                return f"the ResourceSlices cannot be read: {e}"

        answer = with_slices(lambda: ask_kubelet(args.pod_resources_socket), read_slices)
        if isinstance(answer, str):
            print(f"nodetopo: the GPU allocation is unknown: {strip_control(answer)}", file=sys.stderr)
        allocation = allocation_of(result.topology, answer)
    body = to_nodetopology(result.topology, args.node_name, allocation)
    labels = node_labels(body)
    outcome = run_publish(
        body,
        labels,
        node_name=args.node_name,
        kubeconfig=args.kubeconfig,
        context=args.kube_context,
        nfd=args.nfd,
        uncertain_keys=sorted(uncertain_keys(result.topology)),
        nrt=(
            TopologyManager(policy=args.topology_manager_policy, scope=args.topology_manager_scope)
            if args.noderesourcetopology
            else None
        ),
    )
    print(f"published NodeTopology/{args.node_name} and {len(labels)} labels")
    nrt = f"NodeResourceTopology/{args.node_name}"
    said = {
        "written": f"published {nrt}",
        "skipped": f"{nrt}: unchanged, or no NUMA node to publish",
        "crd-not-installed": f"{nrt} not published: its CRD is not installed",
    }
    if outcome.noderesourcetopology is not None:
        print(said[outcome.noderesourcetopology])
    return 0


def selected_command(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` runs, or None when parsing needs every subcommand: a top-level option
    first (``--help``, ``--version``), no command, or an unknown one (the error lists the choices)."""
    for arg in argv:
        if arg.startswith("-"):
            return None
        known = arg in _BUILTIN_COMMANDS or any(arg == name for name, _ in _MODULE_COMMANDS)
        return arg if known else None
    return None


def main(argv: Sequence[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    parser = build_parser(selected_command(argv))
    args = parser.parse_args(argv)
    # argparse checks choices only on the command line: a default from the environment arrives as is
    for name, value, choices in (
        ("NODETOPO_LOG_LEVEL", args.log_level, LOG_LEVELS),
        ("NODETOPO_LOG_FORMAT", args.log_format, LOG_FORMATS),
    ):
        if str(value).lower() not in choices:
            shown = strip_control(repr(str(value)[:40]))
            print(f"nodetopo: {name}={shown}: expected one of {', '.join(choices)}", file=sys.stderr)
            return 2
    configure_logging(str(args.log_level).lower(), str(args.log_format).lower())
    return run_command(args.func, args, prefix="nodetopo", usage_errors=(BundleError,))


if __name__ == "__main__":
    raise SystemExit(main())
