"""What the commands' command lines share: how a command is added (its description printed as
written), the type of the ``register`` hooks, the ``-o``/``--output`` format flag, the parsing of a
number argument, and how a command runs (its failure as one line on stderr)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from nodetopo.command.terminal import strip_control
from nodetopo.errors import NodetopoError

N = TypeVar("N", int, float)

#: ``add_common`` / ``add_input``: what ``nodetopo.cli`` hands each command's ``register``
AddArguments = Callable[[argparse.ArgumentParser], None]


def add_command(
    sub: Any, name: str, *, help: str, description: str, epilog: str | None = None
) -> argparse.ArgumentParser:
    """The sub-command ``name``, whose description and epilog are printed as written."""
    parser: argparse.ArgumentParser = sub.add_parser(
        name,
        help=help,
        description=description,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return parser


def add_output_format(parser: argparse.ArgumentParser, choices: Sequence[str], help: str) -> None:
    """``-o``/``--output``: the format the command prints, one of ``choices``, the first by default."""
    parser.add_argument("-o", "--output", choices=list(choices), default=choices[0], help=help)


def number(
    text: str, what: str, convert: Callable[[str], N], *, shown: str | None = None, hint: str = ""
) -> N:
    """``convert(text)``, or the usage error ``not WHAT: 'SHOWN'HINT`` (``shown`` defaults to ``text``)."""
    try:
        return convert(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not {what}: {text if shown is None else shown!r}{hint}") from None


def require(ok: bool, message: str) -> None:
    """The usage error ``message`` unless ``ok``."""
    if not ok:
        raise argparse.ArgumentTypeError(message)


def run_command(
    func: Callable[[argparse.Namespace], int],
    args: argparse.Namespace,
    *,
    prefix: str,
    usage_errors: tuple[type[NodetopoError], ...] = (),
) -> int:
    """``func(args)``'s exit code; a failure is one line on stderr, ``PREFIX: why``: 2 for one of
    ``usage_errors``, 1 for any other ``NodetopoError`` or an ``OSError`` (naming its file), 130 on ^C."""
    try:
        return func(args)
    except usage_errors as e:
        print(f"{prefix}: {strip_control(str(e))}", file=sys.stderr)
        return 2
    except NodetopoError as e:
        print(f"{prefix}: {strip_control(str(e))}", file=sys.stderr)
        return 1
    except OSError as e:  # a file or port the command needed: say which, in one line
        where = f": {e.filename}" if e.filename else ""
        print(f"{prefix}: {strip_control(e.strerror or str(e))}{strip_control(str(where))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
