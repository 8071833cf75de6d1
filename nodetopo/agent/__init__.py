"""The long-running agent (``nodetopo agent``): discover, publish on change, serve health and metrics.

* ``config``: ``AgentConfig`` and the one precedence rule (flags > env > file > defaults).
* ``loop``: ``Agent`` (the loop: start delay, jittered interval, debounced udev events, backoff),
  ``Debouncer``.
* ``staleness``: ``StaleKeeper`` (a failed source keeps its last good facts, marked Stale).
* ``publisher``: ``AgentPublisher`` (the seam), ``ApiPublisher`` (the cluster), ``DryRunPublisher``.
* ``health`` / ``metrics``: the HTTP endpoint and the Prometheus collector.
* ``udev``: the pyudev hot-plug event source.
* ``cli``: the ``agent`` subcommand.
"""

from __future__ import annotations
