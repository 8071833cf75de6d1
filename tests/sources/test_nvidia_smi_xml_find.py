"""``nvidia-smi -q -x``: the GPU fields below a child element are found with plain-tag finds, exactly
where ``Element.find("<parent>/<tag>")`` (ElementPath) finds them."""

from __future__ import annotations

from pathlib import Path
from xml.etree import ElementTree

import pytest
from helpers import BUNDLES

from nodetopo.model import PciAddress
from nodetopo.sources import nvidia_smi
from nodetopo.sources.nvidia_smi import query

PATHS = (
    ("pci", "pci_bus_id"),
    ("pci", "numa_node"),
    ("mig_mode", "current_mig"),
    ("mig_mode", "pending_mig"),
    ("fb_memory_usage", "total"),
)

#: odd layouts: a field in a later parent element, parents without it, none at all, empty ones
ODD = """<nvidia_smi_log><driver_version>550.54</driver_version>
<gpu id="00000000:07:00.0">
  <uuid>GPU-1</uuid>
  <pci><pci_device_id>20B010DE</pci_device_id></pci>
  <pci><numa_node>1</numa_node></pci>
  <pci><pci_bus_id>00000000:0A:00.0</pci_bus_id><numa_node>3</numa_node></pci>
  <mig_mode/>
  <mig_mode><pending_mig>Enabled</pending_mig></mig_mode>
  <mig_mode><current_mig>Disabled</current_mig><pending_mig>Disabled</pending_mig></mig_mode>
  <fb_memory_usage><used>1 MiB</used></fb_memory_usage>
  <fb_memory_usage><total>81920 MiB</total></fb_memory_usage>
</gpu>
<gpu id="00000000:0B:00.0"><uuid>GPU-2</uuid><pci/></gpu>
</nvidia_smi_log>
"""


def _documents(corpus: Path) -> list[str]:
    texts = [path.read_text() for path in sorted(BUNDLES.glob("*/cmd/nvidia-smi-q.xml"))]
    texts += [path.read_text() for path in sorted((corpus / "smi-q").glob("*.xml"))]
    return [*texts, ODD]


@pytest.mark.corpus
def test_finds_below_a_child_what_an_element_path_finds(corpus: Path) -> None:
    checked = 0
    for text in _documents(corpus):
        try:
            root = ElementTree.fromstring(text)
        except ElementTree.ParseError:
            continue  # the answers of a failing nvidia-smi
        for gpu in root.iter("gpu"):
            for parent, tag in PATHS:
                assert query._find_below(gpu.findall(parent), tag) is gpu.find(f"{parent}/{tag}")
                checked += 1
    assert checked >= 5 * 20


def test_fields_in_a_later_parent_element_are_read() -> None:
    """The first parent element without the field does not hide it in a later one."""
    driver, gpus = nvidia_smi.parse_smi_query_xml(ODD)
    assert driver == "550.54"
    first = next(gpu for gpu in gpus if gpu.uuid == "GPU-1")
    assert first.address == PciAddress.parse("0000:0a:00.0")
    assert (first.numa_node, first.mig_current, first.mig_pending) == (1, False, True)
    assert first.memory_bytes == 81920 * 1024 * 1024
    second = next(gpu for gpu in gpus if gpu.uuid == "GPU-2")
    assert second.address == PciAddress.parse("0000:0b:00.0")
    assert (second.numa_node, second.mig_current, second.memory_bytes) == (None, None, None)
