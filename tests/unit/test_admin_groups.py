"""The admin client's consumer-group calls against a Samsa broker, with groups formed by real
confluent-kafka consumers."""

from __future__ import annotations

import asyncio
import queue
import threading
import time

import kafka
import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTP

from samsa.client.admin import Admin, AsyncAdmin
from samsa.client.connection import KafkaTimeoutError
from samsa.client.types import (ConsumerGroupDescription, ConsumerGroupListing, NewTopic, Node, OffsetAndMetadata,
                                TopicPartition)
from samsa.embedded import Broker
from samsa.protocol import errors
from waiting import wait_until

WAIT = 60.0
TOPIC = "orders"  # 3 partitions, 10 records each
OTHER = "audit"  # 1 partition, 4 records


@pytest.fixture(scope="module")
def broker():
    with Broker({"group.min.session.timeout.ms": 1000}) as b:
        with Admin({"bootstrap.servers": b.bootstrap_servers}) as a:
            a.create_topics([NewTopic(TOPIC, 3, 1), NewTopic(OTHER, 1, 1)])
        p = Producer({"bootstrap.servers": b.bootstrap_servers})
        for i in range(30):
            p.produce(TOPIC, b"v%d" % i, partition=i % 3)
        for i in range(4):
            p.produce(OTHER, b"a%d" % i)
        assert p.flush(WAIT) == 0
        yield b


@pytest.fixture(scope="module")
def admin(broker):
    with Admin({"bootstrap.servers": broker.bootstrap_servers}) as a:
        yield a


class Member:
    """A confluent-kafka consumer of a group, polling in its own thread until closed.

    Everything else done with the consumer runs in that thread too (:meth:`call`):
    librdkafka's Python binding must not be used from two threads at once."""

    def __init__(self, broker, group: str, topics: list[str], client_id: str = "rdkafka", **conf):
        self.consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group,
                                  "client.id": client_id, "auto.offset.reset": "earliest",
                                  "enable.auto.commit": False, "session.timeout.ms": 6000,
                                  "heartbeat.interval.ms": 300, "log_level": 2, **conf})
        self.consumer.subscribe(topics)
        self.stop = threading.Event()
        self.calls: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            self.consumer.poll(0.05)
            while not self.calls.empty():
                fn, done = self.calls.get()
                try:
                    done.put((True, fn(self.consumer)))
                except Exception as e:  # handed to the caller
                    done.put((False, e))

    def call(self, fn):
        done: queue.Queue = queue.Queue()
        self.calls.put((fn, done))
        ok, value = done.get(timeout=WAIT)
        if not ok:
            raise value
        return value

    def close(self) -> None:
        self.stop.set()
        self.thread.join(WAIT)
        self.consumer.close()


def commit(broker, group: str, offsets: list[CTP]) -> None:
    """Commit as a client outside group management (a "simple" group)."""
    c = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group, "log_level": 2})
    try:
        c.commit(offsets=offsets, asynchronous=False)
    finally:
        c.close()


def stable(admin: Admin, group: str, members: int) -> ConsumerGroupDescription:
    """Wait until ``group`` is Stable with ``members`` members that all hold partitions."""
    def check():
        d = admin.describe_consumer_groups([group])[group]
        ok = d.state == "Stable" and len(d.members) == members and all(m.assignment for m in d.members)
        return d if ok else None
    return wait_until(check, f"group {group} stable with {members} members")


def test_list_groups_with_states_and_types(broker, admin):
    commit(broker, "simple-list", [CTP(TOPIC, 0, 3)])
    m = Member(broker, "active-list", [TOPIC])
    try:
        stable(admin, "active-list", 1)
        listed = {g.group_id: g for g in admin.list_consumer_groups()}
        assert listed["active-list"] == ConsumerGroupListing("active-list", False, "Stable", "classic")
        assert listed["simple-list"] == ConsumerGroupListing("simple-list", True, "Empty", "classic")
        assert [g.group_id for g in admin.list_consumer_groups()] == sorted(listed)
        only_stable = [g.group_id for g in admin.list_consumer_groups(["Stable"])]
        assert "active-list" in only_stable and "simple-list" not in only_stable
        only_empty = [g.group_id for g in admin.list_consumer_groups(["Empty"])]
        assert "simple-list" in only_empty and "active-list" not in only_empty
    finally:
        m.close()
    assert admin.list_consumer_groups(["Empty", "Stable"])  # the group is Empty now
    assert "active-list" in [g.group_id for g in admin.list_consumer_groups(["Empty"])]


