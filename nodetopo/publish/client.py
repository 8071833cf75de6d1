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
import datetime
import email.utils
import http.client
import ipaddress
import json
import logging
import os
import re
import shutil
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import nodetopo
from nodetopo.errors import (
    ConflictError,
    ForbiddenError,
    InvalidError,
    NodetopoError,
    PublishError,
    TransientError,
    clip,
)

log = logging.getLogger(__name__)

APPLY_PATCH = "application/apply-patch+yaml"
FIELD_MANAGER = "nodetopo-agent"
REQUEST_TIMEOUT_SECONDS = 30.0
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
USER_AGENT = f"nodetopo/{nodetopo.__version__}"

#: what a kubeconfig may use with nodetopo (said in every refusal): what kubectl accepts, except
#: the deprecated auth-provider plugins and SOCKS/HTTPS proxies
SUPPORTED_AUTH = (
    "nodetopo accepts kubeconfig users with exec credential plugins (client.authentication.k8s.io "
    "v1/v1beta1: EKS, GKE, AKS), a bearer token (token, tokenFile), a client certificate "
    "(client-certificate[-data] + client-key[-data]), username/password, impersonation (as, "
    "as-uid, as-groups, as-user-extra), or no credentials; clusters with server, "
    "certificate-authority[-data], insecure-skip-tls-verify, tls-server-name and an http:// "
    "proxy-url (else $HTTPS_PROXY/$NO_PROXY). In a pod it uses the mounted service-account token."
)
#: kubeconfig user fields nodetopo refuses rather than ignore (they change who we are)
_UNSUPPORTED_USER_FIELDS = ("auth-provider",)
#: seconds an exec credential plugin may run
EXEC_TIMEOUT_SECONDS = 60.0
#: an exec credential is renewed this long before it expires
EXEC_EXPIRY_SKEW_SECONDS = 10.0


def load_api_client(kubeconfig: str | None = None, *, context: str | None = None) -> Any:
    """A ``kubernetes.client.ApiClient`` (for the extender's list/watch) configured by THE loader
    (``cluster_access``), so it accepts exactly what the stdlib client accepts: exec plugins (run
    again before the token expires, through the client's ``refresh_api_key_hook``), tokens, client
    certificates, basic auth, impersonation and an http proxy.
    """
    import kubernetes  # only here: importing nodetopo.publish must not load the official client

    access = cluster_access(kubeconfig, context=context)
    configuration = kubernetes.client.Configuration()
    configuration.host = access.server.rstrip("/")
    configuration.verify_ssl = not access.insecure_skip_tls_verify
    if access.tls_server_name:
        configuration.tls_server_name = access.tls_server_name
    files = _PemFiles()
    configuration.ssl_ca_cert = files.path(access.ca_data, "ca.crt") or access.ca_file
    configuration.cert_file = files.path(access.client_cert_data, "client.crt") or access.client_cert_file
    configuration.key_file = files.path(access.client_key_data, "client.key") or access.client_key_file
    _ssl_context(access)  # the same checks (and one-line errors) as the stdlib client
    if access.proxy_url:
        configuration.proxy = access.proxy_url
    if access.username is not None and access.password is not None:
        configuration.username, configuration.password = access.username, access.password
    credentials = (
        ExecCredentials(
            access.exec_plugin,
            server=access.server,
            ca_data=access.ca_data,
            insecure=not configuration.verify_ssl,
        )
        if access.exec_plugin is not None
        else None
    )
    token = _BearerToken(access.token, access.token_file)

    def refresh(config: Any) -> None:
        if credentials is not None:
            credential = credentials.get()
            if credential.client_cert_data is not None:
                config.cert_file = files.path(credential.client_cert_data, "exec-client.crt")
                config.key_file = files.path(credential.client_key_data, "exec-client.key")
            value = f"Bearer {credential.token}" if credential.token else token()
        else:
            value = token()
        config.api_key = {"authorization": value} if value else {}

    refresh(configuration)
    configuration.refresh_api_key_hook = refresh  # type: ignore[assignment]
    client: Any = kubernetes.client.ApiClient(configuration)
    for name, value in access.headers().items():
        if name != "Authorization":
            client.set_default_header(name, value)
    return client


