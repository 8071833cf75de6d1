"""The official ``kubernetes`` client configured by THE loader (``nodetopo.kube.config``): the one
module of nodetopo that imports it. No nodetopo command uses it (docs/architecture.md: the
standard-library transport is the one client); ``load_api_client`` is for code that wants the
official client's generated API with exactly the settings nodetopo's commands accept.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

from nodetopo.kube.config import cluster_access
from nodetopo.kube.exec import ExecCredentials
from nodetopo.kube.transport import BearerToken, ssl_context


def load_api_client(kubeconfig: str | None = None, *, context: str | None = None) -> Any:
    """A ``kubernetes.client.ApiClient`` configured by THE loader (``cluster_access``), so it
    accepts exactly what the stdlib client accepts: exec plugins (run again before the token
    expires, through the client's ``refresh_api_key_hook``), tokens, client certificates, basic
    auth, impersonation and an http proxy.
    """
    import kubernetes  # only here: importing nodetopo.kube must not load the official client

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
    ssl_context(access)  # the same checks (and one-line errors) as the stdlib client
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
    token = BearerToken(access.token, access.token_file)

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
