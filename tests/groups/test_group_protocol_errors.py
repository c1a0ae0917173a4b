"""Group requests that Kafka refuses, sent by hand on raw sockets: the broker answers with Kafka's
error code, the group stays consistent, and afterwards the broker still serves a well-behaved
client (a confluent-kafka producer and group consumer) and logged no internal error.

The broker of this module allows sessions in [1000, 30000] ms and groups of at most 3 members.
"""

from __future__ import annotations

import itertools
import socket
import time

import pytest
from confluent_kafka import Consumer

from group_helpers import (DELETE_GROUPS, FIND_COORDINATOR, FAST, GROUP_BROKER, GROUP_ID_NOT_FOUND,
                           GROUP_MAX_SIZE_REACHED, GROUP_SUBSCRIBED_TO_TOPIC, ILLEGAL_GENERATION,
                           INCONSISTENT_GROUP_PROTOCOL, INVALID_GROUP_ID, INVALID_SESSION_TIMEOUT, JOIN_GROUP,
                           LEAVE_GROUP, MEMBER_ID_REQUIRED, NON_EMPTY_GROUP, NONE, OFFSET_DELETE,
                           OFFSET_METADATA_TOO_LARGE, REBALANCE_IN_PROGRESS, SYNC_GROUP, UNKNOWN_MEMBER_ID,
                           UNKNOWN_TOPIC_OR_PARTITION, WAIT, BrokerProcess, GroupClient, assignment, create_topic,
                           parse_assignment, producer, stable_raw_group, subscription, wait_until)

MAX_SIZE = 3
_canary = itertools.count()


@pytest.fixture(scope="module")
def eb(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("group-errors"), **{
        **GROUP_BROKER, "group.max.session.timeout.ms": 30000, "group.max.size": MAX_SIZE,
        "num.partitions": 2}).start()
    create_topic(b.bootstrap, "t", 2)
    create_topic(b.bootstrap, "canary", 1)
    b.canary = []
    # as clients do, ask for a coordinator first (this creates __consumer_offsets)
    c = GroupClient(b.port)
    wait_until(lambda: c.call(FIND_COORDINATOR, 3, {"key": "any", "key_type": 0})["error_code"] == NONE,
               what="a group coordinator")
    c.close()
    yield b
    b.kill()


@pytest.fixture(autouse=True)
def healthy_after(eb):
    """After each test: a confluent producer and group consumer work; no traceback in the log."""
    log_before = len(eb.log_text())
    yield
    assert eb.proc.poll() is None, "the broker process died"
    p = producer(eb.bootstrap)
    value = b"canary-%d" % len(eb.canary)
    p.produce("canary", value=value)
    assert p.flush(WAIT) == 0
    eb.canary.append(value)
    c = Consumer({"bootstrap.servers": eb.bootstrap, "group.id": f"canary-{next(_canary)}", **FAST})
    try:
        c.subscribe(["canary"])
        got = []

        def read_all():
            m = c.poll(0.2)
            if m is not None and not m.error():
                got.append(m.value())
            return len(got) >= len(eb.canary)
        wait_until(read_all, what="the canary records through a consumer group")
        assert got == eb.canary
        c.commit(asynchronous=False)
    finally:
        c.close()
    new_log = eb.log_text()[log_before:]
    assert "Traceback" not in new_log, f"internal error in the broker:\n{new_log}"


@pytest.fixture
def group(names):
    return names[1]


# ------------------------------------------------------------------ generation / member checks


def test_wrong_generation(eb, group):
    (c,), (mid,), gen, _ = stable_raw_group(eb.port, group)
    assert c.heartbeat(group, gen + 1, mid) == ILLEGAL_GENERATION
    assert c.heartbeat(group, gen - 1, mid) == ILLEGAL_GENERATION
    assert c.sync(group, gen + 1, mid)["error_code"] == ILLEGAL_GENERATION
    assert c.commit(group, {("t", 0): 1}, generation=gen + 1, member_id=mid)[("t", 0)] == ILLEGAL_GENERATION
    # the right generation still works
    assert c.heartbeat(group, gen, mid) == NONE
    s = c.sync(group, gen, mid)
    assert s["error_code"] == NONE and parse_assignment(s["assignment"]) == {"t": [0]}
    assert c.commit(group, {("t", 0): 1}, generation=gen, member_id=mid)[("t", 0)] == NONE
    assert c.describe(group)["group_state"] == "Stable"


