"""docs/ stays true to the code: the CRD reference is generated from crds/, every condition reason the
code can set has a troubleshooting entry, every label key is in the label reference, links resolve."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

from nodetopo.model import ConditionReason
from nodetopo.probe.outcome import Attribution
from nodetopo.resource.identity import PREFIX
from nodetopo.resource.labels import KEYS

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def test_crd_reference_is_generated_from_the_current_crds() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_crd_docs.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_crd_reference_has_every_field() -> None:
    text = (DOCS / "crd-reference.md").read_text(encoding="utf-8")
    for field in (
        "status.gpus[].nics[].distance",
        "status.network.neighbours[].switchID",
        "spec.staleAfterSeconds",
    ):
        assert f"| `{field}` |" in text


def _literals(value: ast.expr) -> set[str]:
    """The strings an expression evaluates to when it is a literal or a choice of literals
    (``"A" if x else "B"``, ``x or "A"``); a call (``ready.get("reason")``) is not a literal."""
    if isinstance(value, ast.Constant):
        return {value.value} if isinstance(value.value, str) and value.value else set()
    if isinstance(value, ast.IfExp):
        return _literals(value.body) | _literals(value.orelse)
    if isinstance(value, ast.BoolOp):
        return set().union(*(_literals(v) for v in value.values))
    return set()


def reasons_in_code() -> set[str]:
    """Every condition reason nodetopo/ can write: the ConditionReason values, and the literal strings
    of every ``"reason": ...`` entry of a dict literal (Ready's ``Discovered``, Consistent's ...)."""
    found = {r.value for r in ConditionReason}
    for path in (ROOT / "nodetopo").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Dict):
                continue
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value == "reason":
                    found |= _literals(value)
    return found


def test_the_reason_walk_finds_the_literal_reasons() -> None:
    assert {"Discovered", "SourcesAgree", "Missing", "Unavailable"} <= reasons_in_code()


def test_every_condition_reason_has_a_troubleshooting_entry() -> None:
    text = (DOCS / "troubleshooting.md").read_text(encoding="utf-8")
    headings = set(re.findall(r"^### (\S+)\s*$", text, flags=re.MULTILINE))
    missing = sorted(reasons_in_code() - headings)
    assert not missing, f"docs/troubleshooting.md has no '### <reason>' entry for {missing}"


def test_every_label_key_is_in_the_label_reference() -> None:
    text = (DOCS / "labels.md").read_text(encoding="utf-8")
    missing = sorted(key for key in KEYS if f"`{PREFIX}{key}`" not in text)
    assert not missing, f"docs/labels.md lacks {missing}"


def test_the_index_links_every_page_and_every_link_resolves() -> None:
    pages = sorted(DOCS.glob("*.md"))
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    unlisted = [p.name for p in pages if p.name != "README.md" and f"]({p.name})" not in index]
    assert not unlisted, f"docs/README.md does not link {unlisted}"
    broken = []
    for page in pages:
        prose = re.sub(r"`[^`]*`", "", page.read_text(encoding="utf-8"))  # code spans hold no links
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", prose):
            if re.match(r"^[a-z]+:", target):
                broken.append(f"{page.name}: {target} (docs link only inside the repository)")
            elif not (page.parent / target).exists():
                broken.append(f"{page.name}: {target}")
    assert not broken, broken


def test_every_probe_attribution_is_explained() -> None:
    text = (DOCS / "troubleshooting.md").read_text(encoding="utf-8")
    missing = sorted(a.value for a in Attribution if f"* `{a.value}`:" not in text)
    assert not missing, f"docs/troubleshooting.md does not explain the probe verdicts {missing}"


def test_the_bandwidth_model_page_is_current() -> None:
    """Its calibration table is what the model computes today, and its example is the CLI's output."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "calibration_table.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    page = (DOCS / "bandwidth-model.md").read_text(encoding="utf-8")
    shown = subprocess.run(
        [sys.executable, "-m", "nodetopo", "expect", "--from-bundle", "tests/fixtures/bundles/dgx-h100"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout
    assert shown in page
