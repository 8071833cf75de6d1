"""README.md's Deploy block keeps the shape tests/node/test_readme_deploy.py follows on a real node
(checked here without one, so a README edit that breaks it fails the unit suite too)."""

from __future__ import annotations

import pytest
from helpers import REPO
from node.readme_deploy import DeployShapeError, deploy_commands, deploy_plan

README = (REPO / "README.md").read_text(encoding="utf-8")


def test_the_readme_deploy_block_is_the_shape_the_node_test_follows() -> None:
    plan = deploy_plan(README)
    assert plan.archive == "nodetopo.oci.tar" and plan.namespace == "nodetopo" and plan.release == "nodetopo"
    assert [c.argv[:2] for c in plan.commands] == [
        ("python3", "image/build_oci.py"),
        ("ctr", "-n"),
        ("kubectl", "create"),
        ("kubectl", "label"),
        ("helm", "install"),
        ("helm", "test"),
        ("kubectl", "get"),
    ]
    # each command knows its README line
    lines = README.splitlines()
    for command in plan.commands:
        assert lines[command.line - 1].startswith(" ".join(command.argv[:2])), command


def _swap(old: str, new: str) -> str:
    assert README.count(old) == 1, old
    return README.replace(old, new)


@pytest.mark.parametrize(
    ("readme", "says"),
    [
        (
            _swap(
                "python3 image/build_oci.py --out nodetopo.oci.tar",
                "docker build -t registry.example.com/nodetopo:0.1.0 .",
            ),
            "expected python3 image/build_oci.py",
        ),
        (
            _swap("kubectl get ntopo\n```", "kubectl get ntopo\nkubectl get nodes\n```"),
            "has 8 commands, not 7",
        ),
        (
            _swap("import nodetopo.oci.tar", "import other.oci.tar"),
            "the build wrote 'nodetopo.oci.tar'",
        ),
        (
            _swap("charts/nodetopo --namespace nodetopo --wait", "charts/nodetopo --namespace nodetopo"),
            "without --wait",
        ),
        (
            _swap(
                "--namespace nodetopo --wait ",
                "--namespace nodetopo --wait --set image.repository=registry.example.com/nodetopo ",
            ),
            "no image value to set",
        ),
        (
            _swap("kubectl create namespace nodetopo\n", "kubectl create namespace nodetopo && true\n"),
            "one command a line",
        ),
        (README.replace("```sh\npython3 image/build_oci.py", "```text\npython3 image/build_oci.py"), "```sh"),
    ],
)
def test_another_shape_fails_naming_the_line(readme: str, says: str) -> None:
    with pytest.raises(DeployShapeError) as raised:
        deploy_plan(readme)
    assert says in str(raised.value), raised.value


def test_continuations_and_comments_are_read_as_a_shell_reads_them() -> None:
    readme = (
        "# x\n\n## Deploy\n\n```sh\nhelm install a \\\n  b --wait   # c\nkubectl get ntopo\n```\n\n## Next\n"
    )
    (install, get) = deploy_commands(readme)
    assert install.argv == ("helm", "install", "a", "b", "--wait") and install.line == 6
    assert get.argv == ("kubectl", "get", "ntopo") and get.line == 8
