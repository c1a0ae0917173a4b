"""Decoding fetched record batches into ConsumerRecords, without a broker."""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c

from samsa.client.consumer_internals.records import (CREATE_TIME, LOG_APPEND_TIME, CompletedFetch, ConsumerRecord,
                                                     RecordDeserializationError)
from samsa.client.types import TopicPartition
from samsa.protocol.errors import CorruptRecordError
from samsa.protocol.records import build_batch
from samsa.protocol.varint import encode_varint
from samsa.serialization import IntegerDeserializer, StringDeserializer

TP = TopicPartition("t", 3)


def chunk(data: bytes, offset: int = 0, **kw) -> CompletedFetch:
    return CompletedFetch(TP, data, offset, -1, 0, **kw)


def take_all(c: CompletedFetch, position: int = 0, n: int = 7) -> list[ConsumerRecord]:
    out = []
    while True:
        got = c.take(position, n)
        if not got:
            return out
        out += got
        position = got[-1].offset + 1


def test_every_field_and_small_takes():
    records = [(b"k%d" % i if i % 3 else None, b"v" * i if i % 5 else None, 1_700_000_000_000 + i * 1000,
                [("h", b"%d" % i), ("n", None)] if i % 2 else None) for i in range(300)]
    data = build_batch(records, base_offset=40, partition_leader_epoch=7)
    got = take_all(chunk(data, 40))
    assert [r.offset for r in got] == list(range(40, 340))
    for r, (k, v, ts, h) in zip(got, records):
        assert (r.topic, r.partition, r.key, r.value, r.timestamp, r.timestamp_type, r.leader_epoch) == \
            ("t", 3, k, v, ts, CREATE_TIME, 7)
        assert r.headers == tuple(h or ())


def test_long_varints_keys_values_and_many_records():
    big = bytes(range(256)) * 100  # 25,600 bytes: three-byte lengths
    records = [(big[:i * 7], big[: (i * 131) % 20000], 1_700_000_000_000 - i * 999_999, None) for i in range(9000)]
    got = take_all(chunk(build_batch(records)), n=500)
    assert len(got) == 9000
    assert all((r.key, r.value, r.timestamp) == rec[:3] for r, rec in zip(got, records))


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches(codec):
    data = build_batch([(None, b"x%d" % i) for i in range(100)], compression=codec, base_offset=5)
    got = take_all(chunk(data, 5))
    assert [(r.offset, r.value) for r in got] == [(5 + i, b"x%d" % i) for i in range(100)]


def test_position_inside_a_batch_and_partial_trailing_batch():
    a = build_batch([(None, b"a%d" % i) for i in range(10)], base_offset=0)
    b = build_batch([(None, b"b%d" % i) for i in range(10)], base_offset=10)
    c = chunk(a + b[:-5], 4)  # the fetch was cut inside the second batch
    assert c.next_offset == 10
    assert [r.offset for r in take_all(c, 4)] == list(range(4, 10))
    assert c.exhausted


def test_log_append_time_and_sparse_offsets():
    data = bytearray(build_batch([(None, b"v%d" % i, 1000 + i) for i in range(3)], timestamp_type_log_append=True))
    struct.pack_into(">q", data, 35, 99_999)  # max_timestamp: the broker's append time
    struct.pack_into(">I", data, 17, crc32c(memoryview(data)[21:]))
    got = take_all(chunk(bytes(data)))
    assert [(r.timestamp, r.timestamp_type) for r in got] == [(99_999, LOG_APPEND_TIME)] * 3
    # a compacted batch: offset deltas 0, 4, 9, last_offset_delta 9
    sparse = _batch_with_deltas([0, 4, 9], base_offset=100)
    c = chunk(sparse, 100)
    assert [r.offset for r in take_all(c, 100)] == [100, 104, 109] and c.next_offset == 110


def _batch_with_deltas(deltas: list[int], base_offset: int) -> bytes:
    body = bytearray()
    for d in deltas:
        rec = b"\x00" + encode_varint(0) + encode_varint(d) + b"\x01" + encode_varint(1) + b"x" + b"\x00"
        body += encode_varint(len(rec)) + rec
    header = struct.pack(">qiibIhiqqqhii", base_offset, 49 + len(body), -1, 2, 0, 0, deltas[-1], 5, 5, -1, -1, -1,
                         len(deltas))
    data = bytearray(header + body)
    struct.pack_into(">I", data, 17, crc32c(memoryview(data)[21:]))
    return bytes(data)


def test_control_batches_are_skipped_and_the_position_moves_past_them():
    control = build_batch([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")], base_offset=3, is_control=True,
                          is_transactional=True, producer_id=9)
    data = build_batch([(None, b"x")] * 3, base_offset=0, producer_id=9, is_transactional=True) + control
    c = chunk(data)
    assert [r.offset for r in take_all(c)] == [0, 1, 2]
    assert c.next_offset == 4 and c.exhausted


def test_read_committed_drops_aborted_transactions():
    aborted = build_batch([(None, b"no")] * 2, base_offset=0, producer_id=7, is_transactional=True)
    abort_marker = build_batch([(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")], base_offset=2,
                               producer_id=7, is_transactional=True, is_control=True)
    kept = build_batch([(None, b"yes")], base_offset=3, producer_id=7, is_transactional=True)
    c = chunk(aborted + abort_marker + kept, aborted=[(7, 0)])
    assert [r.value for r in take_all(c)] == [b"yes"]
    assert [r.value for r in take_all(chunk(aborted + abort_marker + kept))] == [b"no", b"no", b"yes"]


def test_corrupt_batches_raise():
    data = bytearray(build_batch([(None, b"x")] * 3))
    data[-2] ^= 0xFF  # the last value's byte
    with pytest.raises(CorruptRecordError, match="CRC"):
        take_all(chunk(bytes(data)))
    assert [r.value for r in take_all(chunk(bytes(data), check_crcs=False))] == [b"x", b"x", bytes([ord("x") ^ 0xFF])]
    bad = bytearray(build_batch([(None, b"x")] * 3))
    bad[61 + 5] = 0x7E  # first record's value length (a valid CRC over garbage, as a buggy producer makes)
    struct.pack_into(">I", bad, 17, crc32c(memoryview(bad)[21:]))
    with pytest.raises(CorruptRecordError, match="Malformed"):
        take_all(chunk(bytes(bad)))


def test_deserializers_and_a_failing_one():
    data = build_batch([(b"k%d" % i, struct.pack(">i", i)) for i in range(5)])
    c = chunk(data, key_deserializer=StringDeserializer(), value_deserializer=IntegerDeserializer())
    assert [(r.key, r.value) for r in take_all(c)] == [("k%d" % i, i) for i in range(5)]
    data = build_batch([(None, struct.pack(">i", 1)), (None, b"bad"), (None, struct.pack(">i", 3))])
    c = chunk(data, value_deserializer=IntegerDeserializer())
    assert [r.value for r in c.take(0, 10)] == [1]
    with pytest.raises(RecordDeserializationError) as e:
        c.take(1, 10)
    assert e.value.offset == 1 and e.value.partition == TP


def test_records_are_tuples_made_in_c():
    r = take_all(chunk(build_batch([(b"k", b"v", 5)])))[0]
    assert isinstance(r, tuple) and r._asdict()["value"] == b"v"
    assert r == ConsumerRecord("t", 3, 0, 5, CREATE_TIME, b"k", b"v", (), None)
