"""The one reader of a published NodeTopology: the object as the API (or a file) gives it → typed facts.

Every consumer projects from what ``read_nodetopology`` returns (the extender's ``NodeShape``, the
summary's facts, the probe's promise, the Ray labels, the exports, the fleet rows, the ``Topology``
``kubectl ntopo`` renders); none indexes the object's ``status`` itself. The facts are the model's own
types where the schema and the model agree (``Gpu``, ``Nic``, ``NvlinkIsland``, ``GpuLink``,
``NumaNode``, ``MigDevice``, ``PreferredGpuSets``, ``FabricInfo``, ``SourceStatus``, the network), and
``Published*`` records for what only the object says (conditions, summary, allocation, holders).

Reading is bounded: a list longer than its schema bound (``nodetopo.resource.limits``) is not read,
so any object costs at most those many entries. ``sections`` reads only the parts a consumer uses.

Reading is tolerant in one way, for every consumer. What the reader cannot take as the schema says
is left out or read as unknown, never guessed, and recorded as a ``Problem``:

1. an object that is not a JSON object is a ``ResourceError``;
2. a status that is absent, null or empty is *no status yet* (``status`` None); one that is not an
   object is no status too, and **malformed**;
3. a list field that is not a list, or longer than its bound, reads as empty and is **malformed**;
4. an entry of a list that is not an object is left out and is **malformed**;
5. an entry whose key is missing or of the wrong type is left out: **malformed** for a GPU
   (``index``) and a NIC (``name``), the entries placement counts; unknown for the others (an
   island's ``id``/``gpus``, a condition's ``type``, a GPU's NIC ``name``/``distance``, a tier's
   ``level``/``id``, ...);
6. any other field of the wrong type, or a word the schema does not allow (a class other than
   PIX, PXB, PHB, NODE, SYS), reads as unknown (None; False for a NIC's ``rdma``, 0 or "" for the
   few fields the model cannot leave unknown, which only the strict round trip reads): a GPU's
   ``island`` and ``numaNode`` are integers from 0 to 2^31-1, and a wrong one is **malformed**
   (placement groups GPUs on them);
7. a GPU's holders (``heldBy``) that are not all readable (over their bound included) are unknown as
   a whole (None): who holds a GPU is never guessed from part of a list.

What each consumer does with problems is its own rule: placement and the Ray bridge refuse an object
with a malformed problem in what they read (``Published.malformed``); the round trip to a
``Topology`` refuses any problem; the probe, the summary, the exports and the fleet view use what
was read (the summary through placement's shape: a malformed node offers no GPU). For an object
the API server can store (the CRD's types and bounds) the reader finds no problem.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from typing import Any, TypeVar, cast

from nodetopo.model import (
    CounterBaseline,
    CounterRate,
    CpuSet,
    EdgeHealth,
    EdgeKind,
    FabricInfo,
    FabricTier,
    Gpu,
    GpuLink,
    HealthReport,
    LinkClass,
    LinkState,
    MigDevice,
    NetworkPosition,
    Nic,
    NumaNode,
    NvlinkIsland,
    PciAddress,
    PodRef,
    PreferredGpuSets,
    SourceStatus,
    SwitchPort,
)
from nodetopo.resource.limits import (
    MAX_CONDITIONS,
    MAX_EDGES,
    MAX_GPU_LINKS,
    MAX_GPUS,
    MAX_HOLDERS,
    MAX_ID,
    MAX_ISLANDS,
    MAX_MIG_DEVICES,
    MAX_NEIGHBOURS,
    MAX_NICS,
    MAX_NUMA_NODES,
    MAX_RATES,
    MAX_REASONS,
    MAX_SOURCES,
    MAX_TIER_MEMBERS,
    MAX_TIERS,
)
from nodetopo.resource.published import (
    ALL,
    SECTIONS,
    Problem,
    Published,
    PublishedAllocation,
    PublishedCondition,
    PublishedGpu,
    PublishedStatus,
    PublishedSummary,
    ResourceError,
    Severity,
)


def read_nodetopology(obj: Any, *, sections: Collection[str] = ALL) -> Published:
    """What the NodeTopology ``obj`` (a dict as the API serves it) says, by the module's rule.

    Raises ``ResourceError`` when ``obj`` is not a JSON object.
    """
    if not isinstance(obj, Mapping):
        raise ResourceError(f"a NodeTopology must be an object, not {type(obj).__name__}")
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    read = read_status(obj.get("status"), sections=sections) if obj.get("status") else None
    return Published(
        name=name if isinstance(name, str) else None,
        status=read.status if read is not None else None,
        problems=read.problems if read is not None else (),
    )


def read_status(raw: Any, *, sections: Collection[str] = ALL) -> Published:
    """``read_nodetopology`` of an object whose ``status`` is ``raw`` (and which has no name)."""
    reader = _Reader()
    if not isinstance(raw, Mapping):
        reader.note("status", "status is not an object", Severity.MALFORMED, field="status")
        return Published(name=None, status=None, problems=tuple(reader.problems))
    status = reader.status(raw, frozenset(sections))
    return Published(name=None, status=status, problems=tuple(reader.problems))


# --------------------------------------------------------------------------------------------
# Values
# --------------------------------------------------------------------------------------------


#: The JSON types a field takes (``True`` is not an integer: ``bool`` is a type of its own).
Kind = tuple[type, ...]
INT: Kind = (int,)
STR: Kind = (str,)
BOOL: Kind = (bool,)
NUMBER: Kind = (int, float)
_KINDS = {INT: "an integer", STR: "a string", BOOL: "true or false", NUMBER: "a number"}


#: (JSON key, attribute, kind) of the plain fields of an entry, read by ``_Reader.fields``
Fields = tuple[tuple[str, str, Kind], ...]


def _fields(**kinds: Kind) -> Fields:
    """``Fields`` from the JSON keys (the attribute is the key in snake case: ``pcieRoot``, ``pcie_root``)."""
    return tuple(
        (key, re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", key).lower(), kind) for key, kind in kinds.items()
    )


_GPU = _fields(uuid=STR, model=STR, pcieRoot=STR, gpuNumaNode=INT, migEnabled=BOOL, memoryBytes=INT)
_NIC = _fields(netdev=STR, pcieRoot=STR, numaNode=INT, linkLayer=STR, state=STR, rateGbps=NUMBER, rdma=BOOL)
_NIC_PLACED = _fields(linkLayer=STR, state=STR, rdma=BOOL)
_CONDITION = _fields(status=STR, reason=STR, message=STR, lastTransitionTime=STR)
_SUMMARY = _fields(gpuCount=INT, gpuModel=STR, islands=STR)
_ALLOCATION = _fields(state=STR, message=STR)
_MIG = _fields(parentUUID=STR, parentIndex=INT, profile=STR, gpuInstance=INT, computeInstance=INT)
_NEIGHBOUR = _fields(port=INT, state=STR, switchID=STR, switchName=STR, switchPort=STR, peerIsSwitch=BOOL)
_EDGE = _fields(gpu=INT, nic=STR, port=INT, peer=STR, since=STR)
_KINDS_OF_EDGE: dict[str, EdgeKind] = {k.value: k for k in EdgeKind}
_CLASSES: dict[str, LinkClass] = dict(LinkClass.__members__)
_GPU_DEVICE = re.compile(r"GPU(\d{1,9})")  #: an edge's device that is a GPU, by index
_TEXT = (str, type(None))  #: a string field that may be absent
_NONE_DEGRADED: frozenset[str] = frozenset()


def _of(value: Any, kind: Kind) -> bool:
    """``value`` is of ``kind`` (exactly, as JSON gives it, or a subclass: an enum member)."""
    if type(value) in kind:
        return True
    return isinstance(value, kind) and not (isinstance(value, bool) and bool not in kind)


T = TypeVar("T")


class _Reader:
    """One read: the problems found so far, and the readers of each part."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []
        self.section = "status"
        self._field = "status"
        self._cpulists: dict[str, CpuSet] = {}
        #: the GPUs and NICs by ("index", i) and ("name", n), for the addresses edges leave out
        self._addresses: dict[tuple[str, int | str | None], Mapping[str, Any]] | None = None

    def note(self, section: str, what: str, severity: Severity = Severity.UNKNOWN, field: str = "") -> None:
        self.problems.append(Problem(section, field or f"status.{section}", what, severity))

    def _here(self, what: str, severity: Severity = Severity.UNKNOWN) -> None:
        self.note(self.section, what, severity, field=self._field)

    # ---- fields -------------------------------------------------------------------------

    def get(self, item: Mapping[str, Any], key: str, kind: Kind, *, required: bool = False) -> Any:
        """``item[key]`` when it is of ``kind`` (``INT``, ``STR``, ...); else None, noted when it
        is present and wrong, or missing though ``required``."""
        raw = item.get(key)
        if raw is None:
            if required:
                self._here(f"missing {key!r}")
            return None
        if _of(raw, kind):
            return raw
        self._here(_wrong(key, raw, kind))
        return None

    def fields(self, item: Mapping[str, Any], spec: Fields) -> dict[str, Any]:
        """``get`` of each (key, attribute, kind) of ``spec``, by attribute: one pass, cheap when
        every value is of its kind (the common case, the cost of reading every object)."""
        out = {attr: item.get(key) for key, attr, _ in spec}
        for key, attr, kind in spec:
            if type(out[attr]) not in kind and out[attr] is not None:
                out[attr] = self.get(item, key, kind)
        return out

    def key(
        self, item: Mapping[str, Any], key: str, kind: Kind, severity: Severity = Severity.UNKNOWN
    ) -> Any:
        """A key of an entry: its value, or None (the entry is left out) with the reason noted."""
        raw = item.get(key)
        if raw is not None and _of(raw, kind):
            return raw
        self._here(f"missing {key!r}" if raw is None else _wrong(key, raw, kind), severity)
        return None

    def link_class(self, item: Mapping[str, Any], key: str) -> LinkClass | None:
        raw = item.get(key)
        if not raw:
            return None
        if isinstance(raw, str) and raw in _CLASSES:
            return _CLASSES[raw]
        self._here(f"missing {str(raw)[:32]!r}")  # the word is not a class: the round trip's wording
        return None

    def identifier(self, item: Mapping[str, Any], key: str, what: str) -> int | None:
        """A GPU's ``island`` or ``numaNode``: an int from 0 to 2^31-1, else unknown and malformed."""
        raw = item.get(key)
        if raw is None or (type(raw) is int and 0 <= raw < MAX_ID):
            return raw
        if isinstance(raw, bool) or not isinstance(raw, int) or not 0 <= raw < MAX_ID:
            self._here(f"GPU {what} {str(raw)[:32]!r}", Severity.MALFORMED)
            return None
        return raw

    def cpus(self, item: Mapping[str, Any], key: str) -> CpuSet | None:
        """A CPU (or NUMA node) list: its ranges, never expanded, so a list costs what it says in
        characters (the CRD's maxLength), whatever ids it names (``0-65535`` is one range)."""
        text = self.get(item, key, STR)
        if text is None:
            return None
        cpus = self._cpulists.get(text)  # the GPUs of one NUMA node share their lists
        if cpus is None:
            try:
                cpus = self._cpulists[text] = CpuSet.parse(text)
            except ValueError as e:
                self._here(str(e))
        return cpus

    def address(self, item: Mapping[str, Any]) -> PciAddress | None:
        text = self.get(item, "pciBusID", STR)
        if not text:
            return None
        try:
            return PciAddress.parse(text)
        except ValueError as e:
            self._here(str(e))
            return None

    def strings(self, value: Any, what: str, bound: int) -> tuple[str, ...]:
        if type(value) is list and len(value) <= bound and all(type(v) is str for v in value):
            return tuple(value)
        items = self.items(value, what, bound, objects=False)
        kept = tuple(v for v in items if isinstance(v, str))
        if len(kept) < len(items):
            self._here(f"{what}: not all strings")
        return kept

    def ints(self, item: Mapping[str, Any], key: str, what: str, bound: int) -> tuple[int, ...] | None:
        """The list of ints ``item[key]`` (a key of the entry), or None (noted) when it is missing, not
        a list of ints or over ``bound``: the entry holding it is left out."""
        value = item.get(key)
        if value is None:
            self._here(f"missing {key!r}")
            return None
        if not isinstance(value, list) or len(value) > bound:
            self.items(value, what, bound, objects=False)
            return None
        kept = tuple(v for v in value if _of(v, INT))
        if len(kept) < len(value):
            self._here(f"{what}: not all integers")
            return None
        return kept

    # ---- lists --------------------------------------------------------------------------

    def items(self, value: Any, what: str, bound: int, *, objects: bool = True, one: str = "") -> list[Any]:
        """The entries of a list field: [] when absent; not a list or over ``bound``: [] and
        malformed; with ``objects`` an entry that is not an object is left out (malformed)."""
        if value is None:
            return []
        if not isinstance(value, list):
            self._here(f"{what} is not a list", Severity.MALFORMED)
            return []
        if len(value) > bound:
            self._here(f"{len(value)} {what}, at most {bound}", Severity.BOUNDS)
            return []
        if not objects:
            return value
        kept = [v for v in value if type(v) is dict or isinstance(v, Mapping)]
        if len(kept) < len(value):
            self._here(f"{one or 'an entry of ' + what} is not an object", Severity.MALFORMED)
        return kept

    def mapping(
        self, raw: Mapping[str, Any], key: str, severity: Severity = Severity.UNKNOWN
    ) -> Mapping[str, Any] | None:
        """The object ``raw[key]``; None when absent, or (noted) when it is not an object."""
        body = raw.get(key)
        if body is None or isinstance(body, Mapping):
            return body
        self._here(f"{key} is not an object", severity)
        return None

    def keyed(
        self, value: Any, what: tuple[str, str, int], key: str, make: Callable[[str, Any], T]
    ) -> tuple[T, ...]:
        """The entries of a list (``what``: its name, an entry's, its bound) whose string ``key`` is
        readable, each made by ``make(key, entry)``; the others are left out (rule 5)."""
        name, one, bound = what
        made = []
        for entry in self.items(value, name, bound, one=one):
            ident = self.key(entry, key, STR)
            if ident is not None:
                made.append(make(ident, entry))
        return tuple(made)

    def plain(
        self, value: Any, what: tuple[str, str, int], key: str, record: Callable[..., T], spec: Fields
    ) -> tuple[T, ...]:
        """``keyed`` entries that are their key and plain ``fields``: ``record(key=..., **fields)``."""
        return self.keyed(
            value, what, key, lambda ident, entry: record(**{key: ident}, **self.fields(entry, spec))
        )

    # ---- the status ---------------------------------------------------------------------

    def enter(self, section: str, field: str = "") -> None:
        self.section = section
        self._field = field or f"status.{section}"

    def status(self, raw: Mapping[str, Any], sections: frozenset[str]) -> PublishedStatus:
        self.enter("status", "status")
        values: dict[str, Any] = {
            "node_name": self.get(raw, "nodeName", STR),
            "agent_version": self.get(raw, "agentVersion", STR),
            "content_hash": self.get(raw, "contentHash", STR),
        }
        readers = {
            "gpus": self._gpus,
            "nics": self._nics,
            "nvlinkIslands": self._islands,
            "gpuLinks": self._gpu_links,
            "numaNodes": self._numa_nodes,
            "migDevices": self._mig_devices,
            "preferredGPUSets": self._preferred_gpu_sets,
            "fabric": self._fabric,
            "network": self._network,
            "sources": self._sources,
            "conditions": self._conditions,
            "allocation": self._allocation,
            "summary": self._summary,
            "health": self._health,
        }
        for section in SECTIONS:
            if section in readers and section in sections:
                self.enter(section)
                readers[section](raw, values, sections)
        return PublishedStatus(**values)

    def _gpus(self, raw: Mapping[str, Any], out: dict[str, Any], sections: frozenset[str]) -> None:
        gpus = []
        seen: set[int] = set()
        columns = _nic_names(raw.get("nics"))
        affinity, details = "affinity" in sections, "details" in sections
        addresses = "addresses" in sections
        allocation = "allocation" in sections
        numa_cpus: dict[int, CpuSet] | None = None
        for g in self.items(raw.get("gpus"), "GPUs", MAX_GPUS, one="a GPU"):
            index = g.get("index")
            if index is None:
                self._here("missing 'index'", Severity.MALFORMED)
                continue
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < MAX_ID:
                self._here(f"GPU index {str(index)[:32]!r}", Severity.MALFORMED)
                continue
            if index in seen:
                self._here(f"GPU index {index} listed twice", Severity.MALFORMED)
                continue
            seen.add(index)
            row = g.get("nicDistances")
            if row is not None:
                nics = self._nic_row(row, columns)
                degraded = self._degraded(g.get("degradedNICs"), nics)
            else:
                nics, degraded = self._nic_list(g.get("nics"))
            numa_node = self.identifier(g, "numaNode", "numaNode")
            numa_affinity = cpu_affinity = None
            if affinity:
                if "numaAffinity" in g:
                    numa_affinity = self.cpus(g, "numaAffinity")
                elif numa_node is not None:  # left out: exactly its NUMA node
                    numa_affinity = CpuSet(((numa_node, numa_node),))
                if "cpuAffinity" in g:
                    cpu_affinity = self.cpus(g, "cpuAffinity")
                elif numa_affinity:  # left out: exactly the CPUs of its NUMA nodes
                    numa_cpus = numa_cpus if numa_cpus is not None else _numa_cpus(raw.get("numaNodes"))
                    if len(numa_affinity) <= len(numa_cpus) and all(n in numa_cpus for n in numa_affinity):
                        cpu_affinity = CpuSet().union(*(numa_cpus[n] for n in numa_affinity))
            if details:
                gpu = Gpu(
                    index=index,
                    address=self.address(g) if addresses else None,
                    numa_node=numa_node,
                    numa_affinity=numa_affinity,
                    cpu_affinity=cpu_affinity,
                    island=self.identifier(g, "island", "island"),
                    nearest_nics=self.strings(g.get("nearestNICs"), "nearestNICs", MAX_NICS),
                    nic_distance=self.link_class(g, "nicDistance"),
                    **self.fields(g, _GPU),
                )
            else:  # placement's part: where the GPU sits, not what it is
                mig = g.get("migEnabled")
                address = self.address(g) if addresses else None
                island = self.identifier(g, "island", "island")
                near = self.link_class(g, "nicDistance")
                mig = mig if mig is None or type(mig) is bool else self.get(g, "migEnabled", BOOL)
                placed = (index, address, numa_node, island, near, mig)
                shared = None if affinity else _PLACED_GPUS.get(placed)
                if shared is None:
                    shared = Gpu(
                        index=index,
                        uuid=None,
                        model=None,
                        address=address,
                        pcie_root=None,
                        numa_node=numa_node,
                        numa_affinity=numa_affinity,
                        gpu_numa_node=None,
                        cpu_affinity=cpu_affinity,
                        island=island,
                        nearest_nics=(),
                        nic_distance=near,
                        mig_enabled=mig,
                    )
                    if not affinity:
                        _placed(_PLACED_GPUS, placed, shared)
                gpu = shared
            held = self._held_by(g.get("heldBy")) if allocation else None
            gpus.append(PublishedGpu(gpu=gpu, nics=nics, held_by=held, degraded_nics=degraded))
        out["gpus"] = tuple(gpus)

    def _nic_row(self, row: Any, columns: tuple[str | None, ...] | None) -> tuple[tuple[str, LinkClass], ...]:
        """``nicDistances``: one class per entry of ``status.nics``, in that order; as (NIC, class)
        pairs, nearest first. A row that is not one class (or null) per NIC is unknown as a whole."""
        if columns is None:
            return ()  # the NIC list itself is unreadable (noted where it is read)
        if type(row) is not list or len(row) != len(columns):
            self._here(f"nicDistances: not a list of {len(columns)} classes (one per NIC)")
            return ()
        if None not in columns:
            try:  # the common case: a class for every NIC, every NIC named
                key = (columns, tuple(row))
                known = _PLACED_ROWS.get(key)  # TypeError: a row holding an object or a list
                if known is not None:
                    return known
                named = cast(tuple[str, ...], columns)
                ordered = sorted(zip(map(_CLASSES.__getitem__, row), named, strict=True))
                made = tuple((name, cls) for cls, name in ordered)
                _placed(_PLACED_ROWS, key, made)
                return made
            except (KeyError, TypeError):
                pass
        pairs = []
        for name, word in zip(columns, row, strict=True):
            if word is None or name is None:
                continue
            cls = _CLASSES.get(word) if type(word) is str else None
            if cls is None:
                self._here(f"missing {str(word)[:32]!r}")  # the word is not a class: the round trip's wording
                return ()
            pairs.append((cls, name))
        pairs.sort()
        return tuple((name, cls) for cls, name in pairs)

    def _degraded(self, value: Any, nics: tuple[tuple[str, LinkClass], ...]) -> frozenset[str]:
        """``degradedNICs``: the NICs of the GPU's row behind a degraded edge (absent: none). A name
        that is not one of the row's NICs is left out (unknown): it marks no path the row has."""
        if value is None or not nics:  # no row: nothing it could mark (the row's problem is noted)
            return _NONE_DEGRADED
        names = self.strings(value, "degradedNICs", MAX_NICS)
        row = {name for name, _ in nics}
        kept = frozenset(n for n in names if n in row)
        if len(kept) < len(set(names)):
            self._here("degradedNICs: a NIC the GPU's nicDistances has no class for")
        return kept

    def _nic_list(self, value: Any) -> tuple[tuple[tuple[str, LinkClass], ...], frozenset[str]]:
        """``nics``, the per-GPU list earlier agents wrote: (NIC, class) pairs, nearest first, and the
        NICs marked ``degraded: true`` among them."""
        nics = []
        degraded = []
        for n in self.items(value, "NICs of a GPU", MAX_NICS, one="a NIC of a GPU"):
            name, word = n.get("name"), n.get("distance")
            if type(name) is not str or type(word) is not str or word not in _CLASSES:
                name, word = self.key(n, "name", STR), self.key(n, "distance", STR)
                if name is None or word is None or self.link_class(n, "distance") is None:
                    continue
            nics.append((name, _CLASSES[word]))
            if n.get("degraded") is True:
                degraded.append(name)
        nics.sort(key=lambda pair: (pair[1], pair[0]))
        return tuple(nics), frozenset(degraded) if degraded else _NONE_DEGRADED

    def _held_by(self, value: Any) -> tuple[PodRef, ...] | None:
        """Rule 7: every holder readable, or None. (Noted under ``allocation``.)"""
        if value is None:
            return None
        section, field = self.section, self._field
        self.enter("allocation", "status.gpus[].heldBy")
        try:
            if not isinstance(value, list) or len(value) > MAX_HOLDERS:
                self._here(f"holders of a GPU: not a list of at most {MAX_HOLDERS}")
                return None
            holders = []
            for h in value:
                ns, name = (h.get("namespace"), h.get("name")) if isinstance(h, Mapping) else (None, None)
                if not (isinstance(ns, str) and isinstance(name, str)):
                    self._here("a holder without a namespace and name")
                    return None
                container = h.get("container")
                holders.append(
                    PodRef(namespace=ns, name=name, container=container if isinstance(container, str) else "")
                )
            return tuple(holders)
        finally:
            self.enter(section, field)

    def _nics(self, raw: Mapping[str, Any], out: dict[str, Any], sections: frozenset[str]) -> None:
        nics = []
        seen: set[str] = set()
        details = "details" in sections
        for n in self.items(raw.get("nics"), "NICs", MAX_NICS, one="a NIC"):
            name = self.key(n, "name", STR, Severity.MALFORMED)
            if name is None:
                continue
            if name in seen:
                self._here(f"NIC {name[:64]!r} listed twice", Severity.MALFORMED)
                continue
            seen.add(name)
            address = self.address(n) if "addresses" in sections else None
            if details:
                nic = self.fields(n, _NIC)
                nics.append(Nic(name=name, address=address, rdma=bool(nic.pop("rdma")), **nic))
                continue
            part = self.fields(n, _NIC_PLACED)  # placement's part: what the NIC can carry
            rdma = bool(part.pop("rdma"))
            placed = (name, address, rdma, part["link_layer"], part["state"])
            shared_nic = _PLACED_NICS.get(placed)
            if shared_nic is None:
                shared_nic = Nic(
                    name=name,
                    netdev=None,
                    address=address,
                    pcie_root=None,
                    numa_node=None,
                    rate_gbps=None,
                    rdma=rdma,
                    **part,
                )
                _placed(_PLACED_NICS, placed, shared_nic)
            nics.append(shared_nic)
        out["nics"] = tuple(nics)

    def _islands(self, raw: Mapping[str, Any], out: dict[str, Any], sections: frozenset[str]) -> None:
        islands = []
        for i in self.items(raw.get("nvlinkIslands"), "NVLink islands", MAX_ISLANDS, one="an island"):
            ident, gpus = self.key(i, "id", INT), self.ints(i, "gpus", "GPUs of an island", MAX_GPUS)
            if ident is None or gpus is None:
                continue
            islands.append(
                NvlinkIsland(
                    id=ident,
                    gpus=gpus,
                    links_per_pair=self.get(i, "linksPerPair", INT, required=True) or 0,
                    fully_connected=bool(self.get(i, "fullyConnected", BOOL, required=True)),
                    nvswitch=bool(self.get(i, "nvswitch", BOOL, required=True)),
                )
            )
        out["islands"] = tuple(islands)

    def _gpu_links(self, raw: Mapping[str, Any], out: dict[str, Any], sections: frozenset[str]) -> None:
        if raw.get("gpuLinks") is None:
            return
        links = []
        for p in self.items(raw.get("gpuLinks"), "GPU links", MAX_GPU_LINKS, one="a GPU link"):
            a, b = self.key(p, "a", INT), self.key(p, "b", INT)
            if a is not None and b is not None:
                nvlinks = self.get(p, "nvlinks", INT)
                links.append(GpuLink(a=a, b=b, nvlinks=nvlinks or None, pcie=self.link_class(p, "pcie")))
        out["gpu_links"] = tuple(links)

    def _numa_nodes(self, raw: Mapping[str, Any], out: dict[str, Any], sections: frozenset[str]) -> None:
        nodes = []
        for n in self.items(raw.get("numaNodes"), "NUMA nodes", MAX_NUMA_NODES, one="a NUMA node"):
            ident = self.key(n, "id", INT)
            if ident is None:
                continue
            distances = []
            for d in self.items(n.get("distances"), "NUMA distances", MAX_NUMA_NODES, one="a distance"):
                other, distance = self.key(d, "node", INT), self.key(d, "distance", INT)
                if other is not None and distance is not None:
                    distances.append((other, distance))
            nodes.append(
                NumaNode(
                    id=ident,
                    cpus=self.cpus(n, "cpus") or CpuSet(),
                    memory_bytes=self.get(n, "memoryBytes", INT),
                    distances=tuple(distances),
                )
            )
        out["numa_nodes"] = tuple(nodes)

    def _mig_devices(self, raw: Mapping[str, Any], out: dict[str, Any], sections: frozenset[str]) -> None:
        what = ("MIG devices", "a MIG device", MAX_MIG_DEVICES)
        out["mig_devices"] = self.plain(raw.get("migDevices"), what, "uuid", MigDevice, _MIG)

    def _preferred_gpu_sets(
        self, raw: Mapping[str, Any], out: dict[str, Any], sections: frozenset[str]
    ) -> None:
        preferred = []
        for p in self.items(raw.get("preferredGPUSets"), "preferred GPU sets", MAX_GPUS, one="a size"):
            size = self.key(p, "size", INT)
            raw_sets = p.get("sets")
            if raw_sets is None:
                self._here("missing 'sets'")
            sets = [
                self.ints({"set": s}, "set", "GPUs of a set", MAX_GPUS)
                for s in self.items(raw_sets, "sets", MAX_GPUS, objects=False)
            ]
            if size is not None and raw_sets is not None and all(s is not None for s in sets):
                preferred.append(PreferredGpuSets(size=size, sets=tuple(s for s in sets if s is not None)))
        out["preferred_gpu_sets"] = tuple(preferred)

    def _fabric(self, raw: Mapping[str, Any], out: dict[str, Any], sections: frozenset[str]) -> None:
        body = self.mapping(raw, "fabric", Severity.MALFORMED)
        if not body:
            return
        out["fabric"] = FabricInfo(
            cluster_uuid=self.get(body, "clusterUUID", STR, required=True) or "",
            clique_id=self.get(body, "cliqueID", INT, required=True) or 0,
            state=self.get(body, "state", STR, required=True) or "",
            health=self.get(body, "health", STR),
        )

    def _network(self, raw: Mapping[str, Any], out: dict[str, Any], sections: frozenset[str]) -> None:
        body = raw.get("network") or {}
        if not isinstance(body, Mapping):
            self._here("network is not an object", Severity.MALFORMED)
            return
        neighbours = self.keyed(
            body.get("neighbours"),
            ("neighbours", "a neighbour", MAX_NEIGHBOURS),
            "nic",
            lambda nic, n: SwitchPort(
                nic=nic, source=self.get(n, "source", STR) or "", **self.fields(n, _NEIGHBOUR)
            ),
        )
        tiers = []
        for t in self.items(body.get("tiers"), "tiers", MAX_TIERS, one="a tier"):
            level, ident = self.key(t, "level", INT), self.key(t, "id", STR)
            if level is not None and ident is not None:
                tiers.append(
                    FabricTier(
                        level=level,
                        id=ident,
                        name=self.get(t, "name", STR),
                        members=self.strings(t.get("members"), "members", MAX_TIER_MEMBERS),
                    )
                )
        out["network"] = NetworkPosition(
            neighbours=tuple(neighbours), tiers=tuple(tiers), tier_source=self.get(body, "tierSource", STR)
        )
        domain = body.get("nvlinkDomain")
        if isinstance(domain, Mapping):
            out["nvlink_domain"] = (self.get(domain, "id", STR), self.get(domain, "healthy", BOOL))
        elif domain:
            self._here("nvlinkDomain is not an object")

    def _sources(self, raw: Mapping[str, Any], out: dict[str, Any], sections: frozenset[str]) -> None:
        out["sources"] = self.keyed(
            raw.get("sources"),
            ("sources", "a source", MAX_SOURCES),
            "name",
            lambda name, s: SourceStatus(
                name=name,
                ok=bool(self.get(s, "ok", BOOL, required=True)),
                message=self.get(s, "message", STR) or "",
            ),
        )

    def _conditions(self, raw: Mapping[str, Any], out: dict[str, Any], sections: frozenset[str]) -> None:
        value = raw.get("conditions")
        if type(value) is list and len(value) <= MAX_CONDITIONS:  # the common case: every field a string
            read = []
            for c in value:
                if type(c) is not dict:
                    break
                kind, state, why = c.get("type"), c.get("status"), c.get("reason")
                said, since = c.get("message"), c.get("lastTransitionTime")
                if not (
                    type(kind) is str
                    and type(state) in _TEXT
                    and type(why) in _TEXT
                    and type(said) in _TEXT
                    and type(since) in _TEXT
                ):
                    break
                read.append(
                    PublishedCondition(
                        type=kind, status=state, reason=why, message=said, last_transition_time=since
                    )
                )
            else:
                out["conditions"] = tuple(read)
                return
        what = ("conditions", "a condition", MAX_CONDITIONS)
        out["conditions"] = self.plain(value, what, "type", PublishedCondition, _CONDITION)

    def _allocation(self, raw: Mapping[str, Any], out: dict[str, Any], sections: frozenset[str]) -> None:
        body = self.mapping(raw, "allocation")
        if body is not None:
            out["allocation"] = PublishedAllocation(**self.fields(body, _ALLOCATION))

    def _health(self, raw: Mapping[str, Any], out: dict[str, Any], sections: frozenset[str]) -> None:
        """``status.health``: absent is *not judged* (an older agent); an edge without its ``edge`` or a
        known ``kind`` is left out (unknown); the baseline's counters that are not integers too."""
        body = self.mapping(raw, "health")
        if body is None:
            return
        edges = []
        seen: set[str] = set()
        for e in self.items(body.get("degraded"), "degraded edges", MAX_EDGES, one="a degraded edge"):
            ident, kind = self.key(e, "edge", STR), self.key(e, "kind", STR)
            if ident is None or kind is None:
                continue
            if ident in seen:  # the list is atomic: the API server does not keep the ids unique
                self._here(f"edge {ident[:64]!r} listed twice")
                continue
            seen.add(ident)
            if kind not in _KINDS_OF_EDGE:
                self._here(f"edge kind {kind[:32]!r}")
                continue
            fields = self.fields(e, _EDGE)
            device = self.get(e, "device", STR) or ident.partition("/")[0]
            the_kind = _KINDS_OF_EDGE[kind]
            # each fact once (``body.edge_json``): what the object leaves out is the edge's own
            if fields["gpu"] is None and (gpu := _GPU_DEVICE.fullmatch(device)) is not None:
                fields["gpu"] = int(gpu[1])
            if fields["nic"] is None and the_kind is EdgeKind.PORT:
                fields["nic"] = device
            if fields["port"] is None and the_kind is EdgeKind.PORT and ident.startswith(device + "/port"):
                number = ident[len(device) + 5 :]
                fields["port"] = int(number) if number.isdigit() and len(number) < 10 else None
            address = self.address(e)
            if address is None and "pciBusID" not in e:
                address = self._placed_address(raw, fields["gpu"], fields["nic"])
            rates = []
            for r in self.items(e.get("rates"), "rates of an edge", MAX_RATES, one="a rate"):
                counter, per_hour = self.key(r, "counter", STR), self.key(r, "perHour", NUMBER)
                if counter is not None and per_hour is not None:
                    rates.append(CounterRate(counter=counter, per_hour=float(per_hour)))
            edges.append(
                EdgeHealth(
                    edge=ident,
                    kind=the_kind,
                    device=device,
                    address=address,
                    reasons=self.strings(e.get("reasons"), "reasons", MAX_REASONS),
                    message=self.get(e, "message", STR) or "",
                    observed=self._link_state(e.get("observed")),
                    capability=self._link_state(e.get("capability")),
                    rates=tuple(rates),
                    **fields,
                )
            )
        baseline = None
        raw_baseline = self.mapping(body, "baseline")
        if raw_baseline is not None and (at := self.get(raw_baseline, "at", STR)) is not None:
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
                    self._here("a baseline counter that is not a count")
            else:
                self._here("baseline counters: not an object of at most the edges' bound")
            baseline = CounterBaseline(
                at=at,
                edges=self.get(raw_baseline, "edges", STR) or "",
                counters=tuple(sorted(kept)),
                boot=self.get(raw_baseline, "boot", STR) or "",
            )
        out["health"] = HealthReport(
            judged=True,
            checked=self.get(body, "checked", INT) or 0,
            degraded=tuple(edges),
            baseline=baseline,
        )

    def _placed_address(self, raw: Mapping[str, Any], gpu: int | None, nic: str | None) -> PciAddress | None:
        """The ``pciBusID`` an edge left out: its GPU's in ``status.gpus`` (else its NIC's in
        ``status.nics``); None when that entry does not say it (not known)."""
        if self._addresses is None:
            self._addresses = {}
            for key, listed, bound in (
                ("index", raw.get("gpus"), MAX_GPUS),
                ("name", raw.get("nics"), MAX_NICS),
            ):
                if type(listed) is not list or len(listed) > bound:
                    continue  # the list's own problem is noted where it is read
                for entry in listed:
                    ident = entry.get(key) if isinstance(entry, Mapping) else None
                    if type(ident) is (int if key == "index" else str):
                        self._addresses.setdefault((key, ident), entry)
        owner = ("index", gpu) if gpu is not None else ("name", nic) if nic is not None else None
        entry = self._addresses.get(owner) if owner is not None else None
        return self.address(entry) if entry is not None else None

    def _link_state(self, raw: Any) -> LinkState:
        if not isinstance(raw, Mapping):
            if raw is not None:
                self._here("a link state that is not an object")
            return LinkState()
        gts, rate = self.get(raw, "speedGTs", NUMBER), self.get(raw, "rateGbps", NUMBER)
        return LinkState(
            width=self.get(raw, "width", INT),
            gts=float(gts) if gts is not None else None,
            links=self.get(raw, "links", INT),
            rate_gbps=float(rate) if rate is not None else None,
            state=self.get(raw, "state", STR),
        )

    def _summary(self, raw: Mapping[str, Any], out: dict[str, Any], sections: frozenset[str]) -> None:
        body = self.mapping(raw, "summary")
        if body is not None:
            worst = self.link_class(body, "worstNICDistance")
            out["summary"] = PublishedSummary(worst_nic_distance=worst, **self.fields(body, _SUMMARY))


