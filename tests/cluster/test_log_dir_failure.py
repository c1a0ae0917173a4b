"""Disks in a cluster (KIP-112, and log recovery): a leader's log directory fills up and its
partitions' leadership moves to another in-sync replica while the broker goes on leading the
partitions of its healthy directory; a follower whose segment tail was damaged at rest (cut
inside a batch, or a batch's bytes changed) truncates it at recovery and fetches it again from
the leader, ending byte-identical to it. A real ZooKeeper and three broker processes; the
broker's small directory is a tmpfs of fixed size the test mounts (as root) and unmounts.
"""

from __future__ import annotations

import os
import subprocess
import time

from confluent_kafka import Consumer, Producer, TopicPartition

from cluster_harness import Cluster
from samsa.client.types import NewTopic
from waiting import wait_until

VALUE = b"v" * 20000


def _read(bootstrap: str, topic: str, partition: int, count: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.time()}", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, partition, 0)])
    out: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(out) < count and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            out.append(m.value())
    c.close()
    return out


def _segment(cluster: Cluster, broker: int, topic: str, partition: int, root=None):
    d = (root or cluster.brokers[broker].data_dir / "logs") / f"{topic}-{partition}"
    return sorted(d.glob("*.log"))[-1]


def test_full_leader_dir_moves_leadership_and_a_damaged_follower_tail_is_fetched_again(tmp_path):
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(small)], check=True)
    cluster = Cluster(tmp_path / "c")
    try:
        x = 0
        # broker 0's first log dir is the small one: its first partition goes there, the next to the other
        cluster.brokers[x].overrides["log.dirs"] = f"{small},{cluster.brokers[x].data_dir / 'logs'}"
        cluster.start()
        with cluster.admin() as admin:
            admin.create_topics([NewTopic("disks", replica_assignment={0: [0, 1, 2], 1: [0, 2, 1]},
                                          config={"min.insync.replicas": "2"})])
        for p in (0, 1):
            wait_until(lambda p=p: len(cluster.partition("disks", p)[2]) == 3, f"disks-{p} in sync")
        assert (small / "disks-0").is_dir() and not (small / "disks-1").exists()

        st = os.statvfs(small)
        with open(small / "filler", "wb") as f:
            f.write(b"\0" * (st.f_bavail * st.f_frsize - 700_000))
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                             "message.timeout.ms": 60000})
        acked: dict[int, list[bytes]] = {0: [], 1: []}

        def dr(err, msg):
            if err is None:
                acked[msg.partition()].append(msg.value())
        for i in range(80):  # ~1.6 MB into partition 0: more than its directory has room for
            for p in (0, 1):
                producer.produce("disks", b"%04d" % i + VALUE, partition=p, on_delivery=dr)
            if i % 10 == 9:
                producer.flush(60)
        assert producer.flush(60) == 0
        assert len(acked[0]) == len(acked[1]) == 80  # the producer moved on to the new leader

        leader, _, isr = wait_until(lambda: (lambda s: s[0] != x and x not in s[2] and s)(
            cluster.partition("disks", 0)), "leadership of disks-0 moved off broker 0", 30)
        assert cluster.partition("disks", 1)[0] == x  # the healthy directory still leads
        log = cluster.brokers[x].log_text()
        assert f"Error while accessing log dir {small}" in log and "No space left on device" in log
        assert "Traceback" not in log
        assert _read(cluster.bootstrap, "disks", 0, 80) == acked[0]

        # a follower's tail damaged at rest: cut inside its last batch of disks-1, then a byte changed
        follower = 2
        b = cluster.brokers[follower]
        b.kill()
        seg = _segment(cluster, follower, "disks", 1)
        size = seg.stat().st_size
        os.truncate(seg, size - 5000)
        with open(seg, "r+b") as f:  # and the batch before it loses its CRC
            f.seek(size - 5000 - 20030)
            f.write(b"damaged")
        b.start()
        wait_until(lambda: len(cluster.partition("disks", 1)[2]) == 3, "the follower back in sync", 60)
        leader_log = _segment(cluster, x, "disks", 1)
        wait_until(lambda: _segment(cluster, follower, "disks", 1).read_bytes() == leader_log.read_bytes(),
                   "the follower's disks-1 byte-identical to the leader's", 30)
        assert "cut" in b.log_text() and "invalid data" in b.log_text()
        assert _read(cluster.bootstrap, "disks", 1, 80) == acked[1]
    finally:
        cluster.stop()
        subprocess.run(["umount", "-l", str(small)], check=False)
