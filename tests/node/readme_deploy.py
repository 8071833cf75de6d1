"""The README's "Deploy" block as the commands a test runs, and the one way the test fills in what only
its machine knows.

``deploy_plan(readme)`` reads the one ```sh block of README.md's ``## Deploy`` section (shell words as
a shell splits them: quotes, ``\\`` continuations, ``#`` comments) and checks it has the shape a
newcomer without Docker follows: build the image archive, import it into containerd, create and
label the namespace, ``helm install`` charts/nodetopo into it, ``helm test``, ``kubectl get ntopo``.
A block of another shape (a step added, removed or reordered, a shell operator, an image that needs
a registry) raises ``DeployShapeError`` naming the README line: the README's block must stay one a
test can follow as written, so a change of its shape is a change of this module too.

Environment-specific values are never edited into the commands. The test supplies them through the
environment each tool already reads (``KUBECONFIG`` for kubectl and helm, ``CONTAINERD_ADDRESS`` for
ctr, ``PATH`` for which kubectl and helm run), plus, for ``helm install`` alone, one ``--values``
file appended to the command (``with_harness_values``): what a test node differs by from a real one.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

SECTION = "## Deploy"
CHART = "charts/nodetopo"
_FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```[ \t]*$", re.M | re.S)
_OPERATORS = {"|", "||", "&&", ";", "&", "(", ")", ">", ">>", "<"}


class DeployShapeError(AssertionError):
    """README.md's Deploy block is not the shape the test follows (the message says where and how)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Command:
    """One command of the block: its first line in README.md and its words."""

    line: int
    argv: tuple[str, ...]

    def __str__(self) -> str:
        return f"README.md:{self.line}: {shlex.join(self.argv)}"


@dataclass(frozen=True, slots=True, kw_only=True)
class DeployPlan:
    """The block's commands in order, and what they name: the archive, namespace and release."""

    commands: tuple[Command, ...]
    archive: str
    namespace: str
    release: str

    @property
    def build(self) -> Command:
        return self.commands[0]

    @property
    def install(self) -> Command:
        return self.commands[4]

    @property
    def helm_test(self) -> Command:
        return self.commands[5]

    @property
    def get_ntopo(self) -> Command:
        return self.commands[6]


def _words(text: str, line: int) -> tuple[str, ...]:
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        words = tuple(lexer)
    except ValueError as e:
        raise DeployShapeError(f"README.md:{line}: {e}") from e
    operators = [w for w in words if w in _OPERATORS]
    if operators:
        raise DeployShapeError(
            f"README.md:{line}: {text.strip()!r} uses {operators}: the Deploy block has one command a line"
        )
    return words


def deploy_commands(readme: str) -> tuple[Command, ...]:
    """The commands of the one ```sh block of the ``## Deploy`` section, with their README lines."""
    start = readme.find(f"\n{SECTION}\n")
    if start < 0:
        raise DeployShapeError(f"README.md has no {SECTION!r} section")
    start += 1
    end = readme.find("\n## ", start + len(SECTION))
    section = readme[start : end if end >= 0 else len(readme)]
    first_line = readme.count("\n", 0, start) + 1
    blocks = list(_FENCE.finditer(section))
    if len(blocks) != 1 or blocks[0].group(1).strip() not in ("sh", "bash", "shell"):
        raise DeployShapeError(
            f"README.md:{first_line}: the Deploy section has {len(blocks)} fenced blocks "
            f"({[b.group(1) for b in blocks]}); the test follows exactly one ```sh block"
        )
    block = blocks[0]
    line = first_line + section.count("\n", 0, block.start(2))
    commands: list[Command] = []
    pending, pending_line = "", line
    for number, text in enumerate(block.group(2).splitlines(), start=line):
        if not pending:
            pending_line = number
        if text.rstrip().endswith("\\") and "#" not in text:
            pending += text.rstrip()[:-1] + " "
            continue
        words = _words(pending + text, pending_line)
        pending = ""
        if words:
            commands.append(Command(line=pending_line, argv=words))
    if pending:
        raise DeployShapeError(f"README.md:{pending_line}: the block ends inside a continued line")
    return tuple(commands)


def _option(argv: tuple[str, ...], *names: str) -> str | None:
    for i, word in enumerate(argv):
        for name in names:
            if word == name and i + 1 < len(argv):
                return argv[i + 1]
            if word.startswith(f"{name}="):
                return word.split("=", 1)[1]
    return None


def _expect(command: Command, prefix: tuple[str, ...], what: str) -> None:
    if command.argv[: len(prefix)] != prefix:
        raise DeployShapeError(f"{command}: expected {shlex.join(prefix)} … ({what})")


def deploy_plan(readme: str) -> DeployPlan:
    """The Deploy block checked against the shape the test follows (``DeployShapeError`` if not)."""
    commands = deploy_commands(readme)
    names = "build, import, create namespace, label namespace, helm install, helm test, kubectl get ntopo"
    if len(commands) != 7:
        listing = "\n  ".join(str(c) for c in commands)
        raise DeployShapeError(
            f"the Deploy block has {len(commands)} commands, not 7 ({names}):\n  {listing}"
        )
    build, load, create, label, install, helm_test, get = commands
    _expect(build, ("python3", "image/build_oci.py"), "the image, built without Docker")
    archive = _option(build.argv, "--out")
    if archive is None or "--ray" in build.argv:
        raise DeployShapeError(f"{build}: expected --out <archive> (the agent image, not --ray)")
    _expect(load, ("ctr", "-n", "k8s.io", "images", "import"), "into the node's containerd, for the kubelet")
    if load.argv[-1] != archive:
        raise DeployShapeError(f"{load}: imports {load.argv[-1]!r}, the build wrote {archive!r}")
    _expect(create, ("kubectl", "create", "namespace"), "the release's namespace")
    namespace = create.argv[3]
    _expect(label, ("kubectl", "label", "namespace", namespace), "its Pod Security level")
    if "pod-security.kubernetes.io/enforce=privileged" not in label.argv:
        raise DeployShapeError(f"{label}: the agent's hostPath volumes need the privileged level")
    _expect(install, ("helm", "install"), "the chart from this clone")
    release, chart = install.argv[2:4]
    if chart != CHART or _option(install.argv, "--namespace", "-n") != namespace:
        raise DeployShapeError(f"{install}: expected helm install <release> {CHART} --namespace {namespace}")
    if "--wait" not in install.argv:
        raise DeployShapeError(f"{install}: without --wait it returns before the agent is Ready")
    if any(w.startswith("image.") or "image." in w for w in install.argv):
        raise DeployShapeError(f"{install}: the archive is the chart's default image; no image value to set")
    _expect(helm_test, ("helm", "test", release), "the chart's test pod")
    _expect(get, ("kubectl", "get", "ntopo"), "the newcomer's first look")
    return DeployPlan(commands=commands, archive=archive, namespace=namespace, release=release)


def with_harness_values(command: Command, values: Path) -> tuple[str, ...]:
    """``helm install``'s words with the harness's values file appended (its only edit)."""
    assert command.argv[:2] == ("helm", "install"), command
    return (*command.argv, "--values", str(values))
