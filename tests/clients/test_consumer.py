"""Samsa's Consumer against a real Samsa broker: reading, positions, offsets, bad input.

Records are written by other clients (confluent-kafka, kafka-python) so that what is
read back is checked against an independent writer.
"""

from __future__ import annotations

import re
import struct
import threading
import time

import pytest
from confluent_kafka import Producer as CKProducer

import samsa.embedded
from samsa.client.admin import Admin
from samsa.client.config import ConfigError
from samsa.client.connection import KafkaTimeoutError
from samsa.client.consumer import (Consumer, ConsumerRebalanceListener, IllegalStateError, NoOffsetForPartitionError,
                                   OffsetAndMetadata, TopicPartition, WakeupError)
from samsa.client.types import NewTopic
from samsa.protocol import errors
from waiting import wait_until

TS = 1_700_000_000_000


@pytest.fixture(scope="module")
def broker():
    with samsa.embedded.Broker({"num.partitions": 3}) as b:
        yield b


def produce(bootstrap: str, topic: str, n: int, partition: int | None = None, start: int = 0, **extra) -> None:
    p = CKProducer({"bootstrap.servers": bootstrap, "linger.ms": 2, **extra})
    for i in range(start, start + n):
        kw = {"partition": partition} if partition is not None else {}
        p.produce(topic, b"v%d" % i, key=b"k%d" % i, headers=[("i", b"%d" % i), ("n", None)], timestamp=TS + i, **kw)
    assert p.flush(30) == 0


def read(consumer: Consumer, n: int, timeout: float = 20) -> list:
    out: list = []
    deadline = time.time() + timeout
    while len(out) < n and time.time() < deadline:
        out += consumer.poll(0.2)
    return out


def config(broker, **kw) -> dict:
    c = {"bootstrap.servers": broker.bootstrap_servers, "auto.offset.reset": "earliest",
         "heartbeat.interval.ms": 300, "session.timeout.ms": 6000}
    c.update({k.replace("_", "."): v for k, v in kw.items()})
    return c


def test_assign_reads_every_field_confluent_wrote(broker):
    produce(broker.bootstrap_servers, "fields", 300)
    with Consumer(config(broker)) as c:
        c.assign([TopicPartition("fields", p) for p in range(3)])
        got = read(c, 300)
    assert len(got) == 300
    for r in got:
        i = int(r.value[1:])
        assert (r.key, r.value, r.headers, r.timestamp, r.timestamp_type) == \
            (b"k%d" % i, b"v%d" % i, (("i", b"%d" % i), ("n", None)), TS + i, 0)
        assert r.topic == "fields" and r.leader_epoch is not None
    by_partition: dict[int, list[int]] = {}
    for r in got:
        by_partition.setdefault(r.partition, []).append(r.offset)
    assert all(offsets == list(range(len(offsets))) for offsets in by_partition.values())


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_records_kafka_python_wrote(broker, codec):
    from kafka import KafkaProducer
    topic = f"kp-{codec}"
    p = KafkaProducer(bootstrap_servers=broker.bootstrap_servers, compression_type=None if codec == "none" else codec)
    futures = [p.send(topic, value=b"x%d" % i * (i % 7), key=None if i % 4 == 0 else b"key%d" % i,
                      headers=[("a", b"1"), ("b", b"")] if i % 2 else [], timestamp_ms=TS + 17 * i, partition=i % 3)
               for i in range(200)]
    metas = [f.get(30) for f in futures]
    p.close()
    with Consumer(config(broker)) as c:
        c.assign([TopicPartition(topic, q) for q in range(3)])
        got = {(r.partition, r.offset): r for r in read(c, 200)}
    for i, m in enumerate(metas):
        r = got[(m.partition, m.offset)]
        assert r.value == b"x%d" % i * (i % 7)
        assert r.key == (None if i % 4 == 0 else b"key%d" % i)
        assert list(r.headers) == ([("a", b"1"), ("b", b"")] if i % 2 else [])
        assert r.timestamp == TS + 17 * i


