from __future__ import annotations

from typing import Any

import pytest

from nodetopo.model import LinkClass
from nodetopo.placement.request import AnnotationError, PodRequest, parse_pod_request, parse_quantity


def pod(annotations: dict[str, str] | None = None, gpus: Any = 2, init_gpus: Any = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "a", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}
    if init_gpus is not None:
        spec["initContainers"] = [{"name": "i", "resources": {"requests": {"nvidia.com/gpu": init_gpus}}}]
    return {"metadata": {"name": "p", "annotations": annotations or {}}, "spec": spec}


def test_every_annotation_is_read() -> None:
    request = parse_pod_request(
        pod(
            {
                "nodetopo.io/gpus-in-one-island": "true",
                "nodetopo.io/max-nic-distance": "pxb",
                "nodetopo.io/numa-aligned": "True",
                "nodetopo.io/rdma": "required",
                "nodetopo.io/link-layer": "infiniband",
            }
        )
    )
    assert request == PodRequest(
        gpus=2,
        one_island=True,
        max_nic_distance=LinkClass.PXB,
        numa_aligned=True,
        rdma=True,
        link_layer="InfiniBand",
    )
    assert request.constrained


def test_no_annotations_is_a_plain_gpu_request() -> None:
    request = parse_pod_request(pod(gpus="4"))
    assert request == PodRequest(gpus=4)
    assert not request.constrained


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("nodetopo.io/max-nic-distance", "CLOSE"),
        ("nodetopo.io/gpus-in-one-island", "yes please"),
        ("nodetopo.io/rdma", "maybe"),
        ("nodetopo.io/link-layer", "RoCE"),
    ],
)
def test_bad_values_name_the_annotation(key: str, value: str) -> None:
    with pytest.raises(AnnotationError, match=key):
        parse_pod_request(pod({key: value}))


def test_gpu_count_uses_the_larger_of_containers_and_init_containers() -> None:
    assert parse_pod_request(pod(gpus=2, init_gpus=3)).gpus == 3
    assert parse_pod_request(pod(gpus=2, init_gpus=1)).gpus == 2
    two_containers = pod()
    two_containers["spec"]["containers"].append(
        {"name": "b", "resources": {"requests": {"nvidia.com/gpu": "1"}}}
    )
    assert parse_pod_request(two_containers).gpus == 3


def test_quantities() -> None:
    assert parse_quantity("2") == 2
    assert parse_quantity("1k") == 1000
    assert parse_quantity("1Ki") == 1024
    with pytest.raises(AnnotationError):
        parse_quantity("two")


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (" true", '" true" (spaces are not allowed)'),
        ("true ", '"true " (spaces are not allowed)'),
        ("", "an empty value"),
        ("\uff54rue", "a value with characters outside printable ASCII"),
        ("true\n", "a value with characters outside printable ASCII"),
    ],
)
def test_flag_values_are_exact_words(value: str, shown: str) -> None:
    """The admission policies' grammar: no surrounding spaces, no empty value, ASCII only."""
    with pytest.raises(AnnotationError) as info:
        parse_pod_request(pod({"nodetopo.io/numa-aligned": value}))
    assert str(info.value) == f"nodetopo.io/numa-aligned: expected true or false, got {shown}"


def test_case_folding_look_alikes_are_refused() -> None:
    """(?i) alone folds U+017F (long s) into s: 'ſys' must not read as SYS."""
    with pytest.raises(AnnotationError, match="outside printable ASCII"):
        parse_pod_request(pod({"nodetopo.io/max-nic-distance": "\u017fys"}))


def test_sidecar_gpus_add_to_the_containers_as_kubernetes_counts_them() -> None:
    """Was: a sidecar (init container, ``restartPolicy: Always``) counted like an ordinary init
    container, so 8 + an 8-GPU sidecar was an 8-GPU pod for the extender."""

    def init(name: str, gpus: int, sidecar: bool) -> dict[str, Any]:
        container: dict[str, Any] = {"name": name, "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
        return {**container, "restartPolicy": "Always"} if sidecar else container

    def gpus(main: int, *inits: tuple[int, bool]) -> int:
        spec = pod(gpus=str(main))
        spec["spec"]["initContainers"] = [init(f"i{n}", g, s) for n, (g, s) in enumerate(inits)]
        return parse_pod_request(spec).gpus

    assert gpus(8, (8, True)) == 16
    assert gpus(1, (1, True), (2, False)) == 3  # the init after the sidecar runs beside it
    assert gpus(1, (3, False), (1, True)) == 3  # the one before runs alone
    assert gpus(2, (1, False), (1, False)) == 2  # ordinary init containers: the largest, alone
