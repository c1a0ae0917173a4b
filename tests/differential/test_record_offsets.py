"""Produce, Fetch, ListOffsets and DeleteRecords: offsets, timestamps and errors as Kafka gives them."""

from __future__ import annotations

import struct

import pytest

from harness import create_topic
from samsa.protocol.batch import iter_headers
from samsa.protocol.records import build_batch, decode_batch

T0 = 1_700_000_000_000  # record timestamps the scenarios pick (not the broker)


def _produce(s, topic, records, partition=0, acks=-1, **kw) -> list:
    r = s.produce(topic, records, partition, acks, **kw)
    return [(p["index"], p["error_code"], p["base_offset"], p["log_start_offset"], p["error_message"],
             [(e["batch_index"], e["batch_index_error_message"]) for e in p["record_errors"]])
            for t in r["responses"] for p in t["partition_responses"]]


def _list_offsets(s, topic, timestamp, partition=0, version=8, isolation=0) -> list:
    from waiting import wait_until
    # NOT_LEADER_OR_FOLLOWER while Kafka's new partition finds its leader: retried, as clients do
    return wait_until(lambda: (lambda r: r if all(p[1] != 6 for p in r) else None)(
        _list_offsets_once(s, topic, timestamp, partition, version, isolation)), f"ListOffsets on {s.name}", 30)


def _list_offsets_once(s, topic, timestamp, partition, version, isolation) -> list:
    r = s.call(2, {"replica_id": -1, "isolation_level": isolation,
                   "topics": [{"name": topic, "partitions": [{"partition_index": partition, "current_leader_epoch": -1,
                                                              "timestamp": timestamp}]}]}, version)
    return [(p["partition_index"], p["error_code"], p["timestamp"], p["offset"])
            for t in r["topics"] for p in t["partitions"]]


def _fetch(s, topic, offset, partition=0, max_bytes=1 << 20, partition_max=1 << 20, isolation=0) -> list:
    r = s.call(1, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": max_bytes,
                   "isolation_level": isolation, "session_id": 0, "session_epoch": -1,
                   "topics": [{"topic": topic, "partitions": [{"partition": partition, "current_leader_epoch": -1,
                                                               "fetch_offset": offset, "last_fetched_epoch": -1,
                                                               "log_start_offset": -1,
                                                               "partition_max_bytes": partition_max}]}],
                   "forgotten_topics_data": [], "rack_id": ""}, 12)
    out = []
    for t in r["responses"]:
        for p in t["partitions"]:
            data = bytes(p["records"] or b"")
            batches = []
            pos = 0
            while pos + 61 <= len(data):
                (length,) = struct.unpack_from(">i", data, pos + 8)
                if pos + 12 + length > len(data):
                    break  # a partial batch at the end, as Kafka may send
                h, recs = decode_batch(data[pos:pos + 12 + length])
                batches.append((h.base_offset, h.last_offset, h.is_control, h.is_transactional,
                                [(r.offset, r.key, r.value) for r in recs] if not h.is_control else []))
                pos += 12 + length
            out.append({"error": p["error_code"], "hw": p["high_watermark"], "lso": p["last_stable_offset"],
                        "log_start": p["log_start_offset"],
                        "aborted": [(a["first_offset"]) for a in (p["aborted_transactions"] or [])],
                        "batches": batches})
    return out


def _fetch_all(s, topic, isolation=0) -> dict:
    """Fetches from offset 0 to the end (as a consumer does): how many batches one response carries
    is the broker's choice (Kafka returns one batch here, Samsa all), so the union is compared."""
    offset, batches, aborted, last = 0, [], [], None
    for _ in range(20):
        last = _fetch(s, topic, offset, isolation=isolation)[0]
        aborted += [a for a in last["aborted"] if a not in aborted]
        if not last["batches"]:
            break
        batches += last["batches"]
        offset = last["batches"][-1][1] + 1
    return {**last, "batches": batches, "aborted": aborted}


def _recs(n, start=0, size=10):
    return [(f"k{i}".encode(), f"v{i}".encode().ljust(size, b"."), T0 + i * 1000) for i in range(start, start + n)]


@pytest.fixture(scope="module")
def filled(sides):
    """A topic with three batches: offsets 0-2 (ts T0..), 3-5, 6-8; timestamps rising by 1 s.
    No retention: T0 is years old, and Kafka's first retention check (30 s after its start)
    would otherwise delete the batches under the scenarios that read them."""
    for s in sides:
        create_topic(s, "diff-filled", configs={"retention.ms": "-1"})
        for b in range(3):
            assert _produce(s, "diff-filled", _recs(3, 3 * b))[0][1] == 0
    return "diff-filled"


