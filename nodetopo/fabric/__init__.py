"""The InfiniBand fabric beyond one node: the infiniband-diags parsers and the fabric as a tree.

Pure (text → frozen values, values → values), shared by ``nodetopo fabric`` (which sweeps the fabric
once and writes the fabric map) and the ``fabric.ib`` source of every agent (which reads the map, or
asks the switch at each port's far end, and joins the answer with the node's own ports):

* ``ibdiags``: ``parse_ibnetdiscover`` (and ``-p``), ``parse_iblinkinfo``, GUIDs and node descriptions;
* ``tree``: switch tiers (``classify``, ``tier_groups``), the fabric map (``fabric_map``,
  ``parse_fabric_map``) and a host's place in the fabric (``position_from_map``,
  ``position_from_linkinfo``).
"""

from __future__ import annotations

from nodetopo.fabric.ibdiags import (
    NAME,
    IbFabric,
    IbLinkEnd,
    IbNode,
    LinkInfoPort,
    ca_host,
    guid_text,
    parse_guid,
    parse_iblinkinfo,
    parse_ibnetdiscover,
    parse_ibnetdiscover_ports,
    switch_name,
)
from nodetopo.fabric.tree import (
    MAP_KIND,
    MAP_LIMIT,
    MAP_VERSION,
    Classified,
    FabricMap,
    HostPort,
    classify,
    fabric_map,
    group_id,
    leaf_tiers,
    neighbour,
    parse_fabric_map,
    position_from_linkinfo,
    position_from_map,
    tier_groups,
)

__all__ = [
    "MAP_KIND",
    "MAP_LIMIT",
    "MAP_VERSION",
    "NAME",
    "Classified",
    "FabricMap",
    "HostPort",
    "IbFabric",
    "IbLinkEnd",
    "IbNode",
    "LinkInfoPort",
    "ca_host",
    "classify",
    "fabric_map",
    "group_id",
    "guid_text",
    "leaf_tiers",
    "neighbour",
    "parse_fabric_map",
    "parse_guid",
    "parse_iblinkinfo",
    "parse_ibnetdiscover",
    "parse_ibnetdiscover_ports",
    "position_from_linkinfo",
    "position_from_map",
    "switch_name",
    "tier_groups",
]
