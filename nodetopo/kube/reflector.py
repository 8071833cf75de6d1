"""ONE reflector: keeps one kind of object current the way client-go's reflector does, for every
consumer that caches the cluster (the extender's NodeTopology and Pod caches, the summary
controller's NodeTopology facts).

A paged list (``limit``/``continue``), then a watch from the list's ``resourceVersion`` with
bookmarks (a BOOKMARK only moves the resourceVersion on). A watch that ends (the server's
``timeoutSeconds``, jittered) is resumed from the last seen ``resourceVersion``; ``410 Gone`` (the
version was compacted: an HTTP 410 or an ERROR event with code 410), or 5 failures in a row, means
a fresh list that *replaces* the kind's contents, so deletions missed while disconnected are not
kept (the relist is the resync). Failures back off exponentially with jitter (``Backoff``: 1 s
doubling to 30 s). Memory is bounded by one list page: ``Handlers.compact`` turns each object of a
page into what the consumer keeps before the next page is read, and watch events are handled one
line at a time.

``list_func`` speaks the keyword arguments of the official client's generated list methods
(``limit``, ``_continue``, ``resource_version``, ``watch``, ``allow_watch_bookmarks``,
``timeout_seconds``, ``field_selector``, ``_preload_content=False``, ``_request_timeout``) and
returns a raw response (``.data`` for a list, ``.stream()`` for a watch, ``.release_conn()``).
``list_function(connection, path)`` is that function over nodetopo's own transport; a generated
method of the official client fits as well (the benchmark's peer, benchmarks/bench_kube.py).
"""

from __future__ import annotations

import dataclasses
import http.client
import logging
import random
import threading
from collections.abc import Callable, Iterator
from typing import Any

from nodetopo.errors import clip
from nodetopo.jsonread import load_json
from nodetopo.kube.errors import ApiStatusError, translate_api_error
from nodetopo.kube.pacing import Backoff

log = logging.getLogger(__name__)


