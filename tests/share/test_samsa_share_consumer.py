"""Samsa's own ShareConsumer (blocking and asyncio) in share groups, against Apache Kafka
4.4.0 and against Samsa: the scenarios of test_share_consumers.py that are not repeats, and
Samsa's consumer and confluent-kafka's in one group together."""

from __future__ import annotations

import asyncio

from samsa.aio import AIOShareConsumer
from samsa.client.share_consumer import AcknowledgeType, IllegalStateError, ShareConsumer
from share_helpers import WAIT, confluent_share_consumer, share_out
from waiting import wait_until


def samsa_consumer(target, group: str, topic: str, **config) -> ShareConsumer:
    c = ShareConsumer({"bootstrap.servers": target.bootstrap, "group.id": group,
                       **{k.replace("_", "."): v for k, v in config.items()}})
    c.subscribe([topic])
    return c


def poll_until(consumer: ShareConsumer, until, on_record=None, timeout: float = WAIT) -> list[tuple[str, int]]:
    received: list[tuple[str, int]] = []

    def more() -> bool:
        for r in consumer.poll(0.5):
            received.append((r.value.decode(), r.delivery_count))
            if on_record is not None:
                on_record(r)
        return until(received)
    wait_until(more, "records", timeout)
    return received


def test_samsa_share_consumers_exactly_once_with_a_confluent_one(target):
    """Two Samsa consumers and one confluent-kafka consumer in one share group."""
    topic, group = target.names("mixed")
    target.create_topic(topic)
    target.group_config(group)
    samsas = [samsa_consumer(target, group, topic, max_poll_records=10) for _ in range(2)]
    confluent = confluent_share_consumer(target, group, topic, max_poll_records=10)
    values = [f"v{i}" for i in range(150)]
    got = share_out(target, group, topic,
                    [lambda c=c: [r.value.decode() for r in c.poll(0.2)] for c in samsas]
                    + [lambda: [m.value().decode() for m in confluent.poll(0.2) if not m.error()]],
                    [c.close for c in samsas] + [confluent.close], values)
    assert sorted(v for g in got for v in g) == sorted(values)
    assert all(got), [len(g) for g in got]


def test_samsa_explicit_acknowledgement(target):
    topic, group = target.names("samsa-ack")
    target.create_topic(topic)
    target.group_config(group, share_delivery_count_limit=2)
    target.produce(topic, ["accept", "release", "reject", "poison"])
    c = samsa_consumer(target, group, topic, share_acknowledgement_mode="explicit")
    answers: list = []
    c.set_acknowledgement_commit_callback(lambda offsets, error: answers.append((offsets, error)))

    def ack(r) -> None:
        v = r.value.decode()
        kind = {"accept": AcknowledgeType.ACCEPT, "reject": "REJECT", "poison": AcknowledgeType.RELEASE}.get(v)
        if v == "release":
            kind = AcknowledgeType.RELEASE if r.delivery_count == 1 else AcknowledgeType.ACCEPT
        c.acknowledge(r, kind)
    try:
        first = c.poll(WAIT)
        assert first
        try:
            c.poll(0)
        except IllegalStateError:
            pass  # explicit mode: the last batch must be acknowledged first
        else:
            raise AssertionError("poll() went on with records unacknowledged")
        for r in first:
            ack(r)
        got = [(r.value.decode(), r.delivery_count) for r in first]
        got += poll_until(c, lambda rs: ("release", 2) in got + rs and ("poison", 2) in got + rs, on_record=ack)
        answer = c.commit_sync()
        assert all(e is None for e in answer.values()), answer
        target.produce(topic, ["sentinel"])
        later = poll_until(c, lambda rs: ("sentinel", 1) in rs, on_record=lambda r: c.acknowledge(r))
        c.commit_sync()
    finally:
        c.close()
    assert sorted(got) == [("accept", 1), ("poison", 1), ("poison", 2), ("reject", 1), ("release", 1),
                           ("release", 2)]
    assert later == [("sentinel", 1)]  # rejected and over-the-limit records archived
    assert answers and all(error is None for _, error in answers)


def test_samsa_close_releases_at_once(target):
    """Records a closed consumer held without acknowledging (explicit mode) are released by its
    close(): with a lock of 60 s, the record comes back well before the lock could have expired.
    (Lock expiry itself: test_share_consumers.py.)"""
    topic, group = target.names("samsa-close")
    target.create_topic(topic)
    target.group_config(group, share_record_lock_duration_ms=60000)
    target.produce(topic, ["held"])
    holder = samsa_consumer(target, group, topic, share_acknowledgement_mode="explicit")
    held = poll_until(holder, lambda rs: ("held", 1) in rs)
    holder.close()
    taker = samsa_consumer(target, group, topic)
    try:
        taken = poll_until(taker, lambda rs: any(v == "held" for v, _ in rs), timeout=40)
    finally:
        taker.close()
    assert held == [("held", 1)] and taken == [("held", 2)]

    # A consumer that stops calling poll() for max.poll.interval.ms leaves the group: what it
    # held goes to the others, again well before its lock expires.
    target.produce(topic, ["idle"])
    idle = samsa_consumer(target, group, topic, share_acknowledgement_mode="explicit", max_poll_interval_ms=1000)
    taker = samsa_consumer(target, group, topic)
    try:
        assert poll_until(idle, lambda rs: ("idle", 1) in rs) == [("idle", 1)]
        taken = poll_until(taker, lambda rs: any(v == "idle" for v, _ in rs), timeout=40)
    finally:
        taker.close()
        idle.close()
    assert taken == [("idle", 2)]


def test_aio_share_consumer(target):
    topic, group = target.names("aio")
    target.create_topic(topic)
    target.group_config(group)
    values = [f"v{i}" for i in range(20)]
    target.produce(topic, values)

    async def run() -> list[str]:
        got: list[str] = []
        async with AIOShareConsumer({"bootstrap.servers": target.bootstrap, "group.id": group}, topic) as c:
            async for r in c:
                got.append(r.value.decode())
                if len(got) >= len(values):
                    break
            await c.commit_sync()
        return got
    assert sorted(asyncio.run(asyncio.wait_for(run(), WAIT))) == sorted(values)
