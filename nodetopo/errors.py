"""nodetopo's exception hierarchy.

Retryable versus fatal is a property of the class, never of the message text.

* ``ParseError`` is raised by pure ``parse_*`` functions only; the source boundary turns it into a
  ``Condition`` and keeps what else it could read. Nothing else catches it.
* ``PublishError`` and its subclasses are raised by ``nodetopo.publish`` after translating the
  API server's error answers (HTTP status, ``Retry-After``) and connection failures, once, at that
  boundary (``raise ... from e``).
"""

from __future__ import annotations


class NodetopoError(Exception):
    """Base class of every error nodetopo raises on purpose."""


class ParseError(NodetopoError):
    """Input that a parser could not read.

    Carries the source name, the file (or command) it came from, the 1-based line where known, and
    what was expected there.
    """

    def __init__(self, source: str, path: str, detail: str, *, line: int | None = None) -> None:
        self.source = source
        self.path = path
        self.line = line
        self.detail = detail
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
    """Another field manager owns a field we apply (HTTP 409 on server-side apply)."""

    retryable = False


class ForbiddenError(PublishError):
    """RBAC or an admission policy denied the write (HTTP 401/403). Retrying will not help."""

    retryable = False


class InvalidError(PublishError):
    """The API server rejected the object (HTTP 422): a bug in nodetopo or a CRD mismatch."""

    retryable = False


class TransientError(PublishError):
    """The API server could not be reached, was overloaded (429) or failed (5xx)."""

    retryable = True
