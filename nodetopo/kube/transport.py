"""The transport: HTTP(S) to the API server with the standard library. One keep-alive connection
per ``KubeConnection`` (TLS with the kubeconfig's CA, client certificate and ``tls-server-name``,
an HTTP CONNECT proxy, a per-request timeout), the bearer token re-read when it rotates, exec
credentials renewed before they expire and once more on a 401, and the client-side rate limit
(a ``TokenBucket``) every request takes a token from.
"""

from __future__ import annotations

import base64
import dataclasses
import http.client
import logging
import os
import shutil
import ssl
import tempfile
import threading
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import nodetopo
from nodetopo.host import Refused, read_regular_file
from nodetopo.kube.config import CREDENTIAL_FILE_LIMIT, ClusterAccess, cluster_access, read_config_file
from nodetopo.kube.errors import CredentialError, KubeConfigError
from nodetopo.kube.exec import ExecCredentials
from nodetopo.kube.pacing import TokenBucket

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_SECONDS = 30.0
USER_AGENT = f"nodetopo/{nodetopo.__version__}"


class BearerToken:
    """The ``Authorization`` header value: a static token, or a token file re-read when it changes
    (inode, size or mtime: a projected volume swaps a symlink). The file is read only when it is a
    regular file of at most ``CREDENTIAL_FILE_LIMIT`` bytes. A file that cannot be read keeps the
    last token read (or the static one) and raises ``CredentialError`` only when there is none."""

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
                    data = read_regular_file(self._file, limit=CREDENTIAL_FILE_LIMIT)
                    self._token = data.decode("utf-8", "replace").strip()
                    self._seen = seen
                    log.debug("bearer token read from %s", self._file)
            except (OSError, Refused) as e:
                if not self._token:
                    why = e.why if isinstance(e, Refused) else (e.strerror or type(e).__name__)
                    raise CredentialError(f"token file {self._file}: refused: {why}") from None
                log.warning("cannot re-read token file %s; using the last token", self._file)
        return f"Bearer {self._token}" if self._token else None


def ssl_context(access: ClusterAccess) -> ssl.SSLContext:
    """TLS settings of ``access``; client certificates given as data pass through a private
    temporary directory that is removed as soon as ``ssl`` has loaded them."""
    try:
        if access.insecure_skip_tls_verify:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        elif access.ca_data is not None:
            pem = b"-----BEGIN" in access.ca_data
            data = access.ca_data.decode("ascii", "replace") if pem else access.ca_data
            context = ssl.create_default_context(cadata=data)
        elif access.ca_file is not None:
            # read here, bounded: OpenSSL would read a device or a FIFO for ever
            data = read_config_file(access.ca_file, what="certificate-authority", limit=CREDENTIAL_FILE_LIMIT)
            pem = b"-----BEGIN" in data
            context = ssl.create_default_context(cadata=data.decode("ascii", "replace") if pem else data)
        else:
            context = ssl.create_default_context()
    except (ssl.SSLError, ValueError) as e:
        what = "certificate-authority-data" if access.ca_data is not None else "certificate-authority"
        raise KubeConfigError(
            f"{access.source}: {what} is not a PEM or DER CA certificate ({type(e).__name__})"
        ) from None
    except OSError as e:
        raise KubeConfigError(
            f"{access.source}: certificate-authority {access.ca_file}: {e.strerror or type(e).__name__}"
        ) from None
    has_cert = access.client_cert_data is not None or access.client_cert_file is not None
    has_key = access.client_key_data is not None or access.client_key_file is not None
    if has_cert != has_key:
        raise KubeConfigError(f"{access.source}: a client certificate needs both a certificate and a key")
    if has_cert:
        directory = tempfile.mkdtemp(prefix="nodetopo-tls-")  # mode 0700
        try:

            def materialize(data: bytes | None, path: str | None, name: str) -> str:
                if data is None:  # read here, bounded (see the CA above)
                    what = "client-certificate" if name == "client.crt" else "client-key"
                    data = read_config_file(str(path), what=what, limit=CREDENTIAL_FILE_LIMIT)
                target = os.path.join(directory, name)
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                return target

            cert = materialize(access.client_cert_data, access.client_cert_file, "client.crt")
            key = materialize(access.client_key_data, access.client_key_file, "client.key")
            try:
                context.load_cert_chain(cert, key)
            except ssl.SSLError as e:
                raise KubeConfigError(
                    f"{access.source}: the client certificate and key are not a PEM pair that matches "
                    f"({e.reason or type(e).__name__})"
                ) from None
            except OSError as e:
                raise KubeConfigError(
                    f"{access.source}: client certificate/key: {e.strerror or type(e).__name__}"
                ) from None
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


#: a reused keep-alive connection the server closed meanwhile fails with one of these before any
#: answer: the request is sent once more on a new connection
_STALE_CONNECTION = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)


