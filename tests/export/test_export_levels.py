"""``nodetopo export kueue|kai --levels-from/--tier-key/--nvlink-key``: levels decided from nodetopo's
facts, named by the keys GFD and topograph already put on the nodes (docs/integrations.md's table)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from nodetopo import export
from nodetopo.cli import main
from nodetopo.export import NodePlace
from nodetopo.export.keys import KEY_SETS

REPO = Path(__file__).resolve().parents[2]


def fleet(tiers: int = 2) -> list[NodePlace]:
    """16 nodes, 4 per leaf, NVLink domains of 8 (two leaves each), ``tiers`` fabric tiers."""
    return [
        NodePlace(
            name=f"gpu{i:02d}",
            tiers={level: f"t{level}-{i // (4 * 2**level)}" for level in range(tiers)},
            nvlink_domain=f"dom.{i // 8}",
        )
        for i in range(16)
    ]


def levels(result: export.Export) -> list[str]:
    return [level["nodeLabel"] for level in result.objects[0]["spec"]["levels"]]


def test_gfd_topograph_levels_name_their_keys_where_nodetopos_would_be() -> None:
    keys = KEY_SETS["gfd-topograph"]
    result = export.kueue(fleet(), nvlink=True, keys=keys)
    assert levels(result) == [
        "fabric.topograph.run/tier-1",
        "nvidia.com/gpu.clique",
        "fabric.topograph.run/tier-0",
        "kubernetes.io/hostname",
    ]
    # the same places, the same positions as nodetopo's own keys
    own = export.kueue(fleet(), nvlink=True)
    assert [k.split("/")[-1][-1] for k in levels(own)[:3:2]] == ["1", "0"]
    assert any("keys nodetopo does not write" in n and "nvidia.com/gpu.clique" in n for n in result.notes)
    assert not any("does not write" in n for n in own.notes)
    kai = export.kai(fleet(), keys=keys)
    assert levels(kai) == [
        "fabric.topograph.run/tier-1",
        "fabric.topograph.run/tier-0",
        "kubernetes.io/hostname",
    ]


def test_topograph_before_v1_has_three_tiers_the_fourth_is_left_out_and_said() -> None:
    keys = KEY_SETS["gfd-topograph-v0"]
    assert levels(export.kueue(fleet(3), keys=keys)) == [
        "network.topology.nvidia.com/core",
        "network.topology.nvidia.com/spine",
        "network.topology.nvidia.com/leaf",
        "kubernetes.io/hostname",
    ]
    deep = export.kai(fleet(4), keys=keys)
    assert levels(deep)[0] == "network.topology.nvidia.com/core"  # tier 3 has no key: no gap below it
    assert any("fabric tier(s) 3 have no key in gfd-topograph-v0" in n for n in deep.notes)


def _listing(tmp_path: Path) -> Path:
    from nodetopo.model import FabricTier, Facts, NetworkObservation
    from nodetopo.resource.body import to_nodetopology
    from nodetopo.topology.derive import derive_topology

    items = []
    for i in range(4):
        tiers = (f"leaf-{i // 2}", "spine-a")
        observation = NetworkObservation(
            source="fabric.cloud", tiers=tuple(FabricTier(level=n, id=t) for n, t in enumerate(tiers))
        )
        items.append(to_nodetopology(derive_topology(Facts(network=(observation,))), f"n{i}"))
    path = tmp_path / "ntopo.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    return path


@pytest.mark.parametrize("fmt", ["kueue", "kai"])
def test_the_cli_names_the_keys_asked_for(
    fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    listing = _listing(tmp_path)
    assert main(["export", fmt, "-f", str(listing), "--levels-from", "gfd-topograph", "--strict"]) == 0
    out = capsys.readouterr()
    (topology, *_) = list(yaml.safe_load_all(out.out))
    assert [lv["nodeLabel"] for lv in topology["spec"]["levels"]] == [
        "fabric.topograph.run/tier-1",
        "fabric.topograph.run/tier-0",
        "kubernetes.io/hostname",
    ]
    assert "keys nodetopo does not write" in out.err
    # a topograph deployed with its own fabricLabels: one key given, one tier a level
    assert main(["export", fmt, "-f", str(listing), "--tier-key", "example.com/rack"]) == 0
    out = capsys.readouterr()
    (topology, *_) = list(yaml.safe_load_all(out.out))
    assert [lv["nodeLabel"] for lv in topology["spec"]["levels"]] == [
        "example.com/rack",
        "kubernetes.io/hostname",
    ]
    assert "fabric tier(s) 1 have no key" in out.err


@pytest.mark.parametrize("bad", ["Example.com/rack", "rack/", "a/b/c", "x" * 64, "kubernetes.io/hostname"])
def test_a_key_that_cannot_be_a_level_is_a_usage_error(
    bad: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["export", "kueue", "-f", str(_listing(tmp_path)), "--tier-key", bad])
    assert exited.value.code == 2
    assert "--tier-key" in capsys.readouterr().err


def test_the_docs_table_names_every_key_a_key_set_writes() -> None:
    """docs/integrations.md's table has a row for each level key of each set, on the row of the
    nodetopo key it stands for."""
    text = (REPO / "docs" / "integrations.md").read_text()
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `nodetopo.io/") and len(cells) >= 3:
            for key in re.findall(r"`([^`]+)`", cells[0]):
                rows[key] = " ".join(cells[1:3])
    nodetopo = KEY_SETS["nodetopo"]
    for keys in KEY_SETS.values():
        for level in range(3):
            theirs = keys.tier(level)
            assert theirs is not None
            assert f"`{theirs}`" in rows[str(nodetopo.tier(level))] or keys is nodetopo, (level, theirs)
        assert keys is nodetopo or f"`{keys.nvlink}`" in rows[nodetopo.nvlink], keys.nvlink
