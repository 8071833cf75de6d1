"""The NodeTopology CRD (crds/nodetopology.yaml) as the real kube-apiserver enforces and prints it."""

from __future__ import annotations

import copy
import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import BUNDLES as BUNDLES_DIR
from helpers import bundle_dirs

from nodetopo.errors import InvalidError
from nodetopo.kube.session import ApiSession
from nodetopo.publish import Publisher
from nodetopo.resource.body import to_nodetopology
from nodetopo.resource.identity import API_VERSION, GROUP, KIND, PLURAL, VERSION
from nodetopo.resource.labels import to_labels, uncertain_keys
from nodetopo.topology.discover import bundle_context, scan

from . import bodies
from .cluster import LocalCluster

pytestmark = pytest.mark.k8s

BUNDLES = bundle_dirs()


def _name() -> str:
    return f"crd-{uuid.uuid4().hex[:10]}"


def _apply(session: ApiSession, body: dict[str, Any]) -> dict[str, Any]:
    name = body["metadata"]["name"]
    meta = {"apiVersion": API_VERSION, "kind": KIND, "metadata": copy.deepcopy(body["metadata"])}
    session.apply_cluster_object(GROUP, VERSION, PLURAL, name, meta, status=False)
    status = copy.deepcopy(body["status"])
    for condition in status.get("conditions", []):
        condition.setdefault("lastTransitionTime", "2026-01-02T03:04:05Z")
    patch = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": name}, "status": status}
    return session.apply_cluster_object(GROUP, VERSION, PLURAL, name, patch, status=True)


@pytest.fixture
def session(api_client: Any) -> ApiSession:
    return ApiSession(api_client, field_manager="crd-tests")


@pytest.mark.parametrize("machine", sorted(bodies.ALL))
def test_fixture_bodies_are_accepted_and_kept_whole(
    machine: str, session: ApiSession, cluster: LocalCluster
) -> None:
    name = _name()
    body = bodies.ALL[machine](name)
    stored = _apply(session, body)
    # Nothing pruned: a field missing from the schema would silently disappear here.
    expected = copy.deepcopy(body["status"])
    for condition in expected["conditions"]:
        condition["lastTransitionTime"] = "2026-01-02T03:04:05Z"
    assert stored["status"] == expected
    status, again = cluster.request("GET", f"/apis/{GROUP}/{VERSION}/{PLURAL}/{name}")
    assert status == 200
    assert again["status"] == expected


def test_there_are_fixture_bundles() -> None:
    assert len(BUNDLES) >= 7


@pytest.mark.parametrize("bundle", BUNDLES, ids=[b.name for b in BUNDLES])
def test_every_fixture_bundle_is_published_whole(
    bundle: Path,
    cluster: LocalCluster,
    api_client_for: Callable[..., Any],
    make_node: Callable[..., dict[str, Any]],
) -> None:
    """discover → to_nodetopology → publish: the server accepts it and prunes nothing; the labels
    are valid Node labels."""
    node = make_node(f"{bundle.name}-{uuid.uuid4().hex[:6]}")["metadata"]["name"]
    topology = scan(bundle_context(bundle)).topology
    body = to_nodetopology(topology, node)
    labels = to_labels(topology)
    publisher = Publisher(ApiSession(api_client_for("publisher")), node)
    outcome = publisher.publish(body, labels, uncertain_keys=uncertain_keys(topology))
    assert outcome.topology.written
    status, stored = cluster.request("GET", f"/apis/{GROUP}/{VERSION}/{PLURAL}/{node}")
    assert status == 200
    for condition in stored["status"]["conditions"]:
        assert condition.pop("lastTransitionTime")
    assert stored["status"] == body["status"]
    _, node_obj = cluster.request("GET", f"/api/v1/nodes/{node}")
    assert {k: v for k, v in node_obj["metadata"]["labels"].items() if k.startswith("nodetopo.io/")} == labels


def test_crd_names_scope_and_subresource(kubectl: Callable[..., Any]) -> None:
    resources = kubectl("api-resources", "--api-group=nodetopo.io", "--no-headers").stdout.split()
    assert resources[:5] == ["nodetopologies", "ntopo", "nodetopo.io/v1alpha1", "false", "NodeTopology"]


def _created(session: ApiSession) -> dict[str, Any]:
    body = bodies.hgx_h100(_name())
    _apply(session, body)
    return body


def _reject(session: ApiSession, body: dict[str, Any]) -> str:
    with pytest.raises(InvalidError) as info:
        _apply(session, body)
    assert info.value.status == 422
    return str(info.value)


def test_wrong_enum_is_rejected(session: ApiSession) -> None:
    body = _created(session)
    body["status"]["gpus"][3]["nics"][1]["distance"] = "NEAR"
    message = _reject(session, body)
    assert 'status.gpus[3].nics[1].distance: Unsupported value: "NEAR"' in message
    assert 'supported values: "PIX", "PXB", "PHB", "NODE", "SYS"' in message


