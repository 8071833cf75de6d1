"""The one reader of a published NodeTopology and its one rule (nodetopo/resource/reader.py)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from nodetopo.model import CpuSet, GpuAllocation, LinkClass, PodRef
from nodetopo.resource.body import to_nodetopology, topology_from_nodetopology
from nodetopo.resource.limits import MAX_GPUS, MAX_HOLDERS
from nodetopo.resource.published import ResourceError, Severity
from nodetopo.resource.reader import read_nodetopology, read_status
from nodetopo.topology.discover import bundle_context, scan

BUNDLES = Path(__file__).resolve().parents[1] / "fixtures" / "bundles"
MACHINES = sorted(p.name for p in BUNDLES.iterdir() if p.is_dir())


@pytest.fixture(scope="module")
def bodies() -> dict[str, dict[str, Any]]:
    out = {}
    for machine in MACHINES:
        topology = scan(bundle_context(str(BUNDLES / machine))).topology
        holders = tuple(
            (g.index, (PodRef(namespace="ns", name=f"p{g.index}", container="c"),)) for g in topology.gpus
        )
        out[machine] = to_nodetopology(topology, machine, GpuAllocation(known=True, gpu_holders=holders))
    return out


def test_what_nodetopo_publishes_reads_without_a_problem(bodies: dict[str, dict[str, Any]]) -> None:
    for machine, body in bodies.items():
        read = read_nodetopology(body)
        assert read.problems == (), machine
        assert read.status is not None and read.node == machine
        assert [g.gpu.index for g in read.status.gpus] == [g["index"] for g in body["status"]["gpus"]]
        assert all(
            g.held_by == (PodRef(namespace="ns", name=f"p{g.gpu.index}", container="c"),)
            for g in read.status.gpus
        )


def dgx(bodies: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return copy.deepcopy(bodies["dgx-h100"])


def test_rule_1_not_an_object_is_an_error() -> None:
    with pytest.raises(ResourceError, match="a NodeTopology must be an object, not list"):
        read_nodetopology([])
    assert issubclass(ResourceError, ValueError)  # the probe's callers catch ValueError


@pytest.mark.parametrize("status", [None, {}, []])
def test_rule_2_no_status_yet(status: Any) -> None:
    read = read_nodetopology({"metadata": {"name": "n"}, "status": status})
    assert read.status is None and read.problems == () and read.node == "n" and read.facts.gpus == ()


def test_rule_2_a_status_that_is_not_an_object_is_malformed() -> None:
    read = read_nodetopology({"metadata": {"name": "n"}, "status": ["gpus"]})
    assert read.status is None and read.malformed is not None
    assert read.malformed.placement == "malformed NodeTopology (status is not an object)"


def test_rule_3_a_list_not_a_list_or_over_its_bound_is_not_read(bodies: dict[str, dict[str, Any]]) -> None:
    body = dgx(bodies)
    body["status"]["nics"] = {"mlx5_0": {}}
    body["status"]["gpus"] = [{"index": i, "nics": [], "nearestNICs": []} for i in range(MAX_GPUS + 1)]
    read = read_nodetopology(body)
    assert read.facts.gpus == () and read.facts.nics == ()
    assert [(p.field, p.what, p.severity) for p in read.problems] == [
        ("status.gpus", f"{MAX_GPUS + 1} GPUs, at most {MAX_GPUS}", Severity.BOUNDS),
        ("status.nics", "NICs is not a list", Severity.MALFORMED),
    ]
    assert read.malformed is not None and read.malformed.placement == (
        f"NodeTopology over the schema's bounds ({MAX_GPUS + 1} GPUs, at most {MAX_GPUS})"
    )


def test_rule_4_an_entry_that_is_not_an_object_is_left_out(bodies: dict[str, dict[str, Any]]) -> None:
    body = dgx(bodies)
    body["status"]["nvlinkIslands"].append("island")
    read = read_nodetopology(body)
    assert len(read.facts.islands) == len(body["status"]["nvlinkIslands"]) - 1
    assert [str(p) for p in read.problems] == ["status.nvlinkIslands: an island is not an object"]
    assert read.malformed is not None


def test_rule_5_an_entry_without_its_key_is_left_out(bodies: dict[str, dict[str, Any]]) -> None:
    body = dgx(bodies)
    del body["status"]["gpus"][0]["index"]
    del body["status"]["conditions"][0]["type"]
    read = read_nodetopology(body)
    assert len(read.facts.gpus) == 7 and len(read.facts.conditions) == len(body["status"]["conditions"]) - 1
    assert [(str(p), p.malformed) for p in read.problems] == [
        ("status.gpus: missing 'index'", True),  # a GPU placement counts
        ("status.conditions: missing 'type'", False),
    ]


def test_rule_6_a_wrong_field_is_unknown(bodies: dict[str, dict[str, Any]]) -> None:
    body = dgx(bodies)
    gpu = body["status"]["gpus"][0]
    gpu.update(model=5, nicDistance="FAR", numaAffinity="0-x")
    body["status"]["nics"][0]["rdma"] = "yes"
    read = read_nodetopology(body)
    first = read.facts.gpus[0].gpu
    assert (first.model, first.nic_distance, first.numa_affinity) == (None, None, None)
    assert first.uuid == gpu["uuid"] and read.facts.nics[0].rdma is False
    assert sorted(str(p) for p in read.problems) == [
        "status.gpus: bad element '0-x' in cpulist '0-x'",
        "status.gpus: missing 'FAR'",
        "status.gpus: model 5 is not a string",
        "status.nics: rdma 'yes' is not true or false",
    ]
    assert read.malformed is None  # placement still uses the object


def test_rule_6_an_island_or_numa_node_placement_groups_on_must_be_an_id(
    bodies: dict[str, dict[str, Any]],
) -> None:
    body = dgx(bodies)
    body["status"]["gpus"][0]["island"] = 2**40
    read = read_nodetopology(body)
    assert read.facts.gpus[0].gpu.island is None and len(read.facts.gpus) == 8
    assert read.malformed is not None and read.malformed.placement == (
        "malformed NodeTopology (GPU island '1099511627776')"
    )


@pytest.mark.parametrize(
    "held",
    [
        [{"namespace": "ns", "name": "p", "container": "c"}] * (MAX_HOLDERS + 1),
        [{"name": "p"}, {"namespace": "ns", "name": "q", "container": "c"}],
        "p",
    ],
    ids=["over-bound", "one-unreadable", "not-a-list"],
)
def test_rule_7_holders_are_all_readable_or_unknown(bodies: dict[str, dict[str, Any]], held: Any) -> None:
    body = dgx(bodies)
    body["status"]["gpus"][0]["heldBy"] = held
    read = read_nodetopology(body)
    assert read.facts.gpus[0].held_by is None and read.facts.gpus[1].held_by is not None
    assert read.malformed is None and [p.section for p in read.problems] == ["allocation"]


def test_sections_read_only_what_a_consumer_uses(bodies: dict[str, dict[str, Any]]) -> None:
    body = dgx(bodies)
    body["status"]["nvlinkIslands"] = "not a list"
    read = read_nodetopology(body, sections={"gpus", "nics"})
    assert read.problems == () and read.facts.islands == () and read.facts.conditions == ()
    assert len(read.facts.gpus) == 8 and read.facts.gpus[0].held_by is None  # heldBy is the allocation's
    assert read.facts.gpus[0].nics[0][1] in LinkClass
    # the PCI addresses and the CPU lists (most of a read's cost) only when asked for
    assert read.facts.gpus[0].gpu.address is None and read.facts.gpus[0].gpu.cpu_affinity is None
    full = read_nodetopology(body, sections={"gpus", "addresses", "affinity"}).facts.gpus[0].gpu
    assert str(full.address) == body["status"]["gpus"][0]["pciBusID"] and full.cpu_affinity


class Untouchable(list[Any]):
    """A list whose entries must not be read."""

    def __iter__(self) -> Any:
        raise AssertionError("an entry of a list over its bound was read")

    def __getitem__(self, index: Any) -> Any:
        raise AssertionError("an entry of a list over its bound was read")


def test_reading_is_bounded_whatever_the_object_says() -> None:
    """20,000 GPUs (1.1 MB of schema-valid JSON but for the bounds): not one entry is read."""
    hostile = {"gpus": Untouchable({"index": i, "nics": []} for i in range(20_000))}
    read = read_status(hostile)
    assert read.facts.gpus == () and read.malformed is not None
    assert "20000 GPUs" in read.malformed.placement


def _as_earlier_agents_wrote_it(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with each GPU's ``nics[]`` (name and class, nearest first) instead of ``nicDistances``,
    each marked ``degraded: true`` when its path crosses a degraded edge (instead of ``degradedNICs``),
    and every implied CPU list written out, as agents before ``nicDistances`` published it."""
    old = copy.deepcopy(body)
    read = {g.gpu.index: g for g in read_nodetopology(body).facts.gpus}
    for gpu in old["status"]["gpus"]:
        del gpu["nicDistances"]
        gpu.pop("degradedNICs", None)
        published = read[gpu["index"]]
        gpu["nics"] = [
            {
                "name": name,
                "distance": cls.name,
                **({"degraded": True} if name in published.degraded_nics else {}),
            }
            for name, cls in published.nics
        ]
        for key, value in (
            ("numaAffinity", published.gpu.numa_affinity),
            ("cpuAffinity", published.gpu.cpu_affinity),
        ):
            gpu.setdefault(key, None if value is None else str(CpuSet.of(value)))
    return old