class KubeConnection:
    """One keep-alive connection to the API server (opened on first use, reopened after an error
    or when the server closes it), one request at a time, ``timeout`` seconds per socket operation.

    ``authorization`` overrides the ``Authorization`` header source (default: ``access``'s token).
    ``bucket``, when given, is the client-side rate limit: every request (and every stream) first
    takes a token from it. ``requests`` counts the requests made.
    """

    def __init__(
        self,
        access: ClusterAccess,
        *,
        timeout: float = REQUEST_TIMEOUT_SECONDS,
        authorization: Callable[[], str | None] | None = None,
        bucket: TokenBucket | None = None,
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
        self._exec = (
            ExecCredentials(
                access.exec_plugin,
                server=access.server,
                ca_data=access.ca_data,
                insecure=access.insecure_skip_tls_verify,
            )
            if access.exec_plugin is not None and authorization is None
            else None
        )
        self._exec_cert: bytes | None = None  #: the exec client certificate the context holds
        self._context = ssl_context(access) if self._https else None
        self._authorization = authorization or BearerToken(access.token, access.token_file)
        self._headers = access.headers()
        self._proxy = urllib.parse.urlsplit(access.proxy_url) if access.proxy_url else None
        self._lock = threading.Lock()
        self._conn: http.client.HTTPConnection | None = None
        self._reused = False  #: the open connection has completed a request already
        self.bucket = bucket
        self.requests = 0  #: requests and streams started (each took a token when there is a bucket)

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
            self._conn = self._new_connection(self.timeout)
            self._reused = False
        return self._conn

    def _new_connection(self, timeout: float) -> http.client.HTTPConnection:
        """A connection to the server (through the proxy when there is one: HTTP CONNECT, then
        TLS to the server), not yet opened."""
        host, port = self._host, self._port
        if self._proxy is not None:
            host, port = str(self._proxy.hostname), self._proxy.port or 80
        connection: http.client.HTTPConnection
        if self._context is None:
            connection = http.client.HTTPConnection(host, port, timeout=timeout)
        else:
            connection = _TlsConnection(
                host,
                port,
                server_name=self.access.tls_server_name or self._host,
                timeout=timeout,
                context=self._context,
            )
        if self._proxy is not None:
            headers = {}
            if self._proxy.username is not None:
                user = urllib.parse.unquote(self._proxy.username)
                password = urllib.parse.unquote(self._proxy.password or "")
                basic = base64.b64encode(f"{user}:{password}".encode()).decode()
                headers["Proxy-Authorization"] = f"Basic {basic}"
            connection.set_tunnel(self._host, self._port, headers=headers)
        return connection

    def _credential(self, *, refresh: bool = False) -> str | None:
        """The ``Authorization`` value: the exec plugin's token (its client certificate goes into
        the TLS context, rebuilt when the plugin hands out a new one), else the static/file token."""
        if self._exec is None:
            return self._authorization()
        credential = self._exec.get(refresh=refresh)
        if credential.client_cert_data is not None and credential.client_cert_data != self._exec_cert:
            self._drop()
            self._context = ssl_context(
                dataclasses.replace(
                    self.access,
                    client_cert_data=credential.client_cert_data,
                    client_key_data=credential.client_key_data,
                    client_cert_file=None,
                    client_key_file=None,
                )
            )
            self._exec_cert = credential.client_cert_data
        return f"Bearer {credential.token}" if credential.token else self._authorization()

    def _take(self) -> None:
        """The rate limit: wait for a token (outside the connection lock)."""
        if self.bucket is not None:
            self.bucket.acquire()

    def check_credentials(self) -> None:
        """Obtain the credential now (run the exec plugin, read the token file) instead of at the
        first request: a command that serves only after its first list says at start, in one line,
        that it cannot authenticate. Raises ``ExecPluginError`` or ``OSError``."""
        with self._lock:
            self._credential()

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
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT, **self._headers}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        self._take()
        with self._lock:
            self.requests += 1
            authorization = self._credential()
            if authorization:
                headers["Authorization"] = authorization
            refreshed = self._exec is None
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
                if response.status == 401 and not refreshed:
                    # an exec credential the server no longer accepts: ask the plugin again, once
                    refreshed = True
                    authorization = self._credential(refresh=True)
                    if authorization:
                        headers["Authorization"] = authorization
                    continue
                return ApiResponse(
                    status=response.status,
                    reason=response.reason,
                    headers=dict(response.getheaders()),
                    data=data,
                )

    def stream(
        self, path: str, *, query: Mapping[str, str] | None = None, timeout: float | None = None
    ) -> ApiStream:
        """GET ``path`` on a connection of its own and return the open response, to be read as it
        arrives (a watch, a large list page); the caller closes it. ``timeout`` bounds each socket
        read. Raises like ``request``."""
        target = self._prefix + path + (f"?{urllib.parse.urlencode(query)}" if query else "")
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT, **self._headers}
        self._take()
        with self._lock:  # the same credentials (exec plugin included), headers and proxy as request
            self.requests += 1
            authorization = self._credential()
            connection = self._new_connection(timeout if timeout is not None else self.timeout)
        if authorization:
            headers["Authorization"] = authorization
        try:
            connection.request("GET", target, headers=headers)
            return ApiStream(connection, connection.getresponse())
        except BaseException:
            connection.close()
            raise


class ApiStream:
    """An open streaming response of ``KubeConnection.stream``: ``status``, ``read()`` the rest,
    ``chunks()`` as they arrive, ``close()``."""

    def __init__(self, connection: http.client.HTTPConnection, response: http.client.HTTPResponse) -> None:
        self._connection = connection
        self._response = response
        self.status = response.status
        self.reason = response.reason

    def read(self) -> bytes:
        return self._response.read()

    def chunks(self, size: int = 65536) -> Iterator[bytes]:
        while chunk := self._response.read1(size):
            yield chunk

    def close(self) -> None:
        self._response.close()
        self._connection.close()


def connect(
    kubeconfig: str | None = None,
    *,
    context: str | None = None,
    timeout: float = REQUEST_TIMEOUT_SECONDS,
    bucket: TokenBucket | None = None,
) -> KubeConnection:
    """A ``KubeConnection`` to the API server THE loader (``cluster_access``) finds: ``kubeconfig``
    given, that file (and ``context``); otherwise the in-cluster service account, falling back to
    ``$KUBECONFIG`` / ``~/.kube/config`` when not running in a pod. ``bucket``: the rate limit."""
    return KubeConnection(cluster_access(kubeconfig, context=context), timeout=timeout, bucket=bucket)
