"""Exec credential plugins (kubeconfig ``users[].user.exec``): kubectl's client.authentication.k8s.io
plugins (``aws eks get-token``, ``gke-gcloud-auth-plugin``, ``kubelogin``), parsed from a kubeconfig,
run without a terminal and cached until the credential expires.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import json
import logging
import os
import threading
import time
from collections.abc import Mapping
from typing import Any

from nodetopo.errors import clip
from nodetopo.host import CommandNotFound, CommandOutputRefused, CommandTimeout, SubprocessRunner
from nodetopo.kube.errors import ExecPluginError, KubeConfigError

log = logging.getLogger(__name__)

#: seconds an exec credential plugin may run
EXEC_TIMEOUT_SECONDS = 60.0
#: an exec credential is renewed this long before it expires
EXEC_EXPIRY_SKEW_SECONDS = 10.0
#: the most bytes of a plugin's output read (an ExecCredential with a client certificate chain is a
#: few KiB); a plugin that prints more is stopped and its output never held
EXEC_OUTPUT_LIMIT = 1024 * 1024
#: the ExecCredential versions nodetopo speaks
EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")


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


def parse_exec_credential(text: str, *, source: str) -> ExecCredential:
    """The ``status`` of an ``ExecCredential`` a plugin printed. Never quotes the output (it holds
    credentials): errors name what is wrong, not the value."""
    try:
        document = json.loads(text)
    except RecursionError:
        raise ExecPluginError(f"{source}: the plugin's output is not JSON (nested too deeply)") from None
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
        runner = SubprocessRunner(env, output_limit=EXEC_OUTPUT_LIMIT)  # read as it comes, bounded
        try:
            result = runner.run([plugin.command, *plugin.args], timeout=EXEC_TIMEOUT_SECONDS)
        except CommandNotFound:
            hint = f" ({plugin.install_hint.strip()})" if plugin.install_hint else ""
            raise ExecPluginError(f"{where} is not installed (not found on PATH){hint}") from None
        except PermissionError:
            raise ExecPluginError(f"{where} is not executable") from None
        except OSError as e:
            raise ExecPluginError(f"{where} cannot be run: {e.strerror or type(e).__name__}") from None
        except CommandTimeout:
            raise ExecPluginError(f"{where} did not finish in {EXEC_TIMEOUT_SECONDS:g}s") from None
        except CommandOutputRefused:
            raise ExecPluginError(
                f"{where} printed more than {EXEC_OUTPUT_LIMIT} bytes: stopped, its output not read"
            ) from None
        if result.returncode != 0:
            lines = result.stderr.strip().splitlines()
            said = clip(lines[-1], 200) if lines else "no message"
            raise ExecPluginError(f"{where} exited {result.returncode}: {said}")
        credential = parse_exec_credential(result.stdout, source=where)
        log.debug("exec plugin %s gave a credential (expires %s)", plugin.command, credential.expires_at)
        return credential


def parse_exec_plugin(body: Any, where: str) -> ExecPlugin | None:
    """The ``ExecPlugin`` of a kubeconfig user's ``exec`` (None when there is none);
    ``KubeConfigError`` for one nodetopo cannot run."""
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
        install_hint=str(body["installHint"]) if body.get("installHint") not in (None, "") else None,
        provide_cluster_info=bool(body.get("provideClusterInfo")),
        source=where,
    )
