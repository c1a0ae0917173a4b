"""The broker path end to end with confluent-kafka's ShareConsumer (librdkafka 2.15's share
consumer): three consumers of one share group on a one-partition topic together receive every
record exactly once when they accept them, and a released record comes back with delivery
count 2. (The group coordinator's ShareGroupHeartbeat assigns the partition; the share
partitions keep their state with the share coordinator.)"""

from __future__ import annotations

import os
import threading
import time

from confluent_kafka import Producer, ShareConsumer
from share_wire import set_group_configs

from samsa import Admin
from samsa.client.types import NewTopic

RECORDS = 300


def _consumer(bootstrap: str, group: str, topic: str, **extra) -> ShareConsumer:
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, **extra})
    c.subscribe([topic])
    return c


def test_three_share_consumers_get_every_record_exactly_once(share_broker):
    broker = share_broker
    bootstrap = broker.bootstrap_servers
    topic, group = f"share-e2e-{os.getpid()}", f"g-share-e2e-{os.getpid()}"
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic(topic, 1, 1)])
    set_group_configs(broker, group, {"share.auto.offset.reset": "earliest"})
    seen: list[list[bytes]] = [[], [], []]
    lock = threading.Lock()
    total = [0]
    stop = threading.Event()
    failures: list[BaseException] = []

    def work(n: int) -> None:
        c = _consumer(bootstrap, group, topic)
        try:
            deadline = time.monotonic() + 90
            while not stop.is_set() and time.monotonic() < deadline:
                for m in c.poll(0.5):
                    if m.error() is None:
                        seen[n].append(m.value())
                        with lock:
                            total[0] += 1
                            if total[0] >= RECORDS:
                                stop.set()
            c.commit_sync()  # the last poll's records accepted before leaving
        except BaseException as e:  # noqa: BLE001 - reported by the test
            failures.append(e)
        finally:
            c.close()
    threads = [threading.Thread(target=work, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    # the first records before the members have joined, the rest in rounds while they poll
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(RECORDS):
        p.produce(topic, b"r%d" % i)
        if i % 30 == 29:
            p.flush()
    p.flush()
    for t in threads:
        t.join(120)
    assert not failures, failures
    everything = [v for s in seen for v in s]
    print("records per consumer:", [len(s) for s in seen])
    assert sorted(everything) == sorted(b"r%d" % i for i in range(RECORDS)), (
        f"{len(everything)} records, {len(set(everything))} distinct, per consumer {[len(s) for s in seen]}")


def test_released_record_comes_back_with_delivery_count_two(share_broker):
    broker = share_broker
    bootstrap = broker.bootstrap_servers
    topic, group = f"share-e2e-release-{os.getpid()}", f"g-share-e2e-release-{os.getpid()}"
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic(topic, 1, 1)])
    set_group_configs(broker, group, {"share.auto.offset.reset": "earliest"})
    p = Producer({"bootstrap.servers": bootstrap})
    p.produce(topic, b"once")
    p.flush()
    from confluent_kafka import AcknowledgeType
    c = _consumer(bootstrap, group, topic, **{"share.acknowledgement.mode": "explicit"})
    try:
        got = []
        deadline = time.monotonic() + 60
        while len(got) < 2 and time.monotonic() < deadline:
            for m in c.poll(0.5):
                if m.error() is None:
                    got.append(m)
                    c.acknowledge(m, AcknowledgeType.RELEASE if len(got) == 1 else AcknowledgeType.ACCEPT)
            c.commit_sync()
        assert [m.value() for m in got] == [b"once", b"once"]
        assert [m.delivery_count() for m in got] == [1, 2]
    finally:
        c.close()


def test_read_committed_share_group_over_a_transactional_topic(share_broker):
    """share.isolation.level=read_committed: no aborted record reaches the consumer, and the
    share partition's start offset reaches the log end (the markers' offsets are settled too)."""
    from share_wire import ShareWire
    from waiting import wait_until
    broker = share_broker
    bootstrap = broker.bootstrap_servers
    topic, group = f"share-e2e-rc-{os.getpid()}", f"g-share-e2e-rc-{os.getpid()}"
    wire = ShareWire(bootstrap, topic, group)
    set_group_configs(broker, group, {"share.isolation.level": "read_committed", "share.auto.offset.reset": "earliest"})
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{topic}"})
    p.init_transactions()
    for r in range(5):
        p.begin_transaction()
        for i in range(3):
            p.produce(topic, b"committed-%d-%d" % (r, i))
        p.commit_transaction()
        p.begin_transaction()
        for i in range(2):
            p.produce(topic, b"aborted-%d-%d" % (r, i))
        p.flush()
        p.abort_transaction()
    end = 5 * (3 + 1 + 2 + 1)  # records and a marker per transaction
    c = _consumer(bootstrap, group, topic)
    got: list[bytes] = []
    try:
        def settled():
            got.extend(m.value() for m in c.poll(0.5) if m.error() is None)
            return len(got) >= 15 and wire.start_offset() == end
        wait_until(settled, "the committed records consumed and every offset settled", 60)
        assert sorted(got) == sorted(b"committed-%d-%d" % (r, i) for r in range(5) for i in range(3))
    finally:
        c.close()
        wire.close()