class _PemFiles:
    """Key material the official client can only read from files: written once into a private
    directory (mode 0700, files 0600) that is removed when the process exits."""

    _directory: str | None = None

    def path(self, data: bytes | None, name: str) -> str | None:
        if data is None:
            return None
        if _PemFiles._directory is None:
            import atexit

            _PemFiles._directory = tempfile.mkdtemp(prefix="nodetopo-kube-")
            atexit.register(shutil.rmtree, _PemFiles._directory, True)
        target = os.path.join(_PemFiles._directory, name)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return target


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
    username: str | None = None
    password: str | None = dataclasses.field(default=None, repr=False)
    #: impersonation (kubeconfig ``as``, ``as-uid``, ``as-groups``, ``as-user-extra``)
    impersonate_user: str | None = None
    impersonate_uid: str | None = None
    impersonate_groups: tuple[str, ...] = ()
    impersonate_extra: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: an ``http://`` proxy (kubeconfig ``proxy-url``, else ``$HTTPS_PROXY`` unless ``$NO_PROXY``)
    proxy_url: str | None = None
    #: an exec credential plugin (``users[].user.exec``)
    exec_plugin: ExecPlugin | None = None

    def headers(self) -> dict[str, str]:
        """The request headers these settings add (basic auth, impersonation); not the bearer token."""
        headers: dict[str, str] = {}
        if self.username is not None and self.password is not None:
            basic = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
            headers["Authorization"] = f"Basic {basic}"
        if self.impersonate_user:
            headers["Impersonate-User"] = self.impersonate_user
        if self.impersonate_uid:
            headers["Impersonate-Uid"] = self.impersonate_uid
        if self.impersonate_groups:  # http.client sends one header; the apiserver splits on ","
            headers["Impersonate-Group"] = ",".join(self.impersonate_groups)
        for key, values in self.impersonate_extra:
            headers[f"Impersonate-Extra-{urllib.parse.quote(key, safe='')}"] = ",".join(values)
        return headers


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ExecPlugin:
    """``users[].user.exec``: a command that prints an ``ExecCredential`` (kubectl's
    client.authentication.k8s.io plugins: ``aws eks get-token``, ``gke-gcloud-auth-plugin``,
    ``kubelogin``). Run without a terminal (nodetopo is never interactive)."""

    command: str
    api_version: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = dataclasses.field(default=(), repr=False)
    install_hint: str | None = None
    provide_cluster_info: bool = False
    source: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class ExecCredential:
    """What an exec plugin returned: a token and/or a client certificate, and when it expires."""

    token: str | None = dataclasses.field(default=None, repr=False)
    client_cert_data: bytes | None = dataclasses.field(default=None, repr=False)
    client_key_data: bytes | None = dataclasses.field(default=None, repr=False)
    expires_at: float | None = None  #: Unix time; None: until the server rejects it (401)


class ExecPluginError(PublishError):
    """An exec credential plugin failed (not found, exit status, bad output). Retryable: a plugin
    that talks to a cloud's token service may fail for a while."""


def parse_exec_credential(text: str, *, source: str) -> ExecCredential:
    """The ``status`` of an ``ExecCredential`` a plugin printed. Never quotes the output (it holds
    credentials): errors name what is wrong, not the value."""
    try:
        document = json.loads(text)
    except ValueError as e:
        raise ExecPluginError(
            f"{source}: the plugin's output is not JSON (line {getattr(e, 'lineno', '?')})"
        ) from None
    if not isinstance(document, dict) or document.get("kind") != "ExecCredential":
        raise ExecPluginError(f"{source}: the plugin's output is not an ExecCredential object")
    status = document.get("status")
    if not isinstance(status, dict):
        raise ExecPluginError(f"{source}: the ExecCredential has no status")
    token = status.get("token") or None
    cert = status.get("clientCertificateData") or None
    key = status.get("clientKeyData") or None
    if (
        not isinstance(token, str | None)
        or not isinstance(cert, str | None)
        or not isinstance(key, str | None)
    ):
        raise ExecPluginError(f"{source}: status.token/clientCertificateData/clientKeyData must be strings")
    if (cert is None) != (key is None):
        raise ExecPluginError(f"{source}: the ExecCredential has a client certificate without its key")
    if token is None and cert is None:
        raise ExecPluginError(f"{source}: the ExecCredential has neither a token nor a client certificate")
    expires_at = None
    stamp = status.get("expirationTimestamp")
    if stamp:
        try:
            expires_at = datetime.datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
        except ValueError:
            raise ExecPluginError(
                f"{source}: expirationTimestamp {str(stamp)[:40]!r} is not RFC 3339"
            ) from None
    return ExecCredential(
        token=token,
        client_cert_data=cert.encode() if cert else None,
        client_key_data=key.encode() if key else None,
        expires_at=expires_at,
    )


