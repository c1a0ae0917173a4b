"""The consumer group protocol (KIP-848) with confluent-kafka's consumer (``group.protocol=consumer``).

Real librdkafka consumers against a real broker over TCP: they split partitions as the broker's
assignor says, hand partitions over revoke-first when members come and go, lose a SIGKILLed
member's partitions to the others after the broker's session timeout, commit, follow a regex
subscription to a topic created later; a restarted broker resumes the group from
``__consumer_offsets``.
"""

from __future__ import annotations

import uuid

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from group_helpers import (KIP848, WAIT, EventLog, Member, ProcMember, Raw, check_group_delivery, committed,
                           create_topic, merge, produce_ids, wait_consumed, wait_until)

PARTITIONS = 6


def describe(bootstrap: str, group: str):
    """The group as confluent-kafka's admin client describes it (ConsumerGroupDescribe)."""
    a = AdminClient({"bootstrap.servers": bootstrap})
    return a.describe_consumer_groups([group], request_timeout=WAIT)[group].result(WAIT)


def assignment_by_member(d) -> dict[str, set[tuple[str, int]]]:
    return {m.member_id: {(tp.topic, tp.partition) for tp in m.assignment.topic_partitions} for m in d.members}


def wait_split(bootstrap: str, group: str, members: list[Member], partitions: int):
    """Wait until the members between them own every partition once, as evenly as can be, and the
    broker says the group is Stable."""
    def check():
        owned = [m.assignment for m in members]
        every = [tp for o in owned for tp in o]
        if len(every) != partitions or len(set(every)) != partitions:
            return None
        if max(map(len, owned)) - min(map(len, owned)) > 1:
            return None
        d = describe(bootstrap, group)
        return d if d.state.name == "STABLE" and len(d.members) == len(members) else None
    return wait_until(check, what=f"{len(members)} members to split {partitions} partitions", timeout=WAIT,
                      interval=0.1)


def handed_over_revoke_first(log: EventLog) -> list:
    """Partitions assigned to a member while another still owned them (from the callbacks' order)."""
    owner: dict[tuple[str, int], str] = {}
    bad = []
    with log.lock:
        events = sorted(log.events, key=lambda e: e.seq)
    for e in events:
        if e.kind == "assign":
            for tp in e.partitions:
                if owner.get(tp) not in (None, e.member):
                    bad.append((tp, owner[tp], e.member))
                owner[tp] = e.member
        elif e.kind in ("revoke", "lost"):
            for tp in e.partitions:
                if owner.get(tp) == e.member:
                    del owner[tp]
    return bad


def test_members_split_join_leave(gbroker, names):
    """Two members split six partitions, a third joins (2/2/2), one leaves (3/3); every record is
    read and committed once; partitions move only after their owner revoked them."""
    topic, group = names
    b = gbroker.bootstrap
    create_topic(b, topic, PARTITIONS)
    log = EventLog()
    first = produce_ids(b, topic, range(PARTITIONS), 10)
    members = [Member(b, group, [topic], log, f"m{i}", base=KIP848) for i in range(2)]
    for m in members:
        m.start()
    try:
        d = wait_split(b, group, members, PARTITIONS)
        assert {len(a) for a in assignment_by_member(d).values()} == {3}
        assert d.partition_assignor == "uniform"
        third = Member(b, group, [topic], log, "m2", base=KIP848)
        third.start()
        members.append(third)
        wait_split(b, group, members, PARTITIONS)
        second = produce_ids(b, topic, range(PARTITIONS), 10, start=10)
        leaving = members.pop(0)
        leaving.stop()  # closes the consumer: a heartbeat with member epoch -1
        d = wait_split(b, group, members, PARTITIONS)
        assert len(d.members) == 2
        third_batch = produce_ids(b, topic, range(PARTITIONS), 10, start=20)
        expected = merge(first, second, third_batch)
        wait_consumed(log, expected)
    finally:
        for m in members:
            m.stop()
    check_group_delivery(log, expected, committed(b, group, topic, range(PARTITIONS)))
    assert handed_over_revoke_first(log) == []
    for m in [leaving, *members]:
        assert m.not_incremental == [], f"{m.name}: on_assign named partitions it already owned"
    assert log.of("revoke"), "a rebalance callback revoked partitions when members came and went"


