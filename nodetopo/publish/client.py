"""The Kubernetes API transport of the publishers, and the one place API failures become
``nodetopo.errors`` types.

The agent makes a handful of requests (get a Node, server-side apply of a Node, a NodeTopology,
its status and an NFD NodeFeature), so it speaks HTTP itself with the standard library rather
than load the official client (~50 MiB of generated models and their imports; see
``benchmarks/RESULTS.md``):

* ``ClusterAccess``: where the API server is and how to authenticate, from the in-cluster service
  account (``in_cluster_access``) or a kubeconfig (``kubeconfig_access``); ``connect`` chooses as
  ``load_api_client`` always did;
* ``KubeConnection``: one persistent (keep-alive) HTTPS connection with a per-request timeout; the
  bearer token file is re-read whenever it changes (bound service-account tokens rotate);
* ``ApiSession``: the few calls, plain dicts in and out; a non-2xx answer is an ``ApiStatusError``
  and every failure is translated exactly once (``translate_api_error``, ``raise ... from e``).

``load_api_client`` still returns the official ``kubernetes.client.ApiClient`` for the consumers
that use its list/watch machinery (the extender's reflectors, ``nodetopo ray``); it imports
``kubernetes`` only when called.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import email.utils
import http.client
import json
import logging
import os
import shutil
import ssl
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

import nodetopo
from nodetopo.errors import (
    ConflictError,
    ForbiddenError,
    InvalidError,
    NodetopoError,
    PublishError,
    TransientError,
)

log = logging.getLogger(__name__)

APPLY_PATCH = "application/apply-patch+yaml"
FIELD_MANAGER = "nodetopo-agent"
REQUEST_TIMEOUT_SECONDS = 30.0
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
USER_AGENT = f"nodetopo/{nodetopo.__version__}"

#: what a kubeconfig user may use with nodetopo's client (said in every refusal)
SUPPORTED_AUTH = (
    "nodetopo's API client supports kubeconfig users with a bearer token (token, tokenFile) or a "
    "client certificate (client-certificate or client-certificate-data with client-key or "
    "client-key-data), or no credentials; clusters with server, certificate-authority or "
    "certificate-authority-data, insecure-skip-tls-verify and tls-server-name. In a pod it uses "
    "the mounted service-account token."
)
#: kubeconfig user fields nodetopo refuses rather than ignore (they change who we are)
_UNSUPPORTED_USER_FIELDS = (
    "exec",
    "auth-provider",
    "username",
    "password",
    "as",
    "as-uid",
    "as-groups",
    "as-user-extra",
)


def load_api_client(kubeconfig: str | None = None, *, context: str | None = None) -> Any:
    """A ``kubernetes.client.ApiClient`` (for list/watch consumers; the publishers use ``connect``).

    ``kubeconfig`` given: that file (and ``context``). Otherwise the in-cluster service account
    (``KUBERNETES_SERVICE_HOST`` + the mounted token), falling back to ``$KUBECONFIG`` /
    ``~/.kube/config`` when not running in a pod.
    """
    import kubernetes  # only here: importing nodetopo.publish must not load the official client

    config: Any = kubernetes.config  # untyped in some client releases
    if kubeconfig is not None:
        return config.new_client_from_config(config_file=kubeconfig, context=context, persist_config=False)
    configuration = kubernetes.client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)
    except config.ConfigException:
        log.debug("not in a cluster; using the default kubeconfig")
        return config.new_client_from_config(context=context, persist_config=False)
    return kubernetes.client.ApiClient(configuration)


# --------------------------------------------------------------------------------------------
# Configuration: in-cluster or kubeconfig
# --------------------------------------------------------------------------------------------


class KubeConfigError(NodetopoError):
    """No usable API server configuration: not in a pod, no kubeconfig, or one nodetopo cannot use."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ClusterAccess:
    """Where the API server is and how to authenticate (one kubeconfig context, or in-cluster).

    ``ca_data``, ``client_cert_data`` and ``client_key_data`` are the decoded PEM bytes of the
    kubeconfig's ``*-data`` fields; a file field is used only when its data field is absent.
    ``token_file`` is re-read whenever it changes; ``token`` is used when there is no file (or it
    could not be read yet). ``source`` names where this came from, for messages.
    """

    server: str
    source: str = ""
    ca_file: str | None = None
    ca_data: bytes | None = dataclasses.field(default=None, repr=False)
    insecure_skip_tls_verify: bool = False
    tls_server_name: str | None = None
    token: str | None = dataclasses.field(default=None, repr=False)
    token_file: str | None = None
    client_cert_file: str | None = None
    client_cert_data: bytes | None = dataclasses.field(default=None, repr=False)
    client_key_file: str | None = None
    client_key_data: bytes | None = dataclasses.field(default=None, repr=False)


