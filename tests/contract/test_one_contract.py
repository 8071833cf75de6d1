"""The NodeTopology contract has one home (nodetopo/resource/): its names once, one reader of a
published object, one ``essential_missing``, and the labels projected from the body the agent built."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodetopo.host import ReplayRunner
from nodetopo.model import GpuAllocation
from nodetopo.resource import identity
from nodetopo.resource.body import to_nodetopology
from nodetopo.resource.conditions import essential_missing
from nodetopo.resource.labels import node_labels, to_labels
from nodetopo.topology.discover import bundle_context, host_context, scan

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "nodetopo"
BUNDLES = REPO / "tests" / "fixtures" / "bundles"
MACHINES = sorted(p.name for p in BUNDLES.iterdir() if p.is_dir())

#: ``X["status"]`` or ``X.get("status")``: reading an object's status (or a condition's)
STATUS_INDEX = re.compile(r"""\[\s*["']status["']\s*\]|\.get\(\s*["']status["']""")

#: The modules outside nodetopo/resource/ that index a ``status``, and why that is not reading a
#: published NodeTopology around the reader.
NOT_A_PUBLISHED_NODETOPOLOGY = {
    # the publish chain writes the agent's own body: the status apply with its conditions'
    # transition times, the stored object's facts kept on a Missing scan (held_body), the stored
    # hash compared before the first write; the dry run prints that same apply
    "publish/nodetopology.py": "the publisher's own body and the object it stored",
    "publish/dryrun.py": "the status apply the dry run prints",
    # not NodeTopology objects
    "kube/exec.py": "an exec credential plugin's ExecCredential",
    "extender/cache.py": "a Pod's status.phase",
    "delivery/pods.py": "a Pod's status.phase (a finished pod holds no GPU)",
    "admission/controller.py": "the summary controller's own NodeTopologySummary",
    "admission/rules.py": "the NodeTopologySummary the admission rules are given",
    "placement/claims.py": "a ResourceClaim's status.allocation and a Pod's status.resourceClaimStatuses",
    "perf/nvbandwidth.py": "an nvbandwidth -j testcase's status (Passed, Waived, Error)",
}


def _indexing_status() -> set[str]:
    found = set()
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith("resource/"):
            continue
        if STATUS_INDEX.search(path.read_text(encoding="utf-8")):
            found.add(relative)
    return found


def test_no_module_reads_a_nodetopology_status_around_the_reader() -> None:
    """Every consumer projects from nodetopo.resource.reader; the exceptions are named and current."""
    assert _indexing_status() == set(NOT_A_PUBLISHED_NODETOPOLOGY)


def test_the_status_scan_sees_an_index() -> None:
    """The scan is not vacuous: both spellings are found, a condition list's ``status`` too."""
    assert STATUS_INDEX.search('s = obj.get("status") or {}')
    assert STATUS_INDEX.search("x = body['status']['gpus']")
    assert not STATUS_INDEX.search("status = read.facts; c.status == 'True'")


def _key_literals(path: Path) -> set[int]:
    """Lines of string constants (docstrings aside) that start with the group or the prefix: a key,
    a group name or a pattern spelled out, as opposed to prose that mentions it."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return {
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and node.value.lstrip("^").startswith(("nodetopo.io", "nodetopo\\.io"))
    }


def test_the_prefix_and_the_group_are_written_once() -> None:
    """``nodetopo.io`` as a value is written only in resource/identity.py; everything else builds
    keys from ``PREFIX``. The fabric map's kind stays in fabric/, which sits below the resource."""
    where = {p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py") if _key_literals(p)}
    assert where == {"resource/identity.py", "fabric/tree.py"}
    assert _key_literals(PACKAGE / "resource" / "identity.py")  # the scan finds what it looks for


def test_the_identity_is_the_crds() -> None:
    crd = yaml.safe_load((REPO / "crds" / "nodetopology.yaml").read_text())
    names = crd["spec"]["names"]
    assert crd["spec"]["group"] == identity.GROUP
    assert [v["name"] for v in crd["spec"]["versions"]] == [identity.VERSION]
    assert (names["kind"], names["plural"], names["shortNames"]) == (
        identity.KIND,
        identity.PLURAL,
        [identity.SHORT_NAME],
    )
    assert f"{crd['spec']['group']}/{identity.VERSION}" == identity.API_VERSION
    assert identity.PREFIX == "nodetopo.io/"


@pytest.mark.parametrize(
    ("key", "value", "valid"),
    [
        ("nodetopo.io/gpu.count", "8", True),
        ("nodetopo.io/gpu-domain", "", True),
        ("nodetopo.io/gpu.model", "-bad", False),
        ("nodetopo.io/-bad", "x", False),
        ("nodetopo.io/" + "a" * 64, "x", False),
        ("ray.io/gpu.count", "8", False),
    ],
)
def test_one_label_validator(key: str, value: str, valid: bool) -> None:
    assert identity.is_valid(key, value) is valid
    if identity.label_key_problem(key) is None:
        identity.check_label_keys([key])
    else:
        with pytest.raises(ValueError, match=re.escape(key)):
            identity.check_label_keys([key])


def _scans() -> list[tuple[str, Any]]:
    scans = [(m, scan(bundle_context(str(BUNDLES / m))).topology) for m in MACHINES]
    return scans


@pytest.fixture(scope="module")
def topologies(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, Any]]:
    wrong = tmp_path_factory.mktemp("host") / "nothing-mounted"
    missing = scan(host_context(wrong, runner=ReplayRunner({}), nvml="off")).topology
    return [*_scans(), ("wrong-root", missing)]


def test_one_essential_missing_on_the_topology_and_its_body(topologies: list[tuple[str, Any]]) -> None:
    """The one rule, on both forms of a scan: they agree on every bundle and on a wrong host root."""
    verdicts = {name: essential_missing(t) for name, t in topologies}
    assert verdicts["wrong-root"] and not any(v for n, v in verdicts.items() if n != "wrong-root")
    for name, topology in topologies:
        assert essential_missing(to_nodetopology(topology, name)) == verdicts[name], name


def test_labels_come_from_the_body_the_agent_publishes(topologies: list[tuple[str, Any]]) -> None:
    """``node_labels`` of the published body (with the kubelet's allocation) is ``to_labels``."""
    known = GpuAllocation(known=True)
    for name, topology in topologies:
        body = to_nodetopology(topology, name, known)
        assert node_labels(body) == to_labels(topology, name), name
    assert node_labels(to_nodetopology(topologies[-1][1], "w")) == {}  # a Missing scan says nothing


def test_the_agent_builds_the_body_once_per_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    """The labels are projected from the body the cycle built, not from a second body."""
    from agent.support import DGX_H100, FakeClock, FakePublisher, SwitchableScan, config

    import nodetopo.agent.loop as loop
    import nodetopo.resource.labels as labels

    built: list[str] = []

    def counting(*args: Any, **kwargs: Any) -> dict[str, Any]:
        built.append(args[1])
        return to_nodetopology(*args, **kwargs)

    monkeypatch.setattr(loop, "to_nodetopology", counting)
    monkeypatch.setattr(labels, "to_nodetopology", counting)
    clock = FakeClock()
    publisher = FakePublisher()
    agent = loop.Agent(
        config(),
        scan=SwitchableScan(bundle_context(DGX_H100)),
        publisher=publisher,
        clock=clock,
        sleep=clock.sleep,
        random=lambda: 0.5,
    )
    assert agent.run_cycle("start").published
    assert built == ["node-a"]
    assert publisher.applied_labels["nodetopo.io/gpu.count"] == "8"
