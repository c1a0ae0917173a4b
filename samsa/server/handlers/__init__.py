"""One module per Kafka API, each a thin function: decoded request in, response dict out.

A handler may return a dict (answered at once), an awaitable of a dict (answered when it
resolves, e.g. a long-poll fetch), or None (no response: acks=0 produce).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from samsa.protocol import api


@dataclass(frozen=True)
class Handler:
    name: str
    fn: Callable
    min_version: int
    max_version: int


HANDLERS: dict[int, Handler] = {}


def handles(api_key: int, min_version: int | None = None, max_version: int | None = None):
    """Register a handler for the versions given (by default all the schema knows)."""
    spec = api.api(api_key)

    def register(fn: Callable) -> Callable:
        lo = spec.min_version if min_version is None else min_version
        hi = spec.max_version if max_version is None else max_version
        HANDLERS[api_key] = Handler(spec.name, fn, lo, hi)
        return fn
    return register


from samsa.server.handlers import (  # noqa: E402,F401  (registration side effects)
    admin_configs,
    admin_topics,
    api_versions,
    cluster,
    fetch,
    groups,
    list_offsets,
    metadata,
    produce,
    producer_ids,
    replication,
)