def test_sigkilled_member_partitions_move_after_session_timeout(gbroker, names):
    """A member SIGKILLed sends no leave: after group.consumer.session.timeout.ms the broker fences
    it and the survivor gets its partitions, from the last committed offsets."""
    topic, group = names
    b = gbroker.bootstrap
    create_topic(b, topic, 4)
    acked = produce_ids(b, topic, range(4), 5)
    victim = ProcMember(b, group, [topic], "victim", base=KIP848)
    survivor = ProcMember(b, group, [topic], "survivor", base=KIP848)
    try:
        wait_until(lambda: (victim.assignment() or set()) and (survivor.assignment() or set())
                   and len(victim.assignment() | survivor.assignment()) == 4,
                   what="the two members to share the partitions")
        wait_until(lambda: len({(e["p"], e["o"]) for e in victim.of("ack") + survivor.of("ack")}) == 20,
                   what="every record read and committed")
        victim.kill()
        more = produce_ids(b, topic, range(4), 5, start=5)
        wait_until(lambda: survivor.assignment() == {0, 1, 2, 3}, timeout=WAIT,
                   what="the survivor to own every partition after the victim's session expired")
        wait_until(lambda: len({(e["p"], e["o"]) for e in survivor.of("rec") if e["o"] >= 5}) == 20,
                   what="the survivor to read the records produced after the kill")
    finally:
        survivor.stop()
        victim.kill()
    # Nothing read twice past an acknowledged commit: the survivor started each moved partition
    # at the victim's committed offset.
    acks = {}
    for e in victim.of("ack"):
        acks[e["p"]] = max(acks.get(e["p"], 0), e["o"])
    for e in survivor.of("rec"):
        assert e["o"] >= 0
    moved = {p for p in range(4) if p not in {e["p"] for e in survivor.of("rec") if e["o"] < 5}}
    for p in moved:
        firsts = [e["o"] for e in survivor.of("rec") if e["p"] == p]
        assert min(firsts) >= acks.get(p, 0), f"partition {p} re-read below the victim's commit"
    assert sorted(merge(acked, more)) == [0, 1, 2, 3]


def test_regex_subscription_picks_up_new_topic(gbroker, names):
    """A regex subscription (``^prefix.*``) is resolved by the broker; a topic created later joins
    the target assignment at the next heartbeat."""
    topic, group = names
    b = gbroker.bootstrap
    prefix = f"rx{uuid.uuid4().hex[:8]}"
    create_topic(b, f"{prefix}-a", 2)
    produce_ids(b, f"{prefix}-a", range(2), 3)
    c = Consumer({"bootstrap.servers": b, "group.id": group, **KIP848})
    try:
        c.subscribe([f"^{prefix}-.*"])
        seen: set[tuple[str, int, int]] = set()

        def read(n):
            m = c.poll(0.1)
            if m is not None and not m.error():
                seen.add((m.topic(), m.partition(), m.offset()))
            return len(seen) >= n
        wait_until(lambda: read(6), what="the records of the first matching topic")
        create_topic(b, f"{prefix}-b", 3)
        produce_ids(b, f"{prefix}-b", range(3), 2)
        wait_until(lambda: read(12), what="the records of the topic created after subscribing")
        assert {t for t, _, _ in seen} == {f"{prefix}-a", f"{prefix}-b"}
        d = describe(b, group)
        (member,) = d.members
        assert {(tp.topic, tp.partition) for tp in member.assignment.topic_partitions} == {
            (f"{prefix}-a", 0), (f"{prefix}-a", 1), (f"{prefix}-b", 0), (f"{prefix}-b", 1), (f"{prefix}-b", 2)}
    finally:
        c.close()


def test_added_partitions_join_the_assignment(gbroker, names):
    topic, group = names
    b = gbroker.bootstrap
    create_topic(b, topic, 2)
    c = Consumer({"bootstrap.servers": b, "group.id": group, **KIP848})
    try:
        c.subscribe([topic])
        wait_until(lambda: c.poll(0.1) is None and len(c.assignment()) == 2, what="the first assignment")
        a = AdminClient({"bootstrap.servers": b})
        from confluent_kafka.admin import NewPartitions
        a.create_partitions([NewPartitions(topic, 5)])[topic].result(WAIT)
        wait_until(lambda: c.poll(0.1) is None and len(c.assignment()) == 5,
                   what="the partitions added to the topic in the assignment")
    finally:
        c.close()


