"""Share groups (KIP-932) on a three-broker ZooKeeper cluster: a share group of confluent-kafka
ShareConsumers reads a replicated topic while a producer keeps writing; the broker leading the
partition is SIGKILLed (the share partition moves to the new leader, which reads its state back
from the share coordinator), then the broker that is the share coordinator of the group's
state (FindCoordinator key type 2, ``group:topicId:partition``: the leader of its
``__share_group_state`` partition; the group's name is chosen so that this is broker 2, which
neither led the partition nor took it over, so the share partition's leader keeps running and
writes its state to a coordinator that moves); at last the whole cluster is SIGKILLed and started again.
Checked: no record delivered again once a consumer's acknowledgement of it was answered without
error (commit_sync), and none lost: every record whose produce was acknowledged is accepted,
or was acknowledged with an outcome unknown to the consumer (a transport error as a leader
died); a record whose acknowledgement was answered COORDINATOR_NOT_AVAILABLE (its state write
failed as the share coordinator died) was rolled back, as Kafka does: it is delivered again and
accepted; and after the cluster's restart a consumer of the group gets the records produced after
it and, of the earlier ones, at most those whose acknowledgement's outcome was unknown (which it
then accepts): nothing was left unaccepted.
"""

from __future__ import annotations

import base64
import collections
import threading
import uuid

from confluent_kafka import KafkaException, Producer, ShareConsumer
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic,
                                   ResourceType)

import one_request
from waiting import wait_until

SETTINGS = {"group.share.min.record.lock.duration.ms": 1000, "group.share.min.heartbeat.interval.ms": 500,
            "group.share.min.session.timeout.ms": 6000,
            "share.coordinator.state.topic.num.partitions": 3,
            "share.coordinator.state.topic.replication.factor": 3,
            "share.coordinator.state.topic.min.isr": 2}
GROUP_CONFIG = {"share.auto.offset.reset": "earliest", "share.heartbeat.interval.ms": "500",
                "share.record.lock.duration.ms": "3000", "share.session.timeout.ms": "6000"}
SHARE_KEY = 2  # FindCoordinator's key type of a share partition's state


class Ledger:
    """Every delivery and every acknowledgement answered without error, in the order the
    consumers saw them (one lock): what the checks read."""

    def __init__(self):
        self.lock = threading.Lock()
        self.events: list[tuple[str, str, str, int]] = []  # (kind, consumer, value, delivery count)

    def add(self, kind: str, who: str, items: list[tuple[str, int]]) -> None:
        with self.lock:
            self.events.extend((kind, who, v, n) for v, n in items)

    def accepted(self) -> set[str]:
        with self.lock:
            return {v for kind, _, v, _ in self.events if kind == "accepted"}

    def acknowledged(self) -> set[str]:
        """Records accepted, or whose acknowledgement got an error that leaves its outcome
        unknown (a transport error as the leader died: it may have been applied)."""
        with self.lock:
            return {v for kind, _, v, _ in self.events if kind in ("accepted", "uncertain", "refused")}

    def refused(self) -> set[str]:
        """Records whose acknowledgement was answered COORDINATOR_NOT_AVAILABLE (its state write
        failed as the share coordinator died): rolled back, as Kafka does, so delivered again."""
        with self.lock:
            return {v for kind, _, v, _ in self.events if kind == "refused"}

    def count(self, kind: str) -> int:
        with self.lock:
            return sum(1 for e in self.events if e[0] == kind)

    def redelivered_after_accept(self) -> list[tuple[str, str, int]]:
        """Deliveries of a record after an acknowledgement of it was answered without error."""
        seen: set[str] = set()
        bad = []
        with self.lock:
            for kind, who, v, n in self.events:
                if kind == "accepted":
                    seen.add(v)
                elif v in seen:
                    bad.append((v, who, n))
        return bad

    def history(self, values: list[str]) -> list[tuple[str, str, str, int]]:
        with self.lock:
            return [e for e in self.events if e[2] in set(values)]

    def accepted_twice(self) -> list[str]:
        with self.lock:
            values = [v for kind, _, v, _ in self.events if kind == "accepted"]
        return sorted({v for v in values if values.count(v) > 1})


