"""nodetopo's kube-scheduler extender: topology-aware filtering and scoring of GPU pods.

* ``request``: a pod's needs (GPU count + ``nodetopo.io/`` annotations) as a ``PodRequest``.
* ``fit``: pure placement over a node's ``NodeShape`` (choice of GPUs, feasibility, 0-10 score);
  its docstring is the scoring reference.
* ``cache``: ``ClusterState`` fed by reflectors (paged list + resourceVersion watch) of NodeTopology
  objects and bound GPU pods.
* ``server``: the HTTP protocol (``/filter``, ``/prioritize``, ``/healthz``, ``/readyz``).
* ``cli``: ``nodetopo extender``.
"""