def test_subscribe_reads_everything_once_and_commits_on_close(broker):
    produce(broker.bootstrap_servers, "sub1", 500)
    with Consumer(config(broker, group_id="g-sub1", auto_commit_interval_ms=100)) as c:
        c.subscribe(["sub1"])
        got = read(c, 500)
        assert len(got) == 500 and len({(r.partition, r.offset) for r in got}) == 500
        assert c.assignment() == {TopicPartition("sub1", p) for p in range(3)}
        assert c.subscription() == {"sub1"}
    produce(broker.bootstrap_servers, "sub1", 50, start=500)
    with Consumer(config(broker, group_id="g-sub1")) as c:  # resumes after the commit on close
        c.subscribe("sub1")
        got = read(c, 50)
        assert sorted(int(r.value[1:]) for r in got) == list(range(500, 550))
        assert c.poll(0.3) == []


CRASHING_CONSUMER = """
import os, sys, time
from samsa.client.consumer import Consumer, TopicPartition
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": "g-autoc", "auto.offset.reset": "earliest",
              "auto.commit.interval.ms": 200, "max.poll.records": 10, "session.timeout.ms": 6000})
c.subscribe(["autoc"])
got = []
while len(got) < 10:
    got += c.poll(0.2)
tp = TopicPartition("autoc", 0)
deadline = time.time() + 10
while time.time() < deadline:  # (a program of its own: the tests' wait_until is not importable here)
    time.sleep(0.05)
    c.poll(0)  # an auto-commit is due every 200 ms: it commits what poll() handed out before
    committed = c.committed([tp])[tp]
    if committed is not None:
        break
print(len(got), committed.offset, flush=True)
os._exit(0)  # a crash: no close(), no final commit
"""


def test_auto_commit_on_poll_then_restart_resumes(broker):
    import subprocess
    import sys
    produce(broker.bootstrap_servers, "autoc", 30, partition=0)
    out = subprocess.run([sys.executable, "-c", CRASHING_CONSUMER, broker.bootstrap_servers], capture_output=True,
                         text=True, timeout=60)
    handed_out, committed = map(int, out.stdout.split())
    assert 10 <= committed <= 30 and committed >= handed_out
    with Consumer(config(broker, group_id="g-autoc", enable_auto_commit=False)) as c2:
        c2.subscribe(["autoc"])
        rest = read(c2, 30 - committed, timeout=30)  # the crashed member's session (6 s) ends first
        assert [r.offset for r in rest] == list(range(committed, 30))
        assert c2.poll(0.2) == []


def test_commit_with_metadata_committed_and_async(broker):
    produce(broker.bootstrap_servers, "cm", 10, partition=0)
    tp, tp1 = TopicPartition("cm", 0), TopicPartition("cm", 1)
    with Consumer(config(broker, group_id="g-cm", enable_auto_commit=False)) as c:
        c.assign([tp, tp1])
        assert c.committed([tp, tp1]) == {tp: None, tp1: None}
        c.commit({tp: OffsetAndMetadata(4, "my metadata")})
        assert c.committed([tp])[tp] == OffsetAndMetadata(4, "my metadata", None)
        assert [r.offset for r in read(c, 6)] == list(range(4, 10))  # from the committed offset
        done = []
        future = c.commit_async(callback=lambda offsets, error: done.append((offsets, error)))
        offsets = future.result(10)
        assert offsets[tp].offset == 10
        c.poll(0.2)  # callbacks run in the polling thread
        assert done and done[0][1] is None
        assert c.committed([tp])[tp].offset == 10
        c.commit({tp: 7})
        assert c.committed([tp])[tp].offset == 7
    with pytest.raises(errors.InvalidGroupIdError):
        with Consumer(config(broker)) as c:
            c.assign([tp])
            c.commit({tp: 1})


def test_seek_pause_resume_position(broker):
    produce(broker.bootstrap_servers, "seek", 20, partition=0)
    produce(broker.bootstrap_servers, "seek", 20, partition=1, start=20)
    tp0, tp1 = TopicPartition("seek", 0), TopicPartition("seek", 1)
    with Consumer(config(broker, max_poll_records=100)) as c:
        c.assign([tp0, tp1])
        assert c.position(tp0) == 0
        c.seek(tp0, 15)
        c.pause([tp1])
        assert c.paused() == {tp1}
        got = read(c, 5)
        assert [(r.partition, r.offset) for r in got] == [(0, o) for o in range(15, 20)]
        assert c.poll(0.3) == []
        c.resume([tp1])
        assert c.paused() == set()
        got = read(c, 20)
        assert [r.offset for r in got] == list(range(20)) and {r.partition for r in got} == {1}
        c.seek_to_beginning([tp0])
        assert c.position(tp0) == 0
        c.seek_to_end()
        assert (c.position(tp0), c.position(tp1)) == (20, 20)
        c.seek(tp1, OffsetAndMetadata(18))
        assert [r.offset for r in read(c, 2)] == [18, 19]
        assert c.highwater(tp1) == 20
        with pytest.raises(ValueError):
            c.seek(tp0, -1)
        with pytest.raises(IllegalStateError):
            c.seek(TopicPartition("seek", 2), 0)


