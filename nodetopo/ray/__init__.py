"""nodetopo's Ray bridge: a node's NodeTopology as Ray node labels and custom resources.

* ``labels``: pure projections of a NodeTopology object (``ray_labels``, ``ray_resources``).
* ``cli``: ``nodetopo ray`` (from the API by node name, a NodeTopology file, or a capture bundle).
"""
