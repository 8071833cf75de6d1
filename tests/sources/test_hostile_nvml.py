"""A hostile or broken ``nvml.json`` costs the fields that are wrong, never the command.

Every device field, pair and nested element gets wrong-typed, out-of-range, over-long and deeply
nested values; the file itself is a FIFO, a device, a link out of the bundle, or gigabytes. The
dump is validated per device and per field (``nodetopo.sources.nvml.dumpfile``): the other GPUs and
the other fields of the same GPU are kept, and what was left out is one ParseError condition.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import BUNDLES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nodetopo.cli import main
from nodetopo.errors import ParseError
from nodetopo.model import ConditionReason, NvmlGpu
from nodetopo.sources import nvml
from nodetopo.sources.nvml.dumpjson import MAX_DEPTH, MAX_TEXT
from nodetopo.topology.discover import bundle_context

pytestmark = pytest.mark.timeout(60)

DUMPS = Path(__file__).resolve().parent.parent / "fixtures" / "nvml"
BUNDLE = BUNDLES / "dgx-h100"


def dump() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DUMPS / "dgx-h100-8x-nvswitch.json").read_text())
    return data


def copy_bundle(tmp_path: Path) -> Path:
    bundle = tmp_path / "bundle"
    shutil.copytree(BUNDLE, bundle, symlinks=True)
    return bundle


#: values of every wrong kind a field may hold
WRONG: dict[str, object] = {
    "bool": True,
    "list": [1, 2],
    "object": {"a": 1},
    "negative": -5,
    "huge int": 10**30,
    "float": 1.5,
    "long text": "x" * (MAX_TEXT + 1),
    "text": "not-a-value",
}

DEVICE_FIELDS = [
    "index",
    "uuid",
    "name",
    "pciBusId",
    "memoryTotal",
    "cpuAffinity",
    "numaNodeId",
    "migMode",
    "nvlinks",
    "fabric",
    "migDevices",
    "errors",
]


def _wrong_for(field: str, kind: str) -> bool:
    """Whether WRONG[kind] is wrong for the field (a string is right for a string field)."""
    value = WRONG[kind]
    strings = {"uuid", "name"}
    if field in strings:
        return not isinstance(value, str) or len(value) > MAX_TEXT
    return True


@functools.cache
def reference_gpus() -> tuple[NvmlGpu, ...]:
    return nvml.read_nvml(nvml.RecordedNvml.from_dict(dump()))[0].gpus


@pytest.mark.parametrize(
    ("field", "kind"), [(f, k) for f in DEVICE_FIELDS for k in sorted(WRONG) if _wrong_for(f, k)]
)
def test_one_wrong_device_field_costs_that_field(field: str, kind: str) -> None:
    data = dump()
    data["devices"][3][field] = WRONG[kind]
    api = nvml.RecordedNvml.from_dict(data, path="nvml.json")
    assert api.problems and any(f"devices[3].{field}" in p or "devices[3]" in p for p in api.problems)
    snapshot, _ = nvml.read_nvml(api)
    # every other GPU is intact; GPU 3 is kept unless its identity (uuid, name, bus id) was the field
    expected = 7 if field in ("uuid", "name", "pciBusId") else 8
    assert len(snapshot.gpus) == expected
    others = [gpu for gpu in snapshot.gpus if gpu.index != 3]
    assert others == [gpu for gpu in reference_gpus() if gpu.index != 3]
    for message in api.problems:
        assert len(message) < 200 and "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx" not in message


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d["devices"][0]["nvlinks"][2].update(link="two"),
        lambda d: d["devices"][0]["nvlinks"][2].update(link=99),
        lambda d: d["devices"][0]["nvlinks"][2].update(active="yes"),
        lambda d: d["devices"][0]["nvlinks"][2].update(remotePciBusId=7),
        lambda d: d["devices"][0]["nvlinks"].__setitem__(2, "link"),
        lambda d: d["commonAncestor"][0].update(a="0"),
        lambda d: d["commonAncestor"].__setitem__(0, None),
        lambda d: d["p2p"][0].update(read=[]),
        lambda d: d["p2p"][0].update(errors={"read": 5}),
        lambda d: d.update(driverVersion=550),
        lambda d: d.update(errors=[]),
        lambda d: d["devices"].__setitem__(5, "gpu"),
    ],
)
def test_one_wrong_nested_element_costs_that_element(change: Callable[[dict[str, Any]], None]) -> None:
    data = dump()
    change(data)
    api = nvml.RecordedNvml.from_dict(data)
    assert len(api.problems) >= 1
    snapshot, _ = nvml.read_nvml(api)
    assert len(snapshot.gpus) >= 7


def test_a_wrong_field_no_longer_fails_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's example: exit 1 and no output before; now exit 0, the GPUs, and a condition."""
    bundle = copy_bundle(tmp_path)
    data = json.loads((bundle / "nvml.json").read_text())
    data["devices"][0]["memoryTotal"] = "80 GB"
    (bundle / "nvml.json").write_text(json.dumps(data))
    assert main(["discover", "--from", str(bundle), "-o", "json"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert len(body["status"]["gpus"]) == 8
    source = next(c for c in body["status"]["conditions"] if c["type"] == "SourceNvml")
    assert source["reason"] == "ParseError" and "devices[0].memoryTotal" in source["message"]


def test_deep_nesting_costs_the_deep_value_only(tmp_path: Path) -> None:
    data = dump()
    data["devices"][2]["name"] = "@DEEP@"
    text = json.dumps(data).replace('"@DEEP@"', "[" * 200_000 + "]" * 200_000)
    path = tmp_path / "nvml.json"
    path.write_text(text)
    api = nvml.RecordedNvml.from_json(path)
    assert f"deeper than {MAX_DEPTH} levels" in api.problems[0]
    snapshot, _ = nvml.read_nvml(api)
    assert len(snapshot.gpus) == 7 and 2 not in [gpu.index for gpu in snapshot.gpus]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[" * 5_000_000, "nested too deep"),
        ('{"format": "nodetopo-nvml-dump/v1", "devices": ' + '[{"a":' * 100_000, "nested too deep"),
        ('{"format": "nodetopo-nvml-dump/v1", "devices": [}', "not JSON"),
        ("[]", "expected a JSON object"),
    ],
)
def test_a_file_that_is_no_dump_at_all_is_one_parse_error(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "nvml.json"
    path.write_text(text)
    with pytest.raises(ParseError, match=expected):
        nvml.RecordedNvml.from_json(path)


def test_a_number_of_thousands_of_digits_is_a_field_problem(tmp_path: Path) -> None:
    text = json.dumps(dump()).replace('"memoryTotal": 85520809984', '"memoryTotal": ' + "9" * 10_000, 1)
    path = tmp_path / "nvml.json"
    path.write_text(text)
    api = nvml.RecordedNvml.from_json(path)
    assert api.problems == ("devices[0].memoryTotal: expected int, found a number of 10000 digits",)


def test_more_devices_than_a_node_has_are_cut(tmp_path: Path) -> None:
    data = dump()
    template = data["devices"][0]
    data["devices"] = [dict(copy.deepcopy(template), index=i) for i in range(5000)]
    data["commonAncestor"] = data["p2p"] = []
    api = nvml.RecordedNvml.from_dict(data)
    assert any("5000 devices, more than 256" in p for p in api.problems)
    assert api.device_count() == nvml.MAX_DEVICES


@pytest.mark.parametrize("kind", ["FIFO", "/dev/zero", "outside", "sparse"])
def test_a_hostile_nvml_json_is_a_condition(tmp_path: Path, kind: str) -> None:
    bundle = copy_bundle(tmp_path)
    path = bundle / "nvml.json"
    path.unlink()
    if kind == "FIFO":
        os.mkfifo(path)
    elif kind == "/dev/zero":
        path.symlink_to("/dev/zero")
    elif kind == "outside":
        secret = tmp_path / "passwd"
        secret.write_text("root:x:0:0:root:/root:/bin/bash\n" * 40)
        path.symlink_to(secret)
    else:
        with path.open("wb") as f:
            f.truncate(4 << 30)
    result = nvml.collect(bundle_context(bundle))
    (problem,) = result.facts.conditions
    assert problem.reason is ConditionReason.PARSE_ERROR and "not read" in problem.message
    assert "root:x" not in problem.message


#: any JSON value, for the fuzz test below
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10,
)


def _paths(value: object, prefix: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    found: list[tuple[object, ...]] = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, (*prefix, index))
    return found


PATHS = [p for p in _paths(dump()) if p != ("format",)]


@settings(
    max_examples=150,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(st.lists(st.tuples(st.sampled_from(PATHS), JSON), min_size=1, max_size=4))
def test_any_value_anywhere_never_raises(edits: list[tuple[tuple[object, ...], object]]) -> None:
    data = dump()
    for path, value in edits:
        target: Any = data
        try:
            for step in path[:-1]:
                target = target[step]
            target[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue  # an earlier edit changed the shape
    api = nvml.RecordedNvml.from_dict(data)
    snapshot, _ = nvml.read_nvml(api)
    assert len(snapshot.gpus) <= 8
