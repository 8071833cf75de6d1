"""Publishing: the NodeTopology resource and nodetopo's Node labels (or an NFD NodeFeature).

Speaks to the API server through a session of ``nodetopo.kube`` (the one client; API failures are
translated into ``nodetopo.errors`` there), or, for ``agent --dry-run``, through a session that
prints (``publish.dryrun``).

* ``Publisher``: long-lived, for the agent: the one publish chain (``NodeTopologyPublisher``:
  stored facts kept on ``Missing``, unchanged objects skipped without any request, the stored
  object compared on the first publish; label sets applied only when they change; a label key
  goes after 2 consecutive clean scans).
* ``run_publish``: one shot, for ``nodetopo publish``. With no history to count scans, a one-shot
  run treats its labels as one clean, final scan: keys it lacks are removed at once, except
  ``uncertain_keys`` / keys under ``uncertain_prefixes`` (sources that failed in the bundle:
  ``nodetopo.resource.labels.uncertain_keys(topology)``), which keep their value.

Importing the package loads none of this: a command that only reads through ``nodetopo.kube``
(``nodetopo probe`` reads its NodeTopology and posts an Event, in every GPU pod) does not pay for
every publisher. ``Publisher``, ``PublishOutcome`` and ``run_publish`` live in
``nodetopo.publish.publisher`` and are loaded from there on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nodetopo.publish.publisher import Publisher, PublishOutcome, run_publish

__all__ = ["PublishOutcome", "Publisher", "run_publish"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("nodetopo.publish.publisher"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
