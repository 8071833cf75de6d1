"""The server's limits, the request-head test, the quiet transport errors and the error a handler
raises to answer."""

from __future__ import annotations

import dataclasses
import errno
import logging
import ssl
from typing import Any

log = logging.getLogger("nodetopo.httpserver")


#: Errors that mean "the client went away or misbehaved at the transport level": logged at debug.
QUIET_ERRORS: tuple[type[BaseException], ...] = (ConnectionError, TimeoutError, ssl.SSLError, EOFError)

#: How much of a waiting connection's buffer is looked at for the end of its request head: a head
#: longer than this takes a slot when this much has arrived (the handler refuses it under its
#: deadline: 64 header lines, 64 KiB request line).
HEAD_PEEK_BYTES = 16384


@dataclasses.dataclass(frozen=True, slots=True)
class Limits:
    """Connection limits of a ``BoundedHTTPServer``."""

    max_connections: int = 64  #: requests served at once (one thread each)
    max_waiting: int = 1024  #: connections waiting for a request head without a slot (see the module doc)
    backlog: int = 1024  #: kernel listen queue (capped by net.core.somaxconn)
    idle_timeout_s: float = 120.0  #: an idle keep-alive connection is closed after this
    request_timeout_s: float = 10.0  #: a request's head must arrive within this, then the rest
    max_header_lines: int = 64  #: headers per request

    def __post_init__(self) -> None:
        for name in ("max_connections", "max_waiting", "backlog", "max_header_lines"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, not {getattr(self, name)!r}")
        for name in ("idle_timeout_s", "request_timeout_s"):
            value = getattr(self, name)
            if not (0 < value < 86400):  # also refuses nan and inf
                raise ValueError(f"{name} must be a number of seconds in (0, 86400), not {value!r}")


def head_complete(data: bytes) -> bool:
    """Whether ``data`` (the start of a request) holds the whole head: the empty line after the
    headers, in any of the line endings the stdlib parser accepts."""
    return b"\n\r\n" in data or b"\n\n" in data


class HttpError(Exception):
    """Answer the current request with ``status`` and a JSON ``{"Error": message}``; close if ``close``."""

    def __init__(self, status: int, message: str, *, close: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.close = close


QUIET_ERRNOS = {errno.EPIPE, errno.ECONNRESET, errno.ECONNABORTED, errno.ENOTCONN, errno.ETIMEDOUT}


def peer_name(address: Any) -> str:
    if isinstance(address, tuple) and len(address) >= 2:
        return f"{address[0]}:{address[1]}"
    return str(address)
