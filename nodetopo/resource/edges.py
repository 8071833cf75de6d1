"""``status.health`` of a published NodeTopology: the degraded edges and the counter baseline, read
by the rules of ``nodetopo.resource.reader`` (an edge without its ``edge`` or a known ``kind`` is left
out; what an edge leaves out that its GPU or NIC entry says is taken from there)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from nodetopo.model import (
    CounterBaseline,
    CounterRate,
    EdgeHealth,
    EdgeKind,
    HealthReport,
    LinkState,
    PciAddress,
)
from nodetopo.resource.fields import INT, NUMBER, STR, FieldReader, fields_of
from nodetopo.resource.limits import MAX_EDGES, MAX_GPUS, MAX_NICS, MAX_RATES, MAX_REASONS

_EDGE = fields_of(gpu=INT, nic=STR, port=INT, peer=STR, since=STR)
_KINDS_OF_EDGE: dict[str, EdgeKind] = {k.value: k for k in EdgeKind}
_GPU_DEVICE = re.compile(r"GPU(\d{1,9})")  #: an edge's device that is a GPU, by index
#: the GPUs and NICs by ("index", i) and ("name", n), for the addresses edges leave out
_Addresses = dict[tuple[str, int | str | None], Mapping[str, Any]]


def read_health(
    r: FieldReader, raw: Mapping[str, Any], out: dict[str, Any], sections: frozenset[str]
) -> None:
    """``status.health``: absent is *not judged* (an older agent); an edge without its ``edge`` or a
    known ``kind`` is left out (unknown); the baseline's counters that are not integers too."""
    body = r.mapping(raw, "health")
    if body is None:
        return
    edges = []
    seen: set[str] = set()
    addresses: _Addresses | None = None  # built once, on the first edge that leaves its address out
    for e in r.items(body.get("degraded"), "degraded edges", MAX_EDGES, one="a degraded edge"):
        ident, kind = r.key(e, "edge", STR), r.key(e, "kind", STR)
        if ident is None or kind is None:
            continue
        if ident in seen:  # the list is atomic: the API server does not keep the ids unique
            r.here(f"edge {ident[:64]!r} listed twice")
            continue
        seen.add(ident)
        if kind not in _KINDS_OF_EDGE:
            r.here(f"edge kind {kind[:32]!r}")
            continue
        fields = r.fields(e, _EDGE)
        device = r.get(e, "device", STR) or ident.partition("/")[0]
        the_kind = _KINDS_OF_EDGE[kind]
        # each fact once (``body.edge_json``): what the object leaves out is the edge's own
        if fields["gpu"] is None and (gpu := _GPU_DEVICE.fullmatch(device)) is not None:
            fields["gpu"] = int(gpu[1])
        if fields["nic"] is None and the_kind is EdgeKind.PORT:
            fields["nic"] = device
        if fields["port"] is None and the_kind is EdgeKind.PORT and ident.startswith(device + "/port"):
            number = ident[len(device) + 5 :]
            fields["port"] = int(number) if number.isdigit() and len(number) < 10 else None
        address = r.address(e)
        if address is None and "pciBusID" not in e:
            if addresses is None:
                addresses = _addresses_of(raw)
            address = _placed_address(r, addresses, fields["gpu"], fields["nic"])
        rates = []
        for rate in r.items(e.get("rates"), "rates of an edge", MAX_RATES, one="a rate"):
            counter, per_hour = r.key(rate, "counter", STR), r.key(rate, "perHour", NUMBER)
            if counter is not None and per_hour is not None:
                rates.append(CounterRate(counter=counter, per_hour=float(per_hour)))
        edges.append(
            EdgeHealth(
                edge=ident,
                kind=the_kind,
                device=device,
                address=address,
                reasons=r.strings(e.get("reasons"), "reasons", MAX_REASONS),
                message=r.get(e, "message", STR) or "",
                observed=_link_state(r, e.get("observed")),
                capability=_link_state(r, e.get("capability")),
                rates=tuple(rates),
                **fields,
            )
        )
    baseline = None
    raw_baseline = r.mapping(body, "baseline")
    if raw_baseline is not None and (at := r.get(raw_baseline, "at", STR)) is not None:
        counters = raw_baseline.get("counters") or {}
        kept: list[tuple[str, tuple[tuple[str, int], ...]]] = []
        if isinstance(counters, Mapping) and len(counters) <= MAX_EDGES:
            for edge, values in counters.items():
                if isinstance(values, Mapping) and len(values) <= MAX_RATES:
                    pairs = tuple(
                        (str(k), v)
                        for k, v in values.items()
                        if type(v) is int and v >= 0 and isinstance(k, str)
                    )
                    if len(pairs) == len(values) and isinstance(edge, str):
                        kept.append((edge, tuple(sorted(pairs))))
                        continue
                r.here("a baseline counter that is not a count")
        else:
            r.here("baseline counters: not an object of at most the edges' bound")
        baseline = CounterBaseline(
            at=at,
            edges=r.get(raw_baseline, "edges", STR) or "",
            counters=tuple(sorted(kept)),
            boot=r.get(raw_baseline, "boot", STR) or "",
        )
    out["health"] = HealthReport(
        judged=True,
        checked=r.get(body, "checked", INT) or 0,
        degraded=tuple(edges),
        baseline=baseline,
    )


def _addresses_of(raw: Mapping[str, Any]) -> _Addresses:
    """The entries of ``status.gpus`` by ("index", i) and of ``status.nics`` by ("name", n), as far
    as those lists read (each list's own problem is noted where it is read)."""
    addresses: _Addresses = {}
    for key, listed, bound in (
        ("index", raw.get("gpus"), MAX_GPUS),
        ("name", raw.get("nics"), MAX_NICS),
    ):
        if type(listed) is not list or len(listed) > bound:
            continue
        for entry in listed:
            ident = entry.get(key) if isinstance(entry, Mapping) else None
            if type(ident) is (int if key == "index" else str):
                addresses.setdefault((key, ident), entry)
    return addresses


def _placed_address(
    r: FieldReader, addresses: _Addresses, gpu: int | None, nic: str | None
) -> PciAddress | None:
    """The ``pciBusID`` an edge left out: its GPU's in ``status.gpus`` (else its NIC's in
    ``status.nics``); None when that entry does not say it (not known)."""
    owner = ("index", gpu) if gpu is not None else ("name", nic) if nic is not None else None
    entry = addresses.get(owner) if owner is not None else None
    return r.address(entry) if entry is not None else None


def _link_state(r: FieldReader, raw: Any) -> LinkState:
    if not isinstance(raw, Mapping):
        if raw is not None:
            r.here("a link state that is not an object")
        return LinkState()
    gts, rate = r.get(raw, "speedGTs", NUMBER), r.get(raw, "rateGbps", NUMBER)
    return LinkState(
        width=r.get(raw, "width", INT),
        gts=float(gts) if gts is not None else None,
        links=r.get(raw, "links", INT),
        rate_gbps=float(rate) if rate is not None else None,
        state=r.get(raw, "state", STR),
    )
