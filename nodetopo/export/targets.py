"""What the export controller keeps current, one ``Target`` per kind: Volcano's HyperNodes, Kueue's
``Topology`` and KAI's ``Topology``, each the objects ``nodetopo export`` would write for the current
NodeTopologies, labelled as the controller's.

A HyperNode's members change as nodes join and leave: it is applied again (server-side apply). A
Kueue or KAI Topology names label keys, not nodes: it changes only when the fleet's levels do (a
fabric tier appears or goes, the NVLink domain starts or stops nesting), and both CRDs make
``spec.levels`` immutable, so a changed Topology is deleted (uid precondition) and created again with
the new levels. Without a fabric tier in any NodeTopology the levels would be the hostname alone:
no Topology is written, and one written before is kept (an absent fact is not evidence that the
fabric went away).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from nodetopo import export
from nodetopo.export.keys import NODETOPO, KeySet

FIELD_MANAGER = "nodetopo-export-controller"
#: the label on every object this controller writes; it deletes only objects that carry it
OWNER_LABEL = "app.kubernetes.io/managed-by"
OWNER_VALUE = FIELD_MANAGER

Wanted = tuple[dict[str, dict[str, Any]], tuple[str, ...]]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """One kind the controller keeps: where it is served, and the objects the places call for."""

    name: str  #: ``volcano``, ``kueue``, ``kai``
    kind: str
    group: str
    version: str
    plural: str
    #: the spec cannot be changed in place: a changed object is deleted, then created again
    replace: bool
    #: an owned object no longer wanted is deleted even when nothing at all is wanted
    prune: bool
    wants: Callable[[Sequence[export.NodePlace]], Wanted]

    @property
    def path(self) -> str:
        return f"/apis/{self.group}/{self.version}/{self.plural}"


def _owned(objects: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``objects`` by name, each labelled as the controller's (the only label it writes)."""
    return {
        obj["metadata"]["name"]: {
            **obj,
            "metadata": {"name": obj["metadata"]["name"], "labels": {OWNER_LABEL: OWNER_VALUE}},
        }
        for obj in objects
    }


def volcano() -> Target:
    def wants(places: Sequence[export.NodePlace]) -> Wanted:
        result = export.volcano(places)
        return _owned(result.objects), result.missing

    return Target(
        name="volcano",
        kind="HyperNode",
        group="topology.volcano.sh",
        version="v1alpha1",
        plural="hypernodes",
        replace=False,
        prune=True,
        wants=wants,
    )


def _topology_target(
    name: str,
    group: str,
    version: str,
    make: Callable[[Sequence[export.NodePlace]], export.Export],
) -> Target:
    def wants(places: Sequence[export.NodePlace]) -> Wanted:
        if export.depth(places) == 0:
            return {}, (f"no fabric tiers in the {len(places)} NodeTopology object(s): no Topology written",)
        result = make(places)
        (topology,) = [o for o in result.objects if o["kind"] == "Topology"]
        return _owned([topology]), (*result.notes, *result.missing)

    return Target(
        name=name,
        kind="Topology",
        group=group,
        version=version,
        plural="topologies",
        replace=True,
        prune=False,
        wants=wants,
    )


def kueue(*, topology: str = "nodetopo", nvlink: bool = False, keys: KeySet = NODETOPO) -> Target:
    """Kueue's ``Topology`` (``kueue.x-k8s.io/v1beta2``) only: the ResourceFlavor naming it is the
    queue configuration's, written once (``nodetopo export kueue``)."""
    return _topology_target(
        "kueue",
        "kueue.x-k8s.io",
        "v1beta2",
        lambda places: export.kueue(places, name=topology, nvlink=nvlink, keys=keys),
    )


def kai(*, topology: str = "nodetopo", nvlink: bool = False, keys: KeySet = NODETOPO) -> Target:
    """KAI's ``Topology`` (``kai.scheduler/v1alpha1``)."""
    return _topology_target(
        "kai",
        "kai.scheduler",
        "v1alpha1",
        lambda places: export.kai(places, name=topology, nvlink=nvlink, keys=keys),
    )


NAMES = ("volcano", "kueue", "kai")


def targets(
    names: Sequence[str], *, topology: str = "nodetopo", nvlink: bool = False, keys: KeySet = NODETOPO
) -> tuple[Target, ...]:
    """The targets named, in ``NAMES`` order, each once."""
    made: dict[str, Callable[[], Target]] = {
        "volcano": volcano,
        "kueue": lambda: kueue(topology=topology, nvlink=nvlink, keys=keys),
        "kai": lambda: kai(topology=topology, nvlink=nvlink, keys=keys),
    }
    return tuple(made[name]() for name in NAMES if name in names)
