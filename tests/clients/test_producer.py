"""Samsa's Producer against a real broker, read back by confluent-kafka."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

import samsa.embedded
from broker_process import BrokerProcess
from samsa.client.connection import KafkaTimeoutError
from samsa.client.partitioner import partition_for_key
from samsa.client.producer import Producer, RecordMetadata
from samsa.protocol import errors
from samsa.serialization import SerializationError, StringSerializer
from waiting import wait_until


@pytest.fixture(scope="module")
def broker():
    with samsa.embedded.Broker({"num.partitions": 3}) as b:
        yield b


def read(bootstrap: str, topic: str, partitions=range(3), expected: int | None = None, timeout: float = 20):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in partitions])
    out, deadline = [], time.time() + timeout
    while time.time() < deadline and (expected is None or len(out) < expected):
        m = c.poll(0.5)
        if m is None:
            if expected is None:
                break
            continue
        if not m.error():
            out.append(m)
    c.close()
    return out


def test_send_returns_metadata_and_records_read_back_identically(broker):
    delivered = []
    with Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 1}) as p:
        futures = [p.send("rt", value=b"v%d" % i, key=b"k%d" % i, headers={"h": b"%d" % i}, timestamp=1_700_000_000_000 + i,
                          on_delivery=lambda m, e: delivered.append((m, e))) for i in range(50)]
        metas = [f.result(20) for f in futures]
    assert all(isinstance(m, RecordMetadata) and m.offset >= 0 for m in metas)
    assert len(delivered) == 50 and all(e is None for _, e in delivered)
    got = {m.key(): m for m in read(broker.bootstrap_servers, "rt", expected=50)}
    for i, meta in enumerate(metas):
        m = got[b"k%d" % i]
        assert (m.value(), m.headers(), m.timestamp()[1], m.partition(), m.offset()) == \
            (b"v%d" % i, [("h", b"%d" % i)], 1_700_000_000_000 + i, meta.partition, meta.offset)
        assert meta.partition == partition_for_key(b"k%d" % i, 3)  # where Java's producer puts it


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compression(broker, codec):
    topic = f"codec-{codec}"
    with Producer({"bootstrap.servers": broker.bootstrap_servers, "compression.type": codec}) as p:
        for i in range(200):
            p.send(topic, b"%d" % i * 20, partition=0)
        assert p.flush(20) == 0
    assert [m.value() for m in read(broker.bootstrap_servers, topic, [0], expected=200)] == \
        [b"%d" % i * 20 for i in range(200)]


def test_compression_levels_are_applied(broker):
    values = [b"record %d of a compressible run, " % i * 3 for i in range(3000)]
    for level in (1, 9):
        config = {"bootstrap.servers": broker.bootstrap_servers, "compression.type": "gzip",
                  "compression.gzip.level": level, "linger.ms": 60000, "batch.size": 1 << 20}
        with Producer(config) as p:
            for v in values:
                p.send(f"gzip-{level}", v, partition=0, timestamp=1_700_000_000_000)  # the same bytes but for the level
            assert p.flush(20) == 0  # one batch
    size = {level: sum(f.stat().st_size for d in broker.config.log_dirs for f in Path(d, f"gzip-{level}-0").glob("*.log"))
            for level in (1, 9)}
    assert 0 < size[9] < size[1]
    assert [m.value() for m in read(broker.bootstrap_servers, "gzip-9", [0], expected=3000)] == values


def test_acks_zero_gives_offset_minus_one(broker):
    with Producer({"bootstrap.servers": broker.bootstrap_servers, "acks": 0}) as p:
        assert p.send("acks0", b"x", partition=0).result(20).offset == -1
    assert len(read(broker.bootstrap_servers, "acks0", [0], expected=1)) == 1


def test_string_config_values_serializers_and_interceptors(broker):
    class Interceptor:
        def configure(self, configs):
            self.content = configs["classContent"]
            self.acks = []

        def on_send(self, record):
            record["value"] = f"{self.content}:{record['value']}"
            return record

        def on_acknowledgement(self, metadata, error):
            self.acks.append(metadata)

        def close(self):
            self.closed = True

    interceptor = Interceptor()
    p = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": "0", "acks": "all",
                  "value.serializer": StringSerializer, "interceptor.classes": [interceptor],
                  "classContent": "seed"})
    p.send("icpt", "hello", partition=0).result(20)
    p.close()
    assert interceptor.acks[0].offset == 0 and interceptor.closed
    assert read(broker.bootstrap_servers, "icpt", [0], expected=1)[0].value() == b"seed:hello"


def test_bad_input_is_a_clear_error(broker):
    with pytest.raises(Exception, match="acks"):
        Producer({"bootstrap.servers": broker.bootstrap_servers, "acks": "most"})
    class Broken:
        def serialize(self, topic, data, headers=None):
            if data == "raise":
                raise ValueError("nope")
            return data

    p = Producer({"bootstrap.servers": broker.bootstrap_servers, "max.request.size": 1000,
                  "value.serializer": Broken()})
    with pytest.raises(errors.MessageTooLargeError, match="max.request.size"):
        p.send("big", b"x" * 2000)
    with pytest.raises(SerializationError, match="nope"):
        p.send("big", "raise")
    assert p.send("big", b"fits").result(20).offset == 0  # neither bad record was queued
    p.close()
    with pytest.raises(RuntimeError, match="closed"):
        p.send("big", b"x")


def test_a_batch_the_broker_refuses_fails_its_future_and_callback(broker):
    from samsa.client.admin import Admin
    from samsa.client.types import NewTopic
    with Admin({"bootstrap.servers": broker.bootstrap_servers}) as admin:
        admin.create_topics([NewTopic("small", 1, 1, config={"max.message.bytes": "300"})])
    failures = []
    with Producer({"bootstrap.servers": broker.bootstrap_servers}) as p:
        big = p.send("small", b"x" * 1000, on_delivery=lambda m, e: failures.append((m, e)))
        assert isinstance(big.exception(20), errors.MessageTooLargeError)
        assert p.send("small", b"fits").result(20).offset == 0  # the producer goes on
    assert len(failures) == 1 and failures[0][0] is None
    assert "max.message.bytes" in str(failures[0][1])


def test_unreachable_bootstrap_names_the_servers():
    p = Producer({"bootstrap.servers": "127.0.0.1:1", "max.block.ms": 1500})
    with pytest.raises(KafkaTimeoutError, match="127.0.0.1:1"):
        p.send("t", b"x")
    p.close(5)


def test_broker_killed_mid_send_then_restarted_loses_and_duplicates_nothing(tmp_path):
    b = BrokerProcess(tmp_path, **{"num.partitions": 1}).start()
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 2, "delivery.timeout.ms": 60000,
                  "request.timeout.ms": 5000})
    futures = []
    try:
        for i in range(3000):
            futures.append(p.send("crash", b"%d" % i))
            if i == 1000:
                b.kill()
                threading.Timer(1.0, b.start).start()
        assert p.flush(60) == 0
        assert all(f.exception() is None for f in futures)
        values = [m.value() for m in read(b.bootstrap, "crash", [0], expected=3000, timeout=30)]
        assert sorted(values, key=int) == [b"%d" % i for i in range(3000)]  # each exactly once
        assert values == sorted(values, key=int)                             # and in order
    finally:
        p.close(10)
        b.stop()


def test_against_librdkafkas_mock_cluster():
    """An independent Kafka implementation: Samsa's producer writes, confluent-kafka reads."""
    import subprocess
    import sys
    from broker_process import ROOT
    mock = subprocess.Popen([sys.executable, str(ROOT / "bench" / "mock_broker.py")], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        port = int(mock.stdout.readline().split()[1])
        mock.stdin.write("CREATE mocked 1\n")
        mock.stdin.flush()
        assert mock.stdout.readline().strip() == "OK"
        bootstrap = f"127.0.0.1:{port}"
        with Producer({"bootstrap.servers": bootstrap, "compression.type": "lz4"}) as p:
            metas = [p.send("mocked", b"m%d" % i, key=b"k", headers={"n": b"%d" % i}) for i in range(100)]
            assert [f.result(30).offset for f in metas] == list(range(100))
        got = read(bootstrap, "mocked", [0], expected=100)
        assert [(m.value(), m.headers()) for m in got] == [(b"m%d" % i, [("n", b"%d" % i)]) for i in range(100)]
    finally:
        mock.stdin.close()
        mock.wait(10)


def test_the_three_clients_import_from_the_package():
    from samsa import Admin, Consumer, Producer
    from samsa.client.admin import Admin as A
    from samsa.client.consumer import Consumer as C
    from samsa.client.producer import Producer as P
    assert (Producer, Consumer, Admin) == (P, C, A)


def test_metadata_max_age_picks_up_added_partitions(broker):
    from samsa import Admin, Producer
    from samsa.client.types import NewPartitions, NewTopic
    with Admin({"bootstrap.servers": broker.bootstrap_servers}) as admin:
        admin.create_topics([NewTopic("growing", 1, 1)])
        with Producer({"bootstrap.servers": broker.bootstrap_servers, "metadata.max.age.ms": 200}) as p:
            p.send("growing", b"before").result(10)
            admin.create_partitions({"growing": NewPartitions(3)})
            # Each send lets the sender's loop notice the metadata's age.
            wait_until(lambda: p.send("growing", b"tick").result(10) and p.partitions_for("growing") == [0, 1, 2],
                       "the producer to see 3 partitions", 20, interval=0.1)
            assert p.send("growing", b"on the new partition", partition=2).result(10).partition == 2


def test_reconnect_backoff_doubles_to_its_maximum_with_jitter():
    from samsa.client.metadata import ClusterMetadata
    from samsa.client.types import Node
    cluster = ClusterMetadata("127.0.0.1:1", reconnect_backoff_ms=50, reconnect_backoff_max_ms=400)
    cluster.brokers = {7: Node(7, "127.0.0.1", 1)}

    async def attempts() -> list[tuple[float, float]]:
        seen = []
        for _ in range(6):
            with pytest.raises(Exception):
                await cluster.node(7)
            not_before, backoff = cluster._node_backoff[7]
            seen.append((backoff, (not_before - time.monotonic()) * 1000))
        return seen
    seen = asyncio.run(attempts())
    assert [b for b, _ in seen] == [50, 100, 200, 400, 400, 400]
    for backoff, wait in seen:
        assert wait <= backoff * 1.2 + 1
