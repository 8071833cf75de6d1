"""The topology of one node: the sources' facts joined into one graph, and what is derived from it.

``graph`` joins every source's facts on PCI addresses, GPU indexes and UUIDs; ``derive`` computes
NVLink islands, GPU-NIC classes, preferred GPU sets and the frozen ``Topology``; ``network`` places
the node in the fabric; ``discover`` runs the sources and the derivation as one scan.
"""
