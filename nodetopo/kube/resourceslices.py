"""This node's ResourceSlices (``resource.k8s.io/v1``, served by default since Kubernetes 1.34): which
hardware each DRA device name stands for.

``parse_resource_slice_page`` is pure (one list page → ``SliceDevice``s and the continue token);
``read_resource_slices`` lists ``spec.nodeName=<node>`` in pages of ``PAGE_SIZE``, at most ``MAX_PAGES``
pages, and answers the devices, or why they could not be read (a str: RBAC, the API group not served,
an answer it cannot read): an unknown mapping, never an empty one.

Per device it keeps the name, the driver and pool, and the attributes that identify a GPU: ``uuid``
(unqualified, in the driver's domain, or qualified ``<driver>/uuid``) and the standard
``resource.kubernetes.io/pciBusID``. Of a pool published in several generations only the newest
generation's slices count (older ones are being replaced).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, Protocol

from nodetopo.errors import ParseError, PublishError
from nodetopo.model import SliceDevice

GROUP_VERSION = "resource.k8s.io/v1"
PATH = f"/apis/{GROUP_VERSION}/resourceslices"
PCI_BUS_ID = "resource.kubernetes.io/pciBusID"
#: slices per page, and pages at most: a node publishes a few slices per driver
PAGE_SIZE = 100
MAX_PAGES = 10
SOURCE = "resourceslices"


class PageLister(Protocol):
    def list_page(
        self, path: str, *, what: str, limit: int, field_selector: str, continue_token: str | None = None
    ) -> dict[str, Any]: ...


def _mapping(value: object, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ParseError(SOURCE, where, f"expected an object, got {type(value).__name__}")
    return value


def _string(value: object, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise ParseError(SOURCE, where, f"expected a non-empty string, got {value!r:.80}")
    return value


def _attribute(attributes: Mapping[str, Any], driver: str, name: str) -> str | None:
    """A string attribute by its unqualified name (the driver's domain) or qualified one."""
    for key in (name, f"{driver}/{name}"):
        value = attributes.get(key)
        if isinstance(value, Mapping) and isinstance(value.get("string"), str) and value["string"]:
            return str(value["string"])
    return None


def parse_resource_slice_page(
    page: object, *, node: str, drivers: Collection[str] | None = None
) -> tuple[list[tuple[int, SliceDevice]], str | None]:
    """The devices of one list page (with their pool generation) whose slice is ``node``'s (and of one
    of ``drivers`` when given), and the page's continue token. ``ParseError`` on a malformed answer."""
    body = _mapping(page, "list")
    items = body.get("items") or []
    if not isinstance(items, list):
        raise ParseError(SOURCE, "list.items", "expected a list")
    found: list[tuple[int, SliceDevice]] = []
    for i, item in enumerate(items):
        where = f"items[{i}]"
        spec = _mapping(_mapping(item, where).get("spec"), f"{where}.spec")
        if spec.get("nodeName") != node:
            continue
        driver = _string(spec.get("driver"), f"{where}.spec.driver")
        if drivers is not None and driver not in drivers:
            continue
        pool = _mapping(spec.get("pool"), f"{where}.spec.pool")
        pool_name = _string(pool.get("name"), f"{where}.spec.pool.name")
        generation = pool.get("generation", 0)
        if not isinstance(generation, int) or isinstance(generation, bool):
            detail = f"expected an integer: {generation!r:.40}"
            raise ParseError(SOURCE, f"{where}.spec.pool.generation", detail)
        devices = spec.get("devices") or []
        if not isinstance(devices, list):
            raise ParseError(SOURCE, f"{where}.spec.devices", "expected a list")
        for j, device in enumerate(devices):
            at = f"{where}.spec.devices[{j}]"
            fields = _mapping(device, at)
            attributes = _mapping(fields.get("attributes"), f"{at}.attributes")
            found.append(
                (
                    generation,
                    SliceDevice(
                        driver=driver,
                        pool=pool_name,
                        device=_string(fields.get("name"), f"{at}.name"),
                        uuid=_attribute(attributes, driver, "uuid"),
                        pci_bus_id=_attribute(attributes, driver, "pciBusID")
                        or _attribute(attributes, driver, PCI_BUS_ID),
                    ),
                )
            )
    token = _mapping(body.get("metadata"), "list.metadata").get("continue") or None
    if token is not None and not isinstance(token, str):
        raise ParseError(SOURCE, "list.metadata.continue", "expected a string")
    return found, token


def newest_generation(devices: list[tuple[int, SliceDevice]]) -> tuple[SliceDevice, ...]:
    """The devices of each (driver, pool)'s newest generation, sorted."""
    newest: dict[tuple[str, str], int] = {}
    for generation, d in devices:
        key = (d.driver, d.pool)
        newest[key] = max(newest.get(key, generation), generation)
    kept = {d for g, d in devices if g == newest[(d.driver, d.pool)]}
    return tuple(sorted(kept, key=lambda d: (d.driver, d.pool, d.device)))


def read_resource_slices(
    session: PageLister, node: str, *, drivers: Collection[str] | None = None
) -> tuple[SliceDevice, ...] | str:
    """This node's ResourceSlice devices, or why they could not be read."""
    devices: list[tuple[int, SliceDevice]] = []
    token: str | None = None
    try:
        for _ in range(MAX_PAGES):
            page = session.list_page(
                PATH,
                what=f"ResourceSlices ({GROUP_VERSION})",
                limit=PAGE_SIZE,
                field_selector=f"spec.nodeName={node}",
                continue_token=token,
            )
            found, token = parse_resource_slice_page(page, node=node, drivers=drivers)
            devices.extend(found)
            if token is None:
                return newest_generation(devices)
    except (PublishError, ParseError) as e:
        return str(e)  # "list ResourceSlices (resource.k8s.io/v1): HTTP 403: ..."
    most = MAX_PAGES * PAGE_SIZE
    return f"this node's ResourceSlices ({GROUP_VERSION}) span more than {most} slices; not read"
