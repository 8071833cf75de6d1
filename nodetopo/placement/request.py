"""What a pod asks of a node's topology: its GPU count and its ``nodetopo.io/`` annotations.

Annotations (all optional; a pod without any is only checked for GPU capacity):

``nodetopo.io/gpus-in-one-island: "true"``
    every GPU of the pod within one NVLink island (always true for a single GPU).
``nodetopo.io/max-nic-distance: PIX|PXB|PHB|NODE|SYS``
    every GPU of the pod has a NIC at this PCIe class or closer (an RDMA NIC when
    ``nodetopo.io/rdma: required``), as ``nvidia-smi topo -m`` names the classes.
``nodetopo.io/numa-aligned: "true"``
    every GPU of the pod on one NUMA node (GPUs whose NUMA node is unknown never qualify).
``nodetopo.io/rdma: required``
    the node has an RDMA NIC that is not DOWN; with ``max-nic-distance`` the distance is measured to one.
``nodetopo.io/link-layer: InfiniBand|Ethernet``
    a preference, not a filter: nodes whose RDMA NICs near the pod's GPUs use this link layer score higher.

``nodetopo.io/min-busbw: "400"`` (not read by the extender)
    the all-reduce bus bandwidth in GB/s the workload needs: ``nodetopo accept --pod`` and ``nodetopo
    probe`` judge a result below it that is what the placement gives as ``PlacedWrong``
    (``parse_min_busbw``).

Values are case-insensitive words with nothing around them: no spaces, no sign, no empty value, ASCII
only (``GRAMMAR``; the admission policies in ``deploy/admission/`` use the same patterns and the same
messages, ``value_error``). A malformed value is an ``AnnotationError``: the extender rejects every
node for that pod with the error text, so the pod's events say which annotation is wrong.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

from nodetopo.errors import NodetopoError
from nodetopo.model import LinkClass
from nodetopo.resource.identity import PREFIX

GPU_RESOURCE = "nvidia.com/gpu"

ONE_ISLAND = PREFIX + "gpus-in-one-island"
MAX_NIC_DISTANCE = PREFIX + "max-nic-distance"
NUMA_ALIGNED = PREFIX + "numa-aligned"
RDMA = PREFIX + "rdma"
LINK_LAYER = PREFIX + "link-layer"

#: Every annotation the extender reads, in the order docs/scheduler-extender.md documents them.
ANNOTATIONS = (ONE_ISLAND, MAX_NIC_DISTANCE, NUMA_ALIGNED, RDMA, LINK_LAYER)
#: The bus bandwidth (GB/s) the workload needs: read by ``nodetopo accept --pod`` and ``nodetopo probe``.
MIN_BUSBW = PREFIX + "min-busbw"


@dataclasses.dataclass(frozen=True, slots=True)
class Grammar:
    """What one annotation's value must look like: an RE2/Python-compatible ``pattern`` (matched
    against the whole value) and the ``expected`` text of the error message."""

    pattern: str
    expected: str


_FLAG = Grammar("(?i)^(true|false|yes|no|1|0)$", "true or false")
#: The value grammar of every annotation the extender reads (admission adds its own in
#: ``nodetopo.admission.rules``). The CEL policies carry the same patterns (a test compares them).
GRAMMAR: dict[str, Grammar] = {
    ONE_ISLAND: _FLAG,
    MAX_NIC_DISTANCE: Grammar("(?i)^(PIX|PXB|PHB|NODE|SYS)$", "one of PIX|PXB|PHB|NODE|SYS"),
    NUMA_ALIGNED: _FLAG,
    RDMA: Grammar("(?i)^(required|true|optional|false)$", "required or optional"),
    LINK_LAYER: Grammar("(?i)^(InfiniBand|Ethernet)$", "InfiniBand or Ethernet"),
}
#: ``min-busbw``: a positive number of GB/s, at most 99999 with up to three decimals
MIN_BUSBW_GRAMMAR = Grammar(
    r"^([1-9][0-9]{0,4}(\.[0-9]{1,3})?|0\.([1-9][0-9]{0,2}|0[1-9][0-9]?|00[1-9]))$",
    "a positive number of GB/s (400, 372.5)",
)
_PRINTABLE = re.compile(r"^[ -~]*$")
_LONGEST_ECHO = 32


def describe_value(value: str) -> str:
    """How an error message shows a bad value: quoted when short printable ASCII (with a hint for
    spaces and signs), else only what is wrong with it, so a message never carries control
    characters, look-alike Unicode or a huge paste."""
    if value == "":
        return "an empty value"
    if not _PRINTABLE.fullmatch(value):
        return "a value with characters outside printable ASCII"
    if len(value) > _LONGEST_ECHO:
        return f"a value of {len(value)} characters"
    hint = ""
    if " " in value:
        hint = " (spaces are not allowed)"
    elif value[0] in "+-":
        hint = " (no sign allowed)"
    return f'"{value}"{hint}'


def value_error(key: str, value: str, expected: str) -> str:
    """The message for a value of ``key`` that does not match its grammar."""
    return f"{key}: expected {expected}, got {describe_value(value)}"


def check_value(key: str, value: Any, grammar: Grammar) -> str:
    """``value`` as a string when it is printable ASCII matching ``grammar``; else an
    ``AnnotationError``. (ASCII first: ``(?i)`` folds look-alikes such as U+017F into ``s``.)"""
    text = value if isinstance(value, str) else str(value)
    if not (_PRINTABLE.fullmatch(text) and re.fullmatch(grammar.pattern, text)):
        raise AnnotationError(value_error(key, text, grammar.expected))
    return text


_TRUE = frozenset({"true", "yes", "1"})
_LINK_LAYERS = {"infiniband": "InfiniBand", "ethernet": "Ethernet"}
_QUANTITY = re.compile(r"^\s*([0-9]{1,30}(?:\.[0-9]{1,30})?)\s*(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|m)?\s*$")
_SUFFIX: dict[str, Fraction | int] = {
    "": 1,
    "m": Fraction(1, 1000),
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}


class AnnotationError(NodetopoError):
    """A ``nodetopo.io/`` annotation or the GPU request of a pod could not be read."""


class PodShapeError(AnnotationError):
    """The pod object itself is malformed: a field of the wrong JSON type, or a quantity no API server
    admits (beyond int64). Such a pod cannot have come from kube-scheduler: the extender answers 400."""


@dataclasses.dataclass(frozen=True, slots=True)
class PodRequest:
    """The topology needs of one pod. Hashable: the extender memoizes verdicts on it."""

    gpus: int = 0
    one_island: bool = False
    max_nic_distance: LinkClass | None = None
    numa_aligned: bool = False
    rdma: bool = False
    link_layer: str | None = None  #: preferred RDMA link layer (InfiniBand | Ethernet)

    @property
    def constrained(self) -> bool:
        """True when the pod asks for anything beyond a GPU count."""
        return self.one_island or self.max_nic_distance is not None or self.numa_aligned or self.rdma


#: the largest quantity the API server stores (int64); a pod asking for more is malformed
MAX_QUANTITY = 2**63 - 1


def parse_quantity(text: Any) -> Fraction:
    """A Kubernetes resource quantity (``2``, ``500m``, ``1Ki``) as an exact number.

    A JSON integer is accepted as well as a string. Anything else, text that is not a quantity or a
    value beyond int64 is a ``PodShapeError``: the API server admits no such pod.
    """
    if isinstance(text, bool) or not isinstance(text, (str, int)):
        raise PodShapeError(f"a resource quantity must be a string, not {type(text).__name__}")
    if isinstance(text, int):
        value = Fraction(text)
    else:
        match = _QUANTITY.match(text[:64])
        if len(text) > 64 or not match:
            raise PodShapeError(f"not a resource quantity: {text[:64]!r}")
        value = Fraction(match.group(1)) * _SUFFIX[match.group(2) or ""]
    if not 0 <= value <= MAX_QUANTITY:
        raise PodShapeError(f"resource quantity {str(text)[:64]!r} is out of range (0 to 2^63-1)")
    return value


def as_object(value: Any, what: str) -> Mapping[str, Any]:
    """``value`` when it is a JSON object (``None`` reads as empty), else a ``PodShapeError``."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise PodShapeError(f"{what} must be an object, not {type(value).__name__}")
    return value


