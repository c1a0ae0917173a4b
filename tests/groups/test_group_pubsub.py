"""Queue and publish-subscribe with consumer groups (the seeds' 单播/多播 walkthrough): within a
group each record goes to one member, every group gets every record, members beyond the
partition count stay idle. kcat's balanced consumer (``kcat -G``) is a member like any other,
and the group shows up in ListGroups/DescribeGroups (confluent-kafka and kafka-python admin).
"""

from __future__ import annotations

from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions
from kafka import KafkaAdminClient

from group_helpers import (WAIT, EventLog, KcatMember, Member, admin, check_group_delivery, committed,
                           create_topic, duplicates, end_offsets, produce_ids, wait_consumed, wait_stable,
                           wait_until)

PARTITIONS = 4


def test_queue_within_group_publish_subscribe_across_groups(gbroker, names):
    topic, base = names
    b = gbroker.bootstrap
    create_topic(b, topic, PARTITIONS)
    ga, gb, gc = base + "-A", base + "-B", base + "-C"
    log_a, log_b, log_c = EventLog(), EventLog(), EventLog()
    a = [Member(b, ga, [topic], log_a, f"a{i}") for i in range(2)]
    bm = [Member(b, gb, [topic], log_b, f"b{i}") for i in range(3)]
    c = [Member(b, gc, [topic], log_c, f"c{i}") for i in range(PARTITIONS + 1)]   # one too many
    kcat = KcatMember(b, gb, [topic])
    try:
        for m in a + bm + c:
            m.start()
        wait_stable(b, ga, 2, PARTITIONS)
        wait_stable(b, gb, 4, PARTITIONS)
        assignment_c = wait_stable(b, gc, PARTITIONS + 1, PARTITIONS)
        # group C: one partition per member, the extra member stays idle
        assert sorted(len(v) for v in assignment_c.values()) == [0, 1, 1, 1, 1]

        expected = produce_ids(b, topic, range(PARTITIONS), 30)
        ends = {p: rs[-1][0] + 1 for p, rs in expected.items()}
        all_records = {(p, o, v) for p, rs in expected.items() for o, v in rs}

        # every group reads everything (publish-subscribe)...
        wait_consumed(log_a, expected)
        wait_consumed(log_c, expected)
        wait_until(lambda: {(e.partition, e.offset, e.value) for e in log_b.of("rec")} | set(kcat.got())
                   == all_records, what="group B (three consumers and kcat) to read everything")

        # ... and within a group each record goes to one member only (queue)
        for log in (log_a, log_c):
            assert not duplicates(log)
            check_group_delivery(log, expected)
            owners: dict[int, set[str]] = {}
            for e in log.of("rec"):
                owners.setdefault(e.partition, set()).add(e.member)
            assert all(len(o) == 1 for o in owners.values()), owners
        kcat_recs = kcat.got()
        assert kcat_recs, "kcat got a partition of its own and read it"
        assert len(kcat_recs) == len(set(kcat_recs))
        b_recs = [(e.partition, e.offset, e.value) for e in log_b.of("rec")]
        assert not set(b_recs) & set(kcat_recs), "a record read by kcat and by another member of its group"
        assert len(b_recs) + len(kcat_recs) == len(all_records)
        # kcat read whole partitions (one member per partition)
        assert {p for p, _, _ in kcat_recs}.isdisjoint({e.partition for e in log_b.of("rec")})

        assert committed(b, ga, topic, range(PARTITIONS)) == ends
        assert committed(b, gc, topic, range(PARTITIONS)) == ends
        kcat.stop()  # commits its offsets on the way out
        assert committed(b, gb, topic, range(PARTITIONS)) == ends
    finally:
        kcat.kill()
        for m in a + bm + c:
            if m.is_alive():
                m.stop()


