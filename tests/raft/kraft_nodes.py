"""Samsa KRaft clusters of real processes for tests: combined nodes (``broker,controller``) or
controllers and brokers apart, formatted by ``samsa storage format``, on loopback ports; no
ZooKeeper, no JVM. Processes are stopped by their pid.

With ``network`` (a ``nemesis.Network`` with a node ``n<id>`` per node) each node runs in its own
network namespace, listening on its node's address, for the network nemesis
(``tests/raft/test_kraft_nemesis.py``). :class:`KRaftView` is what the nemesis checker
(``tests/cluster/checker.py``) asks of the cluster: partition states, registered brokers, and
whether every node's metadata log is a prefix of one log."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections import Counter
from pathlib import Path

from broker_process import ROOT, ChildProcess, free_port, wait_for_port
from raft_processes import CLUSTER_ID, batches, describe_quorum
from samsa.client.connection import BrokerConnection
from samsa.protocol.api_keys import ApiKey
from samsa import Admin
from waiting import wait_until

SAMSA = [sys.executable, "-m", "samsa.cli.main"]
# Kafka's keys, shortened so that failures are seen within seconds in tests.
TEST_SETTINGS = {
    "broker.heartbeat.interval.ms": "500",
    "broker.session.timeout.ms": "3000",
    "replica.lag.time.max.ms": "2000",
    "replica.fetch.wait.max.ms": "200",
    "replica.fetch.backoff.ms": "200",
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "4",
    "transaction.state.log.num.partitions": "4",
    "default.replication.factor": "3",
    "group.initial.rebalance.delay.ms": "0",
    "controlled.shutdown.retry.backoff.ms": "200",
}


class Node(ChildProcess):
    """One KRaft node: ``roles`` broker, controller or both."""

    def __init__(self, d: Path, node_id: int, roles: str, voters: str, broker_port: int | None,
                 controller_port: int | None, format_args: tuple[str, ...] = (), netns=None, **extra: str):
        self.dir, self.node_id, self.roles = d, node_id, roles
        self.port, self.controller_port = broker_port, controller_port
        self.netns = netns  # a nemesis.Node, or None: loopback
        self.host = netns.host if netns is not None else "127.0.0.1"
        self.data_dir = d / "data"
        self.log_path = d / "node.log"
        self.conf = d / "server.properties"
        listeners = []
        if broker_port:
            listeners.append(f"PLAINTEXT://{self.host}:{broker_port}")
        if controller_port:
            listeners.append(f"CONTROLLER://{self.host}:{controller_port}")
        props = {"process.roles": roles, "node.id": str(node_id), "listeners": ",".join(listeners),
                 "controller.listener.names": "CONTROLLER",
                 "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                 "controller.quorum.voters": voters, "log.dirs": str(self.data_dir), **TEST_SETTINGS, **extra}
        if broker_port:
            props["advertised.listeners"] = f"PLAINTEXT://{self.host}:{broker_port}"
        d.mkdir(parents=True, exist_ok=True)
        self.conf.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        r = subprocess.run([*SAMSA, "storage", "format", "--ignore-formatted", "-t", CLUSTER_ID, "-c",
                            str(self.conf), *format_args], capture_output=True, text=True, cwd=ROOT, timeout=60)
        assert r.returncode == 0, r.stderr

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def log_dir(self) -> Path:
        """Where its partitions' directories are (``log.dirs``), ``__cluster_metadata-0`` too."""
        return self.data_dir

    @property
    def metadata_dir(self) -> Path:
        return self.data_dir / "__cluster_metadata-0"

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> "Node":
        prefix = self.netns.prefix() if self.netns is not None else []  # `ip netns exec` execs: the same pid
        self.proc = subprocess.Popen([*prefix, *SAMSA, "server", "start", str(self.conf)],
                                     stdout=open(self.log_path, "ab"), stderr=subprocess.STDOUT, cwd=ROOT)
        return self

    def wait_serving(self, timeout: float = 60) -> None:
        wait_for_port(self.port or self.controller_port, self.proc, timeout=timeout, host=self.host)


