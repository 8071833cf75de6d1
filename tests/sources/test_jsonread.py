"""The one bounded JSON reader (nodetopo.jsonread) and every parser of untrusted JSON that uses it.

``json.loads`` recurses once per level: 60,000 ``[`` or an answer nested 100,000 deep raised
``RecursionError`` (a traceback, or "internal error" from a source). Each parser must answer a
``ParseError`` naming its source and the line instead.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from nodetopo.bundle import parse_manifest
from nodetopo.errors import ParseError
from nodetopo.fabric.tree import parse_fabric_map
from nodetopo.host import HostRoot, ReplayRunner
from nodetopo.jsonread import MAX_CHARS, load_json, nesting_depth
from nodetopo.model import ConditionReason
from nodetopo.perf.nccl_json import parse_nccl_json
from nodetopo.perf.nvbandwidth import parse_nvbandwidth
from nodetopo.sources.base import Context
from nodetopo.sources.fabric import cloud, lldp

#: as deep as the LLDP and metadata answers that were reported
DEEP = 100_000
#: deep enough for RecursionError, small enough for a manifest's 64 KiB
DEEPER_THAN_PYTHON = 20_000


def nested(depth: int, head: str = "") -> str:
    """An object whose first key holds arrays nested ``depth`` deep, on its second line."""
    return "{" + head + '\n"x": ' + "[" * depth + "]" * depth + "}"


def test_the_depth_is_measured_without_recursing() -> None:
    assert nesting_depth("") == nesting_depth('"[[[["') == nesting_depth("7") == 0
    assert nesting_depth('{"a": [1, {"b": "]]]]"}]}') == 3
    assert nesting_depth("[" * 1_000_000) == 1_000_000
    assert nesting_depth('{"a": "\\"[[["}') == 1  # an escaped quote does not end the string


def test_load_json_refuses_what_it_must_and_reads_the_rest() -> None:
    assert load_json('{"a": [1, 2]}', source="s", path="p") == {"a": [1, 2]}
    assert load_json("[" * 32 + "]" * 32, source="s", path="p") is not None
    with pytest.raises(ParseError) as deep:
        load_json('{"a": 1,\n"b": ' + "[" * 40 + "]" * 40 + "}", source="s", path="p")
    assert str(deep.value) == "s: p:2: JSON nested deeper than 32 levels"
    with pytest.raises(ParseError, match=r"^s: p: 11 characters of JSON, more than 10$"):
        load_json('{"a": "bc"}', source="s", path="p", max_chars=10)
    with pytest.raises(ParseError, match=r"^s: p:2: not JSON: Expecting value$"):
        load_json('{"a":\n}', source="s", path="p")
    with pytest.raises(ParseError, match=r"^s: p: not JSON: .*4300"):
        load_json("1" * 5000, source="s", path="p")  # int() of more digits than Python converts


def test_without_a_measuring_pass_the_decoders_limit_is_the_bound() -> None:
    """``max_depth=None`` (the API session's answers): no pass over the text first, and nesting
    past what ``json.loads`` recurses to is the same typed refusal, never a ``RecursionError``."""
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(ParseError, match=r"^s: p: JSON nested deeper than the decoder recurses$"):
        load_json(deep, source="s", path="p", max_depth=None, max_chars=None)
    assert load_json("[" * 200 + "]" * 200, source="s", path="p", max_depth=None) is not None
    assert load_json('{"a": "' + "x" * (MAX_CHARS + 1) + '"}', source="s", path="p", max_chars=None)


HOSTILE: dict[str, tuple[Callable[[str], object], str]] = {
    "lldp": (lambda text: lldp.parse_lldp_json(text), "fabric.lldp"),
    "cloud aws": (lambda text: cloud.parse_aws_instance_topology(text, "i-0123"), "fabric.cloud"),
    "cloud oci": (lambda text: cloud.parse_oci_rdma_topology(text), "fabric.cloud"),
    "bundle manifest": (lambda text: parse_manifest(text), "bundle"),
    "fabric map": (lambda text: parse_fabric_map(text), "fabric"),
    "nvbandwidth": (lambda text: parse_nvbandwidth(text), "nvbandwidth"),
    "nccl-tests": (lambda text: parse_nccl_json(text), "nccl-tests"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
@pytest.mark.parametrize(
    "text",
    [nested(DEEPER_THAN_PYTHON), nested(DEEPER_THAN_PYTHON).replace("]", "")],
    ids=["balanced", "open"],
)
def test_every_json_parser_refuses_deep_nesting_as_a_parse_error(name: str, text: str) -> None:
    parse, source = HOSTILE[name]
    with pytest.raises(ParseError) as refused:
        parse(text)
    assert refused.value.source.startswith(source) and refused.value.line == 2
    assert "nested deeper than" in refused.value.detail


def test_sixty_thousand_brackets_of_a_manifest() -> None:
    with pytest.raises(ParseError, match=r"^bundle: manifest.json:1: JSON nested deeper than 4 levels$"):
        parse_manifest("[" * 60_000)


def test_a_deep_lldp_answer_is_a_parse_error_condition(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "lldpd.socket").write_text("")
    runner = ReplayRunner({lldp.LLDPCLI_ARGV: nested(DEEP)})
    (condition,) = lldp.collect(Context(root=HostRoot(tmp_path), runner=runner)).facts.conditions
    assert condition.reason is ConditionReason.PARSE_ERROR, condition.message
    assert "nested deeper than" in condition.message and "internal error" not in condition.message


def test_a_deep_metadata_answer_is_a_parse_error_condition(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cloud, "fetch", lambda url, headers, timeout: nested(DEEP))
    context = Context(root=HostRoot("/nonexistent"), runner=ReplayRunner({}), cloud_metadata="oci=http://x")
    (condition,) = cloud.collect(context).facts.conditions
    assert condition.reason is ConditionReason.PARSE_ERROR, condition.message
    assert "nested deeper than" in condition.message and "internal error" not in condition.message


def test_a_deep_annotation_value_is_not_a_quoted_string() -> None:
    from nodetopo.probe.observe import parse_annotations_file

    with pytest.raises(ValueError, match=r"^annotations:2: the value of b is not a quoted string$"):
        parse_annotations_file('a="1"\nb=' + "[" * DEEP, source="annotations")
