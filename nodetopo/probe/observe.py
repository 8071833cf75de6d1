"""What the probe reads: the pod's declaration and what the container sees. Every reader takes a root
(a ``HostRoot``, or its path: ``/`` in a pod, a fixture tree in tests) and reads through it, bounded and
confined to it (a FIFO or a link out of the root is refused, never opened); the collective smoke test
starts its tool through a ``CommandRunner``. A reader answers a value, or raises ``ReadFailure`` with
the reason it could not read it. Parsing is in pure ``parse_*`` functions.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nodetopo.host import (
    CommandNotFound,
    CommandOutputRefused,
    CommandRunner,
    CommandTimeout,
    HostRoot,
    Refused,
    SubprocessRunner,
    read_regular_file,
)
from nodetopo.model import parse_cpulist
from nodetopo.placement.request import (
    ANNOTATIONS,
    MIN_BUSBW,
    AnnotationError,
    PodRequest,
    parse_min_busbw,
    parse_pod_request,
)
from nodetopo.probe.collective import CollectiveRun, parse_collective
from nodetopo.probe.inputs import Declared, IbDevice, IbPort, NvmlPair, NvmlView
from nodetopo.resource.identity import PREFIX

#: the largest file a reader reads (an annotations file, a sysfs attribute, /proc/self/status)
MAX_READ = 256 * 1024


class ReadFailure(Exception):
    """A reader could not read what it was asked for; the message says what and why."""


def host_root(root: HostRoot | str | os.PathLike[str]) -> HostRoot:
    """``root`` as the seam the readers read through."""
    return root if isinstance(root, HostRoot) else HostRoot(root)


def _failure(path: str | os.PathLike[str], error: OSError | Refused) -> ReadFailure:
    if isinstance(error, Refused):
        size = error.why.startswith("larger than")
        return ReadFailure(f"{path}: larger than {MAX_READ} bytes" if size else f"{path}: {error.why}")
    return ReadFailure(f"{path}: {error.strerror or error}")


def _read(root: HostRoot, path: Path) -> str:
    """A file under ``root``, at most ``MAX_READ`` bytes of it."""
    try:
        return root.read_text(path, limit=MAX_READ)
    except (OSError, Refused) as e:
        raise _failure(path, e) from e


def read_text_file(path: str | os.PathLike[str]) -> str:
    """A file named by the user (not under the container's root), at most ``MAX_READ`` bytes."""
    try:
        return read_regular_file(path, limit=MAX_READ).decode("utf-8", "replace")
    except (OSError, Refused) as e:
        raise _failure(path, e) from e


# --------------------------------------------------------------------------------------------
# The declaration
# --------------------------------------------------------------------------------------------


def parse_annotations_file(text: str, *, source: str) -> dict[str, str]:
    """The downward API's annotations file: one ``key="value"`` a line, the value quoted as Go's
    ``%q`` writes it. Raises ``ValueError`` naming the source and line."""
    out: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        key, sep, quoted = line.partition("=")
        if not sep or not key:
            raise ValueError(f'{source}:{number}: not key="value"')
        try:
            value = json.loads(quoted) if quoted.startswith('"') else None  # a string never nests
        except ValueError:
            value = None
        if not isinstance(value, str):
            raise ValueError(f"{source}:{number}: the value of {key[:64]} is not a quoted string")
        out[key] = value
    return out


def declared_from_annotations(annotations: Mapping[str, str]) -> Declared:
    """The ``Declared`` of a pod's annotations, through the extender's own grammar, and the bus
    bandwidth it needs (``nodetopo.io/min-busbw``)."""
    ours = {k: v for k, v in annotations.items() if k.startswith(PREFIX)}
    annotated = any(k in ours for k in (*ANNOTATIONS, MIN_BUSBW))
    try:
        request = parse_pod_request({"metadata": {"annotations": ours}})
        min_busbw = parse_min_busbw(ours)
    except AnnotationError as e:
        return Declared(None, annotated, f"annotation: {e}")
    return Declared(request, annotated, min_busbw=min_busbw)


def read_declared(annotations_file: str | None, flags: Mapping[str, str]) -> Declared:
    """The annotations file (when given), with ``flags`` (``--annotation KEY=VALUE``) on top."""
    annotations: dict[str, str] = {}
    if annotations_file:
        try:
            annotations.update(
                parse_annotations_file(read_text_file(annotations_file), source=annotations_file)
            )
        except (ReadFailure, ValueError) as e:
            return Declared(None, False, f"annotations file unreadable: {e}")
    annotations.update(flags)
    return declared_from_annotations(annotations)


def no_request() -> PodRequest:
    return PodRequest()


# --------------------------------------------------------------------------------------------
# GPUs
# --------------------------------------------------------------------------------------------

_NONE_VALUES = {"", "void", "none"}
_DEV_NVIDIA = re.compile(r"^nvidia([0-9]{1,4})$")


def parse_visible_devices(value: str) -> tuple[str, ...] | None:
    """``NVIDIA_VISIBLE_DEVICES``/``CUDA_VISIBLE_DEVICES``: a list of UUIDs or indices. ``all`` is None
    (every GPU: the list is not in the variable); ``none``/``void``/empty is no GPU."""
    value = value.strip()
    if value.lower() == "all":
        return None
    if value.lower() in _NONE_VALUES:
        return ()
    return tuple(v.strip() for v in value.split(",") if v.strip())


def gpu_ids_from_env(environ: Mapping[str, str]) -> tuple[tuple[str, ...] | None, str]:
    """The GPU ids the container runtime named, and which variable named them."""
    for var in ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
        if var in environ:
            ids = parse_visible_devices(environ[var])
            if ids is not None:
                return ids, var
    return None, "neither NVIDIA_VISIBLE_DEVICES nor CUDA_VISIBLE_DEVICES names the GPUs"


def read_dev_nvidia(root: HostRoot | Path) -> tuple[int, ...]:
    root = host_root(root)
    try:
        names = root.list_directory(root.path / "dev")
    except (OSError, Refused):
        return ()
    return tuple(sorted(int(m[1]) for n in names if (m := _DEV_NVIDIA.match(n))))


def read_nvml_view(api: Any) -> NvmlView:
    """An ``NvmlView`` through the ``NvmlApi`` protocol (live or replayed). Raises ``NvmlCallError``
    only when the GPUs cannot even be counted."""
    from nodetopo.sources.nvml.protocol import MAX_NVLINKS, NvmlCallError, P2pCapability

    count = min(api.device_count(), 64)
    uuids: list[str] = []
    for i in range(count):
        try:
            uuids.append(api.uuid(i))
        except NvmlCallError:
            uuids.append(f"index-{i}")
    inactive: dict[str, tuple[int, ...]] = {}
    active: dict[str, int] = {}
    for i, u in enumerate(uuids):
        down: list[int] = []
        up = 0
        for link in range(MAX_NVLINKS):
            try:
                if api.nvlink_active(i, link):
                    up += 1
                else:
                    down.append(link)
            except NvmlCallError:
                break
        inactive[u] = tuple(down)
        active[u] = up
    pairs: list[NvmlPair] = []
    for a in range(count):
        for b in range(a + 1, count):
            statuses: list[str | None] = []
            for cap in (P2pCapability.READ, P2pCapability.NVLINK):
                try:
                    statuses.append(str(api.p2p_status(a, b, cap)))
                except NvmlCallError:
                    statuses.append(None)
            pairs.append(NvmlPair(uuids[a], uuids[b], statuses[0], statuses[1]))
    return NvmlView(tuple(uuids), inactive, active, tuple(pairs))


# --------------------------------------------------------------------------------------------
# RDMA
# --------------------------------------------------------------------------------------------

_PORT_STATE = re.compile(r"^\s*[0-9]+\s*:\s*([A-Z_]+)\s*$")


def parse_port_state(text: str) -> str | None:
    """``4: ACTIVE`` -> ``ACTIVE``."""
    m = _PORT_STATE.match(text)
    return m[1] if m else None


def read_infiniband(root: HostRoot | Path) -> tuple[IbDevice, ...]:
    """The RDMA devices of ``<root>/sys/class/infiniband``, their ports and their uverbs device.
    No such directory is no device (a container without RDMA)."""
    root = host_root(root)
    base = root.sys("class/infiniband")
    try:
        names = sorted(root.list_directory(base))[:256]
    except FileNotFoundError:
        return ()
    except (OSError, Refused) as e:
        raise _failure(base, e) from e
    devices = []
    for name in names:
        ports = []
        try:
            port_names = sorted(root.list_directory(base / name / "ports"), key=lambda p: (len(p), p))[:64]
        except (OSError, Refused):
            port_names = []
        for p in port_names:
            if not p.isdigit():
                continue
            try:
                state = parse_port_state(_read(root, base / name / "ports" / p / "state"))
            except ReadFailure:
                state = None
            try:
                layer: str | None = _read(root, base / name / "ports" / p / "link_layer").strip() or None
            except ReadFailure:
                layer = None
            ports.append(IbPort(int(p), state, layer))
        devices.append(IbDevice(name, tuple(ports), _uverbs(root, base / name)))
    return tuple(devices)


def _uverbs(root: HostRoot, device: Path) -> str | None:
    """``/dev/infiniband/uverbsN`` of the device when it exists and can be opened read-write."""
    try:
        names = root.list_directory(device / "device" / "infiniband_verbs")
    except (OSError, Refused):
        return None
    for n in names:
        if n.startswith("uverbs") and root.accessible(root.path / "dev/infiniband" / n, os.R_OK | os.W_OK):
            return f"/dev/infiniband/{n}"
    return None


# --------------------------------------------------------------------------------------------
# Memory, CPUs
# --------------------------------------------------------------------------------------------


def read_shm_bytes(root: HostRoot | Path) -> int:
    root = host_root(root)
    shm = root.path / "dev/shm"
    try:
        st = root.statvfs(shm)
    except (OSError, Refused) as e:
        raise _failure(shm, e) from e
    return st.f_blocks * st.f_frsize


def read_hugepages(root: HostRoot | Path) -> int | None:
    """``parse_hugepages`` of ``<root>/proc/meminfo``."""
    root = host_root(root)
    return parse_hugepages(_read(root, root.path / "proc/meminfo"))


_MEMINFO = re.compile(r"^(HugePages_Total|Hugepagesize):\s+([0-9]+)(?:\s+kB)?\s*$", re.M)


def parse_hugepages(meminfo: str) -> int | None:
    """Bytes of hugepages of the default size from ``/proc/meminfo``; None when it does not say."""
    values = dict(_MEMINFO.findall(meminfo))
    if "HugePages_Total" not in values or "Hugepagesize" not in values:
        return None
    return int(values["HugePages_Total"]) * int(values["Hugepagesize"]) * 1024


def parse_cgroup_file(text: str) -> tuple[str | None, str | None]:
    """``/proc/self/cgroup``: the v2 path (``0::/x``) and the v1 cpuset path (``N:cpuset:/x``)."""
    v2 = v1 = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            v2 = parts[2]
        elif "cpuset" in parts[1].split(","):
            v1 = parts[2]
    return v2, v1


_V2_FILES = ("cpuset.cpus.effective", "cpuset.mems.effective")
_V1_FILES = ("cpuset.effective_cpus", "cpuset.effective_mems", "cpuset.cpus", "cpuset.mems")


def read_cpuset(root: HostRoot | Path) -> tuple[frozenset[int], frozenset[int], str]:
    """The container's CPUs and memory nodes: its cgroup's cpuset (v2, else v1), else
    ``/proc/self/status``'s ``Cpus_allowed_list``/``Mems_allowed_list``; and where they came from."""
    root = host_root(root)
    fs = root.sys("fs/cgroup")
    try:
        v2, v1 = parse_cgroup_file(_read(root, root.path / "proc/self/cgroup"))
    except ReadFailure:
        v2 = v1 = None
    candidates: list[tuple[Path, str, str, str]] = []
    for path in (v2, "/") if v2 is not None else ():
        if path is not None:
            d = fs / path.lstrip("/")
            candidates.append((d, _V2_FILES[0], _V2_FILES[1], "cgroup v2"))
    for path in (v1, "/") if v1 is not None else ():
        if path is not None:
            d = fs / "cpuset" / path.lstrip("/")
            candidates.append((d, "cpuset.effective_cpus", "cpuset.effective_mems", "cgroup v1"))
            candidates.append((d, "cpuset.cpus", "cpuset.mems", "cgroup v1"))
    for d, cpus_file, mems_file, what in candidates:
        try:
            cpus = parse_cpulist(_read(root, d / cpus_file))
            mems = parse_cpulist(_read(root, d / mems_file))
        except (ReadFailure, ValueError):
            continue
        if cpus:
            return cpus, mems, f"{what} {d.relative_to(root.path).as_posix()}/{cpus_file}"
    try:
        status = _read(root, root.path / "proc/self/status")
    except ReadFailure as e:
        raise ReadFailure(f"no cgroup cpuset and {e}") from e
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    try:
        cpus = parse_cpulist(fields["Cpus_allowed_list"])
        mems = parse_cpulist(fields["Mems_allowed_list"])
    except (KeyError, ValueError) as e:
        raise ReadFailure(f"/proc/self/status: no readable Cpus_allowed_list/Mems_allowed_list ({e})") from e
    return cpus, mems, "/proc/self/status"


# --------------------------------------------------------------------------------------------
# The collective smoke test
# --------------------------------------------------------------------------------------------

COLLECTIVE_TOOL = "all_reduce_perf"


def collective_argv(gpus: int) -> tuple[str, ...]:
    """``all_reduce_perf`` over ``gpus`` GPUs, 8 MiB to the smallest size the bandwidth model states
    its band for (a shortfall at a smaller size is not judged; a size every datacenter GPU holds
    twice over). The model's package is imported here, when the collective runs, not at start-up."""
    from nodetopo.expect.constants import JUDGED_MIN_BYTES

    largest = f"{JUDGED_MIN_BYTES >> 20}M"
    return (COLLECTIVE_TOOL, "-b", "8M", "-e", largest, "-f", "2", "-g", str(gpus))


def run_collective(
    gpus: int, timeout: float, path: str | None = None, runner: CommandRunner | None = None
) -> CollectiveRun:
    """Run ``all_reduce_perf`` over ``gpus`` GPUs (``collective_argv``) and return what
    it printed, parsed (``nodetopo.probe.collective``; output that is not nccl-tests output is a
    harness fact, judged there); ``ReadFailure`` when the tool is not in the image, fails or times out.

    ``runner``: how the tool is started (default: a process, found on ``path`` when given, else
    on the probe's own ``PATH``, with the probe's environment)."""
    if runner is None:
        runner = SubprocessRunner(search_path=path)
    try:
        done = runner.run(collective_argv(gpus), timeout=timeout)
    except CommandNotFound as e:
        raise ReadFailure(
            f"{COLLECTIVE_TOOL} (nccl-tests) is not in the image: collective smoke test skipped"
        ) from e
    except CommandTimeout as e:
        raise ReadFailure(f"{COLLECTIVE_TOOL}: no result within {timeout:g}s") from e
    except CommandOutputRefused as e:
        raise ReadFailure(f"{COLLECTIVE_TOOL}: {e}") from e
    except OSError as e:
        raise ReadFailure(f"{COLLECTIVE_TOOL}: {e.strerror or e}") from e
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["no error text"]
        raise ReadFailure(f"{COLLECTIVE_TOOL} exited {done.returncode}: {tail[0][:200]}")
    return parse_collective(done.stdout, COLLECTIVE_TOOL)
