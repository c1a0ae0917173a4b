"""Faults around a cluster's life: shutdown without ZooKeeper, restarts, registration."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from broker_process import BrokerProcess
from cluster_harness import Cluster, partition_states
from waiting import wait_until
from zookeeper_process import ZooKeeperProcess


@pytest.mark.parametrize("zookeeper_fault", ["killed", "frozen"])
def test_sigterm_with_zookeeper_unreachable_still_shuts_down(tmp_path, zookeeper_fault):
    """ZooKeeper gone (killed, or frozen with its connections open): controlled shutdown cannot move leadership, so after its bounded retries the
    broker shuts down anyway (logs flushed, clean-shutdown marker written), well within a minute."""
    cluster = Cluster(tmp_path, size=1, **{"default.replication.factor": 1, "offsets.topic.replication.factor": 1}).start()
    b = cluster.brokers[0]
    try:
        p = Producer({"bootstrap.servers": b.bootstrap})
        for i in range(100):
            p.produce("before-zk-died", b"v%d" % i)
        assert p.flush(30) == 0
        if zookeeper_fault == "killed":
            cluster.zk.stop()
        else:
            os.killpg(cluster.zk.proc.pid, signal.SIGSTOP)
        b.proc.send_signal(signal.SIGTERM)
        try:
            b.proc.wait(60)
        except subprocess.TimeoutExpired:
            raise AssertionError("the broker did not shut down within 60 s of SIGTERM with ZooKeeper down")
        log = b.log_text()
        assert "shut down completed" in log
        assert (b.data_dir / "logs" / ".kafka_cleanshutdown").exists()
    finally:
        cluster.stop()


def test_broker_restarted_at_once_registers_at_once_as_a_new_life(tmp_path):
    """KIP-380: a broker SIGKILLed and started again at once does not wait for its old ZooKeeper
    session (30 s here) to expire; it replaces its old registration, and the controller, seeing a
    new broker epoch, handles it as gone and back: the partitions it led get a new leader epoch
    (a new leader from the ISR), and no acknowledged record is lost."""
    cluster = Cluster(tmp_path, **{"zookeeper.session.timeout.ms": 30000}).start()
    zk = cluster.zookeeper()
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("bounce", 3, 3)])["bounce"].result(30)
        wait_until(lambda: (lambda states: len(states) == 3 and all(len(s["isr"]) == 3 for s in states.values()))(
            partition_states(zk, "bounce")), what="three partitions with full ISRs")
        acked = _produce(cluster, [b"before-%d" % i for i in range(300)])
        before = partition_states(zk, "bounce")
        victim = before[0]["leader"]
        led = {p: s["leader_epoch"] for p, s in before.items() if s["leader"] == victim}
        broker = cluster.brokers[victim]
        broker.kill()
        broker.start()
        assert f"replacing the registration of broker {victim}'s previous life" in broker.log_text()

        def re_elected():
            now = partition_states(zk, "bounce")
            return all(now[p]["leader_epoch"] > epoch and now[p]["leader"] != -1 for p, epoch in led.items())
        wait_until(re_elected, what="new leader epochs for the partitions the bounced broker led")
        acked += _produce(cluster, [b"after-%d" % i for i in range(300)])
        assert sorted(_consume_all(cluster, len(acked))) == sorted(acked)
    finally:
        zk.stop()
        zk.close()
        cluster.stop()


def _produce(cluster: Cluster, values: list[bytes]) -> list[bytes]:
    acked: list[bytes] = []
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True})
    for v in values:
        p.produce("bounce", v, on_delivery=lambda err, msg: err is None and acked.append(msg.value()))
    assert p.flush(60) == 0
    assert len(acked) == len(values)
    return acked


def _consume_all(cluster: Cluster, count: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "bounce-check",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe(["bounce"])
    got: list[bytes] = []
    try:
        def read() -> bool:  # all that has come (one record a call, with wait_until's pause, took 30 s)
            got.extend(m.value() for m in c.consume(1000, 0.5) if not m.error())
            return len(got) >= count
        wait_until(read, what=f"{count} records read back", timeout=90)
    finally:
        c.close()
    return got


def test_broker_serves_only_once_registered(tmp_path):
    """A broker whose id is still registered by another live session (other endpoints) waits for
    that registration to go before it registers, and meanwhile answers no client: no Metadata
    with zero brokers and no leaders. It serves as soon as it is registered."""
    zk = ZooKeeperProcess(tmp_path / "zk").start()
    holder = KazooClient(hosts=zk.connect, timeout=30)
    holder.start(timeout=30)
    try:
        holder.ensure_path("/samsa/brokers/ids")
        holder.create("/samsa/brokers/ids/5", json.dumps(
            {"endpoints": ["PLAINTEXT://127.0.0.1:1"], "host": "127.0.0.1", "port": 1}).encode(), ephemeral=True)
        b = BrokerProcess(tmp_path / "b", **{"broker.id": 5, "zookeeper.connect": f"{zk.connect}/samsa",
                                             "zookeeper.session.timeout.ms": 30000,
                                             "offsets.topic.replication.factor": 1})
        starting = threading.Thread(target=b.start, daemon=True)
        starting.start()
        wait_until(lambda: "registered" not in b.log_text() and "loaded" in b.log_text(),
                   what="the broker loaded, waiting to register")
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", b.port), timeout=2).close()
        holder.stop()  # the other registration goes with its session
        starting.join(60)
        wait_until(lambda: "registered broker 5" in b.log_text(), what="the broker registered")
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        md = admin.list_topics(timeout=30)
        assert list(md.brokers) == [5] and md.controller_id == 5
        b.stop()
    finally:
        holder.stop()
        holder.close()
        zk.stop()
