"""The NodeTopology contract: everything that says what the resource is, written once.

* ``identity``: the API group, version, kind, plural, short name; the ``nodetopo.io/`` prefix and the
  one label validator.
* ``limits``: the schema's bounds (``MAX_*``).
* ``conditions``: the Ready/Consistent/per-source conditions policy.
* ``body``: ``Topology`` → the NodeTopology body (``to_nodetopology``).
* ``reader``: a published NodeTopology → what it says (the one reader every consumer projects from).
* ``labels``: the ``nodetopo.io/`` node labels, projected from the body.
"""
