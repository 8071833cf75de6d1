"""``kubectl ntopo``: the NodeTopology objects of a cluster, rendered as ``nodetopo discover`` renders a host.

``nodetopo.kubectl.cli:main`` is the ``kubectl-ntopo`` console script (kubectl finds it on PATH as the
``ntopo`` plugin); ``nodetopo.kubectl.fleet`` is the pure fleet view behind ``kubectl ntopo nodes``.
"""
