"""The ZooKeeper metadata store against a real ZooKeeper server: Kafka's paths and semantics."""

from __future__ import annotations

import json

import pytest

from samsa.cluster.metadata import BrokerInfo, PartitionState, TopicInfo, new_topic_id
from samsa.cluster.zookeeper import DuplicateBrokerIdError, ZooKeeperMetadataStore
from zookeeper_process import ZooKeeperProcess


@pytest.fixture(scope="module")
def zk(tmp_path_factory):
    server = ZooKeeperProcess(tmp_path_factory.mktemp("zk")).start()
    yield server
    server.stop()


def test_chroot_is_created_and_cluster_id_is_stable(zk):
    a = ZooKeeperMetadataStore(f"{zk.connect}/samsa-a")
    b = ZooKeeperMetadataStore(f"{zk.connect}/samsa-a")
    other = ZooKeeperMetadataStore(f"{zk.connect}/samsa-b")
    try:
        assert a.cluster_id == b.cluster_id != other.cluster_id
        assert a.zk.exists("/brokers/ids") and a.zk.exists("/config/topics")
    finally:
        for s in (a, b, other):
            s.close()


def test_broker_registration_is_ephemeral_and_unique(zk):
    a = ZooKeeperMetadataStore(f"{zk.connect}/reg")
    b = ZooKeeperMetadataStore(f"{zk.connect}/reg")
    try:
        a.register_broker(BrokerInfo(1, "127.0.0.1", 9093), ["PLAINTEXT://127.0.0.1:9093"])
        with pytest.raises(DuplicateBrokerIdError, match="broker.id=1"):
            b.register_broker(BrokerInfo(1, "127.0.0.1", 9094), ["PLAINTEXT://127.0.0.1:9094"])
        assert [x.id for x in b.brokers()] == [1]
        node = json.loads(b.zk.get("/brokers/ids/1")[0])
        assert node["endpoints"] == ["PLAINTEXT://127.0.0.1:9093"] and node["port"] == 9093
        a.close()  # session ends: the ephemeral node goes
        assert b.brokers() == []
    finally:
        b.close()


def test_topics_assignments_state_and_configs_round_trip(zk):
    s = ZooKeeperMetadataStore(f"{zk.connect}/topics")
    try:
        topic = TopicInfo("my-replicated-topic", new_topic_id(), {
            0: PartitionState(replicas=[1, 2, 0], leader=1, isr=[1, 2, 0]),
            1: PartitionState(replicas=[2, 0, 1], leader=2, isr=[2, 0, 1]),
        }, {"retention.ms": "1000"})
        s.put_topic(topic)
        back = s.topics()["my-replicated-topic"]
        assert back.topic_id == topic.topic_id and back.configs == {"retention.ms": "1000"}
        assert back.partitions[1].replicas == [2, 0, 1] and back.partitions[1].leader == 2
        assignment = json.loads(s.zk.get("/brokers/topics/my-replicated-topic")[0])
        assert assignment["partitions"] == {"0": [1, 2, 0], "1": [2, 0, 1]}
        state = json.loads(s.zk.get("/brokers/topics/my-replicated-topic/partitions/0/state")[0])
        assert state["leader"] == 1 and state["isr"] == [1, 2, 0]
        s.delete_topic("my-replicated-topic")
        assert "my-replicated-topic" not in s.topics()
    finally:
        s.close()


def test_partition_state_updates_are_compare_and_set(zk):
    s = ZooKeeperMetadataStore(f"{zk.connect}/cas")
    try:
        s.put_topic(TopicInfo("t", new_topic_id(), {0: PartitionState(replicas=[0, 1], leader=0, isr=[0, 1])}))
        first = s.partition_state("t", 0)
        second = s.partition_state("t", 0)
        first.isr, first.leader_epoch = [0], 1
        assert s.update_partition_state("t", 0, first)
        second.isr = [1]
        assert not s.update_partition_state("t", 0, second)  # stale version: refused
        assert s.partition_state("t", 0).isr == [0]
    finally:
        s.close()


def test_producer_id_blocks_do_not_overlap(zk):
    a = ZooKeeperMetadataStore(f"{zk.connect}/pids")
    b = ZooKeeperMetadataStore(f"{zk.connect}/pids")
    try:
        starts = [a.next_producer_id_block(1000), b.next_producer_id_block(1000), a.next_producer_id_block(1000)]
        assert starts == [0, 1000, 2000]
    finally:
        a.close()
        b.close()


def test_controller_election_and_broker_configs(zk):
    a = ZooKeeperMetadataStore(f"{zk.connect}/ctl")
    b = ZooKeeperMetadataStore(f"{zk.connect}/ctl")
    try:
        assert a.try_become_controller(0) and not b.try_become_controller(1)
        assert b.controller_id() == 0
        a.close()
        assert b.controller_id() == -1 and b.try_become_controller(1)
        b.put_broker_configs(None, {"log.retention.ms": "5"})
        b.put_broker_configs(1, {"log.retention.ms": "6"})
        assert b.broker_configs(None) == {"log.retention.ms": "5"} and b.broker_configs(1) == {"log.retention.ms": "6"}
    finally:
        b.close()