def test_produce_offsets(diff):
    def run(s):
        create_topic(s, "diff-produce")
        return [_produce(s, "diff-produce", _recs(2)), _produce(s, "diff-produce", _recs(3, 2), acks=1)]
    diff(run)


def test_produce_unknown_partition(diff, filled):
    diff(lambda s: _produce(s, filled, _recs(1), partition=5))


def test_produce_invalid_acks(diff, filled):
    diff(lambda s: _produce(s, filled, _recs(1), acks=3))


def test_produce_too_large(diff):
    def run(s):
        create_topic(s, "diff-large", configs={"max.message.bytes": "1000"})
        return _produce(s, "diff-large", [(b"k", b"x" * 2000, T0)])
    diff(run)


def test_produce_bad_crc(diff, filled):
    def run(s):
        batch = bytearray(build_batch(_recs(1)))
        batch[-1] ^= 0xFF
        r = s.call(0, {"transactional_id": None, "acks": -1, "timeout_ms": 5000,
                       "topic_data": [{"name": filled, "partition_data": [{"index": 0, "records": bytes(batch)}]}]}, 9)
        return [(p["error_code"], p["error_message"]) for t in r["responses"] for p in t["partition_responses"]]
    diff(run)


def test_produce_timestamp_too_old(diff):
    def run(s):
        create_topic(s, "diff-old-ts", configs={"message.timestamp.before.max.ms": "3600000"})
        return _produce(s, "diff-old-ts", [(b"k", b"v", 1000)])
    diff(run)


def test_produce_idempotent_out_of_order(diff):
    def run(s):
        create_topic(s, "diff-idem")
        from waiting import wait_until
        pid = wait_until(lambda: (lambda r: r if r["error_code"] == 0 else None)(s.call(
            22, {"transactional_id": None, "transaction_timeout_ms": 60000, "producer_id": -1, "producer_epoch": -1},
            4)), f"a producer id from {s.name}", 60)
        first = _produce(s, "diff-idem", _recs(1), producer_id=pid["producer_id"], producer_epoch=0, base_sequence=0)
        gap = _produce(s, "diff-idem", _recs(1), producer_id=pid["producer_id"], producer_epoch=0, base_sequence=5)
        dup = _produce(s, "diff-idem", _recs(1), producer_id=pid["producer_id"], producer_epoch=0, base_sequence=0)
        return pid["error_code"], first, gap, dup
    diff(run)


def test_produce_unknown_producer_epoch(diff):
    def run(s):
        create_topic(s, "diff-idem2")
        return _produce(s, "diff-idem2", _recs(1), producer_id=999999, producer_epoch=3, base_sequence=0)
    diff(run)


@pytest.mark.parametrize("ts", [-1, -2, -3, -4, T0 - 1, T0, T0 + 500, T0 + 3000, T0 + 8000, T0 + 9000],
                         ids=["latest", "earliest", "max-timestamp", "earliest-local", "before-all", "first",
                              "between-records", "second-batch", "last", "after-all"])
def test_list_offsets(diff, filled, ts):
    diff(lambda s: _list_offsets(s, filled, ts))


def test_list_offsets_unknown_partition(diff, filled):
    diff(lambda s: _list_offsets(s, filled, -1, partition=3))


def test_list_offsets_unknown_topic(diff):
    diff(lambda s: _list_offsets(s, "diff-lo-none", -1))


def test_list_offsets_v0(diff, filled):
    """The lowest version both speak: ListOffsets v1."""
    diff(lambda s: _list_offsets(s, filled, -1, version=1))


def test_list_offsets_empty_topic(diff):
    def run(s):
        create_topic(s, "diff-lo-empty")
        return [_list_offsets(s, "diff-lo-empty", t) for t in (-1, -2, -3, T0)]
    diff(run)


@pytest.mark.parametrize("offset", [0, 4, 9, 10, -1, 100])
def test_fetch_offset(diff, filled, offset):
    diff(lambda s: _fetch(s, filled, offset))


@pytest.mark.parametrize("max_bytes", [1, 80, 200])
def test_fetch_small_max_bytes(diff, filled, max_bytes):
    diff(lambda s: _fetch(s, filled, 0, max_bytes=max_bytes, partition_max=max_bytes))


def test_fetch_unknown_partition(diff, filled):
    diff(lambda s: _fetch(s, filled, 0, partition=7))


def test_fetch_unknown_topic(diff):
    diff(lambda s: _fetch(s, "diff-fetch-none", 0))


def _delete_records(s, topic, offset, partition=0) -> list:
    r = s.call(21, {"topics": [{"name": topic, "partitions": [{"partition_index": partition, "offset": offset}]}],
                    "timeout_ms": 10000}, 2)
    return [(p["partition_index"], p["low_watermark"], p["error_code"]) for t in r["topics"] for p in t["partitions"]]


