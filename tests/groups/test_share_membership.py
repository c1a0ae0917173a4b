"""Share groups (KIP-932): ShareGroupHeartbeat and ShareGroupDescribe over TCP, by hand.

Several members of one share group heartbeat to a real broker process; the simple assignor
spreads the partitions and, with more members than partitions, shares them; members leave
(epoch -1) or stop heartbeating (session expiry); the group shows in ListGroups (type
"share"), DescribeGroups and ShareGroupDescribe; an empty share group is deleted; a share
group id is refused to consumer-protocol and classic members; the group survives a restart
of its coordinator. Kafka's own answers to the same requests are compared in
tests/differential/test_share_groups_diff.py.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest

from broker_process import free_port
from group_helpers import Raw, create_topic, wait_until

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "metrics"))
from scrape import scrape, value  # noqa: E402

GROUP_ID_NOT_FOUND, INVALID_REQUEST, UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH = 69, 42, 25, 110
GROUP_MAX_SIZE_REACHED, NON_EMPTY_GROUP, INCONSISTENT_GROUP_PROTOCOL = 81, 68, 23


def hb(raw: Raw, group: str, member: str, epoch: int, topics: list[str] | None = None, **kw) -> dict:
    body = {"group_id": group, "member_id": member, "member_epoch": epoch, "rack_id": None,
            "subscribed_topic_names": topics}
    body.update(kw)
    return raw.call(76, 1, body)


def describe(raw: Raw, group: str) -> dict:
    return raw.call(77, 1, {"group_ids": [group], "include_authorized_operations": False})["groups"][0]


def topic_id(raw: Raw, topic: str) -> bytes:
    md = raw.call(3, 12, {"topics": [{"topic_id": b"\0" * 16, "name": topic}], "allow_auto_topic_creation": False,
                          "include_topic_authorized_operations": False})
    return md["topics"][0]["topic_id"]


def parts(r: dict) -> set[tuple[bytes, int]]:
    return {(tp["topic_id"], p) for tp in (r["assignment"] or {"topic_partitions": []})["topic_partitions"]
            for p in tp["partitions"]}


def new_member() -> str:
    return str(uuid.uuid4())


@pytest.fixture
def env(gbroker, names):
    topic, group = names
    create_topic(gbroker.bootstrap, topic, 4)
    raw = Raw(gbroker.port)
    wait_until(lambda: raw.call(10, 3, {"key": group, "key_type": 0})["error_code"] == 0, what="a coordinator")
    yield raw, topic, group
    raw.close()


class Member:
    """One share member heartbeating by hand: what it holds after each answer."""

    def __init__(self, raw: Raw, group: str, topics: list[str]):
        self.raw, self.group, self.topics = raw, group, topics
        self.id, self.epoch, self.held = new_member(), 0, set()

    def beat(self) -> dict:
        r = hb(self.raw, self.group, self.id, self.epoch, self.topics if self.epoch == 0 else None)
        assert r["error_code"] == 0, r
        self.epoch = r["member_epoch"]
        if r["assignment"] is not None:
            self.held = parts(r)
        return r

    def leave(self) -> dict:
        return hb(self.raw, self.group, self.id, -1)


def settle(members: list[Member]) -> None:
    """Heartbeat every member until all are at the group's assignment epoch."""
    def done():
        for m in members:
            m.beat()
        d = describe(members[0].raw, members[0].group)
        return d["group_state"] == "Stable" and all(m.epoch == d["assignment_epoch"] for m in members)
    wait_until(done, what="the share group stable")


