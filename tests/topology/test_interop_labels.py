"""GPU feature discovery's labels read beside nodetopo's facts: the disagreements reported in
``Consistent``, and ``nvidia.com/gpu.clique`` taken as the NVLink domain when NVML is not there."""

from __future__ import annotations

import dataclasses
from functools import cache

import pytest
from helpers import BUNDLES

from nodetopo.model import Condition, ConditionReason, Topology
from nodetopo.resource.body import to_nodetopology
from nodetopo.resource.conditions import conditions
from nodetopo.topology.discover import bundle_context, scan
from nodetopo.topology.interop import (
    GFD_CLIQUE,
    GFD_COUNT,
    GFD_PRODUCT,
    SOURCE,
    align_with_labels,
    gfd_product,
    label_disagreements,
    parse_clique,
)
from nodetopo.topology.network import nvlink_domain

GH200_CLIQUE = "7d3f1c2a-5b6e-4f80-9a1d-2c4b6e8f0a13.32766"  # what the gh200-nvl bundle's NVML says


@cache
def topology_of(bundle: str) -> Topology:
    return scan(bundle_context(BUNDLES / bundle)).topology


def messages(labels: dict[str, str], bundle: str = "dgx-h100") -> list[str]:
    found = label_disagreements(labels, topology_of(bundle))
    assert all(c.source == SOURCE and c.reason is ConditionReason.INCONSISTENT for c in found)
    return [c.message for c in found]


@pytest.mark.parametrize(
    ("model", "label"),
    [
        ("NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3"),
        ("NVIDIA A100-SXM4-80GB", "NVIDIA-A100-SXM4-80GB"),
        ("Tesla V100-SXM2-32GB", "Tesla-V100-SXM2-32GB"),
        ("NVIDIA  GeForce RTX 4090 ", "NVIDIA-GeForce-RTX-4090"),  # blanks collapse, ends trimmed
        ("NVIDIA RTX A6000 (rev a1)", "NVIDIA-RTX-A6000-rev-a1"),  # other characters dropped
    ],
)
def test_product_is_spelled_as_gfd_spells_it(model: str, label: str) -> None:
    assert gfd_product(model) == label


def test_labels_that_agree_are_no_disagreement() -> None:
    assert messages({GFD_COUNT: "8", GFD_PRODUCT: "NVIDIA-H100-80GB-HBM3"}) == []
    assert messages({GFD_PRODUCT: "NVIDIA-H100-80GB-HBM3-SHARED"}) == []  # time-slicing's suffix
    assert messages({GFD_CLIQUE: GH200_CLIQUE, GFD_COUNT: "2"}, "gh200-nvl") == []


def test_absent_or_unreadable_labels_are_no_disagreement() -> None:
    assert messages({}) == []
    assert messages({GFD_COUNT: "", GFD_PRODUCT: "", GFD_CLIQUE: ""}) == []
    assert messages({GFD_COUNT: "eight"}) == []
    # nodetopo knows no NVLink domain on a single-node HGX: nothing to compare the clique with
    assert messages({GFD_CLIQUE: GH200_CLIQUE}) == []


def test_count_disagreement_names_the_key_and_both_values() -> None:
    assert messages({GFD_COUNT: "4"}) == [f"{GFD_COUNT} is 4, nodetopo found 8 GPUs"]


def test_product_disagreement_names_the_key_and_both_values() -> None:
    assert messages({GFD_PRODUCT: "NVIDIA-A100-SXM4-80GB"}) == [
        f"{GFD_PRODUCT} is NVIDIA-A100-SXM4-80GB, nodetopo's GPUs are NVIDIA-H100-80GB-HBM3"
    ]


def test_mig_single_strategy_counts_and_names_mig_devices() -> None:
    """Under GFD's ``single`` MIG strategy gpu.count is the MIG devices and the product carries the
    profile: neither is a disagreement, but another GPU model still is."""
    mig = {"nvidia.com/mig.strategy": "single", GFD_COUNT: "28"}
    assert messages({**mig, GFD_PRODUCT: "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"}, "a100-mig") == []
    assert messages({**mig, GFD_PRODUCT: "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"}, "a100-mig") == [
        f"{GFD_PRODUCT} is NVIDIA-H100-80GB-HBM3-MIG-1g.10gb, nodetopo's GPUs are NVIDIA-A100-SXM4-80GB"
    ]
    assert messages({GFD_COUNT: "28"}, "a100-mig") == [f"{GFD_COUNT} is 28, nodetopo found 4 GPUs"]


