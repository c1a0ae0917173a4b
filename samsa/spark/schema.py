"""The columns of Spark's Kafka source, as a Spark schema and as the Arrow schema that read() yields.

Spark checks every Arrow batch a Python source returns against the declared schema, type
for type: timestamps must be ``timestamp[us, tz=UTC]``, ints ``int32``.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Sequence

import numpy as np
import pyarrow as pa
from pyspark.sql.types import (ArrayType, BinaryType, IntegerType, LongType, StringType, StructField, StructType,
                               TimestampType)

from samsa.client.consumer_internals.records import ConsumerRecord

HEADER = StructType([StructField("key", StringType()), StructField("value", BinaryType())])


def kafka_schema(include_headers: bool) -> StructType:
    fields = [StructField("key", BinaryType()), StructField("value", BinaryType()),
              StructField("topic", StringType()), StructField("partition", IntegerType()),
              StructField("offset", LongType()), StructField("timestamp", TimestampType()),
              StructField("timestampType", IntegerType())]
    if include_headers:
        fields.append(StructField("headers", ArrayType(HEADER)))
    return StructType(fields)


ARROW_HEADER = pa.struct([("key", pa.string()), ("value", pa.binary())])


def arrow_schema(include_headers: bool) -> pa.Schema:
    fields = [("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
              ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32())]
    if include_headers:
        fields.append(("headers", pa.list_(ARROW_HEADER)))
    return pa.schema(fields)


TS_MICROS = pa.timestamp("us", tz="UTC")
_key, _value, _offset, _timestamp, _ts_type, _headers = (itemgetter(i) for i in (5, 6, 2, 3, 4, 7))


def constant_string(text: str, n: int) -> pa.Array:
    """``n`` times the same string, built from two buffers rather than n Python objects."""
    data = text.encode()
    offsets = np.arange(0, (n + 1) * len(data), len(data), dtype=np.int32) if data else np.zeros(n + 1, np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data * n))


def to_arrow(records: Sequence[ConsumerRecord], schema: pa.Schema) -> pa.RecordBatch:
    """One Arrow batch of records of one partition: each column taken out in C (map/itemgetter,
    numpy), not record by record in Python."""
    n = len(records)
    first = records[0]
    ts_ms = np.fromiter(map(_timestamp, records), np.int64, n)
    columns = [pa.array(list(map(_key, records)), pa.binary()), pa.array(list(map(_value, records)), pa.binary()),
               constant_string(first.topic, n), pa.array(np.full(n, first.partition, np.int32)),
               pa.array(np.fromiter(map(_offset, records), np.int64, n)), pa.array(ts_ms * 1000).cast(TS_MICROS),
               pa.array(np.fromiter(map(_ts_type, records), np.int32, n))]
    if len(schema) > 7:
        columns.append(pa.array([[{"key": k, "value": v} for k, v in h] for h in map(_headers, records)],
                                pa.list_(ARROW_HEADER)))
    return pa.RecordBatch.from_arrays(columns, schema=schema)
