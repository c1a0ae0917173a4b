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
                await asyncio.sleep(0.001)  # the ticker measures the loop's responsiveness: it is the load
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


def test_a_refused_record_fails_its_awaited_future(broker):
    from samsa.client.admin import Admin
    from samsa.client.types import NewTopic
    from samsa.protocol import errors
    with Admin({"bootstrap.servers": broker.bootstrap_servers}) as admin:
        admin.create_topics([NewTopic("aio-small", 1, 1, config={"max.message.bytes": "300"})])

    async def main():
        async with AIOProducer({"bootstrap.servers": broker.bootstrap_servers}) as p:
            with pytest.raises(errors.MessageTooLargeError, match="max.message.bytes"):
                await p.send_and_wait("aio-small", b"x" * 1000)
            with pytest.raises(errors.MessageTooLargeError, match="max.request.size"):
                await p.send("aio-small", b"x" * 2_000_000)  # refused before it is queued
            return await p.send_and_wait("aio-small", b"fits")
    assert asyncio.run(main()).offset == 0
