"""Random faults under load on a three-broker ZooKeeper cluster, and what they cost.

A confluent-kafka producer (acks=all, idempotent) writes numbered records without pause while
brokers, the controller among them, are SIGKILLed and restarted at once or paused with SIGSTOP
for longer than the ZooKeeper session and then resumed. A monitor reads the partition states
from ZooKeeper every 100 ms. Afterwards: every acknowledged record read back by a fresh consumer
group (lost, duplicated), the replicas' logs compared below the high watermark, the longest
producer stall and the longest time a partition had no live leader while two ISR members were
alive. ``tests/cluster/test_chaos.py`` runs a bounded round; ``bench/chaos_bench.py`` a long one.
"""

from __future__ import annotations

import json
import random
import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from cluster_harness import Cluster, partition_states
from samsa.protocol.records import iter_records
from waiting import wait_until

TOPIC = "chaos"
PARTITIONS = 3


@dataclass
class ChaosReport:
    kills: int = 0
    pauses: int = 0
    acked: int = 0
    lost: int = 0
    duplicated: int = 0
    replicas_identical: bool = False
    longest_stall_s: float = 0.0
    longest_leaderless_s: float = 0.0
    failovers_s: list[float] = field(default_factory=list)  # fault to every partition led by a live broker
    longest_stall_after: str = ""  # the fault the longest stall followed
    broker_log_problems: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        f = sorted(self.failovers_s) or [0.0]
        pct = lambda q: f[min(len(f) - 1, int(q * len(f)))]  # noqa: E731
        return [f"faults: {self.kills} SIGKILL/restart, {self.pauses} SIGSTOP pauses past the session",
                f"records acknowledged: {self.acked}, lost: {self.lost}, duplicated: {self.duplicated}",
                f"replicas identical below the high watermark: {self.replicas_identical}",
                f"longest producer stall: {self.longest_stall_s:.1f} s ({self.longest_stall_after})",
                f"longest time without a live leader (two ISR members alive): {self.longest_leaderless_s:.1f} s",
                f"fail-over (fault to all partitions led by live brokers): p50 {pct(0.5):.1f} s, "
                f"p90 {pct(0.9):.1f} s, max {f[-1]:.1f} s over {len(self.failovers_s)} faults",
                f"broker log problems: {len(self.broker_log_problems)}"]


class _Load(threading.Thread):
    """Numbered records as fast as the cluster acknowledges them (a bounded number in flight)."""

    def __init__(self, bootstrap: str):
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 5, "message.timeout.ms": 600000, "log_level": 0})
        self.acked: list[bytes] = []
        self.errors: list[str] = []
        self.last_ack = time.monotonic()
        self.last_ack_of: dict[int, float] = {}  # partition -> when a record of it was last acknowledged
        self.longest_stall = 0.0
        self.longest_stall_ended = 0.0
        self.stopping = threading.Event()

    def _delivered(self, err, msg) -> None:
        if err is not None:
            self.errors.append(str(err))
            return
        now = time.monotonic()
        if now - self.last_ack > self.longest_stall:
            self.longest_stall, self.longest_stall_ended = now - self.last_ack, now
        self.last_ack = self.last_ack_of[msg.partition()] = now
        self.acked.append(msg.value())

    def run(self) -> None:
        n = 0
        while not self.stopping.is_set():
            if len(self.producer) < 2000:
                self.producer.produce(TOPIC, b"%012d" % n, on_delivery=self._delivered)
                n += 1
                self.producer.poll(0)
            else:
                self.producer.poll(0.05)
        self.producer.flush(600)


class _Monitor(threading.Thread):
    """Partition states from ZooKeeper every 100 ms: how long each lacked a live leader."""

    def __init__(self, cluster: Cluster, live: set[int]):
        super().__init__(daemon=True)
        self.zk = cluster.zookeeper()
        self.live = live  # the brokers running and not paused (the chaos loop keeps it)
        self.leaderless_since: dict[int, float] = {}
        self.longest = 0.0
        self.stopping = threading.Event()

    def states(self) -> dict[int, dict]:
        return partition_states(self.zk, TOPIC)

    def run(self) -> None:
        while not self.stopping.wait(0.1):
            try:
                states = self.states()
            except Exception:
                continue
            now = time.monotonic()
            for p, s in states.items():
                live_isr = [r for r in s["isr"] if r in self.live]
                if s["leader"] not in self.live and len(live_isr) >= 2:
                    since = self.leaderless_since.setdefault(p, now)
                    self.longest = max(self.longest, now - since)
                else:
                    self.leaderless_since.pop(p, None)

    def close(self) -> None:
        self.stopping.set()
        self.join(10)
        self.zk.stop()
        self.zk.close()


def _controller(monitor: _Monitor) -> int:
    try:
        return json.loads(monitor.zk.get("/controller")[0])["brokerid"]
    except Exception:
        return -1


