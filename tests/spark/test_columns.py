"""The connector's columnar decoder gives exactly the rows the consumer's record decoder gives."""

from __future__ import annotations

import random

import pytest

from samsa.client.consumer_internals.records import CompletedFetch
from samsa.client.types import TopicPartition
from samsa.protocol.errors import CorruptRecordError
from samsa.protocol.records import build_batch
from samsa.spark.columns import batches_to_arrow
from samsa.spark.schema import arrow_schema, to_arrow

TP = TopicPartition("t", 3)
T0 = 1_767_225_600_000


def fetched(*batches: bytes) -> CompletedFetch:
    return CompletedFetch(TP, b"".join(batches), 0, 10**9, 0)


def both(data: bytes, start: int = 0, end: int = 10**9, headers: bool = False) -> tuple[list, list]:
    schema = arrow_schema(headers)
    expected = [r for r in fetched(data).take(0, 10**9) if start <= r.offset < end]
    want = to_arrow(expected, schema).to_pylist() if expected else []
    got = batches_to_arrow(fetched(data).take_batches(start), TP.topic, TP.partition, start, end, schema)
    return got.to_pylist(), want


def mixed_batches() -> bytes:
    rng = random.Random(7)
    out = []
    offset = 0
    for i, codec in enumerate(["none", "lz4", "gzip", "zstd", "snappy", "none"]):
        records = []
        for j in range(rng.randint(1, 300)):
            size = rng.choice([0, 1, 63, 64, 100, 8191, 8192, 20_000])
            key = None if j % 3 == 0 else rng.randbytes(rng.randint(0, 70))
            value = None if j % 17 == 5 else rng.randbytes(size)
            records.append((key, value, T0 + rng.randint(0, 10**7) * (i + 1)))
        out.append(build_batch(records, base_offset=offset, compression=codec,
                               timestamp_type_log_append=(i == 4)))
        offset += len(records) + rng.randint(0, 5)  # gaps, as compaction leaves them
    return b"".join(out)


@pytest.mark.parametrize("headers", [False, True])
def test_same_rows_as_the_record_decoder(headers):
    got, want = both(mixed_batches(), headers=headers)
    assert len(got) > 300 and got == want


def test_only_the_range_asked_for():
    data = mixed_batches()
    got, want = both(data, start=57, end=400)
    assert got == want and got[0]["offset"] == 57 and got[-1]["offset"] == 399


def test_records_with_headers_go_through_the_record_decoder():
    data = build_batch([(b"k", b"v", T0, [("h", b"1"), ("n", None)]), (None, b"w", T0 + 1)], base_offset=5)
    got, want = both(data, headers=True)
    assert got == want and got[0]["headers"] == [{"key": "h", "value": b"1"}, {"key": "n", "value": None}]


def test_a_corrupt_record_is_an_error_not_wrong_rows():
    data = bytearray(build_batch([(None, b"x" * 10, T0)] * 5))
    fetch = CompletedFetch(TP, bytes(data), 0, 10**9, 0, check_crcs=False)
    batches = fetch.take_batches(0)
    b = batches[0]
    broken = bytearray(b.data)
    broken[b.start + 5] ^= 0x10  # the first value's length: 10 becomes 2, short of the record's end
    with pytest.raises(CorruptRecordError):
        batches_to_arrow([b._replace(data=bytes(broken))], "t", 3, 0, 10, arrow_schema(False))