def test_wrong_nullable_class_is_rejected(session: ApiSession) -> None:
    body = _created(session)
    body["status"]["gpus"][3]["nicDistance"] = "NEAR"
    body["status"]["summary"]["worstNICDistance"] = "pix"
    message = _reject(session, body)
    assert 'status.gpus[3].nicDistance: Invalid value: "NEAR"' in message
    assert 'status.summary.worstNICDistance: Invalid value: "pix"' in message
    assert "should match '^(PIX|PXB|PHB|NODE|SYS)$'" in message


def test_wrong_link_layer_is_rejected(session: ApiSession) -> None:
    body = _created(session)
    body["status"]["nics"][0]["linkLayer"] = "infiniband"
    message = _reject(session, body)
    assert 'status.nics[0].linkLayer: Invalid value: "infiniband"' in message
    assert "should match '^(InfiniBand|Ethernet)$'" in message


def test_negative_index_is_rejected(session: ApiSession) -> None:
    body = _created(session)
    body["status"]["gpus"][0]["index"] = -1
    assert (
        "status.gpus[0].index: Invalid value: -1: gpus[0].index in body should be greater than or equal to 0"
        in (_reject(session, body))
    )


def test_missing_required_field_is_rejected(session: ApiSession) -> None:
    body = _created(session)
    del body["status"]["nics"][2]["rdma"]
    assert "status.nics[2].rdma: Required value" in _reject(session, body)


def test_island_of_one_gpu_is_rejected(session: ApiSession) -> None:
    body = _created(session)
    body["status"]["nvlinkIslands"][0]["gpus"] = [0]
    message = _reject(session, body)
    assert "status.nvlinkIslands[0].gpus: Invalid value: 1: " in message
    assert "nvlinkIslands[0].gpus in body should have at least 2 items" in message


def test_malformed_pci_address_is_rejected(session: ApiSession) -> None:
    body = _created(session)
    body["status"]["gpus"][1]["pciBusID"] = "0000:3B:00.0"  # upper case is not the sysfs form
    assert 'status.gpus[1].pciBusID: Invalid value: "0000:3B:00.0"' in _reject(session, body)


def test_status_must_name_its_node(session: ApiSession) -> None:
    body = _created(session)
    body["status"]["nodeName"] = "some-other-node"
    assert "status.nodeName must equal metadata.name" in _reject(session, body)


def test_a_gpu_index_listed_twice_is_stored_and_read_as_malformed(session: ApiSession) -> None:
    """The status lists are atomic (one writer applies them whole; a map list made managedFields
    list every key of every entry), so the API server no longer refuses a GPU index listed twice;
    the reader does: placement sees the object as malformed and offers none of its GPUs."""
    from nodetopo.placement.fit import shape_of
    from nodetopo.resource.reader import read_nodetopology

    body = _created(session)
    body["status"]["gpus"][1]["index"] = 0
    stored = _apply(session, body)
    read = read_nodetopology(stored)
    assert read.malformed is not None and "GPU index 0 listed twice" in read.malformed.what
    assert shape_of(read).invalid and not shape_of(read).gpus


def test_condition_without_time_is_rejected(session: ApiSession) -> None:
    body = _created(session)
    status = copy.deepcopy(body["status"])
    status["conditions"][0]["lastTransitionTime"] = None
    with pytest.raises(InvalidError) as info:
        session.apply_cluster_object(
            GROUP,
            VERSION,
            PLURAL,
            body["metadata"]["name"],
            {
                "apiVersion": API_VERSION,
                "kind": KIND,
                "metadata": {"name": body["metadata"]["name"]},
                "status": status,
            },
            status=True,
        )
    assert "lastTransitionTime" in str(info.value)


# --------------------------------------------------------------------------------------------
# kubectl get: the printer columns
# --------------------------------------------------------------------------------------------


def _table(output: str) -> list[dict[str, str]]:
    """Parse kubectl's column output by the header's column positions (values may hold spaces)."""
    lines = [line for line in output.splitlines() if line.strip()]
    header = lines[0]
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    names = header.split()
    rows = []
    for line in lines[1:]:
        cells = [line[start:end].strip() for start, end in zip(starts, [*starts[1:], None], strict=True)]
        rows.append(dict(zip(names, cells, strict=True)))
    return rows


def _ready(session: ApiSession, body: dict[str, Any]) -> str:
    _apply(session, body)
    return str(body["metadata"]["name"])