def run_chaos(root: Path, faults: int, seed: int = 1, session_ms: int = 3000) -> ChaosReport:
    """``faults`` random faults, one at a time: each after the cluster is whole again (full ISRs)
    and the producer has had records of every partition acknowledged since."""
    rnd = random.Random(seed)
    report = ChaosReport()
    cluster = Cluster(root, **{"zookeeper.session.timeout.ms": session_ms, "min.insync.replicas": 2}).start()
    live = set(cluster.brokers)
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])[TOPIC].result(30)
        monitor = _Monitor(cluster, live)
        whole = lambda: all(len(s["isr"]) == 3 and s["leader"] in live  # noqa: E731
                            for s in monitor.states().values())
        wait_until(whole, what="the topic with full ISRs", timeout=60)
        monitor.start()
        load = _Load(cluster.bootstrap)
        load.start()
        wait_until(lambda: len(load.acked) > 1000, what="the load running")
        faults_at: list[tuple[float, str]] = []
        for i in range(faults):
            controller = _controller(monitor)
            victim = controller if i % 5 == 0 and controller in live else rnd.choice(sorted(live))
            broker = cluster.brokers[victim]
            fault_at = time.monotonic()
            role = "the controller" if victim == controller else "a broker"
            faults_at.append((fault_at, f"fault {i + 1}: {'SIGSTOP' if i % 4 == 3 else 'SIGKILL'} of {role} "
                                        f"{victim} at {time.strftime('%H:%M:%S')}"))
            live.discard(victim)
            if i % 4 == 3:
                report.pauses += 1
                broker.proc.send_signal(signal.SIGSTOP)
                time.sleep(session_ms / 1000 + rnd.uniform(1.0, 2.0))  # the fault itself: a pause past the session
                broker.proc.send_signal(signal.SIGCONT)
            else:
                report.kills += 1
                broker.kill()
                time.sleep(rnd.uniform(0.0, 1.0))  # the fault itself: down for a moment
                broker.start()
            live.add(victim)
            wait_until(lambda: all(s["leader"] in live for s in monitor.states().values()),
                       what="every partition led by a live broker", timeout=120)
            report.failovers_s.append(time.monotonic() - fault_at)
            wait_until(whole, what="full ISRs again", timeout=120)
            whole_at = time.monotonic()  # one fault at a time, as clients see it: every partition writable again
            wait_until(lambda: all(load.last_ack_of.get(p, 0) > whole_at for p in range(PARTITIONS)),
                       what="records of every partition acknowledged again", timeout=120)
        load.stopping.set()
        load.join(600)
        monitor.close()
        report.acked = len(load.acked)
        report.longest_stall_s = load.longest_stall
        stall_began = load.longest_stall_ended - load.longest_stall
        report.longest_stall_after = next((what for at, what in reversed(faults_at) if at <= stall_began + 1),
                                          "before any fault")
        report.longest_leaderless_s = monitor.longest
        read = _read_all(cluster.bootstrap, len(load.acked))
        counts = Counter(read)
        report.lost = len(set(load.acked) - set(counts))
        report.duplicated = sum(n - 1 for n in counts.values() if n > 1)
        for b in cluster.brokers.values():
            b.stop()
        report.replicas_identical = _replicas_identical(cluster)
        for b in cluster.brokers.values():
            text = b.log_text()
            report.broker_log_problems += [line for line in text.splitlines()
                                           if "Traceback" in line or "never retrieved" in line
                                           or "failed ()" in line]
    finally:
        cluster.stop()
    return report


def _read_all(bootstrap: str, at_least: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"chaos-check-{time.time()}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False, "log_level": 0})
    c.subscribe([TOPIC])
    got: list[bytes] = []
    try:
        def read() -> bool:
            for m in c.consume(1000, 0.5):
                if not m.error():
                    got.append(m.value())
            return len(got) >= at_least
        wait_until(read, what=f"{at_least} records read back", timeout=300)
        while batch := c.consume(1000, 1.0):  # anything beyond (duplicates) that is still there
            got.extend(m.value() for m in batch if not m.error())
    finally:
        c.close()
    return got


def _replica_records(data_dir: Path, partition: int) -> list[tuple[int, bytes | None]]:
    d = data_dir / "logs" / f"{TOPIC}-{partition}"
    buf = b"".join(p.read_bytes() for p in sorted(d.glob("*.log")))
    return [(r.offset, r.value) for r in iter_records(buf)]


def _high_watermark(data_dir: Path, partition: int) -> int:
    for line in (data_dir / "logs" / "replication-offset-checkpoint").read_text().splitlines()[2:]:
        topic, p, offset = line.split()
        if topic == TOPIC and int(p) == partition:
            return int(offset)
    return 0


def _replicas_identical(cluster: Cluster) -> bool:
    """After a clean stop: each partition's replicas hold the same records below the lowest HW."""
    for p in range(PARTITIONS):
        hw = min(_high_watermark(b.data_dir, p) for b in cluster.brokers.values())
        logs = {tuple(r for r in _replica_records(b.data_dir, p) if r[0] < hw) for b in cluster.brokers.values()}
        if len(logs) != 1 or hw == 0:
            return False
    return True