def in_cluster_access(
    environ: Mapping[str, str] | None = None, *, directory: Path = SERVICE_ACCOUNT_DIR
) -> ClusterAccess:
    """The pod's service account: ``KUBERNETES_SERVICE_HOST``/``_PORT`` and the mounted ``token``
    (re-read when it rotates) and ``ca.crt``. ``KubeConfigError`` when not running in a pod."""
    env = os.environ if environ is None else environ
    host = env.get("KUBERNETES_SERVICE_HOST", "")
    port = env.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise KubeConfigError("not running in a pod: KUBERNETES_SERVICE_HOST/_PORT are not set")
    token_file = directory / "token"
    ca_file = directory / "ca.crt"
    for path in (token_file, ca_file):
        if not path.is_file():
            raise KubeConfigError(f"not running in a pod: {path} does not exist")
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # IPv6
    return ClusterAccess(
        server=f"https://{host}:{port}",
        source="in-cluster service account",
        ca_file=str(ca_file),
        token_file=str(token_file),
    )


def default_kubeconfig_paths(environ: Mapping[str, str] | None = None) -> list[Path]:
    """``$KUBECONFIG`` (a list separated by ``os.pathsep``), else ``~/.kube/config``."""
    env = os.environ if environ is None else environ
    listed = [Path(p).expanduser() for p in env.get("KUBECONFIG", "").split(os.pathsep) if p]
    return listed or [Path("~/.kube/config").expanduser()]


_PATH_FIELDS = {
    "clusters": ("certificate-authority",),
    "users": ("client-certificate", "client-key", "tokenFile"),
}


def _resolve_paths(document: Mapping[str, Any], base: Path) -> dict[str, Any]:
    """``document`` with the relative file paths of its clusters and users made absolute against
    ``base`` (the kubeconfig's directory), as kubectl resolves them."""
    resolved = dict(document)
    for section, fields in _PATH_FIELDS.items():
        inner = section[:-1]  # clusters[].cluster, users[].user
        entries = []
        for entry in document.get(section) or ():
            if isinstance(entry, Mapping) and isinstance(entry.get(inner), Mapping):
                body = dict(entry[inner])
                for field in fields:
                    value = body.get(field)
                    if isinstance(value, str) and value and not os.path.isabs(value):
                        body[field] = str(base / value)
                entry = {**entry, inner: body}
            entries.append(entry)
        resolved[section] = entries
    return resolved


