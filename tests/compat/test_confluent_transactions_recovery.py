"""Transactions that outlive their producer or their broker: transaction.timeout.ms aborts
and fences, and a broker SIGKILLed mid-transaction reloads __transaction_state and the open
transactions of its logs."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from compat_helpers import WAIT, BrokerProcess, consume, consumer, create_topic, producer, start, wait_until
from confluent_kafka import KafkaException, TopicPartition

from samsa.protocol.api_keys import ApiKey
from compat_helpers import raw_call


def lso(bootstrap: str, topic: str) -> int:
    c = consumer(bootstrap, isolation_level="read_committed")
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=WAIT, cached=False)[1]
    finally:
        c.close()


def describe(port: int, txn_id: str) -> dict:
    return raw_call(port, ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [txn_id]})["transaction_states"][0]


def test_timed_out_transaction_is_aborted_and_its_producer_fenced(tmp_path):
    b = start(BrokerProcess(tmp_path, **{"transaction.abort.timed.out.transaction.cleanup.interval.ms": 200}))
    try:
        create_topic(b.bootstrap, "timeout")
        txn_id = f"slow-{uuid.uuid4().hex[:6]}"
        p = producer(b.bootstrap, transactional_id=txn_id, transaction_timeout_ms=1500, message_timeout_ms=1500)
        p.init_transactions(WAIT)
        p.begin_transaction()
        p.produce("timeout", value=b"never committed")
        p.flush(WAIT)
        plain = producer(b.bootstrap)
        plain.produce("timeout", value=b"plain")
        plain.flush(WAIT)
        assert lso(b.bootstrap, "timeout") == 0
        wait_until(lambda: describe(b.port, txn_id)["transaction_state"] == "CompleteAbort",
                   "the coordinator to abort the transaction", WAIT)
        wait_until(lambda: lso(b.bootstrap, "timeout") == 3, "the LSO to move past the abort marker", WAIT)
        assert [r.value for r in consume(b.bootstrap, "timeout", count=1, isolation_level="read_committed")] == [
            b"plain"]
        try:  # the producer was fenced: its commit fails (librdkafka may also report it on produce)
            p.produce("timeout", value=b"late")
            p.commit_transaction(WAIT)
            raise AssertionError("a fenced producer committed")
        except KafkaException as e:
            assert e.args[0].fatal() or e.args[0].txn_requires_abort(), e
        assert describe(b.port, txn_id)["producer_epoch"] >= 1
    finally:
        b.stop()


def test_broker_killed_mid_transaction_then_commit(tmp_path):
    b = start(BrokerProcess(tmp_path))
    port = b.port
    try:
        create_topic(b.bootstrap, "restart")
        txn_id = f"restart-{uuid.uuid4().hex[:6]}"
        p = producer(b.bootstrap, transactional_id=txn_id, transaction_timeout_ms=60000)
        p.init_transactions(WAIT)
        p.begin_transaction()
        for i in range(10):
            p.produce("restart", value=b"%d" % i)
        p.flush(WAIT)
        b.kill()
        b = start(BrokerProcess(tmp_path, port=port))
        assert lso(b.bootstrap, "restart") == 0  # the open transaction was reloaded from the log
        assert describe(b.port, txn_id)["transaction_state"] == "Ongoing"
        p.commit_transaction(WAIT)
        got = consume(b.bootstrap, "restart", count=10, isolation_level="read_committed")
        assert [r.value for r in got] == [b"%d" % i for i in range(10)]
        wait_until(lambda: lso(b.bootstrap, "restart") == 11, "the LSO past the marker", WAIT)
    finally:
        b.stop()


def test_broker_killed_with_an_abandoned_transaction_aborts_it_after_restart(tmp_path):
    overrides = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": 200}
    b = start(BrokerProcess(tmp_path, **overrides))
    port = b.port
    try:
        create_topic(b.bootstrap, "abandoned")
        txn_id = f"gone-{uuid.uuid4().hex[:6]}"
        p = producer(b.bootstrap, transactional_id=txn_id, transaction_timeout_ms=2000, message_timeout_ms=2000)
        p.init_transactions(WAIT)
        p.begin_transaction()
        p.produce("abandoned", value=b"lost")
        p.flush(WAIT)
        del p
        b.kill()
        b = start(BrokerProcess(tmp_path, port=port, **overrides))
        plain = producer(b.bootstrap)
        plain.produce("abandoned", value=b"kept")
        plain.flush(WAIT)
        wait_until(lambda: lso(b.bootstrap, "abandoned") == 3, "the timed-out transaction to be aborted", WAIT)
        assert [r.value for r in consume(b.bootstrap, "abandoned", count=1, isolation_level="read_committed")] == [
            b"kept"]
    finally:
        b.stop()


def test_consume_transform_produce_killed_mid_transaction_outputs_each_once(tmp_path):
    """The loop of ctp_proc.py SIGKILLed twice while it runs, and restarted: every input gives
    exactly one committed output, and the group's offsets end at the end of the input."""
    b = start(BrokerProcess(tmp_path))
    procs: list[subprocess.Popen] = []
    try:
        create_topic(b.bootstrap, "in", partitions=2)
        create_topic(b.bootstrap, "out", partitions=2)
        feeder = producer(b.bootstrap)
        for i in range(300):
            feeder.produce("in", b"%d" % i, partition=i % 2)
        feeder.flush(WAIT)
        args = json.dumps({"bootstrap": b.bootstrap, "group": "ctp", "source": "in", "sink": "out",
                           "txn_id": "ctp-app"})

        def launch() -> subprocess.Popen:
            p = subprocess.Popen([sys.executable, str(Path(__file__).with_name("ctp_proc.py")), args],
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            procs.append(p)
            return p

        def committed_outputs() -> int:
            return sum(1 for _ in consume_committed(b.bootstrap))

        for round_no in range(2):
            p = launch()
            wait_until(lambda: p.stdout.readline().startswith("committed"), "a committed transaction", 60)
            p.send_signal(signal.SIGKILL)  # most likely inside a transaction: the loop never rests
            p.wait(10)
        launch()
        wait_until(lambda: committed_outputs() == 300, "every output committed", 120)
        values = [v for v in consume_committed(b.bootstrap)]
        assert sorted(values) == sorted(b"out-%d" % i for i in range(300))  # each exactly once
        c = consumer(b.bootstrap, group_id="ctp")
        try:
            offsets = c.committed([TopicPartition("in", 0), TopicPartition("in", 1)], WAIT)
            assert [tp.offset for tp in offsets] == [150, 150]
        finally:
            c.close()
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait(10)
        b.stop()


def consume_committed(bootstrap: str):
    """The committed records of ``out`` (both partitions), up to the LSO."""
    c = consumer(bootstrap, isolation_level="read_committed")
    try:
        tps = [TopicPartition("out", p) for p in range(2)]
        ends = [c.get_watermark_offsets(tp, timeout=WAIT, cached=False)[1] for tp in tps]
        c.assign([TopicPartition("out", p, 0) for p in range(2)])
        done = {p: ends[p] == 0 for p in range(2)}
        out = []
        deadline = time.monotonic() + WAIT
        while not all(done.values()) and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                for p in range(2):  # control records and aborted data move the position without a message
                    done[p] = done[p] or c.position([TopicPartition("out", p)])[0].offset >= ends[p]
                continue
            if m.error():
                continue
            out.append(m.value())
            done[m.partition()] = done[m.partition()] or m.offset() + 1 >= ends[m.partition()]
        return out
    finally:
        c.close()
