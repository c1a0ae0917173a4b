"""Transactions version 2 (KIP-890 part 2) over the wire, with raw requests: the feature in
ApiVersions, EndTxn v5's answers step by step, TxnOffsetCommit v5 and Produce v12 adding their
partitions.

The expected answers are Apache Kafka 4.4.0's: the same steps were run against it
(transaction.version 2 finalized) and every answer and returned epoch matched."""

from __future__ import annotations

import uuid

from compat_helpers import WAIT, create_topic, raw_call, wait_until

from samsa.protocol import errors
from samsa.protocol.api_keys import ApiKey
from samsa.protocol.records import build_batch

NONE, FENCED, INVALID = 0, errors.E_PRODUCER_FENCED, errors.E_INVALID_TXN_STATE


def test_api_versions_advertise_transaction_version_2(broker):
    r = raw_call(broker.port, ApiKey.API_VERSIONS, 4, {"client_software_name": "t", "client_software_version": "1"})
    assert {"name": "transaction.version", "min_version": 0, "max_version": 2} in r["supported_features"]
    assert {"name": "transaction.version", "min_version_level": 2, "max_version_level": 2} in r["finalized_features"]
    assert r["finalized_features_epoch"] >= 0
    versions = {k["api_key"]: k["max_version"] for k in r["api_keys"]}
    assert (versions[ApiKey.END_TXN], versions[ApiKey.PRODUCE], versions[ApiKey.TXN_OFFSET_COMMIT]) >= (5, 12, 5)


class Txn:
    """One transactional id driven by raw requests."""

    def __init__(self, port: int) -> None:
        self.port, self.id = port, f"v2-{uuid.uuid4().hex[:8]}"
        wait_until(lambda: raw_call(port, ApiKey.FIND_COORDINATOR, 3, {"key": self.id, "key_type": 1})[
            "error_code"] == 0, "a transaction coordinator", WAIT)

        def init():
            r = raw_call(port, ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": self.id,
                                                            "transaction_timeout_ms": 60000,
                                                            "producer_id": -1, "producer_epoch": -1})
            return r if r["error_code"] == 0 else None
        r = wait_until(init, "InitProducerId", WAIT)
        self.pid, self.epoch0 = r["producer_id"], r["producer_epoch"]

    def end(self, epoch: int, commit: bool, version: int = 5) -> tuple[int, int, int]:
        """(error, producer id - ours or -1, epoch - the first or -1), after CONCURRENT_TRANSACTIONS."""
        def call():
            r = raw_call(self.port, ApiKey.END_TXN, version, {"transactional_id": self.id, "producer_id": self.pid,
                                                              "producer_epoch": epoch, "committed": commit})
            return None if r["error_code"] == errors.E_CONCURRENT_TRANSACTIONS else r
        r = wait_until(call, "EndTxn", WAIT)
        pid, e = r.get("producer_id", -1), r.get("producer_epoch", -1)
        return r["error_code"], pid - self.pid if pid >= 0 else -1, e - self.epoch0 if e >= 0 else -1

    def add(self, epoch: int, topic: str) -> int:
        def call():
            r = raw_call(self.port, ApiKey.ADD_PARTITIONS_TO_TXN, 3, {
                "v3_and_below_transactional_id": self.id, "v3_and_below_producer_id": self.pid,
                "v3_and_below_producer_epoch": epoch, "v3_and_below_topics": [{"name": topic, "partitions": [0]}]})
            code = r["results_by_topic_v3_and_below"][0]["results_by_partition"][0]["partition_error_code"]
            return None if code == errors.E_CONCURRENT_TRANSACTIONS else (code,)
        return wait_until(call, "AddPartitionsToTxn", WAIT)[0]


def test_end_txn_v5_answers_as_kafka(broker, topic_name):
    """Kafka's table for EndTxn v5 (a retry carries the epoch before the bump), and EndTxn v4
    (transactions version 1) beside it on the same id."""
    create_topic(broker.bootstrap, topic_name)
    t = Txn(broker.port)
    e = t.epoch0
    steps = [
        ("empty: commit", t.end(e, True), (INVALID, -1, -1)),
        ("empty: abort bumps", t.end(e, False), (NONE, 0, 1)),
        ("complete-abort: abort retry", t.end(e, False), (NONE, 0, 1)),
        ("complete-abort: commit retry", t.end(e, True), (INVALID, -1, -1)),
        ("complete-abort: commit", t.end(e + 1, True), (INVALID, -1, -1)),
        ("add with the old epoch", t.add(e, topic_name), FENCED),
        ("add", t.add(e + 1, topic_name), NONE),
        ("ongoing: commit with the old epoch", t.end(e, True), (FENCED, -1, -1)),
        ("ongoing: commit bumps", t.end(e + 1, True), (NONE, 0, 2)),
        ("complete-commit: commit retry", t.end(e + 1, True), (NONE, 0, 2)),
        ("complete-commit: abort retry", t.end(e + 1, False), (INVALID, -1, -1)),
        ("complete-commit: commit", t.end(e + 2, True), (INVALID, -1, -1)),
        ("complete-commit: an epoch never given", t.end(e + 3, True), (FENCED, -1, -1)),
        ("complete-commit: v4 commit", t.end(e + 2, True, 4), (NONE, -1, -1)),
        ("complete-commit: abort bumps", t.end(e + 2, False), (NONE, 0, 3)),
        ("add", t.add(e + 3, topic_name), NONE),
        ("ongoing: v4 abort, no bump", t.end(e + 3, False, 4), (NONE, -1, -1)),
        ("v4-aborted: v5 abort with the epoch before", t.end(e + 2, False), (NONE, 0, 3)),
        ("v4-aborted: v5 abort bumps", t.end(e + 3, False), (NONE, 0, 4)),
    ]
    assert [(name, got) for name, got, _ in steps] == [(name, want) for name, _, want in steps]