class Worker(threading.Thread):
    """One ShareConsumer (implicit acknowledgement): each poll's records, then commit_sync; the
    records of a partition whose acknowledgement came back without error count as accepted."""

    def __init__(self, name: str, bootstrap: str, group: str, topic: str, ledger: Ledger):
        super().__init__(daemon=True, name=name)
        self.ledger, self.stopping, self.errors = ledger, threading.Event(), collections.Counter()
        self.consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 0,
                                       "max.poll.records": 50, "socket.timeout.ms": 5000})
        self.consumer.subscribe([topic])

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                batch = [m for m in self.consumer.poll(0.3) if not m.error()]
            except KafkaException as e:
                self.errors[f"poll: {e.args[0].name()}"] += 1
                continue
            if not batch:
                continue
            self.ledger.add("delivered", self.name, [(m.value().decode(), m.delivery_count()) for m in batch])
            try:
                result = self.consumer.commit_sync(15)
            except KafkaException as e:  # the batch's acknowledgement may or may not have been applied
                self.errors[f"commit_sync: {e.args[0].name()}"] += 1
                self.ledger.add("uncertain", self.name, [(m.value().decode(), m.delivery_count()) for m in batch])
                continue
            ok = {(tp.topic, tp.partition) for tp, err in result.items() if err is None}
            refused = {(tp.topic, tp.partition) for tp, err in result.items()
                       if err is not None and err.args[0].name() == "COORDINATOR_NOT_AVAILABLE"}
            for tp, err in result.items():
                if err is not None:
                    self.errors[f"commit_sync {tp.partition}: {err.args[0].name()}"] += 1
            for kind, records in (("accepted", [m for m in batch if (m.topic(), m.partition()) in ok]),
                                  ("refused", [m for m in batch if (m.topic(), m.partition()) in refused]),
                                  ("uncertain", [m for m in batch
                                                 if (m.topic(), m.partition()) not in ok | refused])):
                self.ledger.add(kind, self.name, [(m.value().decode(), m.delivery_count()) for m in records])
        self.consumer.close()


class Feeder(threading.Thread):
    """Produces ``v<n>`` records (acks=all, idempotent), about 200 a second, until stopped;
    ``acked`` holds those the cluster acknowledged."""

    def __init__(self, bootstrap: str, topic: str):
        super().__init__(daemon=True, name="feeder")
        self.topic, self.stopping, self.acked, self.sent = topic, threading.Event(), set(), 0
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                                  "linger.ms": 5, "log_level": 0})

    def _done(self, err, msg) -> None:
        if err is None:
            self.acked.add(msg.value().decode())

    def run(self) -> None:
        while not self.stopping.is_set():
            for _ in range(20):
                self.producer.produce(self.topic, f"v{self.sent}".encode(), on_delivery=self._done)
                self.sent += 1
            self.producer.poll(0)
            self.stopping.wait(0.1)  # the pace (about 200 records a second), not a wait for a state
        self.producer.flush(60)


def round_trip(bootstrap: str, api_key: int, version: int, body: dict) -> dict:
    return one_request.round_trip(bootstrap, api_key, version, body, "share-cluster-test")


def live(cluster, but: set[int] = frozenset()) -> str:
    return ",".join(b.bootstrap for i, b in cluster.brokers.items() if i not in but)


