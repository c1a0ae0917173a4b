"""Static membership (KIP-345, ``group.instance.id``): a static member that restarts within its
session timeout takes its old place back without a rebalance, and the member it replaced is
fenced."""

from __future__ import annotations

import pytest

from group_helpers import (FENCED_INSTANCE_ID, JOIN_GROUP, NONE, UNKNOWN_MEMBER_ID, GroupClient, ProcMember,
                           assignment, create_topic, describe_group, merge, parse_assignment, produce_ids,
                           subscription, wait_stable, wait_until)

PARTITIONS = 4


def _acked(member: ProcMember) -> dict[int, int]:
    out: dict[int, int] = {}
    for e in member.of("ack"):
        out[e["p"]] = max(out.get(e["p"], 0), e["o"])
    return out


def _static_view(b, group):
    d = describe_group(b, group)
    return d.state.name, {m.group_instance_id: (m.member_id, sorted(tp.partition for tp in m.assignment.topic_partitions))
                          for m in d.members}


@pytest.mark.parametrize("restart,strategy", [("leader", "range"), ("follower", "range"),
                                              ("follower", "cooperative-sticky")])
def test_static_member_restarts_without_rebalance(gbroker, names, restart, strategy):
    topic, group = names
    b = gbroker.bootstrap
    create_topic(b, topic, PARTITIONS)
    first = produce_ids(b, topic, range(PARTITIONS), 10)
    conf = {"session.timeout.ms": 20000, "partition.assignment.strategy": strategy}
    a = ProcMember(b, group, [topic], "a", conf={**conf, "group.instance.id": "inst-a"})
    procs = [a]
    try:
        wait_stable(b, group, 1, PARTITIONS)          # a joined first: the leader
        bm = ProcMember(b, group, [topic], "b", conf={**conf, "group.instance.id": "inst-b"})
        procs.append(bm)
        wait_stable(b, group, 2, PARTITIONS)
        wait_until(lambda: a.assignment() and bm.assignment() and
                   a.assignment() | bm.assignment() == set(range(PARTITIONS)), what="both static members assigned")
        ends = {p: rs[-1][0] + 1 for p, rs in first.items()}
        wait_until(lambda: all(max(_acked(a).get(p, 0), _acked(bm).get(p, 0)) >= ends[p] for p in range(PARTITIONS)),
                   what="everything read and committed")
        state, before = _static_view(b, group)
        assert state == "STABLE" and set(before) == {"inst-a", "inst-b"}

        victim, observer = (a, bm) if restart == "leader" else (bm, a)
        instance = "inst-a" if victim is a else "inst-b"
        other = "inst-b" if victim is a else "inst-a"
        old_parts = victim.assignment()
        observer_callbacks = len(observer.of("assign")) + len(observer.of("revoke")) + len(observer.of("lost"))

        victim.kill()  # no LeaveGroup (a static member never sends one on close either)
        again = ProcMember(b, group, [topic], "again", conf={**conf, "group.instance.id": instance})
        procs.append(again)
        got = wait_until(lambda: again.assignment(), what="the restarted static member's assignment")
        assert got == old_parts, "the restarted static member got its old partitions back"

        # new records: the restarted member reads its partitions from where its predecessor committed
        second = produce_ids(b, topic, range(PARTITIONS), 10, start=10)
        expected = merge(first, second)
        wait_until(lambda: {(e["p"], e["o"]) for e in again.of("rec")} ==
                   {(p, o) for p in old_parts for o, _ in expected[p] if o >= ends[p]},
                   what="the restarted member to read its partitions' new records")
        wait_until(lambda: {(e["p"], e["o"]) for e in observer.of("rec") if e["o"] >= ends[e["p"]]} ==
                   {(p, o) for p in set(range(PARTITIONS)) - old_parts for o, _ in expected[p] if o >= ends[p]},
                   what="the other member to read its partitions' new records")

        # no rebalance: the other member saw no revoke/assign; same member id, same assignment
        callbacks = observer.events[:]
        assert len(observer.of("assign")) + len(observer.of("revoke")) + len(observer.of("lost")) == \
            observer_callbacks, ("a rebalance happened: the other member's rebalance callbacks: "
                                 f"{[e for e in callbacks if e['ev'] in ('assign', 'revoke', 'lost')]}")
        state, after = _static_view(b, group)
        assert state == "STABLE"
        assert after[other] == before[other]
        assert after[instance][1] == before[instance][1]
        assert after[instance][0] != before[instance][0], "the restarted member has a new member id"
    finally:
        for p in procs:
            p.kill()


