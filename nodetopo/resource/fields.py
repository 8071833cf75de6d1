"""The field-level part of reading a published NodeTopology: a value of the kind the schema says,
or unknown with the reason noted as a ``Problem`` (the rules are ``nodetopo.resource.reader``'s)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from nodetopo.model import CpuSet, LinkClass, PciAddress
from nodetopo.resource.limits import MAX_ID
from nodetopo.resource.published import Problem, Severity

_CLASSES: dict[str, LinkClass] = dict(LinkClass.__members__)

#: The JSON types a field takes (``True`` is not an integer: ``bool`` is a type of its own).
Kind = tuple[type, ...]
INT: Kind = (int,)
STR: Kind = (str,)
BOOL: Kind = (bool,)
NUMBER: Kind = (int, float)
_KINDS = {INT: "an integer", STR: "a string", BOOL: "true or false", NUMBER: "a number"}


#: (JSON key, attribute, kind) of the plain fields of an entry, read by ``_Reader.fields``
Fields = tuple[tuple[str, str, Kind], ...]


def fields_of(**kinds: Kind) -> Fields:
    """``Fields`` from the JSON keys (the attribute is the key in snake case: ``pcieRoot``, ``pcie_root``)."""
    return tuple(
        (key, re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", key).lower(), kind) for key, kind in kinds.items()
    )


def of_kind(value: Any, kind: Kind) -> bool:
    """``value`` is of ``kind`` (exactly, as JSON gives it, or a subclass: an enum member)."""
    if type(value) in kind:
        return True
    return isinstance(value, kind) and not (isinstance(value, bool) and bool not in kind)


T = TypeVar("T")


class FieldReader:
    """One read's problems found so far, and the readers of its fields and lists (the section
    readers of ``nodetopo.resource.reader`` and ``nodetopo.resource.edges`` build on them)."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []
        self.section = "status"
        self._field = "status"
        self._cpulists: dict[str, CpuSet] = {}

    def note(self, section: str, what: str, severity: Severity = Severity.UNKNOWN, field: str = "") -> None:
        self.problems.append(Problem(section, field or f"status.{section}", what, severity))

    def here(self, what: str, severity: Severity = Severity.UNKNOWN) -> None:
        self.note(self.section, what, severity, field=self._field)

    # ---- fields -------------------------------------------------------------------------

    def get(self, item: Mapping[str, Any], key: str, kind: Kind, *, required: bool = False) -> Any:
        """``item[key]`` when it is of ``kind`` (``INT``, ``STR``, ...); else None, noted when it
        is present and wrong, or missing though ``required``."""
        raw = item.get(key)
        if raw is None:
            if required:
                self.here(f"missing {key!r}")
            return None
        if of_kind(raw, kind):
            return raw
        self.here(wrong(key, raw, kind))
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
        if raw is not None and of_kind(raw, kind):
            return raw
        self.here(f"missing {key!r}" if raw is None else wrong(key, raw, kind), severity)
        return None

    def link_class(self, item: Mapping[str, Any], key: str) -> LinkClass | None:
        raw = item.get(key)
        if not raw:
            return None
        if isinstance(raw, str) and raw in _CLASSES:
            return _CLASSES[raw]
        self.here(f"missing {str(raw)[:32]!r}")  # the word is not a class: the round trip's wording
        return None

    def identifier(self, item: Mapping[str, Any], key: str, what: str) -> int | None:
        """A GPU's ``island`` or ``numaNode``: an int from 0 to 2^31-1, else unknown and malformed."""
        raw = item.get(key)
        if raw is None or (type(raw) is int and 0 <= raw < MAX_ID):
            return raw
        if isinstance(raw, bool) or not isinstance(raw, int) or not 0 <= raw < MAX_ID:
            self.here(f"GPU {what} {str(raw)[:32]!r}", Severity.MALFORMED)
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
                self.here(str(e))
        return cpus

    def address(self, item: Mapping[str, Any]) -> PciAddress | None:
        text = self.get(item, "pciBusID", STR)
        if not text:
            return None
        try:
            return PciAddress.parse(text)
        except ValueError as e:
            self.here(str(e))
            return None

    def strings(self, value: Any, what: str, bound: int) -> tuple[str, ...]:
        if type(value) is list and len(value) <= bound and all(type(v) is str for v in value):
            return tuple(value)
        items = self.items(value, what, bound, objects=False)
        kept = tuple(v for v in items if isinstance(v, str))
        if len(kept) < len(items):
            self.here(f"{what}: not all strings")
        return kept

    def ints(self, item: Mapping[str, Any], key: str, what: str, bound: int) -> tuple[int, ...] | None:
        """The list of ints ``item[key]`` (a key of the entry), or None (noted) when it is missing, not
        a list of ints or over ``bound``: the entry holding it is left out."""
        value = item.get(key)
        if value is None:
            self.here(f"missing {key!r}")
            return None
        if not isinstance(value, list) or len(value) > bound:
            self.items(value, what, bound, objects=False)
            return None
        kept = tuple(v for v in value if of_kind(v, INT))
        if len(kept) < len(value):
            self.here(f"{what}: not all integers")
            return None
        return kept

    # ---- lists --------------------------------------------------------------------------

    def items(self, value: Any, what: str, bound: int, *, objects: bool = True, one: str = "") -> list[Any]:
        """The entries of a list field: [] when absent; not a list or over ``bound``: [] and
        malformed; with ``objects`` an entry that is not an object is left out (malformed)."""
        if value is None:
            return []
        if not isinstance(value, list):
            self.here(f"{what} is not a list", Severity.MALFORMED)
            return []
        if len(value) > bound:
            self.here(f"{len(value)} {what}, at most {bound}", Severity.BOUNDS)
            return []
        if not objects:
            return value
        kept = [v for v in value if type(v) is dict or isinstance(v, Mapping)]
        if len(kept) < len(value):
            self.here(f"{one or 'an entry of ' + what} is not an object", Severity.MALFORMED)
        return kept

    def mapping(
        self, raw: Mapping[str, Any], key: str, severity: Severity = Severity.UNKNOWN
    ) -> Mapping[str, Any] | None:
        """The object ``raw[key]``; None when absent, or (noted) when it is not an object."""
        body = raw.get(key)
        if body is None or isinstance(body, Mapping):
            return body
        self.here(f"{key} is not an object", severity)
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


def wrong(key: str, value: Any, kind: Kind) -> str:
    """``rateGbps '400' is not a number``: a value of the wrong type, shown short."""
    shown = repr(value)[:32] if isinstance(value, (str, int, float, bool)) else f"a {type(value).__name__}"
    return f"{key} {shown} is not {_KINDS.get(kind, 'readable')}"
