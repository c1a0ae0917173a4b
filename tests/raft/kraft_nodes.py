"""Samsa KRaft clusters of real processes for tests: combined nodes (``broker,controller``) or
controllers and brokers apart, formatted by ``samsa storage format``, on loopback ports; no
ZooKeeper, no JVM. Processes are stopped by their pid."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from broker_process import ROOT, ChildProcess, free_port, wait_for_port
from raft_processes import CLUSTER_ID, describe_quorum
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
                 controller_port: int | None, format_args: tuple[str, ...] = (), **extra: str):
        self.dir, self.node_id, self.roles = d, node_id, roles
        self.port, self.controller_port = broker_port, controller_port
        self.data_dir = d / "data"
        self.log_path = d / "node.log"
        self.conf = d / "server.properties"
        listeners = []
        if broker_port:
            listeners.append(f"PLAINTEXT://127.0.0.1:{broker_port}")
        if controller_port:
            listeners.append(f"CONTROLLER://127.0.0.1:{controller_port}")
        props = {"process.roles": roles, "node.id": str(node_id), "listeners": ",".join(listeners),
                 "controller.listener.names": "CONTROLLER",
                 "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                 "controller.quorum.voters": voters, "log.dirs": str(self.data_dir), **TEST_SETTINGS, **extra}
        if broker_port:
            props["advertised.listeners"] = f"PLAINTEXT://127.0.0.1:{broker_port}"
        d.mkdir(parents=True, exist_ok=True)
        self.conf.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        r = subprocess.run([*SAMSA, "storage", "format", "--ignore-formatted", "-t", CLUSTER_ID, "-c",
                            str(self.conf), *format_args], capture_output=True, text=True, cwd=ROOT, timeout=60)
        assert r.returncode == 0, r.stderr

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> "Node":
        self.proc = subprocess.Popen([*SAMSA, "server", "start", str(self.conf)], stdout=open(self.log_path, "ab"),
                                     stderr=subprocess.STDOUT, cwd=ROOT)
        return self

    def wait_serving(self, timeout: float = 60) -> None:
        wait_for_port(self.port or self.controller_port, self.proc, timeout=timeout)


class KRaftCluster:
    """``combined`` nodes that are voters and brokers, or ``controllers`` voters and ``brokers``
    broker-only nodes (ids 1.. for voters, 101.. for brokers)."""

    def __init__(self, root: Path, combined: int = 3, controllers: int = 0, brokers: int = 0,
                 format_args: tuple[str, ...] = (), **extra: str):
        voter_ids = list(range(1, (combined or controllers) + 1))
        cports = {i: free_port() for i in voter_ids}
        voters = ",".join(f"{i}@127.0.0.1:{cports[i]}" for i in voter_ids)
        self.nodes: dict[int, Node] = {}
        for i in voter_ids:
            roles = "broker,controller" if combined else "controller"
            self.nodes[i] = Node(root / f"node{i}", i, roles, voters, free_port() if combined else None, cports[i],
                                 format_args, **extra)
        for j in range(brokers):
            i = 101 + j
            self.nodes[i] = Node(root / f"node{i}", i, "broker", voters, free_port(), None, format_args, **extra)

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

    def quorum(self) -> dict | None:
        """The active controller's DescribeQuorum answer, or None."""
        for i, n in self.voters.items():
            if not n.alive:
                continue
            try:
                part = describe_quorum(n.controller_port)
            except Exception:
                continue
            if part["error_code"] == 0 and part["leader_id"] == i:
                return part
        return None
