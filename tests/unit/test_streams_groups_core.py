"""Streams groups (KIP-1071) without a broker, sockets or clocks: the topology made concrete
(streams_topology.configure), the sticky task assignor, and the StreamsGroups driver on a manual
scheduler (join, internal topics created, initial delay, revocation before reassignment, session
timeout, leave, records replayed)."""

from __future__ import annotations

from dataclasses import dataclass, field

from samsa.coordinator.groups import streams_topology as st
from samsa.coordinator.groups.assignors import StreamsMemberSpec, sticky_tasks
from samsa.coordinator.groups.streams_groups import StreamsGroups, StreamsHeartbeat
from samsa.protocol import errors
from samsa.protocol import group_records as gr


def topology(source: str = "in", app: str = "app", epoch: int = 0) -> dict:
    return {"epoch": epoch, "subtopologies": [
        {"subtopology_id": "0", "source_topics": [source], "repartition_sink_topics": [f"{app}-rep"],
         "state_changelog_topics": [], "repartition_source_topics": [], "copartition_groups": []},
        {"subtopology_id": "1", "source_topics": [], "repartition_sink_topics": [],
         "state_changelog_topics": [{"name": f"{app}-store-changelog", "partitions": 0, "replication_factor": 0,
                                     "topic_configs": [{"key": "cleanup.policy", "value": "compact"}]}],
         "repartition_source_topics": [{"name": f"{app}-rep", "partitions": 0, "replication_factor": 0,
                                        "topic_configs": []}], "copartition_groups": []}]}


# ---------------------------------------------------------------- the topology

def test_configure_derives_partition_counts_and_internal_topics():
    c = st.configure(topology(), {"in": 3})
    assert c.error is None and c.tasks == {"0": 3, "1": 3}
    assert c.partitions == {"app-rep": 3, "app-store-changelog": 3}
    assert [(t.name, t.partitions, t.configs) for t in c.to_create] == [
        ("app-rep", 3, ()), ("app-store-changelog", 3, (("cleanup.policy", "compact"),))]
    assert not c.ready
    assert st.configure(topology(), {"in": 3, "app-rep": 3, "app-store-changelog": 3}).ready


def test_configure_missing_source_and_wrongly_partitioned():
    assert st.configure(topology(), {}).error == (st.MISSING_SOURCE_TOPICS, "Source topics in are missing.")
    c = st.configure(topology(), {"in": 3, "app-rep": 2})
    assert c.error is not None and c.error[0] == st.INCORRECTLY_PARTITIONED_TOPICS
    t = topology()
    t["subtopologies"][0]["source_topics"] = ["a", "b"]
    t["subtopologies"][0]["copartition_groups"] = [{"source_topics": [0, 1], "source_topic_regex": [],
                                                    "repartition_source_topics": []}]
    assert st.configure(t, {"a": 2, "b": 3}).error == (
        st.INCORRECTLY_PARTITIONED_TOPICS, "Following topics do not have the same number of partitions: [a, b]")


# ---------------------------------------------------------------- the assignor

def test_sticky_tasks_balances_spreads_and_sticks():
    first = sticky_tasks({"a": StreamsMemberSpec("p1"), "b": StreamsMemberSpec("p2")}, {"0": 2, "1": 2}, 0)
    assert {m: sorted(a) for m, (a, _) in first.items()} == {"a": [("0", 0), ("1", 0)], "b": [("0", 1), ("1", 1)]}
    # a third member: the two keep what they can, every task once
    specs = {m: StreamsMemberSpec(f"p-{m}", first[m][0]) for m in first}
    specs["c"] = StreamsMemberSpec("p-c")
    second = sticky_tasks(specs, {"0": 2, "1": 2}, 0)
    every = sorted(t for a, _ in second.values() for t in a)
    assert every == [("0", 0), ("0", 1), ("1", 0), ("1", 1)]
    assert sorted(len(a) for a, _ in second.values()) == [1, 1, 2]
    assert all(second[m][0] <= first[m][0] for m in ("a", "b"))


