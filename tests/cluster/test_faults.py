"""Faults around a cluster's life: shutdown without ZooKeeper, restarts, registration."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest
from confluent_kafka import Producer

from cluster_harness import Cluster


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
