"""nodetopo: a GPU node's topology as facts the control plane can read and a workload can verify."""

__version__ = "0.1.0"
