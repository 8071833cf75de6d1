"""NVLink domain: the nvidia-smi ``Fabric`` sections and NetQ's computeNodes from the corpus."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nodetopo.errors import ParseError
from nodetopo.model import FabricInfo
from nodetopo.topology.network import nvlink_domain
from tests.sources.nvidia_smi_fabric import parse_nvidia_smi_fabric

ISSUE626 = "fabric/nvlink/nvidia-smi-q-grep-C3-fabric-completed-unhealthy-clique2-dra-issue626.txt"
PR506 = "fabric/nvlink/nvidia-smi-q-fabric-insufficient-resources-clique0-zero-uuid-azhpc-pr506.txt"
NETQ = "fabric/nvlink/netq-nmx-computeNodes-2trays-1domain-topograph.json"


@pytest.mark.corpus
def test_completed_but_unhealthy_is_a_domain_reported_unhealthy(corpus: Path) -> None:
    (fabric,) = parse_nvidia_smi_fabric((corpus / ISSUE626).read_text())
    assert (fabric.state, fabric.status, fabric.clique_id, fabric.cluster_uuid) == (
        "Completed",
        "Success",
        2,
        "dc6e40c4-d722-4357-9ba6-5291dd461278",
    )
    assert (fabric.health_summary, fabric.bandwidth) == ("Unhealthy", "Full")
    assert nvlink_domain(fabric.info()) == ("dc6e40c4-d722-4357-9ba6-5291dd461278.2", False)


@pytest.mark.corpus
def test_insufficient_resources_is_no_domain(corpus: Path) -> None:
    (fabric,) = parse_nvidia_smi_fabric((corpus / PR506).read_text())
    assert (fabric.state, fabric.status, fabric.clique_id) == ("Completed", "Insufficient Resources", 0)
    assert fabric.cluster_uuid == "00000000-0000-0000-0000-000000000000"
    assert fabric.info() is None and nvlink_domain(fabric.info()) == (None, None)


@pytest.mark.corpus
def test_netq_compute_nodes_one_domain(corpus: Path) -> None:
    """NetQ's DomainUUID groups the trays; it is not nvidia-smi's ClusterUUID.CliqueId string."""
    nodes = json.loads((corpus / NETQ).read_text())
    assert [(n["Name"], n["DomainUUID"], n["Health"], len(n["GpuIDList"])) for n in nodes] == [
        ("node1", "3fbfc98b-7f95-4749-ab11-bd351a2aab3e", "HEALTHY", 4),
        ("node2", "3fbfc98b-7f95-4749-ab11-bd351a2aab3e", "HEALTHY", 4),
    ]
    loc = [
        (n["LocationInfo"]["ChassisID"], n["LocationInfo"]["SlotID"], n["LocationInfo"]["TrayIndex"])
        for n in nodes
    ]
    assert loc == [(1, 5, 4), (1, 22, 12)]
    assert {n["LocationInfo"]["ChassisSerialNumber"] for n in nodes} == {"1825024170029"}


def test_health_is_known_only_when_the_driver_reports_it() -> None:
    base = {"cluster_uuid": "9b2c7a4e-0000-4000-8000-000000000001", "clique_id": 7, "state": "COMPLETED"}
    assert nvlink_domain(FabricInfo(**base, health="HEALTHY")) == (
        "9b2c7a4e-0000-4000-8000-000000000001.7",
        True,
    )
    assert nvlink_domain(FabricInfo(**base, health=None))[1] is None
    assert nvlink_domain(FabricInfo(**{**base, "state": "IN_PROGRESS"}, health="HEALTHY")) == (None, None)


def test_bad_values_are_parse_errors() -> None:
    with pytest.raises(ParseError, match="CliqueId"):
        parse_nvidia_smi_fabric("Fabric\n    State : Completed\n    CliqueId : two\n")
