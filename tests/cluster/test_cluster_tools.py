"""Cluster operations on real processes: duplicate ids, controlled shutdown, preferred leader
election, partition reassignment, and a three-node ZooKeeper ensemble losing a node."""

from __future__ import annotations

import json
import signal

from confluent_kafka import Producer

from broker_process import BrokerProcess
from cli_tools import one_error_line, samsa
from cluster_harness import CLUSTER_DEFAULTS, Cluster
from test_failover import create, read_all
from zookeeper_process import ZooKeeperEnsemble
from waiting import wait_until


def test_duplicate_broker_id_is_refused_at_start(cluster_factory, tmp_path):
    cluster = cluster_factory()
    twin = BrokerProcess(tmp_path / "twin", **{**CLUSTER_DEFAULTS, "broker.id": 1,
                                                "zookeeper.connect": cluster.connect})
    try:
        twin.start()
    except RuntimeError:
        pass
    assert twin.proc.wait(30) != 0
    assert "another broker is registered with broker.id=1" in twin.log_text()
    assert cluster.describe_cluster() == [0, 1, 2]


def test_controlled_shutdown_then_preferred_leader_election(cluster_factory, tmp_path):
    # A session timeout far longer than the wait below: only controlled shutdown can move the leader in time.
    cluster = cluster_factory(**{"zookeeper.session.timeout.ms": 60000})
    r = samsa("topics", "--bootstrap-server", cluster.bootstrap, "--create", "--topic", "pref",
              "--replica-assignment", "0:1:2")
    assert r.returncode == 0, r.stderr
    wait_until(lambda: cluster.partition("pref", 0) == (0, [0, 1, 2], [0, 1, 2]), "pref in sync")
    cluster.brokers[0].proc.send_signal(signal.SIGTERM)  # leadership moves before the process exits
    leader = wait_until(lambda: cluster.partition("pref", 0)[0] in (1, 2) and cluster.partition("pref", 0)[0],
                              "leadership moved", 20)
    assert cluster.brokers[0].proc.wait(30) == 0
    assert "controlled shutdown of broker 0" in cluster.brokers[0].log_text()
    cluster.brokers[0].start()
    wait_until(lambda: sorted(cluster.partition("pref", 0)[2]) == [0, 1, 2], "broker 0 back in sync")
    assert cluster.partition("pref", 0)[0] == leader
    r = samsa("leader-election", "--bootstrap-server", cluster.bootstrap, "--election-type", "preferred",
              "--topic", "pref", "--partition", "0")
    assert r.returncode == 0, r.stderr
    assert "Successfully completed leader election (PREFERRED) for partitions pref-0" in r.stdout
    wait_until(lambda: cluster.partition("pref", 0)[0] == 0, "the preferred leader back")
    r = samsa("leader-election", "--bootstrap-server", cluster.bootstrap, "--election-type", "preferred",
              "--topic", "pref", "--partition", "0")
    assert r.returncode == 0 and "Valid replica already elected for partitions pref-0" in r.stdout
    assert "One and only one" in one_error_line(samsa("leader-election", "--bootstrap-server", cluster.bootstrap,
                                                      "--election-type", "preferred"))


def test_auto_leader_rebalance_moves_leadership_back_to_the_preferred_replica(cluster_factory):
    cluster = cluster_factory(**{"leader.imbalance.check.interval.seconds": 1})
    create(cluster, "auto", 1, 3)
    preferred = cluster.partition("auto", 0)[1][0]
    cluster.brokers[preferred].stop()
    wait_until(lambda: cluster.partition("auto", 0)[0] not in (preferred, None), "leadership moved away")
    cluster.brokers[preferred].start()
    wait_until(lambda: cluster.partition("auto", 0)[0] == preferred, "the preferred replica leading again", 30)


def test_reassign_partitions_generate_execute_verify(cluster_factory, tmp_path):
    cluster = cluster_factory()
    r = samsa("topics", "--bootstrap-server", cluster.bootstrap, "--create", "--topic", "moving",
              "--replica-assignment", "0,0")
    assert r.returncode == 0, r.stderr
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(20):
        producer.produce("moving", f"m{i}".encode(), partition=i % 2)
    assert producer.flush(20) == 0
    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps({"topics": [{"topic": "moving"}], "version": 1}))
    r = samsa("reassign-partitions", "--bootstrap-server", cluster.bootstrap, "--generate",
              "--topics-to-move-json-file", str(topics), "--broker-list", "1,2")
    assert r.returncode == 0, r.stderr
    assert "Current partition replica assignment" in r.stdout and "Proposed partition reassignment" in r.stdout
    proposed = json.loads(r.stdout.strip().splitlines()[-1])
    assert {p["partition"]: p["replicas"] for p in proposed["partitions"]} == {0: [1], 1: [2]}
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "moving", "partition": 0, "replicas": [1, 2]},
        {"topic": "moving", "partition": 1, "replicas": [2, 1]}]}))
    r = samsa("reassign-partitions", "--bootstrap-server", cluster.bootstrap, "--execute",
              "--reassignment-json-file", str(plan))
    assert r.returncode == 0, r.stderr
    assert "Successfully started partition reassignments for moving-0,moving-1" in r.stdout

    def verified():
        v = samsa("reassign-partitions", "--bootstrap-server", cluster.bootstrap, "--verify",
                  "--reassignment-json-file", str(plan))
        return v.returncode == 0 and v.stdout
    out = wait_until(verified, "the reassignment to complete", 30)
    assert "Reassignment of partition moving-0 is completed." in out
    assert cluster.partition("moving", 0)[1] == [1, 2] and cluster.partition("moving", 1)[1] == [2, 1]
    got = read_all(cluster.bootstrap, "moving", 2, 20)
    assert sorted(v for vs in got.values() for _, v in vs) == sorted(f"m{i}".encode() for i in range(20))
    wait_until(lambda: not (cluster.brokers[0].data_dir / "logs" / "moving-0").exists(),
                     "the old replica deleted")


def test_three_node_zookeeper_ensemble_survives_losing_a_node(cluster_factory, tmp_path):
    ensemble = ZooKeeperEnsemble(tmp_path / "ensemble").start()
    try:
        cluster = Cluster(tmp_path / "on-ensemble", zookeeper=ensemble).start()
        try:
            create(cluster, "quorum", 1, 3)
            ensemble.nodes[0].stop()
            producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
            for i in range(50):
                producer.produce("quorum", f"q{i}".encode())
            assert producer.flush(30) == 0
            r = samsa("topics", "--bootstrap-server", cluster.bootstrap, "--create", "--topic", "after-loss",
                      "--partitions", "1", "--replication-factor", "3")
            assert r.returncode == 0, r.stderr
            assert len(read_all(cluster.bootstrap, "quorum", 1, 50)[0]) == 50
            assert cluster.describe_cluster() == [0, 1, 2]
        finally:
            cluster.stop()
    finally:
        ensemble.stop()
