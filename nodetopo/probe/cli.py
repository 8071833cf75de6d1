"""``nodetopo probe``: the start-up check of a pod's topology, run as an init container.

Reads what the pod declared (the downward API's annotations file, ``--annotation``), what the node
promised (its NodeTopology, read-only, with the pod's own service account) and what the container
sees; prints a JSON report, writes a one-line verdict to the termination log, posts an Event on the
pod and exits 0 (passed, or ``--warn-only``) or 1 (a check failed). Every step has a timeout; a step
that cannot complete makes its checks skip, with the reason. See ``nodetopo.probe.checks``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from nodetopo.command.args import AddArguments, add_command
from nodetopo.host import HostRoot, Refused
from nodetopo.kube.flags import add_kube_args

T = TypeVar("T")

#: the largest ``--nodetopology`` file read (the API server stores objects up to ~1.5 MiB)
NODETOPOLOGY_FILE_LIMIT = 4 * 1024 * 1024

DESCRIPTION = __doc__.split("\n\n")[1] if __doc__ else ""
EPILOG = """\
checks (each pass, fail, warn or skip, with its reason):
  declared            the nodetopo.io/ annotations are present and valid (none: Undeclared warning)
  nodetopology        the node's NodeTopology could be read
  gpus                the container sees the GPUs it requested (--gpus) and NodeTopology lists them
  kubelet-allocation  the container's GPUs are the ones the kubelet handed the pod (NodeTopology heldBy)
  gpus-in-one-island  (declared) the container's GPUs are in one NVLink island
  p2p-nvlink          (declared one-island, or --require-p2p) NVML P2P status and NVLink link state
  rdma                (declared rdma / max-nic-distance) the promised RDMA NICs are visible in
                      /sys/class/infiniband, usable through /dev/infiniband/uverbs*, a port ACTIVE
  shm                 /dev/shm at least --min-shm when the container has 2 or more GPUs
  hugepages           at least --min-hugepages of hugepages (when asked)
  cpuset-numa         the container's cpuset (cgroup v2/v1) has CPUs of its GPUs' NUMA nodes
  memory-nodes        the memory nodes allowed include its GPUs' NUMA nodes
  collective          all_reduce_perf (nccl-tests), only when in the image: its bus bandwidth at the
                      largest size against the bandwidth model's band for the container's GPUs on
                      this NodeTopology, in nodetopo accept's words (Passed, ResourceNotReal with
                      the suspect link, PlacedWrong below --min-busbw or the pod's
                      nodetopo.io/min-busbw annotation, HarnessError a warning)
