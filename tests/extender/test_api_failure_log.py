"""The extender says an API failure in one line per failure, as every other command says one: which
request (list or watch, which collection), why (the API server's own message, or that it cannot be
reached) and when it retries; never a traceback, never a line of the server's message on its own.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from .process import ExtenderProcess, run_extender

#: the text log format's head (nodetopo.command.logs): every stderr line starts with one
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ [\w.]+: ")
FAILURE = re.compile(
    r"WARNING nodetopo\.kube\.reflector: (list|watch) "
    r"(/api/v1/pods|/apis/nodetopo\.io/v1alpha1/nodetopologies): "
    r"(.*); retrying in \d+\.\ds$"
)


def _failures(extender: ExtenderProcess, says: str, at_least: int = 2, timeout: float = 30.0) -> list[str]:
    """The reflector's failure lines, once ``at_least`` of them say ``says`` (both collections)."""
    deadline = time.monotonic() + timeout
    while True:
        matches = [(line, m) for line in extender.stderr.splitlines() if (m := FAILURE.search(line))]
        found = [(line, m[2]) for line, m in matches if says in m[3]]
        if len({what for _, what in found}) == 2 and len(found) >= at_least:
            return [line for line, _ in found]
        assert time.monotonic() < deadline, f"no {says!r} failure lines:\n{extender.stderr}"
        time.sleep(0.2)


def test_an_api_in_trouble_then_gone_is_one_line_per_failure(tmp_path: Path) -> None:
    with run_extender(tmp_path, []) as extender:
        api = extender.api
        api.failing = (500, "etcdserver: request timed out\n\tat the leader")
        api.stop.set()  # the open watches end; every request from now on is answered 500
        answered = _failures(extender, "HTTP 500: etcdserver: request timed out")
        assert all("\\n\\tat the leader" in line for line in answered), answered
        api.server.shutdown()  # the API server stops: nothing listens on its port any more
        api.server.server_close()
        gone = _failures(extender, "cannot reach the API server: ConnectionRefusedError")
        assert all(line.split(": ", 1)[1].count("ConnectionRefused") == 1 for line in gone), gone
        text = extender.stderr
    assert "Traceback" not in text
    stray = [line for line in text.splitlines() if not LOG_LINE.match(line)]
    assert stray == [], "lines that are not one log line each:\n" + "\n".join(stray)
