"""``nodetopo export``: Kueue/Volcano/KAI/Slurm from NodeTopology objects; Slurm held to the corpus."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from nodetopo import export
from nodetopo import fabric as ib
from nodetopo.cli import main
from nodetopo.export import NodePlace
from nodetopo.model import Facts, NetworkObservation
from nodetopo.resource.body import to_nodetopology
from nodetopo.topology.derive import derive_topology

GB200 = "fabric/ibnetdiscover/topograph-gb200-nvl72-superpod-2tier-ndr-rail-example.out"
EXPECTED = "fabric/expected/topograph-example-out-slurm-topology.conf"
SELECTED = (
    ["a05-p1-dgx-01-c03", "a05-p1-dgx-01-c04"]
    + [f"a06-p1-dgx-02-c{i:02d}" for i in range(1, 19)]
    + [f"b05-p1-dgx-05-c{i:02d}" for i in range(1, 19)]
)


def nodetopologies_from_fabric(corpus: Path, hosts: list[str]) -> tuple[list[dict[str, object]], list[str]]:
    """What each selected host's agent would publish, given the fabric map of the corpus sweep.

    A host is known by the port GUIDs of its named HCAs (the agent reads all of its own from sysfs;
    in the sweep an HCA with a default description names no host). Unknown hosts are returned apart.
    """
    fabric = ib.parse_ibnetdiscover((corpus / GB200).read_text())
    fmap = ib.parse_fabric_map(json.dumps(ib.fabric_map(fabric)))
    nodes = {n.guid: n for n in fabric.nodes}
    guids: dict[str, list[tuple[str, int]]] = {}
    for e in fabric.links:
        name, hca = ib.ca_host(nodes[e.guid].description)
        if nodes[e.guid].kind == "ca" and name and e.port_guid:
            guids.setdefault(name, []).append((hca or "", e.port_guid))
    objects, unknown = [], []
    for host in hosts:
        if host not in guids:
            unknown.append(host)
            continue
        ports = [ib.HostPort(ca=c, port=1, port_guid=g, lid=None, state="ACTIVE") for c, g in guids[host]]
        observation, problems, _ = ib.position_from_map(ports, fmap)
        assert problems == []
        objects.append(to_nodetopology(derive_topology(Facts(network=(observation,))), host))
    return objects, unknown


@pytest.mark.corpus
def test_slurm_tree_matches_the_corpus_grouping(corpus: Path) -> None:
    objects, unknown = nodetopologies_from_fabric(corpus, SELECTED)
    # 7 a06 trays have only default-described HCAs in the sweep: topograph leaves them out too
    assert unknown == [f"a06-p1-dgx-02-c{i:02d}" for i in (5, 6, 8, 9, 13, 15, 17)]
    result = export.slurm_tree(export.places_from_nodetopologies(objects))
    assert result.missing == ()
    ours = [line.split() for line in result.text.splitlines()]
    expected = [line.split() for line in (corpus / EXPECTED).read_text().splitlines()]
    our_nodes = sorted(parts[1] for parts in ours if parts[1].startswith("Nodes="))
    their_nodes = sorted(parts[1] for parts in expected if parts[1].startswith("Nodes="))
    # the same three groups of nodes, with the same hostlist compression
    assert (
        our_nodes
        == their_nodes
        == [
            "Nodes=a05-p1-dgx-01-c[03-04]",
            "Nodes=a06-p1-dgx-02-c[01-04,07,10-12,14,16,18]",
            "Nodes=b05-p1-dgx-05-c[01-18]",
        ]
    )
    # Where we differ, on purpose: topograph names each group by one rail's leaf and puts a leaf
    # (S-2c5eab0300b87b40) above a spine; every leaf here connects only to spines, so our tree has
    # two levels: the leaf sets (one per rack: the trays are rail-optimised) under the spine group.
    switches = [parts for parts in ours if parts[1].startswith("Switches=")]
    (top,) = switches
    assert top[0].startswith("SwitchName=t1-") and len(top[1].split(",")) == 3
    assert {parts[0].split("=")[1] for parts in ours if parts[1].startswith("Nodes=")} == set(
        top[1].removeprefix("Switches=").split(",")
    )
    assert len(expected) == 5 and sum(1 for p in expected if p[1].startswith("Switches=")) == 2


def test_hostlist() -> None:
    assert (
        export.hostlist(["n-c01", "n-c02", "n-c03", "n-c07", "gpu1", "login"]) == "gpu1,login,n-c[01-03,07]"
    )
    # widths differ (a9 vs a10): Slurm would read a[9-11] as a9,a10,a11 only with equal padding
    assert export.hostlist(["a9", "a10", "a11"]) == "a9,a[10-11]"


def places() -> list[NodePlace]:
    return [
        NodePlace(name=f"gpu{i:02d}", tiers={0: f"leaf-{i // 4}", 1: "spines"}, nvlink_domain=f"dom.{i // 8}")
        for i in range(16)
    ] + [NodePlace(name="cpu01", tiers={})]


def test_kueue_topology_and_flavor() -> None:
    result = export.kueue(places(), flavor_node_labels={"nodetopo.io/rdma": "true"})
    topology, flavor = result.objects
    assert topology["apiVersion"] == "kueue.x-k8s.io/v1beta2" and topology["kind"] == "Topology"
    assert [level["nodeLabel"] for level in topology["spec"]["levels"]] == [
        "nodetopo.io/fabric.tier-1",
        "nodetopo.io/fabric.tier-0",
        "kubernetes.io/hostname",
    ]
    assert flavor["spec"] == {"topologyName": "nodetopo", "nodeLabels": {"nodetopo.io/rdma": "true"}}
    assert result.missing == ("cpu01: no nodetopo.io/fabric.tier-0", "cpu01: no nodetopo.io/fabric.tier-1")
    # the domains (8 nodes) span two leaves (4 nodes) each: the domain sits between leaf and spines
    nvlink = export.kueue(places(), nvlink=True)
    assert [level["nodeLabel"] for level in nvlink.objects[0]["spec"]["levels"]] == [
        "nodetopo.io/fabric.tier-1",
        "nodetopo.io/nvlink.domain",
        "nodetopo.io/fabric.tier-0",
        "kubernetes.io/hostname",
    ]
    assert "cpu01: no nodetopo.io/nvlink.domain" in nvlink.missing


def test_nvlink_level_goes_where_it_nests() -> None:
    # one NVL72 rack = one domain = the trays under one leaf set: below (or equal to) the leaf
    racks = [
        NodePlace(name=f"t{i:02d}", tiers={0: f"rack-{i // 18}", 1: "spines"}, nvlink_domain=f"d.{i // 18}")
        for i in range(36)
    ]
    assert export.label_levels(racks, nvlink=True)[0][:3] == [
        "nodetopo.io/fabric.tier-1",
        "nodetopo.io/fabric.tier-0",
        "nodetopo.io/nvlink.domain",
    ]
    # domains that cut across leaves do not nest: left out, and said
    crossed = [
        NodePlace(name=f"n{i}", tiers={0: f"leaf-{i // 2}"}, nvlink_domain=f"d.{i % 2}") for i in range(4)
    ]
    levels, notes = export.label_levels(crossed, nvlink=True)
    assert "nodetopo.io/nvlink.domain" not in levels and any("does not nest" in n for n in notes)


def test_kai_volcano_and_slurm_block() -> None:
    kai = export.kai(places()).objects[0]
    assert (kai["apiVersion"], kai["kind"]) == ("kai.scheduler/v1alpha1", "Topology")
    hypernodes = export.volcano(places()).objects
    tiers = {h["metadata"]["name"]: h["spec"]["tier"] for h in hypernodes}
    assert tiers == {"t0-leaf-0": 1, "t0-leaf-1": 1, "t0-leaf-2": 1, "t0-leaf-3": 1, "t1-spines": 2}
    assert {h["spec"]["tierName"] for h in hypernodes} == {
        "nodetopo.io/fabric.tier-0",
        "nodetopo.io/fabric.tier-1",
    }
    top = next(h for h in hypernodes if h["spec"]["tier"] == 2)
    assert [m["selector"]["exactMatch"]["name"] for m in top["spec"]["members"]] == [
        "t0-leaf-0",
        "t0-leaf-1",
        "t0-leaf-2",
        "t0-leaf-3",
    ]
    assert all(re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name) and len(name) <= 63 for name in tiers)
    block = export.slurm_block(places(), block_size=8)
    assert block.text.splitlines() == [
        "BlockName=dom.0 Nodes=gpu[00-07]",
        "BlockName=dom.1 Nodes=gpu[08-15]",
        "BlockSizes=8",
    ]
    assert block.missing == ("cpu01: no nodetopo.io/nvlink.domain and no nodetopo.io/fabric.tier-0",)


@pytest.mark.corpus
def test_cli_export_and_fabric(corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    map_path = tmp_path / "map.json"
    assert main(["fabric", "--from", str(corpus / GB200), "-o", str(map_path)]) == 0
    assert "542 host port(s), 31 leaf switch(es), 9 above" in capsys.readouterr().err
    assert json.loads(map_path.read_text())["kind"] == "nodetopo.io/fabric-map"
    objects, _ = nodetopologies_from_fabric(corpus, SELECTED[:4])
    objects.append(
        to_nodetopology(derive_topology(Facts(network=(NetworkObservation(source="fabric.ib"),))), "lost")
    )
    listing = tmp_path / "ntopo.yaml"
    listing.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": objects}))
    assert main(["export", "kueue", "-f", str(listing)]) == 0
    out = capsys.readouterr()
    documents = list(yaml.safe_load_all(out.out))
    assert [d["kind"] for d in documents] == ["Topology", "ResourceFlavor"]
    assert "lost: no nodetopo.io/fabric.tier-0" in out.err
    assert main(["export", "slurm", "-f", str(listing), "--strict"]) == 4
    assert "SwitchName=t1-" in capsys.readouterr().out


def test_volcano_keeps_groups_apart_that_differ_only_in_case() -> None:
    """Was: ``RackA`` and ``racka`` both became HyperNode ``t0-racka``: one object, the nodes of
    two racks as its members."""
    racks = [NodePlace(name="a1", tiers={0: "RackA"}), NodePlace(name="b1", tiers={0: "racka"})]
    hypernodes = export.volcano(racks).objects
    names = [h["metadata"]["name"] for h in hypernodes]
    assert len(set(names)) == 2 and "t0-racka" in names, names
    assert all(re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name) and len(name) <= 63 for name in names)
    members = {h["metadata"]["name"]: [m["selector"]["exactMatch"]["name"] for m in h["spec"]["members"]]
               for h in hypernodes}  # fmt: skip
    assert members["t0-racka"] == ["b1"] and sorted(members.values()) == [["a1"], ["b1"]]


def test_slurm_never_writes_a_node_name_holding_a_newline() -> None:
    """Was: ``export slurm`` wrote ``Nodes=gpu01,gpu02\\nSwitchName=evil ...``, a line of its own."""
    forged = "gpu02\nSwitchName=evil Nodes=root"
    fleet = [NodePlace(name="gpu01", tiers={0: "leaf-0"}), NodePlace(name=forged, tiers={0: "leaf-0"})]
    for result in (export.slurm_tree(fleet), export.slurm_block(fleet)):
        assert "evil" not in result.text and result.text.count("\n") == 1, result.text
        assert "Nodes=gpu01" in result.text
        assert len(result.missing) == 1 and "not a Slurm node name" in result.missing[0]
        assert "\n" not in result.missing[0] and "\\n" in result.missing[0]


def _bundle_objects() -> list[dict[str, object]]:
    from helpers import BUNDLES

    from nodetopo.topology.discover import bundle_context, scan

    return [to_nodetopology(scan(bundle_context(BUNDLES / n)).topology, n) for n in ("dgx-h100", "cpu-only")]


def test_a_json_list_reads_as_json_and_gives_what_yaml_gives(tmp_path: Path) -> None:
    from nodetopo.export import cli as export_cli

    listing = {"apiVersion": "v1", "kind": "List", "items": _bundle_objects()}
    as_json, as_yaml = tmp_path / "ntopo.json", tmp_path / "ntopo.yaml"
    as_json.write_text("\n" + json.dumps(listing, indent=4))  # kubectl get ntopo -o json, a newline first
    as_yaml.write_text(yaml.safe_dump(listing))
    read = export_cli.load_objects([str(as_json)])
    assert [o["metadata"]["name"] for o in read] == ["dgx-h100", "cpu-only"]
    assert read == export_cli.load_objects([str(as_yaml)])


def test_yaml_flow_style_that_is_not_json_is_still_read_as_yaml(tmp_path: Path) -> None:
    from nodetopo.export import cli as export_cli

    flow = tmp_path / "flow.yaml"
    flow.write_text("{kind: NodeTopology, metadata: {name: n1}, status: {}}\n")
    assert [o["metadata"]["name"] for o in export_cli.load_objects([str(flow)])] == ["n1"]


def test_json_nested_too_deep_is_refused_naming_the_file_not_read_as_yaml(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 5000 + "]" * 5000)
    assert main(["export", "kueue", "-f", str(deep)]) != 0
    err = capsys.readouterr().err
    assert f"{deep}: cannot read NodeTopology objects" in err and "JSON nested deeper than" in err, err
