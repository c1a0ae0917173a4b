"""Fetching from followers (KIP-392) on a three-broker ZooKeeper cluster with a rack per broker
and ``replica.selector.class=RackAwareReplicaSelector``: consumers with ``client.rack`` set to a
follower's rack (confluent-kafka and Samsa's) read their records from that follower — its
/metrics count the bytes sent to consumers, the leader's none — and go back to the leader
when that follower is SIGKILLed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import TopicPartition as CKTP

from broker_process import free_port
from cluster_harness import Cluster

from samsa import Consumer, Producer, TopicPartition
from samsa.client.types import NewTopic
from waiting import wait_until

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "metrics"))
from scrape import scrape  # noqa: E402

pytestmark = pytest.mark.timeout(300)
TOPIC = "nearby"
N = 50


def bytes_out(url: str, topic: str) -> float:
    """BytesOut (records sent to consumers) of ``topic`` on one broker; 0 before any."""
    return sum(v for labels, v in scrape(url).get("kafka_server_brokertopicmetrics_bytesout_total", [])
               if labels.get("topic") == topic)


def consumer_fetches(url: str) -> float:
    return sum(v for labels, v in scrape(url).get("kafka_network_requestmetrics_requests_total", [])
               if labels.get("request") == "FetchConsumer")


def produce(bootstrap: str, first: int, n: int) -> None:
    with Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5}) as p:
        for i in range(first, first + n):
            p.send(TOPIC, b"r-%d" % i, partition=0)
        p.flush()


def test_consumers_read_from_the_follower_of_their_rack_then_the_leader(tmp_path):
    cluster = Cluster(tmp_path, **{"replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector"})
    urls = {}
    for i, b in cluster.brokers.items():
        port = free_port()
        b.overrides["prometheus.listener"] = f"http://127.0.0.1:{port}"
        b.overrides["broker.rack"] = f"rack-{i}"
        urls[i] = f"http://127.0.0.1:{port}/metrics"
    ck = None
    mine = None
    try:
        cluster.start()
        with cluster.admin() as admin:
            admin.create_topics([NewTopic(TOPIC, 1, 3)])
        leader, replicas, _ = wait_until(lambda: (p := cluster.partition(TOPIC, 0)) and len(p[2]) == 3 and p,
                                         "a full ISR")
        follower = next(r for r in replicas if r != leader)
        produce(cluster.bootstrap, 0, N)

        ck = CKConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": "nearby-ck", "client.rack": f"rack-{follower}",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
        ck.assign([CKTP(TOPIC, 0, 0)])
        mine = Consumer({"bootstrap.servers": cluster.bootstrap, "client.rack": f"rack-{follower}",
                         "auto.offset.reset": "earliest", "fetch.max.wait.ms": 100})
        mine.assign([TopicPartition(TOPIC, 0)])
        got_ck: list[bytes] = []
        got_mine: list[bytes] = []

        def read(want: int) -> bool:
            got_ck.extend(m.value() for m in ck.consume(1000, 0.1) if not m.error())  # all that has come
            got_mine.extend(r.value for r in mine.poll(0.1))
            return len(got_ck) >= want and len(got_mine) >= want

        wait_until(lambda: read(N), "both consumers read the first records", timeout=60)
        # read from the follower of their rack: the leader sent consumers no record bytes
        assert bytes_out(urls[follower], TOPIC) > 0 and consumer_fetches(urls[follower]) > 0
        assert bytes_out(urls[leader], TOPIC) == 0

        cluster.brokers[follower].kill()
        produce(cluster.bootstrap, N, N)  # acks=all: once the ISR has dropped the dead follower
        wait_until(lambda: read(2 * N), "both consumers read the later records from the leader", timeout=90)
        assert got_ck == [b"r-%d" % i for i in range(2 * N)]
        assert got_mine == [b"r-%d" % i for i in range(2 * N)]
        assert bytes_out(urls[leader], TOPIC) > 0
    finally:
        for c in (ck, mine):
            if c is not None:
                c.close()
        cluster.stop()