def test_share_group_survives_leader_and_share_coordinator_kills(cluster_factory):
    cluster = cluster_factory(**SETTINGS)
    tag = uuid.uuid4().hex[:6]
    topic = f"share-jobs-{tag}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    # Replicas 0, 1, 2: broker 0 leads, and broker 1 takes over when 0 dies.
    new = NewTopic(topic, num_partitions=1, replica_assignment=[[0, 1, 2]], config={"min.insync.replicas": "2"})
    admin.create_topics([new])[topic].result(30)
    wait_until(lambda: cluster.partition(topic, 0)[0] == 0, "broker 0 leading the partition")
    topic_id = _topic_id(cluster.bootstrap, topic)
    group = _group_coordinated_by(cluster.bootstrap, f"share-workers-{tag}", topic_id, 2)
    key = f"{group}:{topic_id}:0"
    r = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in GROUP_CONFIG.items()])
    admin.incremental_alter_configs([r])[r].result(30)
    wait_until(lambda: cluster.partition(topic, 0)[0] >= 0 and len(cluster.partition(topic, 0)[2]) == 3,
               "the topic's partition led, its three replicas in sync")

    ledger = Ledger()
    workers = [Worker(f"w{i}", cluster.bootstrap, group, topic, ledger) for i in range(3)]
    feeder = Feeder(cluster.bootstrap, topic)
    try:
        for w in workers:
            w.start()
        feeder.start()
        wait_until(lambda: ledger.count("accepted") >= 300, "records accepted before any kill", 60)

        # 1. The partition's leader.
        leader = cluster.partition(topic, 0)[0]
        cluster.brokers[leader].kill()
        others = live(cluster, {leader})
        wait_until(lambda: _leader_other_than(cluster, others, topic, leader), "a new leader of the partition", 60)
        mark = ledger.count("accepted")
        wait_until(lambda: ledger.count("accepted") >= mark + 300, "records accepted from the new leader", 60)
        cluster.brokers[leader].start()

        # 2. The share coordinator of the group's state on that partition.
        wait_until(lambda: len(cluster.partition(topic, 0)[2]) == 3, "the restarted broker back in the ISR", 60)
        (coordinator,) = wait_until(lambda: _coordinator_or_none(cluster.bootstrap, key), "the share coordinator", 30)
        print(f"share coordinator {coordinator}; the partition's leader {cluster.partition(topic, 0)[0]}")
        cluster.brokers[coordinator].kill()
        others = live(cluster, {coordinator})
        wait_until(lambda: _coordinator_or_none(others, key) not in (None, (coordinator,)),
                   "the share state moved to another coordinator", 60)
        mark = ledger.count("accepted")
        wait_until(lambda: ledger.count("accepted") >= mark + 300, "records accepted after the coordinator moved", 60)

        feeder.stopping.set()
        feeder.join(90)
        assert not feeder.is_alive()
        produced = set(feeder.acked)
        missing: list = []

        def all_accepted() -> bool:
            # and those whose acknowledgement was refused were rolled back: delivered again, accepted
            missing[:] = sorted((produced - ledger.acknowledged()) | (ledger.refused() - ledger.accepted()),
                                key=lambda v: int(v[1:]))
            return not missing
        try:
            wait_until(all_accepted, "every acknowledged record accepted by the group", 60)
        except AssertionError:
            raise AssertionError(f"{len(missing)} acknowledged records never accepted: {missing[:20]}; their "
                                 f"deliveries: {ledger.history(missing[:20])}; consumer errors "
                                 f"{[w.errors for w in workers]}") from None
    finally:
        feeder.stopping.set()
        for w in workers:
            w.stopping.set()
        for w in workers:
            w.join(30)
    print("consumer errors:", [dict(w.errors) for w in workers])
    assert ledger.redelivered_after_accept() == [], "records delivered again after their acceptance"
    assert ledger.accepted_twice() == []
    assert len(produced) >= 900

    # 3. The whole cluster SIGKILLed and started again: the accepted records stay accepted (the
    # share coordinator reads the state back from __share_group_state); only new ones come, and
    # records whose acknowledgement's outcome was unknown to their consumer if it was not applied
    # (they come before the new ones, at lower offsets, and are accepted now): nothing was lost.
    for b in cluster.brokers.values():
        b.kill()
    for b in cluster.brokers.values():
        b.start()
    wait_until(lambda: len(cluster.describe_cluster()) == 3, "the three brokers registered again", 60)
    wait_until(lambda: len(cluster.partition(topic, 0)[2]) == 3, "the partition led, its replicas in sync", 60)
    after = Ledger()
    worker = Worker("after", cluster.bootstrap, group, topic, after)
    worker.start()
    try:
        fresh = {f"fresh{i}" for i in range(20)}
        p = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "log_level": 0})
        for v in sorted(fresh):
            p.produce(topic, v.encode())
        assert p.flush(60) == 0
        wait_until(lambda: fresh <= after.accepted(), "the records produced after the restart accepted", 60)
        wait_until(lambda: {v for kind, _, v, _ in after.events if kind == "delivered"} <= after.accepted(),
                   "every record delivered after the restart accepted", 30)
    finally:
        worker.stopping.set()
        worker.join(30)
    again = {v for kind, _, v, _ in after.events if kind == "delivered"} - fresh
    assert not again & ledger.accepted(), "records accepted before the restart delivered again"
    assert again <= ledger.acknowledged(), "records delivered only now: the group had skipped them"
    assert again <= after.accepted(), "records of unknown outcome back after the restart, not accepted now"


def _leader_other_than(cluster, bootstrap: str, topic: str, old: int) -> bool:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    p = admin.list_topics(topic, timeout=5).topics[topic].partitions[0]
    return p.leader not in (-1, old)


def _topic_id(bootstrap: str, topic: str) -> str:
    md = round_trip(bootstrap.split(",")[0], 3, 12, {"topics": [{"topic_id": None, "name": topic}],
                                                    "allow_auto_topic_creation": False,
                                                    "include_topic_authorized_operations": False})
    tid = md["topics"][0]["topic_id"]
    raw = tid.bytes if isinstance(tid, uuid.UUID) else bytes(tid)
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")  # as Kafka prints a Uuid


def _group_coordinated_by(bootstrap: str, prefix: str, topic_id: str, broker: int) -> str:
    """A group name whose share state for partition 0 has ``broker`` as its share coordinator
    (the one that neither leads the partition nor takes over from its leader), else any other
    than broker 0's."""
    fallback = None
    for i in range(100):
        group = f"{prefix}-{i}"
        (c,) = wait_until(lambda: _coordinator_or_none(bootstrap, f"{group}:{topic_id}:0"),
                          "FindCoordinator answering for share state keys", 30)
        if c == broker:
            return group
        if c != 0 and fallback is None:
            fallback = group
    assert fallback is not None, "every share state key coordinated by broker 0"
    return fallback


def _coordinator_or_none(bootstrap: str, key: str) -> tuple[int] | None:
    """(the broker id FindCoordinator names for ``key``,) from the first broker answering, or None."""
    for b in bootstrap.split(","):
        try:
            c = round_trip(b, 10, 6, {"key_type": SHARE_KEY, "coordinator_keys": [key]})["coordinators"][0]
        except OSError:
            continue
        return (c["node_id"],) if c["error_code"] == 0 else None
    return None