def test_kcat_group_seen_by_admin_clients(gbroker, names):
    topic, group = names
    b = gbroker.bootstrap
    create_topic(b, topic, 3)
    log = EventLog()
    member = Member(b, group, [topic], log, "py-member")
    kcat = KcatMember(b, group, [topic], client_id="kcat-member")
    kp = None
    try:
        member.start()
        wait_stable(b, group, 2, 3)
        expected = produce_ids(b, topic, range(3), 10)
        ends = {p: rs[-1][0] + 1 for p, rs in expected.items()}
        wait_until(lambda: len(log.of("rec")) + len(kcat.got()) == 30, what="the group to read everything")
        # kcat auto-commits (every 200 ms here), the python member commits each record
        wait_until(lambda: committed(b, group, topic, range(3)) == ends, what="the group to commit everything")

        # confluent-kafka AdminClient: ListGroups, DescribeGroups
        a = admin(b)
        listed = a.list_consumer_groups(request_timeout=WAIT).result(WAIT)
        mine = [g for g in listed.valid if g.group_id == group]
        assert len(mine) == 1, [g.group_id for g in listed.valid]
        assert mine[0].state == ConsumerGroupState.STABLE
        assert not mine[0].is_simple_consumer_group
        stable = a.list_consumer_groups(request_timeout=WAIT, states={ConsumerGroupState.STABLE}).result(WAIT)
        assert group in {g.group_id for g in stable.valid}
        empty = a.list_consumer_groups(request_timeout=WAIT, states={ConsumerGroupState.EMPTY}).result(WAIT)
        assert group not in {g.group_id for g in empty.valid}

        d = a.describe_consumer_groups([group], request_timeout=WAIT)[group].result(WAIT)
        assert d.group_id == group
        assert d.state == ConsumerGroupState.STABLE
        assert d.partition_assignor == "range"
        assert not d.is_simple_consumer_group
        assert d.coordinator.id == 0
        assert sorted(m.client_id for m in d.members) == ["kcat-member", "py-member"]
        assert all(m.host.lstrip("/") == "127.0.0.1" for m in d.members), [m.host for m in d.members]
        owned = sorted((tp.topic, tp.partition) for m in d.members for tp in m.assignment.topic_partitions)
        assert owned == [(topic, 0), (topic, 1), (topic, 2)]
        by_client = {m.client_id: {tp.partition for tp in m.assignment.topic_partitions} for m in d.members}
        assert by_client["kcat-member"] == {p for p, _, _ in kcat.got()}
        assert by_client["py-member"] == {e.partition for e in log.of("rec")}

        # committed offsets through the AdminClient (OffsetFetch)
        res = a.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=WAIT)
        got = res[group].result(WAIT)
        assert {tp.partition: tp.offset for tp in got.topic_partitions if tp.topic == topic} == ends

        # kafka-python admin
        kp = KafkaAdminClient(bootstrap_servers=b, request_timeout_ms=int(WAIT * 1000))
        listed = {g["group_id"]: g for g in kp.list_groups()}
        assert listed[group]["protocol_type"] == "consumer"
        assert listed[group]["group_state"] == "Stable"
        info = kp.describe_groups([group])[group]
        assert info["error"] is None
        assert info["group_state"] == "Stable"
        assert info["protocol_type"] == "consumer"
        assert info["protocol_data"] == "range"
        assert sorted(m["client_id"] for m in info["members"]) == ["kcat-member", "py-member"]
        for m in info["members"]:
            assert m["member_metadata"]["topics"] == [topic]
            parts = [p for t in m["member_assignment"]["assigned_partitions"] if t["topic"] == topic
                     for p in t["partitions"]]
            assert set(parts) == by_client[m["client_id"]]
        offsets = kp.list_group_offsets({group: None})[group]
        assert {tp.partition: om.offset for tp, om in offsets.items() if tp.topic == topic} == ends

        # everyone leaves: the group is Empty, its offsets stay
        kcat.stop()
        member.stop()
        wait_until(lambda: a.describe_consumer_groups([group], request_timeout=WAIT)[group].result(WAIT).state
                   == ConsumerGroupState.EMPTY, what="the group to be Empty")
        empty = a.list_consumer_groups(request_timeout=WAIT, states={ConsumerGroupState.EMPTY}).result(WAIT)
        assert group in {g.group_id for g in empty.valid}
        assert committed(b, group, topic, range(3)) == ends
        assert end_offsets(b, topic, range(3)) == ends
    finally:
        if kp is not None:
            kp.close()
        kcat.kill()
        if member.is_alive():
            member.stop()
