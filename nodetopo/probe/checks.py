"""The probe's checks: pure functions over what the pod declared, what the node promised and what the
container sees. Each returns one ``Check``: ``pass``, ``fail``, ``warn`` or ``skip`` with its reason;
a ``fail`` or ``warn`` carries an attribution:

* ``PlacedWrong``: the pod's constraint was not expressed in its spec or not honoured by placement
  (GPUs across NVLink islands, a cpuset away from the GPUs' NUMA node, ``/dev/shm`` too small);
* ``ResourceNotReal``: the node's NodeTopology promised something the container cannot use (a GPU,
  a NIC, an NVLink, a P2P path), or the pod's GPUs or NICs sit on an edge it publishes degraded
  (``nodetopo.probe.links``);
* ``Undeclared``: the pod declared nothing (or something unreadable), so its placement cannot be judged;
* ``HarnessError`` (a warning of the collective smoke test): what ``all_reduce_perf`` printed cannot be
  a bandwidth result, so the GPUs' bandwidth was not judged.

The collective smoke test is judged against the bandwidth model's band for the container's own GPUs
(``nodetopo.probe.collective``), in ``nodetopo accept``'s words.

An unknown fact is never a negative fact: what cannot be read makes a check ``skip``, with why.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from nodetopo.model import CpuSet, format_cpulist
from nodetopo.placement.request import MAX_NIC_DISTANCE, RDMA, PodRequest
from nodetopo.probe.collective import judge_collective
from nodetopo.probe.inputs import Declared, Seen, Thresholds
from nodetopo.probe.links import check_link_health
from nodetopo.probe.outcome import Attribution, Check, failed, not_asked, passed, skipped, warned
from nodetopo.probe.promised import Promised, PromisedGpu, PromisedNic
from nodetopo.resource.identity import PREFIX

# --------------------------------------------------------------------------------------------
# Checks
# --------------------------------------------------------------------------------------------


def _unasked(d: Declared, name: str, reason: str) -> Check:
    """A check the declaration read does not ask for: not asked, unless the pod's claims could not be
    read (what they ask is unknown, not "nothing"): then it applies and is skipped, with why."""
    return skipped(name, f"{reason}; {d.unread}") if d.unread else not_asked(name, reason)


def check_declared(d: Declared) -> Check:
    if d.error is not None:
        return failed("declared", d.error, Attribution.UNDECLARED)
    if d.unread is not None:
        what = _describe(d.request, d.min_busbw) if d.annotated and d.request is not None else "nothing"
        return skipped("declared", f"the pod declares {what}; {d.unread}")
    if not d.annotated:
        return warned(
            "declared",
            f"the pod declares no {PREFIX} annotation: its placement cannot be judged",
            Attribution.UNDECLARED,
        )
    assert d.request is not None
    claims = f" (with ResourceClaim {', '.join(d.claims)})" if d.claims else ""
    return passed("declared", f"declared{claims}: {_describe(d.request, d.min_busbw)}")


def _describe(r: PodRequest, min_busbw: float | None = None) -> str:
    parts = []
    if min_busbw is not None:
        parts.append(f"min-busbw={min_busbw:g} GB/s")
    if r.one_island:
        parts.append("gpus-in-one-island")
    if r.max_nic_distance is not None:
        parts.append(f"max-nic-distance={r.max_nic_distance.name}")
    if r.numa_aligned:
        parts.append("numa-aligned")
    if r.rdma:
        parts.append("rdma=required")
    if r.link_layer:
        parts.append(f"link-layer={r.link_layer}")
    return ", ".join(parts) or "no constraint"


def container_gpus(seen: Seen, promised: Promised | None) -> tuple[list[PromisedGpu], list[str]]:
    """The container's GPUs as the NodeTopology lists them, and the ids it does not list."""
    found: list[PromisedGpu] = []
    unknown: list[str] = []
    for key in seen.gpu_ids or ():
        gpu = promised.gpu(key) if promised is not None else None
        if gpu is None:
            unknown.append(key)
        else:
            found.append(gpu)
    return found, unknown


