"""One precedence rule: flags > environment > config file > defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodetopo.agent import config as agent_config
from nodetopo.agent.cli import given_flags
from nodetopo.agent.config import AgentConfig, ConfigError, listen_address, load, resolve
from nodetopo.cli import build_parser


def test_precedence_flag_over_env_over_file_over_default(tmp_path: Path) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text("interval-seconds: 120\nqps: 2\nburst: 7\nnode_name: from-file\n")
    env = {"NODETOPO_QPS": "3", "NODETOPO_BURST": "9", "NODE_NAME": "from-downward-api"}
    cfg = load({"burst": 11}, env, config_path=str(path))
    assert cfg.burst == 11  # flag
    assert cfg.qps == 3.0  # env beats file
    assert cfg.interval_seconds == 120.0  # file beats default
    assert cfg.node_name == "from-downward-api"  # env alias beats file
    assert cfg.jitter == AgentConfig().jitter  # default


def test_config_path_from_env(tmp_path: Path) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text("udev: false\n")
    cfg = load({}, {"NODETOPO_CONFIG": str(path), "NODETOPO_NODE_NAME": "n"})
    assert cfg.udev is False and cfg.node_name == "n"


@pytest.mark.parametrize(
    ("text", "message"),
    [("intervl: 5\n", "unknown setting"), ("qps: fast\n", "qps"), ("- a\n", "mapping"), ("a: [\n", "YAML")],
)
def test_bad_config_file(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load({"node_name": "n"}, {}, config_path=str(path))


def test_validation() -> None:
    with pytest.raises(ConfigError, match="node_name"):
        resolve({}, {})
    with pytest.raises(ConfigError, match="jitter"):
        resolve({"node_name": "n", "jitter": 1.5}, {})
    with pytest.raises(ConfigError, match="boolean"):
        resolve({"node_name": "n"}, {"NODETOPO_UDEV": "maybe"})
    assert resolve({"dry_run": True}, {}).node_name == ""


def test_listen_address() -> None:
    assert listen_address(":8080") == ("0.0.0.0", 8080)
    assert listen_address("127.0.0.1:0") == ("127.0.0.1", 0)
    assert listen_address("") is None
    with pytest.raises(ConfigError):
        listen_address("8080")


def test_cli_flags_are_given_only_when_typed() -> None:
    parser = build_parser()
    args = parser.parse_args(["agent", "--qps", "4", "--no-udev", "--once"])
    flags = given_flags(args)
    assert flags == {"qps": 4.0, "udev": False, "once": True}
    args = parser.parse_args(
        ["agent", "--host-root", "/host", "--log-level", "debug", "--command-timeout", "5"]
    )
    assert given_flags(args) == {"host_root": "/host", "log_level": "debug", "command_timeout_seconds": 5.0}
    # shared defaults are still usable strings for cli.main's logging set-up
    assert parser.parse_args(["agent"]).log_level == "info"


def test_every_setting_has_an_environment_name() -> None:
    env = {f"NODETOPO_{name.upper()}": "1" for name, f in agent_config.FIELDS.items() if f.type == "float"}
    values = agent_config.from_environment(env)
    assert set(values) == {n for n, f in agent_config.FIELDS.items() if f.type == "float"}