def merge_kubeconfigs(documents: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Several kubeconfigs as one (``$KUBECONFIG`` lists): the first ``current-context`` set and
    the first entry of each name win, as kubectl merges them."""
    merged: dict[str, Any] = {"clusters": [], "contexts": [], "users": []}
    for document in documents:
        if not merged.get("current-context") and document.get("current-context"):
            merged["current-context"] = document["current-context"]
        for section in ("clusters", "contexts", "users"):
            names = {e.get("name") for e in merged[section]}
            for entry in document.get(section) or ():
                if isinstance(entry, Mapping) and entry.get("name") not in names:
                    merged[section].append(entry)
                    names.add(entry.get("name"))
    return merged


def _named(config: Mapping[str, Any], section: str, name: str, source: str) -> Mapping[str, Any]:
    inner = section[:-1]
    for entry in config.get(section) or ():
        if isinstance(entry, Mapping) and entry.get("name") == name:
            body = entry.get(inner)
            if body is None:
                return {}
            if not isinstance(body, Mapping):
                raise KubeConfigError(f"{source}: {inner} {name!r} is not a mapping")
            return body
    raise KubeConfigError(f"{source}: no {inner} named {name!r}")


def _decoded(body: Mapping[str, Any], field: str, source: str) -> bytes | None:
    value = body.get(field)
    if not value:
        return None
    try:
        return base64.b64decode(str(value), validate=True)
    except (binascii.Error, ValueError) as e:
        raise KubeConfigError(f"{source}: {field} is not valid base64: {e}") from e


def _text(body: Mapping[str, Any], field: str) -> str | None:
    value = body.get(field)
    return str(value) if value not in (None, "") else None


def parse_kubeconfig(config: Mapping[str, Any], *, context: str | None = None, source: str) -> ClusterAccess:
    """The ``ClusterAccess`` of ``context`` (default: ``current-context``) of a parsed kubeconfig
    whose file paths are already absolute. ``KubeConfigError`` for what nodetopo cannot use
    (exec plugins, auth providers, basic auth, impersonation, proxies), naming what it supports."""
    name = context or config.get("current-context")
    if not name:
        raise KubeConfigError(f"{source}: no current-context set and no context given")
    where = f"{source} (context {name!r})"
    ctx = _named(config, "contexts", str(name), source)
    cluster_name = ctx.get("cluster")
    if not cluster_name:
        raise KubeConfigError(f"{where}: the context names no cluster")
    cluster = _named(config, "clusters", str(cluster_name), source)
    user_name = ctx.get("user")
    user = _named(config, "users", str(user_name), source) if user_name else {}
    refused = [field for field in _UNSUPPORTED_USER_FIELDS if user.get(field)]
    if refused:
        raise KubeConfigError(
            f"{where}: user {user_name!r} uses {', '.join(refused)}, which nodetopo does not "
            f"support. {SUPPORTED_AUTH}"
        )
    if cluster.get("proxy-url"):
        raise KubeConfigError(
            f"{where}: cluster {cluster_name!r} uses proxy-url, which nodetopo does not support. "
            f"{SUPPORTED_AUTH}"
        )
    server = _text(cluster, "server")
    if server is None:
        raise KubeConfigError(f"{where}: cluster {cluster_name!r} has no server")
    return ClusterAccess(
        server=server,
        source=where,
        ca_file=_text(cluster, "certificate-authority"),
        ca_data=_decoded(cluster, "certificate-authority-data", where),
        insecure_skip_tls_verify=bool(cluster.get("insecure-skip-tls-verify")),
        tls_server_name=_text(cluster, "tls-server-name"),
        token=_text(user, "token"),
        token_file=_text(user, "tokenFile"),
        client_cert_file=_text(user, "client-certificate"),
        client_cert_data=_decoded(user, "client-certificate-data", where),
        client_key_file=_text(user, "client-key"),
        client_key_data=_decoded(user, "client-key-data", where),
    )


def kubeconfig_access(
    paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], *, context: str | None = None
) -> ClusterAccess:
    """The ``ClusterAccess`` of a kubeconfig file (or several, merged as kubectl merges them)."""
    files = [Path(paths)] if isinstance(paths, str | os.PathLike) else [Path(p) for p in paths]
    documents = []
    for path in files:
        try:
            document = yaml.safe_load(path.read_text())
        except OSError as e:
            raise KubeConfigError(f"kubeconfig {path}: {e.strerror or e}") from e
        except yaml.YAMLError as e:
            raise KubeConfigError(f"kubeconfig {path}: not YAML: {e}") from e
        if document is None:
            continue
        if not isinstance(document, Mapping):
            raise KubeConfigError(f"kubeconfig {path}: not a mapping")
        documents.append(_resolve_paths(document, path.absolute().parent))
    source = f"kubeconfig {os.pathsep.join(str(p) for p in files)}"
    return parse_kubeconfig(merge_kubeconfigs(documents), context=context, source=source)


# --------------------------------------------------------------------------------------------
# The connection
# --------------------------------------------------------------------------------------------


class _BearerToken:
    """The ``Authorization`` header value: a static token, or a token file re-read when it changes
    (inode, size or mtime: a projected volume swaps a symlink). A file that cannot be read keeps
    the last token read (or the static one) and raises only when there is none."""

    def __init__(self, token: str | None, token_file: str | None) -> None:
        self._token = token
        self._file = token_file
        self._seen: tuple[int, int, int] | None = None

    def __call__(self) -> str | None:
        if self._file is not None:
            try:
                st = os.stat(self._file)
                seen = (st.st_ino, st.st_size, st.st_mtime_ns)
                if seen != self._seen:
                    with open(self._file, encoding="utf-8") as f:
                        self._token = f.read().strip()
                    self._seen = seen
                    log.debug("bearer token read from %s", self._file)
            except OSError:
                if not self._token:
                    raise
                log.warning("cannot re-read token file %s; using the last token", self._file)
        return f"Bearer {self._token}" if self._token else None


def _ssl_context(access: ClusterAccess) -> ssl.SSLContext:
    """TLS settings of ``access``; client certificates given as data pass through a private
    temporary directory that is removed as soon as ``ssl`` has loaded them."""
    if access.insecure_skip_tls_verify:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif access.ca_data is not None:
        pem = b"-----BEGIN" in access.ca_data
        context = ssl.create_default_context(cadata=access.ca_data.decode() if pem else access.ca_data)
    else:
        context = ssl.create_default_context(cafile=access.ca_file)
    has_cert = access.client_cert_data is not None or access.client_cert_file is not None
    has_key = access.client_key_data is not None or access.client_key_file is not None
    if has_cert != has_key:
        raise KubeConfigError(f"{access.source}: a client certificate needs both a certificate and a key")
    if has_cert:
        directory = tempfile.mkdtemp(prefix="nodetopo-tls-")  # mode 0700
        try:

            def materialize(data: bytes | None, path: str | None, name: str) -> str:
                if data is None:
                    return str(path)
                target = os.path.join(directory, name)
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                return target

            cert = materialize(access.client_cert_data, access.client_cert_file, "client.crt")
            key = materialize(access.client_key_data, access.client_key_file, "client.key")
            context.load_cert_chain(cert, key)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
    return context


class _TlsConnection(http.client.HTTPSConnection):
    """``HTTPSConnection`` that verifies the certificate for ``server_name`` (kubeconfig's
    ``tls-server-name``) instead of the host it connects to."""

    def __init__(self, host: str, port: int | None, *, server_name: str, **kwargs: Any) -> None:
        super().__init__(host, port, **kwargs)
        self._server_name = server_name

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)
        self.sock = self._context.wrap_socket(self.sock, server_hostname=self._server_name)  # type: ignore[attr-defined]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ApiResponse:
    status: int
    reason: str
    headers: Mapping[str, str]
    data: bytes


def _header(headers: Mapping[str, str], name: str) -> str | None:
    wanted = name.lower()
    for key, value in headers.items():
        if key.lower() == wanted:
            return value
    return None


#: a reused keep-alive connection the server closed meanwhile fails with one of these before any
#: answer: the request is sent once more on a new connection
_STALE_CONNECTION = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)


class KubeConnection:
    """One keep-alive connection to the API server (opened on first use, reopened after an error
    or when the server closes it), one request at a time, ``timeout`` seconds per socket operation.

    ``authorization`` overrides the ``Authorization`` header source (default: ``access``'s token).
    """

    def __init__(
        self,
        access: ClusterAccess,
        *,
        timeout: float = REQUEST_TIMEOUT_SECONDS,
        authorization: Callable[[], str | None] | None = None,
    ) -> None:
        url = urllib.parse.urlsplit(access.server if "://" in access.server else f"https://{access.server}")
        if url.scheme not in ("https", "http") or not url.hostname:
            raise KubeConfigError(f"{access.source}: server {access.server!r} is not an http(s) URL")
        self.access = access
        self.timeout = timeout
        self._https = url.scheme == "https"
        self._host = url.hostname
        self._port = url.port or (443 if self._https else 80)
        self._prefix = url.path.rstrip("/")
        self._context = _ssl_context(access) if self._https else None
        self._authorization = authorization or _BearerToken(access.token, access.token_file)
        self._lock = threading.Lock()
        self._conn: http.client.HTTPConnection | None = None
        self._reused = False  #: the open connection has completed a request already

    @classmethod
    def from_client_configuration(cls, configuration: Any, **kwargs: Any) -> KubeConnection:
        """A connection with the settings of an official ``kubernetes.client.Configuration``
        (for callers that already hold an ``ApiClient``); its token hook is asked per request."""
        access = ClusterAccess(
            server=str(configuration.host),
            source="kubernetes.client.Configuration",
            ca_file=configuration.ssl_ca_cert or None,
            insecure_skip_tls_verify=not configuration.verify_ssl,
            tls_server_name=getattr(configuration, "tls_server_name", None) or None,
            client_cert_file=configuration.cert_file or None,
            client_key_file=configuration.key_file or None,
        )

        def authorization() -> str | None:
            value = configuration.auth_settings().get("BearerToken", {}).get("value")
            return str(value) if value else None

        return cls(access, authorization=authorization, **kwargs)

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            if self._context is None:
                self._conn = http.client.HTTPConnection(self._host, self._port, timeout=self.timeout)
            else:
                self._conn = _TlsConnection(
                    self._host,
                    self._port,
                    server_name=self.access.tls_server_name or self._host,
                    timeout=self.timeout,
                    context=self._context,
                )
            self._reused = False
        return self._conn

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._conn = None
        self._reused = False

    def close(self) -> None:
        with self._lock:
            self._drop()

    def __enter__(self) -> KubeConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: bytes | None = None,
        content_type: str | None = None,
    ) -> ApiResponse:
        """Send one request; return the answer whatever its status. Raises ``OSError`` (refused,
        timeout, TLS) or ``http.client.HTTPException`` when no answer came."""
        target = self._prefix + path + (f"?{urllib.parse.urlencode(query)}" if query else "")
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        with self._lock:
            authorization = self._authorization()
            if authorization:
                headers["Authorization"] = authorization
            while True:
                connection = self._connection()
                reused = self._reused
                try:
                    connection.request(method, target, body=body, headers=headers)
                    response = connection.getresponse()
                    data = response.read()
                except _STALE_CONNECTION as e:
                    self._drop()
                    if not reused:
                        raise
                    log.debug("keep-alive connection closed by the server (%s); reconnecting", e)
                    continue
                except BaseException:
                    self._drop()
                    raise
                if response.will_close:
                    self._drop()
                else:
                    self._reused = True
                return ApiResponse(
                    status=response.status,
                    reason=response.reason,
                    headers=dict(response.getheaders()),
                    data=data,
                )


def connect(
    kubeconfig: str | None = None, *, context: str | None = None, timeout: float = REQUEST_TIMEOUT_SECONDS
) -> KubeConnection:
    """A ``KubeConnection`` chosen as ``load_api_client`` chooses: ``kubeconfig`` given, that
    file (and ``context``); otherwise the in-cluster service account, falling back to
    ``$KUBECONFIG`` / ``~/.kube/config`` when not running in a pod."""
    if kubeconfig is not None:
        return KubeConnection(kubeconfig_access(kubeconfig, context=context), timeout=timeout)
    try:
        access = in_cluster_access()
    except KubeConfigError as e:
        log.debug("%s; using the default kubeconfig", e)
        access = kubeconfig_access(default_kubeconfig_paths(), context=context)
    return KubeConnection(access, timeout=timeout)


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


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


def _status_message(body: str | None) -> str:
    """The ``message`` of a ``metav1.Status`` body, else the raw body (shortened)."""
    if not body:
        return ""
    try:
        status = json.loads(body)
    except ValueError:
        return body[:500]
    if isinstance(status, dict) and isinstance(status.get("message"), str):
        return str(status["message"])
    return body[:500]


def translate_api_error(error: BaseException, *, action: str) -> PublishError:
    """The ``nodetopo.errors`` type for a failed request (the caller raises it ``from`` ``error``).

    ``ApiStatusError``: 409 → ConflictError; 401/403 → ForbiddenError; 400/422 → InvalidError;
    429 and 5xx → TransientError (with ``retry_after`` from the Retry-After header); anything
    else (404 ...) → PublishError, which is retryable. Any other error (connection refused or
    reset, timeout, TLS) → TransientError.
    """
    if isinstance(error, ApiStatusError):
        status = error.status
        retry_after = parse_retry_after(_header(error.headers, "Retry-After"))
        message = f"{action}: HTTP {status}: {_status_message(error.body) or error.reason}"
        if status == 409:
            return ConflictError(message, status=status)
        if status in (401, 403):
            return ForbiddenError(message, status=status)
        if status in (400, 422):
            return InvalidError(message, status=status)
        if status == 429 or status >= 500:
            return TransientError(message, status=status, retry_after=retry_after)
        return PublishError(message, status=status, retry_after=retry_after)
    return TransientError(f"{action}: {type(error).__name__}: {error}")


# --------------------------------------------------------------------------------------------
# The session
# --------------------------------------------------------------------------------------------


def _quote(segment: str) -> str:
    return urllib.parse.quote(segment, safe="")


class ApiSession:
    """The few API calls the publishers make, as dicts in and out, errors translated.

    ``connection`` is a ``KubeConnection`` (``connect()``); an official
    ``kubernetes.client.ApiClient`` is accepted too and its configuration used for a
    ``KubeConnection``. ``field_manager`` names every apply (``force=false``).
    """

    def __init__(self, connection: KubeConnection | Any, *, field_manager: str = FIELD_MANAGER) -> None:
        if not isinstance(connection, KubeConnection):
            connection = KubeConnection.from_client_configuration(connection.configuration)
        self.connection: KubeConnection = connection
        self.field_manager = field_manager

    def close(self) -> None:
        self.connection.close()

    def _call(
        self,
        action: str,
        method: str,
        path: str,
        *,
        apply: Mapping[str, Any] | None = None,
        missing_ok: bool = False,
    ) -> dict[str, Any] | None:
        """One request; its JSON object, None for 404 when ``missing_ok``; errors translated."""
        try:
            if apply is None:
                response = self.connection.request(method, path)
            else:
                response = self.connection.request(
                    method,
                    path,
                    query={"fieldManager": self.field_manager, "force": "false"},
                    body=json.dumps(dict(apply)).encode(),  # JSON is YAML
                    content_type=APPLY_PATCH,
                )
        except (OSError, http.client.HTTPException) as e:
            raise translate_api_error(e, action=action) from e
        if missing_ok and response.status == 404:
            return None
        if not 200 <= response.status < 300:
            error = ApiStatusError(
                response.status,
                response.reason,
                headers=response.headers,
                body=response.data.decode("utf-8", "replace"),
            )
            raise translate_api_error(error, action=action) from error
        try:
            data = json.loads(response.data)
        except ValueError as e:
            raise TransientError(f"{action}: the answer is not JSON: {response.data[:200]!r}") from e
        if not isinstance(data, dict):
            raise TransientError(f"{action}: unexpected API response: {str(data)[:200]}")
        return data

    def _must(self, result: dict[str, Any] | None) -> dict[str, Any]:
        assert result is not None  # only missing_ok calls return None
        return result

    def read_node(self, name: str) -> dict[str, Any]:
        return self._must(self._call(f"read Node {name}", "GET", f"/api/v1/nodes/{_quote(name)}"))

    def apply_node(self, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        path = f"/api/v1/nodes/{_quote(name)}"
        return self._must(self._call(f"apply labels of Node {name}", "PATCH", path, apply=body))

    def read_cluster_object(self, group: str, version: str, plural: str, name: str) -> dict[str, Any] | None:
        """The object, or None when it does not exist (404)."""
        path = f"/apis/{group}/{version}/{plural}/{_quote(name)}"
        return self._call(f"read {plural}/{name}", "GET", path, missing_ok=True)

    def read_namespaced_object(
        self, group: str, version: str, namespace: str, plural: str, name: str
    ) -> dict[str, Any] | None:
        """The object, or None when it does not exist (404)."""
        path = f"/apis/{group}/{version}/namespaces/{_quote(namespace)}/{plural}/{_quote(name)}"
        return self._call(f"read {plural}/{namespace}/{name}", "GET", path, missing_ok=True)

    def apply_cluster_object(
        self, group: str, version: str, plural: str, name: str, body: Mapping[str, Any], *, status: bool
    ) -> dict[str, Any]:
        """Server-side apply of a cluster-scoped custom object (``status``: its status subresource)."""
        where = f"{plural}/{name}{'/status' if status else ''}"
        path = f"/apis/{group}/{version}/{plural}/{_quote(name)}{'/status' if status else ''}"
        return self._must(self._call(f"apply {where}", "PATCH", path, apply=body))

    def apply_namespaced_object(
        self, group: str, version: str, namespace: str, plural: str, name: str, body: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Server-side apply of a namespaced custom object."""
        path = f"/apis/{group}/{version}/namespaces/{_quote(namespace)}/{plural}/{_quote(name)}"
        return self._must(self._call(f"apply {plural}/{namespace}/{name}", "PATCH", path, apply=body))


__all__ = [
    "APPLY_PATCH",
    "FIELD_MANAGER",
    "ApiResponse",
    "ApiSession",
    "ApiStatusError",
    "ClusterAccess",
    "KubeConfigError",
    "KubeConnection",
    "connect",
    "in_cluster_access",
    "kubeconfig_access",
    "load_api_client",
    "parse_kubeconfig",
    "parse_retry_after",
    "translate_api_error",
]