def test_static_member_gets_its_partitions_back(gbroker, names):
    """group.instance.id: a static member that closes leaves with epoch -2 and keeps its place;
    a new consumer with that instance id takes it over with the same partitions."""
    topic, group = names
    b = gbroker.bootstrap
    create_topic(b, topic, 4)
    conf = {"bootstrap.servers": b, "group.id": group, **KIP848}
    a = Consumer({**conf, "group.instance.id": "inst-a"})
    other = Consumer({**conf, "group.instance.id": "inst-b"})
    try:
        a.subscribe([topic])
        other.subscribe([topic])

        def split():
            a.poll(0.05)
            other.poll(0.05)
            return len(a.assignment()) == 2 and len(other.assignment()) == 2
        wait_until(split, what="two static members to split four partitions")
        before = sorted(tp.partition for tp in a.assignment())
        epoch_before = describe(b, group).members
        a.close()
        d = describe(b, group)
        assert len(d.members) == 2, "a static member that left with epoch -2 keeps its place"
        a = Consumer({**conf, "group.instance.id": "inst-a"})
        a.subscribe([topic])
        wait_until(lambda: (a.poll(0.05), other.poll(0.05)) and len(a.assignment()) == 2,
                   what="the static member back with its partitions")
        assert sorted(tp.partition for tp in a.assignment()) == before
        assert len(other.assignment()) == 2
        assert {m.group_instance_id for m in describe(b, group).members} == {"inst-a", "inst-b"}
        assert len(epoch_before) == 2
    finally:
        a.close()
        other.close()


def test_commit_and_committed(gbroker, names):
    topic, group = names
    b = gbroker.bootstrap
    create_topic(b, topic, 2)
    produce_ids(b, topic, range(2), 4)
    c = Consumer({"bootstrap.servers": b, "group.id": group, **KIP848})
    try:
        c.subscribe([topic])
        wait_until(lambda: c.poll(0.1) is None and len(c.assignment()) == 2, what="the assignment")
        c.commit(offsets=[TopicPartition(topic, 0, 3), TopicPartition(topic, 1, 1)], asynchronous=False)
        got = c.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=WAIT)
        assert [(tp.partition, tp.offset) for tp in got] == [(0, 3), (1, 1)]
    finally:
        c.close()
    assert committed(b, group, topic, range(2)) == {0: 3, 1: 1}
    # the group is a consumer group in ListGroups, Empty once its member left
    a = AdminClient({"bootstrap.servers": b})
    listed = {g.group_id: g for g in a.list_consumer_groups(request_timeout=WAIT).result(WAIT).valid}
    assert listed[group].type.name == "CONSUMER"
    assert listed[group].state.name == "EMPTY"


def heartbeat(raw: Raw, group: str, member: str, epoch: int, **kw) -> dict:
    body = {"group_id": group, "member_id": member, "member_epoch": epoch, "instance_id": None, "rack_id": None,
            "rebalance_timeout_ms": 30000 if epoch == 0 else -1, "subscribed_topic_names": None,
            "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": [] if epoch == 0 else None}
    body.update(kw)
    return raw.call(68, 1, body)


def test_restarted_coordinator_resumes_the_group(own_broker, names):
    """The group's records in __consumer_offsets bring it back after a SIGKILL: same group epoch,
    members, member epochs and assignments; a member heartbeating with its epoch is not fenced."""
    b = own_broker()
    topic, group = names
    create_topic(b.bootstrap, topic, 4)
    raw = Raw(b.port)
    wait_until(lambda: raw.call(10, 3, {"key": group, "key_type": 0})["error_code"] == 0, what="a coordinator")
    m1, m2 = uuid.uuid4().hex[:22], uuid.uuid4().hex[:22]
    r1 = heartbeat(raw, group, m1, 0, subscribed_topic_names=[topic])
    r2 = heartbeat(raw, group, m2, 0, subscribed_topic_names=[topic], instance_id="static-2")
    assert r1["error_code"] == r2["error_code"] == 0
    # m1 gives up what the new target takes from it, then both are at the latest epoch
    owned1 = r1["assignment"]["topic_partitions"]
    r1 = heartbeat(raw, group, m1, r1["member_epoch"], topic_partitions=owned1)
    r1 = heartbeat(raw, group, m1, r1["member_epoch"], topic_partitions=r1["assignment"]["topic_partitions"]
                   if r1["assignment"] else owned1)
    r2 = heartbeat(raw, group, m2, r2["member_epoch"], topic_partitions=[])
    before = raw.call(69, 1, {"group_ids": [group], "include_authorized_operations": False})["groups"][0]
    raw.close()
    assert before["group_state"] == "Stable", before
    b.kill()
    b.start()
    raw = Raw(b.port)
    after = wait_until(lambda: (g := raw.call(69, 1, {"group_ids": [group], "include_authorized_operations": False})
                                ["groups"][0])["error_code"] == 0 and g, what="the group loaded again")

    def members(d):
        return sorted((m["member_id"], m["member_epoch"], m["instance_id"],
                       [(t["topic_name"], t["partitions"]) for t in m["assignment"]["topic_partitions"]])
                      for m in d["members"])
    assert (after["group_epoch"], after["assignment_epoch"], members(after)) == (
        before["group_epoch"], before["assignment_epoch"], members(before))
    r = heartbeat(raw, group, m1, r1["member_epoch"])
    assert (r["error_code"], r["member_epoch"]) == (0, r1["member_epoch"])
    raw.close()
    # the records as Kafka's kafka-dump-log.sh --offsets-decoder shows them: key types 3 to 8
    from cli_tools import samsa
    from samsa.coordinator.groups.persistence import partition_for
    logs = sorted((b.data_dir / "logs" / f"__consumer_offsets-{partition_for(group, 50)}").glob("*.log"))
    out = samsa("dump-log", "--offsets-decoder", "--files", ",".join(map(str, logs))).stdout
    kinds = {int(t) for t in __import__("re").findall(r'"type":"(\d)","data":\{"groupId":"' + group, out)}
    assert kinds == {3, 4, 5, 6, 7, 8}, kinds
    assert '"memberEpoch":' in out and '"assignedPartitions":[{"topicId":' in out


