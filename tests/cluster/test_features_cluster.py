"""A ZooKeeper cluster of three Samsa brokers with Apache Kafka 4.4.0's tools: ``kafka-features``
changes ``transaction.version`` through one broker and every broker reports it (ZooKeeper's
/feature, as Kafka's ZooKeeper mode kept it), also one restarted; ``kafka-topics --describe``
reads partitions through DescribeTopicPartitions (Kafka 4's Elr and LastKnownElr columns) and
finds the under-replicated and unavailable ones after a broker is killed."""

from __future__ import annotations

from cli_tools import samsa
from test_failover import create
from kafka_tools import finalized_features as finalized
from kafka_tools import kafka_tool, kafka_tools
from waiting import wait_until


def features_tool(bootstrap: str, *args: str) -> tuple[int, list[str]]:
    return kafka_tool("kafka-features", bootstrap, *args)


def _topics_tool(bootstrap: str, *args: str) -> tuple[int, list[str]]:
    return kafka_tool("kafka-topics", bootstrap, *args)


def test_features_and_describe_topic_partitions_on_a_zookeeper_cluster(cluster_factory):
    kafka_tools()
    cluster = cluster_factory()
    b0, b1, b2 = (cluster.brokers[i] for i in range(3))
    before = {b.bootstrap: finalized(b.bootstrap) for b in (b0, b1, b2)}
    assert len(set(map(repr, before.values()))) == 1  # one /feature for the cluster
    levels, epoch = before[b0.bootstrap]
    assert levels["transaction.version"] == 2

    assert features_tool(b0.bootstrap, "downgrade", "--feature", "transaction.version=1") == (
        0, ["transaction.version was downgraded to 1."])
    held = ({**levels, "transaction.version": 1}, epoch + 1)
    for b in (b1, b2):  # the others learn it from ZooKeeper's watch
        wait_until(lambda b=b: finalized(b.bootstrap) == held, f"broker at {b.bootstrap} sees transaction.version 1")
    assert finalized(b0.bootstrap) == held

    create(cluster, "feat-rf3", 2, 3)
    r = samsa("topics", "--bootstrap-server", cluster.bootstrap, "--create", "--topic", "feat-on-2",
              "--replica-assignment", "2")
    assert r.returncode == 0, r.stderr
    wait_until(lambda: cluster.partition("feat-on-2", 0)[0] == 2, "feat-on-2 led by broker 2")
    rc, lines = _topics_tool(b0.bootstrap, "--describe", "--topic", "feat-rf3")
    assert rc == 0 and len(lines) == 3, lines
    assert all(line.endswith("\tElr: \tLastKnownElr:") for line in lines[1:]), lines  # DescribeTopicPartitions

    b2.kill()
    wait_until(lambda: 2 not in cluster.partition("feat-rf3", 0)[2] and 2 not in cluster.partition("feat-rf3", 1)[2],
               "broker 2 out of feat-rf3's ISR", 30)
    rc, under = _topics_tool(b0.bootstrap, "--describe", "--under-replicated-partitions")
    assert rc == 0
    rows = [ln for ln in under if "Topic: feat-rf3" in ln]
    assert len(rows) == 2 and all("\tReplicas: " in ln and "\tElr: \tLastKnownElr:" in ln for ln in rows), under
    rc, unavailable = _topics_tool(b0.bootstrap, "--describe", "--unavailable-partitions")
    assert rc == 0
    assert [ln for ln in unavailable if "feat-" in ln] == [
        "\tTopic: feat-on-2\tPartition: 0\tLeader: none\tReplicas: 2\tIsr: 2\tElr: \tLastKnownElr:"], unavailable

    b2.start()  # a broker starting reads the cluster's levels from ZooKeeper
    assert finalized(b2.bootstrap) == held
    assert features_tool(b2.bootstrap, "upgrade", "--feature", "transaction.version=2") == (
        0, ["transaction.version was upgraded to 2."])
    for b in (b0, b1):
        wait_until(lambda b=b: finalized(b.bootstrap)[0]["transaction.version"] == 2,
                   f"broker at {b.bootstrap} sees transaction.version 2")
