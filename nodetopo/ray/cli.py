"""``nodetopo ray``: write Ray node labels and resources for a node (registered by ``nodetopo.cli``)."""

from __future__ import annotations

import argparse
import logging
import math
import os
import stat
import sys
import time
from collections.abc import Mapping
from typing import Any

import yaml

from nodetopo.command.args import AddArguments, add_command, number, require
from nodetopo.command.output import output_help, write_output
from nodetopo.errors import BundleError, NodetopoError
from nodetopo.kube.flags import add_kube_args
from nodetopo.resource.identity import GROUP, KIND, PLURAL, VERSION

log = logging.getLogger(__name__)

DESCRIPTION = """\
Turn a node's NodeTopology into a Ray labels file (`ray start --labels-file`) and a custom resources
JSON (`ray start --resources`): the node's nodetopo.io/ labels (the same function and values as the
Node's labels) for the GPUs the Ray node owns, including nodetopo.io/gpu-domain (the multi-node NVLink
clique, else the NVLink domain, else the node-local NVLink island). The NodeTopology comes from the
API (--node-name), from a file written by `nodetopo discover -o json` (--nodetopology), or from a
capture bundle (--from, discovered offline).
"""

EPILOG = """\
examples:
  nodetopo ray --node-name $NODE_NAME --labels-file /ray/labels.yaml --resources-file /ray/resources.json
  nodetopo ray --node-name $NODE_NAME --gpus visible ...   in an init container that requests the Ray
                                                   container's GPUs (the kubelet gives it the same ones)
  ray start --labels-file /ray/labels.yaml --resources "$(cat /ray/resources.json)" ...
  nodetopo ray --from /tmp/node-bundle             labels as YAML on stdout
"""


def register(sub: Any, add_common: AddArguments, add_input: AddArguments) -> None:
    p = add_command(
        sub,
        "ray",
        help="write Ray node labels/resources (nodetopo.io/gpu-domain, nodetopo.io/...) for a node",
        description=DESCRIPTION,
        epilog=EPILOG,
    )
    source = p.add_mutually_exclusive_group()
    source.add_argument("--from", dest="bundle", metavar="BUNDLE", help="discover a capture bundle offline")
    source.add_argument(
        "--nodetopology", metavar="FILE", help="a NodeTopology object (JSON or YAML; `-` for stdin)"
    )
    p.add_argument(
        "--node-name",
        help="read NodeTopology/NODE from the API (default: $NODE_NAME); with --from, the name the bundle's "
        "node is given (default: as `discover --from` names it, never $NODE_NAME)",
    )
    add_kube_args(p)
    p.add_argument(
        "--wait",
        type=_seconds,
        default=0.0,
        metavar="SECONDS",
        help="wait this long for the NodeTopology to appear (the agent may not have published yet)",
    )
    p.add_argument(
        "--gpus",
        default=os.environ.get("NODETOPO_RAY_GPUS", "all"),
        metavar="LIST",
        help="GPU indices or UUIDs (comma-separated) the Ray node owns, or `visible`: the GPUs this "
        "container was given (NVIDIA_VISIBLE_DEVICES) (env NODETOPO_RAY_GPUS; default: all)",
    )
    p.add_argument("--labels-file", default="-", metavar="PATH", help=output_help("the labels YAML"))
    p.add_argument(
        "--resources-file",
        metavar="PATH",
        help=output_help("the --resources JSON too", default_stdout=False) + "; default: not written",
    )
    add_common(p)
    p.set_defaults(func=cmd_ray)


#: A NodeTopology object is at most what the API server stores (1.5 MiB in etcd); room to spare.
MAX_FILE_BYTES = 16 * 1024 * 1024


