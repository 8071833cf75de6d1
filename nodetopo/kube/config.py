"""Where the API server is and how to authenticate: THE loader (``cluster_access``), for every
command that talks to the API. The pod's service account (``in_cluster_access``) or a kubeconfig
(``kubeconfig_access``: several files merged as kubectl merges them, contexts, exec plugins,
tokens, client certificates, basic auth, impersonation, an http:// proxy), as a ``ClusterAccess``.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import ipaddress
import logging
import os
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from nodetopo.errors import clip
from nodetopo.host import Refused, read_regular_file
from nodetopo.kube.errors import KubeConfigError, redact_url, split_userinfo
from nodetopo.kube.exec import ExecPlugin, parse_exec_plugin

log = logging.getLogger(__name__)

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")

#: the largest kubeconfig file read (kubectl sets none; a merged kubeconfig of a thousand contexts
#: with embedded certificates is a few MiB)
KUBECONFIG_LIMIT = 8 * 1024 * 1024
#: the most YAML nodes (scalars, lists, mappings, aliases) and the deepest nesting of a kubeconfig
#: parsed: a thousand contexts with their clusters and users are ~50,000 nodes, 8 levels deep. A
#: certificate is one node however long: it is the count of nodes that costs memory (PyYAML keeps
#: ~300 bytes per node: 8 MiB of ``[],`` would be ~3 GB), so they are counted before any is built.
KUBECONFIG_MAX_NODES = 200_000
KUBECONFIG_MAX_DEPTH = 64
#: the largest credential file read: a token file, a CA bundle, a client certificate or key
CREDENTIAL_FILE_LIMIT = 1024 * 1024

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
    proxy_url: str | None = dataclasses.field(default=None, repr=False)
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
            entries = document.get(section) or ()
            if not isinstance(entries, list):
                raise KubeConfigError(f"kubeconfig: {section} must be a list")
            for entry in entries:
                if not isinstance(entry, Mapping):
                    continue
                name = _scalar(entry.get("name"), f"a name in {section}", "kubeconfig")
                if name not in names:
                    merged[section].append(entry)
                    names.add(name)
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
    value = _text(body, field, source)
    if not value:
        return None
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as e:
        raise KubeConfigError(f"{source}: {field} is not valid base64: {e}") from e


def _scalar(value: Any, field: str, where: str) -> str | None:
    """``value`` (a YAML scalar: text, a number, a boolean) as text; None when absent or empty.
    Anything else is a ``KubeConfigError``: ``str()`` of a list built from YAML aliases could
    expand to billions of items."""
    if value is None or value == "":
        return None
    if not isinstance(value, str | int | float | bool):
        raise KubeConfigError(f"{where}: {field} must be a string, not a {type(value).__name__}")
    return str(value)


def _text(body: Mapping[str, Any], field: str, where: str = "kubeconfig") -> str | None:
    return _scalar(body.get(field), field, where)


def parse_kubeconfig(config: Mapping[str, Any], *, context: str | None = None, source: str) -> ClusterAccess:
    """The ``ClusterAccess`` of ``context`` (default: ``current-context``) of a parsed kubeconfig
    whose file paths are already absolute. ``KubeConfigError`` for what nodetopo cannot use
    (exec plugins, auth providers, basic auth, impersonation, proxies), naming what it supports."""
    name = context or _text(config, "current-context", source)
    if not name:
        raise KubeConfigError(f"{source}: no current-context set and no context given")
    where = f"{source} (context {name!r})"
    ctx = _named(config, "contexts", name, source)
    cluster_name = _text(ctx, "cluster", where)
    if not cluster_name:
        raise KubeConfigError(f"{where}: the context names no cluster")
    cluster = _named(config, "clusters", cluster_name, source)
    user_name = _text(ctx, "user", where)
    user = _named(config, "users", user_name, source) if user_name else {}
    refused = [field for field in _UNSUPPORTED_USER_FIELDS if user.get(field)]
    if refused:
        raise KubeConfigError(
            f"{where}: user {user_name!r} uses {', '.join(refused)} (removed from kubectl; use an exec "
            f"plugin such as kubelogin), which nodetopo does not support. {SUPPORTED_AUTH}"
        )
    given = _text(cluster, "server", where)
    if given is None:
        raise KubeConfigError(f"{where}: cluster {cluster_name!r} has no server")
    # user:password@ in the server URL is basic auth (Go's HTTP client sends it when nothing else
    # authenticates); it is taken out of the URL here, so that no message ever shows it
    server, url_user, url_password = split_userinfo(given)
    username, password = _text(user, "username", where), _text(user, "password", where)
    if username is None and password is None:
        username, password = url_user, url_password
    proxy = _proxy_url(_text(cluster, "proxy-url", where), server, where)
    ca_data = _decoded(cluster, "certificate-authority-data", where)
    insecure = bool(cluster.get("insecure-skip-tls-verify"))
    groups = user.get("as-groups") or []
    extra = user.get("as-user-extra") or {}
    if not isinstance(groups, list) or not isinstance(extra, Mapping):
        raise KubeConfigError(f"{where}: as-groups must be a list and as-user-extra a mapping")

    def texts(values: Any, field: str) -> tuple[str, ...]:
        return tuple(
            str(_scalar(v, field, where) or "") for v in (values if isinstance(values, list) else [values])
        )

    return ClusterAccess(
        server=server,
        source=where,
        ca_file=_text(cluster, "certificate-authority", where),
        ca_data=ca_data,
        insecure_skip_tls_verify=insecure,
        tls_server_name=_text(cluster, "tls-server-name", where),
        token=_text(user, "token", where),
        token_file=_text(user, "tokenFile", where),
        client_cert_file=_text(user, "client-certificate", where),
        client_cert_data=_decoded(user, "client-certificate-data", where),
        client_key_file=_text(user, "client-key", where),
        client_key_data=_decoded(user, "client-key-data", where),
        username=username,
        password=password,
        impersonate_user=_text(user, "as", where),
        impersonate_uid=_text(user, "as-uid", where),
        impersonate_groups=texts(groups, "as-groups"),
        impersonate_extra=tuple(
            (str(_scalar(k, "as-user-extra", where)), texts(vs, "as-user-extra")) for k, vs in extra.items()
        ),
        proxy_url=proxy,
        exec_plugin=parse_exec_plugin(user.get("exec"), where),
    )


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
        shown = proxy.scheme or redact_url(configured)[:40]
        raise KubeConfigError(
            f"{where}: proxy {shown!r}: nodetopo supports http:// proxies "
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


def read_config_file(
    path: str | os.PathLike[str], *, what: str, limit: int, unreadable: str = "cannot read it"
) -> bytes:
    """The bytes of a file a kubeconfig (or the pod) names: a regular file of at most ``limit``
    bytes, read without blocking. A device (``/dev/zero``), a FIFO (its open would wait for a
    writer) or a larger file is a ``KubeConfigError``, one line naming ``what`` and why (a file
    that cannot be opened or read: ``unreadable``, then the system's reason)."""
    try:
        return read_regular_file(path, limit=limit)
    except Refused as e:
        raise KubeConfigError(f"{what} {os.fspath(path)}: refused: {e.why}") from None
    except OSError as e:
        raise KubeConfigError(
            f"{what} {os.fspath(path)}: {unreadable}: {e.strerror or type(e).__name__}"
        ) from None


def _load_kubeconfig_file(path: Path) -> Any:
    """One kubeconfig file parsed. Errors say where and what, never the file's text: a YAML error
    on the line of a token would otherwise print the token (only line and column are quoted)."""
    raw = read_config_file(
        path,
        what="kubeconfig",
        limit=KUBECONFIG_LIMIT,
        unreadable="cannot read this Kubernetes configuration",
    )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise KubeConfigError(
            f"kubeconfig {path}: not UTF-8 text (invalid byte at offset {e.start})"
        ) from None
    import yaml  # here: the in-cluster service account (a pod's path) reads no YAML

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: 5x faster
    try:
        _check_yaml_size(yaml.parse(text, Loader=loader), path)
        return yaml.load(text, Loader=loader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = str(getattr(e, "problem", "") or "syntax error")
        raise KubeConfigError(f"kubeconfig {path}: not valid YAML{where}: {clip(problem, 80)}") from None
    except RecursionError:
        raise KubeConfigError(f"kubeconfig {path}: not a kubeconfig: nested too deeply") from None


def _check_yaml_size(events: Iterable[Any], path: Path) -> None:
    """Refuse a document of more than ``KUBECONFIG_MAX_NODES`` nodes or nested deeper than
    ``KUBECONFIG_MAX_DEPTH``, from the parser's events (streamed: nothing is kept)."""
    import yaml

    starts = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
    ends = (yaml.MappingEndEvent, yaml.SequenceEndEvent)
    depth = 0
    for count, event in enumerate(events, 1):
        if isinstance(event, starts):
            depth += 1
            if depth > KUBECONFIG_MAX_DEPTH:
                raise KubeConfigError(
                    f"kubeconfig {path}: not a kubeconfig: nested more than {KUBECONFIG_MAX_DEPTH} deep"
                )
        elif isinstance(event, ends):
            depth -= 1
        if count > KUBECONFIG_MAX_NODES:
            raise KubeConfigError(
                f"kubeconfig {path}: not a kubeconfig: more than {KUBECONFIG_MAX_NODES} YAML nodes"
            )


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
