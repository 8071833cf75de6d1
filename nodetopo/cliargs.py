"""What the commands' argument parsers share: how a command is added (its description printed as
written), the type of the ``register`` hooks, and the parsing of a number argument."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, TypeVar

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