def check_gpus(seen: Seen, promised: Promised | None, t: Thresholds) -> Check:
    name = "gpus"
    if seen.gpu_ids is None:
        return skipped(name, seen.unread.get("gpus", "the container's GPUs could not be read"))
    n = len(seen.gpu_ids)
    if t.gpus is not None and n < t.gpus:
        return failed(
            name,
            f"the pod requested {t.gpus} GPU(s), the container sees {n} ({seen.gpu_ids_from})",
            Attribution.RESOURCE_NOT_REAL,
        )
    if n == 0:
        return passed(name, f"no GPU visible ({seen.gpu_ids_from})")
    if seen.nvml is None and seen.dev_nvidia is not None and promised is not None:
        found, _ = container_gpus(seen, promised)
        missing = [g.index for g in found if g.index not in seen.dev_nvidia]
        if missing:
            return failed(
                name,
                f"GPU(s) {_list(missing)} named by {seen.gpu_ids_from} have no /dev/nvidiaN in the container",
                Attribution.RESOURCE_NOT_REAL,
            )
    if promised is None:
        return passed(name, f"{n} GPU(s) visible ({seen.gpu_ids_from}); no NodeTopology to compare with")
    found, unknown = container_gpus(seen, promised)
    if unknown:
        return failed(
            name,
            f"the container sees GPU(s) {_list(unknown)} that NodeTopology/{promised.node} does not list",
            Attribution.RESOURCE_NOT_REAL,
        )
    return passed(name, f"GPU(s) {_list(g.index for g in found)} visible ({seen.gpu_ids_from}) and published")


#: ``Seen.gpu_ids_from`` when the container's own view could not be read and the GPUs are the ones
#: the kubelet handed the pod (``heldBy``)
KUBELET_ALLOCATION = "the kubelet's allocation (NodeTopology heldBy)"


def check_allocation(seen: Seen, promised: Promised | None, pod: tuple[str, str] | None) -> Check:
    """The GPUs the container sees against the GPUs the kubelet handed this pod (``heldBy``)."""
    name = "kubelet-allocation"
    if promised is None:
        return skipped(name, "no NodeTopology to compare with")
    if not promised.allocation_known:
        why = f" ({promised.allocation_why})" if promised.allocation_why else ""
        return skipped(name, f"NodeTopology/{promised.node} does not say who holds its GPUs{why}")
    if pod is None:
        return skipped(name, "the pod's name is not known (--pod-name or $POD_NAME)")
    held = promised.held_by(*pod)
    if held is None:
        return skipped(name, f"NodeTopology/{promised.node} does not list the holders of every GPU")
    if not held:
        return skipped(
            name,
            f"NodeTopology/{promised.node} does not list {pod[0]}/{pod[1]} as holding a GPU yet "
            "(the agent publishes a new pod's GPUs within seconds)",
        )
    held_indices = sorted(g.index for g in held)
    if seen.gpu_ids is None or seen.gpu_ids_from == KUBELET_ALLOCATION:
        return passed(name, f"the kubelet handed GPU(s) {_list(held_indices)} to this pod")
    found, unknown = container_gpus(seen, promised)
    visible = sorted(g.index for g in found)
    if unknown or visible != held_indices:
        shown = _list([*visible, *unknown]) or "none"
        return failed(
            name,
            f"the kubelet handed GPU(s) {_list(held_indices)} to this pod, the container sees {shown} "
            f"({seen.gpu_ids_from})",
            Attribution.RESOURCE_NOT_REAL,
        )
    return passed(name, f"GPU(s) {_list(held_indices)}: handed to this pod by the kubelet and visible")


def with_allocation(seen: Seen, promised: Promised | None, pod: tuple[str, str] | None) -> Seen:
    """``seen`` with the pod's GPUs taken from the kubelet's allocation when the container's own
    view (NVML, ``*_VISIBLE_DEVICES``) could not be read and the NodeTopology lists the pod."""
    if seen.gpu_ids is not None or promised is None or pod is None:
        return seen
    held = promised.held_by(*pod)
    if not held:
        return seen
    ids = tuple(g.uuid if g.uuid is not None else str(g.index) for g in held)
    return dataclasses.replace(seen, gpu_ids=ids, gpu_ids_from=KUBELET_ALLOCATION)


def _list(items: Iterable[object]) -> str:
    return ",".join(str(i) for i in items)


def check_one_island(declared: Declared, seen: Seen, promised: Promised | None) -> Check:
    name = "gpus-in-one-island"
    if declared.request is None or not declared.request.one_island:
        return _unasked(declared, name, "not declared")
    if promised is None:
        return skipped(name, "no NodeTopology to compare with")
    found, _ = container_gpus(seen, promised)
    if len(found) < 2:
        return passed(name, f"{len(found)} GPU(s): one island trivially")
    islands = {g.index: g.island for g in found}
    if None in islands.values():
        unknown = [i for i, isl in islands.items() if isl is None]
        return skipped(
            name, f"NodeTopology/{promised.node} does not say the island of GPU(s) {_list(unknown)}"
        )
    if len(set(islands.values())) > 1:
        where = "; ".join(f"GPU {i} in island {isl}" for i, isl in sorted(islands.items()))
        return failed(
            name, f"GPUs span {len(set(islands.values()))} NVLink islands: {where}", Attribution.PLACED_WRONG
        )
    return passed(name, f"GPU(s) {_list(islands)} all in island {next(iter(islands.values()))}")


