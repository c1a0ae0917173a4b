"""Samsa's Consumer (blocking and aio) with ``group.protocol=consumer`` (KIP-848), against a
broker over TCP: the broker assigns, members reconcile revoke-first, commits carry the member
epoch, and Samsa's and confluent-kafka's consumers share one group."""

from __future__ import annotations

import asyncio
import time

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import Producer as CKProducer

import samsa.embedded
from samsa.aio import AIOConsumer
from samsa.client.admin import Admin
from samsa.client.config import ConfigError
from samsa.client.consumer import Consumer, ConsumerRebalanceListener
from samsa.client.types import NewTopic, TopicPartition

BROKER = {"num.partitions": 6, "group.consumer.min.session.timeout.ms": 1000,
          "group.consumer.session.timeout.ms": 6000, "group.consumer.min.heartbeat.interval.ms": 100,
          "group.consumer.heartbeat.interval.ms": 200}


@pytest.fixture(scope="module")
def broker():
    with samsa.embedded.Broker(BROKER) as b:
        yield b


def make_topic(broker, name: str, partitions: int = 6, records: int = 60) -> None:
    with Admin({"bootstrap.servers": broker.bootstrap_servers}) as a:
        a.create_topics([NewTopic(name, partitions, 1)])
    p = CKProducer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 2})
    for i in range(records):
        p.produce(name, b"%d" % i, partition=i % partitions)
    assert p.flush(30) == 0


def member(broker, group: str, **kw) -> Consumer:
    return Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group, "group.protocol": "consumer",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False,
                     **{k.replace("_", "."): v for k, v in kw.items()}})


class Recorder(ConsumerRebalanceListener):
    def __init__(self, name: str, log: list):
        self.name, self.log = name, log

    def on_partitions_assigned(self, partitions):
        self.log.append((self.name, "assigned", sorted(partitions)))

    def on_partitions_revoked(self, partitions):
        self.log.append((self.name, "revoked", sorted(partitions)))


def pump(consumers: dict, got: dict, until, timeout: float = 30) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        for name, c in consumers.items():
            got.setdefault(name, []).extend(c.poll(0.05))
        if until():
            return
    raise AssertionError({n: sorted(map(str, c.assignment())) for n, c in consumers.items()})


def test_two_members_then_one_leaves(broker):
    topic, group = "kip848-samsa-a", "kip848-samsa-ga"
    make_topic(broker, topic)
    log: list = []
    # auto-commit: partitions are committed before they are revoked, so none is read twice
    a = member(broker, group, client_id="a", enable_auto_commit=True)
    b = member(broker, group, client_id="b", enable_auto_commit=True)
    consumers = {"a": a, "b": b}
    got: dict = {}
    try:
        a.subscribe([topic], listener=Recorder("a", log))
        b.subscribe([topic], listener=Recorder("b", log))
        pump(consumers, got, lambda: len(a.assignment()) == 3 and len(b.assignment()) == 3)
        pump(consumers, got, lambda: sum(map(len, got.values())) >= 60)
        for c in consumers.values():
            c.commit()
        # handing over revoke-first: nobody was assigned a partition another one still held
        owner: dict = {}
        for name, what, tps in log:
            for tp in tps:
                if what == "assigned":
                    assert owner.get(tp) in (None, name), (tp, owner.get(tp), name)
                    owner[tp] = name
                elif owner.get(tp) == name:
                    del owner[tp]
        b.close()
        del consumers["b"]
        pump(consumers, got, lambda: len(a.assignment()) == 6)
        assert sorted(int(r.value) for rs in got.values() for r in rs) == list(range(60))
        committed = a.committed([TopicPartition(topic, p) for p in range(6)])
        assert {tp.partition: om.offset for tp, om in committed.items()} == {p: 10 for p in range(6)}
        assert a.group_metadata().generation_id > 0
    finally:
        for c in consumers.values():
            c.close()


def test_shared_with_confluent_kafka(broker):
    """One group, Samsa's consumer and librdkafka's, both on the consumer protocol."""
    topic, group = "kip848-samsa-b", "kip848-samsa-gb"
    make_topic(broker, topic, 4, 40)
    s = member(broker, group)
    ck = CKConsumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group, "group.protocol": "consumer",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False})
    values = []
    try:
        s.subscribe([topic])
        ck.subscribe([topic])
        deadline = time.time() + 60
        while time.time() < deadline and (len(values) < 40 or len(s.assignment()) != 2 or len(ck.assignment()) != 2):
            values += [int(r.value) for r in s.poll(0.05)]
            m = ck.poll(0.05)
            if m is not None and not m.error():
                values.append(int(m.value()))
        assert len(s.assignment()) == 2 and len(ck.assignment()) == 2, (s.assignment(), ck.assignment(), len(values))
        assert sorted(set(values)) == list(range(40))
    finally:
        s.close()
        ck.close()


def test_regex_subscription_is_resolved_by_the_broker(broker):
    group = "kip848-samsa-gc"
    make_topic(broker, "kip848-rx-1", 2, 4)
    c = member(broker, group, metadata_max_age_ms=200)
    try:
        c.subscribe(pattern="^kip848-rx-.*")
        got: dict = {}
        pump({"c": c}, got, lambda: len(got["c"]) >= 4)
        make_topic(broker, "kip848-rx-2", 1, 3)
        pump({"c": c}, got, lambda: len(got["c"]) >= 7)
        assert {r.topic for r in got["c"]} == {"kip848-rx-1", "kip848-rx-2"}
    finally:
        c.close()


def test_settings_the_broker_owns_are_refused():
    with pytest.raises(ConfigError, match="session.timeout.ms is not supported when group.protocol=consumer"):
        Consumer({"bootstrap.servers": "127.0.0.1:1", "group.id": "g", "group.protocol": "consumer",
                  "session.timeout.ms": 6000})


def test_aio_consumer(broker):
    topic, group = "kip848-samsa-d", "kip848-samsa-gd"
    make_topic(broker, topic, 2, 10)

    async def run():
        c = AIOConsumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group,
                         "group.protocol": "consumer", "auto.offset.reset": "earliest"})
        try:
            c.subscribe([topic])
            got = []
            deadline = time.time() + 30
            while len(got) < 10 and time.time() < deadline:
                got += await c.poll(0.1)
            await c.commit()
            return sorted(int(r.value) for r in got), await c.committed([TopicPartition(topic, 0)])
        finally:
            await c.close()
    values, committed = asyncio.run(run())
    assert values == list(range(10))
    assert committed[TopicPartition(topic, 0)].offset == 5