def test_empty_groups_convert_between_protocols(gbroker, names):
    """An empty classic group becomes a consumer group when a consumer-protocol member joins, and
    back when a classic member joins the empty consumer group; the committed offsets stay."""
    from group_helpers import FAST
    topic, group = names
    b = gbroker.bootstrap
    create_topic(b, topic, 1)
    produce_ids(b, topic, [0], 9)

    def read(conf: dict, n: int) -> list[int]:
        c = Consumer({"bootstrap.servers": b, "group.id": group, **conf})
        got: list[int] = []
        try:
            c.subscribe([topic])

            def more():
                m = c.poll(0.1)
                if m is not None and not m.error():
                    got.append(m.offset())
                    c.commit(message=m, asynchronous=False)
                return len(got) >= n
            wait_until(more, what=f"{n} records")
        finally:
            c.close()
        return got
    assert read(FAST, 3) == [0, 1, 2]                     # classic
    assert read(KIP848, 3) == [3, 4, 5]                   # the empty classic group became a consumer group
    a = AdminClient({"bootstrap.servers": b})
    listed = {g.group_id: g for g in a.list_consumer_groups(request_timeout=WAIT).result(WAIT).valid}
    assert listed[group].type.name == "CONSUMER"
    assert read(FAST, 3) == [6, 7, 8]                     # and back to a classic group
    listed = {g.group_id: g for g in a.list_consumer_groups(request_timeout=WAIT).result(WAIT).valid}
    assert listed[group].type.name == "CLASSIC"


def test_consumer_groups_tool_describes_a_consumer_group(gbroker, names):
    """`samsa consumer-groups` shows what Kafka 4.4.0's kafka-consumer-groups.sh shows for a consumer
    group (columns observed against it): member epochs, current and target assignments, epochs."""
    from cli_tools import samsa
    topic, group = names
    b = gbroker.bootstrap
    create_topic(b, topic, 3)
    log = EventLog()
    members = [Member(b, group, [topic], log, f"cli{i}", base=KIP848) for i in range(2)]
    for m in members:
        m.start()
    try:
        wait_split(b, group, members, 3)
        from samsa.client.admin import Admin
        with Admin({"bootstrap.servers": b}) as admin:  # Samsa's admin: ConsumerGroupDescribe
            d = admin.describe_consumer_groups([group])[group]
        assert (d.type, d.state, d.partition_assignor) == ("consumer", "Stable", "uniform")
        r = samsa("consumer-groups", "--bootstrap-server", b, "--describe", "--group", group, "--members", "--verbose")
        lines = r.stdout.strip().splitlines()
        assert lines[0].split() == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "CURRENT-EPOCH",
                                    "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]
        rows = sorted(line.split() for line in lines[1:])
        want = sorted([group, m.member_id, m.host, m.client_id, str(len(m.assignment)), str(m.member_epoch),
                       f"{topic}:" + ",".join(str(tp.partition) for tp in m.assignment), str(d.target_assignment_epoch),
                       f"{topic}:" + ",".join(str(tp.partition) for tp in m.target_assignment)] for m in d.members)
        assert rows == want
        r = samsa("consumer-groups", "--bootstrap-server", b, "--describe", "--group", group, "--state", "--verbose")
        header, row = r.stdout.strip().splitlines()
        assert header.split() == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE", "GROUP-EPOCH",
                                  "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"]
        assert row.split()[3:] == ["uniform", "Stable", str(d.group_epoch), str(d.target_assignment_epoch), "2"]
        r = samsa("consumer-groups", "--bootstrap-server", b, "--list", "--type", "consumer")
        assert [group, "Consumer"] in [line.split() for line in r.stdout.splitlines()]
    finally:
        for m in members:
            m.stop()
