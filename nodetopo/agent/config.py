"""The agent's settings, and the one rule that says where each comes from.

Precedence, for every setting: **command-line flag > environment variable > config file > default.**

* Config file: YAML mapping (``--config FILE`` or ``NODETOPO_CONFIG``), keys as in ``AgentConfig``
  (``interval_seconds: 120``); dashes are accepted for underscores. An unknown key is an error.
* Environment: ``NODETOPO_`` + the key in upper case (``NODETOPO_INTERVAL_SECONDS=120``).
  ``node_name`` also reads ``NODE_NAME`` (the downward API), after ``NODETOPO_NODE_NAME``.
* Flags: ``--interval-seconds 120`` etc. (see ``nodetopo agent --help``).

``resolve`` is pure: it takes the flags that were given, an environment mapping and the file's
mapping, so tests need no real environment.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from nodetopo.resource.noderesourcetopology import TopologyManager

log = logging.getLogger(__name__)

ENV_PREFIX = "NODETOPO_"


class ConfigError(ValueError):
    """A setting with a value that cannot be used (bad type, out of range, unknown key)."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class AgentConfig:
    """Every setting of ``nodetopo agent``. Durations are seconds."""

    node_name: str = ""
    host_root: str = "/"
    nvml: str = "auto"  #: live NVML: auto (only when host_root is /), on, off
    bundle: str | None = None  #: replay a capture bundle instead of the host (tests, demos)
    kubeconfig: str | None = None  #: default: in-cluster service account
    kube_context: str | None = None  #: the kubeconfig context (default: its current-context)
    command_timeout_seconds: float = 20.0
    interval_seconds: float = 60.0
    jitter: float = 0.1  #: the interval varies by ± this fraction
    start_delay_max_seconds: float = 30.0  #: first discovery after uniform(0, this)
    debounce_seconds: float = 2.0  #: a udev burst ends after this long without an event
    debounce_max_seconds: float = 10.0  #: ... or this long after its first event
    resync_seconds: float = 3600.0  #: at most one forced resync (re-read and compare) per this
    qps: float = 1.0  #: client-side API rate limit
    burst: int = 5
    backoff_initial_seconds: float = 1.0
    backoff_max_seconds: float = 60.0
    once_attempts: int = 5  #: ``--once``: publish attempts before giving up
    listen: str = ":8080"  #: ``[address]:port`` for /healthz, /readyz, /metrics; ``""`` = off
    udev: bool = True
    udev_source: str = "kernel"  #: ``kernel`` (no udevd needed) or ``udev``
    nfd: bool = False  #: publish labels through an NFD NodeFeature instead of the Node
    #: also publish the SIG's NodeResourceTopology (topology.node.k8s.io/v1alpha2) of the node
    noderesourcetopology: bool = False
    #: the kubelet's ``--topology-manager-policy`` / ``--topology-manager-scope`` as the user states
    #: them (the NodeResourceTopology's attributes); None: not stated, not published
    topology_manager_policy: str | None = None
    topology_manager_scope: str | None = None
    #: the kubelet's PodResources socket (which pod holds which GPU); ``""`` = do not ask
    pod_resources_socket: str = "/var/lib/kubelet/pod-resources/kubelet.sock"
    allocation_interval_seconds: float = 5.0  #: ask the kubelet this often between scans
    #: a kubelet that stops answering keeps its last answer published this long (a restart)
    allocation_grace_seconds: float = 60.0
    once: bool = False
    dry_run: bool = False
    log_level: str = "info"
    log_format: str = "text"

    def validate(self) -> AgentConfig:
        if not self.node_name and not self.dry_run:
            raise ConfigError("node_name is required (--node-name, NODE_NAME or the config file)")
        for name, (low, inclusive, high) in NUMERIC_RANGES.items():
            check_range(name, getattr(self, name), low, inclusive, high)
        if self.backoff_max_seconds < self.backoff_initial_seconds:
            raise ConfigError("backoff_max_seconds must be >= backoff_initial_seconds")
        if self.log_format not in ("text", "json"):
            raise ConfigError(f"log_format must be text or json, not {self.log_format!r}")
        if self.log_level not in ("debug", "info", "warning", "error"):
            raise ConfigError(f"log_level must be debug, info, warning or error, not {self.log_level!r}")
        if self.nvml not in ("auto", "on", "off"):
            raise ConfigError(f"nvml must be auto, on or off, not {self.nvml!r}")
        if self.udev_source not in ("kernel", "udev"):
            raise ConfigError(f"udev_source must be kernel or udev, not {self.udev_source!r}")
        listen_address(self.listen)
        self.topology_manager()
        return self

    def topology_manager(self) -> TopologyManager | None:
        """The NodeResourceTopology option: the topology manager as stated, or None when off."""
        try:
            manager = TopologyManager(policy=self.topology_manager_policy, scope=self.topology_manager_scope)
        except ValueError as e:
            raise ConfigError(str(e)) from e
        return manager if self.noderesourcetopology else None


#: Every numeric setting: (lowest, lowest allowed itself?, highest). Finite always: ``nan`` and
#: ``inf`` are refused (``nan`` compares false with everything, so it slipped through ``<= 0`` checks
#: and made the loop spin; ``inf`` overflowed the sleeps). The highest values are a week for
#: intervals, an hour for a command and a debounce: anything longer is a typo, not a setting.
WEEK = 7 * 86400.0
NUMERIC_RANGES: dict[str, tuple[float, bool, float]] = {
    "command_timeout_seconds": (0.0, False, 3600.0),
    "interval_seconds": (0.0, False, WEEK),
    "jitter": (0.0, True, 0.99),
    "start_delay_max_seconds": (0.0, True, 86400.0),
    "debounce_seconds": (0.0, True, 3600.0),
    "debounce_max_seconds": (0.0, True, 3600.0),
    "resync_seconds": (0.0, True, WEEK),
    "qps": (0.0, False, 1000.0),
    "burst": (1, True, 10000),
    "backoff_initial_seconds": (0.0, False, 86400.0),
    "backoff_max_seconds": (0.0, False, 86400.0),
    "once_attempts": (1, True, 1000),
    "allocation_interval_seconds": (0.0, False, WEEK),
    "allocation_grace_seconds": (0.0, True, WEEK),
}


