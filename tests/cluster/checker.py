"""A workload to run under faults, and the checker that reads everything back afterwards.

The workload writes to three topics of its own (RF 3, ``min.insync.replicas=2``, unclean
election off), each by a confluent-kafka producer in a thread:

- ``<name>-all``: acks=all, idempotent, numbered records round-robin over the partitions;
- ``<name>-one``: acks=1, numbered records (what Kafka may lose on a deposed leader);
- ``<name>-txn``: transactions of a few records, every third one aborted.

The workload reads the cluster through a small view of it (``cluster.view()``): the partition
states and the registered brokers, from ZooKeeper for a ZooKeeper cluster
(``cluster_harness.ZooKeeperView``), from the brokers and the quorum for a KRaft one
(``kraft_nodes.KRaftView``). A monitor reads them every 100 ms: how long each partition had no
leader (none, or one whose broker is not registered).

The checker (:meth:`Workload.check`) asserts nothing itself; it counts, and
:meth:`CheckReport.violations` lists what breaks a safety rule: an acknowledged acks=all record
lost, moved from its acknowledged offset, or duplicated; a partition's records out of order;
replicas that differ below the high watermark; a committed transaction's record missing, or an
aborted one's read by a ``read_committed`` consumer; and what the view finds wrong with the
cluster's own metadata (KRaft: the nodes' metadata logs not prefixes of one log). acks=1 records lost are counted apart: Kafka
loses those when a deposed leader truncates, and says so.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from cluster_harness import Cluster
from samsa.protocol.batch import iter_headers
from waiting import wait_until

TOPIC_CONFIGS = {"min.insync.replicas": "2", "unclean.leader.election.enable": "false"}
QUIET = {"log_level": 0}


@dataclass
class CheckReport:
    acked: int = 0
    lost: int = 0
    moved: int = 0  # acknowledged at one offset, found at another
    acked_without_offset: int = 0  # the delivery report carried no offset (found, not a violation)
    duplicated: int = 0
    out_of_order: int = 0
    replicas_identical: bool = False
    replica_differences: list[str] = field(default_factory=list)
    acks1_acked: int = 0
    acks1_lost: int = 0
    txn_committed: int = 0
    txn_aborted: int = 0
    txn_unknown: int = 0
    committed_lost: int = 0
    aborted_read: int = 0
    examples: list[str] = field(default_factory=list)  # a few of the records behind a violation
    broker_log_problems: list[str] = field(default_factory=list)  # tracebacks in the brokers' logs (the campaign)
    producer_errors: int = 0
    metadata_problems: list[str] = field(default_factory=list)  # the view's (KRaft: metadata logs that diverge)
    leaderless_s: dict[str, float] = field(default_factory=dict)  # partition -> total seconds without a leader
    longest_leaderless_s: float = 0.0
    longest_stall_s: float = 0.0  # longest gap between acks=all acknowledgements of one partition

    def violations(self) -> list[str]:
        out = []
        if self.acked == 0:
            out.append("nothing was acknowledged")
        for name in ("lost", "moved", "duplicated", "out_of_order", "committed_lost", "aborted_read"):
            if getattr(self, name):
                out.append(f"{name}: {getattr(self, name)}")
        if out:
            out += self.examples[:10]
        if not self.replicas_identical:
            out.append(f"replicas differ below the high watermark: {self.replica_differences}")
        out += self.metadata_problems
        return out

    def lines(self) -> list[str]:
        worst = sorted(self.leaderless_s.items(), key=lambda kv: -kv[1])[:3]
        return [f"acks=all records acknowledged: {self.acked}, lost: {self.lost}, moved: {self.moved}, "
                f"duplicated: {self.duplicated}, out of order: {self.out_of_order}, "
                f"acknowledged without an offset: {self.acked_without_offset}",
                f"replicas byte-identical below the high watermark: {self.replicas_identical}",
                f"the cluster's metadata: {'; '.join(self.metadata_problems) or 'consistent'}",
                f"transactions committed: {self.txn_committed} (records lost: {self.committed_lost}), "
                f"aborted: {self.txn_aborted} (records read by read_committed: {self.aborted_read}), "
                f"outcome unknown: {self.txn_unknown}",
                f"acks=1 records acknowledged: {self.acks1_acked}, lost: {self.acks1_lost} "
                "(Kafka loses acks=1 records written to a deposed leader: counted, not a violation)",
                f"time without a leader (none, or not registered): longest {self.longest_leaderless_s:.1f} s; "
                "per partition " + (", ".join(f"{p} {s:.1f} s" for p, s in worst) or "none"),
                f"longest acks=all stall of a partition: {self.longest_stall_s:.1f} s; "
                f"producer errors: {self.producer_errors}"]


class _Producing(threading.Thread):
    """Numbered records, round-robin over the partitions, a bounded number in flight."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, acks: str):
        super().__init__(daemon=True)
        self.topic, self.partitions = topic, partitions
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "enable.idempotence": acks == "all",
                                  "linger.ms": 5, "message.timeout.ms": 300000,
                                  "request.timeout.ms": 5000, "socket.timeout.ms": 6000, **QUIET})
        self.acked: list[tuple[int, int, bytes]] = []  # (partition, offset, value)
        self.errors = 0
        self.last_ack: dict[int, float] = {}
        self.longest_stall = 0.0
        self.stopping = threading.Event()

    def _delivered(self, err, msg) -> None:
        if err is not None:
            self.errors += 1
            return
        now = time.monotonic()
        p = msg.partition()
        self.longest_stall = max(self.longest_stall, now - self.last_ack.get(p, now))
        self.last_ack[p] = now
        self.acked.append((p, msg.offset(), msg.value()))

    def run(self) -> None:
        n = 0
        while not self.stopping.is_set():
            if len(self.producer) < 500:
                p = n % self.partitions
                self.producer.produce(self.topic, b"%d:%09d" % (p, n // self.partitions), partition=p,
                                      on_delivery=self._delivered)
                n += 1
                self.producer.poll(0)
                if n % 10 == 0:
                    time.sleep(0.01)  # a steady stream, not a flood the catch-up has to chew through
            else:
                self.producer.poll(0.05)
        self.producer.flush(60)  # what is still unacknowledged then (a wedged producer) is not counted


class _Transactions(threading.Thread):
    """Transactions of four records; every third one aborted. Outcomes: committed, aborted, unknown."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, txn_id: str):
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.partitions, self.txn_id = bootstrap, topic, partitions, txn_id
        self.committed: list[bytes] = []
        self.aborted: list[bytes] = []
        self.unknown: list[bytes] = []
        self.counts = Counter()
        self.stopping = threading.Event()

    def _producer(self) -> Producer | None:
        while not self.stopping.is_set():
            p = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": self.txn_id,
                          "transaction.timeout.ms": 20000, "message.timeout.ms": 15000,
                          "socket.timeout.ms": 6000, **QUIET})
            try:
                p.init_transactions(15)
                return p
            except KafkaException:
                time.sleep(0.2)
        return None

    def run(self) -> None:
        producer = self._producer()
        n = 0
        while producer is not None and not self.stopping.is_set():
            values = [b"t%09d" % (n + i) for i in range(4)]
            abort = (n // 4) % 3 == 2
            n += 4
            try:
                producer.begin_transaction()
                for i, v in enumerate(values):
                    producer.produce(self.topic, v, partition=(n + i) % self.partitions)
                if abort:
                    producer.abort_transaction(15)
                    self.aborted += values
                    self.counts["aborted"] += 1
                else:
                    producer.commit_transaction(15)
                    self.committed += values
                    self.counts["committed"] += 1
            except KafkaException as e:
                self.unknown += values
                self.counts["unknown"] += 1
                err = e.args[0]
                try:
                    if err.txn_requires_abort():
                        producer.abort_transaction(15)
                        continue
                except KafkaException:
                    pass
                producer = self._producer()  # fatal or unresolved: a new producer fences the old one
            time.sleep(0.02)


class _Monitor(threading.Thread):
    def __init__(self, cluster: Cluster, topics: list[str]):
        super().__init__(daemon=True)
        self.view = cluster.view()
        self.topics = topics
        self.since: dict[str, float] = {}
        self.total: dict[str, float] = defaultdict(float)
        self.longest = 0.0
        self.stopping = threading.Event()

    def run(self) -> None:
        last = time.monotonic()
        while not self.stopping.wait(0.1):
            try:
                alive = self.view.registered()
                states = self.view.states(self.topics)
            except Exception:
                continue
            now = time.monotonic()
            for tp, s in states.items():
                if s["leader"] not in alive:
                    self.total[tp] += now - last if tp in self.since else 0.0
                    since = self.since.setdefault(tp, now)
                    self.longest = max(self.longest, now - since)
                else:
                    self.since.pop(tp, None)
            last = now

    def close(self) -> None:
        self.stopping.set()
        self.join(10)
        self.view.close()


class Workload:
    def __init__(self, cluster: Cluster, name: str, partitions: int = 3):
        self.cluster, self.name, self.partitions = cluster, name, partitions
        self.topics = {kind: f"{name}-{kind}" for kind in ("all", "one", "txn")}
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **QUIET})
        futures = admin.create_topics([NewTopic(t, partitions, 3, config=TOPIC_CONFIGS)
                                       for t in self.topics.values()])
        for f in futures.values():
            f.result(30)
        wait_until(self.whole, what=f"the topics of {name} with full ISRs", timeout=60)
        boot = cluster.bootstrap
        self.all = _Producing(boot, self.topics["all"], partitions, "all")
        self.one = _Producing(boot, self.topics["one"], partitions, "1")
        self.txn = _Transactions(boot, self.topics["txn"], partitions, f"{name}-txn-producer")
        self.monitor = _Monitor(cluster, list(self.topics.values()))

    def _ask(self, question):
        view = self.cluster.view()
        try:
            return question(view)
        finally:
            view.close()

    def states(self) -> dict[str, dict]:
        """``topic-partition`` -> {"leader", "isr", ...} of the workload's topics, as the view sees them."""
        return self._ask(lambda view: view.states(list(self.topics.values())))

    def registered(self) -> set[int]:
        return self._ask(lambda view: view.registered())

    def whole(self) -> bool:
        """Every broker registered, every partition led by one, with all three replicas in sync."""
        alive, states = self.registered(), self.states()
        return len(alive) == len(self.cluster.brokers) and len(states) == len(self.topics) * self.partitions and all(
            s["leader"] in alive and len(s["isr"]) == 3 for s in states.values())

    def start(self) -> "Workload":
        for t in (self.monitor, self.all, self.one, self.txn):
            t.start()
        wait_until(lambda: len(self.all.acked) > 200 and len(self.all.last_ack) == self.partitions
                   and self.txn.counts["committed"] > 0, what="the workload running", timeout=60)
        return self

    def acked_since(self, t: float) -> bool:
        """Records of every partition acknowledged (acks=all) after monotonic time ``t``."""
        return all(self.all.last_ack.get(p, 0) > t for p in range(self.partitions))

    def wait_whole_and_writing(self, timeout: float = 90) -> None:
        wait_until(self.whole, what="every partition led, with full ISRs", timeout=timeout)
        whole_at = time.monotonic()
        wait_until(lambda: self.acked_since(whole_at), what="records of every partition acknowledged",
                   timeout=timeout)

    def stop(self) -> None:
        for t in (self.all, self.one, self.txn):
            t.stopping.set()
        for t in (self.all, self.one, self.txn):
            t.join(300)
        self.monitor.close()

    # ---------------------------------------------------------------- the checker

    def check(self) -> CheckReport:
        r = CheckReport()
        r.acked, r.acks1_acked = len(self.all.acked), len(self.one.acked)
        r.producer_errors = self.all.errors
        r.longest_stall_s = self.all.longest_stall
        r.leaderless_s = {tp: round(s, 1) for tp, s in self.monitor.total.items() if s > 0}
        r.longest_leaderless_s = self.monitor.longest

        read = self._read(self.topics["all"], "read_uncommitted")
        at = {(p, o): v for p, o, v in read}
        counts = Counter(v for _, _, v in read)
        for p, o, v in self.all.acked:
            if v not in counts:
                r.lost += 1
                r.examples.append(f"lost: {v!r} acknowledged at {self.topics['all']}-{p} offset {o}")
            elif o is None or o < 0:  # librdkafka's "persisted, offset unknown" (confluent-kafka: None)
                r.acked_without_offset += 1
            elif at.get((p, o)) != v:
                r.moved += 1
                r.examples.append(f"moved: {v!r} acknowledged at {self.topics['all']}-{p} offset {o}, "
                                  f"which holds {at.get((p, o))!r}")
        r.duplicated = sum(n - 1 for n in counts.values() if n > 1)
        last: dict[int, int] = {}
        for p, o, v in read:  # per partition in offset order: sequence numbers only go up
            seq = int(v.split(b":")[1])
            if seq <= last.get(p, -1):
                r.out_of_order += 1
            last[p] = seq

        one = Counter(v for _, _, v in self._read(self.topics["one"], "read_uncommitted"))
        r.acks1_lost = sum(1 for _, _, v in self.one.acked if v not in one)

        committed_read = Counter(v for _, _, v in self._read(self.topics["txn"], "read_committed"))
        if any(v not in committed_read for v in self.txn.committed) or any(v in committed_read for v in self.txn.aborted):
            everything = {v: (p, o) for p, o, v in self._read(self.topics["txn"], "read_uncommitted")}
            r.examples += [f"committed, not read by read_committed: {v!r} (in the log at {everything.get(v)})"
                           for v in self.txn.committed if v not in committed_read]
            r.examples += [f"aborted, read by read_committed: {v!r}" for v in self.txn.aborted if v in committed_read]
        r.txn_committed, r.txn_aborted, r.txn_unknown = (self.txn.counts[k] for k in ("committed", "aborted", "unknown"))
        r.committed_lost = sum(1 for v in self.txn.committed if v not in committed_read)
        r.aborted_read = sum(1 for v in self.txn.aborted if v in committed_read)
        r.duplicated += sum(n - 1 for n in committed_read.values() if n > 1)

        r.replica_differences = [d for t in self.topics.values() for d in self._compare_replicas(t)]
        r.replicas_identical = not r.replica_differences
        r.metadata_problems = self._ask(lambda view: view.problems())
        return r

    def _high_watermarks(self, topic: str) -> dict[int, int]:
        c = Consumer({"bootstrap.servers": self.cluster.bootstrap, "group.id": "checker-hw", **QUIET})
        try:
            return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30, cached=False)[1]
                    for p in range(self.partitions)}
        finally:
            c.close()

    def _read(self, topic: str, isolation: str) -> list[tuple[int, int, bytes]]:
        """Every record of ``topic`` up to its high watermark now: (partition, offset, value)."""
        ends = self._high_watermarks(topic)
        c = Consumer({"bootstrap.servers": self.cluster.bootstrap, "group.id": f"checker-{time.time()}",
                      "enable.auto.commit": False, "isolation.level": isolation, **QUIET})
        c.assign([TopicPartition(topic, p, 0) for p in range(self.partitions)])
        out: list[tuple[int, int, bytes]] = []
        try:
            def done() -> bool:
                for m in c.consume(1000, 0.2):
                    if not m.error():
                        out.append((m.partition(), m.offset(), m.value()))
                positions = {tp.partition: tp.offset for tp in c.position(
                    [TopicPartition(topic, p) for p in range(self.partitions)])}
                return all(positions[p] >= ends[p] for p in range(self.partitions) if ends[p] > 0)
            wait_until(done, what=f"{topic} read to its high watermarks {ends}", timeout=120)
        finally:
            c.close()
        out.sort()
        return out

    def _compare_replicas(self, topic: str) -> list[str]:
        """Each partition's replicas hold the same batches, byte for byte, below the high watermark."""
        ends = self._high_watermarks(topic)
        problems = []
        for p in range(self.partitions):
            hw = ends[p]
            prefixes: dict[int, bytes] = {}

            def covered() -> bool:
                for b, broker in self.cluster.brokers.items():
                    prefixes[b] = _log_prefix(broker.log_dir / f"{topic}-{p}", hw)
                return all(v is not None for v in prefixes.values())
            try:
                wait_until(covered, what=f"every replica of {topic}-{p} past offset {hw}", timeout=60)
            except Exception:
                problems.append(f"{topic}-{p}: a replica does not reach the high watermark {hw}")
                continue
            if len(set(prefixes.values())) != 1:
                problems.append(f"{topic}-{p}: replicas differ below offset {hw} "
                                f"({ {b: len(v) for b, v in prefixes.items()} } bytes)")
        return problems


def _log_prefix(directory, hw: int) -> bytes | None:
    """The bytes of the batches below offset ``hw`` in a replica's segments, or None while the
    replica does not have them all (a follower still catching up, or one truncated below)."""
    buf = b"".join(f.read_bytes() for f in sorted(directory.glob("*.log")))
    if hw == 0:
        return b""
    end = 0
    for pos, h in iter_headers(buf):
        if h.base_offset >= hw:
            break
        end = pos + h.size
        if h.base_offset + h.last_offset_delta + 1 >= hw:
            return buf[:end]
    return None
