"""Cloud instance metadata: the provider's own topology of the machine, where it publishes one.

Off by default (a DaemonSet that calls a link-local endpoint on every node must be asked to). The
endpoint is configurable (tests serve recorded answers on 127.0.0.1) and every request has a short
timeout. Providers, and how their answer maps onto tiers (tier 0 nearest):

* ``gce``: ``GET {url}/computeMetadata/v1/instance/attributes/physical_host`` (header
  ``Metadata-Flavor: Google``) → ``/<cluster>/<rack>/<host>``: tier 0 = rack, tier 1 = cluster.
* ``aws``: EC2 ``DescribeInstanceTopology`` needs API credentials, which an agent on every node
  should not hold. The agent reads its instance id from IMDS (``GET {url}/latest/meta-data/instance-id``)
  and the topology document from ``{url}/instance-topology.json`` (served by whatever already holds
  the credentials: a controller, a sidecar, a cron job writing it). ``NetworkNodes`` is top-down: the
  last node is the one the instance is attached to → tier 0; the first → tier 2.
* ``oci``: ``GET {url}/opc/v2/host/rdmaTopologyData`` (header ``Authorization: Bearer Oracle``) →
  tier 0 ``customerLocalBlock``, tier 1 ``customerNetworkBlock``, tier 2 ``customerHPCIslandId``.
"""

from __future__ import annotations

import re
from typing import Any

from nodetopo.errors import ParseError
from nodetopo.jsonread import load_json
from nodetopo.model import ConditionReason, FabricTier, Facts, NetworkObservation, SourceStatus
from nodetopo.sources.base import Context, SourceResult, condition, failed, guarded
from nodetopo.sources.commands import Command

NAME = "fabric.cloud"
#: asks the metadata endpoint over HTTP: runs nothing
COMMANDS: tuple[Command, ...] = ()

PROVIDERS = ("gce", "aws", "oci")
GCE_PATH = "/computeMetadata/v1/instance/attributes/physical_host"
GCE_HEADERS = {"Metadata-Flavor": "Google"}
AWS_INSTANCE_ID_PATH = "/latest/meta-data/instance-id"
AWS_TOPOLOGY_PATH = "/instance-topology.json"
OCI_PATH = "/opc/v2/host/rdmaTopologyData"
OCI_HEADERS = {"Authorization": "Bearer Oracle"}

_HASHED = re.compile(r"[0-9A-Za-z_-]{1,128}")
_INSTANCE_ID = re.compile(r"i-[0-9a-z]{1,32}")


def parse_gce_physical_host(text: str, path: str = GCE_PATH) -> tuple[FabricTier, ...]:
    """``/<cluster>/<rack>/<host>`` → (rack, cluster). Anything else is a ``ParseError``."""
    value = text.strip()
    parts = value.split("/")
    if len(parts) != 4 or parts[0] != "" or not all(_HASHED.fullmatch(p) for p in parts[1:]):
        raise ParseError(NAME, path, f"expected '/<cluster>/<rack>/<host>', got {value[:80]!r}")
    _, cluster, rack, _host = parts
    return (
        FabricTier(level=0, id=rack, name=f"{cluster}/{rack}"),
        FabricTier(level=1, id=cluster, name=cluster),
    )


def parse_aws_instance_topology(
    text: str, instance_id: str, path: str = AWS_TOPOLOGY_PATH
) -> tuple[FabricTier, ...]:
    """The tiers of ``instance_id`` from a ``DescribeInstanceTopology`` answer (nearest first).

    An instance that is not in the document gives no tiers (an unknown fact, not a negative one).
    """
    data = _json(text, path)
    instances = data.get("Instances") if isinstance(data, dict) else None
    if not isinstance(instances, list):
        raise ParseError(NAME, path, "expected an object with an 'Instances' list")
    for entry in instances:
        if not isinstance(entry, dict) or entry.get("InstanceId") != instance_id:
            continue
        nodes = entry.get("NetworkNodes")
        if not isinstance(nodes, list) or not all(isinstance(n, str) and _HASHED.fullmatch(n) for n in nodes):
            raise ParseError(NAME, path, f"{instance_id}: NetworkNodes is not a list of node ids")
        return tuple(
            FabricTier(level=level, id=node, name=node) for level, node in enumerate(reversed(nodes))
        )
    return ()


def parse_aws_instance_id(text: str, path: str = AWS_INSTANCE_ID_PATH) -> str:
    value = text.strip()
    if _INSTANCE_ID.fullmatch(value) is None:
        raise ParseError(NAME, path, f"not an EC2 instance id: {value[:40]!r}")
    return value


_OCI_TIERS = ("customerLocalBlock", "customerNetworkBlock", "customerHPCIslandId")


def parse_oci_rdma_topology(text: str, path: str = OCI_PATH) -> tuple[FabricTier, ...]:
    """``rdmaTopologyData`` → (local block, network block, HPC island): OCIDs, used as given."""
    data = _json(text, path)
    if not isinstance(data, dict):
        raise ParseError(NAME, path, "expected a JSON object")
    tiers: list[FabricTier] = []
    for level, key in enumerate(_OCI_TIERS):
        value = data.get(key)
        if value is None:
            break
        if not isinstance(value, str) or not value.startswith("ocid1."):
            raise ParseError(NAME, path, f"{key} is not an OCID: {str(value)[:60]!r}")
        tiers.append(FabricTier(level=level, id=value, name=value))
    if not tiers:
        raise ParseError(NAME, path, f"none of {', '.join(_OCI_TIERS)} in the answer")
    return tuple(tiers)