def test_describe_active_group_two_members(broker, admin):
    a = Member(broker, "describe-2", [TOPIC], client_id="client-a")
    b = Member(broker, "describe-2", [TOPIC], client_id="client-b")
    try:
        d = stable(admin, "describe-2", 2)
        assert d.group_id == "describe-2" and not d.is_simple
        assert d.protocol_type == "consumer" and d.partition_assignor == "range"
        assert d.coordinator == Node(0, "127.0.0.1", broker.port)
        assert sorted(m.client_id for m in d.members) == ["client-a", "client-b"]
        for m in d.members:
            assert m.member_id.startswith(m.client_id + "-")
            assert m.host == "/127.0.0.1" and m.group_instance_id is None
        owned = [tp for m in d.members for tp in m.assignment]
        assert sorted(owned) == [TopicPartition(TOPIC, p) for p in range(3)]  # split, each once
        # What the members themselves were given is what the description shows.
        by_client = {m.client_id: sorted(m.assignment) for m in d.members}
        for member, name in ((a, "client-a"), (b, "client-b")):
            mine = wait_until(lambda: member.call(lambda c: c.assignment()), f"{name}'s assignment")
            assert sorted(TopicPartition(tp.topic, tp.partition) for tp in mine) == by_client[name]
    finally:
        a.close()
        b.close()
    d = admin.describe_consumer_groups(["describe-2"])["describe-2"]
    assert d.state == "Empty" and d.members == [] and d.partition_assignor == ""


def test_describe_static_member_and_unknown_group(broker, admin):
    m = Member(broker, "describe-static", [TOPIC, OTHER], **{"group.instance.id": "inst-1"})
    try:
        d = stable(admin, "describe-static", 1)
        assert d.members[0].group_instance_id == "inst-1"
        assert sorted(d.members[0].assignment) == sorted(
            [TopicPartition(OTHER, 0)] + [TopicPartition(TOPIC, p) for p in range(3)])
        both = admin.describe_consumer_groups(["describe-static", "no-such-group"])
        assert list(both) == ["describe-static", "no-such-group"]
        missing = both["no-such-group"]
        assert missing.state == "Dead" and missing.members == [] and missing.coordinator is not None
    finally:
        m.close()
    with pytest.raises(errors.InvalidGroupIdError):
        admin.describe_consumer_groups([""])


def test_committed_offsets_with_metadata_and_epoch(broker, admin):
    m = Member(broker, "offsets-1", [TOPIC])
    try:
        stable(admin, "offsets-1", 1)
        m.call(lambda c: c.commit(offsets=[CTP(TOPIC, 0, 4, metadata="first"), CTP(TOPIC, 2, 9)],
                                  asynchronous=False))
        offsets = admin.list_consumer_group_offsets("offsets-1")
        assert list(offsets) == [TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 2)]
        assert offsets[TopicPartition(TOPIC, 0)].offset == 4
        # confluent-kafka's Python binding sends the metadata string with its C terminator.
        assert offsets[TopicPartition(TOPIC, 0)].metadata.rstrip("\x00") == "first"
        assert offsets[TopicPartition(TOPIC, 2)].offset == 9
        # Only the partitions asked for; one without a committed offset is left out.
        some = admin.list_consumer_group_offsets("offsets-1", [TopicPartition(TOPIC, 2), TopicPartition(TOPIC, 1)])
        assert list(some) == [TopicPartition(TOPIC, 2)]
    finally:
        m.close()
    assert admin.list_consumer_group_offsets("no-offsets-group") == {}


def test_alter_offsets_only_while_inactive(broker, admin):
    m = Member(broker, "alter-1", [TOPIC])
    try:
        stable(admin, "alter-1", 1)
        with pytest.raises(errors.UnknownMemberIdError):
            admin.alter_consumer_group_offsets("alter-1", {TopicPartition(TOPIC, 0): 1})
    finally:
        m.close()
    admin.alter_consumer_group_offsets("alter-1", {
        TopicPartition(TOPIC, 0): 7,
        TopicPartition(TOPIC, 1): OffsetAndMetadata(3, "set by admin", 0),
    })
    offsets = admin.list_consumer_group_offsets("alter-1")
    assert offsets[TopicPartition(TOPIC, 0)] == OffsetAndMetadata(7, "", None)
    assert offsets[TopicPartition(TOPIC, 1)] == OffsetAndMetadata(3, "set by admin", 0)
    # A consumer of the group sees them, and reads on from there.
    c = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "alter-1", "log_level": 2,
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        # Offsets only: confluent-kafka reads a copied metadata string past its end (librdkafka
        # copies it without a NUL), so tp.metadata is now and then garbage; kafka-python shows it.
        seen = c.committed([CTP(TOPIC, 0), CTP(TOPIC, 1)], timeout=WAIT)
        assert [(tp.partition, tp.offset) for tp in seen] == [(0, 7), (1, 3)]
        c.assign([CTP(TOPIC, 0)])
        msg = wait_until(lambda: (lambda m: m if m is not None and not m.error() else None)(c.poll(0.2)),
                         "a record after the altered offset")
        assert msg.offset() == 7 and msg.value() == b"v21"  # record i goes to partition i % 3
    finally:
        c.close()
    kc = kafka.KafkaConsumer(bootstrap_servers=broker.bootstrap_servers, group_id="alter-1",
                             enable_auto_commit=False)
    try:
        seen = {p: kc.committed(kafka.TopicPartition(TOPIC, p), metadata=True) for p in (0, 1)}
        assert [(om.offset, om.metadata) for om in seen.values()] == [(7, ""), (3, "set by admin")]
    finally:
        kc.close()
    # A simple group (never joined) can be created this way too.
    admin.alter_consumer_group_offsets("alter-new", {TopicPartition(OTHER, 0): 2})
    assert admin.list_consumer_group_offsets("alter-new") == {TopicPartition(OTHER, 0): OffsetAndMetadata(2)}
    assert admin.describe_consumer_groups(["alter-new"])["alter-new"].is_simple
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        admin.alter_consumer_group_offsets("alter-new", {TopicPartition("no-such-topic", 0): 1})