class ExecCredentials:
    """Runs an ``ExecPlugin`` when a credential is needed and caches it until it expires (or the
    server answers 401: ``get(refresh=True)``), as client-go does."""

    def __init__(
        self, plugin: ExecPlugin, *, server: str, ca_data: bytes | None = None, insecure: bool = False
    ):
        self.plugin = plugin
        self._server = server
        self._ca_data = ca_data
        self._insecure = insecure
        self._cached: ExecCredential | None = None
        self._lock = threading.Lock()

    def get(self, *, refresh: bool = False) -> ExecCredential:
        with self._lock:
            cached = self._cached
            fresh = cached is not None and (
                cached.expires_at is None or cached.expires_at - EXEC_EXPIRY_SKEW_SECONDS > time.time()
            )
            if cached is not None and fresh and not refresh:
                return cached
            self._cached = self._run()
            return self._cached

    def _run(self) -> ExecCredential:
        plugin = self.plugin
        where = f"{plugin.source}: exec plugin {plugin.command!r}"
        spec: dict[str, Any] = {"interactive": False}
        if plugin.provide_cluster_info:
            cluster: dict[str, Any] = {"server": self._server, "insecure-skip-tls-verify": self._insecure}
            if self._ca_data:
                cluster["certificate-authority-data"] = base64.b64encode(self._ca_data).decode()
            spec["cluster"] = cluster
        info = {"apiVersion": plugin.api_version, "kind": "ExecCredential", "spec": spec}
        env = {**os.environ, **dict(plugin.env), "KUBERNETES_EXEC_INFO": json.dumps(info)}
        try:
            result = subprocess.run(
                [plugin.command, *plugin.args],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                env=env,
                timeout=EXEC_TIMEOUT_SECONDS,
                check=False,
            )
        except FileNotFoundError:
            hint = f" ({plugin.install_hint.strip()})" if plugin.install_hint else ""
            raise ExecPluginError(f"{where} is not installed (not found on PATH){hint}") from None
        except PermissionError:
            raise ExecPluginError(f"{where} is not executable") from None
        except subprocess.TimeoutExpired:
            raise ExecPluginError(f"{where} did not finish in {EXEC_TIMEOUT_SECONDS:g}s") from None
        if result.returncode != 0:
            lines = result.stderr.decode("utf-8", "replace").strip().splitlines()
            said = clip(lines[-1], 200) if lines else "no message"
            raise ExecPluginError(f"{where} exited {result.returncode}: {said}")
        credential = parse_exec_credential(result.stdout.decode("utf-8", "replace"), source=where)
        log.debug("exec plugin %s gave a credential (expires %s)", plugin.command, credential.expires_at)
        return credential


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
            f"{where}: user {user_name!r} uses {', '.join(refused)} (removed from kubectl; use an exec "
            f"plugin such as kubelogin), which nodetopo does not support. {SUPPORTED_AUTH}"
        )
    server = _text(cluster, "server")
    if server is None:
        raise KubeConfigError(f"{where}: cluster {cluster_name!r} has no server")
    proxy = _proxy_url(_text(cluster, "proxy-url"), server, where)
    ca_data = _decoded(cluster, "certificate-authority-data", where)
    insecure = bool(cluster.get("insecure-skip-tls-verify"))
    groups = user.get("as-groups") or []
    extra = user.get("as-user-extra") or {}
    if not isinstance(groups, list) or not isinstance(extra, Mapping):
        raise KubeConfigError(f"{where}: as-groups must be a list and as-user-extra a mapping")
    return ClusterAccess(
        server=server,
        source=where,
        ca_file=_text(cluster, "certificate-authority"),
        ca_data=ca_data,
        insecure_skip_tls_verify=insecure,
        tls_server_name=_text(cluster, "tls-server-name"),
        token=_text(user, "token"),
        token_file=_text(user, "tokenFile"),
        client_cert_file=_text(user, "client-certificate"),
        client_cert_data=_decoded(user, "client-certificate-data", where),
        client_key_file=_text(user, "client-key"),
        client_key_data=_decoded(user, "client-key-data", where),
        username=_text(user, "username"),
        password=_text(user, "password"),
        impersonate_user=_text(user, "as"),
        impersonate_uid=_text(user, "as-uid"),
        impersonate_groups=tuple(str(g) for g in groups),
        impersonate_extra=tuple(
            (str(k), tuple(str(v) for v in (vs if isinstance(vs, list) else [vs]))) for k, vs in extra.items()
        ),
        proxy_url=proxy,
        exec_plugin=_exec_plugin(user.get("exec"), where),
    )


