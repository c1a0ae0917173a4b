"""MirrorMaker 2 (`samsa mirror-maker mm2.properties`) between real broker processes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from broker_process import BrokerProcess
from connect_helpers import MirrorMakerProcess
from waiting import wait_until

from samsa.client.admin import Admin
from samsa.client.consumer import Consumer
from samsa.client.producer import Producer
from samsa.client.types import ConfigResource, NewTopic, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cluster"))

COMMON = """\
replication.factor = 1
checkpoints.topic.replication.factor = 1
heartbeats.topic.replication.factor = 1
offset-syncs.topic.replication.factor = 1
offset.storage.partitions = 2
status.storage.partitions = 1
offset.flush.interval.ms = 1000
sync.topic.configs.enabled = true
emit.checkpoints.enabled = true
emit.checkpoints.interval.seconds = 1
sync.group.offsets.enabled = true
sync.group.offsets.interval.seconds = 1
refresh.topics.interval.seconds = 1
refresh.groups.interval.seconds = 1
emit.heartbeats.interval.seconds = 1
offset.lag.max = 0
session.timeout.ms = 6000
heartbeat.interval.ms = 1000
"""


@pytest.fixture
def brokers(tmp_path):
    a = BrokerProcess(tmp_path / "A").start()
    b = BrokerProcess(tmp_path / "B").start()
    yield a, b
    a.stop()
    b.stop()


def _topics(bootstrap: str) -> set[str]:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        return set(admin.list_topics())


def _read_all(bootstrap: str, topic: str, partitions: int, expected: int) -> list:
    with Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest", "enable.auto.commit": False}) as c:
        c.assign([TopicPartition(topic, p) for p in range(partitions)])
        out: list = []
        wait_until(lambda: out.extend(c.poll(0.3)) or len(out) >= expected, f"{expected} records of {topic}", 60)
        return out


def _produce(bootstrap: str, topic: str, records: list[tuple[int, bytes, bytes]]) -> None:
    with Producer({"bootstrap.servers": bootstrap, "acks": "all"}) as p:
        for partition, key, value in records:
            p.send(topic, value, key=key, partition=partition, timestamp=1_700_000_000_000 + int(key[1:]),
                   headers=[("h", key)])
        p.flush(30)


def test_mirror_topics_configs_partitions_and_group_offsets(brokers, tmp_path):
    a, b = brokers
    with Admin({"bootstrap.servers": a.bootstrap}) as admin:
        admin.create_topics([NewTopic("orders", 2, 1, config={"retention.ms": "123456789"})])
    _produce(a.bootstrap, "orders", [(i % 2, f"k{i}".encode(), f"v{i}".encode()) for i in range(100)])
    # a consumer group on A has processed 30 records of each partition
    with Consumer({"bootstrap.servers": a.bootstrap, "group.id": "g1", "auto.offset.reset": "earliest",
                   "enable.auto.commit": False}) as c:
        c.assign([TopicPartition("orders", 0), TopicPartition("orders", 1)])
        c.commit({TopicPartition("orders", 0): 30, TopicPartition("orders", 1): 30})

    mm = MirrorMakerProcess(tmp_path / "mm", f"clusters = A, B\nA.bootstrap.servers = {a.bootstrap}\n"
                                             f"B.bootstrap.servers = {b.bootstrap}\nA->B.enabled = true\n"
                                             f"A->B.topics = orders.*\n{COMMON}").start()
    try:
        mirrored = _read_all(b.bootstrap, "A.orders", 2, 100)
        originals = {(r.partition, r.key): r for r in _read_all(a.bootstrap, "orders", 2, 100)}
        assert len(mirrored) == 100
        for r in mirrored:
            o = originals[(r.partition, r.key)]
            assert (r.value, r.timestamp, tuple(r.headers), r.offset) == (o.value, o.timestamp, tuple(o.headers),
                                                                          o.offset)
        with Admin({"bootstrap.servers": b.bootstrap}) as admin:
            configs = admin.describe_configs([ConfigResource("topic", "A.orders")])
            assert next(iter(configs.values()))["retention.ms"].value == "123456789"
        assert "orders" not in _topics(b.bootstrap)

        # checkpoints and the group's offsets committed in B
        def synced() -> dict:
            with Admin({"bootstrap.servers": b.bootstrap}) as admin:
                got = admin.list_consumer_group_offsets("g1")
            return got if {tp.partition: om.offset for tp, om in got.items() if tp.topic == "A.orders"} == \
                {0: 30, 1: 30} else {}
        wait_until(synced, "group g1's offsets translated into B", 60)
        from samsa.connect.mirror.records import Checkpoint, Heartbeat
        checkpoints = [Checkpoint.parse(r.key, r.value) for r in _read_all(b.bootstrap, "A.checkpoints.internal",
                                                                           1, 2)]
        assert {(c.group, c.topic, c.partition, c.upstream_offset, c.downstream_offset) for c in checkpoints} >= \
            {("g1", "A.orders", 0, 30, 30), ("g1", "A.orders", 1, 30, 30)}
        beats = [Heartbeat.parse(r.key, r.value) for r in _read_all(b.bootstrap, "heartbeats", 1, 1)]
        assert (beats[0].source_alias, beats[0].target_alias) == ("A", "B")

        # the consumer fails over to B: it reads the 40 records after its checkpoint, none before
        with Consumer({"bootstrap.servers": b.bootstrap, "group.id": "g1", "auto.offset.reset": "earliest"}) as c:
            c.subscribe(["A.orders"])
            after: list = []
            wait_until(lambda: after.extend(c.poll(0.3)) or len(after) >= 40, "the records after the checkpoint")
        assert sorted(int(r.value[1:]) for r in after) == list(range(60, 100))  # offsets 30.. of each partition

        # a new partition and a new topic in A are mirrored
        with Admin({"bootstrap.servers": a.bootstrap}) as admin:
            admin.create_partitions({"orders": 3})
            admin.create_topics([NewTopic("orders-new", 1, 1)])
        _produce(a.bootstrap, "orders", [(2, b"k200", b"v200")])
        _produce(a.bootstrap, "orders-new", [(0, b"k300", b"v300")])
        assert [r.value for r in _read_all(b.bootstrap, "A.orders-new", 1, 1)] == [b"v300"]
        wait_until(lambda: b"v200" in [r.value for r in _read_all(b.bootstrap, "A.orders", 3, 101)],
                   "the record of the new partition", 60)
    finally:
        mm.stop()
    assert mm.proc.returncode == 0, mm.log_text()[-3000:]


def test_active_active_without_cycles(brokers, tmp_path):
    a, b = brokers
    _produce(a.bootstrap, "aa", [(0, f"k{i}".encode(), b"from A") for i in range(10)])
    _produce(b.bootstrap, "bb", [(0, f"k{i}".encode(), b"from B") for i in range(10)])
    mm = MirrorMakerProcess(tmp_path / "mm", f"clusters = A, B\nA.bootstrap.servers = {a.bootstrap}\n"
                                             f"B.bootstrap.servers = {b.bootstrap}\nA->B.enabled = true\n"
                                             f"B->A.enabled = true\n{COMMON}").start()
    try:
        assert len(_read_all(b.bootstrap, "A.aa", 1, 10)) == 10
        assert len(_read_all(a.bootstrap, "B.bb", 1, 10)) == 10
        # heartbeats go both ways, and the mirrored ones are not mirrored back
        _read_all(b.bootstrap, "A.heartbeats", 1, 3)
        _read_all(a.bootstrap, "B.heartbeats", 1, 3)
        _produce(a.bootstrap, "aa", [(0, b"k99", b"later")])
        wait_until(lambda: len(_read_all(b.bootstrap, "A.aa", 1, 11)) == 11, "a later record")
        for bootstrap in (a.bootstrap, b.bootstrap):
            cycles = [t for t in _topics(bootstrap) if t.startswith(("A.B.", "B.A.", "A.A.", "B.B."))]
            assert cycles == [], cycles
        assert len(_read_all(a.bootstrap, "aa", 1, 11)) == 11  # nothing came back into A's own topic
    finally:
        mm.stop()


def test_zookeeper_cluster_source_to_single_broker(tmp_path):
    from cluster_harness import Cluster
    source = Cluster(tmp_path / "cluster").start()
    target = BrokerProcess(tmp_path / "target").start()
    mm = None
    try:
        with source.admin() as admin:
            admin.create_topics([NewTopic("events", 3, 3)])
        _produce(source.bootstrap, "events", [(i % 3, f"k{i}".encode(), f"v{i}".encode()) for i in range(60)])
        mm = MirrorMakerProcess(tmp_path / "mm", f"clusters = primary, backup\nprimary.bootstrap.servers = "
                                                 f"{source.bootstrap}\nbackup.bootstrap.servers = {target.bootstrap}\n"
                                                 f"primary->backup.enabled = true\nprimary->backup.topics = events\n"
                                                 f"{COMMON}").start()
        got = _read_all(target.bootstrap, "primary.events", 3, 60)
        assert sorted(r.value for r in got) == sorted(f"v{i}".encode() for i in range(60))
    finally:
        if mm is not None:
            mm.stop()
        target.stop()
        source.stop()
        source.zk.stop()
