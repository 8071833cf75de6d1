"""Views of a topology beyond the table: PCI device names, the GPU×GPU matrix, the Graphviz picture.

Each module is imported only by the output that needs it, so ``nodetopo discover`` pays for none
of them by default.
"""