def test_unknown_member(eb, group):
    (c,), (mid,), gen, _ = stable_raw_group(eb.port, group)
    assert c.heartbeat(group, gen, "nobody") == UNKNOWN_MEMBER_ID
    assert c.sync(group, gen, "nobody")["error_code"] == UNKNOWN_MEMBER_ID
    assert c.join(group, "nobody")["error_code"] == UNKNOWN_MEMBER_ID
    assert c.commit(group, {("t", 0): 1}, generation=gen, member_id="nobody")[("t", 0)] == UNKNOWN_MEMBER_ID
    # a commit without a member (generation -1) to a group that has members
    assert c.commit(group, {("t", 0): 1})[("t", 0)] == UNKNOWN_MEMBER_ID
    r = c.leave(group, "nobody")
    assert r["members"][0]["error_code"] == UNKNOWN_MEMBER_ID
    # a group nobody ever joined
    assert c.heartbeat(group + "-none", 1, "nobody") == UNKNOWN_MEMBER_ID
    # the real member is untouched
    assert c.heartbeat(group, gen, mid) == NONE
    d = c.describe(group)
    assert d["group_state"] == "Stable" and [m["member_id"] for m in d["members"]] == [mid]


def test_leave_unknown_group(eb, group):
    """LeaveGroup v3+ for a group that does not exist: Kafka answers NONE at the top level and
    UNKNOWN_MEMBER_ID for the member (GroupCoordinator.handleLeaveGroup)."""
    c = GroupClient(eb.port)
    r = c.leave(group + "-never", "nobody")
    assert r["members"][0]["error_code"] == UNKNOWN_MEMBER_ID
    assert r["error_code"] == NONE


def test_heartbeat_after_session_expired(eb, group):
    (c,), (mid,), gen, _ = stable_raw_group(eb.port, group, session_ms=1000)
    # no heartbeats: the coordinator drops the member after its 1 s session
    wait_until(lambda: c.describe(group)["group_state"] == "Empty", what="the member's session to expire")
    assert c.heartbeat(group, gen, mid) == UNKNOWN_MEMBER_ID
    assert c.sync(group, gen, mid)["error_code"] == UNKNOWN_MEMBER_ID
    assert c.commit(group, {("t", 0): 3}, generation=gen, member_id=mid)[("t", 0)] in (UNKNOWN_MEMBER_ID,
                                                                                      ILLEGAL_GENERATION)
    # it can join again as a new member
    r = c.join_new(group)
    assert r["error_code"] == NONE and r["member_id"] != mid and r["generation_id"] > gen


def test_heartbeat_during_rebalance(eb, group):
    (c1,), (m1,), gen, _ = stable_raw_group(eb.port, group)
    c2 = GroupClient(eb.port)
    r = c2.join(group, "")
    assert r["error_code"] == MEMBER_ID_REQUIRED
    cid = c2.join_send(group, r["member_id"])          # parked: the group waits for member 1
    wait_until(lambda: c1.describe(group)["group_state"] == "PreparingRebalance", what="the rebalance to start")
    assert c1.heartbeat(group, gen, m1) == REBALANCE_IN_PROGRESS
    j1 = c1.join(group, m1)
    j2 = c2.recv(JOIN_GROUP, 5, cid)
    assert j1["error_code"] == j2["error_code"] == NONE
    assert j1["generation_id"] == j2["generation_id"] == gen + 1