class Gone(Exception):
    """The watch's resourceVersion is too old (HTTP 410 or an ERROR event with code 410)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Handlers:
    """What a reflector calls. ``compact`` turns each listed object into what ``replace`` keeps, page by
    page, so a list of thousands of objects never holds all their full bodies at once."""

    replace: Callable[[list[Any]], None]
    upsert: Callable[[dict[str, Any]], None]
    delete: Callable[[dict[str, Any]], None]
    synced: threading.Event
    compact: Callable[[dict[str, Any]], Any] = lambda obj: obj


class Reflector:
    """Keeps one resource collection in sync (see the module docstring).

    ``list_func``: ``list_function(connection, path)``, or any function with the same keyword
    arguments and raw response (a generated list method of the official client). ``what`` names
    the collection in logs.
    """

    def __init__(
        self,
        list_func: Callable[..., Any],
        what: str,
        handlers: Handlers,
        *,
        field_selector: str | None = None,
        page_size: int = 500,
        watch_timeout_s: int = 300,
        stop: threading.Event | None = None,
    ) -> None:
        self.list_func = list_func
        self.what = what
        self.handlers = handlers
        self.field_selector = field_selector
        self.page_size = page_size
        self.watch_timeout_s = watch_timeout_s
        self.stop = stop or threading.Event()
        self.resource_version: str | None = None
        self.lists = 0  #: completed lists (the first one, plus relists after 410 or failures)
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name=f"reflector {self.what}", daemon=True)
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _get(self, *, read_timeout: float, **params: Any) -> Any:
        query = {k: v for k, v in params.items() if v is not None}
        if self.field_selector:
            query["field_selector"] = self.field_selector
        return self.list_func(**query, _preload_content=False, _request_timeout=(10.0, read_timeout))

    def list_all(self) -> None:
        """A consistent paged list; replaces the collection and records its resourceVersion."""
        items: list[Any] = []
        token: str | None = None
        while True:
            response = self._get(limit=self.page_size, _continue=token, read_timeout=60.0)
            page = _decode(response.data, f"list {self.what}")
            items.extend(self.handlers.compact(obj) for obj in page.get("items") or [])
            meta = page.get("metadata") or {}
            token = meta.get("continue") or None
            if token is None:
                self.resource_version = str(meta.get("resourceVersion") or "") or None
                break
        self.handlers.replace(items)
        self.lists += 1
        self.handlers.synced.set()
        log.info("listed %s: %d objects at resourceVersion %s", self.what, len(items), self.resource_version)

    def watch_once(self) -> None:
        """One watch request from ``resource_version`` until the server ends it (or ``stop``)."""
        timeout = self.watch_timeout_s + random.randint(0, max(1, self.watch_timeout_s // 5))
        response = self._get(
            watch=True,
            resource_version=self.resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=timeout,
            read_timeout=timeout + 30.0,
        )
        try:
            for line in _lines(response):
                if self.stop.is_set():
                    return
                event = _decode(line, f"watch {self.what}")
                kind = event.get("type")
                obj = event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise Gone(obj.get("message", "resourceVersion too old"))
                    raise RuntimeError(f"watch {self.what}: {obj.get('message', obj)}")
                version = (obj.get("metadata") or {}).get("resourceVersion")
                if kind in ("ADDED", "MODIFIED"):
                    self.handlers.upsert(obj)
                elif kind == "DELETED":
                    self.handlers.delete(obj)
                if version:
                    self.resource_version = str(version)
        finally:
            response.release_conn()

    def run(self) -> None:
        backoff = Backoff(1.0, 30.0, random=random.random)
        while not self.stop.is_set():
            try:
                if self.resource_version is None:
                    self.list_all()
                self.watch_once()
                backoff.reset()
            except Gone as e:
                log.info("watch %s: %s; listing again", self.what, e)
                self.resource_version = None
            except Exception as e:  # noqa: BLE001 - keep watching through any API or network failure
                delay = backoff.next_delay()
                step = "list" if self.resource_version is None else "watch"
                log.warning("%s; retrying in %.1fs", failure_line(e, f"{step} {self.what}"), delay)
                if getattr(e, "status", None) == 410 or backoff.failures >= 5:
                    self.resource_version = None
                self.stop.wait(delay)


def failure_line(error: BaseException, action: str) -> str:
    """``ACTION: why`` in one line, as every command says a failed API request
    (``translate_api_error``: ``HTTP 500: <the server's Status message>``, ``cannot reach the API
    server: ConnectionRefusedError: ...``); any other failure (a page that does not parse, an ERROR
    event) as ``ACTION: Type: text``. Control characters (a Status message's newlines) are escaped."""
    status = getattr(error, "status", None)
    unreachable = isinstance(error, (OSError, http.client.HTTPException))
    if (isinstance(status, int) and hasattr(error, "body")) or unreachable or _from_urllib3(error):
        return str(translate_api_error(error, action=action))
    return f"{action}: {type(error).__name__}: {clip(str(error), 300)}"


def _from_urllib3(error: BaseException) -> bool:
    """An error of the official client's transport (``MaxRetryError``, ``ProtocolError``): a list
    function of the official client fits a reflector too."""
    return type(error).__module__.partition(".")[0] == "urllib3"


def _decode(data: bytes, what: str) -> Any:
    """A list page or a watch event through the bounded JSON reader: nesting past what the decoder
    recurses to is a ``ParseError`` (retried like any failure), never a ``RecursionError``. No
    measuring pass (pages are decoded often, and it costs about what decoding does) and no length
    bound beyond the page's."""
    return load_json(data.decode("utf-8"), source="kube", path=what, max_depth=None, max_chars=None)


def _lines(response: Any) -> Iterator[bytes]:
    """The newline-delimited JSON events of a streaming watch response."""
    pending = b""
    for chunk in response.stream(65536, decode_content=True):
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            if line.strip():
                yield line
    if pending.strip():
        yield pending


class _Response:
    """An ``ApiStream`` as the reflector reads a response: ``data``, ``stream()``, ``release_conn()``."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    @property
    def data(self) -> bytes:
        try:
            return bytes(self._stream.read())
        finally:
            self._stream.close()

    def stream(self, amt: int = 65536, decode_content: bool = True) -> Iterator[bytes]:
        return iter(self._stream.chunks(amt))

    def release_conn(self) -> None:
        self._stream.close()


def list_function(connection: Any, path: str) -> Callable[..., Any]:
    """A reflector ``list_func`` (the official client's keyword arguments, raw response) over the
    standard-library ``KubeConnection`` (``stream``): nodetopo does without the official client
    (docs/architecture.md). A non-2xx answer raises ``ApiStatusError`` with its status (410: relist)."""

    names = {
        "limit": "limit",
        "_continue": "continue",
        "resource_version": "resourceVersion",
        "timeout_seconds": "timeoutSeconds",
        "field_selector": "fieldSelector",
    }

    def list_func(**kwargs: Any) -> _Response:
        query = {names[k]: str(v) for k, v in kwargs.items() if k in names and v is not None}
        if kwargs.get("watch"):
            query["watch"] = "true"
            query["allowWatchBookmarks"] = "true"
        read_timeout = kwargs.get("_request_timeout", (10.0, 60.0))[1]
        stream = connection.stream(path, query=query, timeout=read_timeout)
        if not 200 <= stream.status < 300:
            body = stream.read().decode("utf-8", "replace")
            stream.close()
            raise ApiStatusError(stream.status, stream.reason, body=body)
        return _Response(stream)

    return list_func


def start_watching(
    connection: Any,
    path: str,
    handlers: Handlers,
    *,
    field_selector: str | None = None,
    page_size: int = 500,
    stop: threading.Event | None = None,
) -> Reflector:
    """A started ``Reflector`` of the collection at ``path`` (named by it in logs) over
    ``connection`` (a ``nodetopo.kube.transport.KubeConnection``), feeding ``handlers``."""
    reflector = Reflector(
        list_function(connection, path),
        path,
        handlers,
        field_selector=field_selector,
        page_size=page_size,
        stop=stop,
    )
    reflector.start()
    return reflector