def _static_pair(port, group, topic, version):
    """Leader L (inst-l) and follower F (inst-f) joined and synced by hand; returns the clients
    and (generation, leader id, follower id)."""
    cl, cf = GroupClient(port), GroupClient(port)
    kw = dict(version=version, session_ms=30000, rebalance_ms=5000, topics=[topic])
    rl = cl.join(group, "", instance_id="inst-l", **kw)
    assert rl["error_code"] == NONE and rl["leader"] == rl["member_id"], rl
    cid = cf.join_send(group, "", instance_id="inst-f", **kw)
    observer = GroupClient(port)
    wait_until(lambda: observer.describe(group)["group_state"] == "PreparingRebalance",
               what="the follower's join to start a rebalance")
    observer.close()
    # the leader rejoins with its id
    rl2 = cl.join(group, rl["member_id"], instance_id="inst-l", **kw)
    rf = cf.recv(JOIN_GROUP, version, cid)
    assert rl2["error_code"] == rf["error_code"] == NONE, (rl2, rf)
    gen, lid, fid = rl2["generation_id"], rl2["member_id"], rf["member_id"]
    assert rf["generation_id"] == gen and rl2["leader"] == lid
    assigns = {lid: assignment({topic: [0]}), fid: assignment({topic: [1]})}
    sync_cid = cf.send(14, 3, {"group_id": group, "generation_id": gen, "member_id": fid,
                               "group_instance_id": "inst-f", "assignments": []})
    assert cl.sync(group, gen, lid, assigns, instance_id="inst-l")["error_code"] == NONE
    assert cf.recv(14, 3, sync_cid)["error_code"] == NONE
    return cl, cf, gen, lid, fid


def test_static_follower_rejoin_same_generation_old_id_fenced(gbroker, names):
    topic, group = names
    create_topic(gbroker.bootstrap, topic, 2)
    cl, cf, gen, lid, fid = _static_pair(gbroker.port, group, topic, 5)
    new = GroupClient(gbroker.port)
    r = new.join(group, "", instance_id="inst-f", version=5, session_ms=30000, rebalance_ms=5000, topics=[topic])
    assert r["error_code"] == NONE
    assert r["generation_id"] == gen, "no rebalance"
    assert r["member_id"] != fid
    assert r["leader"] == lid and r["members"] == []
    s = new.sync(group, gen, r["member_id"], instance_id="inst-f")
    assert s["error_code"] == NONE and parse_assignment(s["assignment"]) == {topic: [1]}
    assert cl.heartbeat(group, gen, lid, instance_id="inst-l") == NONE
    assert new.describe(group)["group_state"] == "Stable"
    # the replaced member is a zombie now: fenced, so that it stops instead of rejoining
    assert cf.heartbeat(group, gen, fid, instance_id="inst-f") == FENCED_INSTANCE_ID
    assert cf.sync(group, gen, fid, instance_id="inst-f")["error_code"] == FENCED_INSTANCE_ID
    assert cf.join(group, fid, instance_id="inst-f", version=5, session_ms=30000, topics=[topic])["error_code"] \
        == FENCED_INSTANCE_ID
    # without its instance id, it is just unknown
    assert cf.heartbeat(group, gen, fid) == UNKNOWN_MEMBER_ID


@pytest.mark.parametrize("version", [5, 9])
def test_static_leader_rejoin_answer(gbroker, names, version):
    """The static leader restarts. Kafka (GroupCoordinator.updateStaticMemberAndRebalance) keeps the
    generation and answers JoinGroup v9+ with leader = the new id, skip_assignment = true and the
    members' metadata; before v9 with the OLD leader id and no members, so that the restarted member
    does not believe it is the leader and compute an assignment nobody would receive."""
    topic, group = names
    create_topic(gbroker.bootstrap, topic, 2)
    cl, cf, gen, lid, fid = _static_pair(gbroker.port, group, topic, version)
    new = GroupClient(gbroker.port)
    r = new.join(group, "", instance_id="inst-l", version=version, session_ms=30000, rebalance_ms=5000,
                 topics=[topic])
    assert r["error_code"] == NONE
    assert r["generation_id"] == gen
    assert r["member_id"] not in (lid, fid)
    if version >= 9:
        assert r["leader"] == r["member_id"]
        assert r["skip_assignment"] is True
        assert sorted(m["group_instance_id"] for m in r["members"]) == ["inst-f", "inst-l"]
    else:
        assert r["leader"] == lid, "before v9 the answer names the old leader id"
        assert r["members"] == []
    s = new.sync(group, gen, r["member_id"], instance_id="inst-l")
    assert s["error_code"] == NONE and parse_assignment(s["assignment"]) == {topic: [0]}
    assert cf.heartbeat(group, gen, fid, instance_id="inst-f") == NONE
    assert new.describe(group)["group_state"] == "Stable"


def test_static_rejoin_with_other_protocol_metadata_keeps_generation(gbroker, names):
    """A restarted static member whose protocol list differs (here: it also offers roundrobin) but
    under which the group would still select the same protocol: Kafka stores the new metadata
    and does not rebalance (staticMemberRejoinAsFollowerWithUnknownMemberId)."""
    topic, group = names
    create_topic(gbroker.bootstrap, topic, 2)
    cl, cf, gen, lid, fid = _static_pair(gbroker.port, group, topic, 5)
    new = GroupClient(gbroker.port)
    meta = subscription([topic])
    # rebalance_ms bounds the wait if the broker rebalances (the leader does not rejoin then)
    r = new.join(group, "", instance_id="inst-f", version=5, session_ms=30000, rebalance_ms=3000,
                 protocols=[("range", meta), ("roundrobin", meta)])
    assert r["error_code"] == NONE
    assert r["generation_id"] == gen, "Kafka does not rebalance: the selected protocol stays range"
    assert r["protocol_name"] == "range"