def test_assignment_of_nonexistent_partition_is_passed_through(eb, group):
    """Kafka does not look inside classic-protocol assignments: the leader's bytes go to the member."""
    c = GroupClient(eb.port)
    r = c.join_new(group)
    mid, gen = r["member_id"], r["generation_id"]
    bogus = assignment({"t": [0, 77], "no-such-topic": [3]})
    s = c.sync(group, gen, mid, {mid: bogus})
    assert s["error_code"] == NONE
    assert s["assignment"] == bogus
    d = c.describe(group)
    assert d["group_state"] == "Stable"
    assert d["members"][0]["member_assignment"] == bogus
    assert c.heartbeat(group, gen, mid) == NONE
    # and the follower of a two-member group gets exactly the bytes the leader named for it
    c2 = GroupClient(eb.port)
    r2 = c2.join(group, "")
    cid = c2.join_send(group, r2["member_id"])
    j1 = c.join(group, mid)
    j2 = c2.recv(JOIN_GROUP, 5, cid)
    gen = j1["generation_id"]
    leader = j1["leader"]
    assert leader == mid and len(j1["members"]) == 2
    opaque = b"\x00\x07not a consumer assignment at all"
    sync_cid = c2.send(SYNC_GROUP, 3, {"group_id": group, "generation_id": gen, "member_id": j2["member_id"],
                                       "group_instance_id": None, "assignments": []})
    assert c.sync(group, gen, mid, {mid: bogus, j2["member_id"]: opaque})["error_code"] == NONE
    s2 = c2.recv(SYNC_GROUP, 3, sync_cid)
    assert s2["error_code"] == NONE and s2["assignment"] == opaque
    assert c.describe(group)["group_state"] == "Stable"


def test_leader_assignment_missing_a_member_gives_it_empty_bytes(eb, group):
    clients, ids, gen, leader = stable_raw_group(eb.port, group, n=2)
    # a new generation (the leader rejoining starts it; a follower rejoining a Stable group with
    # unchanged metadata would just get the current generation back), in which the leader
    # assigns only itself
    cid = clients[0].join_send(group, ids[0])
    wait_until(lambda: clients[1].describe(group)["group_state"] == "PreparingRebalance",
               what="the leader's rejoin to start a rebalance")
    j1 = clients[1].join(group, ids[1])
    j0 = clients[0].recv(JOIN_GROUP, 5, cid)
    gen = j0["generation_id"]
    assert j1["generation_id"] == gen
    sync_cid = clients[1].send(SYNC_GROUP, 3, {"group_id": group, "generation_id": gen, "member_id": ids[1],
                                               "group_instance_id": None, "assignments": []})
    assert clients[0].sync(group, gen, ids[0], {ids[0]: assignment({"t": [0, 1]})})["error_code"] == NONE
    s1 = clients[1].recv(SYNC_GROUP, 3, sync_cid)
    assert s1["error_code"] == NONE and s1["assignment"] == b""
    assert clients[0].describe(group)["group_state"] == "Stable"


# ------------------------------------------------------------------ offsets


def test_commit_unknown_topic(eb, group):
    c = GroupClient(eb.port)
    r = c.commit(group, {("no-such-topic", 0): 5, ("t", 0): 5})
    assert r[("no-such-topic", 0)] == UNKNOWN_TOPIC_OR_PARTITION
    assert r[("t", 0)] == NONE
    f = c.fetch(group, [("t", 0), ("no-such-topic", 0)])
    assert f[("t", 0)][0] == 5
    assert f[("no-such-topic", 0)][0] == -1


def test_commit_unknown_partition_of_known_topic(eb, group):
    """Kafka checks the partition too (KafkaApis.handleOffsetCommitRequest: metadataCache.contains(tp))."""
    c = GroupClient(eb.port)
    r = c.commit(group, {("t", 99): 5, ("t", 1): 5})
    assert r[("t", 1)] == NONE
    assert r[("t", 99)] == UNKNOWN_TOPIC_OR_PARTITION
    assert c.fetch(group, [("t", 99)])[("t", 99)][0] == -1


