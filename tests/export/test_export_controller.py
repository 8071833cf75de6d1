"""``nodetopo export-controller``'s reconcile (pure ``plan``, the writer over fake writes) and
``nodetopo export``'s "nothing to write" (the real-apiserver run is tests/kube/test_export_controller.py)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodetopo.cli import main
from nodetopo.export import NodePlace, targets
from nodetopo.export.controller import OWNER_LABEL, OWNER_VALUE, ExportState, ExportWriter, observe, plan
from nodetopo.export.keys import KEY_SETS
from nodetopo.model import FabricTier, Facts, NetworkObservation
from nodetopo.resource.body import to_nodetopology
from nodetopo.topology.derive import derive_topology


def nodetopology(name: str, *tiers: str) -> dict[str, Any]:
    observation = NetworkObservation(
        source="fabric.cloud", tiers=tuple(FabricTier(level=i, id=t) for i, t in enumerate(tiers))
    )
    return to_nodetopology(derive_topology(Facts(network=(observation,))), name)


def hypernode(name: str, members: list[str], *, owned: bool = True, uid: str = "u") -> dict[str, Any]:
    labels = {OWNER_LABEL: OWNER_VALUE} if owned else {"team": "theirs"}
    return {
        "metadata": {"name": name, "uid": uid, "labels": labels},
        "spec": {
            "tier": 1,
            "tierName": "nodetopo.io/fabric.tier-0",
            "members": [{"type": "Node", "selector": {"exactMatch": {"name": m}}} for m in members],
        },
    }


def members(body: dict[str, Any]) -> list[str]:
    return [m["selector"]["exactMatch"]["name"] for m in body["spec"]["members"]]


def two(*names: str) -> list[NodePlace]:
    return [NodePlace(name=n, tiers={0: "leaf-a"}) for n in names]


def test_plan_creates_then_updates_then_deletes_only_its_own() -> None:
    first = plan(two("n1", "n2"), {})
    assert [(b["metadata"]["name"], members(b), force) for b, force in first.apply] == [
        ("t0-leaf-a", ["n1", "n2"], False)
    ]
    assert first.apply[0][0]["metadata"]["labels"] == {OWNER_LABEL: OWNER_VALUE}
    seen = dict([observe(hypernode("t0-leaf-a", ["n1", "n2"], uid="u1"))])
    assert plan(two("n1", "n2"), seen).apply == ()  # nothing changed: nothing written
    grown = plan(two("n1", "n2", "n3"), seen)
    assert [(members(b), force) for b, force in grown.apply] == [(["n1", "n2", "n3"], True)]
    moved = plan([NodePlace(name="n1", tiers={0: "leaf-b"})], seen)
    assert [b["metadata"]["name"] for b, _ in moved.apply] == ["t0-leaf-b"]
    assert moved.delete == (("t0-leaf-a", "u1"),)


def test_plan_leaves_hypernodes_it_did_not_make_alone() -> None:
    seen = dict(
        [
            observe(hypernode("t0-leaf-a", ["x"], owned=False)),
            observe(hypernode("rack-7", ["y"], owned=False)),
        ]
    )
    todo = plan(two("n1"), seen)
    assert todo.apply == () and todo.delete == () and todo.foreign == ("t0-leaf-a",)
    assert plan([], seen).delete == ()


def test_writer_waits_for_both_lists_and_follows_events() -> None:
    state = ExportState()
    applied: list[tuple[str, list[str]]] = []
    deleted: list[str] = []
    writer = ExportWriter(
        state,
        lambda target, name, body, force: applied.append((name, members(body))),
        lambda target, name, uid: deleted.append(name),
    )
    state.places.replace([])
    for name in ("n1", "n2"):
        state.places.upsert(nodetopology(name, "leaf-a"))
    stop = threading.Event()
    writer.stop = stop
    thread = threading.Thread(target=writer.run, daemon=True)
    thread.start()
    thread.join(0.5)
    assert applied == [] and writer.passes == 0  # the HyperNode list has not completed
    stop.set()
    thread.join(5)
    assert not thread.is_alive()
    state.hypernodes.replace([observe(hypernode("t0-leaf-old", ["gone"], uid="u0"))])
    state.hypernodes.synced.set()
    state.places.synced.set()
    writer.reconcile_once()
    assert applied == [("t0-leaf-a", ["n1", "n2"])] and deleted == ["t0-leaf-old"]
    state.places.delete(nodetopology("n2", "leaf-a"))
    assert state.changed.is_set()
    applied.clear()
    writer.reconcile_once()
    assert applied == [("t0-leaf-a", ["n1"])]


def topology(
    name: str, levels: list[str], *, owned: bool = True, uid: str = "u", deleting: bool = False
) -> Any:
    meta: dict[str, Any] = {"name": name, "uid": uid, "labels": {OWNER_LABEL: OWNER_VALUE} if owned else {}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"levels": [{"nodeLabel": level} for level in levels]}}


def levels(body: dict[str, Any]) -> list[str]:
    return [level["nodeLabel"] for level in body["spec"]["levels"]]


ONE_TIER = ["nodetopo.io/fabric.tier-0", "kubernetes.io/hostname"]


@pytest.mark.parametrize("make", [targets.kueue, targets.kai])
def test_a_topology_is_created_kept_and_replaced_when_its_levels_change(make: Any) -> None:
    target = make()
    first = plan(two("n1", "n2"), {}, target)
    assert [(b["metadata"]["name"], levels(b), f) for b, f in first.apply] == [("nodetopo", ONE_TIER, False)]
    assert first.apply[0][0]["apiVersion"] == f"{target.group}/{target.version}"
    assert first.apply[0][0]["metadata"]["labels"] == {OWNER_LABEL: OWNER_VALUE}
    seen = dict([observe(topology("nodetopo", ONE_TIER, uid="u1"))])
    assert plan(two("n1", "n2", "n3"), seen, target).apply == ()  # a node joins: the levels stay
    deeper = [NodePlace(name=n, tiers={0: "leaf-a", 1: "spine"}) for n in ("n1", "n2")]
    replaced = plan(deeper, seen, target)  # a tier appears: levels are immutable, delete first
    assert replaced.apply == () and replaced.delete == (("nodetopo", "u1"),)
    assert [levels(b) for b, _ in plan(deeper, {}, target).apply] == [
        ["nodetopo.io/fabric.tier-1", *ONE_TIER]
    ]  # and created again once it is gone
    # no fabric tier at all: nothing written, the one there kept
    flat = [NodePlace(name="n1", tiers={})]
    assert plan(flat, {}, target).apply == () and plan(flat, seen, target).delete == ()
    assert plan(flat, {}, target).missing == (
        "no fabric tiers in the 1 NodeTopology object(s): no Topology written",
    )
    # renamed: the old one (ours) goes
    renamed = plan(two("n1"), seen, make(topology="gpu"))
    assert [b["metadata"]["name"] for b, _ in renamed.apply] == ["gpu"] and renamed.delete == (
        ("nodetopo", "u1"),
    )


def test_a_topology_held_by_a_finalizer_or_not_ours_is_left_alone() -> None:
    target = targets.kueue()
    held = dict([observe(topology("nodetopo", ["x/y", "kubernetes.io/hostname"], deleting=True))])
    todo = plan(two("n1"), held, target)
    assert todo.apply == () and todo.delete == () and todo.waiting == ("nodetopo",)
    theirs = dict([observe(topology("nodetopo", ["x/y", "kubernetes.io/hostname"], owned=False))])
    todo = plan(two("n1"), theirs, target)
    assert todo.apply == () and todo.delete == () and todo.foreign == ("nodetopo",)


def test_controller_topology_names_the_keys_asked_for() -> None:
    target = targets.kai(keys=KEY_SETS["gfd-topograph"])
    ((body, _),) = plan(two("n1"), {}, target).apply
    assert levels(body) == ["fabric.topograph.run/tier-0", "kubernetes.io/hostname"]


def test_writer_reconciles_each_target_once_its_own_list_completed() -> None:
    chosen = targets.targets(["kai", "volcano", "kueue"])
    assert [t.name for t in chosen] == ["volcano", "kueue", "kai"]
    state = ExportState(chosen)
    writes: list[tuple[str, str]] = []
    writer = ExportWriter(
        state, lambda target, name, body, force: writes.append((target.name, name)), lambda *a: None
    )
    state.places.replace([])
    state.places.upsert(nodetopology("n1", "leaf-a"))
    state.places.synced.set()
    state.observed["kueue"].synced.set()  # Volcano's and KAI's lists have not completed (no CRD yet)
    writer.reconcile_once()
    assert writes == [("kueue", "nodetopo")]
    state.observed["volcano"].synced.set()
    writes.clear()
    writer.reconcile_once()
    assert sorted(writes) == [("kueue", "nodetopo"), ("volcano", "t0-leaf-a")]  # kueue: not observed yet


@pytest.mark.parametrize("fmt", ["volcano", "kueue", "kai", "slurm"])
def test_export_without_fabric_tiers_says_so_and_fails_strict(
    fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    listing = tmp_path / "ntopo.yaml"
    items = [nodetopology("n1"), nodetopology("n2")]
    listing.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    assert main(["export", fmt, "-f", str(listing)]) == 0
    assert "no fabric tiers in the 2 node(s) of the input" in capsys.readouterr().err
    assert main(["export", fmt, "-f", str(listing), "--strict"]) == 4
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert main(["export", fmt, "-f", str(empty), "--strict"]) == 4
    assert "no NodeTopology in the input" in capsys.readouterr().err


def test_export_with_tiers_is_not_empty(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    listing = tmp_path / "ntopo.yaml"
    items = [nodetopology("n1", "leaf-a"), nodetopology("n2", "leaf-a")]
    listing.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    assert main(["export", "volcano", "-f", str(listing), "--strict"]) == 0
    out = capsys.readouterr()
    assert "nothing to write" not in out.err and "t0-leaf-a" in out.out
