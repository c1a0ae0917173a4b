"""Feeding a pipeline: events from its generator, sent with Samsa's producer at a chosen rate."""

from __future__ import annotations

import itertools
import time
from typing import Callable, Iterator

from samsa.client.producer import Producer


def send(bootstrap_servers: str, topic: str, events: Iterator[tuple[bytes, bytes]], *, rate: float = 0,
         count: int | None = None, seconds: float | None = None,
         progress: Callable[[int, float], None] | None = None) -> tuple[int, float]:
    """Send ``count`` events (or for ``seconds``), ``rate`` a second (0: as fast as the producer
    goes), each with the producer's clock as its timestamp; returns (sent, elapsed seconds)."""
    if count is not None:
        events = itertools.islice(events, count)
    start = time.monotonic()
    deadline = start + seconds if seconds else None
    sent = 0
    next_report = start + 5
    with Producer({"bootstrap.servers": bootstrap_servers, "linger.ms": 5, "acks": "all",
                   "max.block.ms": 15_000}) as producer:
        for key, value in events:
            if rate:
                due = start + sent / rate
                delay = due - time.monotonic()
                if delay > 0.001:
                    time.sleep(delay)
            producer.send(topic, value, key=key)
            sent += 1
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                break
            if progress is not None and now >= next_report:
                progress(sent, now - start)
                next_report = now + 5
        producer.flush()
    return sent, time.monotonic() - start