def test_the_placement_read_is_the_whole_read_cut_to_what_placement_uses(
    bodies: dict[str, dict[str, Any]],
) -> None:
    """One reader: the placement sections give the shape, the holders and the summary's facts the
    whole read gives, for the object as published now and as earlier agents wrote it."""
    from nodetopo.admission.summary import SECTIONS as SUMMARY
    from nodetopo.admission.summary import facts_of
    from nodetopo.placement.fit import SECTIONS as PLACEMENT
    from nodetopo.placement.fit import holders_of, shape_of

    for machine, body in bodies.items():
        whole = read_nodetopology(body)
        for obj in (body, _as_earlier_agents_wrote_it(body)):
            placed = read_nodetopology(obj, sections=PLACEMENT)
            assert placed.problems == (), machine
            assert shape_of(placed) == shape_of(whole), machine
            assert holders_of(placed) == holders_of(whole), machine
            assert facts_of(read_nodetopology(obj, sections=SUMMARY)) == facts_of(whole), machine
            assert [g.nics for g in placed.facts.gpus] == [g.nics for g in whole.facts.gpus], machine
            assert [g.degraded_nics for g in placed.facts.gpus] == [
                g.degraded_nics for g in whole.facts.gpus
            ], machine
        assert read_nodetopology(_as_earlier_agents_wrote_it(body)).facts == whole.facts, machine
    assert sum(bool(shape_of(read_nodetopology(b)).gpus) for b in bodies.values()) >= 8  # not vacuous
    # not vacuous for the degraded marks either: machines whose GPUs have NICs behind a degraded edge
    assert sum(any(g.degraded_nics for g in read_nodetopology(b).facts.gpus) for b in bodies.values()) >= 2