def test_offsets_for_times_and_beginning_end_offsets(broker):
    produce(broker.bootstrap_servers, "times", 10, partition=0)
    tp, empty = TopicPartition("times", 0), TopicPartition("times", 2)
    with Consumer(config(broker)) as c:
        found = c.offsets_for_times({tp: TS + 4, empty: TS})
        assert (found[tp].offset, found[tp].timestamp) == (4, TS + 4) and found[empty] is None
        assert c.offsets_for_times({tp: TS + 1000})[tp] is None
        assert c.beginning_offsets([tp, empty]) == {tp: 0, empty: 0}
        assert c.end_offsets([tp, empty]) == {tp: 10, empty: 0}
        with pytest.raises(ValueError):
            c.offsets_for_times({tp: -5})
        assert {p.partition for p in c.partitions_for("times")} == {0, 1, 2}
        assert "times" in c.list_topics()


def test_auto_offset_reset_latest_and_none(broker):
    produce(broker.bootstrap_servers, "reset", 5, partition=0)
    tp = TopicPartition("reset", 0)
    with Consumer(config(broker, auto_offset_reset="latest")) as c:
        c.assign([tp])
        assert c.poll(0.3) == [] and c.position(tp) == 5
        produce(broker.bootstrap_servers, "reset", 3, partition=0, start=5)
        assert [r.offset for r in read(c, 3)] == [5, 6, 7]
    with Consumer(config(broker, group_id="g-none", auto_offset_reset="none")) as c:
        c.assign([tp])
        with pytest.raises(NoOffsetForPartitionError) as e:
            c.poll(2)
        assert e.value.partitions == [tp]
        with pytest.raises(NoOffsetForPartitionError):
            c.poll(1)
        c.seek(tp, 6)  # a position of its own: reads on
        assert [r.offset for r in read(c, 2)] == [6, 7]


def test_out_of_range_fetch_resets(broker):
    produce(broker.bootstrap_servers, "oor", 5, partition=0)
    tp = TopicPartition("oor", 0)
    with Consumer(config(broker, auto_offset_reset="earliest")) as c:
        c.assign([tp])
        c.seek(tp, 1000)
        assert [r.offset for r in read(c, 5)] == list(range(5))
    with Consumer(config(broker, auto_offset_reset="none")) as c:
        c.assign([tp])
        c.seek(tp, 1000)
        with pytest.raises(errors.OffsetOutOfRangeError):
            read(c, 1, timeout=5)


def test_max_poll_records_and_wakeup(broker):
    produce(broker.bootstrap_servers, "mpr", 50, partition=0)
    with Consumer(config(broker, max_poll_records=7)) as c:
        c.assign([TopicPartition("mpr", 0)])
        sizes = []
        while sum(sizes) < 50:
            got = c.poll(5)
            assert got
            sizes.append(len(got))
        assert max(sizes) == 7 and len(c.poll(0.1, max_records=3)) == 0
        threading.Timer(0.3, c.wakeup).start()
        t0 = time.time()
        with pytest.raises(WakeupError):
            c.poll(10)
        assert time.time() - t0 < 5
        assert c.poll(0.1) == []  # the wakeup is spent


def test_poll_after_close_is_a_clear_error(broker):
    c = Consumer(config(broker))
    c.assign([TopicPartition("closed", 0)])
    c.close()
    c.close()  # twice is fine
    with pytest.raises(IllegalStateError, match="already been closed"):
        c.poll(0.1)
    with pytest.raises(IllegalStateError, match="already been closed"):
        c.commit()


def test_poll_without_subscription_and_subscribe_without_group(broker):
    with Consumer(config(broker)) as c:
        with pytest.raises(IllegalStateError, match="not subscribed"):
            c.poll(0.1)
        with pytest.raises(errors.InvalidGroupIdError):
            c.subscribe(["x"])
    with Consumer(config(broker, group_id="g-mix")) as c:
        c.subscribe(["x"])
        with pytest.raises(IllegalStateError, match="mutually exclusive"):
            c.assign([TopicPartition("x", 0)])


