"""The pod-request language every consumer speaks: what a pod asks of a node's topology, and whether
a node can give it.

* ``request``: the ``nodetopo.io/`` annotation grammar and a pod's GPU count as a ``PodRequest``
  (the extender, the admission rules and the probe read pods through it).
* ``claims``: what a DRA ResourceClaim or ResourceClaimTemplate asks (its ``gpu.nvidia.com`` count and
  its ``nodetopo.io/`` annotations) as a ``PodRequest``, and a claim-based pod's whole request.
* ``fit``: pure placement over a node's ``NodeShape`` (read from its NodeTopology through
  ``nodetopo.resource.reader``): the choice of GPUs, feasibility, the 0-10 score; its docstring is
  the scoring reference. The extender places with it, the summary controller sums it.
"""
