"""Multi-node NVLink domain membership as ``nvidia-smi -q`` prints it (the ``Fabric`` section).

The agent reads the same facts from NVML (``nvmlDeviceGetGpuFabricInfoV``, see the NVML source);
this parser of what users paste has no production caller and is kept beside the tests that hold
NVML's reading to the corpus's pastes. A GPU is in an NVLink
domain only when the fabric probe completed *successfully* with a real cluster UUID: ``State:
Completed`` with ``Status: Insufficient Resources`` and an all-zero UUID is no domain. Health is
reported as the driver says it (``Unhealthy`` is kept, never dropped).
"""

from __future__ import annotations

import dataclasses
import re

from nodetopo.errors import ParseError
from nodetopo.model import FabricInfo

NAME = "nvidia-smi fabric"

_KEY = re.compile(r"(?P<indent>\s*)(?P<key>[A-Za-z][A-Za-z ]{0,40}?)\s*:\s*(?P<value>.*)")
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SmiFabric:
    state: str | None
    status: str | None
    clique_id: int | None
    cluster_uuid: str | None
    health_summary: str | None = None
    bandwidth: str | None = None

    def info(self) -> FabricInfo | None:
        """The NVML-shaped fact, None unless the probe completed successfully in a real domain."""
        if (self.state or "").lower() != "completed" or (self.status or "").lower() != "success":
            return None
        if self.cluster_uuid is None or self.clique_id is None or self.cluster_uuid.strip("0-") == "":
            return None
        return FabricInfo(
            cluster_uuid=self.cluster_uuid,
            clique_id=self.clique_id,
            state="COMPLETED",
            health=self.health_summary.upper() if self.health_summary else None,
        )


def parse_nvidia_smi_fabric(text: str, path: str = "nvidia-smi -q") -> tuple[SmiFabric, ...]:
    """Every ``Fabric`` section of ``nvidia-smi -q`` output (one per GPU), in order.

    Indentation varies (nvidia-smi indents 4/8, pasted copies re-indent); a section is the keys
    indented deeper than its ``Fabric`` line. grep's ``--`` separators are skipped.
    """
    sections: list[dict[str, str]] = []
    indent: int | None = None
    sub: str = ""
    for raw in text.split("\n"):
        if not raw.strip() or raw.strip() == "--":
            continue
        depth = len(raw) - len(raw.lstrip())
        if raw.strip() == "Fabric":
            sections.append({})
            indent, sub = depth, ""
            continue
        if indent is None or depth <= indent:
            indent = None
            continue
        match = _KEY.fullmatch(raw.rstrip())
        if match is None:
            sub = raw.strip()  # a sub-heading such as "Health"
            continue
        key = f"{sub}.{match['key']}" if sub and depth > indent + 4 else match["key"]
        sections[-1].setdefault(key, match["value"].strip())
    result: list[SmiFabric] = []
    for fields in sections:
        clique = fields.get("CliqueId")
        if clique is not None and not clique.isdigit():
            raise ParseError(NAME, path, f"CliqueId {clique!r} is not a number")
        uuid = fields.get("ClusterUUID")
        if uuid is not None and _UUID.fullmatch(uuid) is None:
            raise ParseError(NAME, path, f"ClusterUUID {uuid!r} is not a UUID")
        result.append(
            SmiFabric(
                state=fields.get("State"),
                status=fields.get("Status"),
                clique_id=int(clique) if clique is not None else None,
                cluster_uuid=uuid,
                health_summary=fields.get("Health.Summary"),
                bandwidth=fields.get("Health.Bandwidth"),
            )
        )
    return tuple(result)