def _read_file(path: str) -> dict[str, Any]:
    """The NodeTopology in ``path`` (``-``: stdin); ``BundleError`` (one line) for anything else."""
    try:
        raw = sys.stdin.buffer.read(MAX_FILE_BYTES + 1) if path == "-" else _read_regular(path)
        if len(raw) > MAX_FILE_BYTES:
            raise BundleError(f"{path}: larger than {MAX_FILE_BYTES} bytes: not a NodeTopology object")
        data = yaml.safe_load(raw.decode("utf-8"))  # JSON is YAML
    except OSError as e:
        raise BundleError(f"{path}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise BundleError(f"{path}: not UTF-8 text (byte {e.start})") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise BundleError(f"{path}: not JSON or YAML{where}") from None
    except RecursionError:
        raise BundleError(f"{path}: nested too deeply to be a NodeTopology object") from None
    if not isinstance(data, dict) or data.get("kind") != KIND:
        raise BundleError(f"{path}: not a NodeTopology object")
    return data


def _read_regular(path: str) -> bytes:
    """A regular file's bytes, opened without blocking (a FIFO is refused, not waited on)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(0, "not a regular file", path)
        os.set_blocking(fd, True)
        return f.read(MAX_FILE_BYTES + 1)


def _seconds(text: str) -> float:
    """``--wait``: a finite number of seconds, 0 to a day."""
    value = number(text, "a number of seconds", float)
    require(math.isfinite(value) and 0 <= value <= 86400, f"must be 0 to 86400 seconds, not {text}")
    return value


def _from_bundle(path: str, node_name: str | None) -> dict[str, Any]:
    # Offline only: consumers otherwise never discover; the lead's import contract decides this seam.
    from nodetopo.bundle import bundle_node_name
    from nodetopo.resource.body import to_nodetopology
    from nodetopo.topology.discover import bundle_context, scan

    return to_nodetopology(scan(bundle_context(path)).topology, node_name or bundle_node_name(path))


def _from_api(node_name: str, kubeconfig: str | None, context: str | None, wait_s: float) -> dict[str, Any]:
    """NodeTopology/``node_name`` through the stdlib client (one GET; the same loader and error
    translation as ``publish`` and the agent: an unreachable server is one line, not a traceback)."""
    from nodetopo.kube.session import ApiSession
    from nodetopo.kube.transport import connect

    deadline = time.monotonic() + wait_s
    delay = 1.0
    with connect(kubeconfig, context=context) as connection:
        session = ApiSession(connection)
        while True:
            data = session.read_cluster_object(GROUP, VERSION, PLURAL, node_name)
            if data is not None:
                return data
            if time.monotonic() >= deadline:
                raise NodetopoError(f"reading NodeTopology/{node_name}: not found (HTTP 404)")
            log.info("NodeTopology/%s not published yet; waiting %.0fs", node_name, delay)
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 10.0)


def _write(path: str, text: str) -> None:
    write_output(path, text)


VISIBLE = "visible"


def visible_gpus(environ: Mapping[str, str]) -> list[str]:
    """``--gpus visible``: the GPUs the container runtime gave this container, as NVIDIA_VISIBLE_DEVICES
    names them (UUIDs or node indices; ``all`` is every GPU). In a pod, an init container that
    requests the Ray container's GPUs is given the very devices the Ray container gets (the kubelet
    hands an init container's devices on to the app containers). Not CUDA_VISIBLE_DEVICES: its
    indices count the container's GPUs, not the node's. ``BundleError`` when the variable names no GPU
    (unset, empty, ``none`` or ``void``, as the NVIDIA container runtime reads it)."""
    var = "NVIDIA_VISIBLE_DEVICES"
    if var not in environ:
        raise BundleError(
            f"--gpus {VISIBLE}: {var} is not set, so the GPUs of this container are not known: request the "
            "Ray container's GPUs in this container (resources.limits), or name them with --gpus"
        )
    value = environ[var].strip()
    if value.lower() == "all":
        return ["all"]
    ids = [] if value.lower() in ("none", "void") else [v.strip() for v in value.split(",") if v.strip()]
    if not ids:
        raise BundleError(f"--gpus {VISIBLE}: {var}={environ[var]!r}: this container was given no GPU")
    return ids


def cmd_ray(args: argparse.Namespace) -> int:
    from nodetopo.ray.labels import labels_file_text, ray_labels, ray_resources, resources_json

    if args.nodetopology:
        body = _read_file(args.nodetopology)
    elif args.bundle:
        body = _from_bundle(args.bundle, args.node_name)
    elif args.node_name or os.environ.get("NODE_NAME"):
        node = args.node_name or os.environ["NODE_NAME"]
        body = _from_api(node, args.kubeconfig, args.kube_context, args.wait)
    else:
        raise BundleError(
            "nodetopo ray: give --node-name (or $NODE_NAME), --nodetopology FILE or --from BUNDLE"
        )
    if str(args.gpus).strip().lower() == VISIBLE:
        gpus = visible_gpus(os.environ)
    else:
        gpus = [g.strip() for g in str(args.gpus).split(",") if g.strip()]
    try:
        labels = ray_labels(body, gpus)
        resources = ray_resources(body, gpus)
    except ValueError as e:
        raise BundleError(str(e)) from e
    except (TypeError, KeyError, AttributeError) as e:  # a field of the wrong shape
        raise BundleError(f"not a usable NodeTopology object ({type(e).__name__}: {str(e)[:200]})") from e
    _write(args.labels_file, labels_file_text(labels))
    if args.resources_file:
        _write(args.resources_file, resources_json(resources) + "\n")
    name = (body.get("metadata") or {}).get("name") if isinstance(body.get("metadata"), dict) else None
    log.info("%d Ray labels, %d resources for %s", len(labels), len(resources), name)
    return 0