def as_list(value: Any, what: str) -> list[Any]:
    """``value`` when it is a JSON list (``None`` reads as empty), else a ``PodShapeError``."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise PodShapeError(f"{what} must be a list, not {type(value).__name__}")
    return value


def _container_gpus(container: Any, what: str) -> int:
    resources = as_object(as_object(container, what).get("resources"), f"{what}.resources")
    for kind in ("requests", "limits"):  # extended resources: requests == limits; limits alone imply requests
        value = as_object(resources.get(kind), f"{what}.resources.{kind}").get(GPU_RESOURCE)
        if value is not None:
            return math.ceil(parse_quantity(value))
    return 0


def effective_gpus(containers: Iterable[int], inits: Iterable[tuple[int, bool]]) -> int:
    """GPUs a pod holds at its peak, counted as the kubelet and the scheduler count a resource:
    ``containers`` the requests of the containers, ``inits`` those of the init containers in order,
    each with whether it is a sidecar (``restartPolicy: Always``). A sidecar keeps running beside
    the init containers after it and the containers: it adds to both. An ordinary init container
    runs alone, beside the sidecars started before it: the largest such moment counts if it is
    larger than the containers with every sidecar."""
    sidecars = 0
    peak = 0
    for gpus, sidecar in inits:
        if sidecar:
            sidecars += gpus
            peak = max(peak, sidecars)
        else:
            peak = max(peak, gpus + sidecars)
    return max(sum(containers) + sidecars, peak)


def is_sidecar(container: Mapping[str, Any]) -> bool:
    """An init container that keeps running (``restartPolicy: Always``, a sidecar)."""
    return container.get("restartPolicy") == "Always"


def pod_gpus(spec: Mapping[str, Any]) -> int:
    """GPUs a pod spec requests (``effective_gpus``: sidecars add to the containers, an ordinary
    init container counts alone with the sidecars before it)."""
    spec = as_object(spec, "spec")
    containers = as_list(spec.get("containers"), "spec.containers")
    inits = as_list(spec.get("initContainers"), "spec.initContainers")
    return effective_gpus(
        (_container_gpus(c, f"spec.containers[{i}]") for i, c in enumerate(containers)),
        (
            (
                _container_gpus(c, f"spec.initContainers[{i}]"),
                is_sidecar(as_object(c, "spec.initContainers[]")),
            )
            for i, c in enumerate(inits)
        ),
    )


def _value(annotations: Mapping[str, str], key: str) -> str | None:
    """The value of ``key`` checked against its grammar, lower-cased; None when absent."""
    if key not in annotations:
        return None
    return check_value(key, annotations[key], GRAMMAR[key]).lower()


def _flag(annotations: Mapping[str, str], key: str) -> bool:
    return _value(annotations, key) in _TRUE


def parse_pod_request(pod: Any) -> PodRequest:
    """The ``PodRequest`` of a pod object (a dict as the API serves it)."""
    pod = as_object(pod, "Pod")
    metadata = as_object(pod.get("metadata"), "Pod.metadata")
    annotations = as_object(metadata.get("annotations"), "Pod.metadata.annotations")
    for key in ANNOTATIONS:
        if key in annotations and not isinstance(annotations[key], str):
            raise PodShapeError(f"annotation {key} must be a string, not {type(annotations[key]).__name__}")
    gpus = pod_gpus(as_object(pod.get("spec"), "Pod.spec"))
    distance_text = _value(annotations, MAX_NIC_DISTANCE)
    distance = LinkClass[distance_text.upper()] if distance_text else None
    layer_text = _value(annotations, LINK_LAYER)
    link_layer = _LINK_LAYERS[layer_text] if layer_text else None
    return PodRequest(
        gpus=gpus,
        one_island=_flag(annotations, ONE_ISLAND),
        max_nic_distance=distance,
        numa_aligned=_flag(annotations, NUMA_ALIGNED),
        rdma=_value(annotations, RDMA) in ("required", "true"),
        link_layer=link_layer,
    )


def parse_min_busbw(annotations: Mapping[str, Any]) -> float | None:
    """The ``nodetopo.io/min-busbw`` a pod's annotations declare, in GB/s; None when absent. A value
    that is not a positive number of GB/s (``MIN_BUSBW_GRAMMAR``) is an ``AnnotationError``."""
    if MIN_BUSBW not in annotations:
        return None
    value = annotations[MIN_BUSBW]
    if not isinstance(value, str):
        raise PodShapeError(f"annotation {MIN_BUSBW} must be a string, not {type(value).__name__}")
    return float(check_value(MIN_BUSBW, value, MIN_BUSBW_GRAMMAR))