def test_delete_records_then_offsets(diff):
    def run(s):
        create_topic(s, "diff-dr")
        for b in range(3):
            _produce(s, "diff-dr", _recs(3, 3 * b))
        return (_delete_records(s, "diff-dr", 4), _list_offsets(s, "diff-dr", -2), _list_offsets(s, "diff-dr", -4),
                _list_offsets(s, "diff-dr", T0), _fetch(s, "diff-dr", 0)[0]["error"], _fetch(s, "diff-dr", 4))
    diff(run)


@pytest.mark.parametrize("offset", [-1, 100, 0])
def test_delete_records_offsets(diff, filled, offset):
    diff(lambda s: _delete_records(s, filled, offset))


def test_delete_records_unknown_partition(diff, filled):
    diff(lambda s: _delete_records(s, filled, 1, partition=4))


def _txn_setup(s, topic, tid):
    create_topic(s, topic)
    _list_offsets(s, topic, -1)  # until the new partition's leader serves (Kafka: NOT_LEADER_OR_FOLLOWER)
    s.call(10, {"key": tid, "key_type": 1}, 2)
    from waiting import wait_until
    pid = wait_until(lambda: (lambda r: r if r["error_code"] == 0 else None)(
        s.call(22, {"transactional_id": tid, "transaction_timeout_ms": 60000, "producer_id": -1,
                    "producer_epoch": -1}, 4)), f"InitProducerId on {s.name}", 60)
    return pid["producer_id"], pid["producer_epoch"]


def _txn_round(s, topic, tid, pid, epoch, seq, commit: bool) -> list:
    from waiting import wait_until

    def add():  # CONCURRENT_TRANSACTIONS while the previous transaction's markers are written: retry
        r = s.call(24, {"v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
                        "v3_and_below_producer_epoch": epoch,
                        "v3_and_below_topics": [{"name": topic, "partitions": [0]}]}, 3)
        return None if r["results_by_topic_v3_and_below"][0]["results_by_partition"][0][
            "partition_error_code"] == 51 else r
    a = wait_until(add, f"AddPartitionsToTxn on {s.name}", 30)
    p = s.produce(topic, _recs(2, seq), 0, -1, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                  is_transactional=True, transactional_id=tid)
    e = s.call(26, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch, "committed": commit}, 3)
    return [a["results_by_topic_v3_and_below"][0]["results_by_partition"][0]["partition_error_code"],
            p["responses"][0]["partition_responses"][0]["error_code"], e["error_code"]]


def test_transaction_markers_offsets_and_isolation(diff):
    def run(s):
        from waiting import wait_until
        pid, epoch = _txn_setup(s, "diff-txn", "diff-txn-id")
        steps = [_txn_round(s, "diff-txn", "diff-txn-id", pid, epoch, 0, commit=False),
                 _txn_round(s, "diff-txn", "diff-txn-id", pid, epoch, 2, commit=True)]
        wait_until(lambda: _list_offsets(s, "diff-txn", -1, isolation=1)[0][3] == 6, "markers written", 30)
        return (steps, [_list_offsets(s, "diff-txn", -1, isolation=i) for i in (0, 1)],
                _fetch_all(s, "diff-txn", isolation=0), _fetch_all(s, "diff-txn", isolation=1))
    diff(run)


def test_open_transaction_lso(diff):
    def run(s):
        pid, epoch = _txn_setup(s, "diff-txn-open", "diff-txn-open-id")
        a = s.call(24, {"v3_and_below_transactional_id": "diff-txn-open-id", "v3_and_below_producer_id": pid,
                        "v3_and_below_producer_epoch": epoch,
                        "v3_and_below_topics": [{"name": "diff-txn-open", "partitions": [0]}]}, 3)
        p = _produce(s, "diff-txn-open", _recs(2), 0, producer_id=pid, producer_epoch=epoch, base_sequence=0,
                     is_transactional=True, transactional_id="diff-txn-open-id")
        out = (a["results_by_topic_v3_and_below"], p,
               [_list_offsets(s, "diff-txn-open", -1, isolation=i) for i in (0, 1)],
               _fetch_all(s, "diff-txn-open", isolation=1))
        s.call(26, {"transactional_id": "diff-txn-open-id", "producer_id": pid, "producer_epoch": epoch,
                    "committed": False}, 3)
        return out
    diff(run)


def test_fenced_producer_epoch(diff):
    def run(s):
        pid, epoch = _txn_setup(s, "diff-fence", "diff-fence-id")
        again = s.call(22, {"transactional_id": "diff-fence-id", "transaction_timeout_ms": 60000, "producer_id": -1,
                            "producer_epoch": -1}, 4)
        old = s.call(24, {"v3_and_below_transactional_id": "diff-fence-id", "v3_and_below_producer_id": pid,
                          "v3_and_below_producer_epoch": epoch,
                          "v3_and_below_topics": [{"name": "diff-fence", "partitions": [0]}]}, 3)
        return (again["producer_epoch"] - epoch,
                old["results_by_topic_v3_and_below"][0]["results_by_partition"][0]["partition_error_code"])
    diff(run)


