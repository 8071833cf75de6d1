"""The Kubernetes API client, and the one place its exceptions become ``nodetopo.errors`` types.

Every request nodetopo's publishers make goes through ``ApiSession``, which:

* builds on ``kubernetes.client.ApiClient`` (from in-cluster config or a kubeconfig,
  ``load_api_client``);
* speaks plain dicts (``_preload_content=False`` + ``json.loads``), so callers never depend on the
  generated model classes, which differ between client releases;
* translates ``kubernetes.client.ApiException`` and connection errors exactly once
  (``translate_api_error``), chaining the original with ``raise ... from e``.
"""

from __future__ import annotations

import contextlib
import email.utils
import json
import logging
import time
from collections.abc import Iterator, Mapping
from typing import Any

import kubernetes
import urllib3

from nodetopo.errors import (
    ConflictError,
    ForbiddenError,
    InvalidError,
    PublishError,
    TransientError,
)

log = logging.getLogger(__name__)

APPLY_PATCH = "application/apply-patch+yaml"
FIELD_MANAGER = "nodetopo-agent"
REQUEST_TIMEOUT_SECONDS = 30.0


def load_api_client(kubeconfig: str | None = None, *, context: str | None = None) -> Any:
    """A ``kubernetes.client.ApiClient``.

    ``kubeconfig`` given: that file (and ``context``). Otherwise the in-cluster service account
    (``KUBERNETES_SERVICE_HOST`` + the mounted token), falling back to ``$KUBECONFIG`` /
    ``~/.kube/config`` when not running in a pod.
    """
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
    """The ``nodetopo.errors`` type for a client exception (the caller raises it ``from`` ``error``).

    409 → ConflictError; 401/403 → ForbiddenError; 400/422 → InvalidError; 429, 5xx and
    connection failures → TransientError (with ``retry_after`` from the Retry-After header);
    anything else (404 ...) → PublishError, which is retryable.
    """
    if isinstance(error, kubernetes.client.ApiException):
        status = int(error.status) if error.status is not None else None
        headers: Mapping[str, str] = error.headers or {}
        retry_after = parse_retry_after(headers.get("Retry-After"))
        message = f"{action}: HTTP {status}: {_status_message(error.body) or error.reason}"
        if status == 409:
            return ConflictError(message, status=status)
        if status in (401, 403):
            return ForbiddenError(message, status=status)
        if status in (400, 422):
            return InvalidError(message, status=status)
        if status == 429 or (status is not None and status >= 500):
            return TransientError(message, status=status, retry_after=retry_after)
        return PublishError(message, status=status, retry_after=retry_after)
    return TransientError(f"{action}: {type(error).__name__}: {error}")


@contextlib.contextmanager
def api_errors(action: str) -> Iterator[None]:
    """Translate client errors raised in the block (``raise translated from e``)."""
    try:
        yield
    except kubernetes.client.ApiException as e:
        raise translate_api_error(e, action=action) from e
    except (urllib3.exceptions.HTTPError, OSError) as e:
        raise translate_api_error(e, action=action) from e


class ApiSession:
    """The few API calls the publishers make, as dicts in and out, errors translated.

    ``api_client`` is a ``kubernetes.client.ApiClient``. ``field_manager`` names every apply.
    """

    def __init__(self, api_client: Any, *, field_manager: str = FIELD_MANAGER) -> None:
        self.api_client = api_client
        self.field_manager = field_manager
        self._core = kubernetes.client.CoreV1Api(api_client)
        self._custom = kubernetes.client.CustomObjectsApi(api_client)

    @staticmethod
    def _json(response: Any) -> dict[str, Any]:
        data = json.loads(response.data)
        if not isinstance(data, dict):
            raise TransientError(f"unexpected API response: {str(data)[:200]}")
        return data

    def read_node(self, name: str) -> dict[str, Any]:
        with api_errors(f"read Node {name}"):
            response = self._core.read_node(
                name, _preload_content=False, _request_timeout=REQUEST_TIMEOUT_SECONDS
            )
            return self._json(response)

    def apply_node(self, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        with api_errors(f"apply labels of Node {name}"):
            response = self._core.patch_node(
                name,
                dict(body),
                field_manager=self.field_manager,
                force=False,
                _content_type=APPLY_PATCH,
                _preload_content=False,
                _request_timeout=REQUEST_TIMEOUT_SECONDS,
            )
            return self._json(response)

    def read_cluster_object(self, group: str, version: str, plural: str, name: str) -> dict[str, Any] | None:
        """The object, or None when it does not exist (404)."""
        try:
            response = self._custom.get_cluster_custom_object(
                group, version, plural, name, _preload_content=False, _request_timeout=REQUEST_TIMEOUT_SECONDS
            )
            return self._json(response)
        except kubernetes.client.ApiException as e:
            if e.status == 404:
                return None
            raise translate_api_error(e, action=f"read {plural}/{name}") from e
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise translate_api_error(e, action=f"read {plural}/{name}") from e

    def read_namespaced_object(
        self, group: str, version: str, namespace: str, plural: str, name: str
    ) -> dict[str, Any] | None:
        """The object, or None when it does not exist (404)."""
        action = f"read {plural}/{namespace}/{name}"
        try:
            response = self._custom.get_namespaced_custom_object(
                group,
                version,
                namespace,
                plural,
                name,
                _preload_content=False,
                _request_timeout=REQUEST_TIMEOUT_SECONDS,
            )
            return self._json(response)
        except kubernetes.client.ApiException as e:
            if e.status == 404:
                return None
            raise translate_api_error(e, action=action) from e
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise translate_api_error(e, action=action) from e

    def apply_cluster_object(
        self, group: str, version: str, plural: str, name: str, body: Mapping[str, Any], *, status: bool
    ) -> dict[str, Any]:
        """Server-side apply of a cluster-scoped custom object (``status``: its status subresource)."""
        where = f"{plural}/{name}{'/status' if status else ''}"
        patch = (
            self._custom.patch_cluster_custom_object_status
            if status
            else self._custom.patch_cluster_custom_object
        )
        with api_errors(f"apply {where}"):
            response = patch(
                group,
                version,
                plural,
                name,
                dict(body),
                field_manager=self.field_manager,
                force=False,
                _content_type=APPLY_PATCH,
                _preload_content=False,
                _request_timeout=REQUEST_TIMEOUT_SECONDS,
            )
            return self._json(response)

    def apply_namespaced_object(
        self, group: str, version: str, namespace: str, plural: str, name: str, body: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Server-side apply of a namespaced custom object."""
        with api_errors(f"apply {plural}/{namespace}/{name}"):
            response = self._custom.patch_namespaced_custom_object(
                group,
                version,
                namespace,
                plural,
                name,
                dict(body),
                field_manager=self.field_manager,
                force=False,
                _content_type=APPLY_PATCH,
                _preload_content=False,
                _request_timeout=REQUEST_TIMEOUT_SECONDS,
            )
            return self._json(response)
