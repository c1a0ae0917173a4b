"""Samsa's ShareConsumer follows a leader change, on a three-broker ZooKeeper cluster: it reads
and accepts part of a topic, the partition's leader is SIGKILLed, and it goes on reading from
the new leader (its share session there, the share partition's state loaded from the share
coordinator): every record is delivered, and no record whose acceptance the old leader
confirmed is delivered again."""

from __future__ import annotations

import uuid

from samsa.client.share_consumer import ShareConsumer
from samsa.client.types import NewTopic
from waiting import wait_until


def test_share_consumer_follows_the_new_leader(cluster_factory):
    cluster = cluster_factory(**{"share.coordinator.state.topic.replication.factor": 3,
                                 "share.coordinator.state.topic.min.isr": 1})
    topic, group = f"share-failover-{uuid.uuid4().hex[:6]}", "share-failover-g"
    with cluster.admin() as admin:
        admin.create_topics([NewTopic(topic, 1, 3)])
        from samsa.client.types import AlterConfigOp, ConfigResource
        admin.incremental_alter_configs({ConfigResource("group", group): [
            AlterConfigOp("share.auto.offset.reset", "earliest", "set")]})
    wait_until(lambda: cluster.partition(topic, 0)[0] >= 0 and len(cluster.partition(topic, 0)[2]) == 3,
               "the partition led, its ISR full")
    from samsa import Producer
    values = [b"v%d" % i for i in range(100)]
    with Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"}) as p:
        for v in values[:50]:
            p.send(topic, v)
    consumer = ShareConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                              "share.acknowledgement.mode": "explicit"})
    consumer.subscribe([topic])
    try:
        before: list[bytes] = []

        def first_half() -> bool:
            for r in consumer.poll(0.5):
                consumer.acknowledge(r)
                before.append(r.value)
            return len(before) >= 50
        wait_until(first_half, "the first 50 records", 60)
        answers = consumer.commit_sync()
        assert answers and all(e is None for e in answers.values()), answers  # accepted, as the leader says
        leader = cluster.partition(topic, 0)[0]
        cluster.brokers[leader].kill()
        wait_until(lambda: cluster.partition(topic, 0)[0] not in (-1, leader), "a new leader", 60)
        with Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"}) as p:
            for v in values[50:]:
                p.send(topic, v)
        after: list[bytes] = []

        def second_half() -> bool:
            for r in consumer.poll(0.5):
                consumer.acknowledge(r)
                after.append(r.value)
            return set(after) >= set(values[50:])
        wait_until(second_half, "the other 50 records, from the new leader", 90)
        consumer.commit_sync()
    finally:
        consumer.close()
    assert sorted(before) == sorted(values[:50])
    assert not set(after) & set(before), "records accepted before the leader died came again"