def test_delete_offsets(broker, admin):
    m = Member(broker, "deloff-1", [TOPIC])
    try:
        stable(admin, "deloff-1", 1)
        m.call(lambda c: c.commit(offsets=[CTP(TOPIC, p, 5) for p in range(3)] + [CTP(OTHER, 0, 1)],
                                  asynchronous=False))
        # The members read TOPIC: its offsets stay; OTHER is not subscribed: its offset can go.
        result = admin.delete_consumer_group_offsets("deloff-1", [TopicPartition(TOPIC, 0), TopicPartition(OTHER, 0)])
        assert result[TopicPartition(OTHER, 0)] is None
        assert isinstance(result[TopicPartition(TOPIC, 0)], errors.KafkaError)
        assert result[TopicPartition(TOPIC, 0)].code == errors.E_GROUP_SUBSCRIBED_TO_TOPIC
        assert list(admin.list_consumer_group_offsets("deloff-1")) == [TopicPartition(TOPIC, p) for p in range(3)]
    finally:
        m.close()
    result = admin.delete_consumer_group_offsets("deloff-1", [TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 2)])
    assert result == {TopicPartition(TOPIC, 0): None, TopicPartition(TOPIC, 2): None}
    assert list(admin.list_consumer_group_offsets("deloff-1")) == [TopicPartition(TOPIC, 1)]
    with pytest.raises(errors.GroupIdNotFoundError):
        admin.delete_consumer_group_offsets("no-such-group", [TopicPartition(TOPIC, 0)])


def test_delete_groups(broker, admin):
    commit(broker, "del-a", [CTP(TOPIC, 0, 1)])
    commit(broker, "del-b", [CTP(TOPIC, 1, 2)])
    m = Member(broker, "del-active", [TOPIC])
    try:
        stable(admin, "del-active", 1)
        with pytest.raises(errors.NonEmptyGroupError):
            admin.delete_consumer_groups(["del-active"])
        # Several at once: all are tried, the first failure is raised.
        with pytest.raises(errors.NonEmptyGroupError):
            admin.delete_consumer_groups(["del-active", "del-a"])
        assert admin.describe_consumer_groups(["del-a"])["del-a"].state == "Dead"
        assert admin.describe_consumer_groups(["del-active"])["del-active"].state == "Stable"
    finally:
        m.close()
    admin.delete_consumer_groups(["del-active", "del-b"])
    described = admin.describe_consumer_groups(["del-active", "del-b"])
    assert {g: d.state for g, d in described.items()} == {"del-active": "Dead", "del-b": "Dead"}
    assert admin.list_consumer_group_offsets("del-b") == {}
    assert not {"del-a", "del-b", "del-active"} & {g.group_id for g in admin.list_consumer_groups()}
    with pytest.raises(errors.GroupIdNotFoundError):
        admin.delete_consumer_groups(["del-b"])


def test_async_admin_and_find_coordinator_before_v4(broker):
    """The asyncio client; and a broker without batched FindCoordinator (v4+) is asked per group."""
    async def main():
        async with AsyncAdmin({"bootstrap.servers": broker.bootstrap_servers}) as a:
            await a.alter_consumer_group_offsets("async-1", {TopicPartition(TOPIC, 0): 2})
            await a.alter_consumer_group_offsets("async-2", {TopicPartition(TOPIC, 0): 3})
            conn = await a.cluster.any()
            conn.api_versions[10] = (0, 3)  # as an older broker would say
            described = await a.describe_consumer_groups(["async-1", "async-2", "async-none"])
            assert [d.state for d in described.values()] == ["Empty", "Empty", "Dead"]
            assert (await a.list_consumer_group_offsets("async-2"))[TopicPartition(TOPIC, 0)].offset == 3
            return [g.group_id for g in await a.list_consumer_groups()]
    groups = asyncio.run(main())
    assert "async-1" in groups and "async-2" in groups


def test_unreachable_bootstrap_fails_in_bounded_time():
    started = time.monotonic()
    with Admin({"bootstrap.servers": "127.0.0.1:1", "request.timeout.ms": 500,
                "default.api.timeout.ms": 1000}) as a:
        with pytest.raises(KafkaTimeoutError, match="127.0.0.1:1"):
            a.list_consumer_groups()
        with pytest.raises(KafkaTimeoutError):
            a.describe_consumer_groups(["g"])
    assert time.monotonic() - started < 20
