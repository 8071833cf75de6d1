"""Files the project ships stand alone: none of them points at the team's internal pages.

Users get the package, the manifests, the CRDs, the docs and the image recipe; they never get the
design notes the team keeps beside the checkout, so a shipped file that says "see design.md" sends
them nowhere. Tests, benchmarks and the README's test notes may name the real-machine corpus;
nothing shipped may.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ["nodetopo", "deploy", "crds", "docs", "charts", "image", "Dockerfile", ".ci"]
INTERNAL = re.compile(r"\b(design|style|real-node)\.md\b|\.\./shared\b")
TEXT_SUFFIXES = {"", ".py", ".yaml", ".yml", ".md", ".json", ".txt", ".toml", ".sh", ".tpl", ".go"}


def _shipped_files() -> list[Path]:
    files: list[Path] = []
    for name in SHIPPED:
        path = ROOT / name
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            files += [
                p
                for p in path.rglob("*")
                if p.is_file() and p.suffix in TEXT_SUFFIXES and "__pycache__" not in p.parts
            ]
    return files


def test_no_shipped_file_cites_the_internal_pages() -> None:
    files = _shipped_files()
    assert any(p.name == "cli.py" for p in files)  # the walk found the package
    offenders = [
        f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
        for p in files
        for n, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
        if INTERNAL.search(line)
    ]
    assert not offenders, "shipped files cite pages users never have:\n" + "\n".join(offenders)


#: A statement that the agent (or "it", "the container") runs as non-root or as uid 65532. The
#: DaemonSet runs it as uid 0 (deploy/daemonset.yaml, the chart's default): only the chart's
#: ``agent.podResources.enabled=false`` runs it as 65532: a line saying so names the switch.
NON_ROOT_CLAIM = re.compile(
    r"\bruns? (?:it |the agent )?(?:as )?(?:non-?root|uid 65532|user 65532|unprivileged)\b", re.IGNORECASE
)
#: "podResources.enabled=false", "false runs it as uid 65532", "to run it as uid 65532 instead"
CONDITIONAL = re.compile(r"\bfalse\b|\binstead\b", re.IGNORECASE)


def test_no_shipped_text_says_the_agent_runs_non_root() -> None:
    """Issue 23: comments and docs called the agent's pod non-root while it runs as uid 0. The
    YAML manifests (deploy/, the chart) are left to their own tests; this covers the code, the image
    recipe and the docs."""
    files = [
        p
        for p in _shipped_files()
        if p.suffix not in {".yaml", ".yml", ".tpl"} and "deploy" not in p.relative_to(ROOT).parts[:1]
    ]
    files.append(ROOT / "README.md")
    assert any(p.name == "Dockerfile" for p in files)
    offenders = [
        f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
        for p in files
        for n, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
        if NON_ROOT_CLAIM.search(line) and not CONDITIONAL.search(line)
    ]
    assert not offenders, "the agent runs as uid 0, yet these lines say otherwise:\n" + "\n".join(offenders)
