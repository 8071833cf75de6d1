"""The ``nvidia-smi`` source: its text outputs ``topo -m``, ``-L``, ``-q -x`` and ``nvlink -s``.

One module per output, each a pure parser, plus the source:

* ``topo``: ``parse_topo_matrix`` (``nvidia-smi topo -m``: GPUs, NICs, NVLink bundles, PCIe classes,
  CPU/NUMA affinity; a bundle holding only that output must still yield a topology);
* ``listing``: ``parse_smi_list`` (``nvidia-smi -L``: GPUs and their MIG devices);
* ``nvlink``: ``parse_nvlink_status`` (``nvidia-smi nvlink -s``) and ``parse_nvlink_errors``
  (``nvidia-smi nvlink -e``: each link's error counters, a link reading);
* ``query``: ``parse_smi_query_xml`` (``nvidia-smi -q -x``: driver version, GPUs) and
  ``parse_smi_query_links`` (each GPU's view of its PCIe link, a link reading);
* ``source``: the commands (``COMMANDS``), ``read_facts`` and ``collect``.

Each pure ``parse_*`` raises ``ParseError``. Their ``_read_*`` twins also return the *problems* seen in
an otherwise valid output (``ERR!`` cells, ``[Unknown Error]`` values, a GPU whose handle could not be
read); ``collect()`` turns those into a ``Degraded`` condition and keeps the rest.
"""

from __future__ import annotations

from nodetopo.sources.nvidia_smi._text import NAME
from nodetopo.sources.nvidia_smi.listing import LIST_PATH, parse_smi_list
from nodetopo.sources.nvidia_smi.nvlink import (
    NVLINK_ERRORS_PATH,
    NVLINK_PATH,
    parse_nvlink_errors,
    parse_nvlink_status,
)
from nodetopo.sources.nvidia_smi.query import QUERY_XML_PATH, parse_smi_query_links, parse_smi_query_xml
from nodetopo.sources.nvidia_smi.source import (
    COMMANDS,
    LIST_ARGV,
    LIST_COMMAND,
    NVLINK_ARGV,
    NVLINK_COMMAND,
    NVLINK_ERRORS_ARGV,
    NVLINK_ERRORS_COMMAND,
    QUERY_XML_ARGV,
    QUERY_XML_COMMAND,
    TOPO_ARGV,
    TOPO_COMMAND,
    collect,
    read_facts,
)
from nodetopo.sources.nvidia_smi.topo import TOPO_PATH, parse_topo_matrix

__all__ = [
    "COMMANDS",
    "LIST_ARGV",
    "LIST_COMMAND",
    "LIST_PATH",
    "NAME",
    "NVLINK_ARGV",
    "NVLINK_COMMAND",
    "NVLINK_ERRORS_ARGV",
    "NVLINK_ERRORS_COMMAND",
    "NVLINK_ERRORS_PATH",
    "NVLINK_PATH",
    "QUERY_XML_ARGV",
    "QUERY_XML_COMMAND",
    "QUERY_XML_PATH",
    "TOPO_ARGV",
    "TOPO_COMMAND",
    "TOPO_PATH",
    "collect",
    "parse_nvlink_errors",
    "parse_nvlink_status",
    "parse_smi_list",
    "parse_smi_query_links",
    "parse_smi_query_xml",
    "parse_topo_matrix",
    "read_facts",
]
