"""nodetopo's kube-scheduler extender: topology-aware filtering and scoring of GPU pods.

What a pod asks and whether a node can give it (``PodRequest``, ``NodeShape``, the score) is
``nodetopo.placement``, shared with admission and the probe. Here:

* ``cache``: ``ClusterState`` fed by reflectors (paged list + resourceVersion watch) of NodeTopology
  objects and bound GPU pods.
* ``claims``: a claim-based pod's ResourceClaims, read by name (one cached GET each), as its request.
* ``server``: the HTTP protocol (``/filter``, ``/prioritize``, ``/healthz``, ``/readyz``).
* ``cli``: ``nodetopo extender``.
"""