def test_commit_metadata_too_large(eb, group):
    c = GroupClient(eb.port)
    r = c.commit(group, {("t", 0): 7}, metadata="x" * 4097)
    assert r[("t", 0)] == OFFSET_METADATA_TOO_LARGE
    assert c.fetch(group, [("t", 0)])[("t", 0)][0] == -1, "nothing was stored"
    r = c.commit(group, {("t", 0): 7}, metadata="y" * 4096)
    assert r[("t", 0)] == NONE
    assert c.fetch(group, [("t", 0)])[("t", 0)][:3] == (7, -1, "y" * 4096)
    # the limit is in bytes (UTF-8), not characters
    r = c.commit(group, {("t", 0): 8}, metadata="é" * 2049)
    assert r[("t", 0)] == OFFSET_METADATA_TOO_LARGE
    assert c.fetch(group, [("t", 0)])[("t", 0)][0] == 7


# ------------------------------------------------------------------ JoinGroup / FindCoordinator validation


def test_empty_group_id(eb):
    c = GroupClient(eb.port)
    assert c.join("", "")["error_code"] == INVALID_GROUP_ID
    r = c.call(FIND_COORDINATOR, 3, {"key": "", "key_type": 0})
    assert r["error_code"] == INVALID_GROUP_ID
    r = c.call(FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["", "fine"]})
    codes = {x["key"]: x["error_code"] for x in r["coordinators"]}
    assert codes == {"": INVALID_GROUP_ID, "fine": NONE}
    assert c.heartbeat("", 1, "x") == INVALID_GROUP_ID
    assert c.sync("", 1, "x")["error_code"] == INVALID_GROUP_ID


def test_session_timeout_out_of_bounds(eb, group):
    c = GroupClient(eb.port)
    for session in (999, 30001):
        r = c.join(group, "", session_ms=session)
        assert r["error_code"] == INVALID_SESSION_TIMEOUT, session
    for session in (1000, 30000):
        assert c.join(group, "", session_ms=session)["error_code"] == MEMBER_ID_REQUIRED, session


def test_member_id_required_then_join(eb, group):
    c = GroupClient(eb.port)
    r = c.join(group, "", version=4)
    assert r["error_code"] == MEMBER_ID_REQUIRED
    assert r["member_id"]
    r2 = c.join(group, r["member_id"], version=4)
    assert r2["error_code"] == NONE
    assert r2["member_id"] == r["member_id"] and r2["leader"] == r["member_id"]
    assert [m["member_id"] for m in r2["members"]] == [r["member_id"]]
    # before v4 a new member is accepted at once
    old = GroupClient(eb.port)
    r3 = old.join(group + "-v3", "", version=3)
    assert r3["error_code"] == NONE and r3["member_id"] and r3["leader"] == r3["member_id"]


def test_inconsistent_group_protocol(eb, group):
    (c,), (mid,), gen, _ = stable_raw_group(eb.port, group)
    other = GroupClient(eb.port)
    meta = subscription(["t"])
    r = other.join(group, "", protocols=[("roundrobin", meta)])
    assert r["error_code"] == INCONSISTENT_GROUP_PROTOCOL
    r = other.join(group, "", protocol_type="connect")
    assert r["error_code"] == INCONSISTENT_GROUP_PROTOCOL
    assert c.heartbeat(group, gen, mid) == NONE
    assert c.describe(group)["group_state"] == "Stable"


def test_group_max_size(eb, group):
    clients, ids, gen, _ = stable_raw_group(eb.port, group, n=MAX_SIZE)
    extra = GroupClient(eb.port)
    r = extra.join(group, "")
    assert r["error_code"] == GROUP_MAX_SIZE_REACHED
    r = extra.join(group, "", version=3)
    assert r["error_code"] == GROUP_MAX_SIZE_REACHED
    # the group did not notice
    for c, mid in zip(clients, ids):
        assert c.heartbeat(group, gen, mid) == NONE
    d = clients[0].describe(group)
    assert d["group_state"] == "Stable" and len(d["members"]) == MAX_SIZE
    # once a member leaves, there is room again
    assert clients[0].leave(group, ids[0])["members"][0]["error_code"] == NONE
    r = extra.join(group, "")
    assert r["error_code"] == MEMBER_ID_REQUIRED


