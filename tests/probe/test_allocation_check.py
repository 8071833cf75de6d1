"""The probe against the kubelet's allocation published in the NodeTopology (``heldBy``)."""

from __future__ import annotations

import copy
from typing import Any

from nodetopo.probe.checks import KUBELET_ALLOCATION, check_allocation, run_checks
from nodetopo.probe.inputs import Thresholds
from nodetopo.probe.outcome import Attribution, Status, verdict
from nodetopo.probe.promised import parse_nodetopology

from .test_checks import declared, nodetopology, seen

POD = ("ml", "train")


def allocated(holders: dict[int, list[tuple[str, str]]] | None, state: str = "Known") -> Any:
    """The probe's NodeTopology with ``status.allocation`` and ``heldBy`` (None: no heldBy lists)."""
    obj = copy.deepcopy(nodetopology())
    obj["status"]["allocation"] = {"state": state, "source": "kubelet-podresources", "message": "socket gone"}
    if holders is not None:
        for gpu in obj["status"]["gpus"]:
            gpu["heldBy"] = [
                {"namespace": ns, "name": n, "container": "c"} for ns, n in holders.get(gpu["index"], [])
            ]
    return parse_nodetopology(obj)


def test_the_gpus_the_kubelet_handed_out_are_the_ones_visible() -> None:
    promised = allocated({0: [POD], 1: [POD], 2: [("ml", "other")]})
    c = check_allocation(seen(), promised, POD)
    assert c.status is Status.PASS and "0,1" in c.reason


def test_a_container_seeing_other_gpus_than_it_was_handed_is_not_real() -> None:
    promised = allocated({0: [POD], 2: [POD]})
    c = check_allocation(seen(gpu_ids=("GPU-0", "GPU-1")), promised, POD)
    assert (c.status, c.attribution) == (Status.FAIL, Attribution.RESOURCE_NOT_REAL)
    assert "handed GPU(s) 0,2 to this pod, the container sees 0,1" in c.reason
    unknown_uuid = check_allocation(seen(gpu_ids=("GPU-0", "GPU-zz")), promised, POD)
    assert unknown_uuid.status is Status.FAIL and "GPU-zz" in unknown_uuid.reason


def test_unknown_or_not_yet_published_allocations_are_skipped_with_why() -> None:
    assert "socket gone" in check_allocation(seen(), allocated(None, "Unknown"), POD).reason
    assert check_allocation(seen(), allocated(None, "Unknown"), POD).status is Status.SKIP
    assert check_allocation(seen(), allocated(None), POD).status is Status.SKIP  # Known without lists
    not_yet = check_allocation(seen(), allocated({0: [("ml", "other")]}), POD)
    assert not_yet.status is Status.SKIP and "does not list ml/train" in not_yet.reason
    assert check_allocation(seen(), allocated({0: [POD]}), None).status is Status.SKIP
    assert check_allocation(seen(), None, POD).status is Status.SKIP


def test_without_its_own_view_the_container_is_judged_on_its_allocation() -> None:
    """No NVML and no *_VISIBLE_DEVICES: the island check uses the GPUs the kubelet handed the pod."""
    promised = allocated({1: [POD], 2: [POD]})
    blind = seen(gpu_ids=None, gpu_ids_from="no NVIDIA_VISIBLE_DEVICES", dev_nvidia=None)
    checks = run_checks(declared(gpus_in_one_island="true"), promised, None, blind, Thresholds(), POD)
    by_name = {c.name: c for c in checks}
    assert by_name["gpus"].status is Status.PASS and KUBELET_ALLOCATION in by_name["gpus"].reason
    assert by_name["kubelet-allocation"].status is Status.PASS
    island = by_name["gpus-in-one-island"]
    assert (island.status, island.attribution) == (Status.FAIL, Attribution.PLACED_WRONG)
    assert verdict(checks).attribution is Attribution.PLACED_WRONG
