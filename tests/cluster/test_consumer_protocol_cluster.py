"""The consumer group protocol (KIP-848) on a three-broker ZooKeeper cluster: the group
coordinator's broker is SIGKILLed under a working group of confluent-kafka consumers
(``group.protocol=consumer``); the coordinator moves with the ``__consumer_offsets``
partition's leadership, loads the group's records, and the group carries on with nothing read
again past an acknowledged commit and nothing lost."""

from __future__ import annotations

import sys
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "groups"))

from group_helpers import (KIP848, EventLog, Feeder, Member, check_group_delivery, committed,  # noqa: E402
                           merge, produce_ids, wait_consumed, wait_until)

from samsa.client.admin import Admin  # noqa: E402

SETTINGS = {"group.consumer.min.session.timeout.ms": 1000, "group.consumer.session.timeout.ms": 6000,
            "group.consumer.min.heartbeat.interval.ms": 100, "group.consumer.heartbeat.interval.ms": 300,
            "group.initial.rebalance.delay.ms": 0}


def test_group_carries_on_when_the_coordinator_is_killed(cluster_factory):
    cluster = cluster_factory(**SETTINGS)
    topic, group = "kip848-orders", "kip848-billing"
    a = AdminClient({"bootstrap.servers": cluster.bootstrap})
    a.create_topics([NewTopic(topic, 4, 3, config={"min.insync.replicas": "2"})])[topic].result(30)
    first = produce_ids(cluster.bootstrap, topic, range(4), 20)
    log = EventLog()
    members = [Member(cluster.bootstrap, group, [topic], log, f"m{i}", base=KIP848) for i in range(2)]
    feeder = None
    try:
        for m in members:
            m.start()
        wait_until(lambda: sum(len(m.assignment) for m in members) == 4 and all(m.assignment for m in members),
                   what="two members sharing four partitions")
        wait_consumed(log, first)
        with Admin({"bootstrap.servers": cluster.bootstrap}) as admin:
            before = admin.describe_consumer_groups([group])[group]
        assert before.type == "consumer" and before.coordinator is not None
        feeder = Feeder(cluster.bootstrap, topic, range(4))
        feeder.start()
        wait_until(lambda: len(log.of("commit")) >= 120, what="commits while records keep coming")
        cluster.brokers[before.coordinator.id].kill()
        survivors = ",".join(b.bootstrap for i, b in cluster.brokers.items() if i != before.coordinator.id)

        def moved():
            with Admin({"bootstrap.servers": survivors}) as admin:
                d = admin.describe_consumer_groups([group])[group]
            return d if d.coordinator is not None and d.coordinator.id != before.coordinator.id \
                and d.state == "Stable" and len(d.members) == 2 else None
        after = wait_until(moved, what="the group on its new coordinator, Stable with both members", timeout=60)
        assert {m.member_id for m in after.members} == {m.member_id for m in before.members}, \
            "the members kept their ids: the new coordinator loaded the group instead of starting it again"
        wait_until(lambda: len(log.of("commit")) >= 300, what="commits after the coordinator moved", timeout=60)
        rest = feeder.stop()
        feeder = None
        expected = merge(first, rest)
        wait_consumed(log, expected, timeout=60)
    finally:
        if feeder is not None:
            feeder.stop()
        for m in members:
            m.stop()
    check_group_delivery(log, expected, committed(survivors, group, topic, range(4)))