def test_unreachable_bootstrap_fails_in_bounded_time_naming_the_servers():
    from broker_process import free_port
    port = free_port()
    c = Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "request.timeout.ms": 1500, "group.id": "g"})
    try:
        c.subscribe(["t"])
        t0 = time.time()
        with pytest.raises(KafkaTimeoutError, match=f"127.0.0.1:{port}"):
            while time.time() - t0 < 10:
                c.poll(0.5)
        assert time.time() - t0 < 5
    finally:
        c.close()


def test_bad_config_values_raise_config_error(broker):
    with pytest.raises(ConfigError):
        Consumer(config(broker, auto_offset_reset="sometimes"))
    with pytest.raises(ConfigError):
        Consumer(config(broker, enable_auto_commit=True))  # no group.id
    with pytest.raises(ConfigError):
        Consumer(config(broker, partition_assignment_strategy="no.such.Assignor"))
    c = Consumer(config(broker, **{"enable.auto.commit": "false", "max.poll.records": "3", "group.id": "x"}))
    assert c.config["max.poll.records"] == 3 and c.config["enable.auto.commit"] is False
    c.close()


def test_missing_topic_without_auto_create_is_picked_up_once_created():
    with samsa.embedded.Broker({"auto.create.topics.enable": "false"}) as b:
        c = Consumer({"bootstrap.servers": b.bootstrap_servers, "group.id": "g-late", "auto.offset.reset": "earliest",
                      "retry.backoff.max.ms": 300, "heartbeat.interval.ms": 300})
        try:
            c.subscribe(["late"])
            assert c.poll(1.0) == [] and c.assignment() == set()
            with Admin({"bootstrap.servers": b.bootstrap_servers}) as admin:
                admin.create_topics([NewTopic("late", 2, 1)])
            produce(b.bootstrap_servers, "late", 10)
            got = read(c, 10)
            assert len(got) == 10
            assert c.assignment() == {TopicPartition("late", 0), TopicPartition("late", 1)}
        finally:
            c.close()


def test_pattern_subscription(broker):
    produce(broker.bootstrap_servers, "pat-a", 3, partition=0)
    produce(broker.bootstrap_servers, "pat-b", 3, partition=0)
    produce(broker.bootstrap_servers, "other", 3, partition=0)
    with Consumer(config(broker, group_id="g-pat", metadata_max_age_ms=500)) as c:
        c.subscribe(re.compile(r"pat-.*"))
        got = read(c, 6)
        assert sorted({r.topic for r in got}) == ["pat-a", "pat-b"] and len(got) == 6
        produce(broker.bootstrap_servers, "pat-c", 2, partition=1)  # a new matching topic joins
        got = read(c, 2, timeout=20)
        assert {r.topic for r in got} == {"pat-c"}
        assert c.subscription() == {"pat-a", "pat-b", "pat-c"}


class Upper:
    """A user deserializer (the Deserializer protocol)."""

    def deserialize(self, topic, data, headers=None):
        return None if data is None else data.decode().upper()


class Interceptor:
    def configure(self, configs):
        self.tag = configs["interceptor.tag"]
        self.consumed, self.commits = [], []
        Interceptor.last = self

    def on_consume(self, records):
        self.consumed.append(len(records))
        return [r._replace(value=f"{self.tag}:{r.value}") for r in records]

    def on_commit(self, offsets):
        self.commits.append(dict(offsets))

    def close(self):
        self.closed = True