# ------------------------------------------------------------------ DeleteGroups / OffsetDelete


def test_delete_groups(eb, group):
    (c,), (mid,), gen, _ = stable_raw_group(eb.port, group)
    assert c.commit(group, {("t", 0): 4}, generation=gen, member_id=mid)[("t", 0)] == NONE
    r = c.call(DELETE_GROUPS, 2, {"groups_names": [group, group + "-never"]})
    codes = {x["group_id"]: x["error_code"] for x in r["results"]}
    assert codes == {group: NON_EMPTY_GROUP, group + "-never": GROUP_ID_NOT_FOUND}
    assert c.heartbeat(group, gen, mid) == NONE
    assert c.fetch(group, [("t", 0)])[("t", 0)][0] == 4
    # once empty it can be deleted, offsets and all
    assert c.leave(group, mid)["members"][0]["error_code"] == NONE
    r = c.call(DELETE_GROUPS, 2, {"groups_names": [group]})
    assert r["results"][0]["error_code"] == NONE
    assert c.fetch(group, [("t", 0)])[("t", 0)][0] == -1
    assert c.describe(group)["group_state"] == "Dead"
    r = c.call(DELETE_GROUPS, 2, {"groups_names": [group]})
    assert r["results"][0]["error_code"] == GROUP_ID_NOT_FOUND


def test_offset_delete(eb, group):
    create_topic(eb.bootstrap, group + "-other", 1)
    (c,), (mid,), gen, _ = stable_raw_group(eb.port, group, topics=("t",))
    r = c.commit(group, {("t", 0): 3, (group + "-other", 0): 9}, generation=gen, member_id=mid)
    assert set(r.values()) == {NONE}
    body = {"group_id": group, "topics": [{"name": "t", "partitions": [{"partition_index": 0}]},
                                          {"name": group + "-other", "partitions": [{"partition_index": 0}]}]}
    r = c.call(OFFSET_DELETE, 0, body)
    assert r["error_code"] == NONE
    codes = {t["name"]: t["partitions"][0]["error_code"] for t in r["topics"]}
    assert codes == {"t": GROUP_SUBSCRIBED_TO_TOPIC, group + "-other": NONE}
    f = c.fetch(group, [("t", 0), (group + "-other", 0)])
    assert f[("t", 0)][0] == 3, "the subscribed topic's offset stays"
    assert f[(group + "-other", 0)][0] == -1, "the other topic's offset is gone"
    # an unknown group
    r = c.call(OFFSET_DELETE, 0, {**body, "group_id": group + "-never"})
    assert r["error_code"] == GROUP_ID_NOT_FOUND
    # once the group is empty, the subscribed topic's offsets can go too
    assert c.leave(group, mid)["members"][0]["error_code"] == NONE
    r = c.call(OFFSET_DELETE, 0, body)
    assert r["error_code"] == NONE
    assert {t["partitions"][0]["error_code"] for t in r["topics"]} == {NONE}
    assert c.fetch(group, [("t", 0)])[("t", 0)][0] == -1


def test_offset_delete_of_partitions_that_do_not_exist(eb, group):
    c = GroupClient(eb.port)
    assert c.commit(group, {("t", 0): 5, ("t", 1): 6}) == {("t", 0): NONE, ("t", 1): NONE}
    body = {"group_id": group, "topics": [
        {"name": "t", "partitions": [{"partition_index": 0}, {"partition_index": 7}]},
        {"name": group + "-never", "partitions": [{"partition_index": 0}]}]}
    r = c.call(OFFSET_DELETE, 0, body)
    assert r["error_code"] == NONE
    codes = {(t["name"], p["partition_index"]): p["error_code"] for t in r["topics"] for p in t["partitions"]}
    assert codes == {("t", 0): NONE, ("t", 7): UNKNOWN_TOPIC_OR_PARTITION,
                     (group + "-never", 0): UNKNOWN_TOPIC_OR_PARTITION}
    f = c.fetch(group, [("t", 0), ("t", 1)])
    assert (f[("t", 0)][0], f[("t", 1)][0]) == (-1, 6)
    c.close()


