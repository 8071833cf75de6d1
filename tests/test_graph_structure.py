"""nodetopo.graph.Graph: the small graph the join builds, checked against networkx's Graph (which it
replaced to keep networkx out of every cold start) on random graphs."""

from __future__ import annotations

import networkx as nx
from hypothesis import given, settings
from hypothesis import strategies as st

from nodetopo.graph import Graph, connected_components

NODE = st.sampled_from([f"{kind}:{i}" for kind in ("gpu", "pci", "nic", "nvswitch") for i in range(6)])
STEP = st.one_of(
    st.tuples(st.just("node"), NODE, st.integers(0, 3)),
    st.tuples(st.just("edge"), NODE, NODE, st.integers(0, 3)),
)


def _build(steps: list[tuple[object, ...]]) -> tuple[Graph, nx.Graph]:
    ours, theirs = Graph(), nx.Graph()
    for step in steps:
        if step[0] == "node":
            _, n, v = step
            ours.add_node(str(n), kind="k", value=v)
            theirs.add_node(n, kind="k", value=v)
        else:
            _, a, b, v = step
            ours.add_edge(str(a), str(b), links=v)
            theirs.add_edge(a, b, links=v)
    return ours, theirs


@settings(max_examples=200, deadline=None)
@given(st.lists(STEP, max_size=40))
def test_same_nodes_edges_and_components_as_networkx(steps: list[tuple[object, ...]]) -> None:
    ours, theirs = _build(steps)
    assert list(ours.nodes(data=True)) == list(theirs.nodes(data=True))
    assert list(ours.edges(data=True)) == list(theirs.edges(data=True))
    assert list(ours.edges()) == list(theirs.edges())
    for n in theirs:
        assert n in ours and ours.nodes[n] == theirs.nodes[n]
        assert list(ours.neighbors(n)) == list(theirs.neighbors(n))
        for m in theirs.neighbors(n):
            assert ours.has_edge(n, m) and ours.edges[n, m] == theirs.edges[n, m]
    assert [sorted(c) for c in connected_components(ours)] == [
        sorted(c) for c in nx.connected_components(theirs)
    ]


def test_an_attribute_may_be_called_node() -> None:
    g = Graph()
    g.add_node("numa:0", kind="numa", node=7)
    g.add_edge("pci:a", "numa:0", kind="numa")
    assert g.nodes["numa:0"] == {"kind": "numa", "node": 7}


def test_add_edge_creates_bare_ends_and_shares_one_attribute_dict() -> None:
    g = Graph()
    g.add_edge("gpu:0", "gpu:1", kind="nvlink", links=2)
    assert g.nodes["gpu:0"] == {} and "gpu:1" in g and len(g) == 2
    g.edges["gpu:1", "gpu:0"]["links"] = 4
    assert g.edges["gpu:0", "gpu:1"]["links"] == 4
    g.add_edge("gpu:1", "gpu:0", source="nvml")
    assert g.edges["gpu:0", "gpu:1"] == {"kind": "nvlink", "links": 4, "source": "nvml"}
    assert list(g.edges()) == [("gpu:0", "gpu:1")]
    assert not g.has_edge("gpu:0", "gpu:2")