def test_deserializers_interceptors_and_the_seeds_consumer_loop(broker):
    """The seed's Java loop: group srk, no auto-commit, earliest, String deserializers."""
    p = CKProducer({"bootstrap.servers": broker.bootstrap_servers})
    for i in range(100):
        p.produce("srktest", key=("client%d" % i).encode(), value=("this message from client%d" % i).encode())
    p.flush(30)
    props = {"bootstrap.servers": broker.bootstrap_servers, "group.id": "srk", "enable.auto.commit": "false",
             "auto.offset.reset": "earliest", "auto.commit.interval.ms": "1000",
             "key.deserializer": "org.apache.kafka.common.serialization.StringDeserializer",
             "value.deserializer": "org.apache.kafka.common.serialization.StringDeserializer"}
    consumer = Consumer(props)
    consumer.subscribe(["srktest"])
    lines = []
    while len(lines) < 100:
        for record in consumer.poll(0.1):
            lines.append("offset = %d, key = %s, value = %s" % (record.offset, record.key, record.value))
    consumer.close()
    assert {line.split(", key = ")[1] for line in lines} == \
        {"client%d, value = this message from client%d" % (i, i) for i in range(100)}

    props.update({"value.deserializer": f"{__name__}.Upper", "key.deserializer": "samsa.serialization.IntegerDeserializer",
                  "interceptor.classes": f"{__name__}.Interceptor", "interceptor.tag": "seen", "group.id": "srk2"})
    produce_ints = CKProducer({"bootstrap.servers": broker.bootstrap_servers})
    produce_ints.produce("ints", key=struct.pack(">i", 42), value=b"abc", partition=0)
    produce_ints.flush(30)
    with Consumer(props) as c:
        c.subscribe(["ints"])
        (r,) = read(c, 1)
        assert (r.key, r.value) == (42, "seen:ABC")
        c.commit()
        interceptor = Interceptor.last
        assert interceptor.consumed == [1] and interceptor.commits[-1][TopicPartition("ints", 0)].offset == 1
    assert interceptor.closed


def test_isolation_level_and_fetch_settings_accepted(broker):
    produce(broker.bootstrap_servers, "iso", 20, partition=0)
    with Consumer(config(broker, isolation_level="read_committed", fetch_min_bytes=1, fetch_max_wait_ms=50,
                         fetch_max_bytes=1024, max_partition_fetch_bytes=100)) as c:
        c.assign([TopicPartition("iso", 0)])
        assert [r.offset for r in read(c, 20)] == list(range(20))


def test_fetch_min_bytes_waits_for_data(broker):
    produce(broker.bootstrap_servers, "minb", 1, partition=0)
    with Consumer(config(broker, fetch_min_bytes=1_000_000, fetch_max_wait_ms=700)) as c:
        c.assign([TopicPartition("minb", 0)])
        t0 = time.time()
        got = read(c, 1, timeout=5)
        assert len(got) == 1 and time.time() - t0 >= 0.5  # the broker held the fetch for fetch.max.wait.ms


def test_rebalance_listener_commits_in_the_polling_thread(broker):
    produce(broker.bootstrap_servers, "lsn", 30)
    calls = []

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, partitions):
            calls.append(("revoked", threading.current_thread().name, sorted(partitions)))
            if partitions:
                consumer.commit()  # a consumer call from inside the callback

        def on_partitions_assigned(self, partitions):
            calls.append(("assigned", threading.current_thread().name, sorted(partitions)))

    consumer = Consumer(config(broker, group_id="g-lsn", enable_auto_commit=False))
    consumer.subscribe(["lsn"], listener=Listener())
    read(consumer, 30)
    consumer.close()
    me = threading.current_thread().name
    assert [c[:2] for c in calls] == [("revoked", me), ("assigned", me), ("revoked", me)]
    assert calls[1][2] == [TopicPartition("lsn", p) for p in range(3)]
    with Consumer(config(broker, group_id="g-lsn")) as c:
        assert sum(o.offset for o in c.committed([TopicPartition("lsn", p) for p in range(3)]).values()) == 30


def test_poll_batches_hands_out_the_fetched_batches_undecoded(broker):
    from samsa.client.consumer_internals.records import ConsumerRecord
    from samsa.protocol.records import decode_records
    produce(broker.bootstrap_servers, "raw-batches", 200, partition=0, **{"compression.type": "lz4"})
    tp = TopicPartition("raw-batches", 0)
    with Consumer(config(broker)) as c:
        c.assign([tp])
        first: list = []
        while not first:
            first = c.poll(5, max_records=1)  # poll() has begun the first batch: the rest of it comes as a batch
        assert first[0].offset == 0
        batches: list = []
        wait_until(lambda: batches.extend(c.poll_batches(0.2)) or sum(b.count for b in batches) >= 199,
                   "the rest of the records as batches", 20)
        records = [r for b in batches for r in decode_records(b.data, b.start, b.count, b.base_offset,
                                                              b.base_timestamp, b.log_append_time, tp.topic, 0,
                                                              b.leader_epoch, ConsumerRecord._make)[0]]
        assert [(r.offset, r.value, r.timestamp) for r in records] == [(i, b"v%d" % i, TS + i) for i in range(1, 200)]
        assert c.position(tp) == 200 == batches[-1].next_offset
        assert c.poll_batches(0.2) == []