def test_txn_offset_commit_v5_adds_the_offsets_partition(broker, topic_name):
    """Without AddOffsetsToTxn, TxnOffsetCommit v4 is refused (TRANSACTION_ABORTABLE) and v5 adds
    the group's offsets partition to the transaction, which then commits."""
    create_topic(broker.bootstrap, topic_name)
    t = Txn(broker.port)
    group = f"g-{t.id}"
    wait_until(lambda: raw_call(broker.port, ApiKey.FIND_COORDINATOR, 3, {"key": group, "key_type": 0})[
        "error_code"] == 0, "a group coordinator", WAIT)

    def commit(version: int) -> int:
        r = raw_call(broker.port, ApiKey.TXN_OFFSET_COMMIT, version, {
            "transactional_id": t.id, "group_id": group, "producer_id": t.pid, "producer_epoch": t.epoch0,
            "generation_id": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": topic_name, "partitions": [{"partition_index": 0, "committed_offset": 7,
                                                            "committed_leader_epoch": -1,
                                                            "committed_metadata": ""}]}]})
        return r["topics"][0]["partitions"][0]["error_code"]
    assert commit(4) == errors.E_TRANSACTION_ABORTABLE
    assert commit(3) == errors.E_INVALID_TXN_STATE  # a client that predates TRANSACTION_ABORTABLE
    assert commit(5) == NONE
    d = raw_call(broker.port, ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [t.id]})["transaction_states"][0]
    assert (d["transaction_state"], [x["topic"] for x in d["topics"]]) == ("Ongoing", ["__consumer_offsets"])
    assert t.end(t.epoch0, True) == (NONE, 0, 1)
    r = wait_until(lambda: (x := raw_call(broker.port, ApiKey.OFFSET_FETCH, 5, {
        "group_id": group, "topics": [{"name": topic_name, "partition_indexes": [0]}], "require_stable": True}))[
        "topics"][0]["partitions"][0]["committed_offset"] == 7 and x, "the offset committed", WAIT)
    assert r["error_code"] == NONE


def test_produce_v12_adds_its_partitions(broker, topic_name):
    """Produce v12 (transactions version 2) adds the partition to the producer's transaction;
    v11 and v10 refuse a partition not added (TRANSACTION_ABORTABLE / INVALID_TXN_STATE); after
    EndTxn v5 only the bumped epoch, from sequence 0, may write."""
    create_topic(broker.bootstrap, topic_name, partitions=2)
    t = Txn(broker.port)
    e = t.epoch0
    sequences: dict[tuple[int, int], int] = {}

    def produce(partition: int, epoch: int, version: int, seq: int | None = None) -> int:
        s = sequences.get((partition, epoch), 0) if seq is None else seq
        data = build_batch([(None, b"x", None)], producer_id=t.pid, producer_epoch=epoch, base_sequence=s,
                           is_transactional=True)

        def call():
            r = raw_call(broker.port, ApiKey.PRODUCE, version, {
                "transactional_id": t.id, "acks": -1, "timeout_ms": 10000,
                "topic_data": [{"name": topic_name, "partition_data": [{"index": partition, "records": data}]}]})
            code = r["responses"][0]["partition_responses"][0]["error_code"]
            return None if code == errors.E_NOT_ENOUGH_REPLICAS else (code,)  # retriable: the coordinator is busy
        code = wait_until(call, "Produce", WAIT)[0]
        if code == NONE:
            sequences[(partition, epoch)] = s + 1
        return code

    def describe() -> tuple:
        d = raw_call(broker.port, ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [t.id]})[
            "transaction_states"][0]
        return d["transaction_state"], d["producer_epoch"] - e, sorted(p for x in d["topics"] for p in x["partitions"])
    steps = [
        ("v10, not added", produce(1, e, 10), INVALID),
        ("v11, not added", produce(1, e, 11), errors.E_TRANSACTION_ABORTABLE),
        ("v12 adds", produce(0, e, 12), NONE),
        ("in the transaction", describe(), ("Ongoing", 0, [0])),
        ("v11, not added, a transaction open", produce(1, e, 11), errors.E_TRANSACTION_ABORTABLE),
        ("v12 again", produce(0, e, 12), NONE),
        ("commit", t.end(e, True), (NONE, 0, 1)),
        ("v12, the epoch before", produce(0, e, 12), errors.E_INVALID_PRODUCER_EPOCH),
        ("v12, the new epoch", produce(0, e + 1, 12), NONE),
        ("v12, the new epoch, another partition", produce(1, e + 1, 12), NONE),
        ("both in the transaction", describe(), ("Ongoing", 1, [0, 1])),
        ("abort", t.end(e + 1, False), (NONE, 0, 2)),
        ("v12, a sequence out of order", produce(0, e + 2, 12, seq=5), errors.E_OUT_OF_ORDER_SEQUENCE_NUMBER),
        ("added all the same", describe(), ("Ongoing", 2, [0])),
    ]
    assert [(name, got) for name, got, _ in steps] == [(name, want) for name, _, want in steps]