def _exec_plugin(body: Any, where: str) -> ExecPlugin | None:
    if not body:
        return None
    if not isinstance(body, Mapping) or not body.get("command"):
        raise KubeConfigError(f"{where}: exec needs a command")
    version = str(body.get("apiVersion") or "")
    if version not in EXEC_API_VERSIONS:
        raise KubeConfigError(
            f"{where}: exec apiVersion {version[:80]!r} is not one of {', '.join(EXEC_API_VERSIONS)}"
        )
    if body.get("interactiveMode") == "Always":
        raise KubeConfigError(
            f"{where}: the exec plugin wants a terminal (interactiveMode: Always); nodetopo runs "
            "plugins without one: log in first, or use a non-interactive plugin mode"
        )
    env = []
    for item in body.get("env") or ():
        if not isinstance(item, Mapping) or "name" not in item:
            raise KubeConfigError(f"{where}: exec env entries need a name and a value")
        env.append((str(item["name"]), str(item.get("value", ""))))
    args = body.get("args") or []
    if not isinstance(args, list):
        raise KubeConfigError(f"{where}: exec args must be a list")
    return ExecPlugin(
        command=str(body["command"]),
        api_version=version,
        args=tuple(str(a) for a in args),
        env=tuple(env),
        install_hint=_text(body, "installHint"),
        provide_cluster_info=bool(body.get("provideClusterInfo")),
        source=where,
    )


EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")


def _proxy_url(configured: str | None, server: str, where: str) -> str | None:
    """The proxy for ``server``: kubeconfig ``proxy-url``, else ``$HTTPS_PROXY``/``$HTTP_PROXY``
    unless ``$NO_PROXY`` names the host (as kubectl). Only ``http://`` proxies (HTTP CONNECT)."""
    url = urllib.parse.urlsplit(server if "://" in server else f"https://{server}")
    if configured is None:
        configured = _environment_proxy(url.scheme or "https", url.hostname or "")
        if not configured:
            return None
        where = f"{where} (from ${(url.scheme or 'https').upper()}_PROXY)"
    proxy = urllib.parse.urlsplit(configured)
    if proxy.scheme != "http" or not proxy.hostname:
        raise KubeConfigError(
            f"{where}: proxy {proxy.scheme or configured[:40]!r}: nodetopo supports http:// proxies "
            f"(HTTP CONNECT) only, not {proxy.scheme or 'this'}. {SUPPORTED_AUTH}"
        )
    return configured


def _environment_proxy(scheme: str, host: str, environ: Mapping[str, str] | None = None) -> str | None:
    """``$HTTPS_PROXY`` (``$HTTP_PROXY`` for http) unless ``$NO_PROXY`` lists ``host`` (a name, a
    ``.suffix``, an IP, a CIDR or ``*``), as Go's ``http.ProxyFromEnvironment`` reads them."""
    env = os.environ if environ is None else environ
    name = f"{scheme.lower()}_proxy"
    proxy = env.get(name.upper()) or env.get(name)
    if not proxy:
        return None
    for entry in (env.get("NO_PROXY") or env.get("no_proxy") or "").split(","):
        entry = entry.strip().lower()
        if not entry:
            continue
        if (
            entry == "*"
            or host.lower() == entry.lstrip(".")
            or host.lower().endswith("." + entry.lstrip("."))
        ):
            return None
        try:
            if ipaddress.ip_address(host) in ipaddress.ip_network(entry, strict=False):
                return None
        except ValueError:
            continue
    return proxy


