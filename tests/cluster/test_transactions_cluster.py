"""Transactions on a three-broker ZooKeeper cluster: markers written at other brokers' leaders,
and the transaction coordinator's broker SIGKILLed between commit_transaction() calls —
nothing committed is lost, nothing aborted becomes visible; then Samsa's producer with
transactions version 2 (partitions added by their leaders at the coordinator's broker)."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from samsa.client.producer import Producer as SamsaProducer
from samsa.client.types import NewTopic
from samsa.client.types import TopicPartition as SamsaTopicPartition
from waiting import wait_until

pytestmark = pytest.mark.timeout(400)

TXN = {"transaction.state.log.replication.factor": 3, "transaction.state.log.min.isr": 2,
       "transaction.state.log.num.partitions": 4, "min.insync.replicas": 2}
PARTITIONS = 3


def read_committed(bootstrap: str, topic: str, expected: int, timeout: float = 90) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.time()}", "enable.auto.commit": False,
                  "isolation.level": "read_committed"})
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    out: list[bytes] = []
    deadline = time.time() + timeout
    while len(out) < expected and time.time() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            out.append(m.value())
    while (m := c.poll(1.0)) is not None:  # and nothing more
        if not m.error():
            out.append(m.value())
    c.close()
    return out


def coordinator_of(cluster, txn_id: str) -> int:
    with cluster.admin() as admin:
        return admin.describe_transactions([txn_id])[txn_id].coordinator_id


def test_coordinator_killed_between_commits(cluster_factory):
    cluster = cluster_factory(**TXN)
    with cluster.admin() as admin:
        admin.create_topics([NewTopic("payments", PARTITIONS, 3)])
    for p in range(PARTITIONS):
        wait_until(lambda p=p: len(cluster.partition("payments", p)[2]) == 3, f"payments-{p} in sync")
    txn_id = "payments-writer"
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": txn_id,
                         "transaction.timeout.ms": 60000, "message.timeout.ms": 60000})
    producer.init_transactions(60)
    committed: list[bytes] = []
    aborted: list[bytes] = []
    killed: list[int] = []
    for n in range(8):
        values = [b"t%d-r%d" % (n, i) for i in range(6)]
        producer.begin_transaction()
        for i, v in enumerate(values):
            producer.produce("payments", v, partition=i % PARTITIONS)
        if n % 4 == 3:
            producer.abort_transaction(60)
            aborted += values
        else:
            producer.commit_transaction(60)
            committed += values
        if n in (1, 4):  # SIGKILL the coordinator's broker between commits, then bring it back
            victim = wait_until(lambda: coordinator_of(cluster, txn_id), "the coordinator", 60)
            cluster.brokers[victim].kill()
            killed.append(victim)
            wait_until(lambda: coordinator_of(cluster, txn_id) != victim, "a new coordinator", 60)
            cluster.brokers[victim].start()
    # Samsa's producer on the same cluster uses transactions version 2: its Produce v12 and
    # TxnOffsetCommit v5 have the partitions' leaders add them at the coordinator, across
    # brokers (AddPartitionsToTxn v5 between brokers), and each EndTxn v5 bumps its epoch.
    samsa = SamsaProducer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "payments-v2"})
    try:
        samsa.init_transactions(60)
        assert samsa._core.txn.tv2
        v2: list[bytes] = []
        for n in range(4):
            samsa.begin_transaction()
            values = [b"v2-%d-%d" % (n, k) for k in range(PARTITIONS)]
            for k, v in enumerate(values):
                samsa.send("payments", v, partition=k)
            samsa.send_offsets_to_transaction({SamsaTopicPartition("payments", 0): n + 1}, "payments-v2-group", 60)
            samsa.commit_transaction(60)
            v2 += values
    finally:
        samsa.close()
    got = read_committed(cluster.bootstrap, "payments", len(committed) + len(v2))
    assert sorted(got) == sorted(committed + v2)
    assert not set(got) & set(aborted)
    assert killed
    try:
        producer.flush(10)
    except KafkaException:
        pass
