"""The names of the NodeTopology contract, each written once: the API group, version, kind, plural
and short name of the resource (``crds/nodetopology.yaml``), and the ``nodetopo.io/`` prefix of every
node label, pod annotation and Ray label nodetopo defines, with the one validator of a label.

A label nodetopo writes is ``PREFIX`` + a name (``LABEL_NAME``: at most 63 characters, alphanumeric
at both ends, ``-_.`` inside) with a value (``LABEL_VALUE``: the same, or empty). ``label_key_problem``
says what is wrong with a key; ``is_valid`` (a key and a value) and ``check_label_keys`` (raises) are
the two ways callers ask.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

GROUP = "nodetopo.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "NodeTopology"
PLURAL = "nodetopologies"
SHORT_NAME = "ntopo"

#: The prefix of every key nodetopo defines: node labels, pod annotations, Ray labels and resources.
PREFIX = f"{GROUP}/"

#: The longest label name (after the prefix) and the longest label value Kubernetes accepts.
MAX_LABEL_LENGTH = 63
LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def label_key_problem(key: str) -> str | None:
    """What is wrong with ``key`` as a label nodetopo may write (None: nothing)."""
    if not key.startswith(PREFIX):
        return (
            f"label {key!r} is not under {PREFIX!r}: nodetopo applies only its own keys and never "
            "touches other labels"
        )
    name = key[len(PREFIX) :]
    if len(name) > MAX_LABEL_LENGTH or not LABEL_NAME.match(name):
        return f"label {key!r}: {name!r} is not a valid label name (<= 63 chars, [-A-Za-z0-9_.])"
    return None


def is_valid(key: str, value: str) -> bool:
    """``key`` is a label nodetopo may write and ``value`` a valid label value."""
    return (
        label_key_problem(key) is None and len(value) <= MAX_LABEL_LENGTH and bool(LABEL_VALUE.match(value))
    )


def check_label_keys(keys: Iterable[str]) -> None:
    """Raise ``ValueError`` for a key outside ``nodetopo.io/`` or not a valid label name."""
    for key in keys:
        problem = label_key_problem(key)
        if problem is not None:
            raise ValueError(problem)
