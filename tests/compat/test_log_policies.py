"""Retention, roll and compaction as a broker applies them, seen through real clients."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import samsa.embedded
from waiting import wait_until


def _read_all(bootstrap: str, topic: str, timeout: float = 20.0) -> list:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    lo, hi = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    c.assign([TopicPartition(topic, 0, lo)])
    out, deadline = [], time.time() + timeout
    while (not out or out[-1].offset() < hi - 1) and time.time() < deadline and hi > lo:
        m = c.poll(0.5)
        if m is not None and not m.error():
            out.append(m)
    c.close()
    return out


def _produce(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes | None]]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.num.messages": 1})
    for key, value in records:
        p.produce(topic, key=key, value=value, partition=0)
        p.flush(10)
    assert p.flush(10) == 0


def _segments(log_dir: str, topic: str) -> list[str]:
    return sorted(p.name for p in (Path(log_dir) / f"{topic}-0").glob("*.log"))


def test_segments_roll_and_time_retention_deletes_old_ones():
    with samsa.embedded.Broker({"log.retention.check.interval.ms": 200}) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
        admin.create_topics([NewTopic("ret", 1, 1, config={"internal.segment.bytes": "300", "retention.ms": "1500"})])["ret"].result()
        _produce(b.bootstrap_servers, "ret", [(None, b"x" * 100) for _ in range(10)])
        names = _segments(b.config.log_dirs[0], "ret")
        assert len(names) > 3 and all(len(n) == len("00000000000000000000.log") for n in names)
        watermarks = lambda: Consumer({"bootstrap.servers": b.bootstrap_servers,  # noqa: E731
                                       "group.id": "w"}).get_watermark_offsets(TopicPartition("ret", 0), timeout=5)
        wait_until(lambda: watermarks() == (10, 10), "every record expired, offsets going on", 20, interval=0.3)
        _produce(b.bootstrap_servers, "ret", [(None, b"after")])
        assert [m.offset() for m in _read_all(b.bootstrap_servers, "ret")] == [10]


def test_size_retention_keeps_the_newest():
    with samsa.embedded.Broker({"log.retention.check.interval.ms": 200}) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
        admin.create_topics([NewTopic("size", 1, 1, config={"internal.segment.bytes": "400", "retention.bytes": "800"})])[
            "size"].result()
        _produce(b.bootstrap_servers, "size", [(None, b"%03d" % i + b"y" * 100) for i in range(20)])
        def trimmed():
            msgs = _read_all(b.bootstrap_servers, "size")
            return msgs if msgs and msgs[0].offset() > 0 else None
        msgs = wait_until(trimmed, "the oldest segments deleted", 20, interval=0.3)
        assert msgs[0].offset() > 0 and msgs[-1].offset() == 19
        assert [m.value()[:3] for m in msgs] == [b"%03d" % m.offset() for m in msgs]


def test_compacted_topic_keeps_the_latest_value_per_key():
    with samsa.embedded.Broker({"log.cleaner.backoff.ms": 200}) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
        admin.create_topics([NewTopic("cmp", 1, 1, config={
            "cleanup.policy": "compact", "internal.segment.bytes": "300", "min.cleanable.dirty.ratio": "0.01",
            "delete.retention.ms": "100"})])["cmp"].result()
        records = [(b"k%d" % (i % 3), b"v%d" % i) for i in range(12)] + [(b"k0", None)]
        records += [(b"other", b"x")] * 6  # fill segments so the tombstone's segment is closed
        _produce(b.bootstrap_servers, "cmp", records)
        def compacted():
            msgs = _read_all(b.bootstrap_servers, "cmp")
            keys = [m.key() for m in msgs]
            return msgs if keys.count(b"k1") == 1 and keys.count(b"k2") == 1 and b"k0" not in keys else None
        msgs = wait_until(compacted, "the log compacted", 30, interval=0.3)
        latest = {m.key(): (m.offset(), m.value()) for m in msgs}
        assert latest[b"k1"] == (10, b"v10") and latest[b"k2"] == (11, b"v11")
        assert b"k0" not in latest  # the tombstone itself went after delete.retention.ms
        assert [m.offset() for m in msgs] == sorted(m.offset() for m in msgs)
