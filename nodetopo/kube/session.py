"""The session: the few API calls nodetopo makes, plain dicts in and out, every failure translated
once (``translate_api_error``, ``raise ... from e``).
"""

from __future__ import annotations

import http.client
import json
import urllib.parse
from collections.abc import Mapping
from typing import Any, Protocol

from nodetopo.errors import ParseError, TransientError
from nodetopo.jsonread import load_json
from nodetopo.kube.errors import ApiStatusError, translate_api_error
from nodetopo.kube.pacing import TokenBucket
from nodetopo.kube.transport import KubeConnection

APPLY_PATCH = "application/apply-patch+yaml"
FIELD_MANAGER = "nodetopo-agent"


def quote_segment(segment: str) -> str:
    """``segment`` (a name, a namespace) quoted for a URL path."""
    return urllib.parse.quote(segment, safe="")


class Session(Protocol):
    """The calls nodetopo's writers make: ``ApiSession``, or the dry run's
    ``nodetopo.publish.dryrun.PrintingSession``."""

    field_manager: str

    def read_node(self, name: str) -> dict[str, Any]: ...

    def apply_node(self, name: str, body: Mapping[str, Any], *, force: bool = False) -> dict[str, Any]: ...

    def read_cluster_object(
        self, group: str, version: str, plural: str, name: str
    ) -> dict[str, Any] | None: ...

    def apply_cluster_object(
        self,
        group: str,
        version: str,
        plural: str,
        name: str,
        body: Mapping[str, Any],
        *,
        status: bool,
        force: bool = False,
    ) -> dict[str, Any]: ...

    def read_namespaced_object(
        self, group: str, version: str, namespace: str, plural: str, name: str
    ) -> dict[str, Any] | None: ...

    def apply_namespaced_object(
        self,
        group: str,
        version: str,
        namespace: str,
        plural: str,
        name: str,
        body: Mapping[str, Any],
        *,
        force: bool = False,
    ) -> dict[str, Any]: ...

    def create_event(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]: ...


