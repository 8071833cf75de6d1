"""What the node's kubelet says: which pod holds each device, and that answer joined to the GPUs.

* ``podresources``: the kubelet's PodResources API (a gRPC client over its Unix socket; pure
  ``parse_*`` of the protobuf answers, ``read_allocation`` / ``ask_kubelet`` the thin readers);
* ``allocation``: ``gpu_allocation`` / ``allocation_of``, which pod holds each GPU of a ``Topology``
  (pure), or an allocation that is *unknown* when the kubelet could not be asked.

Not a discovery source: the agent asks the kubelet between scans (``--pod-resources-socket``), and
``nodetopo discover`` once when asked to.
"""
