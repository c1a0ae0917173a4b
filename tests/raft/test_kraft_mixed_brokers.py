"""Samsa and Apache Kafka 4.4.0 brokers in one KRaft cluster (issue 34, item 7), both ways:

- an Apache Kafka 4.4.0 broker registers with a Samsa controller quorum and serves partitions
  beside a Samsa broker: each follows the other's partitions (Kafka's replica fetcher speaks
  Fetch v18 to Samsa), ISR changes go through Samsa's controller (AlterPartition), records
  produced through one are read through the other, and the Kafka broker SIGKILLed is fenced and
  its partitions move to the Samsa broker;
- a Samsa broker registers with Apache Kafka 4.4.0's controller and serves partitions beside a
  Kafka broker. Kafka's controller refuses a broker that does not support a finalized feature,
  so that cluster is formatted with the features Samsa has: ``share.version=1`` (4.4 finalizes
  2) and ``eligible.leader.replicas.version=0`` (Samsa has no ELR)."""

from __future__ import annotations

import os
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker_process import free_port
from kraft_nodes import CLUSTER_ID, TEST_SETTINGS, Node
from waiting import wait_until

if os.environ.get("SAMSA_DIFF_SIDE", "both") == "samsa":
    pytest.skip("SAMSA_DIFF_SIDE=samsa: Kafka's side is not run", allow_module_level=True)
import kafka_process  # noqa: E402

if not kafka_process.available():
    pytest.skip("java or Kafka 4.4.0's jars missing", allow_module_level=True)

QUIET = {"log_level": 0}
KAFKA_BROKER = {"process.roles": "broker", "offsets.topic.replication.factor": "2",
                "transaction.state.log.replication.factor": "2",
                "share.coordinator.state.topic.replication.factor": "2",
                **{k: v for k, v in TEST_SETTINGS.items() if k.startswith("broker.") or k.startswith("replica.")}}


def _kafka_broker(base, node_id: int, voters: str) -> kafka_process.KafkaProcess:
    kp = kafka_process.KafkaProcess(base, node_id=node_id, cluster_id=CLUSTER_ID, voters=voters, **KAFKA_BROKER)
    kp.props["listeners"] = f"PLAINTEXT://127.0.0.1:{kp.port}"
    return kp


def _brokers(bootstrap: str) -> list[int]:
    try:
        return sorted(AdminClient({"bootstrap.servers": bootstrap, **QUIET}).list_topics(timeout=5).brokers)
    except Exception:
        return []


def _partitions(bootstrap: str, topic: str) -> dict:
    md = AdminClient({"bootstrap.servers": bootstrap, **QUIET}).list_topics(topic, timeout=10)
    return {p.id: (p.leader, sorted(p.replicas), sorted(p.isrs)) for p in md.topics[topic].partitions.values()}


def _through_one_read_through_other(write: str, read: str, topic: str, n: int) -> None:
    p = Producer({"bootstrap.servers": write, "acks": "all", "enable.idempotence": True, **QUIET})
    for i in range(n):
        p.produce(topic, value=f"{topic}-{i}".encode(), partition=i % 4)
    assert p.flush(60) == 0
    c = Consumer({"bootstrap.servers": read, "group.id": f"{topic}-reader", "enable.auto.commit": False, **QUIET})
    c.assign([TopicPartition(topic, q, 0) for q in range(4)])
    got = set()
    deadline = time.monotonic() + 60
    while len(got) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.add(m.value())
    c.close()
    assert got == {f"{topic}-{i}".encode() for i in range(n)}


def test_a_kafka_broker_joins_a_samsa_quorum(tmp_path):
    cport = free_port()
    voters = f"1@127.0.0.1:{cport}"
    controller = Node(tmp_path / "controller", 1, "controller", voters, None, cport)
    samsa = Node(tmp_path / "samsa", 2, "broker", voters, free_port(), None)
    kafka = _kafka_broker(tmp_path / "kafka", 3, voters)
    try:
        controller.start()
        samsa.start()
        kafka.spawn()
        wait_until(lambda: _brokers(samsa.bootstrap) == [2, 3] and _brokers(kafka.bootstrap) == [2, 3],
                   "both brokers registered, as each of them says", 120)
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap, **QUIET})
        admin.create_topics([NewTopic("mixed", 4, 2)])["mixed"].result(30)
        wait_until(lambda: all(isr == [2, 3] for _, _, isr in _partitions(samsa.bootstrap, "mixed").values()),
                   "every partition with both brokers in sync", 60)
        parts = _partitions(kafka.bootstrap, "mixed")
        assert {leader for leader, _, _ in parts.values()} == {2, 3}
        assert parts == _partitions(samsa.bootstrap, "mixed")
        _through_one_read_through_other(kafka.bootstrap, samsa.bootstrap, "mixed", 200)
        # the Kafka broker dies: the Samsa controller fences it, the Samsa broker leads everything
        kafka.proc.kill()
        kafka.proc.wait(30)
        wait_until(lambda: _brokers(samsa.bootstrap) == [2], "the Kafka broker fenced", 60)
        wait_until(lambda: all(leader == 2 and isr == [2] for leader, _, isr in
                               _partitions(samsa.bootstrap, "mixed").values()), "the Samsa broker leading all", 60)
    finally:
        kafka.stop()
        samsa.stop(15)
        controller.stop(15)


def test_a_samsa_broker_joins_a_kafka_quorum(tmp_path):
    cport = free_port()
    voters = f"1@127.0.0.1:{cport}"
    controller = kafka_process.KafkaProcess(tmp_path / "controller", node_id=1, cluster_id=CLUSTER_ID, voters=voters,
                                            controller_port=cport)
    controller.props.update({"process.roles": "controller", "listeners": f"CONTROLLER://127.0.0.1:{cport}"})
    for key in ("advertised.listeners", "inter.broker.listener.name"):
        controller.props.pop(key, None)
    controller.format_args = ("--feature", "share.version=1", "--feature", "eligible.leader.replicas.version=0")
    kafka = _kafka_broker(tmp_path / "kafka", 3, voters)
    kafka.format_args = controller.format_args
    samsa = None
    try:
        controller.spawn()
        kafka.spawn()
        samsa = Node(tmp_path / "samsa", 2, "broker", voters, free_port(), None)
        samsa.start()
        wait_until(lambda: _brokers(samsa.bootstrap) == [2, 3] and _brokers(kafka.bootstrap) == [2, 3],
                   "both brokers registered, as each of them says", 120)
        admin = AdminClient({"bootstrap.servers": samsa.bootstrap, **QUIET})
        admin.create_topics([NewTopic("mixed2", 4, 2)])["mixed2"].result(30)
        wait_until(lambda: all(isr == [2, 3] for _, _, isr in _partitions(kafka.bootstrap, "mixed2").values()),
                   "every partition with both brokers in sync", 60)
        assert {leader for leader, _, _ in _partitions(samsa.bootstrap, "mixed2").values()} == {2, 3}
        _through_one_read_through_other(samsa.bootstrap, kafka.bootstrap, "mixed2", 200)
    finally:
        if samsa is not None:
            samsa.stop(15)
        kafka.stop()
        controller.stop()