def _load_kubeconfig_file(path: Path) -> Any:
    """One kubeconfig file parsed. Errors say where and what, never the file's text: a YAML error
    on the line of a token would otherwise print the token (only line and column are quoted)."""
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise KubeConfigError(
            f"kubeconfig {path}: cannot read this Kubernetes configuration: {e.strerror or type(e).__name__}"
        ) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise KubeConfigError(
            f"kubeconfig {path}: not UTF-8 text (invalid byte at offset {e.start})"
        ) from None
    import yaml  # here: the in-cluster service account (a pod's path) reads no YAML

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = str(getattr(e, "problem", "") or "syntax error")
        raise KubeConfigError(f"kubeconfig {path}: not valid YAML{where}: {clip(problem, 80)}") from None


def kubeconfig_access(
    paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], *, context: str | None = None
) -> ClusterAccess:
    """The ``ClusterAccess`` of a kubeconfig file (or several, merged as kubectl merges them)."""
    files = [Path(paths)] if isinstance(paths, str | os.PathLike) else [Path(p) for p in paths]
    documents = []
    for path in files:
        document = _load_kubeconfig_file(path)
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
    try:
        if access.insecure_skip_tls_verify:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        elif access.ca_data is not None:
            pem = b"-----BEGIN" in access.ca_data
            data = access.ca_data.decode("ascii", "replace") if pem else access.ca_data
            context = ssl.create_default_context(cadata=data)
        else:
            context = ssl.create_default_context(cafile=access.ca_file)
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
                if data is None:
                    return str(path)
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
        self._context = _ssl_context(access) if self._https else None
        self._authorization = authorization or _BearerToken(access.token, access.token_file)
        self._headers = access.headers()
        self._proxy = urllib.parse.urlsplit(access.proxy_url) if access.proxy_url else None
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
            self._context = _ssl_context(
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
        with self._lock:
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
        with self._lock:  # the same credentials (exec plugin included), headers and proxy as request
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
    kubeconfig: str | None = None, *, context: str | None = None, timeout: float = REQUEST_TIMEOUT_SECONDS
) -> KubeConnection:
    """A ``KubeConnection`` chosen as ``load_api_client`` chooses: ``kubeconfig`` given, that
    file (and ``context``); otherwise the in-cluster service account, falling back to
    ``$KUBECONFIG`` / ``~/.kube/config`` when not running in a pod."""
    return KubeConnection(cluster_access(kubeconfig, context=context), timeout=timeout)


def cluster_access(kubeconfig: str | None = None, *, context: str | None = None) -> ClusterAccess:
    """THE loader, for every command that talks to the API (the stdlib client and the official
    one): ``kubeconfig`` (a path, or several joined by ``os.pathsep``), else ``$KUBECONFIG``: those
    files and ``context``; else, in a pod and without ``context``, the service account; else
    ``~/.kube/config``. ``KubeConfigError`` (one line) for what cannot be used."""
    kubeconfig = kubeconfig or os.environ.get("KUBECONFIG") or None
    if kubeconfig:
        return kubeconfig_access([p for p in kubeconfig.split(os.pathsep) if p], context=context)
    if context is None:
        try:
            return in_cluster_access()
        except KubeConfigError as e:
            log.debug("%s; using the default kubeconfig", e)
    paths = default_kubeconfig_paths()
    if not any(p.exists() for p in paths):
        raise KubeConfigError(
            "no API server configured: not running in a pod, and no kubeconfig "
            f"({os.pathsep.join(str(p) for p in paths)} does not exist; give --kubeconfig or set $KUBECONFIG)"
        )
    return kubeconfig_access(paths, context=context)


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
        retry_after = parse_retry_after(_header(headers, "Retry-After"))
        said = _status_message(body) or str(getattr(error, "reason", ""))
        message = f"{action}: HTTP {status}: {clip(said, 300)}"
        if status == 409:
            return ConflictError(message, status=status)
        if status in (401, 403):
            return ForbiddenError(message, status=status)
        if status in (400, 422):
            return InvalidError(message, status=status)
        if status == 429 or status >= 500:
            return TransientError(message, status=status, retry_after=retry_after)
        return PublishError(message, status=status, retry_after=retry_after)
    at = f" {server}" if server else ""
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
            raise translate_api_error(e, action=action, server=self.connection.access.server) from e
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

    def list_cluster_objects(self, group: str, version: str, plural: str) -> dict[str, Any]:
        """The list of a cluster-scoped custom resource (one page: ``items``)."""
        return self._must(self._call(f"list {plural}", "GET", f"/apis/{group}/{version}/{plural}"))

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
    "ApiStream",
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