def check_nvlink(declared: Declared, seen: Seen, promised: Promised | None, t: Thresholds) -> Check:
    """P2P and NVLink link state between the container's GPUs, where the pod relies on them."""
    name = "p2p-nvlink"
    wanted = t.require_p2p or (declared.request is not None and declared.request.one_island)
    if not wanted:
        return _unasked(declared, name, "neither declared (gpus-in-one-island) nor required (--require-p2p)")
    if seen.nvml is None:
        return skipped(name, seen.unread.get("nvml", "NVML is not available in the container"))
    view = seen.nvml
    if len(view.uuids) < 2:
        return passed(name, f"{len(view.uuids)} GPU(s): no pair to check")
    promised_island = {}
    if promised is not None:
        for u in view.uuids:
            g = promised.gpu(u)
            if g is not None and g.island is not None and promised.islands.get(g.island, 0) > 1:
                promised_island[u] = g.island
    problems = []
    for u in view.uuids:
        down = view.inactive_links.get(u, ())
        if u in promised_island and down:
            problems.append(f"{u} NVLink link(s) {_list(down)} down")
    for p in view.pairs:
        same_island = p.a in promised_island and promised_island.get(p.a) == promised_island.get(p.b)
        if same_island and p.p2p_nvlink not in (None, "OK"):
            problems.append(f"{p.a}<->{p.b} NVLink P2P {p.p2p_nvlink}")
        if t.require_p2p and p.p2p_read not in (None, "OK"):
            problems.append(f"{p.a}<->{p.b} P2P read {p.p2p_read}")
    if problems:
        return failed(name, "; ".join(problems), Attribution.RESOURCE_NOT_REAL)
    unknown = [f"{p.a}<->{p.b}" for p in view.pairs if p.p2p_read is None and p.p2p_nvlink is None]
    if unknown and len(unknown) == len(view.pairs):
        return skipped(name, "NVML could not say the P2P status of any pair")
    return passed(name, f"P2P between {len(view.uuids)} GPUs as published")


def check_rdma(declared: Declared, seen: Seen, promised: Promised | None) -> Check:
    name = "rdma"
    r = declared.request
    if r is None or not (r.rdma or r.max_nic_distance is not None):
        return _unasked(declared, name, f"not declared ({RDMA}, {MAX_NIC_DISTANCE})")
    if promised is None:
        return skipped(name, "no NodeTopology to compare with")
    found, _ = container_gpus(seen, promised)
    promised_nics = {n.name: n for n in promised.nics}
    # the NICs the placement relied on: those near the pod's GPUs, else every RDMA NIC of the node
    wanted: dict[str, PromisedNic] = {}
    for g in found:
        near = [n for n, dist in g.nics if r.max_nic_distance is None or dist <= r.max_nic_distance]
        near = [n for n in near if n in promised_nics and (promised_nics[n].rdma or not r.rdma)]
        if r.max_nic_distance is not None and not near:
            return failed(
                name,
                f"GPU {g.index} has no {'RDMA ' if r.rdma else ''}NIC at {r.max_nic_distance.name} or closer "
                f"in NodeTopology/{promised.node}",
                Attribution.PLACED_WRONG,
            )
        wanted.update((n, promised_nics[n]) for n in near)
    if not wanted and r.rdma:
        wanted = {n.name: n for n in promised.nics if n.rdma and n.state != "DOWN"}
        if not wanted:
            return failed(
                name, f"NodeTopology/{promised.node} lists no RDMA NIC that is up", Attribution.PLACED_WRONG
            )
    if seen.infiniband is None:
        return skipped(name, seen.unread.get("infiniband", "/sys/class/infiniband could not be read"))
    visible = {d.name: d for d in seen.infiniband}
    problems: dict[str, list[str]] = {}
    usable = []
    for nic in sorted(wanted):
        d = visible.get(nic)
        if d is None:
            problems.setdefault("not in the container's /sys/class/infiniband", []).append(nic)
        elif d.uverbs is None:
            problems.setdefault("no usable /dev/infiniband/uverbs* in the container", []).append(nic)
        elif not any(p.state == "ACTIVE" for p in d.ports):
            states = ",".join(f"{p.port}:{p.state}" for p in d.ports) or "no port"
            problems.setdefault("no ACTIVE port", []).append(f"{nic} ({states})")
        else:
            usable.append(nic)
    # one usable NIC among those promised is enough for rdma: required without a distance
    if problems and (r.max_nic_distance is not None or not usable):
        text = "; ".join(f"{why}: {_list(nics)}" for why, nics in problems.items())
        return failed(
            name,
            f"NodeTopology/{promised.node} promised RDMA NIC(s) {_list(sorted(wanted))}; {text}",
            Attribution.RESOURCE_NOT_REAL,
        )
    return passed(name, f"RDMA NIC(s) {_list(usable)} visible, uverbs usable, port ACTIVE")