def test_a_row_of_nic_classes_that_is_not_one_per_nic_is_unknown(bodies: dict[str, dict[str, Any]]) -> None:
    body = dgx(bodies)
    body["status"]["gpus"][0]["nicDistances"] = ["PIX"]
    read = read_nodetopology(body)
    assert read.facts.gpus[0].nics == () and read.facts.gpus[1].nics
    assert [str(p) for p in read.problems] == [
        "status.gpus: nicDistances: not a list of 10 classes (one per NIC)"
    ]
    assert read.malformed is None
    body["status"]["gpus"][0]["nicDistances"] = ["FAR"] + ["SYS"] * 9
    assert read_nodetopology(body).facts.gpus[0].nics == ()


def test_a_gpu_or_nic_listed_twice_is_malformed(bodies: dict[str, dict[str, Any]]) -> None:
    body = dgx(bodies)
    body["status"]["gpus"][1]["index"] = 0
    assert "GPU index 0 listed twice" in str(read_nodetopology(body).malformed)
    body = dgx(bodies)
    body["status"]["nics"][1]["name"] = body["status"]["nics"][0]["name"]
    assert "NIC 'mlx5_0' listed twice" in str(read_nodetopology(body).malformed)


def test_placement_records_are_shared_between_nodes_and_bounded_under_churn(
    bodies: dict[str, dict[str, Any]],
) -> None:
    """Two nodes of one kind read to the same GPU and NIC records and rows of NIC classes (not
    copies); objects of ever new NIC names (a node republishing itself) never hold more of them than
    the bound, and read the same as with empty tables."""
    from nodetopo.placement.fit import SECTIONS as PLACEMENT
    from nodetopo.resource import reader

    body = dgx(bodies)
    other = copy.deepcopy(body)
    other["metadata"]["name"] = "another-dgx"
    one, two = (read_nodetopology(b, sections=PLACEMENT).facts for b in (body, other))
    assert one.gpus and one.nics
    assert all(a.gpu is b.gpu for a, b in zip(one.gpus, two.gpus, strict=True))
    assert all(a is b for a, b in zip(one.nics, two.nics, strict=True))
    assert all(a.nics is b.nics for a, b in zip(one.gpus, two.gpus, strict=True))

    churned = copy.deepcopy(body)
    for update in range(reader._PLACED_MAX // len(churned["status"]["nics"]) + 50):
        for i, nic in enumerate(churned["status"]["nics"]):
            nic["name"] = f"mlx5_{update}_{i}"
        read = read_nodetopology(churned, sections=PLACEMENT)
        assert len(reader._PLACED_NICS) <= reader._PLACED_MAX
        assert len(reader._PLACED_GPUS) <= reader._PLACED_MAX
        assert len(reader._PLACED_ROWS) <= reader._PLACED_MAX
    for table in (reader._PLACED_NICS, reader._PLACED_GPUS, reader._PLACED_ROWS):
        table.clear()
    assert read_nodetopology(churned, sections=PLACEMENT) == read


def test_a_degraded_mark_is_not_lost_to_a_record_another_node_shares(
    bodies: dict[str, dict[str, Any]],
) -> None:
    """Two nodes of one kind, one with a NIC behind a degraded edge: they share the GPU records and the
    rows of NIC classes, and each keeps its own marks (read in either order), so placement counts the
    NIC on the healthy node and not on the degraded one."""
    from nodetopo.placement.fit import SECTIONS as PLACEMENT
    from nodetopo.placement.fit import shape_of
    from nodetopo.resource import reader

    healthy = dgx(bodies)
    degraded = copy.deepcopy(healthy)
    degraded["metadata"]["name"] = "dgx-degraded"
    gpu0 = degraded["status"]["gpus"][0]
    nearest = [n["name"] for n in degraded["status"]["nics"]][gpu0["nicDistances"].index("PIX")]
    gpu0["degradedNICs"] = [nearest]
    for first, second in ((healthy, degraded), (degraded, healthy)):
        for table in (reader._PLACED_NICS, reader._PLACED_GPUS, reader._PLACED_ROWS):
            table.clear()
        one, two = (read_nodetopology(b, sections=PLACEMENT) for b in (first, second))
        assert one.facts.gpus[0].nics is two.facts.gpus[0].nics  # the row is shared
        marks = {
            b["metadata"]["name"]: r.facts.gpus[0].degraded_nics for b, r in ((first, one), (second, two))
        }
        assert marks == {"dgx-h100": frozenset(), "dgx-degraded": frozenset({nearest})}
    shapes = {
        b["metadata"]["name"]: shape_of(read_nodetopology(b, sections=PLACEMENT)) for b in (healthy, degraded)
    }
    assert shapes["dgx-h100"].gpus[0].nic is LinkClass.PIX
    assert shapes["dgx-degraded"].gpus[0].nic is not LinkClass.PIX
    assert shapes["dgx-h100"].gpus[1:] == shapes["dgx-degraded"].gpus[1:]


def test_a_degraded_mark_of_a_nic_the_row_has_no_class_for_is_unknown(
    bodies: dict[str, dict[str, Any]],
) -> None:
    body = dgx(bodies)
    body["status"]["gpus"][0]["degradedNICs"] = ["mlx5_0", "eth9"]
    read = read_nodetopology(body)
    assert read.facts.gpus[0].degraded_nics == frozenset({"mlx5_0"})
    assert [str(p) for p in read.problems] == [
        "status.gpus: degradedNICs: a NIC the GPU's nicDistances has no class for"
    ]
    assert read.malformed is None


def test_health_reads_back_as_published(bodies: dict[str, dict[str, Any]]) -> None:
    """status.health and gpus[].degradedNICs read back as the topology held them: the degraded
    edges whole, a healthy node's empty list, a GPU's NICs behind a degraded edge."""
    for machine, body in bodies.items():
        topology = topology_from_nodetopology(body)
        scanned = scan(bundle_context(str(BUNDLES / machine))).topology
        assert topology.health.degraded == scanned.health.degraded, machine
        assert topology.health.checked == scanned.health.checked and topology.health.judged
        assert {(d.gpu, d.nic) for d in topology.gpu_nic_distances if not d.healthy} == {
            (d.gpu, d.nic) for d in scanned.gpu_nic_distances if not d.healthy
        }
    (edge,) = read_nodetopology(bodies["dgx-h100-gpu-x8"]).status.health.degraded
    assert (edge.edge, edge.reasons, edge.observed.width, edge.capability.width) == (
        "GPU3/pcie",
        ("PcieWidthDegraded",),
        8,
        16,
    )


def test_a_degraded_edge_of_an_unknown_kind_is_left_out(bodies: dict[str, dict[str, Any]]) -> None:
    body = copy.deepcopy(bodies["dgx-h100-rail-half"])
    body["status"]["health"]["degraded"][0]["kind"] = "telepathy"
    read = read_nodetopology(body)
    assert read.status is not None and read.status.health.degraded == ()
    assert any(p.section == "health" and "telepathy" in str(p) for p in read.problems)


def test_a_degraded_edge_listed_twice_is_read_once_and_noted(bodies: dict[str, dict[str, Any]]) -> None:
    """``health.degraded`` is atomic, so the API server does not keep its edge ids unique: the reader
    does, keeping the first entry (the round trip refuses the object)."""
    body = copy.deepcopy(bodies["dgx-h100-rail-half"])
    (edge,) = read_nodetopology(body).facts.health.degraded
    twice = copy.deepcopy(body["status"]["health"]["degraded"][0])
    twice["message"] = "another message"
    body["status"]["health"]["degraded"].append(twice)
    read = read_nodetopology(body)
    assert read.facts.health.degraded == (edge,)
    assert [str(p) for p in read.problems] == ["status.health: edge 'mlx5_3/port1' listed twice"]
    with pytest.raises(ResourceError, match="listed twice"):
        topology_from_nodetopology(body)


def test_a_degraded_edge_says_each_fact_once_and_reads_as_written_whole(
    bodies: dict[str, dict[str, Any]],
) -> None:
    """A degraded edge leaves out what its id and the GPU or NIC it names already say (``device``,
    ``gpu``, a port's ``nic`` and ``port``, its device's own ``pciBusID``); written out whole, as agents
    before this shape did, it reads to the same edge."""
    for machine, expected in (
        (
            "dgx-h100-rail-half",
            {"edge": "mlx5_3/port1", "nic": "mlx5_3", "port": 1, "address": "0000:41:00.0"},
        ),
        ("dgx-h100-gpu-x8", {"edge": "GPU3/pcie", "gpu": 3, "address": "0000:40:00.0"}),
    ):
        body = copy.deepcopy(bodies[machine])
        (written,) = body["status"]["health"]["degraded"]
        assert not {"device", "gpu", "nic", "port", "pciBusID"} & set(written), machine
        (edge,) = read_nodetopology(body).facts.health.degraded
        assert edge.device == expected["edge"].partition("/")[0]
        assert (edge.gpu, edge.nic, edge.port) == (
            expected.get("gpu"),
            expected.get("nic"),
            expected.get("port"),
        )
        assert str(edge.address) == expected["address"], machine
        whole = {"device": edge.device, "pciBusID": str(edge.address)}
        whole.update(
            {k: v for k, v in (("gpu", edge.gpu), ("nic", edge.nic), ("port", edge.port)) if v is not None}
        )
        written.update(whole)
        assert read_nodetopology(body).facts.health.degraded == (edge,), machine
        # an address of its own is written, and read as written
        written["pciBusID"] = "0000:ff:00.0"
        assert str(read_nodetopology(body).facts.health.degraded[0].address) == "0000:ff:00.0"
