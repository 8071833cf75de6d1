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

import functools
import re
from collections.abc import Callable, Collection, Mapping
from typing import Any, cast

from nodetopo.model import (
    CpuSet,
    EdgeKind,
    FabricTier,
    Gpu,
    GpuLink,
    LinkClass,
    NetworkPosition,
    Nic,
    NvlinkIsland,
    PodRef,
    PreferredGpuSets,
    SourceStatus,
    SwitchPort,
)
from nodetopo.resource.edges import read_health
from nodetopo.resource.fields import BOOL, INT, NUMBER, STR, FieldReader, T, fields_of
from nodetopo.resource.limits import (
    MAX_CONDITIONS,
    MAX_GPU_LINKS,
    MAX_GPUS,
    MAX_HOLDERS,
    MAX_ID,
    MAX_ISLANDS,
    MAX_MIG_DEVICES,
    MAX_NEIGHBOURS,
    MAX_NICS,
    MAX_NUMA_NODES,
    MAX_SOURCES,
    MAX_TIER_MEMBERS,
    MAX_TIERS,
)
from nodetopo.resource.published import (
    ALL,
    SECTIONS,
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


_GPU = fields_of(uuid=STR, model=STR, pcieRoot=STR, gpuNumaNode=INT, migEnabled=BOOL, memoryBytes=INT)
_NIC = fields_of(netdev=STR, pcieRoot=STR, numaNode=INT, linkLayer=STR, state=STR, rateGbps=NUMBER, rdma=BOOL)
_NIC_PLACED = fields_of(linkLayer=STR, state=STR, rdma=BOOL)
_CONDITION = fields_of(status=STR, reason=STR, message=STR, lastTransitionTime=STR)
_SUMMARY = fields_of(gpuCount=INT, gpuModel=STR, islands=STR)
_ALLOCATION = fields_of(state=STR, message=STR)
_MIG = fields_of(parentUUID=STR, parentIndex=INT, profile=STR, gpuInstance=INT, computeInstance=INT)
_NEIGHBOUR = fields_of(port=INT, state=STR, switchID=STR, switchName=STR, switchPort=STR, peerIsSwitch=BOOL)
_EDGE = fields_of(gpu=INT, nic=STR, port=INT, peer=STR, since=STR)
_KINDS_OF_EDGE: dict[str, EdgeKind] = {k.value: k for k in EdgeKind}
_CLASSES: dict[str, LinkClass] = dict(LinkClass.__members__)
_GPU_DEVICE = re.compile(r"GPU(\d{1,9})")  #: an edge's device that is a GPU, by index
_TEXT = (str, type(None))  #: a string field that may be absent
_NONE_DEGRADED: frozenset[str] = frozenset()


#: a section's reader: (the status, the values read so far, the sections asked for) → fills values
_Section = Callable[[Mapping[str, Any], dict[str, Any], frozenset[str]], None]


class _Reader(FieldReader):
    """One read: ``FieldReader``'s problems and field readers, and the reader of each section."""

    def status(self, raw: Mapping[str, Any], sections: frozenset[str]) -> PublishedStatus:
        self.enter("status", "status")
        values: dict[str, Any] = {
            "node_name": self.get(raw, "nodeName", STR),
            "agent_version": self.get(raw, "agentVersion", STR),
            "content_hash": self.get(raw, "contentHash", STR),
        }
        readers: dict[str, _Section] = {
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
            "health": functools.partial(read_health, self),
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
                self.here("missing 'index'", Severity.MALFORMED)
                continue
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < MAX_ID:
                self.here(f"GPU index {str(index)[:32]!r}", Severity.MALFORMED)
                continue
            if index in seen:
                self.here(f"GPU index {index} listed twice", Severity.MALFORMED)
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
            self.here(f"nicDistances: not a list of {len(columns)} classes (one per NIC)")
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
                self.here(f"missing {str(word)[:32]!r}")  # the word is not a class: the round trip's wording
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
            self.here("degradedNICs: a NIC the GPU's nicDistances has no class for")
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
                self.here(f"holders of a GPU: not a list of at most {MAX_HOLDERS}")
                return None
            holders = []
            for h in value:
                ns, name = (h.get("namespace"), h.get("name")) if isinstance(h, Mapping) else (None, None)
                if not (isinstance(ns, str) and isinstance(name, str)):
                    self.here("a holder without a namespace and name")
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
                self.here(f"NIC {name[:64]!r} listed twice", Severity.MALFORMED)
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
        from nodetopo.model import NumaNode  # here: the per-source facts, for the sections that hold them

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
        from nodetopo.model import MigDevice

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
                self.here("missing 'sets'")
            sets = [
                self.ints({"set": s}, "set", "GPUs of a set", MAX_GPUS)
                for s in self.items(raw_sets, "sets", MAX_GPUS, objects=False)
            ]
            if size is not None and raw_sets is not None and all(s is not None for s in sets):
                preferred.append(PreferredGpuSets(size=size, sets=tuple(s for s in sets if s is not None)))
        out["preferred_gpu_sets"] = tuple(preferred)

    def _fabric(self, raw: Mapping[str, Any], out: dict[str, Any], sections: frozenset[str]) -> None:
        from nodetopo.model import FabricInfo

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
            self.here("network is not an object", Severity.MALFORMED)
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
            self.here("nvlinkDomain is not an object")

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