def check_range(name: str, value: float, low: float, inclusive: bool, high: float) -> None:
    """``ConfigError`` (one line naming the setting) unless ``value`` is finite and in range."""
    ok = math.isfinite(value) and (value >= low if inclusive else value > low) and value <= high
    if not ok:
        bound = ">=" if inclusive else ">"
        raise ConfigError(f"{name} must be a number {bound} {low:g} and <= {high:g}, not {value!r}")


FIELDS: dict[str, dataclasses.Field[Any]] = {f.name: f for f in dataclasses.fields(AgentConfig)}

#: extra environment names, tried after ``NODETOPO_<KEY>``
ENV_ALIASES: dict[str, tuple[str, ...]] = {"node_name": ("NODE_NAME",), "kubeconfig": ("KUBECONFIG",)}


def listen_address(listen: str) -> tuple[str, int] | None:
    """``":8080"`` → ``("0.0.0.0", 8080)``; ``"127.0.0.1:0"`` → any free port; ``""`` → None (off)."""
    if not listen:
        return None
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ConfigError(f"listen must be [address]:port, not {listen!r}")
    return (host.strip("[]") or "0.0.0.0", int(port))


def _convert(name: str, value: Any, where: str) -> Any:
    """``value`` (a YAML value or an environment string) as the type of field ``name``."""
    kind = FIELDS[name].type
    try:
        if kind == "bool":
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off", ""):
                return False
            raise ValueError(f"not a boolean: {value!r}")
        if kind == "int":
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError(f"not an integer: {str(value)[:64]!r}")
            return int(value)
        if kind == "float":
            if isinstance(value, bool):
                raise ValueError(f"not a number: {str(value)[:64]!r}")
            return float(value)
        if value is None:
            return None if "None" in str(kind) else ""
        return str(value)
    except (TypeError, ValueError, OverflowError) as e:
        raise ConfigError(f"{where}: {name}: {str(e)[:200]}") from e


def read_config_file(path: str | Path) -> dict[str, Any]:
    """The config file as a mapping of field names (dashes → underscores); unknown keys are errors."""
    try:
        data = yaml.safe_load(read_regular_file(path, MAX_CONFIG_BYTES).decode("utf-8"))
    except OSError as e:
        raise ConfigError(f"config file {path}: {e.strerror or e}") from e
    except UnicodeDecodeError as e:
        raise ConfigError(f"config file {path}: not UTF-8 text (byte {e.start})") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"config file {path}: not YAML: {_first_line(e)}") from e
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: expected a mapping of settings, got {type(data).__name__}")
    result: dict[str, Any] = {}
    for key, value in data.items():
        name = str(key).replace("-", "_")
        if name not in FIELDS:
            raise ConfigError(f"config file {path}: unknown setting {key!r} (known: {', '.join(FIELDS)})")
        result[name] = _convert(name, value, f"config file {path}")
    return result


MAX_CONFIG_BYTES = 1024 * 1024


def read_regular_file(path: str | Path, limit: int) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes; ``OSError`` for anything else.

    Opened without blocking, so a FIFO or a device named by mistake is refused instead of hanging
    (opening a FIFO for reading waits for a writer) or reading forever (``/dev/zero``).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(0, "not a regular file", str(path))
        if info.st_size > limit:
            raise OSError(0, f"larger than {limit} bytes", str(path))
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise OSError(0, f"larger than {limit} bytes", str(path))
    return data


def _first_line(error: BaseException) -> str:
    """The first line of an error (YAML errors quote the offending line after it: never echo a file)."""
    lines = str(error).strip().splitlines()
    return lines[0][:200] if lines else type(error).__name__


def from_environment(env: Mapping[str, str]) -> dict[str, Any]:
    """Settings present in ``env`` (``NODETOPO_<KEY>``, then the aliases)."""
    result: dict[str, Any] = {}
    for name in FIELDS:
        for var in (ENV_PREFIX + name.upper(), *ENV_ALIASES.get(name, ())):
            if env.get(var):
                result[name] = _convert(name, env[var], f"environment {var}")
                break
    return result


def resolve(
    flags: Mapping[str, Any],
    env: Mapping[str, str],
    file_settings: Mapping[str, Any] | None = None,
) -> AgentConfig:
    """Apply the precedence rule: ``flags`` (only those given) > ``env`` > file > defaults."""
    merged: dict[str, Any] = {}
    for layer in (file_settings or {}, from_environment(env), flags):
        for name, value in layer.items():
            if name not in FIELDS:
                raise ConfigError(f"unknown setting {name!r}")
            merged[name] = value
    return AgentConfig(**merged).validate()


def load(
    flags: Mapping[str, Any],
    env: Mapping[str, str],
    *,
    read_file: Callable[[str | Path], dict[str, Any]] = read_config_file,
    config_path: str | None = None,
) -> AgentConfig:
    """``resolve`` with the config file named by ``config_path`` or ``NODETOPO_CONFIG`` (if any)."""
    path = config_path or env.get(ENV_PREFIX + "CONFIG")
    return resolve(flags, env, read_file(path) if path else {})