def _json(text: str, path: str) -> Any:
    return load_json(text, source=NAME, path=path)


def parse_setting(text: str) -> tuple[str, str]:
    """``gce=http://169.254.169.254`` → ("gce", "http://169.254.169.254"); ValueError otherwise."""
    provider, sep, url = text.partition("=")
    provider = provider.strip().lower()
    if not sep or provider not in PROVIDERS or not url.startswith(("http://", "https://")):
        raise ValueError(f"cloud metadata must be <{'|'.join(PROVIDERS)}>=<http(s) URL>, got {text!r}")
    return provider, url.rstrip("/")


class MetadataError(Exception):
    def __init__(self, reason: ConditionReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def fetch(url: str, headers: dict[str, str], timeout: float, limit: int = 1 << 20) -> str:
    """GET ``url``: no proxies, no redirects (the metadata headers go to the endpoint configured and
    nowhere else), at most ``limit`` bytes, and ``timeout`` seconds for the whole request, from the
    connection to the last byte (an answer dripping a byte a second never resets it)."""
    # here, not at the top: the HTTP client costs ~30 ms of every cold `nodetopo discover`, and only
    # a node configured with a metadata endpoint ever fetches
    import contextlib
    import http.client
    import socket
    import threading
    import urllib.parse

    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise MetadataError(ConditionReason.DEGRADED, f"GET {url}: not an http(s) URL")
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    try:
        connection = kind(parts.hostname, parts.port, timeout=timeout)
    except ValueError as e:  # a port that is not a number
        raise MetadataError(ConditionReason.DEGRADED, f"GET {url}: {e}") from None
    expired = threading.Event()

    def expire() -> None:  # the deadline: wake whatever read is waiting, whatever it has read so far
        expired.set()
        sock = connection.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    too_late = MetadataError(ConditionReason.TIMEOUT, f"GET {url}: no answer within {timeout:g}s")
    deadline = threading.Timer(timeout, expire)
    deadline.daemon = True
    deadline.start()
    try:
        connection.request("GET", target, headers=headers)
        response = connection.getresponse()
        if 300 <= response.status < 400:
            why = f"GET {url}: HTTP {response.status}: a redirect, not followed (metadata never moves)"
            raise MetadataError(ConditionReason.UNAVAILABLE, why)
        if not 200 <= response.status < 300:
            raise MetadataError(ConditionReason.UNAVAILABLE, f"GET {url}: HTTP {response.status}")
        body = response.read(limit + 1)
        if expired.is_set():
            raise too_late
    except MetadataError:
        raise
    except (TimeoutError, OSError, http.client.HTTPException) as e:
        if expired.is_set() or isinstance(e, TimeoutError):  # socket.timeout is TimeoutError
            raise too_late from None
        raise MetadataError(ConditionReason.UNAVAILABLE, f"GET {url}: {e or type(e).__name__}") from None
    finally:
        deadline.cancel()
        connection.close()
    if len(body) > limit:
        raise MetadataError(ConditionReason.PARSE_ERROR, f"GET {url}: answer larger than {limit} bytes")
    return body.decode("utf-8", errors="replace")


def read_cloud(setting: str, *, timeout: float) -> Facts:
    try:
        provider, base = parse_setting(setting)
    except ValueError as e:  # a configuration mistake: say so, in the source's own words
        return failed(NAME, ConditionReason.DEGRADED, str(e))
    try:
        if provider == "gce":
            url = base + GCE_PATH
            tiers = parse_gce_physical_host(fetch(url, GCE_HEADERS, timeout), url)
        elif provider == "oci":
            url = base + OCI_PATH
            tiers = parse_oci_rdma_topology(fetch(url, OCI_HEADERS, timeout), url)
        else:
            id_url = base + AWS_INSTANCE_ID_PATH
            instance = parse_aws_instance_id(fetch(id_url, {}, timeout), id_url)
            url = base + AWS_TOPOLOGY_PATH
            tiers = parse_aws_instance_topology(fetch(url, {}, timeout), instance, url)
    except MetadataError as e:
        return failed(NAME, e.reason, f"{provider}: {e}")
    observation = NetworkObservation(source=NAME, tiers=tiers)
    if not tiers:
        return Facts(
            network=(observation,),
            sources=(
                SourceStatus(
                    name=NAME, ok=False, message=f"Unavailable: {provider}: this instance is not in {url}"
                ),
            ),
            conditions=(
                condition(NAME, ConditionReason.UNAVAILABLE, f"{provider}: this instance is not in {url}"),
            ),
        )
    return Facts(
        network=(observation,),
        sources=(SourceStatus(name=NAME, ok=True, message=f"{provider}: {len(tiers)} tier(s) from {url}"),),
    )


def collect(ctx: Context) -> SourceResult:
    """Cloud metadata, only when ``ctx.cloud_metadata`` is set (off by default: nothing runs)."""
    setting = ctx.cloud_metadata
    if setting is None:
        return SourceResult(name=NAME, facts=Facts())
    return guarded(NAME, lambda: read_cloud(setting, timeout=ctx.cloud_timeout_s))
