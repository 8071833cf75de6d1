"""Every `--help` a newcomer reads says what each flag is for, with real defaults, and every command
and flag the README and docs/ mention exists.

The parsers are walked, not their text grepped: every subcommand of `nodetopo` (those in their own
modules too) and of `kubectl ntopo`.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator

import pytest
from helpers import REPO

from nodetopo.agent.config import AgentConfig
from nodetopo.cli import build_parser
from nodetopo.kubectl.cli import build_parser as build_kubectl_parser

PAGES = (REPO / "README.md", *sorted((REPO / "docs").glob("*.md")))
SKIPPED = (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)


def _commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...]
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield " ".join(path), parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _commands(child, (*path, name))


def _all() -> dict[str, argparse.ArgumentParser]:
    return {
        **dict(_commands(build_parser(), ("nodetopo",))),
        **dict(_commands(build_kubectl_parser(), ("kubectl ntopo",))),
    }


COMMANDS = _all()


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {s for a in parser._actions for s in a.option_strings}


def test_the_walk_finds_every_command() -> None:
    for name in ("discover", "capture", "publish", "agent", "extender", "ray", "export", "fabric", "admit"):
        assert f"nodetopo {name}" in COMMANDS
    assert {"summary-controller", "probe", "expect", "accept"} <= {c.split()[-1] for c in COMMANDS}
    assert {"kubectl ntopo get", "kubectl ntopo matrix", "kubectl ntopo nodes"} <= set(COMMANDS)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_flag_and_argument_says_what_it_is_for(command: str) -> None:
    parser = COMMANDS[command]
    silent = [
        "/".join(a.option_strings) or a.dest
        for a in parser._actions
        if not isinstance(a, SKIPPED) and not (a.help or "").strip()
    ]
    assert silent == [], f"{command}: no help for {silent}"
    only_a_default = [
        "/".join(a.option_strings) or a.dest
        for a in parser._actions
        if not isinstance(a, SKIPPED)
        and not re.search(r"[A-Za-z]{3}", re.sub(r"\(?\bdefault\b[^;)]*\)?", "", a.help or "", flags=re.I))
    ]
    assert only_a_default == [], f"{command}: the help of {only_a_default} gives only a default"
    text = parser.format_help()
    for wrong in ("default: None", "default None", "default: []", "(default: )"):
        assert wrong not in text, f"{command} --help says {wrong!r}"


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_flag_that_reads_stdin_or_writes_stdout_says_dash(command: str) -> None:
    for action in COMMANDS[command]._actions:
        text = action.help or ""
        if re.search(r"\bstd(in|out)\b", text):
            assert re.search(r"(^|[\s(`'])-([\s,:;`')]|$)", text), (
                f"{command} {action.option_strings}: {text!r}"
            )


def test_the_flags_that_take_dash_say_so() -> None:
    """The values read as stdin or written as stdout (``path == "-"`` in the code)."""
    for command, flag in (
        ("nodetopo export", "--file"),
        ("nodetopo export", "--output"),
        ("nodetopo fabric", "--output"),
        ("nodetopo ray", "--nodetopology"),
        ("nodetopo ray", "--labels-file"),
        ("nodetopo admit", "files"),
        ("nodetopo admit", "--summary"),
        ("nodetopo admit", "--nodetopologies"),
        ("nodetopo expect", "--file"),
        ("nodetopo accept", "results"),
        ("nodetopo accept", "--file"),
        ("nodetopo capture", "directory"),
        ("nodetopo ray", "--resources-file"),
    ):
        [action] = [a for a in COMMANDS[command]._actions if flag in (*a.option_strings, a.dest)]
        assert re.search(r"(^|[\s(`'])-([\s,:;`')]|$)", action.help or ""), (
            f"{command} {flag}: {action.help!r}"
        )


def test_every_context_flag_says_its_default() -> None:
    """--context means the same on every command of both tools, and says what it is without one."""
    helps = {
        command: action.help or ""
        for command, parser in COMMANDS.items()
        for action in parser._actions
        if "--context" in action.option_strings
    }
    assert {"nodetopo publish", "kubectl ntopo", "kubectl ntopo get"} <= set(helps)
    wrong = {c: h for c, h in helps.items() if "(default: its current-context" not in h}
    assert wrong == {}


def test_the_agent_help_shows_the_agents_own_defaults() -> None:
    """The agent takes --command-timeout and --nvml from the flag, env or config file, so argparse's
    default is a marker: the help states the config's defaults instead."""
    text = " ".join(COMMANDS["nodetopo agent"].format_help().split())
    defaults = AgentConfig(node_name="n")
    assert f"Timeout condition (default: {defaults.command_timeout_seconds:g})" in text
    assert f"NODETOPO_NVML; default: {defaults.nvml})" in text


