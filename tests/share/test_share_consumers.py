"""Share groups (KIP-932) with confluent-kafka's ShareConsumer (librdkafka 2.15's share
consumer), the same scenarios against Apache Kafka 4.4.0 and against Samsa.

Each test has a topic and a share group of its own; the group's configs (IncrementalAlterConfigs
on the GROUP resource) make it start at the earliest offset, heartbeat every 500 ms and, where
the scenario needs it, lock records for a short time or deliver them a limited number of times.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import AcknowledgeType

from share_helpers import WAIT, confluent_share_consumer, poll_values, share_out
from waiting import wait_until

HERE = Path(__file__).resolve().parent


def test_three_consumers_share_one_partition_exactly_once(target):
    topic, group = target.names("three")
    target.create_topic(topic)
    target.group_config(group)
    consumers = [confluent_share_consumer(target, group, topic, max_poll_records=10) for _ in range(3)]
    values = [f"v{i}" for i in range(150)]
    got = share_out(target, group, topic,
                    [lambda c=c: [m.value().decode() for m in c.poll(0.2) if not m.error()] for c in consumers],
                    [c.close for c in consumers], values)
    everything = [v for g in got for v in g]
    assert sorted(everything) == sorted(values)  # each exactly once
    assert all(got), [len(g) for g in got]        # and each consumer had a share


def test_release_redelivers_reject_archives(target):
    topic, group = target.names("ackkinds")
    target.create_topic(topic)
    target.group_config(group)
    target.produce(topic, ["accept", "release", "reject", "last"])
    c = confluent_share_consumer(target, group, topic, share_acknowledgement_mode="explicit")
    kinds = {"accept": AcknowledgeType.ACCEPT, "reject": AcknowledgeType.REJECT, "last": AcknowledgeType.ACCEPT}

    def ack(m) -> None:
        v = m.value().decode()
        if v == "release":
            c.acknowledge(m, AcknowledgeType.RELEASE if m.delivery_count() == 1 else AcknowledgeType.ACCEPT)
        else:
            c.acknowledge(m, kinds[v])
    try:
        got = poll_values(c, lambda r: ("release", 2) in r, on_record=ack)
        c.commit_sync()
        # The rejected record is archived, the others accepted: the next record handed out is a new one.
        target.produce(topic, ["sentinel"])
        kinds["sentinel"] = AcknowledgeType.ACCEPT
        later = poll_values(c, lambda r: ("sentinel", 1) in r, on_record=ack)
        c.commit_sync()
    finally:
        c.close()
    assert sorted(got) == [("accept", 1), ("last", 1), ("reject", 1), ("release", 1), ("release", 2)]
    assert later == [("sentinel", 1)]


def test_unacknowledged_records_come_back_after_the_lock(target):
    """A consumer that stops acknowledging: another gets its records once their locks expire."""
    topic, group = target.names("lock")
    target.create_topic(topic)
    target.group_config(group, share_record_lock_duration_ms=1500)
    values = [f"v{i}" for i in range(5)]
    target.produce(topic, values)
    stuck = confluent_share_consumer(target, group, topic, share_acknowledgement_mode="explicit")
    other = None
    try:
        first = poll_values(stuck, lambda r: len(r) >= len(values))  # acquired, never acknowledged
        assert {c for _, c in first} == {1}
        other = confluent_share_consumer(target, group, topic)
        again = poll_values(other, lambda r: len({v for v, _ in r}) >= len(values))
        other.commit_sync()
    finally:
        if other is not None:
            other.close()
        stuck.close()
    assert sorted(v for v, _ in again) == values
    assert all(c >= 2 for _, c in again), again


def test_delivery_count_limit_archives(target):
    topic, group = target.names("limit")
    target.create_topic(topic)
    target.group_config(group, share_delivery_count_limit=2)
    target.produce(topic, ["poison", "fine"])
    c = confluent_share_consumer(target, group, topic, share_acknowledgement_mode="explicit")

    def ack(m) -> None:
        c.acknowledge(m, AcknowledgeType.RELEASE if m.value() == b"poison" else AcknowledgeType.ACCEPT)
    try:
        got = poll_values(c, lambda r: ("poison", 2) in r and ("fine", 1) in r, on_record=ack)
        c.commit_sync()
        target.produce(topic, ["sentinel"])
        later = poll_values(c, lambda r: ("sentinel", 1) in r, on_record=ack)
        c.commit_sync()
    finally:
        c.close()
    assert sorted(got) == [("fine", 1), ("poison", 1), ("poison", 2)]
    assert later == [("sentinel", 1)]  # released twice at a limit of 2: archived, not delivered a third time


def test_read_committed_share_group_skips_aborted(target):
    topic, group = target.names("txn")
    target.create_topic(topic)
    target.group_config(group, share_isolation_level="read_committed")
    target.produce_transactions(topic, committed=["c1", "c2"], aborted=["a1", "a2"])
    target.produce(topic, ["plain"])
    c = confluent_share_consumer(target, group, topic)
    try:
        got = poll_values(c, lambda r: ("plain", 1) in r)
    finally:
        c.close()
    assert sorted(v for v, _ in got) == ["c1", "c2", "plain"]


def test_sigkilled_consumer_loses_nothing(target, tmp_path):
    """A consumer process SIGKILLed holding acquired records: another consumer gets every record."""
    topic, group = target.names("kill")
    target.create_topic(topic)
    target.group_config(group, share_record_lock_duration_ms=1500)
    values = [f"v{i}" for i in range(50)]
    target.produce(topic, values)
    out = tmp_path / "worker.out"
    with open(out, "w") as f:
        worker = subprocess.Popen([sys.executable, str(HERE / "share_worker.py"), target.bootstrap, group, topic],
                                  stdout=f, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        wait_until(lambda: "rec " in out.read_text(), "the worker holds records", WAIT)
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait(10)
    held = {line.split()[1] for line in out.read_text().splitlines() if line.startswith("rec ")}
    assert held
    c = confluent_share_consumer(target, group, topic)
    try:
        got = poll_values(c, lambda r: {v for v, _ in r} >= set(values))
        c.commit_sync()
    finally:
        c.close()
    assert {v for v, _ in got} == set(values)
    assert all(n >= 2 for v, n in got if v in held), got