def test_sticky_standbys_only_of_stateful_tasks_on_other_processes():
    out = sticky_tasks({"a": StreamsMemberSpec("p1"), "b": StreamsMemberSpec("p1"), "c": StreamsMemberSpec("p2")},
                       {"0": 2, "1": 2}, 1, frozenset({"1"}))
    owner = {t: m for m, (a, _) in out.items() for t in a}
    process = {"a": "p1", "b": "p1", "c": "p2"}
    standbys = [(t, m) for m, (_, s) in out.items() for t in s]
    assert sorted(t for t, _ in standbys) == [("1", 0), ("1", 1)]
    assert all(process[m] != process[owner[t]] for t, m in standbys)


# ---------------------------------------------------------------- the driver, on a manual clock

@dataclass
class Timer:
    at: float
    fn: object
    args: tuple
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


@dataclass
class Clock:
    now: float = 0.0
    timers: list = field(default_factory=list)

    def time(self) -> float:
        return self.now

    def call_later(self, delay, fn, *args):
        t = Timer(self.now + delay, fn, args)
        self.timers.append(t)
        return t

    def advance(self, seconds: float) -> None:
        self.now += seconds
        for t in sorted(self.timers, key=lambda t: t.at):
            if t.at <= self.now and not t.cancelled and t in self.timers:
                self.timers.remove(t)
                t.fn(*t.args)


@dataclass
class Topic:
    topic_id: bytes
    partitions: dict


CONFIG = {"group.streams.session.timeout.ms": 45000, "group.streams.heartbeat.interval.ms": 5000,
          "group.streams.max.size": 10, "group.streams.num.standby.replicas": 0,
          "group.streams.initial.rebalance.delay.ms": 3000, "group.streams.assignment.interval.ms": 0}


class World:
    def __init__(self, **config):
        self.clock = Clock()
        self.topics = {"in": Topic(b"\x01" * 16, {0: None, 1: None})}
        self.written: list = []
        self.created: list = []
        cfg = {**CONFIG, **config}
        self.groups = StreamsGroups(self.clock, cfg.__getitem__, lambda: self.topics,
                                    lambda g, entries: self.written.extend(entries), create_topic=self.create)

    def create(self, t: st.InternalTopic) -> None:
        if t.name in self.topics:
            raise errors.TopicAlreadyExistsError(f"Topic '{t.name}' already exists.")
        self.created.append(t.name)
        self.topics[t.name] = Topic(bytes([len(self.topics) + 1]) * 16, {p: None for p in range(t.partitions)})

    def hb(self, member: str, epoch: int, owned: dict | None = None, **kw):
        joining = epoch == 0
        tasks = None if owned is None else [{"subtopology_id": s, "partitions": sorted(ps)} for s, ps in owned.items()]
        req = StreamsHeartbeat("app", member, epoch, rebalance_timeout_ms=30000 if joining else -1,
                               topology=topology() if joining else None,
                               active_tasks=[] if joining else tasks, standby_tasks=[] if joining else
                               (None if owned is None else []), warmup_tasks=[] if joining else
                               (None if owned is None else []),
                               **{"process_id": f"p-{member}" if joining else None, **kw})
        result, entries = self.groups.streams_heartbeat(req)
        self.written.extend(entries)
        return result


def active(result) -> dict:
    return {sub: set(ps) for (kind, sub), ps in (result.tasks or {}).items() if kind == "active"}


def test_join_creates_internal_topics_waits_the_initial_delay_then_assigns():
    w = World()
    r = w.hb("a", 0)
    assert r.error == 0 and r.member_epoch == 1 and r.tasks == {}
    assert w.created == ["app-rep", "app-store-changelog"]
    assert [c for c, _ in r.status] == [st.ASSIGNMENT_DELAYED]
    assert w.groups.describe("app").state == "Stable"  # nothing to reconcile yet
    w.clock.advance(3)
    r = w.hb("a", r.member_epoch)
    assert r.member_epoch == 2 and active(r) == {"0": {0, 1}, "1": {0, 1}} and r.status == []


