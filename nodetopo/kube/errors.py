"""The failures of the Kubernetes client, and THE translation of a failed request into the
``nodetopo.errors`` hierarchy (``translate_api_error``): one line, never a traceback or a credential.
"""

from __future__ import annotations

import email.utils
import re
import time
import urllib.parse
from collections.abc import Mapping

from nodetopo.errors import (
    ConflictError,
    ForbiddenError,
    InvalidError,
    NodetopoError,
    ParseError,
    PublishError,
    TransientError,
    clip,
)
from nodetopo.jsonread import load_json

#: the longest error body decoded: a ``metav1.Status`` is a few KB (a 409 names each conflicting
#: field in ``details.causes``, ~200 bytes a field); a longer body is quoted, clipped, not decoded
STATUS_BODY_LIMIT = 1024 * 1024
#: the deepest error body decoded (a ``metav1.Status`` is 4 levels deep)
STATUS_BODY_DEPTH = 8


class KubeConfigError(NodetopoError):
    """No usable API server configuration: not in a pod, no kubeconfig, or one nodetopo cannot use."""


class CredentialError(PublishError):
    """A credential could not be obtained: a token file that cannot be read (or is not a regular
    file), an exec plugin that failed. Retryable: a projected token being rotated, a plugin that
    talks to a cloud's token service may fail for a while."""


class ExecPluginError(CredentialError):
    """An exec credential plugin failed (not found, exit status, bad output)."""


class ApiStatusError(Exception):
    """The API server answered with a status outside 2xx (``body``: its ``metav1.Status``)."""

    def __init__(
        self, status: int, reason: str = "", *, headers: Mapping[str, str] | None = None, body: str = ""
    ) -> None:
        self.status = status
        self.reason = reason
        self.headers: Mapping[str, str] = dict(headers or {})
        self.body = body
        super().__init__(f"HTTP {status} {reason}".rstrip())


def split_userinfo(url: str) -> tuple[str, str | None, str | None]:
    """``url`` without its ``user:password@`` part, and the (percent-decoded) user and password
    (None when absent). A URL given without a scheme (``host:6443``) stays without one."""
    has_scheme = "://" in url
    parts = urllib.parse.urlsplit(url if has_scheme else f"https://{url}")
    userinfo, at, host = parts.netloc.rpartition("@")
    if not at:
        return url, None, None
    user, colon, password = userinfo.partition(":")
    bare = urllib.parse.urlunsplit(parts._replace(netloc=host))
    if not has_scheme:
        bare = bare.removeprefix("https://")
    return bare, urllib.parse.unquote(user), urllib.parse.unquote(password) if colon else None


def redact_url(url: str) -> str:
    """THE redaction of a URL that is shown (a message, a report): its ``user:password@`` part
    becomes ``***@``. Everything that prints a server or a proxy URL shows it through here, or
    shows one ``split_userinfo`` already took apart."""
    bare, user, password = split_userinfo(url)
    if user is None and password is None:
        return url
    scheme, sep, rest = bare.partition("://")
    return f"{scheme}{sep}***@{rest}" if sep else f"***@{bare}"


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delta-seconds or an HTTP date; None if absent/bad."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _status(body: str | None) -> object:
    """The decoded ``metav1.Status`` of an error body, None when it is not one: not JSON, longer or
    deeper than a Status is (the bounded reader: a body of the API server or of whatever answers at
    its address, e.g. to the probe's Event)."""
    try:
        return load_json(
            body or "",
            source="kube",
            path="error body",
            max_depth=STATUS_BODY_DEPTH,
            max_chars=STATUS_BODY_LIMIT,
        )
    except ParseError:
        return None


_MANAGER = re.compile(r'conflict with "([^"]*)"')


def field_conflicts(body: str | None) -> tuple[tuple[str, str], ...]:
    """The (field, manager) pairs of a server-side apply conflict (``metav1.Status`` 409 whose
    ``details.causes`` are ``FieldManagerConflict``: ``conflict with "kubectl-label" using v1``
    on ``.metadata.labels.nodetopo.io/numa.count``); empty when the body says none."""
    status = _status(body)
    causes = (status.get("details") or {}).get("causes") if isinstance(status, dict) else None
    found = []
    for cause in causes if isinstance(causes, list) else ():
        if not isinstance(cause, dict) or cause.get("reason") != "FieldManagerConflict":
            continue
        field, said = cause.get("field"), cause.get("message")
        match = _MANAGER.search(said) if isinstance(said, str) else None
        if isinstance(field, str) and match:
            found.append((field, match[1]))
    return tuple(found)


def status_message(body: str | None) -> str:
    """The ``message`` of a ``metav1.Status`` body, else the raw body (shortened)."""
    if not body:
        return ""
    status = _status(body)
    if isinstance(status, dict) and isinstance(status.get("message"), str):
        return str(status["message"])
    return body[:500]


def translate_api_error(error: BaseException, *, action: str, server: str | None = None) -> PublishError:
    """THE translation of a failed API request into a ``nodetopo.errors`` type, for the stdlib
    client and the official one alike (the caller raises it ``from`` ``error``): one line, never a
    traceback or a credential.

    An HTTP answer (``ApiStatusError``, or the official client's ``ApiException``): 409 →
    ConflictError; 401/403 → ForbiddenError; 400/422 → InvalidError; 429 and 5xx → TransientError
    (with ``retry_after`` from the Retry-After header); anything else (404 ...) → PublishError,
    which is retryable. No answer (refused, reset, timeout, TLS, DNS; urllib3's MaxRetryError) →
    TransientError "cannot reach the API server <server>: <why>"; an ``ExecPluginError`` as is.
    """
    if isinstance(error, PublishError):
        return error
    status = getattr(error, "status", None)
    if isinstance(error, ApiStatusError) or (isinstance(status, int) and hasattr(error, "body")):
        assert isinstance(status, int)
        headers = dict(getattr(error, "headers", None) or {})
        body = getattr(error, "body", "") or ""
        body = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body)
        retry_after = parse_retry_after(header(headers, "Retry-After"))
        said = status_message(body) or str(getattr(error, "reason", ""))
        message = f"{action}: HTTP {status}: {clip(said, 300)}"
        if status == 409:
            return ConflictError(message, status=status, conflicts=field_conflicts(body))
        if status in (401, 403):
            return ForbiddenError(message, status=status)
        if status in (400, 422):
            return InvalidError(message, status=status)
        if status == 429 or status >= 500:
            return TransientError(message, status=status, retry_after=retry_after)
        return PublishError(message, status=status, retry_after=retry_after)
    at = f" {redact_url(server)}" if server else ""
    return TransientError(f"{action}: cannot reach the API server{at}: {_why(error)}")


def _why(error: BaseException) -> str:
    """The innermost reason of a connection failure, without object reprs (urllib3 wraps a
    ``NewConnectionError`` in a ``MaxRetryError`` whose text is a paragraph)."""
    seen: set[int] = set()
    current: BaseException = error
    while id(current) not in seen:
        seen.add(id(current))
        inner = getattr(current, "reason", None)
        if isinstance(inner, BaseException):
            current = inner
            continue
        if current.__cause__ is not None:
            current = current.__cause__
            continue
        break
    text = re.sub(r"<[^<>]* object at 0x[0-9a-f]+>:?\s*", "", str(current)).strip()
    return clip(f"{type(current).__name__}: {text}" if text else type(current).__name__, 300)


def header(headers: Mapping[str, str], name: str) -> str | None:
    wanted = name.lower()
    for key, value in headers.items():
        if key.lower() == wanted:
            return value
    return None