def check_shm(seen: Seen, t: Thresholds) -> Check:
    name = "shm"
    if seen.shm_bytes is None:
        return skipped(name, seen.unread.get("shm", "/dev/shm could not be read"))
    gpus = len(seen.gpu_ids or ())
    text = f"/dev/shm is {_size(seen.shm_bytes)}"
    if gpus < 2:
        return passed(name, f"{text}; fewer than 2 GPUs, no minimum applies")
    if seen.shm_bytes < t.min_shm_bytes:
        return failed(
            name,
            f"{text}, below the minimum {_size(t.min_shm_bytes)} for {gpus} GPUs (NCCL's shared memory "
            "transport): mount an emptyDir with medium Memory at /dev/shm",
            Attribution.PLACED_WRONG,
        )
    return passed(name, f"{text} (minimum {_size(t.min_shm_bytes)})")


def check_hugepages(seen: Seen, t: Thresholds) -> Check:
    name = "hugepages"
    if t.min_hugepages_bytes <= 0:
        return not_asked(name, "no minimum asked (--min-hugepages)")
    if seen.hugepages_bytes is None:
        return skipped(name, seen.unread.get("hugepages", "hugepages could not be read"))
    if seen.hugepages_bytes < t.min_hugepages_bytes:
        return failed(
            name,
            f"{_size(seen.hugepages_bytes)} of hugepages, below the minimum {_size(t.min_hugepages_bytes)}",
            Attribution.RESOURCE_NOT_REAL,
        )
    return passed(name, f"{_size(seen.hugepages_bytes)} of hugepages")


def check_cpuset(declared: Declared, seen: Seen, promised: Promised | None) -> Check:
    name = "cpuset-numa"
    if seen.cpus is None:
        return skipped(name, seen.unread.get("cpus", "the container's cpuset could not be read"))
    if promised is None:
        return skipped(name, "no NodeTopology to compare with")
    found, _ = container_gpus(seen, promised)
    if not found:
        return skipped(name, "no GPU of the container is in the NodeTopology")
    if any(g.numa_cpus is None for g in found):
        return skipped(name, "NodeTopology does not say the NUMA CPUs of every GPU")
    local = CpuSet().union(*(g.numa_cpus or () for g in found))  # ranges: a published list is never expanded
    aligned = declared.request is not None and declared.request.numa_aligned
    cpus = f"cpuset {format_cpulist(seen.cpus)} ({seen.cpus_from})"
    if not seen.cpus & local:
        text = f"{cpus} has no CPU of the GPUs' NUMA CPUs {format_cpulist(local)}"
        if aligned:
            return failed(name, text, Attribution.PLACED_WRONG)
        return warned(name, text + " (numa-aligned not declared)", Attribution.UNDECLARED)
    outside = seen.cpus - local
    if outside:
        return passed(name, f"{cpus} includes the GPUs' NUMA CPUs, and {len(outside)} other CPU(s)")
    return passed(name, f"{cpus} within the GPUs' NUMA CPUs")


def check_mems(declared: Declared, seen: Seen, promised: Promised | None) -> Check:
    name = "memory-nodes"
    if seen.mems is None:
        return skipped(name, seen.unread.get("mems", "the container's memory nodes could not be read"))
    if promised is None:
        return skipped(name, "no NodeTopology to compare with")
    found, _ = container_gpus(seen, promised)
    nodes = {g.numa_node for g in found}
    if not found or None in nodes:
        return skipped(name, "the NUMA node of the container's GPUs is not known")
    mems = f"memory nodes {format_cpulist(seen.mems)}"
    aligned = declared.request is not None and declared.request.numa_aligned
    numa_nodes = frozenset(n for n in nodes if n is not None)
    if aligned and len(numa_nodes) > 1:
        return failed(
            name,
            f"GPUs on NUMA nodes {format_cpulist(numa_nodes)}, declared numa-aligned",
            Attribution.PLACED_WRONG,
        )
    if not seen.mems & numa_nodes:
        text = f"{mems} exclude the GPUs' NUMA node(s) {format_cpulist(numa_nodes)}"
        if aligned:
            return failed(name, text, Attribution.PLACED_WRONG)
        return warned(name, text, Attribution.UNDECLARED)
    return passed(name, f"{mems} include the GPUs' NUMA node(s) {format_cpulist(numa_nodes)}")


