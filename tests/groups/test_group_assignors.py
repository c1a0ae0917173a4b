"""Partition assignment strategies with confluent-kafka: cooperative-sticky (incremental
rebalances), range, roundrobin, and the group's choice when members list several."""

from __future__ import annotations

from group_helpers import (EventLog, Feeder, Member, check_group_delivery, committed, create_topic, describe_group,
                           merge, produce_ids, wait_consumed, wait_stable, wait_until)

PARTITIONS = 6


def test_cooperative_sticky_incremental_rebalances(gbroker, names):
    topic, group = names
    b = gbroker.bootstrap
    create_topic(b, topic, PARTITIONS)
    first = produce_ids(b, topic, range(PARTITIONS), 20)
    log = EventLog()
    conf = {"partition_assignment_strategy": "cooperative-sticky"}
    c1, c2, c3 = (Member(b, group, [topic], log, f"c{i}", **conf) for i in (1, 2, 3))
    feeder = Feeder(b, topic, range(PARTITIONS))
    all_parts = {(topic, p) for p in range(PARTITIONS)}
    try:
        c1.start()
        wait_stable(b, group, 1, PARTITIONS)
        wait_until(lambda: c1.assignment == all_parts, what="c1 to own everything")
        assert describe_group(b, group).partition_assignor == "cooperative-sticky"
        feeder.start()

        # c2 joins: c1 gives up half, keeps the rest without ever revoking it
        before = set(c1.assignment)
        c2.start()
        wait_stable(b, group, 2, PARTITIONS)
        wait_until(lambda: len(c1.assignment) == 3 and len(c2.assignment) == 3 and
                   c1.assignment | c2.assignment == all_parts, what="3 + 3 partitions")
        revoked = {tp for r in c1.revokes for tp in r}
        assert revoked == before - c1.assignment, "c1's revocation named exactly what it gave up"
        assert len(revoked) == 3
        assert c1.assignment <= before
        assert all(len(r) < PARTITIONS for r in c1.revokes), "an incremental revoke, not a full one"

        # c3 joins: each of c1, c2 hands one partition over, keeps the others
        kept1, kept2 = set(c1.assignment), set(c2.assignment)
        n_rev1, n_rev2 = len(c1.revokes), len(c2.revokes)
        c3.start()
        wait_stable(b, group, 3, PARTITIONS)
        wait_until(lambda: all(len(c.assignment) == 2 for c in (c1, c2, c3)) and
                   c1.assignment | c2.assignment | c3.assignment == all_parts, what="2 + 2 + 2 partitions")
        assert c1.assignment <= kept1 and c2.assignment <= kept2
        assert {tp for r in c1.revokes[n_rev1:] for tp in r} == kept1 - c1.assignment
        assert {tp for r in c2.revokes[n_rev2:] for tp in r} == kept2 - c2.assignment
        assert {tp for a in c3.assigns for tp in a} == c3.assignment

        # c2 leaves: its two partitions are added to c1 and c3, nothing is taken from them
        kept1, kept3 = set(c1.assignment), set(c3.assignment)
        n_rev1, n_rev3 = len(c1.revokes), len(c3.revokes)
        left = set(c2.assignment)
        c2.stop()
        wait_stable(b, group, 2, PARTITIONS)
        wait_until(lambda: len(c1.assignment) == 3 and len(c3.assignment) == 3 and
                   c1.assignment | c3.assignment == all_parts, what="3 + 3 partitions after c2 left")
        assert c1.assignment >= kept1 and c3.assignment >= kept3
        assert (c1.assignment - kept1) | (c3.assignment - kept3) == left
        assert len(c1.revokes) == n_rev1 and len(c3.revokes) == n_rev3, "nobody revoked anything"

        for c in (c1, c2, c3):
            assert not c.not_incremental, f"{c.name}: on_assign repeated owned partitions: {c.not_incremental}"
        expected = merge(first, feeder.stop())
        wait_consumed(log, expected)
        check_group_delivery(log, expected, committed(b, group, topic, range(PARTITIONS)))
    finally:
        if feeder.is_alive():
            feeder.stop()
        for c in (c1, c2, c3):
            if c.is_alive():
                c.stop()


