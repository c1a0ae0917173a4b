"""Transactions with confluent-kafka (librdkafka's transactional producer, read_committed
consumers) against a real broker; and the transaction APIs' bad input, with raw requests."""

from __future__ import annotations

import time
import uuid

import pytest
from compat_helpers import WAIT, consume, consumer, create_topic, producer, raw_call, wait_until
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from samsa.protocol import errors
from samsa.protocol.api_keys import ApiKey
from samsa.protocol.batch import validate
from samsa.protocol.records import build_batch


def txn_producer(bootstrap: str, txn_id: str | None = None, **conf):
    p = producer(bootstrap, transactional_id=txn_id or f"txn-{uuid.uuid4().hex[:8]}", **conf)
    p.init_transactions(WAIT)
    return p


def values(recs) -> list[bytes]:
    return [r.value for r in recs]


def test_commit_and_abort_read_committed_and_uncommitted(broker, topic_name):
    create_topic(broker.bootstrap, topic_name)
    p = txn_producer(broker.bootstrap)
    p.begin_transaction()
    for i in range(5):
        p.produce(topic_name, value=b"committed-%d" % i)
    p.commit_transaction(WAIT)
    p.begin_transaction()
    for i in range(3):
        p.produce(topic_name, value=b"aborted-%d" % i)
    p.flush(WAIT)
    p.abort_transaction(WAIT)
    p.begin_transaction()
    p.produce(topic_name, value=b"last")
    p.commit_transaction(WAIT)

    committed = consume(broker.bootstrap, topic_name, count=6, isolation_level="read_committed")
    assert values(committed) == [b"committed-%d" % i for i in range(5)] + [b"last"]
    uncommitted = consume(broker.bootstrap, topic_name, count=9, isolation_level="read_uncommitted")
    assert values(uncommitted) == ([b"committed-%d" % i for i in range(5)] + [b"aborted-%d" % i for i in range(3)]
                                   + [b"last"])
    # 9 records and 3 markers; nothing open, so the LSO is the high watermark for both isolation levels
    for iso in ("read_committed", "read_uncommitted"):
        c = consumer(broker.bootstrap, isolation_level=iso)
        try:
            assert c.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=WAIT, cached=False) == (0, 12)
        finally:
            c.close()


def test_open_transaction_holds_back_read_committed(broker, topic_name):
    create_topic(broker.bootstrap, topic_name)
    plain = producer(broker.bootstrap)
    plain.produce(topic_name, value=b"before")
    plain.flush(WAIT)
    p = txn_producer(broker.bootstrap)
    p.begin_transaction()
    p.produce(topic_name, value=b"open")
    p.flush(WAIT)
    plain.produce(topic_name, value=b"after")  # above the open transaction: not stable yet
    plain.flush(WAIT)

    rc = consumer(broker.bootstrap, isolation_level="read_committed", group_id=f"g-{uuid.uuid4().hex[:6]}")
    ru = consumer(broker.bootstrap, isolation_level="read_uncommitted")
    tp = TopicPartition(topic_name, 0)
    try:
        assert rc.get_watermark_offsets(tp, timeout=WAIT, cached=False) == (0, 1)  # the LSO
        assert ru.get_watermark_offsets(tp, timeout=WAIT, cached=False) == (0, 3)
        rc.assign([TopicPartition(topic_name, 0, 0)])
        seen = []

        def read_some():
            m = rc.poll(0.2)
            if m is not None and not m.error():
                seen.append(m.value())
            return seen
        wait_until(read_some, "the record before the open transaction", WAIT)
        assert seen == [b"before"]
        assert rc.poll(1.0) is None  # nothing past the LSO
        p.commit_transaction(WAIT)
        wait_until(lambda: read_some() and len(seen) == 3, "the rest once committed", WAIT)
        assert seen == [b"before", b"open", b"after"]
        wait_until(lambda: rc.poll(0.1) is None and rc.position([tp])[0].offset == 4,
                   "the position past the commit marker", WAIT)
        assert rc.get_watermark_offsets(tp, timeout=WAIT, cached=False) == (0, 4)
    finally:
        rc.close()
        ru.close()


def test_second_producer_fences_the_first(broker, topic_name):
    create_topic(broker.bootstrap, topic_name)
    txn_id = f"fence-{uuid.uuid4().hex[:8]}"
    p1 = txn_producer(broker.bootstrap, txn_id)
    p1.begin_transaction()
    p1.produce(topic_name, value=b"zombie")
    p1.flush(WAIT)
    p2 = txn_producer(broker.bootstrap, txn_id)  # aborts p1's open transaction, bumps the epoch
    p2.begin_transaction()
    p2.produce(topic_name, value=b"winner")
    p2.commit_transaction(WAIT)

    with pytest.raises(KafkaException) as info:
        p1.produce(topic_name, value=b"zombie-2")
        p1.commit_transaction(WAIT)
    err = info.value.args[0]
    assert err.fatal() or err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                         KafkaError.INVALID_PRODUCER_EPOCH), err
    assert values(consume(broker.bootstrap, topic_name, count=1, isolation_level="read_committed")) == [b"winner"]
    assert values(consume(broker.bootstrap, topic_name, count=2, isolation_level="read_uncommitted")) == [
        b"zombie", b"winner"]  # the zombie's second record was refused