def check_collective(seen: Seen, promised: Promised | None, t: Thresholds) -> Check:
    """The collective smoke test (``all_reduce_perf`` from nccl-tests) over the container's GPUs,
    judged against the band the bandwidth model gives for those GPUs (``nodetopo.probe.collective``):
    pass (``Passed``), fail ``ResourceNotReal`` or ``PlacedWrong``, warn ``HarnessError``; skipped
    when there is no band to compare with (no NodeTopology, a GPU it does not list)."""
    name = "collective"
    if seen.collective is None:
        why = seen.unread.get("collective", "not run")
        return skipped(name, why) if seen.collective_asked else not_asked(name, why)
    node, topology, why = "", None, "no NodeTopology"
    found: list[PromisedGpu] = []
    if promised is not None:
        found, unknown = container_gpus(seen, promised)
        node = promised.node
        topology, problem = promised.topology()
        why = f"NodeTopology/{node}: {problem}"
        if unknown:
            topology, why = None, f"NodeTopology/{node} does not list GPU(s) {_list(unknown)}"
    outcome = judge_collective(
        seen.collective, node, topology, why, [g.index for g in found], min_busbw=t.min_busbw
    )
    if outcome.verdict is None:
        return skipped(name, outcome.reason)
    if outcome.verdict == "Passed":
        return passed(name, outcome.reason)
    attribution = Attribution(str(outcome.verdict))
    if attribution is Attribution.HARNESS_ERROR:
        return warned(name, outcome.reason, attribution)
    return failed(name, outcome.reason, attribution)


def run_checks(
    declared: Declared,
    promised: Promised | None,
    promised_why: str | None,
    seen: Seen,
    t: Thresholds,
    pod: tuple[str, str] | None = None,
) -> list[Check]:
    """Every check. ``pod`` (namespace, name) finds the pod's GPUs in the kubelet's allocation."""
    seen = with_allocation(seen, promised, pod)
    checks = [check_declared(declared)]
    if promised is None:
        checks.append(skipped("nodetopology", promised_why or "no NodeTopology"))
    else:
        checks.append(
            passed(
                "nodetopology",
                f"NodeTopology/{promised.node}: {len(promised.gpus)} GPU(s), {len(promised.nics)} NIC(s)",
            )
        )
    checks += [
        check_gpus(seen, promised, t),
        check_allocation(seen, promised, pod),
        check_one_island(declared, seen, promised),
        check_nvlink(declared, seen, promised, t),
        check_rdma(declared, seen, promised),
        check_link_health(declared, seen, promised),
        check_shm(seen, t),
        check_hugepages(seen, t),
        check_cpuset(declared, seen, promised),
        check_mems(declared, seen, promised),
        check_collective(seen, promised, needed(declared, t)),
    ]
    return checks


def needed(declared: Declared, t: Thresholds) -> Thresholds:
    """``t`` with the bus bandwidth the pod declares (``nodetopo.io/min-busbw``) as its need, unless
    ``--min-busbw`` says one."""
    if t.min_busbw is not None or declared.min_busbw is None:
        return t
    return dataclasses.replace(t, min_busbw=declared.min_busbw)


def placement(seen: Seen, promised: Promised | None, node: str | None) -> dict[str, Any]:
    """What the probe learnt about the pod's place, for the workload's own metrics
    (``nodetopo.acceptance`` labels its series with it): the node, its leaf, the container's GPUs
    with their island and NUMA node, and the share of the container's CPUs on its GPUs' NUMA
    nodes. An unknown fact is null (no NodeTopology: no island, no leaf)."""
    found, _ = container_gpus(seen, promised) if promised is not None else ([], [])
    ratio: float | None = None
    if seen.cpus and found and all(g.numa_cpus is not None for g in found):
        local: frozenset[int] = frozenset().union(*(g.numa_cpus or frozenset() for g in found))
        ratio = round(len(seen.cpus & local) / len(seen.cpus), 4)
    return {
        "node": node or (promised.node if promised is not None else None) or None,
        "leaf": promised.leaf if promised is not None else None,
        "gpus": [
            {"index": g.index, "uuid": g.uuid, "island": g.island, "numaNode": g.numa_node}
            for g in sorted(found, key=lambda g: g.index)
        ],
        "cpuNumaLocalRatio": ratio,
    }


def _size(n: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            value = n / size
            return f"{value:g}{unit}" if value == int(value) else f"{value:.1f}{unit}"
    return f"{n}B"
