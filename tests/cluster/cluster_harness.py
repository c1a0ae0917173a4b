"""A real ZooKeeper and real Samsa broker processes on loopback ports, for the fault tests."""

from __future__ import annotations

import json
from pathlib import Path

from kazoo.client import KazooClient

from broker_process import BrokerProcess
from zookeeper_process import ZooKeeperProcess

from samsa import Admin
from waiting import wait_until

SESSION_TIMEOUT_MS = 3000
CLUSTER_DEFAULTS = {
    "zookeeper.session.timeout.ms": SESSION_TIMEOUT_MS,
    "replica.lag.time.max.ms": 2000,
    "replica.fetch.wait.max.ms": 200,
    "replica.fetch.backoff.ms": 200,
    "offsets.topic.replication.factor": 3,
    "offsets.topic.num.partitions": 4,
    "default.replication.factor": 3,
    "controlled.shutdown.retry.backoff.ms": 200,
}


class Cluster:
    def __init__(self, root: Path, size: int = 3, zookeeper: ZooKeeperProcess | None = None,
                 client_config: dict | None = None, network=None, **overrides: object):
        """With ``network`` (a ``nemesis.Network`` with nodes "zk", "b0", "b1", ...), ZooKeeper
        and each broker run in their own network namespace, on their node's address."""
        self.root = Path(root)
        self.client_config = client_config or {}  # the harness's Admin: security.protocol, sasl.*, ssl.*
        self.network = network
        node = (lambda name: network[name]) if network is not None else (lambda name: None)
        self.zk = zookeeper or ZooKeeperProcess(self.root / "zk", netns=node("zk")).start()
        self.connect = f"{self.zk.connect}/samsa"
        settings = {**CLUSTER_DEFAULTS, **overrides}
        self.brokers = {i: BrokerProcess(self.root / f"broker-{i}", netns=node(f"b{i}"), **{
            **settings, "broker.id": i, "zookeeper.connect": self.connect}) for i in range(size)}

    def start(self) -> "Cluster":
        for b in self.brokers.values():
            b.start()
        wait_until(lambda: len(self.describe_cluster()) == len(self.brokers), "all brokers registered")
        return self

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def admin(self) -> Admin:
        return Admin({"bootstrap.servers": self.bootstrap, **self.client_config})

    def describe_cluster(self) -> list[int]:
        with self.admin() as admin:
            return sorted(n.id for n in admin.describe_cluster().brokers)

    def partition(self, topic: str, index: int):
        """(leader, replicas, isr) as a Metadata request to a live broker answers."""
        with self.admin() as admin:
            p = admin.describe_topics([topic])[topic].partitions[index]
            return p.leader, list(p.replicas), list(p.isr)

    def stop(self) -> None:
        for b in self.brokers.values():
            b.kill()
        self.zk.stop()

    def view(self) -> "ZooKeeperView":
        return ZooKeeperView(self)

    def zookeeper(self) -> KazooClient:
        """A started ZooKeeper client in the cluster's chroot (the caller stops and closes it)."""
        zk = KazooClient(hosts=self.connect)
        zk.start(timeout=30)
        return zk


def partition_states(zk: KazooClient, topic: str) -> dict[int, dict]:
    """Each partition's state as the controller wrote it in ZooKeeper (leader, leader_epoch, isr)."""
    base = f"/brokers/topics/{topic}/partitions"
    return {int(p): json.loads(zk.get(f"{base}/{p}/state")[0]) for p in zk.get_children(base)}


class ZooKeeperView:
    """What the checker's workload asks of a cluster (see ``checker.Workload``), as the ZooKeeper
    controller wrote it: the partition states and the registered brokers. A KRaft cluster has
    its own (``kraft_nodes.KRaftView``)."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.zk = cluster.zookeeper()

    def states(self, topics: list[str]) -> dict[str, dict]:
        """``topic-partition`` -> its state: at least ``leader`` and ``isr``."""
        return {f"{t}-{p}": s for t in topics for p, s in partition_states(self.zk, t).items()}

    def registered(self) -> set[int]:
        return {int(b) for b in self.zk.get_children("/brokers/ids")}

    def problems(self) -> list[str]:
        """What breaks a safety rule of the cluster's own metadata: nothing to compare here
        (ZooKeeper is one replicated store the checker does not look into)."""
        return []

    def close(self) -> None:
        self.zk.stop()
        self.zk.close()