def test_consume_transform_produce(broker, topic_name):
    source, sink = topic_name + "-in", topic_name + "-out"
    create_topic(broker.bootstrap, source, partitions=2)
    create_topic(broker.bootstrap, sink)
    feeder = producer(broker.bootstrap)
    for i in range(40):
        feeder.produce(source, key=b"%d" % i, value=b"%d" % i, partition=i % 2)
    feeder.flush(WAIT)
    group = f"ctp-{uuid.uuid4().hex[:6]}"

    def run(rounds_to_abort: set[int], stop_after: int) -> None:
        c = consumer(broker.bootstrap, group_id=group, auto_offset_reset="earliest",
                     isolation_level="read_committed")
        c.subscribe([source])
        p = txn_producer(broker.bootstrap, f"{group}-txn")
        done = 0
        round_no = 0
        try:
            deadline = time.monotonic() + WAIT
            while done < stop_after and time.monotonic() < deadline:
                msgs = [m for m in c.consume(10, 0.5) if not m.error()]
                if not msgs:
                    continue
                p.begin_transaction()
                for m in msgs:
                    p.produce(sink, value=b"x" + m.value())
                offsets = [TopicPartition(tp.topic, tp.partition, tp.offset) for tp in c.position(c.assignment())]
                p.send_offsets_to_transaction(offsets, c.consumer_group_metadata(), WAIT)
                if round_no in rounds_to_abort:
                    p.abort_transaction(WAIT)
                    # rewind to the committed offsets, as an application does after an abort
                    for tp in c.committed(c.assignment(), WAIT):
                        c.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else 0))
                else:
                    p.commit_transaction(WAIT)
                    done += len(msgs)
                round_no += 1
        finally:
            c.close()
        assert done >= stop_after

    run({0, 2}, 40)
    out = consume(broker.bootstrap, sink, isolation_level="read_committed", count=40)
    assert sorted(values(out)) == sorted(b"x%d" % i for i in range(40))
    c = consumer(broker.bootstrap, group_id=group)
    try:
        committed = c.committed([TopicPartition(source, 0), TopicPartition(source, 1)], WAIT)
        assert sum(tp.offset for tp in committed) == 40
    finally:
        c.close()