class KRaftCluster:
    """``combined`` nodes that are voters and brokers, or ``controllers`` voters and ``brokers``
    broker-only nodes (ids 1.. for voters, 101.. for brokers)."""

    def __init__(self, root: Path, combined: int = 3, controllers: int = 0, brokers: int = 0,
                 format_args: tuple[str, ...] = (), network=None, **extra: str):
        voter_ids = list(range(1, (combined or controllers) + 1))
        broker_ids = [101 + j for j in range(brokers)]
        netns = {i: network[f"n{i}"] if network is not None else None for i in voter_ids + broker_ids}
        host = {i: ns.host if ns is not None else "127.0.0.1" for i, ns in netns.items()}
        cports = {i: free_port() for i in voter_ids}
        voters = ",".join(f"{i}@{host[i]}:{cports[i]}" for i in voter_ids)
        self.network = network
        self.nodes: dict[int, Node] = {}
        for i in voter_ids:
            roles = "broker,controller" if combined else "controller"
            self.nodes[i] = Node(root / f"node{i}", i, roles, voters, free_port() if combined else None, cports[i],
                                 format_args, netns=netns[i], **extra)
        for i in broker_ids:
            self.nodes[i] = Node(root / f"node{i}", i, "broker", voters, free_port(), None, format_args,
                                 netns=netns[i], **extra)

    @staticmethod
    def node_names(combined: int = 3, controllers: int = 0, brokers: int = 0) -> list[str]:
        """The ``nemesis.Network`` node names a cluster of this shape runs in."""
        return [f"n{i}" for i in range(1, (combined or controllers) + 1)] + [f"n{101 + j}" for j in range(brokers)]

    @property
    def brokers(self) -> dict[int, Node]:
        return {i: n for i, n in self.nodes.items() if "broker" in n.roles}

    @property
    def voters(self) -> dict[int, Node]:
        return {i: n for i, n in self.nodes.items() if "controller" in n.roles}

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.brokers.values())

    def start(self) -> "KRaftCluster":
        for n in self.nodes.values():
            n.start()
        for n in self.nodes.values():
            n.wait_serving()
        wait_until(lambda: self.registered() == sorted(self.brokers), "every broker registered and unfenced", 60)
        return self

    def stop(self) -> None:
        for n in self.nodes.values():
            n.kill()

    def admin(self, bootstrap: str | None = None) -> Admin:
        return Admin({"bootstrap.servers": bootstrap or self.bootstrap})

    def live_bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.brokers.values() if n.alive)

    def registered(self) -> list[int]:
        """The unfenced brokers, as a live broker's DescribeCluster answers."""
        try:
            with self.admin(self.live_bootstrap()) as admin:
                return sorted(b.id for b in admin.describe_cluster().brokers)
        except Exception:
            return []

    def partitions(self, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
        """partition -> (leader, replicas, isr), as a live broker's Metadata answers."""
        with self.admin(self.live_bootstrap()) as admin:
            d = admin.describe_topics([topic])[topic]
            return {p.partition: (p.leader, list(p.replicas), list(p.isr)) for p in d.partitions}

    def quorum(self, among=None) -> dict | None:
        """The active controller's DescribeQuorum answer (of ``among``, else any voter), or None."""
        for i, n in self.voters.items():
            if not n.alive or (among is not None and i not in among):
                continue
            try:
                part = describe_quorum(n.controller_port, n.host, timeout_ms=2000)
            except Exception:
                continue
            if part["error_code"] == 0 and part["leader_id"] == i:
                return part
        return None

    def view(self) -> "KRaftView":
        return KRaftView(self)

    def metadata_log_problems(self, timeout: float = 60) -> list[str]:
        """"Every broker's applied metadata a prefix of the same log": below the quorum's high
        watermark every node's ``__cluster_metadata-0`` holds the same batches, and every node's
        log is a prefix of the active controller's. Waited for (a node may be catching up); what
        still differs after ``timeout`` seconds, or [] ."""
        problems: list[str] = []

        def consistent() -> bool:
            problems.clear()
            q = self.quorum()
            if q is None:
                problems.append("no active controller to compare the metadata logs with")
                return False
            leader, hw = q["leader_id"], q["high_watermark"]
            logs = {i: batches(n.metadata_dir) for i, n in self.nodes.items() if i != leader}
            logs[leader] = batches(self.nodes[leader].metadata_dir)  # read last: the longest
            problems.extend(metadata_log_differences(logs, leader, hw))
            return not problems
        try:
            wait_until(consistent, "every node's metadata log a prefix of the active controller's", timeout)
        except AssertionError:
            return list(problems)
        return []


def metadata_log_differences(logs: dict[int, list[tuple]], leader: int, high_watermark: int) -> list[str]:
    """What breaks "one log" among the nodes' metadata logs (``raft_processes.batches`` of each):
    the batches below ``high_watermark`` not the same on every node, or a node's log not a prefix
    of the ``leader``'s. Compared from the latest log start among them (a node lets its log go
    below a snapshot of its own, KIP-630)."""
    problems = []
    start = max((log[0][0] for log in logs.values() if log), default=0)
    logs = {i: [b for b in log if b[0] >= start] for i, log in logs.items()}
    committed = {i: [b for b in log if b[1] < high_watermark] for i, log in logs.items()}
    if len({tuple(c) for c in committed.values()}) != 1:
        problems.append(f"the committed metadata (below offset {high_watermark}) differs: " + ", ".join(
            f"node {i} {len(c)} batches to offset {c[-1][1] if c else -1}" for i, c in committed.items()))
    for i, log in logs.items():
        if log != logs[leader][:len(log)]:
            problems.append(f"node {i}'s metadata log ({len(log)} batches) is not a prefix of the active "
                            f"controller {leader}'s ({len(logs[leader])} batches)")
    return problems


def metadata(node: Node, topics: list[str], timeout_ms: int = 2000) -> dict:
    """A broker's Metadata answer (v12) for ``topics``."""
    async def ask() -> dict:
        conn = BrokerConnection(node.host, node.port, request_timeout_ms=timeout_ms, connect_timeout_ms=timeout_ms)
        await conn.connect()
        try:
            return await conn.request(ApiKey.METADATA, {
                "topics": [{"name": t} for t in topics], "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False}, 12)
        finally:
            conn.close()
    return asyncio.run(ask())


class KRaftView:
    """What ``checker.Workload`` asks of a cluster, from a KRaft cluster's brokers: each live broker
    that answers in time is asked for Metadata; a partition's state is the one most of them give
    among those of its highest leader epoch (a broker cut from the quorum answers an old one), and
    the registered brokers those every answer lists (a fenced broker is in no fresh answer)."""

    def __init__(self, cluster: KRaftCluster):
        self.cluster = cluster

    def _answers(self, topics: list[str]) -> list[dict]:
        out = []
        for n in self.cluster.brokers.values():
            if n.alive:
                try:
                    out.append(metadata(n, topics))
                except Exception:
                    pass
        if not out:
            raise RuntimeError("no broker answered Metadata")
        return out

    def states(self, topics: list[str]) -> dict[str, dict]:
        seen: dict[str, list[tuple]] = {}
        for answer in self._answers(topics):
            for t in answer["topics"]:
                if t["error_code"]:
                    continue
                for p in t["partitions"]:
                    seen.setdefault(f"{t['name']}-{p['partition_index']}", []).append(
                        (p["leader_epoch"], p["leader_id"], tuple(sorted(p["isr_nodes"]))))
        out = {}
        for tp, states in seen.items():
            top = max(e for e, _, _ in states)
            (epoch, leader, isr), _ = Counter(s for s in states if s[0] == top).most_common(1)[0]
            out[tp] = {"leader": leader, "leader_epoch": epoch, "isr": list(isr)}
        return out

    def registered(self) -> set[int]:
        answers = self._answers([])
        return set.intersection(*({b["node_id"] for b in a["brokers"]} for a in answers))

    def problems(self) -> list[str]:
        return self.cluster.metadata_log_problems()

    def close(self) -> None:
        pass