def test_offset_delete_in_a_non_empty_group_of_another_protocol_type(eb, group):
    # Only a consumer group's subscriptions are known; any other group must be empty first.
    c = GroupClient(eb.port)
    assert c.commit(group, {("t", 0): 5}) == {("t", 0): NONE}
    r = c.join_new(group, protocol_type="connect", protocols=[("default", b"worker")])
    assert r["error_code"] == NONE
    member = r["member_id"]
    body = {"group_id": group, "topics": [{"name": "t", "partitions": [{"partition_index": 0}]}]}
    r = c.call(OFFSET_DELETE, 0, body)
    assert (r["error_code"], r["topics"]) == (NON_EMPTY_GROUP, [])
    assert c.fetch(group, [("t", 0)])[("t", 0)][0] == 5
    assert c.leave(group, member)["members"][0]["error_code"] == NONE
    r = c.call(OFFSET_DELETE, 0, body)
    assert r["error_code"] == NONE and r["topics"][0]["partitions"][0]["error_code"] == NONE
    c.close()


def test_requests_answer_in_the_version_asked(eb, group):
    """The same group through old and new versions of each API."""
    c = GroupClient(eb.port)
    for v in (0, 1, 2, 3):
        r = c.call(FIND_COORDINATOR, v, {"key": group, "key_type": 0})
        assert r["error_code"] == NONE and r["port"] == eb.port
    for v in (4, 5, 6):
        r = c.call(FIND_COORDINATOR, v, {"key_type": 0, "coordinator_keys": [group]})
        assert r["coordinators"][0]["error_code"] == NONE and r["coordinators"][0]["port"] == eb.port
    for v in (0, 3, 6, 7, 9):
        name = f"{group}-v{v}"
        if v >= 4:
            r = c.join(name, "", version=v)
            assert r["error_code"] == MEMBER_ID_REQUIRED
            r = c.join(name, r["member_id"], version=v)
        else:
            r = c.join(name, "", version=v)
        assert r["error_code"] == NONE, (v, r)
        mid, gen = r["member_id"], r["generation_id"]
        sv = min(v, 5)
        assert c.sync(name, gen, mid, {mid: assignment({"t": [0]})}, version=sv)["error_code"] == NONE
        assert c.heartbeat(name, gen, mid, version=min(v, 4)) == NONE
        r = c.call(LEAVE_GROUP, min(v, 2), {"group_id": name, "member_id": mid}) if v < 3 else c.leave(name, mid)
        assert r["error_code"] == NONE
    for v in (0, 2, 5, 8, 9):
        body = {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
                "retention_time_ms": -1,
                "topics": [{"name": "t", "partitions": [{"partition_index": 1, "committed_offset": 10 + v,
                                                         "committed_leader_epoch": -1, "commit_timestamp": -1,
                                                         "committed_metadata": f"v{v}"}]}]}
        r = c.call(8, v, body)
        assert r["topics"][0]["partitions"][0]["error_code"] == NONE, v
    for v in (1, 5, 7):
        f = c.fetch(group, [("t", 1)], version=v)
        assert f[("t", 1)][0] == 19 and f[("t", 1)][2] == "v9"
    r = c.call(9, 8, {"groups": [{"group_id": group, "topics": [{"name": "t", "partition_indexes": [1]}]},
                                 {"group_id": group + "-nothing", "topics": None}], "require_stable": False})
    by = {g["group_id"]: g for g in r["groups"]}
    assert by[group]["topics"][0]["partitions"][0]["committed_offset"] == 19
    assert by[group + "-nothing"]["error_code"] == NONE and by[group + "-nothing"]["topics"] == []


