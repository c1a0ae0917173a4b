"""Record batch v2 encoding, with kafka-python as an independent oracle."""

from __future__ import annotations

import struct
import time
import types

import cramjam
import pytest
from crc32c import crc32c

from samsa.protocol import batch
from samsa.protocol import compression as comp
from samsa.protocol.errors import CorruptRecordError
from samsa.protocol.records import (BatchBuilder, Record, build_batch, decode_batch, estimate_record_size,
                                    iter_batches, iter_records)
from samsa.protocol.varint import decode_uvarint, decode_varint, encode_uvarint, encode_varint, varint_size

CODECS = [comp.NONE, comp.GZIP, comp.SNAPPY, comp.LZ4, comp.ZSTD]
INT32 = (-(1 << 31), (1 << 31) - 1)
INT64 = (-(1 << 63), (1 << 63) - 1)
EDGES = [0, 1, -1, 63, -64, 64, -65, 8191, -8192, 8192, -8193, 300, *INT32, *INT64]


@pytest.fixture
def kafka_snappy(monkeypatch):
    """kafka-python without python-snappy installed: give it raw snappy from cramjam.
    Its xerial framing and record code stay its own."""
    import kafka.codec

    shim = types.SimpleNamespace(
        compress=lambda b: bytes(cramjam.snappy.compress_raw(b)),
        decompress=lambda b: bytes(cramjam.snappy.decompress_raw(b)),
    )
    monkeypatch.setattr(kafka.codec, "snappy", shim)


def sample_records(n: int = 50):
    """Mixed records: null keys and values, empty ones, headers, out-of-order timestamps."""
    out = []
    for i in range(n):
        key = None if i % 7 == 3 else f"key-{i}".encode()
        value = None if i % 11 == 5 else (b"" if i % 13 == 4 else b"value-%d " % i * (i % 5 + 1))
        headers = [] if i % 3 else [("trace", b"t%d" % i), ("empty", b""), ("null", None), ("ünï", b"\xff")]
        out.append((key, value, 1_700_000_000_000 + i * 17 - (i % 4) * 5, headers))
    return out


def assert_same(records, expected, base_offset=0):
    assert len(records) == len(expected)
    for i, (r, (k, v, ts, h)) in enumerate(zip(records, expected)):
        assert r == Record(base_offset + i, ts, k, v, list(h))


# ---------------------------------------------------------------------------- varints