def test_clique_disagreement_names_the_key_and_both_values() -> None:
    other = "7d3f1c2a-5b6e-4f80-9a1d-2c4b6e8f0a13.1"
    assert messages({GFD_CLIQUE: other}, "gh200-nvl") == [
        f"{GFD_CLIQUE} is {other}, nodetopo's NVLink domain is {GH200_CLIQUE}"
    ]


def test_nothing_is_compared_when_an_essential_source_is_missing() -> None:
    """A wrong host root leaves nodetopo's facts unknown: 0 GPUs is not a fact to dispute."""
    empty = topology_of("cpu-only")
    assert messages({GFD_COUNT: "8"}, "cpu-only") == [f"{GFD_COUNT} is 8, nodetopo found 0 GPUs"]
    missing = Condition(source="sysfs.pci", reason=ConditionReason.MISSING, message="no PCI devices")
    unknown = dataclasses.replace(empty, conditions=(*empty.conditions, missing))
    assert label_disagreements({GFD_COUNT: "8"}, unknown) == ()


def test_disagreement_makes_consistent_false_in_the_nodetopology() -> None:
    aligned = align_with_labels(topology_of("dgx-h100"), {GFD_COUNT: "4"})
    consistent = next(c for c in conditions(aligned) if c["type"] == "Consistent")
    assert consistent["status"] == "False"
    assert consistent["reason"] == "Inconsistent"
    assert f"{GFD_COUNT} is 4, nodetopo found 8 GPUs" in consistent["message"]
    agreed = align_with_labels(topology_of("dgx-h100"), {GFD_COUNT: "8"})
    assert agreed == topology_of("dgx-h100")


@pytest.mark.parametrize(
    "value", ["", "nvl1", "abc.x", "7d3f1c2a.1.2", "00000000-0000-0000-0000-000000000000.0"]
)
def test_a_clique_not_of_gfd_form_is_not_taken(value: str) -> None:
    assert parse_clique(value) is None


def test_clique_is_the_nvlink_domain_when_nvml_is_not_available() -> None:
    no_nvml = topology_of("gpu-no-driver")
    assert no_nvml.fabric is None and nvlink_domain(no_nvml.fabric) == (None, None)
    aligned = align_with_labels(no_nvml, {GFD_CLIQUE: GH200_CLIQUE})
    assert nvlink_domain(aligned.fabric) == (GH200_CLIQUE, None)  # healthy: unknown, not False
    provenance = [s for s in aligned.sources if s.name == SOURCE]
    assert len(provenance) == 1 and provenance[0].ok
    assert GFD_CLIQUE in provenance[0].message and "NVML is not available" in provenance[0].message
    body = to_nodetopology(aligned, "node-a")
    assert body["status"]["network"]["nvlinkDomain"]["id"] == GH200_CLIQUE
    assert label_disagreements({GFD_CLIQUE: GH200_CLIQUE}, aligned) == ()


def test_clique_is_not_taken_when_nvml_is_available() -> None:
    """NVML answered: its fabric info (or its having none) is the fact, the label only compared."""
    hgx = topology_of("dgx-h100")
    assert align_with_labels(hgx, {GFD_CLIQUE: GH200_CLIQUE}) == hgx
    gh200 = topology_of("gh200-nvl")
    other = "7d3f1c2a-5b6e-4f80-9a1d-2c4b6e8f0a13.1"
    aligned = align_with_labels(gh200, {GFD_CLIQUE: other})
    assert aligned.fabric == gh200.fabric
    assert [c.message for c in aligned.conditions if c.source == SOURCE] == [
        f"{GFD_CLIQUE} is {other}, nodetopo's NVLink domain is {GH200_CLIQUE}"
    ]


def test_unread_labels_change_nothing() -> None:
    assert align_with_labels(topology_of("gpu-no-driver"), None) == topology_of("gpu-no-driver")