#: The placement parts of GPUs and NICs and the rows of NIC classes read so far, by their values:
#: the nodes of one kind publish the same ones, and building a frozen record (or sorting a row)
#: costs several times looking one up. Values are immutable, so a record is shared by every read
#: that has it; each table is emptied when it would pass ``_PLACED_MAX`` entries, so objects of
#: ever new values cost no more than that.
_PLACED_GPUS: dict[tuple[Any, ...], Gpu] = {}
_PLACED_NICS: dict[tuple[Any, ...], Nic] = {}
_PLACED_ROWS: dict[tuple[Any, ...], tuple[tuple[str, LinkClass], ...]] = {}
_PLACED_MAX = 4096


def _placed(table: dict[tuple[Any, ...], T], key: tuple[Any, ...], record: T) -> None:
    if len(table) >= _PLACED_MAX:
        table.clear()
    table[key] = record


def _nic_names(value: Any) -> tuple[str | None, ...] | None:
    """The names of ``status.nics`` by position (None where an entry has none), the columns of
    ``nicDistances``; None when the list cannot be read (the ``nics`` section says why)."""
    if type(value) is not list or len(value) > MAX_NICS:
        return None
    return tuple(n.get("name") if type(n) is dict and type(n.get("name")) is str else None for n in value)


def _numa_cpus(value: Any) -> dict[int, CpuSet]:
    """NUMA node id → its CPUs, from ``status.numaNodes`` as far as it reads (for the GPUs' implied
    ``cpuAffinity``; the ``numaNodes`` section notes what does not read)."""
    out: dict[int, CpuSet] = {}
    if type(value) is not list or len(value) > MAX_NUMA_NODES:
        return out
    for n in value:
        if type(n) is dict and type(n.get("id")) is int and type(n.get("cpus")) is str:
            try:
                out[n["id"]] = CpuSet.parse(n["cpus"])
            except ValueError:
                continue
    return out


def _wrong(key: str, value: Any, kind: Kind) -> str:
    """``rateGbps '400' is not a number``: a value of the wrong type, shown short."""
    shown = repr(value)[:32] if isinstance(value, (str, int, float, bool)) else f"a {type(value).__name__}"
    return f"{key} {shown} is not {_KINDS.get(kind, 'readable')}"