attribution of a failure: PlacedWrong (constraint not expressed or not honoured), ResourceNotReal
(the NodeTopology promised something the container cannot use), Undeclared (no or bad declaration);
of a warning also HarnessError (the collective's output cannot be a bandwidth result).
verdict: "passed, N of M checked" (M: the checks that apply to the pod; the skipped ones are named).
exit: 0 passed (or --warn-only), 1 a check failed (or, with --strict, one that applies was skipped),
2 usage error.
"""

_SIZE_SUFFIX = {"": 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def parse_size(text: str) -> int:
    """``256Mi``, ``1Gi``, ``0``: bytes (binary suffixes only)."""
    for suffix in ("Ki", "Mi", "Gi", "Ti", ""):
        if text.endswith(suffix) and text[: len(text) - len(suffix)].isdigit():
            return int(text[: len(text) - len(suffix)]) * _SIZE_SUFFIX[suffix]
    raise argparse.ArgumentTypeError(f"not a size (e.g. 256Mi, 1Gi): {text[:32]!r}")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 600:
        raise argparse.ArgumentTypeError(f"not a number of seconds in (0, 600]: {text[:32]!r}")
    return value


def _gbps(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"not a positive number of GB/s: {text[:32]!r}")
    return value


def _annotation(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text[:64]!r}")
    return key, value


def register(sub: Any, add_common: AddArguments, add_input: AddArguments) -> None:
    p = add_command(
        sub,
        "probe",
        help="check at pod start-up that the pod got the topology its placement promised",
        description=DESCRIPTION,
        epilog=EPILOG,
    )
    env = os.environ
    p.add_argument(
        "--annotations-file",
        default=env.get("NODETOPO_ANNOTATIONS_FILE"),
        metavar="FILE",
        help="the downward API's annotations file (default: $NODETOPO_ANNOTATIONS_FILE; none: flags only)",
    )
    p.add_argument(
        "--annotation",
        action="append",
        type=_annotation,
        default=[],
        metavar="KEY=VALUE",
        help="a nodetopo.io/ annotation, over the file's (repeatable)",
    )
    p.add_argument("--node-name", default=env.get("NODE_NAME"), help="the node (default: $NODE_NAME)")
    p.add_argument(
        "--pod-name", default=env.get("POD_NAME"), help="the pod, for the Event (default: $POD_NAME)"
    )
    p.add_argument(
        "--pod-namespace",
        default=env.get("POD_NAMESPACE"),
        help="the pod's namespace, for the Event and the report (default: $POD_NAMESPACE, else default)",
    )
    p.add_argument(
        "--pod-uid",
        default=env.get("POD_UID"),
        help="the pod's UID, so the Event is tied to this pod and not to a namesake (default: $POD_UID)",
    )
    p.add_argument(
        "--nodetopology",
        metavar="FILE",
        help="read the NodeTopology from this JSON file instead of the API (tests, offline)",
    )
    p.add_argument("--no-event", action="store_true", help="post no Event on the pod")
    p.add_argument("--gpus", type=int, default=None, help="GPUs the pod requested (default: not checked)")
    p.add_argument(
        "--min-shm",
        type=parse_size,
        default=parse_size("256Mi"),
        metavar="SIZE",
        help="the least /dev/shm for a container with 2+ GPUs (default: 256Mi)",
    )
    p.add_argument(
        "--min-hugepages",
        type=parse_size,
        default=0,
        metavar="SIZE",
        help="the least hugepages (default: 0, not checked)",
    )
    p.add_argument(
        "--require-p2p", action="store_true", help="fail unless P2P read is OK between every GPU pair"
    )
    p.add_argument(
        "--collective-timeout",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="time limit of the collective smoke test, run only when all_reduce_perf (nccl-tests) is on "
        "$PATH and the container has 2+ GPUs (default: 120; 0: never run it)",
    )
    p.add_argument(
        "--min-busbw",
        type=_gbps,
        default=None,
        metavar="GBPS",
        help="the all_reduce bus bandwidth the workload needs: a collective result below it that is what "
        "the placement gives is PlacedWrong (default: the pod's nodetopo.io/min-busbw annotation, else "
        "none; below the model's band is ResourceNotReal)",
    )
    p.add_argument("--warn-only", action="store_true", help="report failures but exit 0")
    p.add_argument(
        "--strict",
        action="store_true",
        help="fail (exit 1) when a check that applies could not be made (skipped: its input could not be "
        "read); checks the pod does not ask for never fail it",
    )
    p.add_argument(
        "--report",
        default=env.get("NODETOPO_PROBE_REPORT", ""),
        metavar="FILE",
        help="also write the JSON report here, e.g. on an emptyDir the workload container mounts: "
        "nodetopo.acceptance labels the workload's metrics with its placement (default: "
        "$NODETOPO_PROBE_REPORT; '' for none)",
    )
    p.add_argument(
        "--termination-log",
        default="/dev/termination-log",
        metavar="FILE",
        help="where the one-line verdict goes (default: /dev/termination-log; '' for none)",
    )
    p.add_argument("--root", default="/", help="the container's root as seen by the probe (tests)")
    p.add_argument(
        "--timeout", type=_seconds, default=5.0, metavar="SECONDS", help="each step's time limit (default: 5)"
    )
    add_kube_args(p)
    add_common(p)
    p.set_defaults(func=cmd_probe)


class StepTimeout(Exception):
    pass


def bounded(fn: Callable[[], T], seconds: float, what: str) -> T:
    """``fn()`` in a daemon thread, given at most ``seconds``; its exception re-raised, else
    ``StepTimeout`` (the thread is abandoned: the process exits soon after)."""
    result: list[Any] = []
    error: list[BaseException] = []

    def target() -> None:
        try:
            result.append(fn())
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            error.append(e)

    thread = threading.Thread(target=target, name=f"probe {what}", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise StepTimeout(f"{what}: no answer within {seconds:g}s")
    if error:
        raise error[0]
    return result[0]  # type: ignore[no-any-return]


def _observe(root: HostRoot, environ: dict[str, str], timeout: float, collective_timeout: float) -> Any:
    from nodetopo.probe import observe
    from nodetopo.probe.inputs import Seen

    unread: dict[str, str] = {}

    def attempt(key: str, fn: Callable[[], T]) -> T | None:
        try:
            return bounded(fn, timeout, key)
        except (observe.ReadFailure, StepTimeout, OSError, ValueError) as e:
            unread[key] = str(e)
            return None

    nvml = None
    nvml_error = _nvml_missing(root, environ)
    if nvml_error is None:
        nvml = attempt("nvml", lambda: _nvml_view())
    else:
        unread["nvml"] = nvml_error
    if nvml is not None:
        ids: tuple[str, ...] | None = nvml.uuids
        ids_from = "NVML"
    else:
        ids, ids_from = observe.gpu_ids_from_env(environ)
        if ids is None:
            unread["gpus"] = f"{unread.get('nvml', 'no NVML')}; {ids_from}"
    collective = None
    gpus = len(ids or ())
    collective_asked = False
    if collective_timeout <= 0:
        unread["collective"] = "not asked (--collective-timeout 0)"
    elif gpus < 2:
        unread["collective"] = f"{gpus} GPU(s): no collective to test"
    elif shutil.which(observe.COLLECTIVE_TOOL, path=environ.get("PATH")) is None:
        unread["collective"] = f"{observe.COLLECTIVE_TOOL} (nccl-tests) is not in the image"
    else:
        collective_asked = True
        try:
            collective = observe.run_collective(gpus, collective_timeout, environ.get("PATH"))
        except observe.ReadFailure as e:
            unread["collective"] = str(e)
    cpuset = attempt("cpus", lambda: observe.read_cpuset(root))
    if cpuset is None:
        unread["mems"] = unread["cpus"]
    return Seen(
        gpu_ids=ids,
        gpu_ids_from=ids_from,
        dev_nvidia=attempt("dev", lambda: observe.read_dev_nvidia(root)),
        nvml=nvml,
        infiniband=attempt("infiniband", lambda: observe.read_infiniband(root)),
        shm_bytes=attempt("shm", lambda: observe.read_shm_bytes(root)),
        hugepages_bytes=attempt("hugepages", lambda: observe.read_hugepages(root)),
        cpus=cpuset[0] if cpuset else None,
        cpus_from=cpuset[2] if cpuset else "",
        mems=cpuset[1] if cpuset else None,
        unread=unread,
        collective=collective,
        collective_asked=collective_asked,
    )


def _nvml_missing(root: HostRoot, environ: dict[str, str]) -> str | None:
    """Why NVML is not to be tried (no GPU device nodes at all), or None to try it."""
    if not any(n.startswith("nvidia") for n in _listdir(root, root.path / "dev")):
        return "NVML not tried: no /dev/nvidia* in the container"
    if str(root.path) != "/":
        return "NVML not tried: --root is not /"
    return None


def _listdir(root: HostRoot, path: Path) -> list[str]:
    try:
        return root.list_directory(path)
    except (OSError, Refused):
        return []


def _nvml_view() -> Any:
    from nodetopo.probe.observe import read_nvml_view
    from nodetopo.sources.nvml.live import PynvmlApi
    from nodetopo.sources.nvml.protocol import NvmlCallError

    try:
        with PynvmlApi() as api:
            return read_nvml_view(api)
    except NvmlCallError as e:
        raise ValueError(f"NVML unavailable in the container: {e}") from e
    except ImportError as e:
        raise ValueError(f"NVML unavailable in the container: pynvml not installed ({e})") from e


def _promised(args: argparse.Namespace, connection: Any) -> tuple[Any, str | None]:
    from nodetopo.probe.promised import parse_nodetopology

    if args.nodetopology:
        from nodetopo.errors import ParseError
        from nodetopo.host import Refused, read_regular_file
        from nodetopo.jsonread import load_json

        try:
            data = read_regular_file(args.nodetopology, limit=NODETOPOLOGY_FILE_LIMIT)
            obj = load_json(data.decode("utf-8"), source="--nodetopology", path=args.nodetopology)
            return parse_nodetopology(obj), None
        except Refused as e:
            return None, f"--nodetopology {args.nodetopology}: refused: {e.why}"
        except ParseError as e:  # not JSON, or nested deeper than any NodeTopology
            return None, str(e)
        except (OSError, ValueError) as e:
            return None, f"--nodetopology {args.nodetopology}: {e}"
    if not args.node_name:
        return None, "no node name (--node-name or $NODE_NAME): the NodeTopology cannot be read"
    if connection is None:
        return None, "the API server cannot be reached: no credentials"
    from nodetopo.resource.identity import GROUP, PLURAL, VERSION

    try:
        obj = bounded(
            lambda: connection.read_cluster_object(GROUP, VERSION, PLURAL, args.node_name),
            args.timeout,
            f"read NodeTopology/{args.node_name}",
        )
    except Exception as e:  # noqa: BLE001 - any failure of the API is a reason, never a traceback
        return None, f"NodeTopology/{args.node_name} could not be read: {e}"
    if obj is None:
        return None, f"no NodeTopology for node {args.node_name} yet"
    try:
        return parse_nodetopology(obj), None
    except ValueError as e:
        return None, f"NodeTopology/{args.node_name}: {e}"


def _session(args: argparse.Namespace) -> tuple[Any, str | None]:
    if args.nodetopology and (args.no_event or not args.pod_name):
        return None, None
    try:
        from nodetopo.kube.session import ApiSession
        from nodetopo.kube.transport import connect

        return ApiSession(connect(args.kubeconfig, context=args.kube_context, timeout=args.timeout)), None
    except Exception as e:  # noqa: BLE001 - no credentials is a reason, not a crash
        return None, f"no API access: {e}"


def _claims(args: argparse.Namespace, session: Any, session_error: str | None, declared: Any) -> Any:
    """``declared`` with its pod's ResourceClaims' need (``nodetopo.probe.claimed``): the Pod and each
    claim read with the pod's service account. Without a pod name there is no pod to read; offline
    (``--nodetopology`` without an API session) nothing is read."""
    if not args.pod_name or declared.error is not None:
        return declared
    import dataclasses

    namespace = args.pod_namespace or "default"
    where = f"Pod {namespace}/{args.pod_name}"
    if session is None:
        if session_error is None:  # offline
            return declared
        return dataclasses.replace(
            declared, unread=f"{where}'s ResourceClaims cannot be read: {session_error}"
        )
    from nodetopo.errors import NodetopoError
    from nodetopo.placement.claims import GROUP, VERSION, pod_claims
    from nodetopo.probe.claimed import PLURAL, with_claims

    try:
        pod = bounded(lambda: session.read_pod(namespace, args.pod_name), args.timeout, f"read {where}")
        if pod is None:
            raise NodetopoError("it does not exist")
        refs = pod_claims(pod)
    except Exception as e:  # noqa: BLE001 - any failure of the API is a reason, never a traceback
        why = f"{where} could not be read for its ResourceClaims: {str(e).splitlines()[0][:300]}"
        return dataclasses.replace(declared, unread=why)

    def read(name: str) -> Any:
        return bounded(
            lambda: session.read_namespaced_object(GROUP, VERSION, namespace, PLURAL, name),
            args.timeout,
            f"read ResourceClaim {namespace}/{name}",
        )

    return with_claims(declared, namespace, refs, read)


def cmd_probe(args: argparse.Namespace) -> int:
    from nodetopo.probe.checks import placement, run_checks
    from nodetopo.probe.inputs import Thresholds
    from nodetopo.probe.observe import read_declared
    from nodetopo.probe.outcome import verdict

    started = time.monotonic()
    declared = read_declared(args.annotations_file, dict(args.annotation))
    session, session_error = _session(args)
    promised, promised_why = _promised(args, session)
    declared = _claims(args, session, session_error, declared)
    if promised is None and session_error and not args.nodetopology:
        promised_why = f"{promised_why}; {session_error}"
    seen = _observe(HostRoot(args.root), dict(os.environ), args.timeout, args.collective_timeout)
    thresholds = Thresholds(
        min_shm_bytes=args.min_shm,
        min_hugepages_bytes=args.min_hugepages,
        min_busbw=args.min_busbw,
        require_p2p=args.require_p2p,
        gpus=args.gpus,
    )
    pod = (args.pod_namespace or "default", args.pod_name) if args.pod_name else None
    checks = run_checks(declared, promised, promised_why, seen, thresholds, pod)
    result = verdict(checks, strict=args.strict)
    report: dict[str, Any] = {
        "passed": result.passed,
        "attribution": str(result.attribution) if result.attribution else None,
        "verdict": result.line,
        "node": args.node_name,
        "pod": f"{args.pod_namespace}/{args.pod_name}" if args.pod_name else None,
        "checks": [c.to_json() for c in checks],
        "placement": placement(seen, promised, args.node_name),
    }
    event = (
        "not posted (--no-event)" if args.no_event else "not posted: no pod name (--pod-name or $POD_NAME)"
    )
    if not args.no_event and args.pod_name:
        if session is None:
            event = f"not posted: {session_error}"
        else:
            from nodetopo.probe import events  # here: only a run that posts its Event needs it

            try:
                bounded(
                    lambda: events.post_event(
                        session,
                        args.pod_namespace or "default",
                        args.pod_name,
                        args.pod_uid,
                        args.node_name,
                        result,
                    ),
                    args.timeout,
                    "post Event",
                )
                event = "posted"
            except Exception as e:  # noqa: BLE001 - an Event that cannot be posted is reported, not fatal
                event = f"not posted: {e}"
    report["event"] = event
    report["seconds"] = round(time.monotonic() - started, 3)
    print(json.dumps(report, indent=2))
    if args.report:
        try:
            with open(args.report, "w", encoding="utf-8") as f:
                f.write(json.dumps(report, indent=2) + "\n")
        except OSError as e:
            print(f"nodetopo probe: cannot write {args.report}: {e.strerror or e}", file=sys.stderr)
    if args.termination_log:
        try:
            with open(args.termination_log, "w", encoding="utf-8") as f:
                f.write(result.line + "\n")
        except OSError as e:
            print(f"nodetopo probe: cannot write {args.termination_log}: {e.strerror or e}", file=sys.stderr)
    if session is not None:
        session.close()
    return 0 if result.passed or args.warn_only else 1