# ----------------------------------------------------------------------------------------------
# The docs' commands and flags exist
# ----------------------------------------------------------------------------------------------

#: `nodetopo CMD ...` or `kubectl ntopo CMD ...` in a code span or a code block line, up to the end of
#: that command (a pipe, `;`, `&&`, a comment, the span's end)
_INVOCATION = re.compile(
    r"(?:^|[|;&(]|\$ )[ \t]*(?:sudo[ \t]+)?(?:[\w.~/-]*/)?(nodetopo|kubectl[ -]ntopo)[ \t]+([a-z][\w-]*)"
    r"((?:[^|;&#`\n)]|\\\n)*)",
    re.M,
)
_FLAG = re.compile(r"(?<![\w-])(--[a-z][\w-]*)")


def _snippets(text: str) -> Iterator[str]:
    """Code blocks' lines and inline code spans."""
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.M | re.S)
    yield from blocks
    yield from re.findall(r"`([^`\n]+)`", re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.M | re.S))


def _mentions_in(name: str, text: str) -> list[tuple[str, str, str, str]]:
    """(page, command, flag or '', the mention) for every invocation in ``text``."""
    found = []
    for snippet in _snippets(text):
        for m in _INVOCATION.finditer(snippet):
            tool = "nodetopo" if m[1] == "nodetopo" else "kubectl ntopo"
            command = f"{tool} {m[2]}"
            for flag in _FLAG.findall(m[3]) or [""]:
                found.append((name, command, flag, f"{m[1]} {m[2]}{m[3]}".strip()[:80]))
    return found


def _mentions() -> list[tuple[str, str, str, str]]:
    return [m for page in PAGES for m in _mentions_in(page.name, page.read_text(encoding="utf-8"))]


def _not_real(mentions: list[tuple[str, str, str, str]]) -> list[str]:
    top = {"nodetopo": _options(COMMANDS["nodetopo"]), "kubectl ntopo": _options(COMMANDS["kubectl ntopo"])}
    wrong = []
    for page, command, flag, mention in mentions:
        parser = COMMANDS.get(command)
        if parser is None:
            wrong.append(f"{page}: {mention!r}: no command {command!r}")
        elif flag and flag not in _options(parser) | top[command.rsplit(" ", 1)[0]]:
            wrong.append(f"{page}: {mention!r}: {command} has no {flag}")
    return sorted(set(wrong))


MENTIONS = _mentions()


def test_the_docs_mention_commands() -> None:
    """The scan finds what the README shows (so an empty scan cannot pass the next test)."""
    commands = {c for _, c, _, _ in MENTIONS}
    assert {"nodetopo discover", "nodetopo agent", "nodetopo probe", "kubectl ntopo get"} <= commands
    assert ("README.md", "nodetopo discover", "--from") in {(p, c, f) for p, c, f, _ in MENTIONS}


def test_the_check_finds_a_flag_or_command_that_does_not_exist() -> None:
    text = (
        "```sh\n$ nodetopo discover --from b --matrix --colour\nkubectl ntopo gett x\n```\n"
        "then `nodetopo ray --labels-file x | nodetopo export kueue --strict --levels 3`; "
        "namespace nodetopo rollout"
    )
    assert _not_real(_mentions_in("page", text)) == [
        "page: 'kubectl ntopo gett x': no command 'kubectl ntopo gett'",
        "page: 'nodetopo discover --from b --matrix --colour': nodetopo discover has no --colour",
        "page: 'nodetopo export kueue --strict --levels 3': nodetopo export has no --levels",
    ]


def test_every_command_and_flag_in_the_docs_exists() -> None:
    wrong = _not_real(MENTIONS)
    assert wrong == [], "\n".join(wrong)