def test_member_waiting_for_its_assignment_is_not_expired(eb, group):
    """A follower parked in SyncGroup while the leader computes the assignment counts as alive
    (Kafka: MemberMetadata.hasSatisfiedHeartbeat is true for members awaiting join or sync), even
    past its session timeout; the leader keeps heartbeating meanwhile."""
    kw = dict(session_ms=1000, rebalance_ms=20000)
    leader, follower = GroupClient(eb.port), GroupClient(eb.port)
    rl = leader.join(group, "", **kw)
    rf = follower.join(group, "", **kw)
    cid_l = leader.join_send(group, rl["member_id"], **kw)
    observer = GroupClient(eb.port)
    wait_until(lambda: observer.describe(group)["group_state"] == "PreparingRebalance", what="the leader's join")
    cid_f = follower.join_send(group, rf["member_id"], **kw)
    jl, jf = leader.recv(JOIN_GROUP, 5, cid_l), follower.recv(JOIN_GROUP, 5, cid_f)
    gen, lid, fid = jl["generation_id"], jl["member_id"], jf["member_id"]
    assert jl["leader"] == lid and jf["generation_id"] == gen
    sync_cid = follower.send(SYNC_GROUP, 3, {"group_id": group, "generation_id": gen, "member_id": fid,
                                             "group_instance_id": None, "assignments": []})
    # the leader takes 2.5 session timeouts to assign, heartbeating every 200 ms
    deadline = time.monotonic() + 2.5
    while time.monotonic() < deadline:
        assert leader.heartbeat(group, gen, lid) == NONE
        time.sleep(0.2)
    assert leader.sync(group, gen, lid, {lid: assignment({"t": [0]}), fid: assignment({"t": [1]})})["error_code"] \
        == NONE
    s = follower.recv(SYNC_GROUP, 3, sync_cid)
    assert s["error_code"] == NONE and parse_assignment(s["assignment"]) == {"t": [1]}
    assert follower.heartbeat(group, gen, fid) == NONE


def test_leader_that_never_syncs_is_removed_after_the_rebalance_timeout(eb, group):
    """A leader that heartbeats but never sends SyncGroup (a stuck client) would hold the group in
    CompletingRebalance for ever; as Kafka does, it is removed after its rebalance timeout, the
    follower's parked SyncGroup is told to rejoin, and the follower then leads the group alone."""
    kw = dict(session_ms=6000, rebalance_ms=2000)
    leader, follower = GroupClient(eb.port), GroupClient(eb.port)
    rl, rf = leader.join(group, "", **kw), follower.join(group, "", **kw)
    cid_l = leader.join_send(group, rl["member_id"], **kw)
    observer = GroupClient(eb.port)
    wait_until(lambda: observer.describe(group)["group_state"] == "PreparingRebalance", what="the leader's join")
    cid_f = follower.join_send(group, rf["member_id"], **kw)
    jl, jf = leader.recv(JOIN_GROUP, 5, cid_l), follower.recv(JOIN_GROUP, 5, cid_f)
    gen, lid, fid = jl["generation_id"], jl["member_id"], jf["member_id"]
    assert jl["leader"] == lid
    sync_cid = follower.send(SYNC_GROUP, 3, {"group_id": group, "generation_id": gen, "member_id": fid,
                                             "group_instance_id": None, "assignments": []})
    follower.sock.setblocking(False)

    def follower_answered() -> bool:
        leader_code = leader.heartbeat(group, gen, lid)  # the leader stays alive all along
        try:
            follower.sock.recv(1, socket.MSG_PEEK)
        except BlockingIOError:
            assert leader_code == NONE
            return False
        return True
    wait_until(follower_answered, what="the follower's SyncGroup answer", interval=0.2)
    follower.sock.setblocking(True)
    assert follower.recv(SYNC_GROUP, 3, sync_cid)["error_code"] == REBALANCE_IN_PROGRESS
    assert leader.heartbeat(group, gen, lid) == UNKNOWN_MEMBER_ID
    again = follower.join(group, fid, **kw)
    assert (again["error_code"], again["leader"]) == (NONE, fid) and again["generation_id"] > gen
    assert "did not SyncGroup within the rebalance timeout" in eb.log_text()
    for c in (leader, follower, observer):
        c.close()