class ApiSession:
    """The few API calls the publishers make, as dicts in and out, errors translated.

    ``connection`` is a ``KubeConnection`` (``connect()``); an official
    ``kubernetes.client.ApiClient`` is accepted too and its configuration used for a
    ``KubeConnection``. ``field_manager`` names every apply; an apply is ``force=false`` unless
    the caller says ``force`` (``nodetopo.publish.ownership``, for fields nodetopo owns).
    """

    def __init__(self, connection: KubeConnection | Any, *, field_manager: str = FIELD_MANAGER) -> None:
        if not isinstance(connection, KubeConnection):
            connection = KubeConnection.from_client_configuration(connection.configuration)
        self.connection: KubeConnection = connection
        self.field_manager = field_manager

    @property
    def requests(self) -> int:
        """Requests made through this session's connection."""
        return self.connection.requests

    def close(self) -> None:
        self.connection.close()

    def _call(
        self,
        action: str,
        method: str,
        path: str,
        *,
        apply: Mapping[str, Any] | None = None,
        force: bool = False,
        create: Mapping[str, Any] | None = None,
        missing_ok: bool = False,
        query: Mapping[str, str] | None = None,
    ) -> dict[str, Any] | None:
        """One request; its JSON object, None for 404 when ``missing_ok``; errors translated.
        ``apply``: a server-side apply of that body (``force`` as given); ``create``: a body sent as
        JSON (a POST's object, a DELETE's options); ``query``: the query of a plain GET."""
        try:
            if apply is not None:
                response = self.connection.request(
                    method,
                    path,
                    query={"fieldManager": self.field_manager, "force": "true" if force else "false"},
                    body=json.dumps(dict(apply)).encode(),  # JSON is YAML
                    content_type=APPLY_PATCH,
                )
            elif create is not None:
                response = self.connection.request(method, path, body=json.dumps(dict(create)).encode())
            elif query is not None:
                response = self.connection.request(method, path, query=query)
            else:
                response = self.connection.request(method, path)
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
        # The bounded reader without its bounds' costs: the read is whole (an unpaged list of every
        # NodeTopology has no useful length ceiling) and a list of thousands of objects is decoded
        # once without a measuring pass; nesting deeper than the decoder recurses is a typed error.
        try:
            text = response.data.decode("utf-8")
            data = load_json(text, source="kube", path=action, max_depth=None, max_chars=None)
        except (UnicodeDecodeError, ParseError) as e:
            why = e.detail if isinstance(e, ParseError) else "not UTF-8"
            raise TransientError(
                f"{action}: the answer is not JSON ({why}): {response.data[:200]!r}"
            ) from None
        if not isinstance(data, dict):
            raise TransientError(f"{action}: unexpected API response: {str(data)[:200]}")
        return data

    def _must(self, result: dict[str, Any] | None) -> dict[str, Any]:
        assert result is not None  # only missing_ok calls return None
        return result

    def read_node(self, name: str) -> dict[str, Any]:
        return self._must(self._call(f"read Node {name}", "GET", f"/api/v1/nodes/{quote_segment(name)}"))

    def apply_node(self, name: str, body: Mapping[str, Any], *, force: bool = False) -> dict[str, Any]:
        path = f"/api/v1/nodes/{quote_segment(name)}"
        return self._must(self._call(f"apply labels of Node {name}", "PATCH", path, apply=body, force=force))

    def read_cluster_object(self, group: str, version: str, plural: str, name: str) -> dict[str, Any] | None:
        """The object, or None when it does not exist (404)."""
        path = f"/apis/{group}/{version}/{plural}/{quote_segment(name)}"
        return self._call(f"read {plural}/{name}", "GET", path, missing_ok=True)

    def list_cluster_objects(self, group: str, version: str, plural: str) -> dict[str, Any]:
        """The list of a cluster-scoped custom resource (one page: ``items``)."""
        return self._must(self._call(f"list {plural}", "GET", f"/apis/{group}/{version}/{plural}"))

    def list_page(
        self, path: str, *, what: str, limit: int, field_selector: str, continue_token: str | None = None
    ) -> dict[str, Any]:
        """One page (``limit`` items at most) of the collection at ``path``, as the server answered it."""
        query = {"limit": str(limit), "fieldSelector": field_selector}
        if continue_token:
            query["continue"] = continue_token
        return self._must(self._call(f"list {what}", "GET", path, query=query))

    def delete_cluster_object(
        self, group: str, version: str, plural: str, name: str, *, uid: str | None = None
    ) -> dict[str, Any] | None:
        """Delete a cluster-scoped custom object (only the one with ``uid``, when given: a 409 if the
        name now holds another); None when it was already gone (404)."""
        path = f"/apis/{group}/{version}/{plural}/{quote_segment(name)}"
        options: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if uid:
            options["preconditions"] = {"uid": uid}
        return self._call(f"delete {plural}/{name}", "DELETE", path, create=options, missing_ok=True)

    def read_namespaced_object(
        self, group: str, version: str, namespace: str, plural: str, name: str
    ) -> dict[str, Any] | None:
        """The object, or None when it does not exist (404)."""
        path = f"/apis/{group}/{version}/namespaces/{quote_segment(namespace)}/{plural}/{quote_segment(name)}"
        return self._call(f"read {plural}/{namespace}/{name}", "GET", path, missing_ok=True)

    def apply_cluster_object(
        self,
        group: str,
        version: str,
        plural: str,
        name: str,
        body: Mapping[str, Any],
        *,
        status: bool,
        force: bool = False,
    ) -> dict[str, Any]:
        """Server-side apply of a cluster-scoped custom object (``status``: its status subresource)."""
        where = f"{plural}/{name}{'/status' if status else ''}"
        path = f"/apis/{group}/{version}/{plural}/{quote_segment(name)}{'/status' if status else ''}"
        return self._must(self._call(f"apply {where}", "PATCH", path, apply=body, force=force))

    def apply_namespaced_object(
        self,
        group: str,
        version: str,
        namespace: str,
        plural: str,
        name: str,
        body: Mapping[str, Any],
        *,
        force: bool = False,
    ) -> dict[str, Any]:
        """Server-side apply of a namespaced custom object."""
        path = f"/apis/{group}/{version}/namespaces/{quote_segment(namespace)}/{plural}/{quote_segment(name)}"
        action = f"apply {plural}/{namespace}/{name}"
        return self._must(self._call(action, "PATCH", path, apply=body, force=force))

    def read_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Pod, or None when it does not exist (404)."""
        path = f"/api/v1/namespaces/{quote_segment(namespace)}/pods/{quote_segment(name)}"
        return self._call(f"read Pod {namespace}/{name}", "GET", path, missing_ok=True)

    def list_pods(self, namespace: str, label_selector: str) -> dict[str, Any]:
        """The Pods of ``namespace`` that match ``label_selector`` (one page: ``items``)."""
        path = f"/api/v1/namespaces/{quote_segment(namespace)}/pods"
        action = f"list Pods in {namespace} ({label_selector})"
        return self._must(self._call(action, "GET", path, query={"labelSelector": label_selector}))

    def create_event(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """POST a core/v1 Event (``nodetopo.kube.events.event_body``) in ``namespace``."""
        path = f"/api/v1/namespaces/{quote_segment(namespace)}/events"
        return self._must(self._call(f"create Event in {namespace}", "POST", path, create=body))


class RateLimitedSession(ApiSession):
    """An ``ApiSession`` whose connection takes a token from ``bucket`` before every request: the
    rate limit lives in the transport (``KubeConnection.bucket``); this names the pairing.

    ``connection``: a ``KubeConnection`` (``connect()``), or an official ``ApiClient`` whose
    configuration is used (see ``ApiSession``)."""

    def __init__(self, connection: KubeConnection | Any, bucket: TokenBucket, **kwargs: Any) -> None:
        super().__init__(connection, **kwargs)
        self.connection.bucket = bucket

    @property
    def bucket(self) -> TokenBucket | None:
        return self.connection.bucket
