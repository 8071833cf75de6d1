"""The thresholds of edge health, with their defaults, and the file that overrides them.

``HealthPolicy`` is every number and switch the rules (``nodetopo.health.rules``) and the debounce
(``nodetopo.health.tracker``) use, with its defaults (``DEFAULT_PER_HOUR``, ``DEFAULT_RULES`` and the
fields below). ``load_policy`` reads a YAML (or JSON) file of overrides, for example::

    scans_to_degrade: 3          # consecutive degraded scans before an edge is published degraded
    scans_to_clear: 3            # consecutive clean scans before it is published healthy again
    window_seconds: 900          # counter rates are judged over this much history
    baseline_refresh_seconds: 3600
    per_hour:                    # a counter rising faster than this (per hour) degrades its edge
      port.link_downed: 0        # 0: any rise
      nvlink.crc: 100
    rules:
      pcie_speed: false          # do not judge PCIe speed (widths are still judged)

An unknown key, a negative number or a wrong type is a ``PolicyError`` naming the key.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nodetopo.errors import NodetopoError

#: The counters judged by rate, ``<edge kind>.<counter>``, and the most each may rise per hour on a
#: healthy link (0: any rise degrades the edge). A counter only counts events since boot (or since
#: its driver loaded, or since someone reset it): its rate is what is judged, never its value.
DEFAULT_PER_HOUR: dict[str, float] = {
    # PCIe: AER totals of the link's two ends (errors may be counted at the link partner), and the
    # GPU's replay counter (NVML / nvidia-smi -q)
    "pcie.aer_fatal": 0,
    "pcie.aer_nonfatal": 0,
    "pcie.aer_correctable": 60,
    "pcie.replays": 100,
    # NVLink: the GPU's links summed (NVML error counters, or nvidia-smi nvlink -e)
    "nvlink.replay": 100,
    "nvlink.recovery": 0,
    "nvlink.crc": 100,
    # RDMA ports (ports/N/counters) and the port's netdev
    "port.link_downed": 0,
    "port.link_error_recovery": 0,
    "port.symbol_error": 10,
    "port.port_rcv_errors": 10,
    "port.local_link_integrity_errors": 0,
    "port.excessive_buffer_overrun_errors": 0,
    "port.port_xmit_discards": 1000,
    "port.carrier_changes": 0,
}

#: The instant rules (what one scan shows), each on by default; see ``nodetopo.health.rules``.
DEFAULT_RULES: dict[str, bool] = {
    "pcie_width": True,  #: a PCIe link narrower than both its ends support
    "pcie_speed": True,  #: slower than both ends support (not on GPUs: idle GPUs slow down)
    "pcie_generation": True,  #: a GPU whose maximum generation is below what both ends support
    "nvlink_links": True,  #: fewer active NVLinks than the GPU's peers of the same model
    "nvlink_speed": True,  #: an active NVLink slower than the GPU's other links
    "port_rate": True,  #: an active port below the rate of its HCA's other ports or its rails
    "port_down": True,  #: a GPU's rail down while the node's other rails are active
    "fabric": True,  #: the GPU's NVLink fabric not healthy (GB200/GB300 health summary and mask)
}


class PolicyError(NodetopoError):
    """A health policy file that cannot be used; the message names the key."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class HealthPolicy:
    scans_to_degrade: int = 3
    scans_to_clear: int = 3
    window_seconds: float = 900.0
    baseline_refresh_seconds: float = 3600.0
    per_hour: Mapping[str, float] = dataclasses.field(default_factory=lambda: dict(DEFAULT_PER_HOUR))
    rules: Mapping[str, bool] = dataclasses.field(default_factory=lambda: dict(DEFAULT_RULES))

    def rule(self, name: str) -> bool:
        return bool(self.rules.get(name, False))

    def threshold(self, kind: str, counter: str) -> float | None:
        """The per-hour threshold of ``<kind>.<counter>``; None: that counter is not judged."""
        return self.per_hour.get(f"{kind}.{counter}")

    def one_shot(self) -> HealthPolicy:
        """The same thresholds for one judgement (``nodetopo discover``): nothing to debounce."""
        return dataclasses.replace(self, scans_to_degrade=1, scans_to_clear=1)


DEFAULT_POLICY = HealthPolicy()

_SCALARS = {
    "scans_to_degrade": (int, 1, 1000),
    "scans_to_clear": (int, 1, 1000),
    "window_seconds": (float, 1.0, 7 * 86400.0),
    "baseline_refresh_seconds": (float, 0.0, 30 * 86400.0),
}


def policy_from_mapping(data: Mapping[str, Any], *, where: str = "health policy") -> HealthPolicy:
    """A ``HealthPolicy``: the defaults with ``data``'s overrides (see the module docstring)."""
    if not isinstance(data, Mapping):
        raise PolicyError(f"{where}: expected a mapping of settings, got {type(data).__name__}")
    values: dict[str, Any] = {}
    for key, raw in data.items():
        if key in _SCALARS:
            kind, low, high = _SCALARS[key]
            if isinstance(raw, bool) or not isinstance(raw, int | float) or (kind is int and raw != int(raw)):
                raise PolicyError(f"{where}: {key}: expected a number, got {raw!r}")
            if not (math.isfinite(raw) and low <= raw <= high):
                raise PolicyError(f"{where}: {key}: {raw!r} is outside {low:g}..{high:g}")
            values[key] = kind(raw)
        elif key == "per_hour":
            values[key] = {**DEFAULT_PER_HOUR, **_per_hour(raw, where)}
        elif key == "rules":
            values[key] = {**DEFAULT_RULES, **_rules(raw, where)}
        else:
            allowed = ", ".join([*_SCALARS, "per_hour", "rules"])
            raise PolicyError(f"{where}: unknown key {key!r} (allowed: {allowed})")
    return HealthPolicy(**values)


def _per_hour(raw: Any, where: str) -> dict[str, float]:
    if not isinstance(raw, Mapping):
        raise PolicyError(f"{where}: per_hour: expected a mapping of counter: number")
    out: dict[str, float] = {}
    for name, value in raw.items():
        if name not in DEFAULT_PER_HOUR:
            raise PolicyError(
                f"{where}: per_hour: unknown counter {name!r} (known: {', '.join(DEFAULT_PER_HOUR)})"
            )
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value < 0
        ):
            raise PolicyError(f"{where}: per_hour: {name}: expected a number of at least 0, got {value!r}")
        out[name] = float(value)
    return out


def _rules(raw: Any, where: str) -> dict[str, bool]:
    if not isinstance(raw, Mapping):
        raise PolicyError(f"{where}: rules: expected a mapping of rule: true|false")
    out: dict[str, bool] = {}
    for name, value in raw.items():
        if name not in DEFAULT_RULES:
            raise PolicyError(f"{where}: rules: unknown rule {name!r} (known: {', '.join(DEFAULT_RULES)})")
        if not isinstance(value, bool):
            raise PolicyError(f"{where}: rules: {name}: expected true or false, got {value!r}")
        out[name] = value
    return out


def load_policy(path: str | Path | None) -> HealthPolicy:
    """The policy of a YAML or JSON file of overrides; the defaults when ``path`` is None."""
    if path is None:
        return DEFAULT_POLICY
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise PolicyError(f"{path}: cannot read the health policy: {e.strerror or e}") from None
    try:
        import yaml

        data = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as e:
        try:
            data = json.loads(text)
        except ValueError:
            raise PolicyError(f"{path}: not YAML: {e}") from None
    return policy_from_mapping(data or {}, where=str(path))
