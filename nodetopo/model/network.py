"""Per-source facts: the node's place in the network (InfiniBand, LLDP, cloud metadata): what each
fabric source saw of the NICs' neighbours and of the tiers above the node."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SwitchPort:
    """What one port of this node's NIC is cabled to, as one fabric source saw it.

    ``switch_id`` is the switch's stable identity in the source's terms (an InfiniBand node GUID
    ``0x...``, an LLDP chassis id such as a MAC); ``switch_name`` its human name when it has one
    (``MF0;<name>:<model>`` hostname, LLDP system name), None for vendor-default descriptions.
    ``peer_is_switch`` is False when the neighbour is a host (a back-to-back cable, LLDP from a
    server), None when the source cannot tell; only switches become tiers.
    """

    nic: str  #: ``mlx5_0`` (InfiniBand) or the netdev (``ens108np0``) for LLDP
    port: int | None  #: the HCA port number (InfiniBand), None for a netdev
    source: str
    state: str | None = None  #: ACTIVE, DOWN ... as the host sees its own port
    switch_id: str | None = None
    switch_name: str | None = None
    switch_port: str | None = None  #: ``8`` (IB port number) or ``Ethernet184`` (LLDP port)
    peer_is_switch: bool | None = True
    uplinks: tuple[str, ...] = ()  #: ids of the switches one tier above this one, where seen


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class FabricTier:
    """One level of the network above the node: tier 0 is the leaf / ToR / local block.

    ``id`` is the group's stable identity (a switch GUID, a hash of a set of switches, a cloud
    block id); nodes with the same ``id`` at a tier are under the same switch (or switch group)
    there. ``name`` is for people; ``members`` lists the switch ids the group stands for.
    """

    level: int
    id: str
    name: str | None = None
    members: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class NetworkObservation:
    """What one fabric source says about the node's place: its NIC neighbours and its tiers."""

    source: str
    neighbours: tuple[SwitchPort, ...] = ()
    tiers: tuple[FabricTier, ...] = ()  #: nearest first; empty when the source cannot tell
