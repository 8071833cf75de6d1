"""What a GPU model name implies: its NVLink generation, its PCIe generation, NVLS support.

NodeTopology publishes the model string nvidia-smi prints (``NVIDIA H100 80GB HBM3``,
``NVIDIA A100-SXM4-80GB``, ``NVIDIA GB300``) and, per GPU pair and island, the NVLink count; it does
not publish link generations or PCIe link widths. This table stands in for those facts until the
edge-health facts (observed width × rate, active NVLink lanes) publish them; an observed value
always replaces what the table says (``nodetopo.expect.graph.ObservedLink``).
"""

from __future__ import annotations

import dataclasses
import functools
import re

from nodetopo.expect.constants import NVLINK_BRIDGE_GA102_GBS_PER_LINK, NVLINK_GBS_PER_LINK


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class GpuSpec:
    family: str  #: ``Hopper``, ``Blackwell`` ...
    nvlink_generation: int | None
    nvlink_gbs_per_link: float | None  #: per direction
    pcie_generation: int
    #: the GPU's host link is NVLink-C2C to a Grace CPU (GH200/GB200/GB300), not PCIe
    c2c: bool = False
    #: NVLink SHARP on an NVSwitch fabric (third-generation NVSwitch and later: Hopper, Blackwell)
    nvls: bool = False
    #: PCIe peer-to-peer between boards (off in the driver for GeForce boards)
    p2p: bool = True
    links: int | None = None  #: NVLinks per GPU on its SXM board


def _nvlink(
    family: str,
    generation: int,
    *,
    pcie: int,
    links: int | None = None,
    c2c: bool = False,
    nvls: bool = False,
    gbs_per_link: float | None = None,
) -> GpuSpec:
    """A GPU with NVLink of ``generation``: a link carries that generation's rate unless ``gbs_per_link``
    says otherwise (the GA102 bridge)."""
    return GpuSpec(
        family=family,
        nvlink_generation=generation,
        nvlink_gbs_per_link=NVLINK_GBS_PER_LINK[generation] if gbs_per_link is None else gbs_per_link,
        pcie_generation=pcie,
        c2c=c2c,
        nvls=nvls,
        links=links,
    )


def _pcie_only(family: str, *, pcie: int, p2p: bool = True) -> GpuSpec:
    """A GPU without NVLink."""
    return GpuSpec(
        family=family, nvlink_generation=None, nvlink_gbs_per_link=None, pcie_generation=pcie, p2p=p2p
    )


#: (pattern on the model string, spec), first match wins: the more specific names first
_SPECS: tuple[tuple[re.Pattern[str], GpuSpec], ...] = (
    (re.compile(r"\bGB300\b"), _nvlink("Blackwell", 5, pcie=6, links=18, c2c=True, nvls=True)),
    (re.compile(r"\bB300\b"), _nvlink("Blackwell", 5, pcie=6, links=18, nvls=True)),
    (re.compile(r"\bGB200\b"), _nvlink("Blackwell", 5, pcie=5, links=18, c2c=True, nvls=True)),
    (re.compile(r"\bB200\b|\bB100\b"), _nvlink("Blackwell", 5, pcie=5, links=18, nvls=True)),
    (re.compile(r"\bGH200\b"), _nvlink("Hopper", 4, pcie=5, links=18, c2c=True, nvls=True)),
    (re.compile(r"\bH100 (?:PCIe|NVL)\b"), _nvlink("Hopper", 4, pcie=5, links=12)),
    (re.compile(r"\bH(?:100|200|800|20)\b"), _nvlink("Hopper", 4, pcie=5, links=18, nvls=True)),
    (re.compile(r"\bA(?:100|800)\b.*PCIE", re.I), _nvlink("Ampere", 3, pcie=4, links=12)),
    (re.compile(r"\bA(?:100|800|30)\b"), _nvlink("Ampere", 3, pcie=4, links=12)),
    (
        re.compile(r"\bA40\b|RTX A6000|RTX A5000|RTX 3090"),
        _nvlink("Ampere", 3, pcie=4, links=4, gbs_per_link=NVLINK_BRIDGE_GA102_GBS_PER_LINK),
    ),
    (re.compile(r"\bV100\b"), _nvlink("Volta", 2, pcie=3, links=6)),
    (re.compile(r"\bP100\b"), _nvlink("Pascal", 1, pcie=3, links=4)),
    (re.compile(r"GeForce RTX 50\d0|RTX 5090"), _pcie_only("Blackwell", pcie=5, p2p=False)),
    (re.compile(r"RTX PRO 6000|RTX PRO"), _pcie_only("Blackwell", pcie=5)),
    (re.compile(r"GeForce RTX 40\d0|RTX 4090"), _pcie_only("Ada", pcie=4, p2p=False)),
    (re.compile(r"\bL40S?\b|\bL4\b|\bL20\b|RTX 6000 Ada|RTX [0-9]000 Ada"), _pcie_only("Ada", pcie=4)),
    (re.compile(r"\bA10G?\b|\bA16\b|\bA2\b"), _pcie_only("Ampere", pcie=4)),
    (re.compile(r"\bT4\b|Quadro RTX|TITAN RTX|RTX 20[0-9]0"), _nvlink("Turing", 2, pcie=3)),
)

#: for a model the table does not know: the commonest data-centre case, said in the assumptions
UNKNOWN = GpuSpec(
    family="unknown", nvlink_generation=None, nvlink_gbs_per_link=NVLINK_GBS_PER_LINK[3], pcie_generation=4
)


@functools.lru_cache(maxsize=512)
def gpu_spec(model: str | None) -> GpuSpec | None:
    """The spec of a GPU model as nvidia-smi names it; None when the table does not know the model."""
    if not model:
        return None
    for pattern, spec in _SPECS:
        if pattern.search(model):
            # GeForce drivers disable PCIe peer-to-peer between boards
            return dataclasses.replace(spec, p2p=False) if "GeForce" in model and spec.p2p else spec
    return None


def nic_pcie_generation(rate_gbps: float) -> int:
    """The PCIe generation of the slot an RDMA NIC of this rate needs at x16 (ConnectX-6 HDR 200 Gb/s:
    Gen4; ConnectX-7 NDR 400 Gb/s: Gen5; ConnectX-8 800 Gb/s: Gen6)."""
    if rate_gbps > 400:
        return 6
    if rate_gbps > 200:
        return 5
    if rate_gbps > 100:
        return 4
    return 3