def test_second_member_waits_for_revocation():
    w = World(**{"group.streams.initial.rebalance.delay.ms": 0})
    a = w.hb("a", 0)
    assert active(a) == {"0": {0, 1}, "1": {0, 1}}
    b = w.hb("b", 0)
    assert b.member_epoch == a.member_epoch + 1 and b.tasks == {}
    # a is told to give up half, at its old epoch
    a2 = w.hb("a", a.member_epoch)
    assert a2.member_epoch == a.member_epoch and active(a2) == {"0": {0}, "1": {0}}
    # b cannot have them until a says it let them go
    b2 = w.hb("b", b.member_epoch)
    assert b2.tasks is None and w.groups.describe("app").state == "Reconciling"
    a3 = w.hb("a", a2.member_epoch, {"0": {0}, "1": {0}})
    assert a3.member_epoch == b.member_epoch
    b3 = w.hb("b", b2.member_epoch)
    assert active(b3) == {"0": {1}, "1": {1}} and w.groups.describe("app").state == "Stable"
    # b stops heartbeating: its session times out, a (still heartbeating) gets everything back
    w.clock.advance(30)
    a4 = w.hb("a", a3.member_epoch)
    w.clock.advance(16)
    assert set(w.groups.groups["app"].members) == {"a"}
    a5 = w.hb("a", a4.member_epoch)
    assert a5.member_epoch > a4.member_epoch and active(a5) == {"0": {0, 1}, "1": {0, 1}}


def test_validation_and_fencing_as_kafka():
    w = World()
    assert w.hb("a", -3).message == "MemberEpoch is -3, but must be greater than or equal to -2."
    assert w.hb("a", 5).error == errors.E_GROUP_ID_NOT_FOUND
    r = w.hb("a", 0)
    assert w.hb("a", r.member_epoch + 1).error == errors.E_FENCED_MEMBER_EPOCH
    assert w.hb("x", r.member_epoch).error == errors.E_UNKNOWN_MEMBER_ID
    assert w.hb("a", -1).member_epoch == -1
    assert w.hb("a", -1).error == errors.E_UNKNOWN_MEMBER_ID


def test_records_replay_the_group():
    w = World(**{"group.streams.initial.rebalance.delay.ms": 0})
    a = w.hb("a", 0)
    latest: dict = {}
    for key, value in w.written:
        parsed = gr.parse_consumer_key(key)
        assert parsed is not None and parsed[0].startswith("StreamsGroup")
        if value is None:
            latest.pop(parsed, None)
        else:
            latest[parsed] = gr.parse_consumer_value(parsed[0], value)
    other = World()
    other.topics = w.topics
    other.groups.load(latest)
    before, after = w.groups.describe("app"), other.groups.describe("app")
    assert (after.state, after.group_epoch, after.assignment_epoch, after.topology) == (
        before.state, before.group_epoch, before.assignment_epoch, before.topology)
    m = other.groups.groups["app"].members["a"]
    assert m.member_epoch == a.member_epoch and m.process_id == "p-a"
    assert {sub: set(ps) for (k, sub), ps in m.assigned.items()} == active(a)


def test_static_member_leaves_for_a_while_and_comes_back():
    w = World(**{"group.streams.initial.rebalance.delay.ms": 0})
    a = w.hb("a", 0, instance_id="inst-a")
    epoch = w.groups.groups["app"].group_epoch
    assert w.hb("a", -2, instance_id="inst-a").member_epoch == -2
    # its place and tasks are kept: no new group epoch, and another member may not take the instance id
    assert w.groups.groups["app"].group_epoch == epoch
    # the instance id back under a new member id: its predecessor's tasks, at its epoch
    back = w.hb("a3", 0, instance_id="inst-a", process_id="p-a")
    assert back.error == 0 and back.member_epoch == a.member_epoch
    assert set(w.groups.groups["app"].members) == {"a3"} and w.groups.groups["app"].group_epoch == epoch
    held = w.groups.groups["app"].members["a3"].assigned
    assert {s: set(ps) for (k, s), ps in held.items() if k == "active"} == active(a)
    assert w.hb("a4", 0, instance_id="inst-a").error == errors.E_UNRELEASED_INSTANCE_ID


def test_source_topic_regex_matches_existing_topics():
    t = topology()
    t["subtopologies"][0]["source_topics"] = []
    t["subtopologies"][0]["source_topic_regex"] = ["in-.*"]
    c = st.configure(t, {"in-a": 2, "in-b": 4, "other": 8, "__consumer_offsets": 50})
    assert c.tasks == {"0": 4, "1": 4} and c.partitions["app-rep"] == 4
    assert st.topic_names(t, {"in-a": 2, "in-b": 4, "other": 8}) == {"in-a", "in-b", "app-rep", "app-store-changelog"}