def test_members_share_partitions(env):
    raw, topic, group = env
    tid = topic_id(raw, topic)
    a = Member(raw, group, [topic])
    first = a.beat()
    assert first["member_id"] == a.id and first["heartbeat_interval_ms"] == 300 and first["member_epoch"] >= 1
    assert a.held == {(tid, p) for p in range(4)}           # alone: every partition
    b, c = Member(raw, group, [topic]), Member(raw, group, [topic])
    b.beat(), c.beat()
    settle([a, b, c])
    # three members, four partitions: each partition to one member, 1 or 2 each
    assert sorted(len(m.held) for m in (a, b, c)) == [1, 1, 2]
    assert set().union(a.held, b.held, c.held) == {(tid, p) for p in range(4)}
    more = [Member(raw, group, [topic]) for _ in range(3)]   # six members, four partitions: shared
    for m in more:
        m.beat()
    everyone = [a, b, c, *more]
    settle(everyone)
    assert all(len(m.held) >= 1 for m in everyone)
    assert set().union(*(m.held for m in everyone)) == {(tid, p) for p in range(4)}
    d = describe(raw, group)
    assert d["error_code"] == 0 and d["group_state"] == "Stable" and d["assignor_name"] == "simple"
    assert {m["member_id"] for m in d["members"]} == {m.id for m in everyone}
    for dm in d["members"]:
        mine = next(m for m in everyone if m.id == dm["member_id"])
        assert dm["member_epoch"] == mine.epoch and dm["subscribed_topic_names"] == [topic]
        assert dm["client_id"] == "groups-raw" and dm["client_host"].startswith("/127.0.0.1")
        got = {(tp["topic_id"], p) for tp in dm["assignment"]["topic_partitions"] for p in tp["partitions"]}
        assert got == mine.held and all(tp["topic_name"] == topic for tp in dm["assignment"]["topic_partitions"])
    # group.share.max.size (6 here) reached
    assert hb(raw, group, new_member(), 0, [topic])["error_code"] == GROUP_MAX_SIZE_REACHED
    # a member leaves: epoch -1 back, the others take its partitions
    gone = more.pop()
    left = gone.leave()
    assert (left["error_code"], left["member_epoch"]) == (0, -1)
    everyone.remove(gone)
    settle(everyone)
    assert gone.id not in {m["member_id"] for m in describe(raw, group)["members"]}


def test_session_expiry_and_late_topic(env, gbroker):
    raw, topic, group = env
    later = topic + "-later"
    a, b = Member(raw, group, [topic, later]), Member(raw, group, [topic])
    a.beat(), b.beat()
    settle([a, b])
    assert {t for t, _ in a.held | b.held} == {topic_id(raw, topic)}
    # a topic subscribed to before it exists joins the assignment once created
    create_topic(gbroker.bootstrap, later, 2)
    later_id = topic_id(raw, later)

    def got_later():
        a.beat(), b.beat()
        return any(t == later_id for t, _ in a.held)
    wait_until(got_later, what="the later topic assigned")
    assert not any(t == later_id for t, _ in b.held)          # b does not subscribe to it
    # b stops heartbeating: its session (3 s here) expires and a gets every partition
    def alone():
        a.beat()
        return [m["member_id"] for m in describe(raw, group)["members"]] == [a.id]
    wait_until(alone, what="b expired", timeout=30)
    settle([a])
    assert len(a.held) == 6
    # b heartbeats again: it is no longer a member
    r = hb(raw, group, b.id, b.epoch)
    assert r["error_code"] == UNKNOWN_MEMBER_ID


def test_heartbeat_errors(env):
    raw, topic, group = env
    m = new_member()
    assert hb(raw, group, "", 0, [topic])["error_code"] == INVALID_REQUEST
    r = hb(raw, group, m, 0, None)
    assert (r["error_code"], r["error_message"]) == (INVALID_REQUEST, "SubscribedTopicNames must be set in first request.")
    assert hb(raw, group, m, 0, [])["error_code"] == INVALID_REQUEST
    assert hb(raw, group, m, -2)["error_code"] == INVALID_REQUEST
    # an unknown group (tests/differential checks Kafka's words)
    assert (hb(raw, group, m, 3)["error_message"], hb(raw, group, m, -1)["error_message"]) == (
        f"Share group {group} not found.", f"Group {group} not found.")
    assert hb(raw, group, m, 3)["error_code"] == GROUP_ID_NOT_FOUND
    joined = hb(raw, group, m, 0, [topic])
    assert joined["error_code"] == 0
    r = hb(raw, group, m, joined["member_epoch"] + 5)
    assert r["error_code"] == FENCED_MEMBER_EPOCH
    assert hb(raw, group, new_member(), 2)["error_code"] == UNKNOWN_MEMBER_ID
    assert describe(raw, "no-such-share-group")["error_code"] == GROUP_ID_NOT_FOUND


