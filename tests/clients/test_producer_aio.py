"""samsa.aio.AIOProducer: the producer core with its sender on the caller's event loop."""

from __future__ import annotations

import asyncio
import time

import pytest
from confluent_kafka import Consumer, TopicPartition

import samsa.embedded
from samsa.aio import AIOConsumer, AIOProducer
from samsa.client.connection import KafkaTimeoutError


@pytest.fixture(scope="module")
def broker():
    with samsa.embedded.Broker({"num.partitions": 1}) as b:
        yield b


def read(bootstrap: str, topic: str, n: int) -> list:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r{time.time()}", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    out = []
    deadline = time.time() + 30
    while len(out) < n and time.time() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            out.append(m)
    c.close()
    return out


def test_send_send_and_wait_flush_and_callbacks_in_order(broker):
    delivered = []

    async def main():
        async with AIOProducer({"bootstrap.servers": broker.bootstrap_servers, "acks": "all", "linger.ms": 2}) as p:
            first = await p.send_and_wait("aio-p", b"first", key=b"k", headers={"h": "v"})
            futures = [await p.send("aio-p", b"%d" % i, on_delivery=lambda m, e: delivered.append(m.offset))
                       for i in range(500)]
            await p.flush()
            assert all(f.done() for f in futures)
            metas = [f.result() for f in futures]
            assert await p.partitions_for("aio-p") == [0]
            return first, metas
    first, metas = asyncio.run(main())
    assert (first.topic, first.partition, first.offset) == ("aio-p", 0, 0)
    assert [m.offset for m in metas] == list(range(1, 501)) == delivered
    records = read(broker.bootstrap_servers, "aio-p", 501)
    assert records[0].headers() == [("h", b"v")] and records[0].key() == b"k"
    assert [r.value() for r in records[1:]] == [b"%d" % i for i in range(500)]


def test_the_loop_stays_free_while_buffer_memory_is_full(broker):
    async def main():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.001)
                ticks += 1
        t = asyncio.ensure_future(ticker())
        async with AIOProducer({"bootstrap.servers": broker.bootstrap_servers, "buffer.memory": 4096,
                                "batch.size": 1024, "linger.ms": 0}) as p:
            for i in range(2000):
                await p.send("aio-room", b"x" * 100)
            await p.flush()
        t.cancel()
        return ticks
    assert asyncio.run(main()) > 0
    assert len(read(broker.bootstrap_servers, "aio-room", 2000)) == 2000


def test_unknown_topic_times_out_and_a_consumer_reads_on_the_same_loop(broker):
    async def main():
        async with AIOProducer({"bootstrap.servers": broker.bootstrap_servers, "max.block.ms": 500,
                                "allow.auto.create.topics": False}) as p:
            with pytest.raises(KafkaTimeoutError, match="not present in metadata"):
                await p.send("!!invalid topic name", b"x")
            await p.send_and_wait("aio-both", b"hello")
        consumer = AIOConsumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "aio-both",
                                "auto.offset.reset": "earliest"}, "aio-both")
        await consumer.start()
        try:
            record = await asyncio.wait_for(consumer.getone(), 30)
        finally:
            await consumer.stop()
        return record.value
    assert asyncio.run(main()) == b"hello"


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
            deadline = time.time() + 20
            while p.partitions_for("growing") != [0, 1, 2] and time.time() < deadline:
                p.send("growing", b"tick").result(10)  # the sender's loop notices the metadata's age
                time.sleep(0.1)
            assert p.send("growing", b"on the new partition", partition=2).result(10).partition == 2


def test_reconnect_backoff_doubles_to_its_maximum_with_jitter():
    from samsa.client.cluster import Cluster
    from samsa.client.types import Node
    cluster = Cluster("127.0.0.1:1", reconnect_backoff_ms=50, reconnect_backoff_max_ms=400)
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
