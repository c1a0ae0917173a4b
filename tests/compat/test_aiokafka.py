"""aiokafka against a real Samsa broker process (each test runs its own event loop)."""

from __future__ import annotations

import asyncio
import random

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from compat_helpers import BASE_TS, WAIT, consume, create_topic, wait_until, watermarks


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, WAIT * 3))


def producer(bootstrap: str, **conf) -> AIOKafkaProducer:
    conf.setdefault("linger_ms", 5)
    return AIOKafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=int(WAIT * 1000), **conf)


def consumer(bootstrap: str, **conf) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                            fetch_max_wait_ms=100, request_timeout_ms=int(WAIT * 1000) + 5000, **conf)


async def take(c: AIOKafkaConsumer, n: int) -> list:
    out = []
    while len(out) < n:  # bounded by run()'s overall timeout
        for records in (await c.getmany(timeout_ms=500)).values():
            out.extend(records)
    return out


async def read_partition(bootstrap: str, topic: str, partition: int, n: int) -> list:
    c = consumer(bootstrap)
    await c.start()
    try:
        tp = TopicPartition(topic, partition)
        c.assign([tp])
        await c.seek_to_beginning(tp)
        return await take(c, n)
    finally:
        await c.stop()


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_codec_roundtrip(broker, topic_name, codec):
    create_topic(broker.bootstrap, topic_name, partitions=2)
    rnd = random.Random(5)
    records = []
    for i in range(100):
        key = [None, b"", bytes(range(256)), b"k%d" % i][i % 4]
        value = [None, b"", b"aiokafka " * 900, rnd.randbytes(1200), b"v%d" % i][i % 5]
        if key is None and value is None:
            value = b"aiokafka refuses a record with neither key nor value"
        headers = [[], [("a", b"1"), ("a", b"2")], [("empty", b"")], [("ключ", "знач".encode())]][i % 4]
        records.append((key, value, headers, BASE_TS + 13 * i))

    async def go():
        p = producer(broker.bootstrap, compression_type=codec)
        await p.start()
        try:
            futs = [await p.send(topic_name, key=k, value=v, headers=h, timestamp_ms=ts, partition=i % 2)
                    for i, (k, v, h, ts) in enumerate(records)]
            metas = await asyncio.gather(*futs)
        finally:
            await p.stop()
        got = {part: await read_partition(broker.bootstrap, topic_name, part, 50) for part in (0, 1)}
        return metas, got

    metas, got = run(go())
    for part in (0, 1):
        expected = records[part::2]
        assert sorted(m.offset for m in metas if m.partition == part) == list(range(len(expected)))
        assert [r.offset for r in got[part]] == list(range(len(expected)))
        for r, (k, v, h, ts) in zip(got[part], expected):
            assert (r.key, r.value, list(r.headers), r.timestamp, r.timestamp_type) == (k, v, h, ts, 0)
        assert [(r.key, r.value) for r in consume(broker.bootstrap, topic_name, part)] == \
            [(k, v) for k, v, _, _ in expected]


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_acks(broker, topic_name, acks):
    create_topic(broker.bootstrap, topic_name)
    values = [b"a%d" % i for i in range(200)]

    async def go():
        p = producer(broker.bootstrap, acks=acks)
        await p.start()
        try:
            futs = [await p.send(topic_name, value=v, partition=0) for v in values]
            return await asyncio.gather(*futs)
        finally:
            await p.stop()

    metas = run(go())
    if acks != 0:
        assert [m.offset for m in metas] == list(range(len(values)))
    wait_until(lambda: watermarks(broker.bootstrap, topic_name)[1] == len(values), what="all records")
    got = run(read_partition(broker.bootstrap, topic_name, 0, len(values)))
    assert [r.value for r in got] == values


def test_idempotent_producer(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=3)
    n = 1500

    async def go():
        p = producer(broker.bootstrap, enable_idempotence=True, max_batch_size=1024, linger_ms=0)
        await p.start()
        try:
            futs = [await p.send(topic_name, value=b"%05d" % i, partition=i % 3) for i in range(n)]
            metas = await asyncio.gather(*futs)
        finally:
            await p.stop()
        return metas, {part: await read_partition(broker.bootstrap, topic_name, part, n // 3) for part in range(3)}

    metas, got = run(go())
    for part in range(3):
        assert [r.value for r in got[part]] == [b"%05d" % i for i in range(part, n, 3)]
        assert [m.offset for m in metas[part::3]] == list(range(n // 3))


def test_seek_end_offsets_and_offsets_for_times(broker, topic_name):
    create_topic(broker.bootstrap, topic_name)

    async def go():
        p = producer(broker.bootstrap)
        await p.start()
        c = consumer(broker.bootstrap)
        await c.start()
        tp = TopicPartition(topic_name, 0)
        try:
            for i in range(15):
                await p.send(topic_name, value=b"o%d" % i, partition=0, timestamp_ms=BASE_TS + 1000 * i)
            await p.flush()
            c.assign([tp])
            assert await c.beginning_offsets([tp]) == {tp: 0}
            assert await c.end_offsets([tp]) == {tp: 15}

            found = (await c.offsets_for_times({tp: BASE_TS + 4000}))[tp]
            assert (found.offset, found.timestamp) == (4, BASE_TS + 4000)
            found = (await c.offsets_for_times({tp: BASE_TS + 4500}))[tp]
            assert (found.offset, found.timestamp) == (5, BASE_TS + 5000)

            c.seek(tp, found.offset)
            assert [r.offset for r in await take(c, 10)] == list(range(5, 15))

            await c.seek_to_beginning(tp)
            assert await c.position(tp) == 0
            assert [r.value for r in await take(c, 15)] == [b"o%d" % i for i in range(15)]

            await c.seek_to_end(tp)
            assert await c.position(tp) == 15
            await (await p.send(topic_name, value=b"fresh", partition=0))
            (r,) = await take(c, 1)
            assert (r.offset, r.value) == (15, b"fresh")
            assert c.highwater(tp) == 16
            assert await c.end_offsets([tp]) == {tp: 16}
        finally:
            await c.stop()
            await p.stop()

    run(go())


def test_offsets_for_times_after_the_last_record(broker, topic_name):
    """Kafka answers offset -1 for a timestamp past every record; aiokafka maps it to None."""
    create_topic(broker.bootstrap, topic_name)

    async def go():
        p = producer(broker.bootstrap)
        await p.start()
        try:
            await (await p.send(topic_name, value=b"one", partition=0, timestamp_ms=BASE_TS))
        finally:
            await p.stop()
        c = consumer(broker.bootstrap)
        await c.start()
        try:
            tp = TopicPartition(topic_name, 0)
            return (await c.offsets_for_times({tp: BASE_TS + 1}))[tp]
        finally:
            await c.stop()

    assert run(go()) is None
