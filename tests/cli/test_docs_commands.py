"""Every `nodetopo ...` and `kubectl ntopo ...` command line a fenced block of README.md or docs/*.md
shows is one the real command-line parsers accept: a real subcommand, real flags (spelt in full, not
an abbreviation argparse would also take), values of the right kind and every required argument.

Which lines are command lines: in a block with `$ ` prompts, the prompted lines (the rest is output);
in a shell block (```sh, bash, shell, console) without prompts, every line; in a YAML block, the
`args:` of a container running the nodetopo image (its entrypoint is `nodetopo`). A line is split
as a shell would (quotes, `\\` continuations, `#` comments, `|`, `&&`, `;`, redirections), and each
command of it that runs nodetopo or kubectl-ntopo is parsed.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import yaml
from helpers import REPO

from nodetopo.cli import build_parser
from nodetopo.kubectl.cli import build_parser as build_kubectl_parser

PAGES = (REPO / "README.md", *sorted((REPO / "docs").glob("*.md")))
SHELL = {"sh", "bash", "shell", "console"}
_FENCE = re.compile(r"^([ \t]*)```([^\n]*)\n(.*?)^[ \t]*```", re.M | re.S)
_SEPARATORS = {"|", "||", "&&", ";", "&", "(", ")"}
_REDIRECTS = {">", ">>", "<", "<<", ">&", "<&", "&>"}
_IMAGE = re.compile(r"image:\s*\S*/nodetopo:")


@dataclass(frozen=True, slots=True, kw_only=True)
class Shown:
    """One command as a page shows it: where, the tool, and its arguments."""

    page: str
    line: int
    tool: str  # "nodetopo" or "kubectl ntopo"
    argv: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.tool} {shlex.join(self.argv)}"


def _words(line: str) -> list[str]:
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    return list(lexer)


def _commands(words: list[str]) -> Iterator[list[str]]:
    """The simple commands of a shell line, redirections left out."""
    current: list[str] = []
    skip = False
    for word in words:
        if skip:
            skip = False
        elif word in _SEPARATORS:
            yield current
            current = []
        elif word in _REDIRECTS:
            skip = True
            if current and current[-1].isdigit():  # 2> FILE
                current.pop()
        else:
            current.append(word)
    yield current


def _invocation(words: list[str]) -> tuple[str, list[str]] | None:
    """(tool, its arguments) when the command runs nodetopo or kubectl-ntopo."""
    while words and (words[0] == "sudo" or re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0])):
        words = words[1:]
    if not words:
        return None
    name = words[0].rsplit("/", 1)[-1]
    if name == "nodetopo":
        return "nodetopo", words[1:]
    if name == "kubectl-ntopo":
        return "kubectl ntopo", words[1:]
    if name == "kubectl" and words[1:2] == ["ntopo"]:
        return "kubectl ntopo", words[2:]
    return None


def _lines(text: str) -> Iterator[tuple[int, str, str]]:
    """(line number, block's info string, logical line) of every command line in the page's blocks."""
    for m in _FENCE.finditer(text):
        indent, info, block = m[1], m[2].strip().split(" ")[0].lower(), m[3]
        first = text.count("\n", 0, m.start(3)) + 1
        raw = [ln[len(indent) :] if ln.startswith(indent) else ln for ln in block.split("\n")]
        prompts = any(ln.startswith("$ ") for ln in raw)
        if info in ("yaml", "yml"):
            if _IMAGE.search(block):
                for n, ln in enumerate(raw):
                    if re.match(r"\s*(-\s+)?args:\s*\[", ln):
                        yield first + n, info, ln
            continue
        if not prompts and info not in SHELL:
            continue
        n = 0
        while n < len(raw):
            start, line = n, raw[n]
            while line.endswith("\\") and n + 1 < len(raw):
                n += 1
                line = line[:-1] + " " + raw[n].strip()
            n += 1
            if prompts:
                if not line.startswith("$ "):
                    continue
                line = line[2:]
            yield first + start, info, line


def shown_in(page: str, text: str) -> list[Shown]:
    found = []
    for number, info, line in _lines(text):
        if info in ("yaml", "yml"):
            args = yaml.safe_load(line.strip().removeprefix("-").strip())["args"]
            found.append(Shown(page=page, line=number, tool="nodetopo", argv=tuple(map(str, args))))
            continue
        for command in _commands(_words(line)):
            hit = _invocation(command)
            if hit is not None:
                found.append(Shown(page=page, line=number, tool=hit[0], argv=tuple(hit[1])))
    return found


PARSERS = {"nodetopo": build_parser(), "kubectl ntopo": build_kubectl_parser()}


def _options_on_the_way(parser: argparse.ArgumentParser, argv: tuple[str, ...]) -> set[str]:
    """The option strings of the parser and of every subcommand parser ``argv`` descends into."""
    options = {s for a in parser._actions for s in a.option_strings}
    for word in argv:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if subs and word in subs[0].choices:
            parser = subs[0].choices[word]
            options |= {s for a in parser._actions for s in a.option_strings}
    return options


def refusal(shown: Shown) -> str | None:
    """Why the real parser refuses the command line, or None when it takes it."""
    parser = PARSERS[shown.tool]
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            parser.parse_args(list(shown.argv))
        except SystemExit as stop:
            if stop.code not in (0, None):  # --help and --version exit 0
                return err.getvalue().strip().splitlines()[-1]
    options = _options_on_the_way(parser, shown.argv)
    partial = [
        w.split("=", 1)[0]
        for w in shown.argv
        if w.startswith("--") and w != "--" and w.split("=", 1)[0] not in options
    ]
    return f"{partial[0]} is not a flag's full name" if partial else None


SHOWN = [s for page in PAGES for s in shown_in(page.name, page.read_text(encoding="utf-8"))]


def test_the_scan_finds_the_commands_the_docs_show() -> None:
    """So that an empty scan cannot pass the test below."""
    where = {(s.page, s.tool, s.argv[0]) for s in SHOWN if s.argv}
    assert {
        ("README.md", "nodetopo", "discover"),
        ("kubectl-ntopo.md", "kubectl ntopo", "nodes"),
        ("kubectl-ntopo.md", "kubectl ntopo", "band"),
        ("bandwidth-model.md", "nodetopo", "accept"),
        ("probe.md", "nodetopo", "probe"),
        ("ray.md", "nodetopo", "ray"),
        ("admission.md", "nodetopo", "admit"),
    } <= where
    assert len(SHOWN) >= 25


def test_a_shell_line_is_split_as_a_shell_splits_it() -> None:
    text = (
        "```sh\n"
        'sudo NODE=a nodetopo ray --node-name "$NODE_NAME" --labels-file - \\\n'
        "  | kubectl ntopo nodes -o name > out.txt 2>/dev/null   # a comment --not-a-flag\n"
        "nodetopo capture /tmp/b && .venv/bin/nodetopo discover --from /tmp/b\n"
        "```\n"
        "```\n"
        "nodetopo agent (DaemonSet) ──► a diagram, not a command\n"
        "```\n"
        "```\n"
        "$ kubectl-ntopo get n1\n"
        "Node n1 ... output, not a command: nodetopo discover --bogus\n"
        "```\n"
        "```yaml\n"
        "- image: ghcr.io/nodetopo/nodetopo:0.1.0\n"
        '  args: ["probe", "--gpus", "4"]\n'
        "```\n"
    )
    assert [(s.line, s.tool, s.argv) for s in shown_in("p", text)] == [
        (2, "nodetopo", ("ray", "--node-name", "$NODE_NAME", "--labels-file", "-")),
        (2, "kubectl ntopo", ("nodes", "-o", "name")),
        (4, "nodetopo", ("capture", "/tmp/b")),
        (4, "nodetopo", ("discover", "--from", "/tmp/b")),
        (10, "kubectl ntopo", ("get", "n1")),
        (15, "nodetopo", ("probe", "--gpus", "4")),
    ]


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("nodetopo discover --from b --colour", "unrecognized arguments: --colour"),
        ("nodetopo dicsover", "invalid choice: 'dicsover'"),
        ("nodetopo discover -o tabel", "invalid choice: 'tabel'"),
        ("nodetopo discover --node n1", "--node is not a flag's full name"),
        ("nodetopo export", "the following arguments are required"),
        ("nodetopo expect -f nodes.json  every GPU of one node", "unrecognized arguments: every GPU"),
        ("kubectl ntopo nodes --island-size eight", "not a number of GPUs"),
        ("kubectl ntopo gett n1", "invalid choice: 'gett'"),
    ],
)
def test_the_check_refuses_what_the_parser_refuses(line: str, why: str) -> None:
    [shown] = shown_in("p", f"```sh\n{line}\n```\n")
    assert why in (refusal(shown) or ""), refusal(shown)


def test_the_check_takes_a_real_command_line() -> None:
    [shown] = shown_in("p", "```sh\nnodetopo discover --from tests/fixtures/bundles/dgx-h100 -o yaml\n```\n")
    assert refusal(shown) is None


def test_every_command_line_in_the_docs_is_one_the_parsers_take() -> None:
    wrong = [f"{s}: {why}" for s in SHOWN if (why := refusal(s)) is not None]
    assert wrong == [], "\n".join(wrong)
