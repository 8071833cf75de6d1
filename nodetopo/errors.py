"""nodetopo's exception hierarchy.

Retryable versus fatal is a property of the class, never of the message text.

* ``ParseError`` is raised by pure ``parse_*`` functions only; the source boundary turns it into a
  ``Condition`` and keeps what else it could read. Nothing else catches it.
* ``PublishError`` and its subclasses are raised by ``nodetopo.publish`` after translating the
  API server's error answers (HTTP status, ``Retry-After``) and connection failures, once, at that
  boundary (``raise ... from e``).
"""

from __future__ import annotations

#: the most characters of untrusted input an error message quotes (``excerpt``)
EXCERPT_CHARS = 40
#: the longest ``ParseError.detail`` kept: a safety net under ``excerpt``, never reached by design
MAX_DETAIL_CHARS = 300


def excerpt(text: str | bytes, limit: int = EXCERPT_CHARS) -> str:
    """A short, quoted, printable excerpt of untrusted input, for an error message.

    Messages travel into ``status.conditions`` of a published resource and onto terminals, so they
    quote at most ``limit`` characters of what a file or command said, with every control or other
    non-printable character escaped (``repr``), and say how much was cut:
    ``excerpt("root:x:0:0:root:/root:/bin/bash\n" * 40)`` is ``'root:x:0:0:root:/root:/bin/bash\nroot:x:0'…
    (1280 chars)``.
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}… ({len(text)} chars)"


def clip(text: str, limit: int = 200) -> str:
    """``text`` with control characters escaped, cut to ``limit`` characters (``…`` marks a cut).

    For untrusted text shown unquoted in a message (a line of a command's stderr).
    """
    if not text.isprintable():
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class NodetopoError(Exception):
    """Base class of every error nodetopo raises on purpose."""


class ParseError(NodetopoError):
    """Input that a parser could not read.

    Carries the source name, the file (or command) it came from, the 1-based line where known, and
    what was expected there.
    """

    def __init__(self, source: str, path: str, detail: str, *, line: int | None = None) -> None:
        self.source = source
        self.path = clip(path, MAX_DETAIL_CHARS)
        self.line = line
        self.detail = clip(detail, MAX_DETAIL_CHARS)
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line is not None else self.path
        return f"{self.source}: {where}: {self.detail}"

    def __reduce__(self) -> tuple[object, ...]:  # keep pickling (hypothesis, multiprocessing) working
        return (_rebuild_parse_error, (self.source, self.path, self.detail, self.line))


def _rebuild_parse_error(source: str, path: str, detail: str, line: int | None) -> ParseError:
    return ParseError(source, path, detail, line=line)


class BundleError(NodetopoError):
    """A capture bundle that cannot be used at all (not a directory, nothing recognisable in it)."""


class PublishError(NodetopoError):
    """Writing to the Kubernetes API failed."""

    retryable: bool = True

    def __init__(self, message: str, *, status: int | None = None, retry_after: float | None = None):
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


class ConflictError(PublishError):
    """Another field manager owns a field we apply (HTTP 409 on server-side apply).

    ``conflicts``: the (field, manager) pairs the API server named (``.metadata.labels.nodetopo.io/
    numa.count``, ``kubectl-label``). Retryable, never fatal: a publisher takes back the fields it
    owns (``nodetopo.publish.ownership``), and a conflict it cannot resolve is tried again later.
    """

    retryable = True

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
        conflicts: tuple[tuple[str, str], ...] = (),
    ) -> None:
        super().__init__(message, status=status, retry_after=retry_after)
        self.conflicts = conflicts


class ForbiddenError(PublishError):
    """RBAC or an admission policy denied the write (HTTP 401/403). Retrying will not help."""

    retryable = False


class InvalidError(PublishError):
    """The API server rejected the object (HTTP 422): a bug in nodetopo or a CRD mismatch."""

    retryable = False


class TransientError(PublishError):
    """The API server could not be reached, was overloaded (429) or failed (5xx)."""

    retryable = True
