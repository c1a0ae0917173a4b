"""Committed offsets are durable: they live in the compacted ``__consumer_offsets`` topic and come
back after the broker restarts, cleanly (SIGTERM) or not (SIGKILL) — including while a group is
committing as fast as it can."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, TopicPartition

from group_helpers import (FAST, EventLog, GroupClient, Member, ProcMember, check_group_delivery, committed,
                           committed_tps, create_topic, end_offsets, merge, produce_ids, wait_consumed, wait_stable,
                           wait_until)

PARTITIONS = 3


def restart(b, how: str):
    """Stop the broker process (SIGTERM or SIGKILL) and start it again on the same data dir and port."""
    if how == "kill":
        b.kill()
    else:
        b.stop()
    b.start()


@pytest.mark.parametrize("how", ["term", "kill"])
def test_offsets_survive_restart(own_broker, names, how):
    b = own_broker()
    topic, group = names
    create_topic(b.bootstrap, topic, PARTITIONS)
    acked = produce_ids(b.bootstrap, topic, range(PARTITIONS), 20)
    want = {0: 5, 1: 12, 2: 20}

    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, **FAST})
    try:
        c.subscribe([topic])
        wait_until(lambda: c.poll(0.1) is None and len(c.assignment()) == PARTITIONS,
                   what="the consumer's assignment")
        c.commit(offsets=[TopicPartition(topic, p, o, metadata=f"m{p}", leader_epoch=0) for p, o in want.items()],
                 asynchronous=False)
    finally:
        c.close()
    before = {tp.partition: (tp.offset, tp.metadata) for tp in committed_tps(b.bootstrap, group, topic,
                                                                             range(PARTITIONS))}
    assert before == {p: (o, f"m{p}") for p, o in want.items()}
    raw = GroupClient(b.port)
    raw_before = raw.fetch(group, None)
    raw.close()
    # confluent-kafka-python sends the metadata with its C string terminator (strlen + 1 bytes);
    # the broker stores the string it was given, as Kafka does
    assert {k: (v[0], v[1], v[2].rstrip("\x00"), v[3]) for k, v in raw_before.items() if k is not None} == {
        (topic, p): (o, 0, f"m{p}", 0) for p, o in want.items()}

    restart(b, how)

    # OffsetFetch after the restart: same offsets, metadata and leader epochs
    after = {tp.partition: (tp.offset, tp.metadata) for tp in committed_tps(b.bootstrap, group, topic,
                                                                            range(PARTITIONS))}
    assert after == before
    raw = GroupClient(b.port)
    assert raw.fetch(group, None) == raw_before
    raw.close()

    # a new member of the group resumes exactly there
    log = EventLog()
    m = Member(b.bootstrap, group, [topic], log, "resumer")
    try:
        m.start()
        wait_until(lambda: {(e.partition, e.offset) for e in log.of("rec")} ==
                   {(p, o) for p, rs in acked.items() for o, _ in rs if o >= want[p]},
                   what="the new member to read from the committed offsets on")
        firsts = {}
        for e in log.of("rec"):
            firsts.setdefault(e.partition, e.offset)
        assert firsts == {p: o for p, o in want.items() if o < 20}
    finally:
        m.stop()


def test_sigkill_while_committing(own_broker, names):
    b = own_broker()
    topic, group = names
    create_topic(b.bootstrap, topic, PARTITIONS)
    produce_ids(b.bootstrap, topic, range(PARTITIONS), 1500)
    resume_at = None
    for round_ in range(2):
        # a consumer committing synchronously after every record, reporting each commit sent and acknowledged
        member = ProcMember(b.bootstrap, group, [topic], f"committer{round_}", commit="each")
        try:
            wait_until(lambda: len(member.of("ack")) >= 300, what="300 acknowledged commits")
            b.kill()
            member.kill()
        finally:
            member.kill()
        if resume_at is not None:
            # it started where the previous round's commits left off
            firsts: dict[int, int] = {}
            for e in member.of("rec"):
                firsts.setdefault(e["p"], e["o"])
            assert all(firsts[p] == resume_at[p] for p in firsts), (firsts, resume_at)

        last_ack: dict[int, int] = dict(resume_at or {})
        in_flight = None
        for e in member.events:
            if e["ev"] == "try":
                in_flight = (e["p"], e["o"])
            elif e["ev"] == "ack":
                last_ack[e["p"]] = e["o"]
                in_flight = None
            elif e["ev"] == "fail":
                break   # failed as seen by the client, but may have been written: stays "in flight"

        b.start()
        got = {tp.partition: tp.offset for tp in committed_tps(b.bootstrap, group, topic, range(PARTITIONS))}
        for p in range(PARTITIONS):
            allowed = {last_ack.get(p, -1001)}
            if in_flight and in_flight[0] == p:
                allowed.add(in_flight[1])
            assert got[p] in allowed, (f"round {round_}, partition {p}: committed {got[p]} after the crash, "
                                       f"last acknowledged {last_ack.get(p)}, in flight {in_flight}")
        resume_at = got
    assert end_offsets(b.bootstrap, topic, range(PARTITIONS)) == {p: 1500 for p in range(PARTITIONS)}


@pytest.mark.parametrize("how", ["term", "kill"])
def test_group_carries_on_across_broker_restart(own_broker, names, how):
    """A group of two consumers keeps going while the broker restarts under it: the members
    reconnect, the group (reloaded from __consumer_offsets) is Stable again, and in the end every
    record was read, none was read again after its commit was acknowledged, and the committed
    offsets are the log end offsets."""
    b = own_broker()
    topic, group = names
    create_topic(b.bootstrap, topic, 4)
    first = produce_ids(b.bootstrap, topic, range(4), 30)
    log = EventLog()
    members = [Member(b.bootstrap, group, [topic], log, f"m{i}") for i in range(2)]
    try:
        for m in members:
            m.start()
        wait_stable(b.bootstrap, group, 2, 4)
        wait_consumed(log, first)
        restart(b, how)
        second = produce_ids(b.bootstrap, topic, range(4), 30, start=30)
        expected = merge(first, second)
        wait_consumed(log, expected)
        wait_stable(b.bootstrap, group, 2, 4)
        check_group_delivery(log, expected, committed(b.bootstrap, group, topic, range(4)))
    finally:
        for m in members:
            if m.is_alive():
                m.stop()


def test_deletions_survive_restart(own_broker, names):
    """DeleteGroups and OffsetDelete write tombstones: after a crash and restart the deleted group
    and the deleted offsets stay gone, the rest stays."""
    b = own_broker()
    topic, group = names
    create_topic(b.bootstrap, topic, 2)
    raw = GroupClient(b.port)
    wait_until(lambda: raw.call(10, 3, {"key": group, "key_type": 0})["error_code"] == 0, what="a coordinator")
    gone, kept = group + "-gone", group + "-kept"
    for g in (gone, kept):
        assert set(raw.commit(g, {(topic, 0): 5, (topic, 1): 6}, metadata="x").values()) == {0}
    r = raw.call(42, 2, {"groups_names": [gone]})
    assert r["results"][0]["error_code"] == 0
    r = raw.call(47, 0, {"group_id": kept, "topics": [{"name": topic, "partitions": [{"partition_index": 1}]}]})
    assert r["error_code"] == 0 and r["topics"][0]["partitions"][0]["error_code"] == 0
    raw.close()

    restart(b, "kill")

    raw = GroupClient(b.port)
    f = wait_until(lambda: (lambda r: r[None] == 0 and r)(raw.fetch(kept, [(topic, 0), (topic, 1)])),
                   what="OffsetFetch after the restart")
    assert f[(topic, 0)][0] == 5 and f[(topic, 1)][0] == -1
    f = raw.fetch(gone, [(topic, 0), (topic, 1)])
    assert f[(topic, 0)][0] == -1 and f[(topic, 1)][0] == -1
    listed = {g["group_id"] for g in raw.call(16, 4, {"states_filter": []})["groups"]}
    assert kept in listed and gone not in listed
    raw.close()


def test_taking_over_the_offsets_topic_is_one_log_line(tmp_path, caplog):
    """A broker that leads every __consumer_offsets partition says so once, not once a partition."""
    import logging

    import samsa.embedded
    from samsa import Consumer as SamsaConsumer

    config = {"log.dirs": str(tmp_path), "offsets.topic.num.partitions": 10}
    with samsa.embedded.Broker(config) as b, SamsaConsumer({"bootstrap.servers": b.bootstrap_servers,
                                                            "group.id": "g", "auto.offset.reset": "earliest"}) as c:
        c.subscribe(["t"])
        c.poll(0.5)  # the group's FindCoordinator creates __consumer_offsets
    caplog.set_level(logging.INFO, logger="samsa")
    with samsa.embedded.Broker(config):
        pass
    loaded = [r.getMessage() for r in caplog.records if "__consumer_offsets" in r.getMessage()
              and r.getMessage().startswith("loaded")]
    assert len(loaded) == 1 and "of 10 __consumer_offsets partitions" in loaded[0], loaded
