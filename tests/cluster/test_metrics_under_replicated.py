"""UnderReplicatedPartitions on a ZooKeeper cluster: 1 while a follower of an RF 3 topic is
dead (SIGKILL), 0 again once it is back in the ISR."""

from __future__ import annotations

import sys
from pathlib import Path

from broker_process import free_port
from cluster_harness import Cluster

from samsa.client.types import NewTopic
from waiting import wait_until

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "metrics"))
from scrape import scrape, value  # noqa: E402


def total(cluster: Cluster, urls: dict[int, str], name: str, alive: set[int]) -> float:
    return sum(value(scrape(urls[i]), name) for i in alive)


def test_under_replicated_follows_a_killed_follower(tmp_path):
    cluster = Cluster(tmp_path)
    urls = {}
    for i, b in cluster.brokers.items():
        port = free_port()
        b.overrides["prometheus.listener"] = f"http://127.0.0.1:{port}"
        urls[i] = f"http://127.0.0.1:{port}/metrics"
    try:
        cluster.start()
        with cluster.admin() as admin:
            admin.create_topics([NewTopic("replicated", 1, 3)])
        leader, replicas, isr = wait_until(lambda: (p := cluster.partition("replicated", 0)) and len(p[2]) == 3 and p,
                                           "a full ISR")
        alive = set(cluster.brokers)
        under = "kafka_server_replicamanager_underreplicatedpartitions"
        controllers = "kafka_controller_kafkacontroller_activecontrollercount"
        wait_until(lambda: total(cluster, urls, under, alive) == 0, "no under-replicated partition")
        wait_until(lambda: total(cluster, urls, controllers, alive) == 1, "one active controller")
        assert value(scrape(urls[leader]), "kafka_server_replicamanager_leadercount") == 1
        wait_until(lambda: value(scrape(urls[leader]), "kafka_network_requestmetrics_totaltimems_count",
                                 request="FetchFollower") >= 1, "followers' fetches answered")

        follower = next(r for r in replicas if r != leader)
        cluster.brokers[follower].kill()
        alive.discard(follower)
        wait_until(lambda: total(cluster, urls, under, alive) == 1, "one under-replicated partition", timeout=60)
        assert value(scrape(urls[leader]), under) == 1
        assert total(cluster, urls, "kafka_server_replicamanager_isrshrinks_total", alive) >= 1
        assert total(cluster, urls, "kafka_controller_kafkacontroller_offlinepartitionscount", alive) == 0

        cluster.brokers[follower].start()
        alive.add(follower)
        wait_until(lambda: total(cluster, urls, under, alive) == 0, "no under-replicated partition", timeout=90)
        assert total(cluster, urls, "kafka_server_replicamanager_isrexpands_total", alive) >= 1
        wait_until(lambda: total(cluster, urls, controllers, alive) == 1, "one active controller")
    finally:
        cluster.stop()