@pytest.mark.parametrize(
    "n, raw",
    [(0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (63, b"\x7e"), (-64, b"\x7f"), (64, b"\x80\x01"), (300, b"\xd8\x04")],
)
def test_varint_known_bytes(n, raw):
    assert encode_varint(n) == raw
    assert decode_varint(raw, 0) == (n, len(raw))


@pytest.mark.parametrize("n", EDGES)
def test_varint_round_trip(n):
    raw = encode_varint(n)
    assert decode_varint(b"\xaa" + raw + b"\xbb", 1) == (n, 1 + len(raw))
    assert varint_size(n) == len(raw)


def test_varint_sizes_at_type_limits():
    assert len(encode_varint(INT32[0])) == len(encode_varint(INT32[1])) == 5
    assert len(encode_varint(INT64[0])) == len(encode_varint(INT64[1])) == 10


def test_varint_matches_kafka_python():
    from kafka.record import util

    for n in EDGES + list(range(-20000, 20000, 37)):
        out = bytearray()
        util.encode_varint(n, out.append)
        assert encode_varint(n) == bytes(out)
        assert decode_varint(bytes(out), 0) == util.decode_varint(bytes(out), 0)


@pytest.mark.parametrize(
    "u, raw", [(0, b"\x00"), (127, b"\x7f"), (128, b"\x80\x01"), (16383, b"\xff\x7f"), (16384, b"\x80\x80\x01")]
)
def test_uvarint_known_bytes(u, raw):
    assert encode_uvarint(u) == raw
    assert decode_uvarint(raw, 0) == (u, len(raw))


@pytest.mark.parametrize("u", [0, 1, 127, 128, 16383, 16384, (1 << 31) - 1, 1 << 32, (1 << 64) - 1])
def test_uvarint_round_trip(u):
    raw = encode_uvarint(u)
    assert decode_uvarint(raw, 0) == (u, len(raw))


def test_uvarint_rejects_negative():
    with pytest.raises(ValueError):
        encode_uvarint(-1)


def test_varint_truncated_and_overlong():
    with pytest.raises(IndexError):
        decode_uvarint(b"\x80\x80", 0)
    with pytest.raises(ValueError):
        decode_uvarint(b"\xff" * 11, 0)


# ---------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_every_codec(codec):
    recs = sample_records(300)
    raw = build_batch(recs, base_offset=1000, compression=codec)
    header, records = decode_batch(raw)
    assert header.magic == 2
    assert header.compression == codec
    assert header.base_offset == 1000
    assert header.record_count == 300
    assert header.last_offset_delta == 299
    assert header.base_timestamp == recs[0][2]
    assert header.max_timestamp == max(r[2] for r in recs)
    assert header.size == len(raw)
    assert not header.log_append_time and not header.is_control and not header.is_transactional
    assert_same(records, recs, base_offset=1000)
    assert batch.validate(raw) == [(0, header)]


def test_round_trip_xerial_snappy():
    recs = sample_records(2000)
    raw = build_batch(recs, compression="snappy", xerial_snappy=True)
    assert raw[batch.HEADER_SIZE:].startswith(b"\x82SNAPPY\x00")
    assert_same(decode_batch(raw)[1], recs)


@pytest.mark.parametrize("codec", CODECS)
def test_many_records_and_big_values(codec):
    recs = [(b"k%d" % i, bytes([i % 251]) * (i % 300), 1_000 + i * 100_000, []) for i in range(5000)]
    recs.append((b"big", b"\x01" * 100_000, 5, [("h" * 300, b"v" * 20_000)]))  # multi-byte varints
    raw = build_batch(recs, compression=codec)
    header, records = decode_batch(raw)
    assert header.max_timestamp == 1_000 + 4999 * 100_000
    assert_same(records, recs)


def test_producer_fields_and_flags():
    raw = build_batch(
        [(b"k", b"v", 10)],
        base_offset=7,
        producer_id=123456789012,
        producer_epoch=3,
        base_sequence=41,
        is_transactional=True,
        partition_leader_epoch=9,
    )
    header, records = decode_batch(raw)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (123456789012, 3, 41)
    assert header.is_transactional and header.partition_leader_epoch == 9
    assert records == [Record(7, 10, b"k", b"v", [])]


@pytest.mark.parametrize("codec", [comp.NONE, comp.ZSTD])
def test_log_append_time_uses_max_timestamp(codec):
    raw = build_batch([(b"a", b"1", 100), (b"b", b"2", 300), (b"c", b"3", 200)], compression=codec,
                      timestamp_type_log_append=True)
    header, records = decode_batch(raw)
    assert header.log_append_time
    assert [r.timestamp for r in records] == [300, 300, 300]
    # The broker's stamping path (batch.set_log_append_time) is honoured too.
    buf = bytearray(build_batch([(b"a", b"1", 100), (b"b", b"2", 300)], compression=codec))
    batch.set_log_append_time(buf, 0, batch.read_header(buf), 999)
    assert [r.timestamp for r in decode_batch(buf)[1]] == [999, 999]


def test_control_batch_decodes():
    key = struct.pack(">hh", 0, 1)  # version 0, COMMIT
    value = struct.pack(">hi", 0, 5)  # version 0, coordinator epoch
    raw = build_batch([(key, value, 50)], is_control=True, is_transactional=True, producer_id=1, producer_epoch=0)
    header, records = decode_batch(raw)
    assert header.is_control
    assert records == [Record(0, 50, key, value, [])]


def test_decode_inside_larger_buffers():
    a = build_batch([(b"a", b"1", 1)], base_offset=0)
    b = build_batch([(b"b", b"2", 2)], base_offset=1, compression="lz4")
    for buf in (a + b, bytearray(a + b), memoryview(a + b)):
        header, records = decode_batch(buf, len(a))
        assert header.base_offset == 1 and records == [Record(1, 2, b"b", b"2", [])]
        assert all(type(r.key) is bytes and type(r.value) is bytes for r in records)


def test_empty_batch_decodes():
    # Compaction can leave a batch with no records; it still has a header and CRC.
    buf = bytearray(batch.HEADER_SIZE)
    struct.pack_into(">qiibIhiqqqhii", buf, 0, 40, batch.HEADER_SIZE - 12, 0, 2, 0, 0, 4, 1, 2, 7, 0, 3, 0)
    struct.pack_into(">I", buf, 17, crc32c(bytes(buf[21:])))
    header, records = decode_batch(bytes(buf))
    assert records == [] and header.next_offset == 45


# ---------------------------------------------------------------------------- BatchBuilder


def test_builder_append_returns_size():
    b = BatchBuilder()
    assert b.size == batch.HEADER_SIZE and len(b) == 0
    s1 = b.append(b"key", b"x" * 100, 1)
    assert s1 == b.size > batch.HEADER_SIZE
    s2 = b.append(None, b"x" * 100, 2)
    assert s2 > s1
    assert len(b.build()) == s2 and len(b) == 2


def test_builder_estimate_is_upper_bound():
    b = BatchBuilder()
    for key, value, headers in [(None, None, None), (b"k", b"v" * 20000, [("é" * 10, b"x"), ("n", None)])]:
        before = b.size
        b.append(key, value, 1 << 40, headers)
        assert b.size - before <= estimate_record_size(key, value, headers)


def test_builder_reuse_after_reset():
    b = BatchBuilder("gzip", base_offset=5)
    b.append(b"a", b"1", 10)
    first = b.build()
    b.reset()
    assert len(b) == 0 and b.size == batch.HEADER_SIZE
    b.append(b"b", b"2", 20)
    header, records = decode_batch(b.build())
    assert records == [Record(5, 20, b"b", b"2", [])] and header.base_timestamp == 20
    assert decode_batch(first)[1] == [Record(5, 10, b"a", b"1", [])]


def test_builder_producer_state_set_late():
    b = BatchBuilder()
    b.append(b"a", b"1", 10)
    b.set_producer_state(77, 2, 1000, True)
    header = decode_batch(b.build())[0]
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (77, 2, 1000)
    assert header.is_transactional
    assert header.last_sequence == 1000


def test_builder_empty_build_rejected():
    with pytest.raises(ValueError):
        BatchBuilder().build()


def test_builder_bad_type_leaves_builder_intact():
    b = BatchBuilder()
    b.append(b"a", b"1", 10)
    size = b.size
    for bad in [("k", b"v"), (b"k", "v"), (b"k", 5)]:
        with pytest.raises(TypeError):
            b.append(*bad, 11)
    assert b.size == size and len(b) == 1
    assert decode_batch(b.build())[1] == [Record(0, 10, b"a", b"1", [])]


def test_builder_accepts_bytes_like_and_dict_headers():
    b = BatchBuilder()
    b.append(bytearray(b"k"), memoryview(b"v"), 1, {"h": b"x"})
    assert decode_batch(b.build())[1] == [Record(0, 1, b"k", b"v", [("h", b"x")])]


def test_builder_default_timestamp_is_now():
    before = int(time.time() * 1000)
    b = BatchBuilder()
    b.append(b"k", b"v")
    after = int(time.time() * 1000)
    assert before <= decode_batch(b.build())[1][0].timestamp <= after


def test_build_batch_accepts_records_and_short_tuples():
    raw = build_batch([Record(99, 5, b"a", None, [("h", None)]), (b"b", b"2"), (b"c", b"3", 7)])
    records = decode_batch(raw)[1]
    assert records[0] == Record(0, 5, b"a", None, [("h", None)])
    assert [r.offset for r in records] == [0, 1, 2] and records[2].timestamp == 7


# ---------------------------------------------------------------------------- record sets


def test_iter_records_across_batches_ignores_partial_tail():
    a = build_batch([(b"a", b"1", 1), (b"b", b"2", 2)], base_offset=0)
    b = build_batch([(b"c", b"3", 3)], base_offset=2, compression="zstd")
    c = build_batch([(b"d", b"4", 4)], base_offset=3)
    for cut in (1, 11, 20, batch.HEADER_SIZE, len(c) - 1):
        records = list(iter_records(a + b + c[:cut]))
        assert [r.offset for r in records] == [0, 1, 2]
    assert [r.offset for r in iter_records(a + b + c)] == [0, 1, 2, 3]
    assert list(iter_records(b"")) == []
    assert [h.base_offset for h, _ in iter_batches(memoryview(a + b + c))] == [0, 2, 3]


def test_iter_records_skip_control():
    data = build_batch([(b"a", b"1", 1)]) + build_batch([(b"\0\0\0\1", b"\0\0\0\0\0\0", 2)], base_offset=1,
                                                        is_control=True)
    assert [r.offset for r in iter_records(data)] == [0, 1]
    assert [r.offset for r in iter_records(data, skip_control=True)] == [0]


# ---------------------------------------------------------------------------- kafka-python oracle


def kafka_python_batch(recs, codec, **producer):
    from kafka.record import MemoryRecordsBuilder

    builder = MemoryRecordsBuilder(magic=2, compression_type=codec, batch_size=1 << 30, **producer)
    for key, value, ts, headers in recs:
        assert builder.append(ts, key, value, headers) is not None
    builder.close()
    return bytes(builder.buffer())


def kafka_python_read(raw):
    from kafka.record import MemoryRecords

    out = []
    for b in MemoryRecords(raw):
        assert b.validate_crc()
        out.append((b, [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in b]))
    return out


@pytest.mark.parametrize("codec", CODECS)
def test_decode_kafka_python_batches(codec, kafka_snappy):
    recs = sample_records(400)
    raw = kafka_python_batch(recs, codec, offset=0, transactional=True, producer_id=5, producer_epoch=1,
                             base_sequence=9)
    header, records = decode_batch(raw)
    assert header.compression == codec  # kafka-python sends uncompressed if it does not pay
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (5, 1, 9)
    assert header.is_transactional
    assert_same(records, recs)
    if codec == comp.SNAPPY:
        assert raw[batch.HEADER_SIZE:].startswith(b"\x82SNAPPY\x00")  # Java-style framing


@pytest.mark.parametrize("codec, xerial", [(codec, False) for codec in CODECS] + [(comp.SNAPPY, True)])
def test_kafka_python_decodes_ours(codec, xerial, kafka_snappy):
    recs = sample_records(400)
    raw = build_batch(recs, base_offset=100, compression=codec, xerial_snappy=xerial, producer_id=8,
                      producer_epoch=2, base_sequence=0) + build_batch(recs[:3], base_offset=400)
    (b1, r1), (b2, r2) = kafka_python_read(raw)
    assert b1.compression_type == codec and b1.base_offset == 100
    assert (b1.producer_id, b1.producer_epoch, b1.base_sequence) == (8, 2, 0)
    assert r1 == [(100 + i, ts, k, v, h) for i, (k, v, ts, h) in enumerate(recs)]
    assert [o for o, *_ in r2] == [400, 401, 402]


def test_kafka_python_reads_our_log_append_time_and_control():
    raw = build_batch([(b"a", b"1", 100), (b"b", b"2", 300)], timestamp_type_log_append=True)
    raw += build_batch([(struct.pack(">hh", 0, 0), struct.pack(">hi", 0, 3), 400)], base_offset=2,
                       is_control=True, is_transactional=True, producer_id=1, producer_epoch=0)
    (b1, r1), (b2, r2) = kafka_python_read(raw)
    assert b1.timestamp_type == 1 and [ts for _, ts, *_ in r1] == [300, 300]
    assert b2.is_control_batch
    assert next(iter(type(b2)(raw[len(raw) - b2.size_in_bytes:]))).abort


# ---------------------------------------------------------------------------- corruption


def test_legacy_message_format_rejected():
    # A magic-1 message: offset, size, crc, magic, attributes, timestamp, key, value.
    msg = struct.pack(">bbqii", 1, 0, 0, -1, 1) + b"v"
    legacy = struct.pack(">qiI", 0, len(msg) + 4, 0) + msg
    with pytest.raises(CorruptRecordError, match="v0/v1 not supported"):
        decode_batch(legacy)
    with pytest.raises(CorruptRecordError, match="v0/v1 not supported"):
        list(iter_records(build_batch([(b"a", b"1", 1)]) + legacy))


@pytest.mark.parametrize("codec", CODECS)
def test_flipped_byte_fails_crc(codec):
    raw = build_batch(sample_records(30), compression=codec)
    for pos in range(batch.CRC_START, len(raw), max(1, len(raw) // 40)):
        bad = bytearray(raw)
        bad[pos] ^= 0x01
        with pytest.raises(CorruptRecordError):
            decode_batch(bytes(bad))


def _rechecksum(buf: bytearray, length: int | None = None) -> bytes:
    """Fix the batch length and CRC so only the content is wrong."""
    if length is not None:
        del buf[length:]
        struct.pack_into(">i", buf, 8, length - 12)
    struct.pack_into(">I", buf, 17, crc32c(bytes(buf[21:])))
    return bytes(buf)


@pytest.mark.parametrize("codec", [comp.GZIP, comp.SNAPPY, comp.LZ4, comp.ZSTD])
def test_truncated_compressed_payload(codec):
    raw = build_batch(sample_records(200), compression=codec)
    for length in (batch.HEADER_SIZE + 10, (len(raw) + batch.HEADER_SIZE) // 2, len(raw) - 1):
        bad = _rechecksum(bytearray(raw), length)
        with pytest.raises(CorruptRecordError):
            decode_batch(bad)


@pytest.mark.parametrize("codec", CODECS)
def test_wrong_record_count_with_good_crc(codec):
    raw = build_batch(sample_records(20), compression=codec)
    for count in (19, 21, 1 << 30, -1):
        bad = bytearray(raw)
        struct.pack_into(">i", bad, 57, count)
        with pytest.raises(CorruptRecordError):
            decode_batch(_rechecksum(bad))


def _patched(raw: bytes, pos: int, data: bytes) -> bytearray:
    bad = bytearray(raw)
    bad[pos:pos + len(data)] = data
    return bad


def test_malformed_record_with_good_crc():
    raw = build_batch([(b"key", b"value", 1)])
    rec = batch.HEADER_SIZE  # record: length, attributes, ts delta, offset delta, key length, ...
    cases = [
        _patched(raw, rec, encode_varint(40)),  # record length too long
        _patched(raw, rec, encode_varint(5)),  # record length too short
        _patched(raw, rec + 4, encode_varint(30)),  # key length past the record
        _patched(raw, len(raw) - 1, encode_varint(-3)),  # negative header count
        _patched(raw, rec + 2, b"\xff\xff"),  # a varint running into the next fields
        bytearray(raw) + b"\x00",  # a byte after the last record
    ]
    for bad in cases:
        with pytest.raises(CorruptRecordError):
            decode_batch(_rechecksum(bad, len(bad)))


def test_truncated_batch():
    raw = build_batch([(b"key", b"value", 1)])
    for cut in (0, 10, 16, 30, batch.HEADER_SIZE, len(raw) - 1):
        with pytest.raises(CorruptRecordError):
            decode_batch(raw[:cut])


def test_bad_batch_length():
    bad = bytearray(build_batch([(b"key", b"value", 1)]))
    struct.pack_into(">i", bad, 8, 20)
    with pytest.raises(CorruptRecordError):
        decode_batch(bytes(bad))
    with pytest.raises(CorruptRecordError):
        list(iter_records(bytes(bad)))


def _framing_ok(data, count: int) -> bool:
    """The plain walk check_framing must agree with: length prefixes tiling the records exactly."""
    p, n, stop = batch.HEADER_SIZE, 0, len(data)
    try:
        while p < stop:
            length, p = decode_varint(data, p)
            if length <= 0:
                return False
            p += length
            n += 1
    except (IndexError, ValueError):
        return False
    return p == stop and n == count


def _sectioned(lengths: list[int]) -> bytearray:
    out = bytearray(batch.HEADER_SIZE)
    for i, n in enumerate(lengths):
        out += encode_varint(n) + bytes([i % 251]) * n
    return out


def test_check_framing_agrees_with_the_plain_walk_on_runs_and_damage():
    """check_framing checks runs of records of one length at once: on records of one length, of
    a few lengths in runs (offset deltas growing a byte), of lengths all different, whole and
    damaged (a prefix changed, a byte added or cut, the count wrong), its verdict is the walk's."""
    import random
    from samsa.protocol.records import check_framing
    rng = random.Random(33)
    shapes = [
        lambda: [100] * rng.randint(1, 3000),
        lambda: [rng.choice((60, 63, 64, 65, 8190, 8191))] * rng.randint(1, 200),
        lambda: [107] * rng.randint(1, 64) + [108] * rng.randint(1, 4000) + [109] * rng.randint(1, 50),
        lambda: [rng.randint(1, 300) for _ in range(rng.randint(1, 500))],
        lambda: [rng.choice((5, 5, 5, 70)) for _ in range(rng.randint(1, 800))],
        lambda: [9000] * rng.randint(1, 20) + [20000] * rng.randint(1, 5),
        # length prefixes alike in their first byte, not their second: 100 and 164 (0xc8 0x01, 0xc8 0x02)
        lambda: [100] * rng.randint(1, 40) + [164] * rng.randint(1, 40) + [100] * rng.randint(0, 40),
    ]
    checked = refused = 0
    for _ in range(400):
        lengths = rng.choice(shapes)()
        data = _sectioned(lengths)
        count = len(lengths)
        damage = rng.randrange(6)
        if damage == 1:  # one record's length prefix changed
            at = batch.HEADER_SIZE + sum(varint_size(n) + n for n in lengths[:rng.randrange(count)])
            data[at] = rng.randrange(256)
        elif damage == 2:
            data.insert(rng.randrange(batch.HEADER_SIZE, len(data) + 1), rng.randrange(256))
        elif damage == 3 and len(data) > batch.HEADER_SIZE:
            del data[rng.randrange(batch.HEADER_SIZE, len(data))]
        elif damage == 4:
            count += rng.choice((-1, 1))
        header = types.SimpleNamespace(batch_length=len(data) - batch.LOG_OVERHEAD, attributes=0, record_count=count)
        want = _framing_ok(bytes(data), count)
        # the batch inside a longer buffer, followed by more records like its last: nothing past its end is read
        longer = bytes(data) + (encode_varint(lengths[-1]) + bytes(lengths[-1])) * 3
        for buf in (bytes(data), memoryview(bytes(data)), memoryview(longer)):
            try:
                check_framing(buf, 0, header)
                got = True
            except CorruptRecordError:
                got = False
            assert got == want, (damage, lengths[:5], len(lengths))
        checked += 1
        refused += not want
    assert refused > 50 and checked - refused > 100  # both verdicts well exercised
