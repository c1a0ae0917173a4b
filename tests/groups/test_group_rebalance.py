"""Rebalances of a confluent-kafka consumer group: members joining, a member dying without a
LeaveGroup, partitions added to the subscribed topic. Through all of them the group reads
every record, never gets a committed record again, and ends with its committed offsets at the
log end.
"""

from __future__ import annotations

from confluent_kafka.admin import NewPartitions

from group_helpers import (WAIT, EventLog, Feeder, Member, ProcMember, admin, check_group_delivery, commit_high, committed,
                           create_topic, merge, produce_ids, wait_consumed, wait_stable, wait_until)

PARTITIONS = 6


def test_two_members_split_then_third_joins(gbroker, names):
    topic, group = names
    b = gbroker.bootstrap
    create_topic(b, topic, PARTITIONS)
    first = produce_ids(b, topic, range(PARTITIONS), 50)
    log = EventLog()
    m1 = Member(b, group, [topic], log, "m1")
    m2 = Member(b, group, [topic], log, "m2")
    m3 = None
    feeder = None
    try:
        m1.start()
        m2.start()
        split = wait_stable(b, group, 2, PARTITIONS)
        wait_consumed(log, first)
        # two members, the six partitions split between them, every record read once
        assert sorted(len(v) for v in split.values()) == [3, 3]
        wait_until(lambda: len(m1.owned()) == 3 and len(m2.owned()) == 3, what="each member to own 3 partitions")
        assert not m1.owned() & m2.owned()
        check_group_delivery(log, first, committed(b, group, topic, range(PARTITIONS)))

        # a third member joins while records keep coming: partitions are handed over
        feeder = Feeder(b, topic, range(PARTITIONS))
        feeder.start()
        wait_until(lambda: sum(len(v) for v in feeder.acked.values()) >= 60, what="the feeder to get going")
        m3 = Member(b, group, [topic], log, "m3")
        m3.start()
        split = wait_stable(b, group, 3, PARTITIONS)
        assert sorted(len(v) for v in split.values()) == [2, 2, 2]
        wait_until(lambda: m3.owned() and log.of("rec", "m3"), what="the third member to read records")
        wait_until(lambda: all(m.owned() for m in (m1, m2, m3)) and
                   len(m1.owned() | m2.owned() | m3.owned()) == PARTITIONS, what="every member to own partitions")
        second = feeder.stop()
        feeder = None
        expected = merge(first, second)
        wait_consumed(log, expected)
        assert m1.revokes and m2.revokes, "the eager rebalance revoked the first members' partitions"
        check_group_delivery(log, expected, committed(b, group, topic, range(PARTITIONS)))
    finally:
        if feeder:
            feeder.stop()
        for m in (m1, m2, m3):
            if m is not None and m.is_alive():
                m.stop()


def test_killed_member_partitions_move_to_survivors(gbroker, names):
    topic, group = names
    b = gbroker.bootstrap
    create_topic(b, topic, PARTITIONS)
    first = produce_ids(b, topic, range(PARTITIONS), 20)
    log = EventLog()
    s1 = Member(b, group, [topic], log, "s1")
    s2 = Member(b, group, [topic], log, "s2")
    victim = ProcMember(b, group, [topic], "victim", conf={"session.timeout.ms": 2000})
    try:
        s1.start()
        s2.start()
        wait_stable(b, group, 3, PARTITIONS)
        victim_parts = wait_until(lambda: victim.assignment(), what="the victim's assignment")
        wait_until(lambda: len(s1.owned() | s2.owned() | victim_parts) == PARTITIONS,
                   what="the three members to own all partitions")

        # everything read and committed, by the group as a whole
        ends = {p: rs[-1][0] + 1 for p, rs in first.items()}

        def group_committed(p):
            return max([e["o"] for e in victim.of("ack") if e["p"] == p] + [commit_high(log).get(p, 0)])
        wait_until(lambda: all(group_committed(p) >= ends[p] for p in range(PARTITIONS)),
                   what="the group to read and commit everything")

        victim.kill()  # SIGKILL: no LeaveGroup, the coordinator finds out by the session timeout
        killed = log.add("killed", "victim").seq
        second = produce_ids(b, topic, range(PARTITIONS), 20, start=20)
        wait_stable(b, group, 2, PARTITIONS)
        wait_until(lambda: (s1.owned() | s2.owned()) == set(range(PARTITIONS)),
                   what="the survivors to own every partition")
        expected = merge(first, second)
        wait_consumed(log, expected)

        # the survivors resumed each of the victim's partitions exactly where it had committed
        for p in victim_parts:
            resumed = min(e.offset for e in log.of("rec") if e.partition == p and e.seq > killed)
            assert resumed == ends[p], f"partition {p}: survivors resumed at {resumed}, victim committed {ends[p]}"
        victim_recs = {(e["p"], e["o"]) for e in victim.of("rec")}
        survivor_recs = {(e.partition, e.offset) for e in log.of("rec")}
        all_offsets = {(p, o) for p, rs in expected.items() for o, _ in rs}
        assert victim_recs | survivor_recs == all_offsets
        final = committed(b, group, topic, range(PARTITIONS))
        assert final == {p: rs[-1][0] + 1 for p, rs in expected.items()}
    finally:
        victim.kill()
        for m in (s1, s2):
            if m.is_alive():
                m.stop()


def test_added_partitions_trigger_rebalance(gbroker, names):
    topic, group = names
    b = gbroker.bootstrap
    create_topic(b, topic, 2)
    first = produce_ids(b, topic, range(2), 10)
    log = EventLog()
    members = [Member(b, group, [topic], log, f"m{i}", topic_metadata_refresh_interval_ms=1000) for i in range(2)]
    try:
        for m in members:
            m.start()
        wait_stable(b, group, 2, 2)
        wait_consumed(log, first)

        a = admin(b)  # kept alive until the future resolves
        fs = a.create_partitions([NewPartitions(topic, 3)], operation_timeout=WAIT, request_timeout=WAIT)
        fs[topic].result(WAIT)
        # the members see the third partition in their metadata and rejoin: it gets an owner
        wait_until(lambda: any((topic, 2) in m.assignment for m in members), what="an owner for partition 2")
        wait_stable(b, group, 2, 3)
        second = produce_ids(b, topic, range(3), 10, start=10)
        expected = merge(first, second)
        wait_consumed(log, expected)
        assert {e.offset for e in log.of("rec") if e.partition == 2} == set(range(10))
        check_group_delivery(log, expected, committed(b, group, topic, range(3)))
    finally:
        for m in members:
            if m.is_alive():
                m.stop()