def test_back_to_back_transactions_with_offsets_when_both_coordinators_share_the_broker(broker, topic_name):
    """librdkafka's 0103 met a fatal INVALID_TXN_STATE from send_offsets_to_transaction when the
    transaction's and the group's coordinators were one broker (as here) and the previous
    transaction was still completing; Kafka answers the retriable CONCURRENT_TRANSACTIONS.
    Transactions back to back, each with records on three partitions and the group's offsets,
    the next begun as soon as the last commit returns."""
    create_topic(broker.bootstrap, topic_name, partitions=3)
    group = f"b2b-{uuid.uuid4().hex[:6]}"
    c = consumer(broker.bootstrap, group_id=group)
    p = txn_producer(broker.bootstrap, f"{group}-txn")
    committed = []
    try:
        for n in range(20):
            p.begin_transaction()
            batch = [b"t%d-p%d" % (n, k) for k in range(3)]
            for k, v in enumerate(batch):
                p.produce(topic_name, value=v, partition=k)
            p.send_offsets_to_transaction([TopicPartition(topic_name, 0, n + 1)], c.consumer_group_metadata(), WAIT)
            if n % 7 == 6:
                p.abort_transaction(WAIT)
            else:
                p.commit_transaction(WAIT)
                committed += batch
        assert c.committed([TopicPartition(topic_name, 0)], WAIT)[0].offset == 20
    finally:
        c.close()
    out = [r for k in range(3) for r in consume(broker.bootstrap, topic_name, k, isolation_level="read_committed",
                                                 count=len(committed) // 3)]
    assert sorted(values(out)) == sorted(committed)


# ---------------------------------------------------------------- bad input, raw requests

def _find_coordinator(port: int, txn_id: str) -> None:
    def ok():
        r = raw_call(port, ApiKey.FIND_COORDINATOR, 3, {"key": txn_id, "key_type": 1})
        return r["error_code"] == 0
    wait_until(ok, "a transaction coordinator", WAIT)


def _init(port: int, txn_id: str, timeout_ms: int = 60000) -> tuple[int, int]:
    def call():
        r = raw_call(port, ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": txn_id,
                                                        "transaction_timeout_ms": timeout_ms,
                                                        "producer_id": -1, "producer_epoch": -1})
        return r if r["error_code"] == 0 else None
    r = wait_until(call, "InitProducerId", WAIT)
    return r["producer_id"], r["producer_epoch"]


def _end(port: int, txn_id: str, pid: int, epoch: int, commit: bool, version: int = 3) -> int:
    return raw_call(port, ApiKey.END_TXN, version, {"transactional_id": txn_id, "producer_id": pid,
                                                    "producer_epoch": epoch, "committed": commit})["error_code"]


def _add(port: int, txn_id: str, pid: int, epoch: int, topic: str) -> int:
    r = raw_call(port, ApiKey.ADD_PARTITIONS_TO_TXN, 3, {
        "v3_and_below_transactional_id": txn_id, "v3_and_below_producer_id": pid,
        "v3_and_below_producer_epoch": epoch, "v3_and_below_topics": [{"name": topic, "partitions": [0]}]})
    return r["results_by_topic_v3_and_below"][0]["results_by_partition"][0]["partition_error_code"]


def _produce_txn(port: int, txn_id: str, topic: str, pid: int, epoch: int, seq: int = 0) -> int:
    data = build_batch([(None, b"raw", None)], producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                       is_transactional=True)
    validate(data)
    r = raw_call(port, ApiKey.PRODUCE, 9, {"transactional_id": txn_id, "acks": -1, "timeout_ms": 10000,
                                           "topic_data": [{"name": topic, "partition_data": [
                                               {"index": 0, "records": data}]}]})
    return r["responses"][0]["partition_responses"][0]["error_code"]


def test_bad_transaction_requests_get_kafka_errors(broker, topic_name):
    create_topic(broker.bootstrap, topic_name)
    port = broker.port
    txn_id = f"raw-{uuid.uuid4().hex[:8]}"
    _find_coordinator(port, txn_id)

    # EndTxn for a transactional id nobody initialized
    assert _end(port, f"unknown-{uuid.uuid4().hex[:8]}", 12345, 0, True) == errors.E_INVALID_PRODUCER_ID_MAPPING
    pid, epoch = _init(port, txn_id)
    # a transactional batch for a partition not added to the transaction (KIP-890)
    assert _produce_txn(port, txn_id, topic_name, pid, epoch) == errors.E_INVALID_TXN_STATE
    # EndTxn with nothing open
    assert _end(port, txn_id, pid, epoch, True) == errors.E_INVALID_TXN_STATE
    assert _add(port, txn_id, pid, epoch, topic_name) == 0
    assert _add(port, txn_id, pid, epoch, "no-such-topic-here") == errors.E_UNKNOWN_TOPIC_OR_PARTITION
    # a wrong epoch: PRODUCER_FENCED, or INVALID_PRODUCER_EPOCH for versions before KIP-588
    assert _end(port, txn_id, pid, epoch + 1, True) == errors.E_PRODUCER_FENCED
    assert _end(port, txn_id, pid, epoch + 1, True, version=1) == errors.E_INVALID_PRODUCER_EPOCH
    assert _end(port, txn_id, pid + 1, epoch, True) == errors.E_INVALID_PRODUCER_ID_MAPPING
    # TxnOffsetCommit without AddOffsetsToTxn: the offsets partition is not in the transaction
    r = raw_call(port, ApiKey.TXN_OFFSET_COMMIT, 3, {
        "transactional_id": txn_id, "group_id": "raw-group", "producer_id": pid, "producer_epoch": epoch,
        "generation_id": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"name": topic_name, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                        "committed_leader_epoch": -1,
                                                        "committed_metadata": ""}]}]})
    assert r["topics"][0]["partitions"][0]["error_code"] == errors.E_INVALID_TXN_STATE
    # a transactional batch with a wrong epoch
    assert _produce_txn(port, txn_id, topic_name, pid, epoch + 1) == errors.E_INVALID_PRODUCER_EPOCH
    assert _produce_txn(port, txn_id, topic_name, pid, epoch) == 0
    assert _end(port, txn_id, pid, epoch, True) == 0
    wait_until(lambda: _end(port, txn_id, pid, epoch, True) == 0 and raw_call(
        port, ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [txn_id]})["transaction_states"][0][
        "transaction_state"] == "CompleteCommit", "the commit to complete", WAIT)
    assert _end(port, txn_id, pid, epoch, False) == errors.E_INVALID_TXN_STATE  # abort after commit
    # the broker keeps serving, and the committed record is there
    assert values(consume(broker.bootstrap, topic_name, count=1, isolation_level="read_committed")) == [b"raw"]


def test_init_producer_id_refuses_bad_timeouts_and_empty_ids(broker):
    r = raw_call(broker.port, ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": "t-timeout",
                                                           "transaction_timeout_ms": 10 ** 9,
                                                           "producer_id": -1, "producer_epoch": -1})
    assert r["error_code"] in (errors.E_INVALID_TRANSACTION_TIMEOUT, errors.E_COORDINATOR_NOT_AVAILABLE,
                               errors.E_NOT_COORDINATOR)
    _find_coordinator(broker.port, "t-timeout")
    r = raw_call(broker.port, ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": "t-timeout",
                                                           "transaction_timeout_ms": 10 ** 9,
                                                           "producer_id": -1, "producer_epoch": -1})
    assert r["error_code"] == errors.E_INVALID_TRANSACTION_TIMEOUT
    r = raw_call(broker.port, ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": "", "transaction_timeout_ms": 1000,
                                                           "producer_id": -1, "producer_epoch": -1})
    assert r["error_code"] == errors.E_INVALID_REQUEST
