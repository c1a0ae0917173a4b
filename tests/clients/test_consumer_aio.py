"""samsa.aio.AIOConsumer: the same consumer core on the caller's event loop."""

from __future__ import annotations

import asyncio
import time

import pytest
from confluent_kafka import Producer as CKProducer

import samsa.embedded
from samsa.aio import AIOConsumer
from samsa.client.consumer import IllegalStateError, OffsetAndMetadata, TopicPartition


@pytest.fixture(scope="module")
def broker():
    with samsa.embedded.Broker({"num.partitions": 2}) as b:
        yield b


def produce(bootstrap: str, topic: str, n: int, start: int = 0) -> None:
    p = CKProducer({"bootstrap.servers": bootstrap})
    for i in range(start, start + n):
        p.produce(topic, b"%d" % i, key=b"k", headers=[("h", b"v")])
    assert p.flush(30) == 0


def config(broker, **kw) -> dict:
    c = {"bootstrap.servers": broker.bootstrap_servers, "auto.offset.reset": "earliest", "heartbeat.interval.ms": 300}
    c.update(kw)
    return c


def test_start_getmany_getone_iterate_commit_stop(broker):
    produce(broker.bootstrap_servers, "aio", 100)

    async def main():
        events = []

        class Listener:
            async def on_partitions_assigned(self, partitions):  # coroutines are awaited
                await asyncio.sleep(0)
                events.append(("assigned", sorted(partitions)))

            def on_partitions_revoked(self, partitions):
                events.append(("revoked", sorted(partitions)))

        consumer = AIOConsumer(config(broker, **{"group.id": "aio-g", "enable.auto.commit": False}))
        await consumer.start()
        consumer.subscribe(["aio"], listener=Listener())
        first = await consumer.getone()
        got = [first]
        deadline = time.time() + 20
        while len(got) < 60 and time.time() < deadline:
            batches = await consumer.getmany(timeout_ms=200, max_records=10)
            for tp, records in batches.items():
                assert all((r.topic, r.partition) == (tp.topic, tp.partition) for r in records)
                assert len(records) <= 10
                got += records
        async for record in consumer:
            got.append(record)
            if len(got) >= 100:
                break
        assert sorted(int(r.value) for r in got) == list(range(100))
        await consumer.commit()
        committed = await consumer.committed([TopicPartition("aio", 0), TopicPartition("aio", 1)])
        assert sum(o.offset for o in committed.values()) == 100
        await consumer.stop()
        assert [e[0] for e in events] == ["revoked", "assigned", "revoked"]
        with pytest.raises(IllegalStateError):
            await consumer.getmany(timeout_ms=10)

    asyncio.run(main())


def test_topics_in_the_constructor_assign_seek_offsets(broker):
    produce(broker.bootstrap_servers, "aio2", 10)

    async def main():
        async with AIOConsumer(config(broker, **{"group.id": "aio2-g"}), "aio2") as c:
            got = []
            while len(got) < 10:
                got += await c.poll(1.0)
            assert c.subscription() == {"aio2"}
        async with AIOConsumer(config(broker, **{"group.id": "aio2-h"})) as c:
            tps = [TopicPartition("aio2", 0), TopicPartition("aio2", 1)]
            c.assign(tps)
            end = await c.end_offsets(tps)
            assert sum(end.values()) == 10 and await c.beginning_offsets(tps) == {tp: 0 for tp in tps}
            full = max(tps, key=lambda tp: end[tp])
            c.seek(full, end[full] - 1)
            c.pause(*[tp for tp in tps if tp != full])
            batches = await c.getmany(timeout_ms=5000)
            assert list(batches) == [full] and batches[full][0].offset == end[full] - 1
            assert await c.position(full) == end[full]
            await c.commit({full: OffsetAndMetadata(3, "meta")})
            assert (await c.committed(full))[full] == OffsetAndMetadata(3, "meta", None)
            task = c.commit_async({full: 4})
            await task
            assert (await c.committed(full))[full].offset == 4
            found = await c.offsets_for_times({full: 0})
            assert found[full].offset == 0

    asyncio.run(main())
