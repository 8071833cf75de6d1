"""The agent under bad settings, signals and careless HTTP clients (issue 17), as a real process.

0.1.0: ``--interval-seconds nan`` spun at 100 % CPU with /healthz still 200; ``--backoff-max-seconds
nan`` then SIGTERM deadlocked (the handler took a lock); ``inf`` crashed; a negative
``--command-timeout`` was accepted; a FIFO as ``--config`` hung; a non-UTF-8 config printed a
traceback; a busy port printed a traceback; every client disconnect on the health port printed a
``BrokenPipeError`` traceback.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.support import DGX_H100
from nodetopo.agent.config import NUMERIC_RANGES, ConfigError, load, resolve

REPO = Path(__file__).resolve().parents[2]
AGENT = [sys.executable, "-m", "nodetopo", "agent"]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "NODE_NAME": "gpu-1"}


def run_agent(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*AGENT, *args], capture_output=True, text=True, timeout=timeout, cwd=REPO, env=ENV, check=False
    )


def one_clear_line(result: subprocess.CompletedProcess[str], *words: str) -> None:
    err = result.stderr.strip()
    assert "Traceback" not in err, err
    assert len(err.splitlines()) == 1, err
    for word in words:
        assert word in err, err


# ---- numeric settings -----------------------------------------------------------------------------

BAD_NUMBERS = ["nan", "inf", "-inf", "-1", "1e300"]


@pytest.mark.parametrize("name", sorted(NUMERIC_RANGES))
@pytest.mark.parametrize("text", BAD_NUMBERS)
def test_every_numeric_setting_refuses_non_finite_and_out_of_range(name: str, text: str) -> None:
    with pytest.raises(ConfigError, match=name) as error:
        load({}, {"NODE_NAME": "n", f"NODETOPO_{name.upper()}": text})
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    "name",
    [
        "interval_seconds",
        "command_timeout_seconds",
        "qps",
        "burst",
        "backoff_initial_seconds",
        "once_attempts",
    ],
)
def test_zero_is_refused_where_it_means_nothing(name: str) -> None:
    with pytest.raises(ConfigError, match=name):
        resolve({"node_name": "n", name: 0}, {})


def test_zero_is_fine_where_it_means_something() -> None:
    config = resolve({"node_name": "n", "start_delay_max_seconds": 0, "debounce_seconds": 0, "jitter": 0}, {})
    assert config.start_delay_max_seconds == 0 and config.debounce_seconds == 0


@pytest.mark.parametrize(
    ("flag", "value", "word"),
    [
        ("--interval-seconds", "nan", "interval_seconds"),
        ("--backoff-max-seconds", "nan", "backoff_max_seconds"),
        ("--interval-seconds", "inf", "interval_seconds"),
        ("--command-timeout", "-5", "--command-timeout"),
        ("--qps", "-inf", "qps"),
        ("--burst", "0", "burst"),
    ],
)
def test_the_cli_refuses_bad_numbers_with_one_line(flag: str, value: str, word: str) -> None:
    result = run_agent("--dry-run", "--from", str(DGX_H100), f"{flag}={value}")
    assert result.returncode == 2
    if flag == "--command-timeout":  # shared with discover/capture: refused by the parser (usage + error)
        assert "Traceback" not in result.stderr and word in result.stderr.splitlines()[-1]
    else:
        one_clear_line(result, word)


def test_a_yaml_infinity_in_the_config_file_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "agent.yaml"
    config.write_text("burst: .inf\ninterval-seconds: .nan\n")
    result = run_agent("--dry-run", "--from", str(DGX_H100), f"--config={config}")
    assert result.returncode == 2
    one_clear_line(result, "burst")


# ---- the config file --------------------------------------------------------------------------------


def test_a_fifo_as_config_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "config.fifo"
    os.mkfifo(fifo)
    started = time.monotonic()
    result = run_agent("--dry-run", "--once", "--from", str(DGX_H100), f"--config={fifo}", timeout=20)
    assert time.monotonic() - started < 15
    assert result.returncode == 2
    one_clear_line(result, "not a regular file")


@pytest.mark.parametrize(
    ("content", "word"),
    [
        (b"interval-seconds: 60\nnode_name: \xff\xfe\x00bad\n", "not UTF-8"),
        (b"token: secret-value\n  : : [\n", "not YAML"),
    ],
)
def test_an_unreadable_config_file_is_one_line(tmp_path: Path, content: bytes, word: str) -> None:
    config = tmp_path / "agent.yaml"
    config.write_bytes(content)
    result = run_agent("--dry-run", "--once", "--from", str(DGX_H100), f"--config={config}")
    assert result.returncode == 2
    one_clear_line(result, word)
    assert "secret-value" not in result.stderr  # a YAML error never echoes the file's lines


def test_devices_and_huge_files_are_not_configs(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    with big.open("wb") as f:
        f.truncate(64 * 1024 * 1024)  # sparse: 64 MiB of NUL
    for path in ("/dev/zero", str(big)):
        result = run_agent("--dry-run", "--once", "--from", str(DGX_H100), f"--config={path}")
        assert result.returncode == 2
        one_clear_line(result, path)


# ---- ports and signals ---------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_busy_port_is_one_line() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run_agent("--dry-run", "--from", str(DGX_H100), f"--listen=127.0.0.1:{port}", "--no-udev")
    assert result.returncode == 1
    one_clear_line(result, "cannot listen", str(port))


@pytest.fixture
def agent_process(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], int, Path]]:
    port = free_port()
    stderr = tmp_path / "agent.stderr"
    with stderr.open("w") as err:
        proc = subprocess.Popen(
            [
                *AGENT,
                "--dry-run",
                "--from",
                str(DGX_H100),
                f"--listen=127.0.0.1:{port}",
                "--no-udev",
                "--start-delay-max-seconds=0",
                "--interval-seconds=0.05",
                "--log-level=info",
            ],
            stdout=subprocess.DEVNULL,
            stderr=err,
            text=True,
            cwd=REPO,
            env=ENV,
        )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, stderr.read_text()
            time.sleep(0.1)
        yield proc, port, stderr
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_sigterm_during_a_busy_loop_exits_promptly(
    agent_process: tuple[subprocess.Popen[str], int, Path],
) -> None:
    proc, _, stderr = agent_process
    time.sleep(0.5)  # many short cycles: the loop is always in or around its wait
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 0
    text = stderr.read_text()
    assert "SIGTERM: finishing the current write" in text and "Traceback" not in text


def test_the_health_port_survives_careless_clients(
    agent_process: tuple[subprocess.Popen[str], int, Path],
) -> None:
    _, port, stderr = agent_process
    for _ in range(20):  # disconnect before reading the answer (reset)
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        s.close()
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:  # garbage
        s.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + os.urandom(64) + b"\r\n\r\n")
        s.recv(4096)
    slow = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(40)]  # idle clients
    for s in slow:
        s.sendall(b"GET /hea")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=15) as r:
            assert r.status == 200
    finally:
        for s in slow:
            s.close()
    time.sleep(0.3)
    text = stderr.read_text()
    assert "Traceback" not in text and "Exception occurred" not in text, text[-3000:]


# ---- the signal handler itself ------------------------------------------------------------------------

HANDLER_SCRIPT = """
import signal, threading, sys
from nodetopo.command.signals import StopSignals
lock = threading.Lock()  # stands for any lock the interrupted main thread may hold (Event, logging)
stopped = threading.Event()
def on_stop(name):
    with lock:
        stopped.set()
signals = StopSignals(on_stop).install()
for _ in range(3):
    stopped.clear()
    with lock:  # the signal arrives while the main thread holds the lock
        signal.raise_signal(signal.SIGTERM)
        assert not stopped.is_set()
    assert stopped.wait(5), "on_stop was not called"
signals.close()
print("ok")
"""


def test_the_signal_handler_takes_no_lock() -> None:
    """0.1.0's handler called agent.stop() (Event.set takes a lock): a signal landing while the main
    thread held that lock waited for itself forever."""
    result = subprocess.run(
        [sys.executable, "-c", HANDLER_SCRIPT],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=REPO,
        env=ENV,
        check=False,
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_the_metrics_answer_is_unchanged(agent_process: tuple[subprocess.Popen[str], int, Path]) -> None:
    _, port, _ = agent_process
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        assert r.status == 200 and b"nodetopo_discovery_cycles_total" in r.read()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/healthz", method="POST", data=b"{}")
    try:
        urllib.request.urlopen(request, timeout=5)
    except urllib.error.HTTPError as e:
        assert e.code == 501 and json.loads(e.read())["Error"]