def test_end_txn_without_transaction(diff):
    def run(s):
        pid, epoch = _txn_setup(s, "diff-endtxn", "diff-endtxn-id")
        return s.call(26, {"transactional_id": "diff-endtxn-id", "producer_id": pid, "producer_epoch": epoch,
                           "committed": True}, 3)["error_code"]
    diff(run)


def test_add_partitions_unknown_producer(diff):
    def run(s):
        s.call(10, {"key": "diff-unknown-tid", "key_type": 1}, 2)
        r = s.call(24, {"v3_and_below_transactional_id": "diff-unknown-tid", "v3_and_below_producer_id": 424242,
                        "v3_and_below_producer_epoch": 0,
                        "v3_and_below_topics": [{"name": "diff-filled", "partitions": [0]}]}, 3)
        return r["results_by_topic_v3_and_below"][0]["results_by_partition"][0]["partition_error_code"]
    diff(run)


def test_describe_producers(diff, filled):
    def run(s):
        create_topic(s, "diff-dp")
        from waiting import wait_until
        pid = wait_until(lambda: (lambda r: r if r["error_code"] == 0 else None)(s.call(
            22, {"transactional_id": None, "transaction_timeout_ms": 60000, "producer_id": -1, "producer_epoch": -1},
            4)), f"a producer id from {s.name}", 60)["producer_id"]
        _produce(s, "diff-dp", _recs(3), producer_id=pid, producer_epoch=0, base_sequence=0)
        r = s.call(61, {"topics": [{"name": "diff-dp", "partition_indexes": [0, 3]}]}, 0)
        return [(p["partition_index"], p["error_code"], [(x["producer_epoch"], x["last_sequence"],
                                                          x["current_txn_start_offset"]) for x in p["active_producers"]])
                for t in r["topics"] for p in t["partitions"]]
    diff(run)


def test_describe_producers_unknown_topic(diff):
    diff(lambda s: [(p["partition_index"], p["error_code"]) for t in s.call(
        61, {"topics": [{"name": "diff-dp-none", "partition_indexes": [0]}]}, 0)["topics"] for p in t["partitions"]])


def test_transactional_produce_without_transactional_id(diff):
    """A transactional batch in a Produce request that names no transactional id."""
    def run(s):
        pid, epoch = _txn_setup(s, "diff-txn-noid", "diff-txn-noid-id")
        return _produce(s, "diff-txn-noid", _recs(1), producer_id=pid, producer_epoch=epoch, base_sequence=0,
                        is_transactional=True)
    diff(run)


def test_end_txn_v5_epoch_bumps(diff):
    """Transactions version 2: EndTxn v5 bumps the epoch at every end and answers the new one; a
    retry carries the epoch before the bump; EndTxn v4 on the same id does not bump. Producer ids and
    epochs are compared relative to InitProducerId's."""
    from waiting import wait_until

    def run(s):
        pid, e = _txn_setup(s, "diff-tv2", "diff-tv2-id")

        def end(epoch, commit, version=5):
            def call():
                r = s.call(26, {"transactional_id": "diff-tv2-id", "producer_id": pid, "producer_epoch": epoch,
                                "committed": commit}, version)
                return None if r["error_code"] == 51 else r  # CONCURRENT_TRANSACTIONS: markers still going
            r = wait_until(call, f"EndTxn on {s.name}", 30)
            p, ep = r.get("producer_id", -1), r.get("producer_epoch", -1)
            return r["error_code"], p - pid if p >= 0 else -1, ep - e if ep >= 0 else -1

        def add(epoch):
            def call():
                r = s.call(24, {"v3_and_below_transactional_id": "diff-tv2-id", "v3_and_below_producer_id": pid,
                                "v3_and_below_producer_epoch": epoch,
                                "v3_and_below_topics": [{"name": "diff-tv2", "partitions": [0]}]}, 3)
                code = r["results_by_topic_v3_and_below"][0]["results_by_partition"][0]["partition_error_code"]
                return None if code == 51 else (code,)
            return wait_until(call, f"AddPartitionsToTxn on {s.name}", 30)[0]
        return [end(e, True), end(e, False), end(e, False), end(e, True), end(e + 1, True), add(e), add(e + 1),
                end(e, True), end(e + 1, True), end(e + 1, True), end(e + 1, False), end(e + 2, True),
                end(e + 3, True), end(e + 2, True, 4), end(e + 2, False), add(e + 3), end(e + 3, False, 4),
                end(e + 2, False), end(e + 3, False)]
    diff(run)