def test_kubectl_get_prints_the_columns(session: ApiSession, kubectl: Callable[..., Any]) -> None:
    hgx = _ready(session, bodies.hgx_h100(_name()))
    mig = _ready(session, bodies.a100_mig(_name()))
    cpu = _ready(session, bodies.cpu_only(_name()))
    output = kubectl("get", "nodetopology", hgx, mig, cpu).stdout
    assert output.splitlines()[0].split() == [
        "NAME",
        "GPUS",
        "MODEL",
        "ISLANDS",
        "RDMA",
        "NIC-DIST",
        "MIG",
        "READY",
        "AGE",
    ]
    rows = {row["NAME"]: row for row in _table(output)}
    assert {k: v for k, v in rows[hgx].items() if k != "AGE"} == {
        "NAME": hgx,
        "GPUS": "8",
        "MODEL": "NVIDIA H100 80GB HBM3",
        "ISLANDS": "1x8",
        "RDMA": "8",
        "NIC-DIST": "PIX",
        "MIG": "0",
        "READY": "True",
    }
    assert re.fullmatch(r"\d+s", rows[hgx]["AGE"])
    assert {k: v for k, v in rows[mig].items() if k != "AGE"} == {
        "NAME": mig,
        "GPUS": "1",
        "MODEL": "NVIDIA A100-SXM4-40GB",
        "ISLANDS": "",
        "RDMA": "0",
        "NIC-DIST": "PHB",
        "MIG": "2",
        "READY": "True",
    }
    assert {k: v for k, v in rows[cpu].items() if k != "AGE"} == {
        "NAME": cpu,
        "GPUS": "0",
        "MODEL": "<no value>",  # kubectl's rendering of a null field
        "ISLANDS": "",
        "RDMA": "0",
        "NIC-DIST": "<no value>",
        "MIG": "0",
        "READY": "True",
    }


def test_kubectl_get_wide_by_short_name(session: ApiSession, kubectl: Callable[..., Any]) -> None:
    hgx = _ready(session, bodies.hgx_h100(_name()))
    pcie = _ready(session, bodies.pcie_pair(_name()))
    mig = _ready(session, bodies.a100_mig(_name()))
    output = kubectl("get", "ntopo", hgx, pcie, mig, "-o", "wide").stdout
    assert output.splitlines()[0].split() == [
        "NAME",
        "GPUS",
        "MODEL",
        "ISLANDS",
        "RDMA",
        "NIC-DIST",
        "MIG",
        "READY",
        "AGE",
        "NVSWITCH",
        "NUMA",
        "CLIQUE",
        "CONSISTENT",
        "AGENT",
    ]
    rows = {row["NAME"]: row for row in _table(output)}
    assert rows[hgx]["NVSWITCH"] == "true"
    assert rows[hgx]["CLIQUE"] == ""  # an integer column renders null as empty
    assert rows[mig]["CLIQUE"] == "7"
    assert rows[hgx]["CONSISTENT"] == "True"
    assert rows[hgx]["AGENT"] == "0.1.0"
    assert rows[pcie]["MODEL"] == "NVIDIA L40S"
    assert rows[pcie]["NIC-DIST"] == "SYS"
    assert rows[pcie]["NVSWITCH"] == "false"  # no island at all
    assert rows[hgx]["NUMA"] == "2"


def test_an_allocation_with_holders_is_kept_whole_and_a_bad_state_refused(session: ApiSession) -> None:
    """status.allocation and gpus[]/migDevices[].heldBy as the agent writes them; nothing pruned."""
    from nodetopo.kubelet.allocation import gpu_allocation
    from nodetopo.model import DeviceAssignment, KubeletAllocation, PodRef

    for bundle in ("dgx-h100", "a100-mig"):
        topology = scan(bundle_context(BUNDLES_DIR / bundle)).topology
        holder = PodRef(namespace="ml", name="train-0", container="main")
        ids = [g.uuid for g in topology.gpus if g.uuid][:2] + [m.uuid for m in topology.mig_devices][:1]
        observed = KubeletAllocation(
            assignments=tuple(
                DeviceAssignment(resource="nvidia.com/gpu", device_id=i, holder=holder) for i in ids
            ),
            allocatable=(("nvidia.com/gpu", tuple(ids)),),
        )
        body = to_nodetopology(topology, _name(), gpu_allocation(topology, observed))
        stored = _apply(session, body)
        assert stored["status"]["allocation"] == body["status"]["allocation"]
        assert [g.get("heldBy") for g in stored["status"]["gpus"]] == [
            g["heldBy"] for g in body["status"]["gpus"]
        ]
        assert [m.get("heldBy") for m in stored["status"]["migDevices"]] == [
            m["heldBy"] for m in body["status"]["migDevices"]
        ]
    body["metadata"]["name"] = _name()
    body["status"]["allocation"]["state"] = "Partly"
    assert 'status.allocation.state: Unsupported value: "Partly"' in _reject(session, body)