def test_group_apis_and_kinds(env):
    raw, topic, group = env
    a = Member(raw, group, [topic])
    a.beat()
    listed = raw.call(16, 5, {"states_filter": [], "types_filter": ["share"]})["groups"]
    assert {"group_id": group, "protocol_type": "share", "group_state": "Stable", "group_type": "share"} in listed
    assert all(g["group_type"] == "share" for g in listed)
    assert not [g for g in raw.call(16, 5, {"states_filter": ["Empty"], "types_filter": ["share"]})["groups"]
                if g["group_id"] == group]
    # DescribeGroups (classic) of a share group: Kafka's GROUP_ID_NOT_FOUND, "not a classic group"
    dg = raw.call(15, 6, {"groups": [group], "include_authorized_operations": False})["groups"][0]
    assert (dg["error_code"], dg["group_state"]) == (GROUP_ID_NOT_FOUND, "Dead")
    dg = raw.call(15, 5, {"groups": [group], "include_authorized_operations": False})["groups"][0]
    assert (dg["error_code"], dg["group_state"]) == (0, "Dead")  # before v6: Dead, no error
    # a consumer-protocol member and a classic member are refused
    c = raw.call(68, 1, {"group_id": group, "member_id": new_member(), "member_epoch": 0, "instance_id": None,
                         "rack_id": None, "rebalance_timeout_ms": 30000, "subscribed_topic_names": [topic],
                         "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": []})
    assert (c["error_code"], c["error_message"]) == (GROUP_ID_NOT_FOUND, f"Group {group} is not a consumer group.")
    j = raw.call(11, 5, {"group_id": group, "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000,
                         "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                         "protocols": [{"name": "range", "metadata": b""}]})
    assert j["error_code"] == INCONSISTENT_GROUP_PROTOCOL
    # ... and a consumer group's id is refused to a share member
    cgroup = group + "-consumer"
    assert raw.call(10, 3, {"key": cgroup, "key_type": 0})["error_code"] == 0
    c = raw.call(68, 1, {"group_id": cgroup, "member_id": new_member(), "member_epoch": 0, "instance_id": None,
                         "rack_id": None, "rebalance_timeout_ms": 30000, "subscribed_topic_names": [topic],
                         "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": []})
    if c["error_code"] == 0:  # (the consumer group lives on this broker: one broker here)
        r = hb(raw, cgroup, new_member(), 0, [topic])
        assert (r["error_code"], r["error_message"]) == (GROUP_ID_NOT_FOUND, f"Group {cgroup} is not a share group.")
        d = describe(raw, cgroup)
        assert d["error_code"] == GROUP_ID_NOT_FOUND
    # DeleteGroups: refused with a member, done once empty
    assert raw.call(42, 2, {"groups_names": [group]})["results"][0]["error_code"] == NON_EMPTY_GROUP
    assert a.leave()["error_code"] == 0
    assert describe(raw, group)["group_state"] == "Empty"
    assert raw.call(42, 2, {"groups_names": [group]})["results"][0]["error_code"] == 0
    assert describe(raw, group)["error_code"] == GROUP_ID_NOT_FOUND
    assert group not in {g["group_id"] for g in raw.call(16, 5, {"states_filter": [], "types_filter": []})["groups"]}


def test_share_group_survives_restart(own_broker, names):
    """... and its broker's metrics count it (Kafka 4's group-coordinator-metrics names)."""
    topic, group = names
    metrics_port = free_port()
    b = own_broker(**{"prometheus.listener": f"http://127.0.0.1:{metrics_port}"})
    create_topic(b.bootstrap, topic, 2)
    raw = Raw(b.port)
    wait_until(lambda: raw.call(10, 3, {"key": group, "key_type": 0})["error_code"] == 0, what="a coordinator")
    a, c = Member(raw, group, [topic]), Member(raw, group, [topic])
    a.beat(), c.beat()
    settle([a, c])
    before = describe(raw, group)
    m = scrape(f"http://127.0.0.1:{metrics_port}/metrics")
    assert value(m, "kafka_server_group_coordinator_metrics_group_count", protocol="share") == 1
    assert value(m, "kafka_server_group_coordinator_metrics_share_group_count", state="stable") == 1
    assert value(m, "kafka_server_group_coordinator_metrics_share_group_rebalance_total") >= 2
    raw.close()
    b.kill()
    b.start()
    raw = Raw(b.port)
    try:
        after = wait_until(lambda: (d := describe(raw, group))["error_code"] == 0 and d, what="the group reloaded")
        for k in ("group_state", "group_epoch", "assignment_epoch", "assignor_name"):
            assert after[k] == before[k], k
        strip = lambda d: sorted((m["member_id"], m["member_epoch"], m["subscribed_topic_names"],  # noqa: E731
                                  str(m["assignment"])) for m in d["members"])
        assert strip(after) == strip(before)
        # the members carry on at their epochs
        a.raw = c.raw = raw
        a.beat(), c.beat()
        assert describe(raw, group)["group_epoch"] == before["group_epoch"]
    finally:
        raw.close()
