"""The node's place in the network: the join over fabric sources, its labels and status.network."""

from __future__ import annotations

from nodetopo.model import (
    Condition,
    ConditionReason,
    FabricInfo,
    FabricTier,
    Facts,
    NetworkObservation,
    NvmlGpu,
    NvmlSnapshot,
    PciAddress,
    SourceStatus,
    SwitchPort,
)
from nodetopo.resource.body import to_nodetopology
from nodetopo.resource.identity import PREFIX, is_valid
from nodetopo.resource.labels import label_value, to_labels, uncertain_keys
from nodetopo.topology.derive import derive_topology

LEAF = FabricTier(
    level=0, id="S-2c5eab0300c26040", name="B09-P1-IBLEAF-01-05", members=("0x2c5eab0300c26040",)
)
SPINES = FabricTier(level=1, id="t1-e22741fae6f98f54")


def ib(*tiers: FabricTier, switch: str = "0x2c5eab0300c26040") -> NetworkObservation:
    port = SwitchPort(
        nic="mlx5_0", port=1, source="fabric.ib", state="ACTIVE", switch_id=switch, switch_port="8"
    )
    return NetworkObservation(source="fabric.ib", neighbours=(port,), tiers=tiers)


def test_tiers_become_labels_nearest_first() -> None:
    topology = derive_topology(Facts(network=(ib(LEAF, SPINES),)))
    labels = to_labels(topology)
    assert labels[PREFIX + "fabric.tier-0"] == "S-2c5eab0300c26040"
    assert labels[PREFIX + "fabric.tier-1"] == "t1-e22741fae6f98f54"
    status = to_nodetopology(topology, "n1")["status"]
    assert status["network"]["tierSource"] == "fabric.ib"
    assert [t["level"] for t in status["network"]["tiers"]] == [0, 1]
    assert status["network"]["neighbours"][0]["switchPort"] == "8"


def test_infiniband_wins_over_cloud_and_lldp() -> None:
    cloud = NetworkObservation(source="fabric.cloud", tiers=(FabricTier(level=0, id="rack-a"),))
    lldp = NetworkObservation(source="fabric.lldp", tiers=(FabricTier(level=0, id="02:00:00:00:00:01"),))
    topology = derive_topology(Facts(network=(cloud, lldp, ib(LEAF))))
    assert topology.network.tier_source == "fabric.ib"
    assert (
        to_labels(derive_topology(Facts(network=(cloud, lldp))))[PREFIX + "fabric.tier-0"]
        == "02-00-00-00-00-01"
    )


def test_long_ids_are_hashed_deterministically_to_63_characters() -> None:
    ocid = "ocid1.computelocalblock.oc1.iad." + "a" * 60
    cloud = NetworkObservation(source="fabric.cloud", tiers=(FabricTier(level=0, id=ocid),))
    value = to_labels(derive_topology(Facts(network=(cloud,))))[PREFIX + "fabric.tier-0"]
    assert len(value) <= 63 and is_valid(PREFIX + "fabric.tier-0", value) and value == label_value(ocid)
    other = label_value("ocid1.computelocalblock.oc1.iad." + "a" * 59 + "b")
    assert other != value and other[:52] == value[:52]


def test_sources_disagreeing_on_a_port_is_inconsistent_and_keeps_old_labels() -> None:
    lldp_view = NetworkObservation(
        source="fabric.lldp",
        neighbours=(SwitchPort(nic="mlx5_0", port=None, source="fabric.lldp", switch_id="0x1111"),),
        tiers=(FabricTier(level=0, id="0x1111"),),
    )
    topology = derive_topology(Facts(network=(ib(LEAF), lldp_view)))
    body = to_nodetopology(topology, "n1")
    consistent = next(c for c in body["status"]["conditions"] if c["type"] == "Consistent")
    assert consistent["status"] == "False" and "fabric.ib says 0x2c5eab0300c26040" in consistent["message"]
    assert topology.network.tiers == ()
    assert PREFIX + "fabric.tier-0" not in to_labels(topology)
    assert PREFIX + "fabric.tier-0" in uncertain_keys(topology)  # the publisher keeps the last agreed value


def test_degraded_fabric_source_makes_tier_labels_uncertain() -> None:
    facts = Facts(
        network=(ib(),),
        sources=(SourceStatus(name="fabric.ib", ok=True, message="Degraded: half-cabled"),),
        conditions=(
            Condition(source="fabric.ib", reason=ConditionReason.DEGRADED, message="mlx5_1: not in map"),
        ),
    )
    topology = derive_topology(facts)
    assert {PREFIX + "fabric.tier-0", PREFIX + "fabric.tier-1"} <= uncertain_keys(topology)
    unavailable = derive_topology(
        Facts(
            conditions=(
                Condition(source="fabric.lldp", reason=ConditionReason.UNAVAILABLE, message="no lldpd"),
            )
        )
    )
    assert PREFIX + "fabric.tier-0" not in uncertain_keys(unavailable)


def nvml(health: str | None) -> NvmlSnapshot:
    fabric = FabricInfo(
        cluster_uuid="dc6e40c4-d722-4357-9ba6-5291dd461278", clique_id=2, state="COMPLETED", health=health
    )
    gpus = tuple(
        NvmlGpu(
            index=i,
            uuid=f"GPU-{i}",
            model="NVIDIA GB200",
            address=PciAddress(0, 0x10 + i, 0, 0),
            fabric=fabric,
        )
        for i in range(4)
    )
    return NvmlSnapshot(driver_version="570", gpus=gpus)


def test_nvlink_domain_label_and_health() -> None:
    labels = to_labels(derive_topology(Facts(nvml=nvml("UNHEALTHY"))))
    assert labels[PREFIX + "nvlink.domain"] == "dc6e40c4-d722-4357-9ba6-5291dd461278.2"
    assert labels[PREFIX + "nvlink.domain-healthy"] == "false"
    assert to_labels(derive_topology(Facts(nvml=nvml("HEALTHY"))))[PREFIX + "nvlink.domain-healthy"] == "true"
    assert PREFIX + "nvlink.domain-healthy" not in to_labels(derive_topology(Facts(nvml=nvml(None))))
    body = to_nodetopology(derive_topology(Facts(nvml=nvml("UNHEALTHY"))), "n1")
    assert body["status"]["network"]["nvlinkDomain"] == {
        "id": "dc6e40c4-d722-4357-9ba6-5291dd461278.2",
        "healthy": False,
    }
