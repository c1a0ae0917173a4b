"""What the Spark tests share: topics, an independent writer and reader (confluent-kafka), queries."""

from __future__ import annotations

import time
from collections import Counter
from datetime import datetime
from typing import Any, Callable, Iterable

from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import Producer as CKProducer
from confluent_kafka import TopicPartition as CKTopicPartition

from samsa.client.admin import Admin
from samsa.client.types import NewTopic


def create_topic(admin: Admin, name: str, partitions: int = 1, **config: str) -> str:
    admin.create_topics([NewTopic(name, partitions, 1, config={k.replace("_", "."): v for k, v in config.items()})])
    return name


def produce(bootstrap: str, topic: str, records: Iterable[dict[str, Any]], batch_each: bool = False) -> int:
    """Write with librdkafka (not Samsa's producer): what Spark reads is checked against another writer.
    Each record: value, and optionally key, partition, headers, timestamp. ``batch_each``: one
    record a batch (flushed one by one)."""
    p = CKProducer({"bootstrap.servers": bootstrap, "linger.ms": 2})
    failed: list = []
    n = 0
    for r in records:
        p.produce(topic, **r, on_delivery=lambda err, _m: err is not None and failed.append(err))
        n += 1
        if batch_each:
            p.flush(30)
        elif n % 10_000 == 0:
            p.poll(0)
    assert p.flush(30) == 0
    assert not failed, f"{len(failed)} records not written: {failed[0]}"
    return n


def read_topic(bootstrap: str, topic: str, partitions: int = 1, timeout: float = 30.0) -> list:
    """Every record of the topic, read with librdkafka up to the end offsets seen at the start."""
    c = CKConsumer({"bootstrap.servers": bootstrap, "group.id": "spark-tests-reader", "enable.auto.commit": False})
    try:
        ends = {}
        for p in range(partitions):
            lo, hi = c.get_watermark_offsets(CKTopicPartition(topic, p), timeout=10)
            ends[p] = (lo, hi)
        c.assign([CKTopicPartition(topic, p, lo) for p, (lo, hi) in ends.items() if hi > lo])
        todo = {p for p, (lo, hi) in ends.items() if hi > lo}
        out = []
        deadline = time.time() + timeout
        while todo and time.time() < deadline:
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            out.append(m)
            if m.offset() >= ends[m.partition()][1] - 1:
                todo.discard(m.partition())
        assert not todo, f"partitions {todo} of {topic} not read to their end"
        return out
    finally:
        c.close()


def read_committed(bootstrap: str, topic: str, partitions: int = 1, timeout: float = 30.0) -> list:
    """Every committed record of a topic written in transactions, up to the last stable offsets
    seen at the start (markers and aborted records move the position without a message)."""
    c = CKConsumer({"bootstrap.servers": bootstrap, "group.id": "spark-tests-reader", "enable.auto.commit": False,
                    "isolation.level": "read_committed"})
    try:
        tps = [CKTopicPartition(topic, p) for p in range(partitions)]
        ends = {tp.partition: c.get_watermark_offsets(tp, timeout=10, cached=False)[1] for tp in tps}
        c.assign([CKTopicPartition(topic, p, 0) for p in range(partitions)])
        out = []
        deadline = time.time() + timeout
        while time.time() < deadline:
            m = c.poll(0.2)
            if m is not None and not m.error():
                out.append(m)
                continue
            if all(tp.offset >= ends[tp.partition] for tp in c.position(tps)):
                return out
        raise AssertionError(f"{topic} not read to its last stable offsets {ends}")
    finally:
        c.close()


def source(spark, bootstrap: str, *, stream: bool = True, **options: str):
    reader = spark.readStream if stream else spark.read
    reader = reader.format("samsa").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def run_available_now(df, checkpoint: str, on_batch: Callable[[Any, int], None]) -> None:
    """Run a query over what is in the topic now; ``on_batch(df, batch_id)`` sees each micro-batch."""
    q = df.writeStream.foreachBatch(on_batch).option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
    q.awaitTermination()


def ms(iso: str) -> int:
    """An ISO-8601 time (``Z`` or an offset) in epoch milliseconds."""
    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


def activity_windows(events: list[dict]) -> dict[tuple[int, str, str], tuple[int, int, int, int]]:
    """The activity pipeline's closed one-minute windows, computed here from its good events:
    (window start, dimension, key) -> (events, page views, searches, clicks). A window is out
    once the watermark (the latest event time less one minute) has passed its end."""
    counts: Counter = Counter()
    for e in events:
        start = ms(e["ts"]) // 60_000 * 60_000
        for dim, key in (("page", e["page"]), ("user", e["user_id"])):
            counts[(start, dim, key, "events")] += 1
            counts[(start, dim, key, e["type"])] += 1
    watermark = max(ms(e["ts"]) for e in events) - 60_000
    return {k[:3]: tuple(counts[(*k[:3], t)] for t in ("events", "page_view", "search", "click"))
            for k in counts if k[0] + 60_000 <= watermark}