def _assignment_by_member(b, group):
    d = describe_group(b, group)
    return d, {m.member_id: sorted((tp.topic, tp.partition) for tp in m.assignment.topic_partitions)
               for m in d.members}


def _two_topic_group(b, names, strategy_of, n):
    topic, group = names
    ta, tb = topic + "-a", topic + "-b"
    create_topic(b, ta, 3)
    create_topic(b, tb, 3)
    log = EventLog()
    members = [Member(b, group, [ta, tb], log, f"m{i}", partition_assignment_strategy=strategy_of(i))
               for i in range(n)]
    return ta, tb, group, log, members


def test_range_assignor(gbroker, names):
    ta, tb, group, log, members = _two_topic_group(gbroker.bootstrap, names, lambda i: "range", 2)
    b = gbroker.bootstrap
    try:
        for m in members:
            m.start()
        wait_stable(b, group, 2, 6)
        d, by_member = _assignment_by_member(b, group)
        assert d.partition_assignor == "range"
        first, second = (by_member[k] for k in sorted(by_member))
        # range: per topic, consecutive partitions; the first member (by id) gets the extra one
        assert first == [(ta, 0), (ta, 1), (tb, 0), (tb, 1)]
        assert second == [(ta, 2), (tb, 2)]
        expected_a = produce_ids(b, ta, range(3), 5)
        expected_b = produce_ids(b, tb, range(3), 5)
        wait_until(lambda: len(log.of("rec")) == 30, what="the group to read both topics")
        got = sorted((e.partition, e.offset, e.value) for e in log.of("rec"))
        assert got == sorted((p, o, v) for acked in (expected_a, expected_b) for p, rs in acked.items()
                             for o, v in rs)
    finally:
        for m in members:
            if m.is_alive():
                m.stop()


def test_roundrobin_assignor(gbroker, names):
    ta, tb, group, log, members = _two_topic_group(gbroker.bootstrap, names, lambda i: "roundrobin", 2)
    b = gbroker.bootstrap
    try:
        for m in members:
            m.start()
        wait_stable(b, group, 2, 6)
        d, by_member = _assignment_by_member(b, group)
        assert d.partition_assignor == "roundrobin"
        first, second = (by_member[k] for k in sorted(by_member))
        # roundrobin: all partitions of all topics, sorted, dealt out one by one
        assert first == [(ta, 0), (ta, 2), (tb, 1)]
        assert second == [(ta, 1), (tb, 0), (tb, 2)]
        produce_ids(b, ta, range(3), 5)
        produce_ids(b, tb, range(3), 5)
        wait_until(lambda: len(log.of("rec")) == 30, what="the group to read both topics")
        assert {e.member for e in log.of("rec")} == {"m0", "m1"}
    finally:
        for m in members:
            if m.is_alive():
                m.stop()


def test_members_listing_several_strategies_agree_on_a_common_one(gbroker, names):
    b = gbroker.bootstrap
    # m0 prefers range but also speaks roundrobin; m1 only speaks roundrobin: roundrobin it is
    ta, tb, group, log, members = _two_topic_group(
        b, names, lambda i: "range,roundrobin" if i == 0 else "roundrobin", 2)
    try:
        for m in members:
            m.start()
        wait_stable(b, group, 2, 6)
        assert describe_group(b, group).partition_assignor == "roundrobin"
    finally:
        for m in members:
            if m.is_alive():
                m.stop()

    # three members listing both: each votes for its first choice, the majority wins
    topic, group = names
    group2 = group + "-vote"
    log2 = EventLog()
    prefs = ["range,roundrobin", "roundrobin,range", "range,roundrobin"]
    voters = [Member(b, group2, [ta, tb], log2, f"v{i}", partition_assignment_strategy=p)
              for i, p in enumerate(prefs)]
    try:
        for m in voters:
            m.start()
        wait_stable(b, group2, 3, 6)
        assert describe_group(b, group2).partition_assignor == "range"
        produce_ids(b, ta, range(3), 4)
        wait_until(lambda: len(log2.of("rec")) == 12, what="the group to read the records")
        assert len({(e.partition, e.offset) for e in log2.of("rec")}) == 12
    finally:
        for m in voters:
            if m.is_alive():
                m.stop()
