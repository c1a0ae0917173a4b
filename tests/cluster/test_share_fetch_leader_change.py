"""Share partitions when their partition's leader dies, on a three-broker ZooKeeper cluster
(and a follower answering NOT_LEADER_OR_FOLLOWER with the leader and its endpoint): a
member acquires records at the leader and accepts some of them (written through the share
coordinator, on whichever broker leads the group's ``__share_group_state`` partition); the
leader is SIGKILLed; the new leader loads the share partition's state from the share
coordinator, so the accepted records are never delivered again and the records the old
leader had handed out are available again, delivered a second time."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "share"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "differential"))

import harness  # noqa: E402
from share_wire import ShareWire, ack, acquired, partition_of  # noqa: E402
from waiting import wait_until  # noqa: E402

from samsa.protocol import errors  # noqa: E402

ACCEPT = 1


def test_new_leader_loads_the_share_partition(cluster_factory):
    cluster = cluster_factory(**{"share.coordinator.state.topic.replication.factor": 3,
                                 "share.coordinator.state.topic.min.isr": 1})
    topic, group = "share-leader-change", "share-leader-change-g"
    with cluster.admin() as admin:
        from samsa.client.types import NewTopic
        admin.create_topics([NewTopic(topic, 1, 3)])
    wait_until(lambda: cluster.partition(topic, 0)[0] >= 0 and len(cluster.partition(topic, 0)[2]) == 3,
               "the partition led, its ISR full")
    leader = cluster.partition(topic, 0)[0]
    at_leader = ShareWire(cluster.brokers[leader].bootstrap, topic, group, create=False)
    m1, m2 = str(uuid.uuid4()), str(uuid.uuid4())
    try:
        # the share partition starts at the log end (share.auto.offset.reset=latest) once loaded:
        # open until it is (the share coordinator's state topic may still be coming up)
        wait_until(lambda: partition_of(at_leader.fetch(m1, at_leader.topics(), epoch=0))["error_code"] == 0,
                   "the share partition loaded at the leader", 60)
        at_leader.produce([b"r%d" % i for i in range(6)])
        assert acquired(at_leader.fetch(m1, max_wait_ms=5000)) == [(0, 5, 1)]
        done = at_leader.acknowledge(m1, [ack(0, 1, ACCEPT)])
        assert done["responses"][0]["partitions"][0]["error_code"] == 0, done
    finally:
        at_leader.close()
    # a follower answers NOT_LEADER_OR_FOLLOWER, naming the leader and its endpoint
    follower = next(i for i in cluster.brokers if i != leader)
    at_follower = ShareWire(cluster.brokers[follower].bootstrap, topic, group, create=False)
    try:
        r = at_follower.fetch(str(uuid.uuid4()), at_follower.topics(), epoch=0)
        p = partition_of(r)
        assert p["error_code"] == errors.E_NOT_LEADER_OR_FOLLOWER and p["current_leader"]["leader_id"] == leader, r
        assert [(e["node_id"], e["port"]) for e in r["node_endpoints"]] == \
            [(leader, int(cluster.brokers[leader].bootstrap.rsplit(":", 1)[1]))]
    finally:
        at_follower.close()
    cluster.brokers[leader].kill()
    new_leader = wait_until(lambda: (lp := cluster.partition(topic, 0)[0]) not in (-1, leader) and lp,
                            "a new leader", 60)
    at_new = ShareWire(cluster.brokers[new_leader].bootstrap, topic, group, create=False)
    try:
        def redelivered():
            r = at_new.fetch(m2, at_new.topics(), epoch=0, max_wait_ms=1000)
            got = acquired(r) if r["error_code"] == 0 else r
            return got if got == [(2, 5, 2)] else None  # retriable errors while the state moves
        assert wait_until(redelivered, "records 2-5 delivered again by the new leader, 0-1 never", 60)
        def stored_start():  # asked of each live broker: one of them is the share coordinator
            for i, b in cluster.brokers.items():
                if i == leader:
                    continue
                side = harness.Side("samsa", b.bootstrap)
                try:
                    return at_new.start_offset(side=side)
                except AssertionError:
                    continue
                finally:
                    side.close()
            return None
        assert wait_until(stored_start, "the share coordinator's stored start offset", 30) == 2
    finally:
        at_new.close()
