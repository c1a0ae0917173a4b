"""Consumer groups with Samsa's Consumer: sharing partitions, rebalances under each assignor,
static membership, max.poll.interval.ms, and a group shared with confluent-kafka."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import Producer as CKProducer

import samsa.embedded
from samsa.client.admin import Admin
from samsa.client.consumer import Consumer
from samsa.client.types import NewTopic


@pytest.fixture(scope="module")
def broker():
    with samsa.embedded.Broker({"num.partitions": 6}) as b:
        yield b


def produce(bootstrap: str, topic: str, start: int, n: int) -> None:
    p = CKProducer({"bootstrap.servers": bootstrap, "linger.ms": 2})
    for i in range(start, start + n):
        p.produce(topic, b"%d" % i, key=b"%d" % i)
    assert p.flush(30) == 0


def member(broker, group: str, strategy: str = "range", **kw) -> Consumer:
    config = {"bootstrap.servers": broker.bootstrap_servers, "group.id": group, "auto.offset.reset": "earliest",
              "partition.assignment.strategy": strategy, "heartbeat.interval.ms": 200,
              "session.timeout.ms": 6000, "max.poll.records": 50}
    config.update({k.replace("_", "."): v for k, v in kw.items()})
    return Consumer(config)


class Group:
    """Several consumers polled in turn from one thread, records kept per consumer."""

    def __init__(self) -> None:
        self.members: dict[str, Consumer] = {}
        self.got: dict[str, list] = {}

    def add(self, name: str, consumer: Consumer, topic: str, listener=None) -> Consumer:
        consumer.subscribe([topic], listener=listener)
        self.members[name] = consumer
        self.got.setdefault(name, [])
        return consumer

    def close(self, name: str) -> None:
        self.members.pop(name).close()

    def pump(self, until, timeout: float = 30) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            for name, c in list(self.members.items()):
                self.got[name] += c.poll(0.05)
            if until():
                return
        raise AssertionError(f"not reached in {timeout}s: {self.summary()}")

    def values(self) -> list[int]:
        return [int(r.value) for rs in self.got.values() for r in rs]

    def balanced(self, n_partitions: int) -> bool:
        sizes = [len(c.assignment()) for c in self.members.values()]
        return sum(sizes) == n_partitions and max(sizes) - min(sizes) <= 1

    def summary(self) -> str:
        return str({n: (sorted(str(tp) for tp in c.assignment()), len(self.got[n])) for n, c in self.members.items()})

    def close_all(self) -> None:
        for name in list(self.members):
            self.close(name)


def test_two_members_split_six_partitions_then_a_third_joins(broker):
    produce(broker.bootstrap_servers, "six", 0, 600)
    g = Group()
    try:
        g.add("a", member(broker, "g-six"), "six")
        g.add("b", member(broker, "g-six"), "six")
        g.pump(lambda: len(g.values()) >= 600 and g.balanced(6))
        assert {len(c.assignment()) for c in g.members.values()} == {3}
        assert g.got["a"] and g.got["b"]
        g.add("c", member(broker, "g-six"), "six")
        g.pump(lambda: g.balanced(6) and all(len(c.assignment()) == 2 for c in g.members.values()))
        produce(broker.bootstrap_servers, "six", 600, 300)
        g.pump(lambda: len(g.values()) >= 900)
        assert g.got["c"]
        assert sorted(g.values()) == list(range(900))  # every record exactly once
    finally:
        g.close_all()


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "cooperative-sticky",
                                      "org.apache.kafka.clients.consumer.RoundRobinAssignor"])
def test_several_rebalances_every_record_once(broker, strategy):
    topic = f"rb-{strategy.rsplit('.', 1)[-1]}"
    group = f"g-{topic}"
    events: list[tuple[str, str, list]] = []

    def listener(name: str):
        class L:
            def on_partitions_assigned(self, ps):
                events.append((name, "assigned", sorted(ps)))

            def on_partitions_revoked(self, ps):
                events.append((name, "revoked", sorted(ps)))

            def on_partitions_lost(self, ps):
                events.append((name, "lost", sorted(ps)))
        return L()

    g = Group()
    produced = 0
    try:
        g.add("a", member(broker, group, strategy), topic, listener("a"))
        for step, name in enumerate(["b", "c", "-a", "d", "-c", "e"]):
            produce(broker.bootstrap_servers, topic, produced, 200)
            produced += 200
            if name.startswith("-"):
                g.close(name[1:])
            else:
                g.add(name, member(broker, group, strategy), topic, listener(name))
            g.pump(lambda: len(g.values()) >= produced and g.balanced(6), timeout=40)
        counts = Counter(g.values())
        assert sorted(counts) == list(range(produced))
        assert max(counts.values()) == 1, [v for v, n in counts.items() if n > 1][:10]
        if strategy == "cooperative-sticky":
            # incremental: a member is never told it lost everything at a join, only what moves
            revoked_alls = [e for e in events if e[1] == "revoked" and len(e[2]) == 6]
            assert not revoked_alls
            assert any(e[1] == "revoked" and 0 < len(e[2]) < 6 for e in events)
        else:
            assert any(e[1] == "revoked" and len(e[2]) == 6 for e in events)  # eager: all of them
        assert not [e for e in events if e[1] == "lost"]
    finally:
        g.close_all()


def test_static_member_restart_keeps_its_partitions_without_rebalance(broker):
    produce(broker.bootstrap_servers, "static", 0, 60)
    calls: list = []

    class Watch:
        def on_partitions_assigned(self, ps):
            calls.append(("assigned", sorted(ps)))

        def on_partitions_revoked(self, ps):
            calls.append(("revoked", sorted(ps)))

    g = Group()
    try:
        g.add("a", member(broker, "g-static", group_instance_id="inst-a"), "static")
        g.add("b", member(broker, "g-static", group_instance_id="inst-b"), "static", Watch())
        g.pump(lambda: len(g.values()) >= 60 and g.balanced(6))
        a_parts = g.members["a"].assignment()
        generation = g.members["b"]._core.group.generation
        calls.clear()
        g.close("a")  # a static member does not leave the group
        g.add("a", member(broker, "g-static", group_instance_id="inst-a"), "static")
        produce(broker.bootstrap_servers, "static", 60, 60)
        g.pump(lambda: len(g.values()) >= 120)
        assert g.members["a"].assignment() == a_parts
        assert g.members["b"]._core.group.generation == generation  # no new generation: no rebalance
        assert calls == []  # b saw nothing happen
        assert sorted(g.values()) == list(range(120))
    finally:
        g.close_all()


def test_max_poll_interval_leaves_the_group_and_partitions_are_lost(broker):
    produce(broker.bootstrap_servers, "slow", 0, 60)
    lost: list = []

    class L:
        def on_partitions_lost(self, ps):
            lost.append(sorted(ps))

    g = Group()
    try:
        slow = g.add("slow", member(broker, "g-slow", max_poll_interval_ms=1500), "slow", L())
        g.add("fast", member(broker, "g-slow"), "slow")
        g.pump(lambda: g.balanced(6) and len(g.values()) >= 60)
        del g.members["slow"]  # stop polling it
        fast = g.members["fast"]
        deadline = time.time() + 20
        while len(fast.assignment()) < 6 and time.time() < deadline:
            g.got["fast"] += fast.poll(0.1)
        assert len(fast.assignment()) == 6  # the slow member left: all partitions moved over
        deadline = time.time() + 20
        while not lost and time.time() < deadline:
            slow.poll(0.1)
        assert lost and len(lost[0]) == 3  # told they are lost, not revoked
        g.members["slow"] = slow
        g.pump(lambda: g.balanced(6))
    finally:
        g.close_all()


def test_samsa_and_confluent_consumers_share_one_group(broker):
    with Admin({"bootstrap.servers": broker.bootstrap_servers}) as admin:
        admin.create_topics([NewTopic("mixed", 6, 1)])
    produce(broker.bootstrap_servers, "mixed", 0, 600)
    ck_got: list[int] = []
    ck_parts: set = set()
    stop = threading.Event()

    def run_confluent():
        c = CKConsumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "g-mixed",
                        "auto.offset.reset": "earliest", "partition.assignment.strategy": "range",
                        "heartbeat.interval.ms": 200, "session.timeout.ms": 6000})
        c.subscribe(["mixed"], on_assign=lambda _c, ps: ck_parts.update((p.topic, p.partition) for p in ps),
                    on_revoke=lambda _c, ps: ck_parts.clear())
        while not stop.is_set():
            m = c.poll(0.05)
            if m is not None and not m.error():
                ck_got.append(int(m.value()))
        c.close()

    thread = threading.Thread(target=run_confluent)
    thread.start()
    g = Group()
    try:
        samsa_member = g.add("samsa", member(broker, "g-mixed", "range"), "mixed")
        g.pump(lambda: len(samsa_member.assignment()) == 3 and len(ck_parts) == 3
               and len(g.values()) + len(ck_got) >= 600, timeout=45)
        ours = {(tp.topic, tp.partition) for tp in samsa_member.assignment()}
        assert ours.isdisjoint(ck_parts) and len(ours | ck_parts) == 6
        assert sorted(g.values() + ck_got) == list(range(600))
    finally:
        stop.set()
        thread.join(30)
        g.close_all()
