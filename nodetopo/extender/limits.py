"""The extender's request limits: how big a request may be and how much memory requests may hold.

Light on purpose (the standard library only): ``nodetopo extender --help`` reads the defaults here.
"""

from __future__ import annotations

import dataclasses

#: The API server refuses request bodies over 3 MiB, so no real Pod is larger.
MAX_POD_BYTES = 3 * 1024 * 1024
#: A node name is a DNS subdomain (at most 253 characters); in JSON with quotes and a comma, 256 bytes.
NODE_NAME_BYTES = 256
#: kube-scheduler with ``nodeCacheCapable`` sends node names only: room for 20,000 nodes (4x the
#: 5,000 Kubernetes supports) of the longest name, plus the largest pod.
MAX_BODY_BYTES = MAX_POD_BYTES + 20_000 * NODE_NAME_BYTES
#: What all requests in flight may reserve together (bodies and their decoded form). The
#: Deployment's memory limit is 512 MiB; the cache of 5,000 nodes and the runtime use ~100 MiB.
MEMORY_BUDGET_BYTES = 192 * 1024 * 1024
#: Per JSON value, the most CPython's decoder allocates (an empty dict with its slot: measured 75 B).
BYTES_PER_JSON_VALUE = 96


#: Connections served at once, and the time a request may take from its first line to its answer.
MAX_CONNECTIONS = 64
REQUEST_TIMEOUT_S = 10.0


@dataclasses.dataclass(frozen=True, slots=True)
class RequestLimits:
    """Per-request and shared memory bounds of the extender (see the module docstring)."""

    max_body_bytes: int = MAX_BODY_BYTES
    memory_budget_bytes: int = MEMORY_BUDGET_BYTES
    budget_wait_s: float = 2.0  #: how long a request waits for budget before 503

    def __post_init__(self) -> None:
        least = self.max_body_bytes + decode_cost_bound(self.max_body_bytes, True)
        if self.max_body_bytes < 1024 or self.memory_budget_bytes < least:
            raise ValueError(
                "max_body_bytes must be >= 1 KiB and memory_budget_bytes must hold one request of "
                f"max_body_bytes and its decoded form ({least} bytes for an ASCII body)"
            )


def decode_cost_bound(length: int, ascii_only: bool) -> int:
    """Worst case of ``decode_cost`` for any body of ``length`` bytes with no JSON values counted."""
    return length * (2 if ascii_only else 8)


def decode_cost(raw: bytes | bytearray) -> int:
    """An upper bound of the memory ``json.loads(raw)`` allocates, computed in one pass in C.

    Every JSON value but the first starts a container (``[``, ``{``) or follows a ``,`` or ``:``,
    so the count of those bytes bounds the number of values (bytes inside strings only make the
    bound looser). Text costs the body once more as ``str`` (4 bytes a character when any character
    is non-ASCII) and again as the decoded strings.
    """
    values = 1 + raw.count(b"[") + raw.count(b"{") + raw.count(b",") + raw.count(b":")
    return decode_cost_bound(len(raw), raw.isascii()) + BYTES_PER_JSON_VALUE * values
