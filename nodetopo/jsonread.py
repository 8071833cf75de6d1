"""The one JSON reader for untrusted text: bounded in size and in nesting, errors typed.

``json.loads`` recurses once per level of nesting: 60,000 ``[`` (a 60 KB file) or an answer nested
100,000 deep raises ``RecursionError``, which no ``except ValueError`` catches. ``load_json`` measures
the nesting first, in one pass that does not recurse, and refuses text deeper than ``max_depth`` or
longer than ``max_chars`` with a ``ParseError`` naming the source, the file or command, and the line.
Every parser of JSON from a host, a bundle or the network reads through it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from itertools import accumulate

from nodetopo.errors import ParseError

#: the deepest nesting accepted by default: NodeTopology objects, LLDP and metadata answers, NVML
#: dumps and benchmark reports are at most ~10 levels deep
MAX_DEPTH = 32
#: the longest text accepted by default (characters)
MAX_CHARS = 16 * 1024 * 1024

#: a JSON string (skipped: brackets inside strings do not nest), or a run of opening or of closing
#: brackets (a run of a million ``[`` is one step)
JSON_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[{]+|[\]}]+')
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
#: byte -> change of depth: ``[``/``{`` open a level, ``]``/``}`` close one
_STEP = tuple(1 if b in b"[{" else -1 if b in b"]}" else 0 for b in range(256))


def nesting_depth(text: str) -> int:
    """The deepest level ``json.loads(text)`` would reach (an upper bound when ``text`` is not
    JSON), without recursing: strings removed, then a running sum over the brackets left (in C)."""
    if text.count("[") + text.count("{") == 0:
        return 0
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text)).encode("ascii")
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


def deep_line(text: str, max_depth: int) -> int:
    """The 1-based line where ``text`` first opens level ``max_depth + 1`` (1 when it never does)."""
    depth = 0
    for match in JSON_TOKEN.finditer(text):
        token = match.group()
        if token[0] == '"':
            continue
        if token[0] in "[{":
            if depth + len(token) > max_depth:
                at = match.start() + (max_depth - depth)
                return text.count("\n", 0, at) + 1
            depth += len(token)
        else:
            depth -= len(token)
    return 1


def load_json(
    text: str,
    *,
    source: str,
    path: str,
    max_depth: int | None = MAX_DEPTH,
    max_chars: int | None = MAX_CHARS,
    parse_int: Callable[[str], object] | None = None,
) -> object:
    """``json.loads(text)`` for text from outside; ``ParseError(source, path, …, line=…)`` when it is
    longer than ``max_chars``, nested deeper than ``max_depth`` or not JSON (a number of more
    digits than Python converts included).

    ``max_chars=None``: no length bound here, for a caller whose read is the bound (an API server's
    list of every NodeTopology has no useful ceiling). ``max_depth=None``: no measuring pass (it
    costs about as much as decoding, for a caller decoding large answers often); the decoder's own
    recursion limit is the bound, reached without cost, and refused as nested too deep."""
    if max_chars is not None and len(text) > max_chars:
        raise ParseError(source, path, f"{len(text)} characters of JSON, more than {max_chars}")
    if max_depth is not None and nesting_depth(text) > max_depth:
        raise ParseError(
            source, path, f"JSON nested deeper than {max_depth} levels", line=deep_line(text, max_depth)
        )
    try:
        return json.loads(text, parse_int=parse_int)
    except json.JSONDecodeError as e:
        raise ParseError(source, path, f"not JSON: {e.msg}", line=e.lineno) from None
    except RecursionError:  # max_depth=None, or a safety net under the depth
        raise ParseError(source, path, "JSON nested deeper than the decoder recurses") from None
    except ValueError as e:  # int() of 4,301+ digits
        raise ParseError(source, path, f"not JSON: {str(e)[:120]}") from None
