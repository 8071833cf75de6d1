"""Edge health: whether each link of the topology works at the speed the topology implies.

* ``policy``: the thresholds and switches, with their documented defaults, and the file that sets them;
* ``rules``: the edges of a node and the rules that judge each one (the one place they are written);
* ``fabric``: what a GPU's NVLink fabric health summary and mask name as problems (for ``rules``);
* ``tracker``: counter rates across scans (and across an agent restart) and the debounce that keeps
  published health from flapping; with ``HealthPolicy.one_shot()`` it is the judgement of one scan
  alone (``nodetopo discover``, a capture bundle).

Pure over the model: the readings come from the sources (``Facts.health``), the report goes into the
``Topology`` (``Topology.health``) and from there into the NodeTopology.
"""

from __future__ import annotations

from nodetopo.health.policy import DEFAULT_POLICY, HealthPolicy, PolicyError, load_policy
from nodetopo.health.rules import EdgeReading, Finding, edge_readings
from nodetopo.health.tracker import HealthTracker

__all__ = [
    "DEFAULT_POLICY",
    "EdgeReading",
    "Finding",
    "HealthPolicy",
    "HealthTracker",
    "PolicyError",
    "edge_readings",
    "load_policy",
]
