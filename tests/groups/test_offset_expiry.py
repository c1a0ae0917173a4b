"""offsets.retention.minutes: offsets of a group that stayed empty that long are removed."""

from __future__ import annotations

import asyncio
import time

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import samsa.embedded


def _committed(bootstrap: str, group: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return c.committed([TopicPartition("exp", 0)], timeout=10)[0].offset
    finally:
        c.close()


def test_offsets_of_an_empty_group_expire_after_retention():
    with samsa.embedded.Broker({"offsets.retention.minutes": 1}) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
        admin.create_topics([NewTopic("exp", 1, 1)])["exp"].result()
        c = Consumer({"bootstrap.servers": b.bootstrap_servers, "group.id": "standalone"})
        c.commit(offsets=[TopicPartition("exp", 0, 0)], asynchronous=False)
        c.close()
        assert _committed(b.bootstrap_servers, "standalone") == 0

        def expire(at_ms: int) -> None:
            asyncio.run_coroutine_threadsafe(b.server.groups.expire_offsets(at_ms), b._loop).result(10)

        now = int(time.time() * 1000)
        expire(now + 30_000)  # half the retention: kept
        assert _committed(b.bootstrap_servers, "standalone") == 0
        expire(now + 61_000)
        assert _committed(b.bootstrap_servers, "standalone") < 0  # OFFSET_INVALID: nothing committed
