"""Which node label keys a Kueue or KAI ``Topology``'s levels name: nodetopo's own, or the keys GPU
feature discovery and topograph already put on the nodes of a cluster that runs them.

The levels are decided from nodetopo's facts (how many fabric tiers the fleet shows, where the NVLink
domain nests); a key set only names them. ``nodetopo`` names nodetopo's labels; ``gfd-topograph``
names ``nvidia.com/gpu.clique`` (GFD) and topograph's ``fabric.topograph.run/tier-N`` (v1.0 on);
``gfd-topograph-v0`` topograph's keys before v1.0 (``network.topology.nvidia.com/leaf|spine|core``).
docs/integrations.md's table says which key means which.
"""

from __future__ import annotations

import argparse
import dataclasses
import re

from nodetopo.resource.identity import PREFIX as LABEL_PREFIX
from nodetopo.topology.interop import GFD_CLIQUE

HOSTNAME_LABEL = "kubernetes.io/hostname"
NVLINK_LABEL = LABEL_PREFIX + "nvlink.domain"
TOPOGRAPH_TIER_PREFIX = "fabric.topograph.run/tier-"
TOPOGRAPH_V0_TIERS = (
    "network.topology.nvidia.com/leaf",
    "network.topology.nvidia.com/spine",
    "network.topology.nvidia.com/core",
)


def tier_label(level: int) -> str:
    return f"{LABEL_PREFIX}fabric.tier-{level}"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class KeySet:
    """The label key of each level: fabric tier N is ``tier_prefix + N``, or ``tier_keys[N]`` (then
    only as many tiers as it lists have a key); the NVLink domain is ``nvlink``."""

    name: str
    nvlink: str
    tier_prefix: str | None = None
    tier_keys: tuple[str, ...] = ()

    def tier(self, level: int) -> str | None:
        if self.tier_keys or self.tier_prefix is None:
            return self.tier_keys[level] if level < len(self.tier_keys) else None
        return f"{self.tier_prefix}{level}"

    def with_keys(self, tiers: tuple[str, ...] = (), nvlink: str | None = None) -> KeySet:
        """This set with the tier keys (nearest first) and the NVLink key replaced where given."""
        return dataclasses.replace(
            self,
            name=self.name if not tiers and nvlink is None else f"{self.name} (renamed)",
            tier_keys=tiers or self.tier_keys,
            tier_prefix=None if tiers else self.tier_prefix,
            nvlink=nvlink or self.nvlink,
        )


NODETOPO = KeySet(name="nodetopo", nvlink=NVLINK_LABEL, tier_prefix=f"{LABEL_PREFIX}fabric.tier-")
KEY_SETS = {
    "nodetopo": NODETOPO,
    "gfd-topograph": KeySet(name="gfd-topograph", nvlink=GFD_CLIQUE, tier_prefix=TOPOGRAPH_TIER_PREFIX),
    "gfd-topograph-v0": KeySet(name="gfd-topograph-v0", nvlink=GFD_CLIQUE, tier_keys=TOPOGRAPH_V0_TIERS),
}

#: a qualified label key (optional DNS-subdomain prefix, a name of at most 63 characters)
_KEY = re.compile(
    r"(?:[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?"
)


def label_key(text: str) -> str:
    """``text`` when it is a node label key a Topology level can name, else a usage error."""
    prefix, _, name = text.rpartition("/")
    if not _KEY.fullmatch(text) or len(name) > 63 or len(prefix) > 253:
        raise argparse.ArgumentTypeError(f"not a label key: {text[:80]!r}")
    if text == HOSTNAME_LABEL:
        raise argparse.ArgumentTypeError(f"{HOSTNAME_LABEL} is always the last level: not a tier key")
    return text
